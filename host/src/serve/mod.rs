//! `loopbox serve`: one process that drives many tenants' runs at once, each
//! exactly as `loopbox run` drives one (the same launcher, sandbox, journal,
//! limits and grants), behind an HTTP API with tokens, roles and an audit log.
//!
//! - [`config`]: `loopbox-server.toml` (`[server]`, `[engine]`, `[tenants.NAME]`).
//! - [`data`]: the data directory (the store, the tenants' configs).
//! - [`tenant`]: each tenant's roots, quotas, credentials and what it never sees.
//! - [`tenancy`]: a tenant as its runs see it, their source of trust.
//! - [`store`]: the server's tables (tokens, sessions, tenant configs, inbox)
//!   and its reads of runs; every act audited in its own transaction.
//! - [`auth`]: tokens, roles, sessions and CSRF.
//! - [`quota`]: a tenant's actions per hour and agent turns per day.
//! - [`sched`]: the queue, and driving a run through the launcher.
//! - [`http`]: accepting connections (bounded, with a header timeout).
//! - [`api`]: the JSON API under `/api/v1`.
//! - [`web`]: the dashboard, pages over the API's handlers.
//! - [`url`]: the URL the server is reached at, in the commands it prints.
//! - [`webhooks`]: a tenant's events sent to its webhooks, signed, from the store's queue.
//!
//! [`Server`] is what they share. [`serve`] starts it: it takes the data
//! directory's lock (one server per data directory), picks up what its last
//! incarnation left (runs left `running` or `interrupted`, queued runs,
//! decided approvals), listens, and on SIGTERM stops taking runs, stops the
//! running ones where they stand (resumable) and exits.

pub mod api;
pub mod auth;
pub mod config;
pub mod data;
pub mod guard;
pub mod http;
pub mod quota;
pub mod sched;
pub mod store;
pub mod tenancy;
pub mod tenant;
pub mod url;
pub mod web;
pub mod webhooks;
pub mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};

use config::{SERVER_CONFIG_FILE, ServerConfig, ServerSection};
use data::DataDir;
use quota::TenantQuota;
use sched::{Continue, Queue};
use store::Store;
use tenant::Tenants;

/// How a failed drive begins in the run's log (workers count these, `worker.rs`).
pub(crate) const DRIVE_FAILED: &str = "the server could not drive the run";

use crate::db::RunStatus;
use crate::db::approvals::Settle;
use crate::wasm::runtime::Runtime;

/// Starts prepared at once; more wait their turn.
const STARTS_AT_ONCE: usize = 4;

/// What the command line gives `loopbox serve` and its subcommands.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config`; else `loopbox-server.toml` in the current directory, if present.
    pub config: Option<PathBuf>,
    /// `--listen`, over `server.listen`.
    pub listen: Option<SocketAddr>,
    /// `--data`, over `server.data`.
    pub data: Option<PathBuf>,
    /// `--store postgres://…` (or `LOOPBOX_STORE`): the runs and the server's
    /// tables in PostgreSQL rather than in `DATA/loopbox.db`.
    pub store: Option<String>,
}

/// The PostgreSQL store `--store` names, else `LOOPBOX_STORE`; none for the
/// data directory's SQLite file. Anything else given is refused, as it is not
/// a store this server can share, and so is a `--store` with a password in it:
/// a process's arguments are public on its machine, its environment is not.
pub fn store_option(given: Option<&str>) -> Result<Option<String>> {
    let store = match given {
        Some(s) => Some(s.to_string()),
        None => std::env::var("LOOPBOX_STORE")
            .ok()
            .filter(|s| !s.is_empty()),
    };
    if let Some(s) = given
        && crate::db::engine::postgres::has_password(s)
    {
        anyhow::bail!(
            "the store `{}` has its password on the command line, where every process on this machine reads it (`ps`, /proc/PID/cmdline; a tenant's command in a Landlock sandbox too): \
             give the URL in the environment instead, LOOPBOX_STORE=postgres://USER:PASSWORD@HOST:PORT/DATABASE (readable by this user only), and leave --store out",
            crate::db::engine::postgres::redact(s)
        );
    }
    match store {
        // Never the password: it would land in a terminal's scrollback, or a CI log.
        Some(s) if !crate::db::engine::postgres::is_url(&s) => anyhow::bail!(
            "the store `{}` is not a PostgreSQL URL: set LOOPBOX_STORE=postgres://USER:PASSWORD@HOST:PORT/DATABASE, or leave it out to keep the runs in the data directory",
            // A mistyped scheme still carries the password: never print it.
            crate::db::engine::postgres::redact(&s)
        ),
        s => Ok(s),
    }
}

