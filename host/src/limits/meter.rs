//! Per-event accounting shared by every capability: how many host calls the
//! guest made, how much of the event's wall time was spent in the host, and
//! how much CPU the guest itself used (so the compute-time limit charges the
//! guest only for its own work, not for a busy machine's other processes).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::limits::stop::Stop;
use crate::limits::{Limit, LimitExceeded, Limits};

pub struct Meter {
    started: Instant,
    host_calls: AtomicU64,
    host_nanos: AtomicU64,
    /// When the host call in progress began (nanoseconds after `started`, plus
    /// one; 0 when none is): a long action is not the guest's time even before it ends.
    in_call: AtomicU64,
    /// CPU the guest has used, in nanoseconds of the polling thread's CPU clock,
    /// over finished segments. A segment runs from a poll's start, or a host
    /// call's end, to the next host call's start or the poll's end; all of one
    /// segment happens inside one poll, so on one thread.
    guest_cpu: AtomicU64,
    /// The polling thread's CPU clock when the current segment began.
    segment_start: AtomicU64,
    /// Whether the guest, not a host call, has the thread.
    guest_running: AtomicBool,
    max_host_calls: u64,
    max_string_bytes: u64,
    cpu_budget: Duration,
    wall_budget: Duration,
    /// A limit hit where it could not be raised (a clock read cannot fail):
    /// the guest is stopped with it at its next check.
    pending: Mutex<Option<LimitExceeded>>,
    stop: Arc<Stop>,
}

impl Meter {
    pub fn new(limits: &Limits) -> Meter {
        Meter::with_stop(limits, Arc::new(Stop::new()))
    }

    /// A meter whose host calls fail once `stop` is requested.
    pub fn with_stop(limits: &Limits, stop: Arc<Stop>) -> Meter {
        Meter {
            started: Instant::now(),
            host_calls: AtomicU64::new(0),
            host_nanos: AtomicU64::new(0),
            in_call: AtomicU64::new(0),
            guest_cpu: AtomicU64::new(0),
            segment_start: AtomicU64::new(0),
            guest_running: AtomicBool::new(false),
            max_host_calls: limits.host_calls_per_event,
            max_string_bytes: limits.max_string_bytes,
            cpu_budget: Duration::from_millis(limits.cpu_ms_per_event),
            wall_budget: Duration::from_millis(limits.wall_ms_per_event),
            pending: Mutex::new(None),
            stop,
        }
    }

    /// Count a host call; the returned guard charges its duration to the host.
    /// Fails on a limit already hit, over `limits.host_calls_per_event`, or once
    /// the run is asked to stop.
    pub fn call(&self) -> wasmtime::Result<HostCall<'_>> {
        self.check()?;
        self.count()?;
        self.pause_guest();
        let since = self.started.elapsed().as_nanos().min(u64::MAX as u128 - 1) as u64;
        self.in_call.store(since + 1, Ordering::Relaxed);
        Ok(HostCall {
            meter: self,
            started: Instant::now(),
        })
    }

    fn count(&self) -> Result<(), LimitExceeded> {
        let n = self.host_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_host_calls {
            return Err(LimitExceeded::new(Limit::HostCalls, self.max_host_calls));
        }
        Ok(())
    }

    /// Count a call that cannot fail (a clock read): past the limit it is
    /// kept for [`Meter::check`], which stops the guest. `false` once over.
    pub fn count_infallible(&self) -> bool {
        match self.count() {
            Ok(()) => true,
            Err(e) => {
                self.defer(e);
                false
            }
        }
    }

    /// Keep `e` to stop the guest with at its next check (the first one wins).
    pub fn defer(&self, e: LimitExceeded) {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_none() {
            *p = Some(e);
        }
    }

    /// The limit or stop request the guest must be stopped for, if any.
    pub fn check(&self) -> wasmtime::Result<()> {
        self.check_limits()?;
        self.stop.check()?;
        Ok(())
    }

    /// A limit hit where it could not be raised, if any.
    pub fn check_limits(&self) -> Result<(), LimitExceeded> {
        match self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Wall time of the event so far, less the time spent in host calls
    /// (including the one in progress).
    pub fn guest_time(&self) -> Duration {
        let elapsed = self.started.elapsed();
        let mut host = Duration::from_nanos(self.host_nanos.load(Ordering::Relaxed));
        let since = self.in_call.load(Ordering::Relaxed);
        if since > 0 {
            host += elapsed.saturating_sub(Duration::from_nanos(since - 1));
        }
        elapsed.saturating_sub(host)
    }

    /// CPU time the guest has used this event (instantiation included, host
    /// calls not). Exact only on the thread polling the guest: the epoch
    /// callback, which runs there, is its reader.
    pub fn guest_cpu(&self) -> Duration {
        let mut ns = self.guest_cpu.load(Ordering::Relaxed);
        if self.guest_running.load(Ordering::Relaxed) {
            ns += thread_cpu_ns().saturating_sub(self.segment_start.load(Ordering::Relaxed));
        }
        Duration::from_nanos(ns)
    }

    /// Wrap the future that runs the guest so each poll's CPU is charged to it.
    pub fn metered<F: Future>(&self, inner: F) -> Metered<'_, F> {
        Metered {
            meter: self,
            inner: Box::pin(inner),
        }
    }

    fn resume_guest(&self) {
        self.segment_start.store(thread_cpu_ns(), Ordering::Relaxed);
        self.guest_running.store(true, Ordering::Relaxed);
    }

    /// End the guest's segment (at a host call's start or a poll's end).
    fn pause_guest(&self) {
        if self.guest_running.swap(false, Ordering::Relaxed) {
            let used = thread_cpu_ns().saturating_sub(self.segment_start.load(Ordering::Relaxed));
            self.guest_cpu.fetch_add(used, Ordering::Relaxed);
        }
    }

    pub fn cpu_budget(&self) -> Duration {
        self.cpu_budget
    }

    pub fn wall_budget(&self) -> Duration {
        self.wall_budget
    }

    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// Refuse a string argument over `limits.max_string_bytes`.
    pub fn check_str(&self, s: &str) -> Result<(), LimitExceeded> {
        if s.len() as u64 > self.max_string_bytes {
            return Err(
                LimitExceeded::new(Limit::StringBytes, self.max_string_bytes)
                    .attempted(s.len() as u64),
            );
        }
        Ok(())
    }
}

