//! The connections of one store handle ([`super::Db`] and its clones): one
//! for SQLite (its writers take turns anyway), and up to
//! [`POSTGRES_CONNECTIONS`] for PostgreSQL, made as they are first needed,
//! so the runs a worker drives at once each write on a connection of their
//! own and commit in parallel. A lost PostgreSQL connection is made again by
//! the connection itself (`engine/postgres.rs`).

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::engine::{Conn, Engine, postgres::PgConn};

/// At most this many connections per PostgreSQL store handle (a `loopbox
/// worker`, a server, a command): enough for a worker's slots to write at
/// once on a 2-core machine, few enough that many workers stay well under
/// PostgreSQL's `max_connections` (100 by default).
pub const POSTGRES_CONNECTIONS: usize = 4;

pub(crate) struct Pool {
    slots: Vec<Mutex<Option<Conn>>>,
    /// Where more connections are made (none: SQLite, one connection).
    url: Option<String>,
    engine: Engine,
    /// How many slots, from the first, hold a connection.
    made: AtomicUsize,
    next: AtomicUsize,
}

/// A connection taken from the pool, given back when dropped.
pub(crate) struct Taken<'a>(MutexGuard<'a, Option<Conn>>);

impl Deref for Taken<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        // `Pool::take` hands out filled slots only.
        self.0
            .as_ref()
            .expect("a connection taken from the pool is there")
    }
}

impl Pool {
    /// A pool of `first` alone (SQLite, or a PostgreSQL store opened without its URL).
    pub(crate) fn single(first: Conn) -> Pool {
        Pool {
            engine: first.engine(),
            slots: vec![Mutex::new(Some(first))],
            url: None,
            made: AtomicUsize::new(1),
            next: AtomicUsize::new(0),
        }
    }

    /// A pool for the PostgreSQL store at `url`, its first connection `first`.
    pub(crate) fn postgres(first: Conn, url: &str) -> Pool {
        let mut slots = vec![Mutex::new(Some(first))];
        slots.extend((1..POSTGRES_CONNECTIONS).map(|_| Mutex::new(None)));
        Pool {
            engine: Engine::Postgres,
            slots,
            url: Some(url.to_string()),
            made: AtomicUsize::new(1),
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn engine(&self) -> Engine {
        self.engine
    }

    /// A connection nobody is using, made when every one made so far is
    /// busy and there is room for another; else the next busy one in turn,
    /// waited for.
    pub(crate) fn take(&self) -> Taken<'_> {
        for slot in &self.slots {
            let mut guard = match slot.try_lock() {
                Ok(g) => g,
                // A panic while holding a connection leaves it usable: each engine
                // has its own transactions, and a failed one is rolled back.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            if guard.is_none() {
                match self.url.as_deref().map(PgConn::connect) {
                    Some(Ok(c)) => {
                        *guard = Some(Conn::postgres(c));
                        self.made.fetch_add(1, Ordering::AcqRel);
                    }
                    // The store cannot be reached now: wait for a connection made earlier.
                    _ => break,
                }
            }
            return Taken(guard);
        }
        // Slots are filled in order and never emptied: the first `made` hold one.
        let made = self.made.load(Ordering::Acquire).clamp(1, self.slots.len());
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % made];
        let guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_some() {
            return Taken(guard);
        }
        drop(guard);
        Taken(self.slots[0].lock().unwrap_or_else(|p| p.into_inner()))
    }
}
