//! Per-event accounting shared by every capability: how many host calls the
//! guest made, and how much of the event's wall time was spent in the host
//! (so the compute-time limit charges the guest only for its own time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::limits::{Limit, LimitExceeded, Limits};

pub struct Meter {
    started: Instant,
    host_calls: AtomicU64,
    host_nanos: AtomicU64,
    max_host_calls: u64,
    max_string_bytes: u64,
    cpu_budget: Duration,
}

impl Meter {
    pub fn new(limits: &Limits) -> Meter {
        Meter {
            started: Instant::now(),
            host_calls: AtomicU64::new(0),
            host_nanos: AtomicU64::new(0),
            max_host_calls: limits.host_calls_per_event,
            max_string_bytes: limits.max_string_bytes,
            cpu_budget: Duration::from_millis(limits.cpu_ms_per_event),
        }
    }

    /// Count a host call; the returned guard charges its duration to the host.
    pub fn call(&self) -> Result<HostCall<'_>, LimitExceeded> {
        let n = self.host_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.max_host_calls {
            return Err(LimitExceeded::new(Limit::HostCalls, self.max_host_calls));
        }
        Ok(HostCall { meter: self, started: Instant::now() })
    }

    /// Wall time of the event so far, less the time spent in host calls.
    pub fn guest_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(Duration::from_nanos(self.host_nanos.load(Ordering::Relaxed)))
    }

    pub fn cpu_budget(&self) -> Duration {
        self.cpu_budget
    }

    pub fn host_calls(&self) -> u64 {
        self.host_calls.load(Ordering::Relaxed)
    }

    /// Refuse a string argument over `limits.max_string_bytes`.
    pub fn check_str(&self, s: &str) -> Result<(), LimitExceeded> {
        if s.len() as u64 > self.max_string_bytes {
            return Err(LimitExceeded::new(Limit::StringBytes, self.max_string_bytes).attempted(s.len() as u64));
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
    }
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
        assert!(m.guest_time() < Duration::from_millis(40), "{:?}", m.guest_time());
    }

    #[test]
    fn a_flood_is_stopped_at_the_limit() {
        let m = Meter::new(&Limits { host_calls_per_event: 3, ..Limits::default() });
        for _ in 0..3 {
            m.call().unwrap();
        }
        assert_eq!(m.call().err().unwrap().limit, Limit::HostCalls);
    }

    #[test]
    fn strings_over_the_limit_are_refused() {
        let m = Meter::new(&Limits { max_string_bytes: 4, ..Limits::default() });
        m.check_str("1234").unwrap();
        assert_eq!(m.check_str("12345").unwrap_err().attempted, Some(5));
    }
}