/// The server config the options name, and its file (None: none, the defaults).
pub fn load_config(opts: &Options) -> Result<(ServerConfig, Option<PathBuf>)> {
    let path = match &opts.config {
        Some(p) => Some(p.clone()),
        None => Some(PathBuf::from(SERVER_CONFIG_FILE)).filter(|p| p.exists()),
    };
    match path {
        Some(p) => Ok((ServerConfig::load(&p)?, Some(p))),
        None => Ok((ServerConfig::default(), None)),
    }
}

/// The server config, its data directory and its tenants, as the options say:
/// what `serve` and its `token` and `audit` subcommands all open first.
pub struct Setup {
    pub config: ServerConfig,
    pub data: DataDir,
    pub tenants: Tenants,
}

impl Setup {
    pub fn open(opts: &Options) -> Result<Setup> {
        let (config, file) = load_config(opts)?;
        let data = opts
            .data
            .clone()
            .or_else(|| config.server.data.clone())
            .with_context(|| {
                format!(
                    "no data directory: give --data DIR, or set `data` under [server] in {}",
                    file.as_deref()
                        .map_or(SERVER_CONFIG_FILE.to_string(), |f| format!(
                            "`{}`",
                            f.display()
                        ))
                )
            })?;
        let roots = tenant::roots(&config)?;
        let data = DataDir::open(&data, &roots)?.with_store(store_option(opts.store.as_deref())?);
        let tenants = Tenants::load(&config, data.path(), file.as_deref())?;
        Ok(Setup {
            config,
            data,
            tenants,
        })
    }

    /// The store, with the server's tables.
    pub fn store(&self) -> Result<Store> {
        Store::with(self.data.open_db()?)
    }
}

/// What the scheduler and the API share.
pub struct Server {
    pub store: Store,
    pub data: DataDir,
    pub tenants: Tenants,
    /// Addresses no run's network reaches ([`guard`]): the server's, the store's.
    pub guarded: Vec<std::net::IpAddr>,
    pub quotas: BTreeMap<String, Arc<TenantQuota>>,
    /// The one engine, linker and component cache of every run.
    pub runtime: Runtime,
    pub settings: ServerSection,
    /// Cookies are marked `Secure` unless the server listens on loopback only.
    pub secure_cookies: bool,
    pub queue: Queue,
    /// Log streams open now (`server.max_log_streams`).
    pub streams: Arc<tokio::sync::Semaphore>,
    /// ... and each tenant's (`tenants.NAME.max_log_streams`), so one tenant
    /// holding streams open cannot leave the others none.
    pub tenant_streams: BTreeMap<String, Arc<tokio::sync::Semaphore>>,
    /// Set once SIGTERM came: no new runs are taken.
    pub stopping: AtomicBool,
    /// Starts are checked against `max_queued` and recorded one at a time.
    pub start_lock: tokio::sync::Mutex<()>,
    /// Starts being prepared at once (each loads its policy).
    pub start_slots: tokio::sync::Semaphore,
}

impl Server {
    /// The server for `setup`, listening at `listen`.
    pub fn new(setup: Setup, listen: SocketAddr) -> Result<Server> {
        let Setup {
            config,
            data,
            tenants,
        } = setup;
        let store = Store::with(data.open_db()?)?;
        let listens: Vec<SocketAddr> = [Some(listen), config.server.listen]
            .into_iter()
            .flatten()
            .collect();
        let guarded = guard::addresses(&listens, data.store_url());
        let cache =
            crate::wasm::cache::ComponentCache::default_dir(config.engine.cache_dir.as_deref());
        for name in tenants.names() {
            for root in &tenants.named(name)?.roots {
                crate::wasm::cache::check_dir(&cache, root)
                    .with_context(|| format!("the component cache and tenant `{name}`"))?;
            }
        }
        let runtime = Runtime::with_pool(cache, config.engine.pool_instances)?;
        let now = crate::db::now_ms();
        let mut quotas = BTreeMap::new();
        let shared_store = data.is_shared();
        for name in tenants.names() {
            let t = tenants.named(name)?;
            let (actions, turns) = store.spent_since(name, TenantQuota::since(now))?;
            let hour_ago = now - 3_600_000;
            let actions: Vec<i64> = actions.into_iter().filter(|&a| a > hour_ago).collect();
            let charges = store.charges_since(name, TenantQuota::since(now))?;
            let budget = quota::DailyBudget {
                max_cost_usd: t.max_cost_usd_per_day,
                max_tokens: t.max_tokens_per_day,
            };
            let mut q = TenantQuota::new(
                name,
                t.actions_per_hour,
                t.agent_turns_per_day,
                &actions,
                &turns,
            )
            .with_budget(budget, &charges)
            .notifying(store.db().clone());
            if shared_store {
                // Every worker and server on the store shares the store's count.
                q = q.on_store(store.clone());
            }
            quotas.insert(name.to_string(), Arc::new(q));
        }
        let tenant_streams = tenants
            .names()
            .filter_map(|n| tenants.get(n))
            .map(|t| {
                (
                    t.name.clone(),
                    Arc::new(tokio::sync::Semaphore::new(t.max_log_streams as usize)),
                )
            })
            .collect();
        Ok(Server {
            store,
            guarded,
            data,
            tenant_streams,
            tenants,
            quotas,
            runtime,
            streams: Arc::new(tokio::sync::Semaphore::new(
                config.server.max_log_streams as usize,
            )),
            settings: config.server,
            secure_cookies: !listen.ip().is_loopback(),
            queue: if shared_store {
                Queue::on_shared_store()
            } else {
                Queue::default()
            },
            stopping: AtomicBool::new(false),
            start_lock: tokio::sync::Mutex::new(()),
            start_slots: tokio::sync::Semaphore::new(STARTS_AT_ONCE),
        })
    }

