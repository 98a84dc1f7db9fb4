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

    /// What is happening now (the current action), on one line.
    pub fn status(&self, msg: impl Into<String>) {
        let msg = one_line(&msg.into());
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
        let msg = one_line(msg);
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

    /// A line that stays. It may quote a policy's words, so it is shown as
    /// [`Untrusted`] text: escaped, and any line after the first indented.
    pub fn line(&self, msg: impl AsRef<str>) {
        let msg = Untrusted(msg.as_ref());
        match &*self.inner {
            Inner::Spinner(pb) => pb.println(msg.to_string()),
            Inner::Plain => crate::errln!("{msg}"),
            Inner::Quiet => {}
        }
    }

    /// A run log line: `  [SOURCE] LEVEL: MESSAGE`, the message's own lines
    /// indented under it (see [`Untrusted`]).
    pub fn log(&self, r: &LogRecord) {
        if !matches!(*self.inner, Inner::Quiet) {
            self.line(format!(
                "  [{}] {}: {}",
                one_line(&r.source),
                one_line(&r.level),
                r.message
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

/// What starts each continuation line of [`Untrusted`] text: an indent and a
/// bar, so a line of someone else's text never starts where a line of loopbox's does.
pub const CONTINUED: &str = "  │ ";

/// Text loopbox did not write (a policy's name, log line, summary or error; a
/// registry's answer; a loop file's words; an agent's output), as shown on a
/// terminal. This is the one output layer all such text goes through:
///
/// - C0 and C1 control characters, DEL, and the Unicode controls that reorder or
///   hide text (bidi embeddings, overrides and isolates, the marks, line and
///   paragraph separators, zero-width and tag characters) are shown as escapes
///   (`\x1b`, `\u{202e}`), so nothing reaches the terminal as a command: no
///   title, no clipboard write, no cleared screen, no text reversed;
/// - each line after the first starts with [`CONTINUED`], so a newline cannot
///   forge a line that looks like loopbox's own (`[host] ...`, `done: ...`).
///
/// Trailing newlines are dropped. `--json` output needs none of this: serde_json
/// escapes control characters itself.
#[derive(Debug, Clone, Copy)]
pub struct Untrusted<'a>(pub &'a str);

impl std::fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.trim_end_matches(['\n', '\r']);
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                f.write_str("\n")?;
                // No trailing blank after the bar on an empty line.
                f.write_str(if line.is_empty() {
                    CONTINUED.trim_end()
                } else {
                    CONTINUED
                })?;
            }
            write_escaped(f, line)?;
        }
        Ok(())
    }
}

/// [`Untrusted`] as a `String`: escaped, continuation lines indented.
pub fn shown(s: &str) -> String {
    Untrusted(s).to_string()
}

/// Untrusted text kept to one line (a spinner, a table cell): escaped as
/// [`Untrusted`] is, with a newline shown as `\n`.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let _ = write_escaped(&mut out, s);
    out
}

/// Untrusted text escaped as [`Untrusted`] does, newlines kept as they are: for
/// text that is put into a longer message, which then goes out through
/// [`Untrusted`] (or [`Ui`]) as a whole. Escaping twice changes nothing.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = write_escaped(&mut out, line);
    }
    out
}

/// Whether `c` is shown as an escape: a control character, or a Unicode format
/// character that reorders, hides or breaks text on a terminal.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061C}'                      // Arabic letter mark
            | '\u{200B}'                    // zero-width space
            | '\u{200E}' | '\u{200F}'        // left-to-right and right-to-left marks
            | '\u{2028}'..='\u{202E}'        // line and paragraph separators; bidi embeddings and overrides
            | '\u{2060}'..='\u{2069}'        // word joiner, invisible operators; bidi isolates
            | '\u{FEFF}'                    // zero-width no-break space (byte order mark)
            | '\u{FFF9}'..='\u{FFFB}'        // interlinear annotations
            | '\u{E0000}'..='\u{E007F}'      // tag characters (invisible text)
        )
}

/// `s` with every [`is_hidden`] character written as an escape.
fn write_escaped(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    let mut rest = s;
    while let Some(at) = rest.find(is_hidden) {
        out.write_str(&rest[..at])?;
        let Some(c) = rest[at..].chars().next() else {
            break;
        };
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32)?,
            c => write!(out, "\\u{{{:x}}}", c as u32)?,
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.write_str(rest)
}

/// `s` cut to `max` characters, saying how long it was.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}… ({} bytes)", s.len())
}

/// The URL of the server this process serves, set once at its start by
/// `loopbox serve` or a `loopbox worker` (`serve::url`); a `loopbox run`
/// process never sets it.
static SERVER_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Set this process's server URL (the first call wins).
pub fn set_server_url(url: String) {
    let _ = SERVER_URL.set(url);
}

/// This process's server URL, if it serves.
pub fn server_url() -> Option<&'static str> {
    SERVER_URL.get().map(String::as_str)
}

/// `loopbox runs ARGS`, with ` --server URL` when this process serves: the
/// command a person runs to act on one of its runs, as the run's log and
/// messages print it, so that it works as printed.
pub fn runs_command(args: &str) -> String {
    runs_command_at(server_url(), args)
}

/// `loopbox runs ARGS` for the server at `url` (none: a workspace's own runs).
pub fn runs_command_at(url: Option<&str>, args: &str) -> String {
    match url {
        Some(u) => format!("loopbox runs {args} --server {u}"),
        None => format!("loopbox runs {args}"),
    }
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
        assert_eq!(super::sanitize("a\x1b[2Kb\rc\nd"), "a\\x1b[2Kb\\rc\nd");
    }

    #[test]
    fn untrusted_text_is_shown_escaped_with_its_lines_indented() {
        use super::{Untrusted, one_line, sanitize, shown};
        // OSC title, OSC 52 clipboard write, clear screen, C1 CSI, DEL, tab.
        assert_eq!(
            shown("\x1b]0;owned\x07\x1b]52;c;ZWNobw==\x07\x1b[2J\u{9b}2J\x7f\t."),
            "\\x1b]0;owned\\x07\\x1b]52;c;ZWNobw==\\x07\\x1b[2J\\u{9b}2J\\x7f\\t."
        );
        // Every bidi control, the marks, and invisible characters.
        for c in [
            '\u{202A}',
            '\u{202B}',
            '\u{202C}',
            '\u{202D}',
            '\u{202E}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200E}',
            '\u{200F}',
            '\u{061C}',
            '\u{2028}',
            '\u{2029}',
            '\u{200B}',
            '\u{FEFF}',
            '\u{E0041}',
        ] {
            let text = format!("a{c}b");
            let want = format!("a\\u{{{:x}}}b", c as u32);
            assert_eq!(shown(&text), want);
            assert_eq!(one_line(&text), want);
            assert_eq!(sanitize(&text), want);
        }
        // A newline cannot start a line of loopbox's own.
        assert_eq!(
            format!("done: {}", Untrusted("ok\ndone: forged\r\n\n[host] x\n\n")),
            "done: ok\n  │ done: forged\\r\n  │\n  │ [host] x"
        );
        assert_eq!(one_line("a\nb\r"), "a\\nb\\r");
        // Text that is fine stays as it is; escaping twice changes nothing.
        let plain = "naïve café — 日本語 ✓ \\ 'quoted' \u{200D}";
        assert_eq!(shown(plain), plain);
        let once = sanitize("\x1b[31m\u{202e}x\ny");
        assert_eq!(sanitize(&once), once);
        assert_eq!(shown(&once), shown("\x1b[31m\u{202e}x\ny"));
    }
}
