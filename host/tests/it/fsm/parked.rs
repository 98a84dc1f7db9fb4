//! Issue 32: `maintain` and `backoff` as a waiting run with a timer. Each
//! pause parks the run (status `waiting`, its wake time in the run's row);
//! `loopbox run` sleeps through it in the foreground; a killed run goes on
//! with `runs resume` at the wake time, or at once with `runs tick`; `runs`
//! and `runs show` show the wake time; a cancel ends a sleeping run.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::*;

const CONFIG: &str = "[shell]\nscripts = true\n";

/// `a`, then a pause of `backoff` seconds, then the terminal state.
fn pause(backoff: u32) -> String {
    format!(
        "name: pause\ninitial: a\nbackoff: {backoff}\nstates:\n  a:\n    action: echo a >> trail\n    next: done\n  done:\n    terminal: true\n"
    )
}

fn workspace(loop_yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("l.yaml"), loop_yaml).unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), CONFIG).unwrap();
    dir
}

/// `loopbox run l.yaml --json` in the background.
fn start(dir: &Path) -> Child {
    trusted_command(dir)
        .args(["-C"])
        .arg(dir)
        .args(["run", "l.yaml", "--json"])
        .current_dir(dir)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run's row in `runs --json`, once it is waiting with a wake time.
fn parked(dir: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = loopbox(dir, &["runs", "--json"]);
        if let Ok(Value::Array(rows)) = serde_json::from_slice::<Value>(&o.stdout)
            && let Some(r) = rows.first()
            && r["status"] == "waiting"
            && r["wakes"].is_string()
        {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the run never parked: {}",
            text(&o.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn run_sleeps_through_each_pause_in_the_foreground_and_maintain_starts_again() {
    let yaml = "name: beat\ninitial: a\nmaintain: true\nbackoff: 1\nmax_steps: 4\nstates:\n  a:\n    action: echo a >> trail\n    next: done\n  done:\n    terminal: true\n    on_maintain: a\n";
    let dir = workspace(yaml);
    let started = Instant::now();
    let o = loopbox(dir.path(), &["run", "l.yaml", "--json"]);
    let took = started.elapsed();
    let result = json_of(&o);
    // a (pause) done->a (maintain, no pause) a (pause): step 4 is the cap.
    assert_eq!(path_of(&result), ["a", "a"], "{}", text(&o.stderr));
    assert_eq!(result["outcome"]["data"]["terminated_by"], "max_steps");
    assert!(
        took >= Duration::from_secs(2),
        "two pauses of 1 s took {took:?}"
    );
    assert_eq!(read(dir.path(), "trail"), "a\na\n");
    let log = log_of(dir.path(), &result);
    assert!(
        log.contains("sleeping until") && log.contains("maintain -> `a`"),
        "{log}"
    );
}

#[test]
fn a_killed_sleeping_run_waits_with_its_wake_time_and_goes_on_with_tick_or_resume() {
    let dir = workspace(&pause(3600));
    let mut child = start(dir.path());
    let row = parked(dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    let id = row["id"].as_str().unwrap().to_string();
    // Still waiting, the wake time an hour on: a scheduler finds it by the row.
    let row = &json_of(&loopbox(dir.path(), &["runs", "--json"]))[0];
    assert_eq!(row["status"], "waiting", "{row}");
    let o = loopbox(dir.path(), &["runs", "show", &id]);
    let shown = text(&o.stdout);
    assert!(
        shown.contains("\nwakes:    ") && shown.contains(&format!("`loopbox runs tick {id}` now")),
        "{shown}"
    );
    assert!(text(&loopbox(dir.path(), &["runs"]).stdout).contains("WAKES (UTC)"));
    // A payload is refused: the run wakes with the tick its policy named.
    let o = loopbox(dir.path(), &["runs", "tick", &id, "{\"x\": 1}"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("sleeps on its own timer"),
        "{}",
        text(&o.stderr)
    );
    // `runs tick` wakes it now, and it goes on where it stood.
    let o = loopbox(dir.path(), &["runs", "tick", &id, "--json"]);
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["a", "done"], "{}", text(&o.stderr));
    assert_eq!(
        read(dir.path(), "trail"),
        "a\n",
        "the finished step ran once"
    );
    let row = &json_of(&loopbox(dir.path(), &["runs", "--json"]))[0];
    assert_eq!(
        (row["status"].as_str(), row["wakes"].is_null()),
        (Some("done"), true),
        "{row}"
    );

    // `runs resume` before the wake time sleeps until it.
    let dir = workspace(&pause(8));
    let mut child = start(dir.path());
    let row = parked(dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    let id = row["id"].as_str().unwrap();
    let wakes = row["wakes"].as_str().unwrap().to_string();
    let started = Instant::now();
    let o = loopbox(dir.path(), &["runs", "resume", id, "--json"]);
    assert_eq!(path_of(&json_of(&o)), ["a", "done"], "{}", text(&o.stderr));
    // The wake time was 8 s after the pause began; the test's own steps take far less.
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "resumed at once, not at {wakes}: {:?}",
        started.elapsed()
    );
}

#[test]
fn tick_wakes_a_run_its_own_process_sleeps_in_and_cancel_ends_one() {
    let dir = workspace(&pause(3600));
    let child = start(dir.path());
    let id = parked(dir.path())["id"].as_str().unwrap().to_string();
    let o = loopbox(dir.path(), &["runs", "tick", &id]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("woke run"), "{}", text(&o.stdout));
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(path_of(&result), ["a", "done"], "{}", text(&out.stderr));

    let dir = workspace(&pause(3600));
    let child = start(dir.path());
    let id = parked(dir.path())["id"].as_str().unwrap().to_string();
    let o = loopbox(dir.path(), &["runs", "cancel", &id, "--json"]);
    assert_eq!(json_of(&o)["status"], "cancelled", "{}", text(&o.stderr));
    let out = child.wait_with_output().unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "cancelled", "{}", text(&out.stderr));
}

#[test]
fn validate_accepts_maintain_and_a_sub_loop_backoff_is_said_not_kept() {
    let dir = workspace(&pause(1));
    let o = loopbox(dir.path(), &["validate", "l.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    // A loop run as a sub-loop cannot pause its parent's step.
    std::fs::write(dir.path().join("child.yaml"), pause(1)).unwrap();
    std::fs::write(
        dir.path().join("parent.yaml"),
        "name: parent\ninitial: run\nstates:\n  run:\n    loop: child.yaml\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let started = Instant::now();
    let o = loopbox(dir.path(), &["run", "parent.yaml", "--json"]);
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["run", "done"], "{}", text(&o.stderr));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        log_of(dir.path(), &result)
            .contains("is not kept here: a sub-loop runs within its parent's step")
    );
}