/// An in-progress host call; its time is not the guest's.
pub struct HostCall<'a> {
    meter: &'a Meter,
    started: Instant,
}

impl Drop for HostCall<'_> {
    fn drop(&mut self) {
        let ns = self.started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.meter.host_nanos.fetch_add(ns, Ordering::Relaxed);
        self.meter.in_call.store(0, Ordering::Relaxed);
        self.meter.resume_guest();
    }
}

/// The guest's future, charging the CPU of each poll (less its host calls) to the guest.
pub struct Metered<'a, F> {
    meter: &'a Meter,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Metered<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // A poll that resumes inside a host call (an action awaiting its process)
        // is the host's; one that resumes the guest starts a new segment.
        if this.meter.in_call.load(Ordering::Relaxed) == 0 {
            this.meter.resume_guest();
        }
        let r = this.inner.as_mut().poll(cx);
        this.meter.pause_guest();
        r
    }
}

/// The calling thread's CPU time (user and system), in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs no other state.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_time_is_not_guest_time() {
        let m = Meter::new(&Limits::default());
        {
            let _c = m.call().unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            m.guest_time() < Duration::from_millis(40),
            "{:?}",
            m.guest_time()
        );
    }

    #[test]
    fn a_host_call_in_progress_is_not_guest_time() {
        let m = Meter::new(&Limits::default());
        let _c = m.call().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            m.guest_time() < Duration::from_millis(40),
            "{:?}",
            m.guest_time()
        );
    }

    /// Burn `d` of this thread's CPU (not wall time: the machine may be busy).
    fn spin(d: Duration) {
        let t = thread_cpu_ns();
        while thread_cpu_ns() - t < d.as_nanos() as u64 {
            std::hint::black_box(0u64);
        }
    }

    /// A poll that computes is charged; one whose thread sleeps (as a loaded
    /// machine's other processes take the CPU) is not, nor is a host call.
    #[test]
    fn guest_cpu_counts_the_guest_s_own_work_only() {
        let m = Meter::new(&Limits::default());
        let cpu = block_on(m.metered(async {
            spin(Duration::from_millis(60));
            std::thread::sleep(Duration::from_millis(200));
            {
                let _c = m.call().unwrap();
                spin(Duration::from_millis(100));
            }
            m.guest_cpu()
        }));
        assert!(
            cpu >= Duration::from_millis(60) && cpu < Duration::from_millis(140),
            "guest CPU {cpu:?}: expected the 60 ms spin only (not the 200 ms sleep or the host's 100 ms)"
        );
        assert!(
            m.guest_time() >= Duration::from_millis(250),
            "{:?}",
            m.guest_time()
        );
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn limit_of(e: wasmtime::Error) -> Limit {
        e.downcast_ref::<LimitExceeded>().unwrap().limit
    }

    #[test]
    fn a_flood_is_stopped_at_the_limit() {
        let m = Meter::new(&Limits {
            host_calls_per_event: 3,
            ..Limits::default()
        });
        for _ in 0..3 {
            m.call().unwrap();
        }
        assert_eq!(limit_of(m.call().err().unwrap()), Limit::HostCalls);
    }

    #[test]
    fn clock_reads_count_and_a_limit_hit_there_stops_the_next_call() {
        let m = Meter::new(&Limits {
            host_calls_per_event: 2,
            ..Limits::default()
        });
        assert!(m.count_infallible() && m.count_infallible());
        m.check().unwrap();
        assert!(!m.count_infallible());
        assert_eq!(limit_of(m.check().unwrap_err()), Limit::HostCalls);
        assert_eq!(limit_of(m.call().err().unwrap()), Limit::HostCalls);
    }

    #[test]
    fn a_stop_request_fails_the_next_call() {
        let stop = Arc::new(Stop::new());
        let m = Meter::with_stop(&Limits::default(), stop.clone());
        m.call().unwrap();
        stop.request(crate::limits::stop::StopReason::Cancelled);
        let e = m.call().err().unwrap();
        assert_eq!(
            e.downcast_ref::<crate::limits::stop::Stopped>(),
            Some(&crate::limits::stop::Stopped(
                crate::limits::stop::StopReason::Cancelled
            ))
        );
    }

    #[test]
    fn strings_over_the_limit_are_refused() {
        let m = Meter::new(&Limits {
            max_string_bytes: 4,
            ..Limits::default()
        });
        m.check_str("1234").unwrap();
        assert_eq!(m.check_str("12345").unwrap_err().attempted, Some(5));
    }
}
