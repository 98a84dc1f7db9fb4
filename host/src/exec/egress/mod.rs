//! The network as a grant: a sandboxed command or agent has no host network;
//! its one way out is loopbox's proxy, which decides every connection by the
//! run's `[network]` rules (see [`rules`]) and never reaches a private address
//! by accident ([`addr`]).
//!
//! One [`Egress`] per run (wired in `caps::actions`, so every front end gets
//! it), started at its first use. Each side (the run's commands, its agent)
//! is reached on a port of a bubblewrap sandbox's own network namespace,
//! whose listening socket loopbox made there and the proxy adopts for as
//! long as the sandbox runs ([`EgressSide::adopt`], `exec::sandbox::netns`),
//! and on a loopback TCP port of the host with a token, which a
//! Landlock-confined child may connect to and nothing else (Landlock's TCP
//! rules, ABI 4).

use std::sync::{Arc, OnceLock};

pub mod addr;
pub mod guard;
pub mod proxy;
pub mod rules;
pub mod splice;

pub use rules::NetworkConfig;

use crate::runlog::RunLog;
use proxy::{Shared, Side};
use rules::Rules;

/// The port the proxy has inside a bubblewrap sandbox's own network namespace.
pub const SANDBOX_PORT: u16 = 3128;
/// How a child reaches the proxy: [`SANDBOX_PORT`] in its own network
/// namespace (bubblewrap), or the host's loopback port and token (Landlock).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub port: u16,
    pub token: String,
}

impl Endpoint {
    /// The proxy variables for a child: on the sandbox's own port (`None`) or
    /// on the host's, with the token.
    pub fn env(&self, host_port: bool) -> Vec<(String, String)> {
        let (http, socks) = if host_port {
            (
                format!("http://loopbox:{}@127.0.0.1:{}", self.token, self.port),
                format!("socks5h://loopbox:{}@127.0.0.1:{}", self.token, self.port),
            )
        } else {
            (
                format!("http://127.0.0.1:{SANDBOX_PORT}"),
                format!("socks5h://127.0.0.1:{SANDBOX_PORT}"),
            )
        };
        let mut env = Vec::new();
        for (name, value) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &socks),
            ("NO_PROXY", &String::new()),
        ] {
            env.push((name.to_string(), value.clone()));
            env.push((name.to_lowercase(), value.clone()));
        }
        // Node.js's fetch honours the variables only when asked (22.21, 24.5 and later).
        env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
        env
    }
}

/// One side of a run's proxy as the sandbox sees it: started on first use.
pub struct EgressSide {
    egress: Arc<Egress>,
    which: Which,
}

impl std::fmt::Debug for EgressSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EgressSide({:?})", self.which)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Commands,
    Agent,
}

impl EgressSide {
    /// Where this side's children reach the proxy (starting it if need be).
    pub fn endpoint(&self) -> Result<Endpoint, String> {
        let running = self.egress.running()?;
        Ok(match self.which {
            Which::Commands => running.commands.clone(),
            Which::Agent => running.agent.clone(),
        })
    }

    /// Serve this side on `listener`, a socket listening in one sandbox's own
    /// network namespace (no token: only that sandbox reaches it), until the
    /// returned hold is dropped. Connections already accepted run to their end.
    pub fn adopt(&self, listener: std::net::TcpListener) -> Result<Adopted, String> {
        let running = self.egress.running()?;
        let side = match self.which {
            Which::Commands => &self.egress.commands,
            Which::Agent => &self.egress.agent,
        };
        let side = side.clone().ok_or("this side has no network")?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        running
            .adopt
            .send(Adopt {
                listener,
                side,
                stopped,
            })
            .map_err(|_| "the network proxy has stopped".to_string())?;
        Ok(Adopted { _stop: stop })
    }
}

