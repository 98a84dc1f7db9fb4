//! Which process drives a run. A standalone run's row holds its driver's
//! identity (host, pid and the process's start time, so a reused pid is not
//! mistaken for the driver); a second process finds the driver alive and
//! refuses, or finds it gone and may take the run over.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    /// Clock ticks since boot when the process started (/proc/PID/stat field 22).
    pub started: u64,
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            host: hostname(),
            pid,
            started: start_time(pid).unwrap_or(0),
        }
    }

    /// The live process `pid`.
    #[cfg(test)]
    pub fn of(pid: u32) -> Option<Owner> {
        Some(Owner {
            host: hostname(),
            pid,
            started: start_time(pid)?,
        })
    }

    pub fn parse(text: &str) -> Option<Owner> {
        let mut parts = text.rsplitn(3, ' ');
        let started = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        Some(Owner {
            host: parts.next()?.to_string(),
            pid,
            started,
        })
    }

    /// Whether the process still runs. On another host this cannot be known,
    /// so it counts as alive.
    pub fn is_alive(&self) -> bool {
        if self.host != hostname() {
            return true;
        }
        start_time(self.pid).is_some_and(|s| s == self.started)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.host, self.pid, self.started)
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The start time of a live process, from /proc.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let state = rest.split(' ').next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    rest.split(' ').nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_finished_one_is_not() {
        let me = Owner::me();
        assert!(me.started > 0);
        assert!(me.is_alive());
        assert_eq!(Owner::parse(&me.to_string()), Some(me.clone()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!Owner { pid, ..me.clone() }.is_alive());
        // The same pid with another start time is another process.
        assert!(
            !Owner {
                started: me.started + 1,
                ..me
            }
            .is_alive()
        );
    }

    #[test]
    fn an_owner_on_another_host_counts_as_alive() {
        let o = Owner::parse("elsewhere 1 1").unwrap();
        assert!(o.is_alive());
        assert_eq!(Owner::parse("nonsense"), None);
    }
}
