//! What the user sees while a run goes: on a terminal, a spinner naming the
//! current action with log lines printed above it; otherwise plain lines on
//! stderr. Quiet mode shows neither (for `--json` and scripts).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::db::LogRecord;

#[derive(Clone)]
pub struct Ui {
    inner: Arc<Inner>,
    /// The policy's own status line (`log.progress`), shown before the current action.
    stage: Arc<Mutex<String>>,
}

enum Inner {
    Spinner(ProgressBar),
    Plain,
    Quiet,
}

impl Ui {
    /// A spinner when stderr is a terminal (and not in CI), plain lines otherwise.
    pub fn detect(quiet: bool) -> Ui {
        let inner = if quiet {
            Inner::Quiet
        } else if std::io::stderr().is_terminal() && std::env::var_os("CI").is_none() {
            let pb = ProgressBar::new_spinner();
            pb.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .expect("valid template"),
            );
            pb.enable_steady_tick(Duration::from_millis(100));
            Inner::Spinner(pb)
        } else {
            Inner::Plain
        };
        Ui {
            inner: Arc::new(inner),
            stage: Arc::default(),
        }
    }

    pub fn quiet() -> Ui {
        Ui {
            inner: Arc::new(Inner::Quiet),
            stage: Arc::default(),
        }
    }

    /// What is happening now (the current action).
    pub fn status(&self, msg: impl Into<String>) {
        let msg = msg.into();
        match &*self.inner {
            Inner::Spinner(pb) => {
                let stage = self.stage.lock().map(|s| s.clone()).unwrap_or_default();
                pb.set_message(if stage.is_empty() {
                    msg
                } else {
                    format!("{stage} — {msg}")
                })
            }
            Inner::Plain => crate::errln!("loopbox: {msg}"),
            Inner::Quiet => {}
        }
    }

    /// The policy's status line: kept in front of the spinner's message, or
    /// printed once per change when there is no terminal.
    pub fn stage(&self, msg: &str) {
        let msg = sanitize(msg).replace('\n', " ");
        let changed = match self.stage.lock() {
            Ok(mut s) if *s != msg => {
                *s = msg.clone();
                true
            }
            _ => false,
        };
        match &*self.inner {
            Inner::Spinner(pb) => pb.set_message(msg),
            Inner::Plain if changed => crate::errln!("loopbox: {msg}"),
            _ => {}
        }
    }

    /// A line that stays.
    pub fn line(&self, msg: impl AsRef<str>) {
        match &*self.inner {
            Inner::Spinner(pb) => pb.println(msg.as_ref()),
            Inner::Plain => crate::errln!("{}", msg.as_ref()),
            Inner::Quiet => {}
        }
    }

    pub fn log(&self, r: &LogRecord) {
        if !matches!(*self.inner, Inner::Quiet) {
            self.line(format!(
                "  [{}] {}: {}",
                r.source,
                r.level,
                sanitize(&r.message)
            ));
        }
    }

    /// Run `f` with the spinner hidden (for prompting the user).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &*self.inner {
            Inner::Spinner(pb) => pb.suspend(f),
            _ => f(),
        }
    }

    pub fn finish(&self) {
        if let Inner::Spinner(pb) = &*self.inner {
            pb.finish_and_clear();
        }
    }
}

/// Year, month, day, hour, minute, second and millisecond (UTC) of a Unix time in ms.
fn civil(ms: i64) -> (i64, i64, i64, i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000),
    )
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn utc(ms: i64) -> String {
    let (y, m, d, h, min, s, _) = civil(ms);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}")
}

/// A Unix time in ms as RFC 3339 in UTC, to the millisecond, for `--json`:
/// `2026-11-21T05:33:28.120Z`.
pub fn rfc3339(ms: i64) -> String {
    let (y, m, d, h, min, s, milli) = civil(ms);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// Policy text shown on a terminal: control characters and escape sequences
/// removed, so a policy cannot rewrite what the user sees.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '\n' || c == '\t' || !c.is_control() {
                c
            } else {
                '\u{FFFD}'
            }
        })
        .collect()
}

/// `s` cut to `max` characters, saying how long it was.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}… ({} bytes)", s.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_795_239_208_000), "2026-11-21 05:33:28");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(
            super::rfc3339(1_795_239_208_120),
            "2026-11-21T05:33:28.120Z"
        );
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn escapes_are_neutralized() {
        assert_eq!(
            super::sanitize("a\x1b[2Kb\rc\nd"),
            "a\u{FFFD}[2Kb\u{FFFD}c\nd"
        );
    }
}
