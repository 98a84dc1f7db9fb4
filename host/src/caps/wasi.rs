//! WASI p2, linked with an empty context: no preopened directories, no
//! environment, no arguments, no sockets, no name lookup, stdin closed.
//! Python and JavaScript components import WASI even when the policy uses none
//! of it, so it is linked rather than refused. The guest's stdout and stderr
//! are captured (up to a cap) and go to the run log. Its clocks read through
//! the event's journal and its random numbers come from the run's seed, so a
//! replayed event sees what the original saw.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use anyhow::Result;
use tokio::io::AsyncWrite;
use wasmtime::component::Linker;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiView};

use crate::journal::{Journal, JournalClock, event_rng};
use crate::limits::meter::Meter;

/// Link WASI p2 into `linker`; the store's data gives the (empty) context.
pub fn add_to_linker<T: WasiView + 'static>(linker: &mut Linker<T>) -> Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker).map_err(crate::wasm_err)
}

/// What the empty context is built from. The context itself is built the first
/// time the guest calls into WASI: a component that imports none of it (the
/// builtin Rust policies) never pays for its clocks, random generators and streams.
pub struct LazyWasi {
    ctx: Option<WasiCtx>,
    setup: Setup,
}

struct Setup {
    out: CapturedOutput,
    err: CapturedOutput,
    journal: Journal,
    meter: Arc<Meter>,
    seed: String,
    event: i64,
}

impl LazyWasi {
    /// The empty context, with stdout and stderr going to `out` and `err`, clocks
    /// through `journal`, and random numbers for event `event` of the run seeded `seed`.
    pub fn new(
        out: &CapturedOutput,
        err: &CapturedOutput,
        journal: &Journal,
        meter: &Arc<Meter>,
        seed: &str,
        event: i64,
    ) -> LazyWasi {
        LazyWasi {
            ctx: None,
            setup: Setup {
                out: out.clone(),
                err: err.clone(),
                journal: journal.clone(),
                meter: meter.clone(),
                seed: seed.to_string(),
                event,
            },
        }
    }

    pub fn ctx(&mut self) -> &mut WasiCtx {
        let setup = &self.setup;
        self.ctx.get_or_insert_with(|| setup.build())
    }
}

impl Setup {
    fn build(&self) -> WasiCtx {
        let mut b = WasiCtx::builder();
        b.stdout(self.out.clone())
            .stderr(self.err.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        // Clock reads are host calls, counted (and journaled when the journal is on).
        b.wall_clock(JournalClock::new(self.journal.clone(), self.meter.clone()))
            .monotonic_clock(JournalClock::new(self.journal.clone(), self.meter.clone()));
        if self.journal.enabled() {
            let (seed, event) = (&self.seed, self.event);
            b.secure_random(event_rng(seed, event, "secure"))
                .insecure_random(event_rng(seed, event, "insecure"))
                .insecure_random_seed(u128::from_le_bytes(
                    blake3::hash(format!("{seed}/{event}/seed").as_bytes()).as_bytes()[..16]
                        .try_into()
                        .unwrap_or_default(),
                ));
        }
        b.build()
    }
}

/// A stdout/stderr sink that keeps the first `cap` bytes and drops the rest.
#[derive(Clone)]
pub struct CapturedOutput {
    inner: Arc<Mutex<Captured>>,
}

struct Captured {
    bytes: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl CapturedOutput {
    pub fn new(cap: usize) -> CapturedOutput {
        CapturedOutput {
            inner: Arc::new(Mutex::new(Captured {
                bytes: Vec::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    /// What was written, and how many bytes past the cap were dropped.
    pub fn take(&self) -> (String, u64) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = std::mem::take(&mut c.bytes);
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            std::mem::take(&mut c.dropped),
        )
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let room = c.cap.saturating_sub(c.bytes.len());
        let keep = buf.len().min(room);
        c.bytes.extend_from_slice(&buf[..keep]);
        c.dropped += (buf.len() - keep) as u64;
        // Accept everything: a chatty guest is cut off, not blocked or trapped.
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
