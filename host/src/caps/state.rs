//! `state`: the run's durable key/value JSON. Writes made while handling an
//! event are buffered here (reads see them) and handed to the run to commit
//! with the event's decision; a failed event's writes are discarded.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::loopbox::policy::state;
use crate::db::Db;
use crate::limits::meter::Meter;
use crate::limits::{Limit, LimitExceeded, Limits};

pub struct StateHost {
    db: Db,
    run: String,
    meter: Arc<Meter>,
    value_limit: u64,
    total_limit: u64,
    /// Uncommitted writes: `Some` sets, `None` removes.
    overlay: BTreeMap<String, Option<String>>,
    /// Bytes the run's state holds with the overlay applied; read from the store with
    /// the event's first lookup or write, then kept up to date.
    total: Option<u64>,
    /// Bytes of entries read from the store this event (0: absent), so writing
    /// back a key just read needs no second lookup of its size.
    stored_sizes: BTreeMap<String, u64>,
}

impl StateHost {
    pub fn new(db: Db, run: String, meter: Arc<Meter>, limits: &Limits) -> StateHost {
        StateHost {
            db,
            run,
            meter,
            value_limit: limits.state_value_bytes,
            total_limit: limits.state_total_bytes,
            overlay: BTreeMap::new(),
            total: None,
            stored_sizes: BTreeMap::new(),
        }
    }

    /// The event's writes, in key order.
    pub fn take_writes(&mut self) -> Vec<(String, Option<String>)> {
        std::mem::take(&mut self.overlay).into_iter().collect()
    }

    fn get(&mut self, key: &str) -> wasmtime::Result<Option<String>> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone());
        }
        // The event's first lookup brings the run's total along: a policy that
        // reads its state usually writes it back, and the write needs the total.
        let v = match self.total {
            Some(_) => self.db.state_get(&self.run, key),
            None => self
                .db
                .state_get_and_total(&self.run, key)
                .map(|(v, total)| {
                    self.total = Some(total);
                    v
                }),
        }
        .map_err(crate::error::host_err)?;
        self.stored_sizes
            .insert(key.to_string(), entry_bytes(key, v.as_deref()));
        Ok(v)
    }

    /// Bytes of keys and values the run holds, counting this event's writes.
    fn total(&mut self) -> wasmtime::Result<u64> {
        match self.total {
            Some(t) => Ok(t),
            None => {
                // The overlay is empty until the first write, which is when this runs
                // (if no read came first).
                let t = self
                    .db
                    .state_total(&self.run)
                    .map_err(crate::error::host_err)?;
                self.total = Some(t);
                Ok(t)
            }
        }
    }

    /// Bytes `key` and its current value take (0 when absent), counting this event's writes.
    fn entry_size(&self, key: &str) -> wasmtime::Result<u64> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(entry_bytes(key, v.as_deref()));
        }
        match self.stored_sizes.get(key) {
            Some(&size) => Ok(size),
            None => self
                .db
                .state_entry_size(&self.run, key)
                .map_err(crate::error::host_err),
        }
    }
}

/// Bytes an entry takes against the state limits, as the store counts them (0: absent).
fn entry_bytes(key: &str, value: Option<&str>) -> u64 {
    value.map_or(0, |v| (key.len() + v.len()) as u64)
}

impl state::Host for StateHost {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        let meter = self.meter.clone();
        let _call = meter.call()?;
        self.meter.check_str(&key)?;
        StateHost::get(self, &key)
    }

    async fn set(&mut self, key: String, value: String) -> wasmtime::Result<Result<(), String>> {
        let meter = self.meter.clone();
        let _call = meter.call()?;
        if let Err(e) = self
            .meter
            .check_str(&key)
            .and_then(|_| self.meter.check_str(&value))
        {
            return Ok(Err(e.to_string()));
        }
        let size = entry_bytes(&key, Some(&value));
        if size > self.value_limit {
            return Ok(Err(LimitExceeded::new(Limit::StateValue, self.value_limit)
                .attempted(size)
                .to_string()));
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&value) {
            return Ok(Err(format!(
                "state.set(`{key}`): the value is not JSON: {e}"
            )));
        }
        let total = self.total()? - self.entry_size(&key)? + size;
        if total > self.total_limit {
            return Ok(Err(LimitExceeded::new(Limit::StateTotal, self.total_limit)
                .attempted(total)
                .to_string()));
        }
        self.total = Some(total);
        self.overlay.insert(key, Some(value));
        Ok(Ok(()))
    }

    async fn remove(&mut self, key: String) -> wasmtime::Result<()> {
        let meter = self.meter.clone();
        let _call = meter.call()?;
        self.meter.check_str(&key)?;
        let total = self.total()? - self.entry_size(&key)?;
        self.total = Some(total);
        self.overlay.insert(key, None);
        Ok(())
    }

    async fn keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
        let _call = self.meter.call()?;
        self.meter.check_str(&prefix)?;
        let mut keys: std::collections::BTreeSet<String> = self
            .db
            .state_keys(&self.run, &prefix)
            .map_err(crate::error::host_err)?
            .into_iter()
            .collect();
        for (k, v) in self
            .overlay
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
        {
            match v {
                Some(_) => keys.insert(k.clone()),
                None => keys.remove(k),
            };
        }
        Ok(keys.into_iter().collect())
    }
}

/// Link `state` into `linker`; `get` finds this capability's host state in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut StateHost,
) -> Result<()> {
    state::add_to_linker::<T, HasSelf<StateHost>>(linker, get).map_err(crate::wasm_err)
}
