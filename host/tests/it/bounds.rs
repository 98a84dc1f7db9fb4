//! No policy can hang loopbox or grow its memory and store without a limit
//! that names itself, and many runs share a workspace safely. Hostile guests
//! (the `probe` doing what its input says, `stall` which never answers)
//! through the real binary; every child has a deadline, so a regression is a
//! failure, not a hung test run. Peak memory is the child's own (`wait4`).

use crate::common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::BIN;
use serde_json::{Value, json};

/// Longer than any bound under test, far shorter than a hang.
const DEADLINE: Duration = Duration::from_secs(60);

fn guest(name: &str) -> String {
    static BUILT: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        loopbox_guest_build::Repo::containing(&common::repo())
            .build_rust_guests(&["probe", "stall"])
    });
    built
        .iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1
        .to_string_lossy()
        .into_owned()
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = common::trusted_command(dir);
    c.arg("-C")
        .arg(dir)
        .args(args)
        .current_dir(dir)
        .env("CI", "true")
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-bounds-test-cache"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    /// Peak resident memory, KiB.
    max_rss_kb: i64,
    took: Duration,
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Wait for `child` (up to [`DEADLINE`]), with its output and its own peak memory.
fn finish(mut child: Child) -> Ran {
    let started = Instant::now();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let pid = child.id() as libc::pid_t;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child, with pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (std::process::ExitStatus::from_raw(status), usage);
        }
        assert!(r == 0, "wait4 failed: {}", std::io::Error::last_os_error());
        if started.elapsed() > DEADLINE {
            child.kill().ok();
            panic!("loopbox did not finish within {DEADLINE:?}: it hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ran {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        max_rss_kb: usage.ru_maxrss,
        took: started.elapsed(),
    }
}

/// Start loopbox with `stdin` (a hook's input) written to it.
fn spawn_with_stdin(dir: &Path, args: &[&str], stdin: &Value) -> Child {
    let mut child = command(dir, args).stdin(Stdio::piped()).spawn().unwrap();
    // A command that exits before reading its stdin closes the pipe: its exit says why.
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        stdin.to_string().as_bytes(),
    )
    .ok();
    child
}

fn loopbox(dir: &Path, args: &[&str]) -> Ran {
    finish(command(dir, args).spawn().unwrap())
}

fn probe_run(dir: &Path, op: Value) -> Ran {
    loopbox(dir, &["run", &guest("probe"), "--input", &op.to_string()])
}

fn workspace(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    dir
}