    /// The tenant's `loopbox.toml` as the last audited act set it, written to
    /// `DATA/tenants/NAME/loopbox.toml` (an empty file, granting nothing, when
    /// none was set): the file every run of the tenant is launched with. A
    /// workspace's own `loopbox.toml` is never read.
    pub fn config_file(&self, tenant: &str) -> Result<PathBuf> {
        let path = self
            .data
            .tenant_dir(tenant)?
            .join(crate::files::CONFIG_FILE);
        let text = self
            .store
            .tenant_config(tenant)?
            .map(|(t, _)| t)
            .unwrap_or_default();
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            crate::files::write_atomically(&path, text.as_bytes())
                .with_context(|| format!("failed to write tenant `{tenant}`'s config"))?;
        }
        Ok(path)
    }

    /// Put `run` in the queue when it is in one of `from` (a conditional write,
    /// so a run another act moved meanwhile is left alone); whether it was.
    pub fn requeue(
        &self,
        run: &str,
        tenant: &str,
        from: &[RunStatus],
        how: Continue,
    ) -> Result<bool> {
        let moved = self.store.requeue(run, from)?;
        if moved {
            self.queue.push(run, tenant, how);
        }
        Ok(moved)
    }

    /// What `tenant`'s agents spent in the 24 hours before `now`. On a shared
    /// store the turns were charged in the workers' processes, not here: read
    /// from the store's journal (else the server showed a day of nothing).
    pub fn spent_today(&self, tenant: &str, now: i64) -> Result<crate::spend::Totals> {
        if self.data.is_shared() {
            let mut day = crate::spend::Totals::default();
            for (_, c) in self.store.charges_since(tenant, now - 24 * 3_600_000)? {
                day.add(&c);
            }
            return Ok(day);
        }
        Ok(self
            .quotas
            .get(tenant)
            .map(|q| q.spent_today(now))
            .unwrap_or_default())
    }

    /// Record why the server could not drive `run` (in its log and on stderr).
    pub fn note_failure(&self, run: &str, e: &anyhow::Error) {
        if let Ok(db) = self.data.open_db() {
            self.note_failure_on(&db, run, e);
        }
    }

    /// [`Server::note_failure`] through `db`: a worker's claimed handle, so a
    /// worker that lost the run's lease writes nothing into its log.
    pub fn note_failure_on(&self, db: &crate::db::Db, run: &str, e: &anyhow::Error) {
        crate::errln!(
            "loopbox serve: run {run}: {}",
            crate::ui::Untrusted(&format!("{e:#}"))
        );
        sched::log_line(db, run, "error", format!("{DRIVE_FAILED}: {e:#}"));
    }

    /// Pick up what the last incarnation left: runs it was driving (left
    /// `running` by a kill, or `interrupted` by a stop), the queue, and
    /// waiting runs whose approval was decided meanwhile.
    pub fn recover(&self) -> Result<usize> {
        let db = self.store.db();
        // On a shared store, workers take over runs whose lease expired.
        let statuses: &[RunStatus] = if self.data.is_shared() {
            &[]
        } else {
            &[RunStatus::Running, RunStatus::Interrupted]
        };
        for &status in statuses {
            for (id, tenant) in self.store.runs_with_status(status)? {
                let run = db.existing_run(&id)?;
                if run
                    .lease
                    .as_ref()
                    .is_some_and(|o| o.is_alive() && *o != crate::db::lease::Owner::me())
                {
                    continue;
                }
                if self.tenants.get(&tenant).is_some() {
                    self.store.requeue(&id, &[status])?;
                }
            }
        }
        for id in db.runs_with_decided_approvals()? {
            self.store.requeue(&id, &[RunStatus::Waiting])?;
        }
        let queued = self.store.runs_with_status(RunStatus::Queued)?;
        for (id, tenant) in &queued {
            self.queue.push(id, tenant, Continue::default());
        }
        Ok(queued.len())
    }

    /// Settle approvals past their deadline (each a decline, audited as
    /// `loopbox`'s act), and wake the runs whose approval was decided.
    /// Once a second: expire overdue approvals, and queue again the waiting runs
    /// whose approval was decided or whose timer is due.
    pub fn sweep_approvals(&self) -> Result<()> {
        let db = self.store.db();
        for a in db.overdue_approvals(crate::db::now_ms())? {
            db.settle_approval(&a.id, &Settle::Expired)?;
        }
        for id in db.runs_with_decided_approvals()? {
            if let Some(tenant) = db.existing_run(&id)?.place.tenant {
                self.requeue(&id, &tenant, &[RunStatus::Waiting], Continue::default())?;
            }
        }
        // Runs whose `sleep` timer is due (parked by the driver, or woken early by a tick).
        for (id, _) in db.due_runs(WAKE_BATCH)? {
            if let Some(tenant) = db.existing_run(&id)?.place.tenant {
                self.requeue(&id, &tenant, &[RunStatus::Waiting], Continue::default())?;
            }
        }
        Ok(())
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// Due runs the sweep queues at a time (the rest at its next pass).
const WAKE_BATCH: u32 = 200;

/// Hold the data directory for this process (`DATA/serve.lock`, `flock`): a
/// second server on the same data would drive the same runs.
fn lock_data(data: &Path) -> Result<std::fs::File> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let path = data.join("serve.lock");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("failed to open `{}`", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let other = std::fs::read_to_string(&path).unwrap_or_default();
        bail!(
            "another loopbox serve (pid {}) uses the data directory `{}`; one server per data directory",
            other.trim(),
            data.display()
        );
    }
    f.set_len(0)?;
    writeln!(f, "{}", std::process::id())?;
    Ok(f)
}