/// A sandbox's listening socket, served by the proxy while this is held.
#[derive(Debug)]
pub struct Adopted {
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// What [`EgressSide::adopt`] hands the proxy's thread.
struct Adopt {
    listener: std::net::TcpListener,
    side: Arc<Side>,
    stopped: tokio::sync::oneshot::Receiver<()>,
}

/// A run's egress: its rules for each side, and the proxy once started.
pub struct Egress {
    config: NetworkConfig,
    commands: Option<Arc<Side>>,
    agent: Option<Arc<Side>>,
    run: RunSide,
    running: OnceLock<Result<Running, String>>,
    /// Said in the run log when the proxy starts: once per run and process,
    /// and only when something uses the network (not at every hook event).
    on_start: Vec<String>,
}

struct Running {
    commands: Endpoint,
    agent: Endpoint,
    /// What the proxy's thread shares: its count of open connections.
    shared: Arc<Shared>,
    /// Sandboxes' listeners for the proxy's thread to serve.
    adopt: tokio::sync::mpsc::UnboundedSender<Adopt>,
    /// Dropping it stops the proxy's thread.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A fresh random token for a TCP listener (rand's thread generator, a
/// CSPRNG seeded from the operating system).
fn token() -> String {
    let b: [u8; 18] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What a run gives its proxy besides the rules.
#[derive(Clone)]
pub struct RunSide {
    /// Where each connection is written as it ends.
    pub log: RunLog,
    /// The store and the run's id, where each connection is recorded.
    pub store: Option<(crate::db::Db, String)>,
    /// Given on a server: its own addresses are never reached, a private
    /// one only where the operator opened it, and the operator's ceilings
    /// bound the run's limits.
    pub guard: Option<guard::Guard>,
    /// Who answers for destinations under `ask`.
    pub confirm: Option<Arc<dyn crate::exec::confirm::Confirm>>,
}

impl Egress {
    /// `commands` and `agent` are each side's extra allowed destinations
    /// (`shell.network`'s `*`, the agent's preset) with their names; a side
    /// with nothing allowed or asked gets no network at all. `on_start` is
    /// said in the run log when the proxy starts.
    pub fn new(
        config: &NetworkConfig,
        section: &str,
        commands: &[(String, String)],
        agent: &[(String, String)],
        run: RunSide,
        on_start: Vec<String>,
    ) -> Result<Arc<Egress>, String> {
        // A sandbox's own port's side (no token): only that sandbox reaches it.
        let side = |name: &'static str, extra: &[(String, String)]| {
            Rules::new(config, section, extra).map(|rules| {
                (!rules.is_empty()).then(|| {
                    Arc::new(Side {
                        name,
                        rules,
                        token: None,
                    })
                })
            })
        };
        let commands = side("commands", commands)?;
        let agent = side("agent", agent)?;
        Ok(Arc::new(Egress {
            config: config.clone(),
            commands,
            agent,
            run,
            running: OnceLock::new(),
            on_start,
        }))
    }

    /// A proxy outside any run, its log shown nowhere, `config`'s rules on
    /// both sides: for measuring or exercising it apart (`host/benches/egress.rs`).
    pub fn standalone(config: &NetworkConfig) -> Result<Arc<Egress>, String> {
        let log = RunLog::new(crate::ui::Ui::quiet());
        let run = RunSide {
            log,
            store: None,
            guard: None,
            confirm: None,
        };
        Egress::new(config, "network", &[], &[], run, Vec::new())
    }

    /// The commands' side, if they may reach anything.
    pub fn commands(self: &Arc<Self>) -> Option<Arc<EgressSide>> {
        self.commands.as_ref().map(|_| {
            Arc::new(EgressSide {
                egress: self.clone(),
                which: Which::Commands,
            })
        })
    }

    /// The agent's side, if it may reach anything.
    pub fn agent(self: &Arc<Self>) -> Option<Arc<EgressSide>> {
        self.agent.as_ref().map(|_| {
            Arc::new(EgressSide {
                egress: self.clone(),
                which: Which::Agent,
            })
        })
    }

    fn running(&self) -> Result<&Running, String> {
        self.running
            .get_or_init(|| self.start())
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Once a sandboxed program has exited: wait (at most `within`) for the
    /// proxy to see its connections end, so each is in the run log and the
    /// record of the action that made it, not written after the step ended
    /// (or never, when the run ended with it).
    pub async fn settle(&self, within: std::time::Duration) {
        let Some(Ok(running)) = self.running.get() else {
            return;
        };
        let started = std::time::Instant::now();
        while running.shared.open() > 0 && started.elapsed() < within {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    fn start(&self) -> Result<Running, String> {
        for w in &self.on_start {
            self.run.log.host("warn", w.clone());
        }
        let e = |what: &str| {
            let what = what.to_string();
            move |err: std::io::Error| format!("the network proxy cannot start: {what}: {err}")
        };
        let config = match &self.run.guard {
            Some(g) => g.cap(&self.config),
            None => self.config.clone(),
        };
        let shared = Shared::new(config, self.run.clone());
        let kept = shared.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (adopt, mut adopted) = tokio::sync::mpsc::unbounded_channel::<Adopt>();
        let mut endpoints = Vec::new();
        let mut listeners = Vec::new();
        for side in [&self.commands, &self.agent] {
            let tcp = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(e("its port"))?;
            tcp.set_nonblocking(true).map_err(e("its listener"))?;
            let port = tcp.local_addr().map_err(e("its port"))?.port();
            // The host's port demands a token: any local user could reach it.
            let tcp_side = side.as_ref().map(|s| {
                Arc::new(Side {
                    name: s.name,
                    rules: s.rules.clone(),
                    token: Some(token()),
                })
            });
            let token = tcp_side
                .as_ref()
                .and_then(|s| s.token.clone())
                .unwrap_or_default();
            endpoints.push(Endpoint { port, token });
            listeners.push((tcp, tcp_side));
        }
        std::thread::Builder::new()
            .name("loopbox-egress".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(_) => return,
                };
                rt.block_on(async move {
                    for (tcp, side) in listeners {
                        if let (Some(side), Ok(tcp)) =
                            (side, tokio::net::TcpListener::from_std(tcp))
                        {
                            tokio::spawn(accept_all(tcp, side, shared.clone()));
                        }
                    }
                    tokio::pin!(stopped);
                    loop {
                        tokio::select! {
                            _ = &mut stopped => break,
                            Some(a) = adopted.recv() => {
                                let Ok(l) = tokio::net::TcpListener::from_std(a.listener) else {
                                    continue;
                                };
                                let serve = accept_all(l, a.side, shared.clone());
                                tokio::spawn(async move {
                                    tokio::select! {
                                        _ = serve => {}
                                        _ = a.stopped => {}
                                    }
                                });
                            }
                        }
                    }
                });
            })
            .map_err(e("its thread"))?;
        let agent = endpoints.pop().expect("two sides");
        let commands = endpoints.pop().expect("two sides");
        Ok(Running {
            commands,
            agent,
            shared: kept,
            adopt,
            _stop: stop,
        })
    }
}

/// Serve every connection `listener` accepts. An accept that fails (EMFILE in
/// a flood of connections) once ended the loop, and with it the listener, for
/// the rest of the run: now it waits and goes on.
async fn accept_all(listener: tokio::net::TcpListener, side: Arc<Side>, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                tokio::spawn(proxy::serve(s, side.clone(), shared.clone()));
            }
            Err(_) => tokio::time::sleep(proxy::ACCEPT_RETRY).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn allowing(host: &str) -> Arc<Egress> {
        Egress::standalone(&NetworkConfig {
            allow: vec![host.to_string()],
            ..NetworkConfig::default()
        })
        .unwrap()
    }

    /// A sandbox's port answers as the proxy without a token while held, and
    /// is closed once its hold is dropped (the command ended).
    #[test]
    fn an_adopted_listener_is_the_proxy_until_its_hold_is_dropped() {
        let egress = allowing("example.invalid:80");
        let side = egress.commands().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let hold = side.adopt(l).unwrap();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET http://127.0.0.2:9/ HTTP/1.1\r\nHost: 127.0.0.2:9\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("X-Loopbox-Refused"), "{answer}");
        drop(hold);
        let closed = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        });
        assert!(
            closed,
            "the sandbox's port still accepts after its hold was dropped"
        );
    }
}