fn store_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join(".loopbox"))
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn runs_json(dir: &Path) -> Vec<Value> {
    let r = loopbox(dir, &["runs", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    serde_json::from_str(&r.stdout).unwrap()
}

/// What the probe observed, from a `run --json` report.
fn outcome_data(report: &Value) -> Value {
    let d = &report["outcome"]["data"];
    d.as_str()
        .map_or_else(|| d.clone(), |s| serde_json::from_str(s).unwrap())
}

const WALL_500: &str = "[limits]\nwall_ms_per_event = 500\n";

// --- Hangs -----------------------------------------------------------------

#[test]
fn a_guest_that_sleeps_in_the_host_is_stopped_by_the_wall_limit() {
    let dir = workspace(WALL_500);
    let r = probe_run(dir.path(), json!({"op": "sleep"}));
    assert_eq!(r.code, 5, "{r:?}");
    assert!(
        r.stdout.starts_with(
            "failed: policy ran or waited past its wall-clock time for one event (limits.wall_ms_per_event = 500); raise it in loopbox.toml if the policy needs more"
        ),
        "{r:?}"
    );
    // A short sleep within the bound is fine, and action time never counts.
    let r = probe_run(dir.path(), json!({"op": "sleep", "ms": 50}));
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_decider_that_never_answers_is_bounded_in_run_inspect_and_hook() {
    let dir = workspace(WALL_500);
    let stall = guest("stall");
    let r = loopbox(dir.path(), &["run", &stall]);
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stdout.contains("limits.wall_ms_per_event = 500"), "{r:?}");
    assert!(r.stderr.contains("(world decider)"), "{r:?}");

    // inspect runs info(), which sleeps forever: it reports it and finishes.
    let r = loopbox(dir.path(), &["inspect", &stall, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v["info_error"]
            .as_str()
            .unwrap()
            .contains("limits.wall_ms_per_event = 500"),
        "{v}"
    );
    // Its throwaway in-memory store leaves no file behind.
    assert!(!dir.path().join(":memory:").exists());

    // The hook gives up within the bound and lets the agent continue.
    let input = json!({"session_id": "s", "cwd": dir.path(), "hook_event_name": "Stop", "stop_hook_active": false, "last_assistant_message": "hi"});
    let r = finish(spawn_with_stdin(
        dir.path(),
        &["hook", "claude-code", "--policy", &stall],
        &input,
    ));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("limits.wall_ms_per_event = 500"), "{r:?}");
}

#[test]
fn fifos_in_the_workspace_and_as_a_transcript_are_refused_not_waited_on() {
    let dir = workspace("");
    mkfifo(&dir.path().join("pipe"));
    let r = loopbox(
        dir.path(),
        &[
            "run",
            &guest("probe"),
            "--input",
            r#"{"op": "read", "path": "pipe"}"#,
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let data = outcome_data(&v);
    assert_eq!(
        data["err"],
        "`pipe` is a FIFO (named pipe), not a regular file; only regular files can be read"
    );

    let input = json!({
        "session_id": "s", "cwd": dir.path(), "hook_event_name": "Stop", "stop_hook_active": false,
        "transcript_path": dir.path().join("pipe"),
    });
    let r = finish(spawn_with_stdin(
        dir.path(),
        &[
            "hook",
            "claude-code",
            "--policy",
            "builtin:ralph",
            "--input",
            r#"{"prompt": "go"}"#,
        ],
        &input,
    ));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("it is a FIFO (named pipe), not a regular file"),
        "{r:?}"
    );
}

#[test]
fn devices_given_as_files_are_refused_with_what_they_are() {
    let dir = workspace("");
    let zero = "/dev/zero";
    let cases: [(&[&str], &str); 4] = [
        (
            &["validate", zero],
            "loop `/dev/zero` cannot be read: it is a character device, not a regular file",
        ),
        (
            &["run", "builtin:ralph", "--input", "@/dev/zero"],
            "--input @ `/dev/zero` cannot be read: it is a character device, not a regular file",
        ),
        (
            &["run", "builtin:ralph", "--config", zero],
            "config `/dev/zero` cannot be read: it is a character device, not a regular file",
        ),
        (
            &[
                "hook",
                "claude-code",
                "--policy",
                "builtin:ralph",
                "--input",
                "@/dev/zero",
            ],
            "it is a character device, not a regular file",
        ),
    ];
    for (args, message) in cases {
        let stdin = json!({"session_id": "s", "cwd": dir.path(), "hook_event_name": "Stop", "last_assistant_message": "x"});
        let r = finish(spawn_with_stdin(dir.path(), args, &stdin));
        assert_ne!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stderr.contains(message), "{args:?}: {r:?}");
        assert!(r.max_rss_kb < 200 << 10, "{args:?}: {} KiB", r.max_rss_kb);
    }
}

// --- Growth ------------------------------------------------------------------

#[test]
fn a_clock_flood_is_stopped_at_the_host_call_limit_with_memory_and_store_bounded() {
    let dir = workspace("");
    let r = probe_run(dir.path(), json!({"op": "clocks"}));
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stdout.starts_with("failed: policy made too many host calls in one event (limits.host_calls_per_event = 10000)"), "{r:?}");
    let store = store_bytes(dir.path());
    eprintln!(
        "clock flood under default limits: peak RSS {} KiB, store {store} bytes, {:?}",
        r.max_rss_kb, r.took
    );
    assert!(r.max_rss_kb < 300 << 10, "peak RSS {} KiB", r.max_rss_kb);
    assert!(store < 8 << 20, "store {store} bytes");
}

#[test]
fn rereading_a_large_file_is_stopped_at_the_journal_limit_with_memory_and_store_bounded() {
    let dir = workspace("");
    // 4 MiB: the largest read limits.read_bytes allows by default.
    std::fs::write(dir.path().join("big.txt"), "x".repeat(4 << 20)).unwrap();
    let r = probe_run(
        dir.path(),
        json!({"op": "read_many", "path": "big.txt", "count": 1000}),
    );
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stdout.starts_with("failed: policy recorded more host-call journal than one event may (limits.journal_bytes_per_event = 33554432"), "{r:?}");
    let store = store_bytes(dir.path());
    eprintln!(
        "read flood under default limits: peak RSS {} KiB, store {store} bytes, {:?}",
        r.max_rss_kb, r.took
    );
    assert!(r.max_rss_kb < 600 << 10, "peak RSS {} KiB", r.max_rss_kb);
    assert!(store < 80 << 20, "store {store} bytes");

    // The run's budget holds across events: a call is refused once the budget is
    // reached, so with 8 MB per run the third 4 MiB read (in the third event) is.
    let dir =
        workspace("[limits]\njournal_bytes_per_event = 5000000\njournal_bytes_per_run = 8000000\n");
    std::fs::write(dir.path().join("big.txt"), "x".repeat(4 << 20)).unwrap();
    let probe = guest("probe");
    let op = json!({"op": "read_many", "path": "big.txt", "count": 1, "then": "pass"}).to_string();
    let r = loopbox(
        dir.path(),
        &["run", &probe, "--input", &op, "--tick", &op, "--tick", &op],
    );
    assert_eq!(r.code, 5, "{r:?}");
    assert!(
        r.stdout.contains("(limits.journal_bytes_per_run = 8000000"),
        "{r:?}"
    );
}

