//! `idle_timeout` / `default_idle_timeout` for shell actions: an action that
//! prints no line (on stdout or stderr) for that many seconds is ended, exit
//! 124, as little-loops 1.167 ends it (`fsm/runners.py`, FEAT-3033: the
//! executor reads line by line and kills the process group after the
//! silence; the verdict is `error` and `${prev.timeout_kind}` is `idle`).
//!
//! The contract's script request has a wall-clock limit only, so the watch
//! runs in the action's own bash: [`wrap`] writes the action into a small
//! bash program that runs it as a child, passes each line of its output on
//! as it comes, and on a silence that long sends TERM to the action's process
//! group (the host runs each action as a group of its own, and kills what is
//! left in it when the program exits), writes [`MARKER`] on stderr and exits
//! 124. [`read`] turns that back into little-loops' result. The host's grant
//! check, sandbox and wall-clock limit apply to the wrapped program as to any
//! shell action.

use crate::interp::shell_quote;
use crate::machine::Out;

/// The line the wrapper writes on stderr when it ended a silent action.
pub const MARKER: &str = "loopbox: idle_timeout: the action printed no line for";

/// What little-loops' stderr says after an idle kill when the action wrote none.
const NO_STDERR: &str = "Action idle-timed out";

/// `source` as a bash program that ends it after `secs` seconds without a
/// line of output. Lines pass through unchanged (a last line without a
/// newline too); a partial line does not count as output until its newline,
/// as little-loops' `readline` reads it. The action's stdin is empty, as the
/// host gives a script none.
pub fn wrap(source: &str, secs: u64) -> String {
    // The action's text is the first line, so the host's log names it.
    format!(
        r#"__lb_src={src}
# The beats of both relays go through one pipe (a `cat` coprocess), which the
# loop below reads with a timeout; it ends when the action's output is closed.
exec 3>&1 4>&2
coproc __LB_BEAT {{ cat; }}
exec 7>&"${{__LB_BEAT[1]}}" 8<&"${{__LB_BEAT[0]}}"
__lb_relay() {{
  local l
  while IFS= read -r l; do printf '%s\n' "$l" >&"$1"; echo >&7; done
  if [ -n "$l" ]; then printf '%s' "$l" >&"$1"; echo >&7; fi
}}
bash -c "$__lb_src" > >(__lb_relay 3) 2> >(__lb_relay 4) 3>&- 4>&- 7>&- 8>&- &
__lb_pid=$!
exec 7>&- {{__LB_BEAT[1]}}>&-
while :; do
  IFS= read -r -t {secs} -u 8 _
  __lb_rc=$?
  [ "$__lb_rc" = 0 ] || break
done
if [ "$__lb_rc" -gt 128 ]; then
  trap '' TERM
  kill -TERM 0
  echo "{MARKER} {secs} s" >&4
  exit 124
fi
wait "$__lb_pid"
"#,
        src = shell_quote(source),
    )
}

/// The result of a wrapped action as little-loops reports it: after an idle
/// kill, `idle` set, the marker gone from stderr, and little-loops' text in
/// its place when the action wrote no stderr of its own.
pub fn read(out: &mut Out) {
    if out.timed_out || out.exit_code != Some(124) {
        return;
    }
    let Some(at) = out.stderr.rfind(MARKER) else {
        return;
    };
    // Only a marker that is the last line is the wrapper's.
    let after = &out.stderr[at..];
    if after.trim_end().contains('\n') || (at > 0 && !out.stderr[..at].ends_with('\n')) {
        return;
    }
    out.stderr.truncate(at);
    if out.stderr.is_empty() {
        out.stderr = NO_STDERR.to_string();
    }
    out.idle = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(code: i32, stderr: &str) -> Out {
        Out {
            exit_code: Some(code),
            stderr: stderr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_idle_kill_reads_as_little_loops_reports_it() {
        let mut o = out(124, &format!("{MARKER} 5 s\n"));
        read(&mut o);
        assert!(o.idle);
        assert_eq!((o.stderr.as_str(), o.code()), (NO_STDERR, 124));
        let mut o = out(124, &format!("warming up\n{MARKER} 5 s\n"));
        read(&mut o);
        assert!(o.idle);
        assert_eq!(o.stderr, "warming up\n");
    }

    #[test]
    fn anything_else_is_left_as_it_is() {
        for (code, stderr) in [
            (124, "plain timeout\n".to_string()),
            (1, format!("{MARKER} 5 s\n")),
            (124, format!("{MARKER} 5 s\nmore after it\n")),
            (124, format!("quoted: {MARKER} 5 s\n")),
        ] {
            let mut o = out(code, &stderr);
            read(&mut o);
            assert!(!o.idle, "{code} {stderr:?}");
            assert_eq!(o.stderr, stderr);
        }
    }

    #[test]
    fn the_action_is_quoted_whole_into_the_wrapper() {
        let w = wrap("echo \"it's\" $HOME; exit 3", 7);
        assert!(
            w.starts_with("__lb_src='echo \"it'\"'\"'s\" $HOME; exit 3'\n"),
            "{w}"
        );
        assert!(w.contains("read -r -t 7 -u 8 _"));
        assert!(w.contains(&format!("echo \"{MARKER} 7 s\" >&4")));
    }
}
