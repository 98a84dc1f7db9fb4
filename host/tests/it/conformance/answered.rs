//! little-loops 1.167's `human_approval` answered by a person: each trace of
//! `traces-1.167.json` with an `answer` (the lines `record.py` typed on
//! little-loops' terminal, a pty) is answered the same way at `loopbox run`'s
//! terminal (a pty here too), and with `loopbox runs approve|deny|answer`
//! from another process (the server's API: `serve::approval`); each run must
//! take the path little-loops took and exit as it exited.
//!
//! An empty answer (nobody typed, so the state's `timeout` ran out) is a `y`
//! given after the deadline: a loopbox run waits for its answer (the `ask`
//! of the released contract has no deadline), and one that comes too late
//! takes the `timeout` route.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::traces;
use crate::common::*;

/// One answered trace.
#[derive(Clone)]
pub struct Answered {
    pub loop_file: String,
    /// The lines typed, as recorded.
    pub answer: String,
    pub path: Vec<String>,
    pub exit_code: i32,
}

/// The answered traces of little-loops 1.167.
pub fn answered() -> Vec<Answered> {
    let all = traces("traces-1.167.json", "1.167.0");
    let v: Vec<Answered> = all
        .iter()
        .filter(|t| t["answer"].is_string())
        .map(|t| Answered {
            loop_file: t["loop"].as_str().unwrap().to_string(),
            answer: t["answer"].as_str().unwrap().to_string(),
            path: t["path"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect(),
            exit_code: t["exit_code"].as_i64().unwrap() as i32,
        })
        .collect();
    // approve, reject, edit and timeout.
    assert_eq!(v.len(), 4, "the answered traces");
    v
}

/// How long past a state's deadline a late answer comes (the loops wait 2 s).
pub const LATE: Duration = Duration::from_millis(2500);

/// `(lines, late)`: the lines a recorded answer is typed as, and whether
/// they come after the deadline (nobody answered in time).
pub fn lines(answer: &str) -> (Vec<String>, bool) {
    if answer.is_empty() {
        (vec!["y".into()], true)
    } else {
        (answer.lines().map(String::from).collect(), false)
    }
}

/// The path of the last run in `dir`'s store, and the run as shown.
fn last_run(dir: &Path) -> (Vec<String>, String) {
    let o = loopbox(dir, &["runs", "--json"]);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let id = list[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run listed: {}", String::from_utf8_lossy(&o.stdout)))
        .to_string();
    let o = loopbox(dir, &["runs", "show", &id, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let path = v["outcome"]["data"]["path"]
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    (path, v.to_string())
}

/// A new pty: (the side a person types on, the run's terminal).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors it opened into the two ints; the
    // name, termios and winsize pointers may be null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned here only.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(master)),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// `loopbox run LOOP` at a terminal, the answer typed on it: its exit code,
/// and what it printed.
fn at_terminal(dir: &Path, loop_file: &str, answer: &str) -> (i32, String) {
    let (mut person, terminal) = pty();
    let file = format!(".loops/{loop_file}");
    let child = trusted_command(dir)
        .arg("-C")
        .arg(dir)
        .args(["run", &file, "--little-loops", "1.167.0"])
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        // A person at a terminal: not CI.
        .env_remove("CI")
        .current_dir(dir)
        .stdin(Stdio::from(terminal))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (typed, late) = lines(answer);
    if late {
        std::thread::sleep(LATE);
    }
    for l in typed {
        person.write_all(format!("{l}\n").as_bytes()).unwrap();
    }
    // A run still asking after a minute is killed (it waits for an answer
    // it could not read).
    let (o, _) = crate::common::wait_or_kill(child, Duration::from_secs(60));
    drop(person);
    (
        code(&o),
        format!(
            "stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// `loopbox run LOOP --json` parks on the question (no terminal, and the
/// config waits); another `loopbox` answers it: `runs approve` for a yes,
/// `runs deny --reason` for a no, `runs answer` for the rest.
fn from_elsewhere(dir: &Path, loop_file: &str, answer: &str) -> (Vec<String>, i32, String) {
    let file = format!(".loops/{loop_file}");
    let o = loopbox(dir, &["run", &file, "--json", "--little-loops", "1.167.0"]);
    let parked: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(
        (code(&o), parked["status"].as_str()),
        (4, Some("waiting")),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        parked["summary"]
            .as_str()
            .unwrap()
            .contains("Human approval requested"),
        "{parked}"
    );
    let id = parked["run_id"].as_str().unwrap().to_string();
    let (typed, late) = lines(answer);
    if late {
        std::thread::sleep(LATE);
    }
    let mut last = None;
    for l in &typed {
        let args: Vec<&str> = match l.split_once(' ') {
            _ if l == "y" => vec!["runs", "approve", &id, "--json"],
            Some(("n", reason)) => vec!["runs", "deny", &id, "--reason", reason, "--json"],
            _ => vec!["runs", "answer", &id, l, "--json"],
        };
        last = Some(loopbox(dir, &args));
    }
    let o = last.unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let path = v["outcome"]["data"]["path"]
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    (
        path,
        code(&o),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn human_approval_answered_at_the_terminal_and_from_elsewhere_routes_as_little_loops() {
    let mut failures = vec![];
    for t in answered() {
        let label = format!("{} (answer {:?})", t.loop_file, t.answer);
        // (a) At the terminal.
        let dir = conformance_workspace();
        let (exit, printed) = at_terminal(dir.path(), &t.loop_file, &t.answer);
        let (path, shown) = last_run(dir.path());
        if path != t.path || exit != t.exit_code {
            failures.push(format!(
                "{label} at the terminal: little-loops went {:?} (exit {}); loopbox went {path:?} (exit {exit})\n{printed}\n{shown}",
                t.path, t.exit_code
            ));
        }
        // (b) From another process, the run parked in between.
        let dir = conformance_workspace();
        let config = dir.path().join("loopbox.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace(HEADLESS, "")).unwrap();
        let (path, exit, printed) = from_elsewhere(dir.path(), &t.loop_file, &t.answer);
        if path != t.path || exit != t.exit_code {
            failures.push(format!(
                "{label} with `loopbox runs`: little-loops went {:?} (exit {}); loopbox went {path:?} (exit {exit})\n{printed}",
                t.path, t.exit_code
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