/// Run the server until SIGTERM or SIGINT. `ready` is told the address it
/// listens at once it does.
pub async fn serve(opts: &Options, ready: impl FnOnce(SocketAddr, &Server)) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let setup = Setup::open(opts)?;
    let _lock = lock_data(setup.data.path())?;
    let listen = opts
        .listen
        .or(setup.config.server.listen)
        .unwrap_or_else(|| config::DEFAULT_LISTEN.parse().expect("a valid address"));
    let mut term = signal(SignalKind::terminate()).context("failed to catch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("failed to catch SIGINT")?;
    let limits = http::Limits {
        connections: setup.config.server.max_connections as usize,
        per_ip: setup.config.server.max_connections_per_ip as usize,
    };
    let server = Arc::new(Server::new(setup, listen)?);
    server.recover()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("failed to listen on {listen}"))?;
    let addr = listener.local_addr()?;
    crate::ui::set_server_url(url::of_server(server.settings.url.as_deref(), addr));
    let app = api::router(server.clone()).merge(web::router(server.clone()));
    let accepting = tokio::spawn(http::accept(listener, app, limits));
    // On a shared store the server only queues: `loopbox worker` processes drive.
    let dispatching =
        (!server.data.is_shared()).then(|| tokio::spawn(sched::dispatch(server.clone())));
    let sweeping = {
        let server = server.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                if let Err(e) = server.sweep_approvals() {
                    crate::errln!("loopbox serve: settling approvals failed: {e:#}");
                }
            }
        })
    };
    // Only `serve` delivers webhooks; workers queue them with the changes they write.
    let delivering = tokio::spawn(webhooks::deliver(server.clone()));
    ready(addr, &server);
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    server.stopping.store(true, Ordering::SeqCst);
    let n = server.queue.close();
    crate::errln!(
        "loopbox serve: stopping: {n} run(s) stop where they stand and resume when the server starts again (a second signal quits at once)"
    );
    tokio::select! {
        _ = server.queue.drained() => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    accepting.abort();
    if let Some(d) = dispatching {
        d.abort();
    }
    sweeping.abort();
    delivering.abort();
    Ok(())
}