#[test]
fn a_policy_sleeping_until_a_past_time_is_stopped_at_the_wake_limit() {
    // Every later event is answered by `answer`: sleep until 1 ms after the
    // epoch, a timer always due, which woke the run at once, forever.
    let again = json!({"op": "echo", "then": "sleep", "until_ms": 1, "tick": "again"});
    let op = json!({"op": "state", "set": {"answer": again}, "then": "sleep", "until_ms": 1});
    let dir = workspace("[limits]\nwakes_per_run = 5\n");
    let r = probe_run(dir.path(), op);
    assert_eq!(r.code, 5, "{r:?}");
    assert!(
        r.stdout.starts_with("failed: policy slept (a timer that wakes the run) more times than one run may (limits.wakes_per_run = 5"),
        "{r:?}"
    );
    // The start and five ticks: the sixth sleep ended the run.
    let runs = runs_json(dir.path());
    assert_eq!(runs[0]["status"], "failed", "{runs:?}");
    let show = loopbox(
        dir.path(),
        &["runs", "show", runs[0]["id"].as_str().unwrap(), "--json"],
    );
    let events: Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 6, "{show:?}");
}

// --- Stopping ----------------------------------------------------------------

fn wait_for_status(dir: &Path, status: &str) -> String {
    let started = Instant::now();
    loop {
        if dir.join(".loopbox/loopbox.db").exists()
            && let Some(r) = runs_json(dir).into_iter().find(|r| r["status"] == status)
        {
            return r["id"].as_str().unwrap().to_string();
        }
        assert!(started.elapsed() < DEADLINE, "no run became {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn runs_cancel_stops_a_guest_waiting_in_the_host() {
    let dir = workspace("");
    let child = command(
        dir.path(),
        &["run", &guest("probe"), "--input", r#"{"op": "sleep"}"#],
    )
    .spawn()
    .unwrap();
    let id = wait_for_status(dir.path(), "running");
    let c = loopbox(dir.path(), &["runs", "cancel", &id, "--json"]);
    assert_eq!(c.code, 0, "{c:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&c.stdout).unwrap(),
        json!({"run_id": id, "status": "cancelled"})
    );
    let r = finish(child);
    assert_eq!(r.code, 8, "{r:?}");
    assert!(
        r.stdout.starts_with("cancelled: the run was cancelled"),
        "{r:?}"
    );
    // Well before the 10 s wall bound: the request reached the waiting guest.
    assert!(r.took < Duration::from_secs(8), "{r:?}");
}

fn sleeper(dir: &Path, extra: &[&str]) -> Child {
    let op = json!({"op": "exec", "argv": ["sleep", "30"]}).to_string();
    let mut args = vec!["run", guest("probe").leak() as &str, "--input", op.leak()];
    args.extend_from_slice(extra);
    command(dir, &args).spawn().unwrap()
}

const SLEEP_ALLOWED: &str = "[shell]\nallow = [[\"sleep\"]]\nsandbox = \"none\"\n";

#[test]
fn sigint_stops_the_run_where_it_stands_and_it_resumes() {
    let dir = workspace(SLEEP_ALLOWED);
    let child = sleeper(dir.path(), &[]);
    let id = wait_for_status(dir.path(), "running");
    // The action has started once its intent is journaled (and counted).
    let started = Instant::now();
    while runs_json(dir.path())[0]["actions"] != 1 {
        assert!(started.elapsed() < DEADLINE, "the action never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let r = finish(child);
    assert_eq!(r.code, 130, "{r:?}");
    assert!(
        r.took < Duration::from_secs(20),
        "the 30 s action was stopped: {r:?}"
    );
    assert!(
        r.stdout
            .starts_with("interrupted: loopbox was interrupted (SIGINT or SIGTERM)"),
        "{r:?}"
    );
    assert!(
        r.stderr
            .contains(&format!("resume it with `loopbox runs resume {id}`")),
        "{r:?}"
    );
    let show = loopbox(dir.path(), &["runs", "show", &id, "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&show.stdout).unwrap()["status"],
        "interrupted",
        "{show:?}"
    );

    // The action was cut off: on resume its outcome is unknown, and the policy hears so.
    let r = loopbox(dir.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let data = outcome_data(&v);
    assert_eq!(data["err"]["kind"], "outcome-unknown", "{v}");
}

#[test]
fn a_second_signal_ends_loopbox_at_once() {
    let dir = workspace(WALL_500.replace("500", "60000").as_str());
    let child = command(
        dir.path(),
        &["run", &guest("probe"), "--input", r#"{"op": "sleep"}"#],
    )
    .spawn()
    .unwrap();
    wait_for_status(dir.path(), "running");
    // A SIGTERM, then a SIGINT while the first is handled: the process exits at once either way.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(5));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let r = finish(child);
    assert_eq!(r.code, 130, "{r:?}");
    assert!(r.took < Duration::from_secs(20), "{r:?}");
}

// --- The store -----------------------------------------------------------------

#[test]
fn a_store_deleted_mid_run_is_not_reported_done() {
    let dir = workspace(SLEEP_ALLOWED);
    let op = json!({"op": "exec", "argv": ["sleep", "1"]}).to_string();
    let child = command(dir.path(), &["run", &guest("probe"), "--input", &op])
        .spawn()
        .unwrap();
    wait_for_status(dir.path(), "running");
    for f in ["loopbox.db", "loopbox.db-wal", "loopbox.db-shm"] {
        std::fs::remove_file(dir.path().join(".loopbox").join(f)).ok();
    }
    let r = finish(child);
    assert_eq!(r.code, 70, "{r:?}");
    assert!(!r.stdout.contains("done"), "{r:?}");
    assert!(
        r.stderr
            .contains("was deleted or replaced while loopbox was using it"),
        "{r:?}"
    );
}

#[test]
fn an_empty_store_is_an_error_not_a_fresh_start() {
    let dir = workspace("");
    std::fs::create_dir(dir.path().join(".loopbox")).unwrap();
    std::fs::write(dir.path().join(".loopbox/loopbox.db"), "").unwrap();
    for args in [
        &["runs"][..],
        &["run", "builtin:ralph", "--input", r#"{"prompt": "x"}"#],
    ] {
        let r = loopbox(dir.path(), args);
        assert_eq!(r.code, 70, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("the store is empty (0 bytes)")
                && r.stderr.contains(".empty`) to start a fresh store"),
            "{r:?}"
        );
    }
    assert_eq!(
        std::fs::metadata(dir.path().join(".loopbox/loopbox.db"))
            .unwrap()
            .len(),
        0,
        "nothing was written into it"
    );
}

// --- Concurrency -----------------------------------------------------------------

#[test]
fn twenty_runs_at_once_on_a_fresh_workspace_all_succeed() {
    let dir = workspace("");
    let probe = guest("probe");
    // Warm the component cache so the runs race on the store, not the compiler.
    assert_eq!(
        loopbox(tempfile::tempdir().unwrap().path(), &["inspect", &probe]).code,
        0
    );
    let started = Instant::now();
    let children: Vec<Child> = (0..20)
        .map(|i| {
            let op = json!({"op": "state", "set": {"i": i}, "get": ["i"]}).to_string();
            command(dir.path(), &["run", &probe, "--input", &op])
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<Ran> = children.into_iter().map(finish).collect();
    let took = started.elapsed();
    for r in &results {
        assert_eq!(r.code, 0, "{r:?}");
    }
    let runs = runs_json(dir.path());
    assert_eq!(runs.len(), 20);
    assert!(runs.iter().all(|r| r["status"] == "done"), "{runs:?}");
    eprintln!(
        "20 concurrent runs on one fresh workspace: {took:?}, {:.1} runs/s",
        20.0 / took.as_secs_f64()
    );
}

#[test]
fn forty_stop_hooks_at_once_for_one_session_are_counted_exactly() {
    let dir = workspace("");
    let input = json!({"session_id": "parallel", "cwd": dir.path(), "hook_event_name": "Stop", "stop_hook_active": true, "last_assistant_message": "not yet"});
    let start = r#"{"prompt": "go", "completion_promise": "DONE", "max_iterations": 100}"#;
    assert_eq!(
        loopbox(
            tempfile::tempdir().unwrap().path(),
            &["inspect", "builtin:ralph"]
        )
        .code,
        0
    );
    let started = Instant::now();
    let children: Vec<Child> = (0..40)
        .map(|_| {
            spawn_with_stdin(
                dir.path(),
                &[
                    "hook",
                    "claude-code",
                    "--policy",
                    "builtin:ralph",
                    "--input",
                    start,
                ],
                &input,
            )
        })
        .collect();
    let results: Vec<Ran> = children.into_iter().map(finish).collect();
    let took = started.elapsed();
    let mut iterations: Vec<u64> = results
        .iter()
        .map(|r| {
            assert_eq!(r.code, 0, "{r:?}");
            let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
            let reason = v["reason"].as_str().unwrap();
            let n = reason
                .rsplit("[ralph iteration ")
                .next()
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            n.parse().unwrap()
        })
        .collect();
    iterations.sort();
    // Each hook saw the state the one before it left: iterations 2..=41, each once.
    assert_eq!(iterations, (2..=41).collect::<Vec<u64>>());
    let runs = runs_json(dir.path());
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["turns"], 40, "{runs:?}");
    eprintln!(
        "40 concurrent Stop hooks on one session: {took:?}, {:.1} hooks/s",
        40.0 / took.as_secs_f64()
    );
}

// --- Smaller -------------------------------------------------------------------------

#[test]
fn closed_stdout_and_stderr_do_not_panic() {
    let dir = workspace("");
    let usual = loopbox(
        dir.path(),
        &["run", "builtin:ralph", "--input", r#"{"prompt": "x"}"#],
    )
    .code;
    for redirect in [">&-", "2>&-", ">&- 2>&-"] {
        let script = format!(
            "\"$0\" -C \"$1\" run builtin:ralph --input '{{\"prompt\": \"x\"}}' {redirect}; echo \"exit $?\" >&3"
        );
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!("exec 3>&1; {script}"))
            .arg(BIN)
            .arg(dir.path())
            .env("CI", "true")
            .env("XDG_DATA_HOME", common::data_home())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            !out.contains("exit 101"),
            "{redirect}: {out} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains(&format!("exit {usual}")),
            "the run ends as usual: {redirect}: {out}"
        );
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("panicked"),
            "{redirect}"
        );
    }
    // A closed pipe (`| head`) is not an error; the store is intact.
    let o = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" -C \"$1\" runs | true")
        .arg(BIN)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("panicked"),
        "{o:?}"
    );
    assert_eq!(runs_json(dir.path()).len(), 4);
}

#[test]
fn a_config_that_is_not_a_regular_file_is_an_error_not_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("loopbox.toml");
    let run = |d: &Path| {
        loopbox(
            d,
            &["run", "builtin:ralph", "--input", r#"{"prompt": "x"}"#],
        )
    };

    std::fs::create_dir(&config).unwrap();
    let r = run(dir.path());
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("loopbox.toml` cannot be read: it is a directory, not a regular file"),
        "{r:?}"
    );
    std::fs::remove_dir(&config).unwrap();

    mkfifo(&config);
    let r = run(dir.path());
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("it is a FIFO (named pipe), not a regular file"),
        "{r:?}"
    );
    std::fs::remove_file(&config).unwrap();

    std::os::unix::fs::symlink("/nonexistent/loopbox.toml", &config).unwrap();
    let r = run(dir.path());
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("is a symbolic link to `/nonexistent/loopbox.toml`, which does not exist"),
        "{r:?}"
    );
    std::fs::remove_file(&config).unwrap();

    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let r = run(dir.path());
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("it is a character device, not a regular file"),
        "{r:?}"
    );
    assert!(
        !dir.path().join(".loopbox/loopbox.db").exists() || runs_json(dir.path()).is_empty(),
        "no run was started"
    );
}

#[test]
fn a_missing_workspace_is_an_error_and_is_not_created() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("no/such/dir");
    for args in [
        &["run", "builtin:ralph", "--input", "{}"][..],
        &["runs"],
        &["hook", "claude-code", "--policy", "builtin:ralph"],
    ] {
        let mut c = command(&missing, args);
        c.current_dir(parent.path());
        let r = finish(c.spawn().unwrap());
        if args[0] == "hook" {
            // A hook answers in its agent's protocol: exit 2 would mean "block" there.
            assert_eq!(r.code, 1, "{args:?}: {r:?}");
            assert!(
                r.stderr
                    .starts_with("loopbox: the hook failed and let Claude Code go on"),
                "{r:?}"
            );
        } else {
            assert_eq!(r.code, 2, "{args:?}: {r:?}");
            assert!(
                r.stderr
                    .contains("(-C) does not exist; give the directory of an existing project"),
                "{r:?}"
            );
        }
        assert!(!parent.path().join("no").exists(), "{args:?} created it");
    }
}
