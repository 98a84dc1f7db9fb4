//! Durable runs through the real binary: runs killed with SIGKILL at every
//! boundary of an action's journaling and at random moments, then resumed;
//! damaged stores, a full disk, a changed policy, two processes on one run,
//! and the `runs` commands that show, answer, tick and cancel runs.
//!
//! The `durable` test guest appends one line per action to a file, so each
//! test counts how often every action really ran.

use std::collections::HashMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use common::{BIN, repo};

mod profiles;

/// A test guest built from source (once per test process).
fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        loopbox_guest_build::Repo::containing(&repo()).build_rust_guests(&["durable", "probe"])
    });
    built.iter().find(|(n, _)| n == name).unwrap().1.clone()
}

const PER_EVENT: u32 = 2;
const TURNS: u32 = 2;

/// A workspace with the durable policy copied in, `tee -a` granted and the scripted agent.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guest("durable"), dir.path().join("durable.wasm")).unwrap();
    let agent = repo().join("examples/project/agent/scripted-agent");
    std::fs::create_dir_all(dir.path().join("agent")).unwrap();
    std::fs::copy(agent, dir.path().join("agent/scripted-agent")).unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"tee\", \"-a\"]]\nsandbox = \"none\"\n\n\
         [agent]\ncommand = [\"./agent/scripted-agent\", \"{prompt}\"]\nresume = [\"--resume\", \"{session}\"]\noutput = \"json\"\n",
    )
    .unwrap();
    dir
}

fn input() -> String {
    input_of(PER_EVENT, TURNS)
}

fn input_of(per_event: u32, turns: u32) -> String {
    json!({"per_event": per_event, "turns": turns, "file": "effects.log"}).to_string()
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
            std::env::temp_dir().join("loopbox-durability-cache"),
        );
    c
}

fn loopbox(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The only run in the workspace.
fn run_id(dir: &Path) -> String {
    let o = loopbox(dir, &["runs", "--json"]);
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    runs[0]["id"].as_str().unwrap().to_string()
}

/// How many times each action id was written to the effects file.
fn effects(dir: &Path) -> HashMap<String, u32> {
    let mut counts = HashMap::new();
    for line in std::fs::read_to_string(dir.join("effects.log"))
        .unwrap_or_default()
        .lines()
    {
        *counts
            .entry(line.split(' ').next().unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

fn all_ids(per_event: u32, turns: u32) -> Vec<String> {
    (1..=turns + 1)
        .flat_map(|e| (0..per_event).map(move |i| format!("e{e}-a{i}")))
        .collect()
}

/// Resume until the run finishes, sending an interrupted agent turn again when
/// the run says its outcome is unknown; returns the final `--json` result and
/// how many resumes it took.
fn resume_to_end(dir: &Path, id: &str) -> (Value, u32) {
    let mut resend = false;
    for attempt in 1..=6 {
        let mut args = vec!["runs", "resume", id, "--json"];
        if resend {
            args.push("--resend-turn");
        }
        let o = loopbox(dir, &args);
        match o.status.code() {
            Some(0) => return (serde_json::from_slice(&o.stdout).unwrap(), attempt),
            Some(10) => resend = true,
            _ => panic!(
                "resume failed ({:?}): {}{}",
                o.status,
                text(&o.stdout),
                text(&o.stderr)
            ),
        }
    }
    panic!("the run did not finish after 6 resumes");
}

/// What one crash-and-resume trial found.
#[derive(Debug, Default)]
struct Findings {
    crashed: bool,
    unknown: Vec<String>,
    resumes: u32,
    /// The agent got one of its turns twice (a resend the user asked for).
    turns_resent: bool,
}

/// Check the invariants after a run finished, whatever crashed on the way:
/// no action ran twice, every completed one ran exactly once, the rest were
/// reported as unknown, and every event is committed with a decision.
fn check_finished(dir: &Path, id: &str, result: &Value) -> Vec<String> {
    check_finished_of(dir, id, result, (PER_EVENT, TURNS))
}

fn check_finished_of(
    dir: &Path,
    id: &str,
    result: &Value,
    (per_event, turns): (u32, u32),
) -> Vec<String> {
    assert_eq!(result["status"], "done", "{result}");
    let data = &result["outcome"]["data"];
    let done: Vec<String> = serde_json::from_value(data["done"].clone()).unwrap();
    let unknown: Vec<String> = serde_json::from_value(data["unknown"].clone()).unwrap();
    let counts = effects(dir);
    for (action, n) in &counts {
        assert_eq!(*n, 1, "{action} ran {n} times: {counts:?}");
    }
    for action in &done {
        assert_eq!(
            counts.get(action),
            Some(&1),
            "{action} completed but its effect is missing: {counts:?}"
        );
    }
    let mut seen: Vec<String> = done.iter().chain(&unknown).cloned().collect();
    seen.sort();
    let mut expected = all_ids(per_event, turns);
    expected.sort();
    assert_eq!(
        seen, expected,
        "every action completed or was reported unknown"
    );
    let show: Value =
        serde_json::from_slice(&loopbox(dir, &["runs", "show", id, "--json"]).stdout).unwrap();
    let events = show["events"].as_array().unwrap();
    assert_eq!(events.len() as u32, turns + 1, "{show}");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1);
        assert!(e["decision"].is_object() && e["pending"] == false, "{e}");
    }
    unknown
}

/// Kill the run with LOOPBOX_CRASH_AT=point:nth, then resume it to its end.
fn crash_trial(point: &str, nth: u32) -> Findings {
    let dir = workspace();
    let o = command(
        dir.path(),
        &["run", "durable.wasm", "--input", &input(), "--json"],
    )
    .env("LOOPBOX_CRASH_AT", format!("{point}:{nth}"))
    .output()
    .unwrap();
    let crashed = o.status.signal() == Some(9);
    assert!(
        crashed || o.status.code() == Some(0),
        "{point}:{nth}: {:?} {}",
        o.status,
        text(&o.stderr)
    );
    let id = run_id(dir.path());
    if !crashed {
        let result: Value = serde_json::from_slice(&o.stdout).unwrap();
        return Findings {
            unknown: check_finished(dir.path(), &id, &result),
            ..Default::default()
        };
    }
    let (result, resumes) = resume_to_end(dir.path(), &id);
    let unknown = check_finished(dir.path(), &id, &result);
    let prompts = std::fs::read_to_string(dir.path().join(".scripted-agent/prompts"))
        .unwrap_or_default()
        .matches("\n---\n")
        .count() as u32;
    Findings {
        crashed,
        unknown,
        resumes,
        turns_resent: prompts > TURNS,
    }
}

#[test]
fn a_run_killed_at_every_boundary_resumes_without_losing_or_repeating_work() {
    let actions = PER_EVENT * (TURNS + 1);
    let points: [(&str, u32); 8] = [
        ("before-intent", actions),
        ("action-started", actions),
        ("action-finished", actions),
        ("action-recorded", actions),
        ("event-committed", TURNS + 1),
        ("turn-started", TURNS),
        ("turn-finished", TURNS),
        ("turn-recorded", TURNS),
    ];
    let (mut trials, mut unknown_total, mut resent) = (0, 0, 0);
    for (point, passes) in points {
        for nth in 1..=passes {
            let f = crash_trial(point, nth);
            assert!(f.crashed, "{point}:{nth} never crashed");
            trials += 1;
            unknown_total += f.unknown.len();
            resent += f.turns_resent as u32;
            // Only an action the crash caught between its intent and its result is unknown.
            let expect_unknown = matches!(point, "action-started" | "action-finished");
            assert_eq!(
                f.unknown.len(),
                expect_unknown as usize,
                "{point}:{nth}: {f:?}"
            );
            // A turn sent but not recorded is sent again only because the resume said --resend-turn.
            assert_eq!(
                f.turns_resent,
                point == "turn-finished",
                "{point}:{nth}: {f:?}"
            );
            assert!(f.resumes >= 1);
        }
    }
    eprintln!(
        "kill loop (boundaries): {trials} trials, {unknown_total} actions reported outcome-unknown, {resent} agent turns resent, 0 actions run twice"
    );
}

/// A small deterministic generator for the random kill times.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Let `child` run for `ms`, then kill -9 it; true when it was still running.
fn kill_after(mut child: Child, ms: u64) -> bool {
    std::thread::sleep(Duration::from_millis(ms));
    let running = child.try_wait().unwrap().is_none();
    if running {
        child.kill().unwrap();
    }
    child.wait().unwrap();
    running
}

#[test]
fn runs_killed_at_random_moments_again_and_again_still_finish_exactly_once() {
    let trials = 100;
    // Bigger runs than the boundary test's, so a random moment falls inside one.
    let shape = (8, 2);
    let input = input_of(shape.0, shape.1);
    let mut rng = Lcg(0x5eed);
    let (mut kills, mut unknown_total) = (0, 0);
    for _ in 0..trials {
        let dir = workspace();
        let quiet = |mut c: Command| {
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        // Warm the cache first, so the kill lands in the run rather than in compilation.
        loopbox(dir.path(), &["inspect", "durable.wasm"]);
        let first = quiet(command(
            dir.path(),
            &["run", "durable.wasm", "--input", &input, "--json"],
        ));
        kills += kill_after(first, 2 + rng.below(90)) as u32;
        if !dir.path().join(".loopbox/loopbox.db").exists()
            || loopbox(dir.path(), &["runs", "--json"])
                .stdout
                .starts_with(b"[]")
        {
            // Killed before the run was recorded: nothing to resume, start it again.
            assert_eq!(
                loopbox(dir.path(), &["run", "durable.wasm", "--input", &input])
                    .status
                    .code(),
                Some(0)
            );
        }
        let id = run_id(dir.path());
        // Kill some resumes too, before letting one finish.
        for _ in 0..rng.below(3) {
            let status = loopbox(dir.path(), &["runs", "show", &id, "--json"]);
            if serde_json::from_slice::<Value>(&status.stdout).unwrap()["status"] == "done" {
                break;
            }
            let resume = quiet(command(
                dir.path(),
                &["runs", "resume", &id, "--resend-turn"],
            ));
            kills += kill_after(resume, 2 + rng.below(60)) as u32;
        }
        let show: Value =
            serde_json::from_slice(&loopbox(dir.path(), &["runs", "show", &id, "--json"]).stdout)
                .unwrap();
        let result = if show["status"] == "done" {
            json!({"status": "done", "outcome": show["outcome"]})
        } else {
            resume_to_end(dir.path(), &id).0
        };
        unknown_total += check_finished_of(dir.path(), &id, &result, shape).len();
    }
    assert!(
        kills >= trials / 2,
        "only {kills} kills landed while a run was going"
    );
    eprintln!(
        "kill loop (random): {trials} trials, {kills} kills landed, {unknown_total} actions reported outcome-unknown, 0 actions run twice"
    );
}

#[test]
fn a_python_policy_replays_its_prompts_and_continues_the_same_conversation() {
    let dir = workspace();
    let ccw =
        loopbox_guest_build::Repo::containing(&repo()).build_python_guest("ccw", "loop-policy");
    std::fs::copy(ccw, dir.path().join("ccw.wasm")).unwrap();
    let reply = |action: &str, message: &str| {
        format!(
            "Worked on it.\\n\\nACTION_RESULT:\\n- action: {action}\\n- status: success\\n- message: {message}\\n- state_updates: {{}}\\n\\nNEXT_ACTION_NEEDED: VALIDATE"
        )
    };
    let replies = [
        reply("DEVELOP", "parser written"),
        reply("DEVELOP", "flag wired"),
        reply("VALIDATE", "all tests pass"),
    ];
    std::fs::create_dir_all(dir.path().join(".scripted-agent")).unwrap();
    std::fs::write(
        dir.path().join(".scripted-agent/replies"),
        replies.join("\n"),
    )
    .unwrap();
    let input =
        json!({"task": "add --json", "tasks": ["write the parser", "wire the flag"]}).to_string();
    // Killed after the second prompt's reply is journaled, before the policy decides.
    let o = command(
        dir.path(),
        &["run", "ccw.wasm", "--input", &input, "--json"],
    )
    .env("LOOPBOX_CRASH_AT", "action-recorded:2")
    .output()
    .unwrap();
    assert_eq!(o.status.signal(), Some(9), "{}", text(&o.stderr));
    let id = run_id(dir.path());
    let o = loopbox(dir.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        result["summary"],
        "ccw: 2 of 2 task(s) done, validation passed, after 3 action(s)"
    );
    // Three prompts in all: the two before the crash were answered from the journal.
    let prompts = std::fs::read_to_string(dir.path().join(".scripted-agent/prompts")).unwrap();
    assert_eq!(prompts.matches("\n---\n").count(), 3, "{prompts}");
    let log = text(&loopbox(dir.path(), &["runs", "log", &id]).stdout);
    assert_eq!(log.matches("replayed prompt").count(), 2, "{log}");
    let sessions = std::fs::read_dir(dir.path().join(".scripted-agent"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("turns-")
        })
        .count();
    assert_eq!(
        sessions, 1,
        "the resumed run continued the same agent conversation"
    );
}

#[test]
fn a_changed_policy_is_refused_unless_allowed_and_then_non_determinism_is_named() {
    let dir = workspace();
    let o = command(dir.path(), &["run", "durable.wasm", "--input", &input()])
        .env("LOOPBOX_CRASH_AT", "action-recorded:1")
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(9));
    let id = run_id(dir.path());
    // Another component under the same path.
    std::fs::copy(guest("probe"), dir.path().join("durable.wasm")).unwrap();
    let o = loopbox(dir.path(), &["runs", "resume", &id]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "the policy `{}` changed since run {id} started",
            dir.path()
                .join("durable.wasm")
                .canonicalize()
                .unwrap()
                .display()
        )),
        "{err}"
    );
    assert!(err.contains("pass --allow-policy-change"), "{err}");
    // Allowed, the new policy does not repeat the recorded call: the run stops, naming it.
    let o = loopbox(
        dir.path(),
        &["runs", "resume", &id, "--allow-policy-change"],
    );
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with(
            "failed: non-determinism: the policy did not repeat what it did before the crash"
        ),
        "{out}"
    );
    // The guest read its clock first; the new policy made none of the calls.
    assert!(out.contains("it decided after 0 of the 4 recorded calls of this event, and never made call 1 (monotonic-clock)"), "{out}");
    assert_eq!(
        effects(dir.path()).len(),
        1,
        "the recorded action did not run again"
    );
}

#[test]
fn a_second_process_cannot_drive_a_run_and_cancel_stops_it() {
    let dir = workspace();
    // An agent that takes its time, so the run is busy in its first turn.
    std::fs::write(dir.path().join("agent/slow-agent"), "#!/bin/sh\nsleep 30\n").unwrap();
    std::fs::set_permissions(
        dir.path().join("agent/slow-agent"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = std::fs::read_to_string(dir.path().join("loopbox.toml"))
        .unwrap()
        .replace("./agent/scripted-agent", "./agent/slow-agent");
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    loopbox(dir.path(), &["inspect", "durable.wasm"]);
    let mut driver = command(dir.path(), &["run", "durable.wasm", "--input", &input()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = loop {
        std::thread::sleep(Duration::from_millis(100));
        let o = loopbox(dir.path(), &["runs", "--json"]);
        if let Some(id) = serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v[0]["id"].as_str().map(String::from))
            && effects(dir.path()).len() == PER_EVENT as usize
        {
            break id;
        }
    };
    std::thread::sleep(Duration::from_millis(300));
    let o = loopbox(dir.path(), &["runs", "resume", &id]);
    assert_eq!(o.status.code(), Some(9));
    assert!(
        text(&o.stderr).contains(&format!(
            "is being driven by another loopbox process (pid {}",
            driver.id()
        )),
        "{}",
        text(&o.stderr)
    );
    let show: Value =
        serde_json::from_slice(&loopbox(dir.path(), &["runs", "show", &id, "--json"]).stdout)
            .unwrap();
    assert_eq!(
        (show["status"].as_str(), show["driver"]["alive"].as_bool()),
        (Some("running"), Some(true))
    );
    let journal = show["journal"].as_array().unwrap();
    let turn = journal.iter().find(|j| j["kind"] == "turn").unwrap();
    assert_eq!(
        turn["outcome"], "running",
        "the agent turn is in flight: {show}"
    );

    // `runs log --follow` prints what is there and keeps going while the driver lives.
    let follow = command(dir.path(), &["runs", "log", &id, "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    driver.kill().unwrap();
    driver.wait().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(follow.wait_with_output().unwrap()).unwrap());
    let followed = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("--follow stops once the driver is gone");
    assert_eq!(followed.status.code(), Some(0));
    let log = text(&followed.stdout);
    assert!(
        log.contains("[host] exec `tee -a effects.log` allowed by shell.allow[0] (tee -a)")
            && log.contains("decision: inject: turn 1"),
        "{log}"
    );

    // The driver is gone: the next `loopbox run` says so, and the listing shows it.
    let o = loopbox(
        dir.path(),
        &["run", "builtin:ralph", "--input", "{}", "--json"],
    );
    assert!(
        text(&o.stderr)
            .contains(&format!("note: run {id} of durable.wasm was interrupted (its loopbox process stopped); resume it with `loopbox runs resume {id}`")),
        "{}",
        text(&o.stderr)
    );
    let o = loopbox(dir.path(), &["runs", "show", &id]);
    assert!(
        text(&o.stdout).contains("status:   interrupted"),
        "{}",
        text(&o.stdout)
    );
    // A new driver sends the turn again and waits on the slow agent; cancel stops it
    // mid-turn (the agent's process group is killed), not after the 30 s turn.
    let mut driver = command(dir.path(), &["runs", "resume", &id, "--resend-turn"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !text(&loopbox(dir.path(), &["runs", "show", &id]).stdout).contains("status:   running") {
        std::thread::sleep(Duration::from_millis(100));
    }
    let asked = std::time::Instant::now();
    let o = loopbox(dir.path(), &["runs", "cancel", &id, "--wait", "20"]);
    assert_eq!(
        (o.status.code(), text(&o.stdout).trim().to_string()),
        (Some(0), format!("cancelled: run {id}")),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(driver.wait().unwrap().code(), Some(8));
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    let mut out = String::new();
    std::io::Read::read_to_string(driver.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(out.trim(), "cancelled: the run was cancelled");
    let o = loopbox(dir.path(), &["runs", "cancel", &id]);
    assert_eq!(
        (o.status.code(), text(&o.stderr).trim().to_string()),
        (
            Some(1),
            format!("error: run {id} already ended (cancelled); there is nothing to cancel")
        )
    );
}

#[test]
fn answer_and_tick_move_a_parked_run_on() {
    let dir = workspace();
    let probe = guest("probe").to_string_lossy().into_owned();
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", r#"{"op": "echo", "then": "ask"}"#],
    );
    assert_eq!(o.status.code(), Some(4));
    let id = run_id(dir.path());
    let o = loopbox(dir.path(), &["runs", "tick", &id, "{}"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr).trim(),
        format!(
            "error: run {id} is not waiting for a tick; it waits for an answer: `loopbox runs answer {id} TEXT`"
        )
    );
    let o = loopbox(dir.path(), &["runs", "answer", &id, "yes, go", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (result["status"].as_str(), result["summary"].as_str()),
        (Some("done"), Some("answer: yes, go"))
    );

    let dir = workspace();
    let o = loopbox(
        dir.path(),
        &[
            "run",
            &probe,
            "--input",
            r#"{"op": "echo", "then": "pass"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(4));
    let id = run_id(dir.path());
    assert!(
        text(&o.stdout).contains(&format!("deliver one with `loopbox runs tick {id} JSON`")),
        "{}",
        text(&o.stdout)
    );
    let o = loopbox(
        dir.path(),
        &["runs", "tick", &id, r#"{"op": "echo", "then": "pass"}"#],
    );
    assert_eq!(o.status.code(), Some(4));
    let o = loopbox(dir.path(), &["runs", "tick", &id, "{nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("the tick is not valid JSON"),
        "{}",
        text(&o.stderr)
    );
    let o = loopbox(
        dir.path(),
        &["runs", "tick", &id, r#"{"op": "echo", "v": 3}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let show = text(&loopbox(dir.path(), &["runs", "show", &id]).stdout);
    assert!(show.contains("    1  start          -> pass\n    2  tick           -> pass\n    3  tick           -> done (success): probe echo"), "{show}");
    let log = loopbox(dir.path(), &["runs", "log", &id, "--json"]);
    let lines: Vec<Value> = text(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "decision: done (success): probe echo"),
        "{lines:?}"
    );
    let o = loopbox(dir.path(), &["runs", "resume", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("already ended (done); there is nothing to continue"));
    let o = loopbox(dir.path(), &["runs", "show", "r-nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("there is no run `r-nope`"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_damaged_store_is_a_clear_error_not_a_panic() {
    let dir = workspace();
    let probe = guest("probe").to_string_lossy().into_owned();
    assert_eq!(
        loopbox(dir.path(), &["run", &probe, "--input", r#"{"op": "echo"}"#])
            .status
            .code(),
        Some(0)
    );
    let db = dir.path().join(".loopbox/loopbox.db");
    // Fold the WAL into the file, then cut the file in half.
    let _ = std::fs::remove_file(db.with_extension("db-wal"));
    let len = std::fs::metadata(&db).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    for args in [
        vec!["runs"],
        vec!["runs", "show", "x"],
        vec!["run", probe.as_str(), "--input", r#"{"op": "echo"}"#],
    ] {
        let o = loopbox(dir.path(), &args);
        let err = text(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(70), "{args:?}: {err}");
        assert!(
            err.contains("is damaged") && err.contains(".recover"),
            "{args:?}: {err}"
        );
    }
    // Not a database at all.
    std::fs::write(&db, vec![b'x'; 8192]).unwrap();
    let _ = std::fs::remove_file(db.with_extension("db-shm"));
    let o = loopbox(dir.path(), &["runs"]);
    assert_eq!(o.status.code(), Some(70));
    assert!(
        text(&o.stderr).contains("the store is damaged"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_full_disk_stops_the_run_without_claiming_success_and_it_resumes_after() {
    let dir = workspace();
    let big = json!({"per_event": 150, "turns": 0, "file": "effects.log"}).to_string();
    loopbox(dir.path(), &["inspect", "durable.wasm"]);
    // No file may grow past 1 MiB: the store's write-ahead log fills part way through.
    let mut c = command(dir.path(), &["run", "durable.wasm", "--input", &big]);
    // SAFETY: the hook only calls setrlimit and signal, both async-signal-safe, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(
        err.contains("a file size limit was reached")
            && err.contains("free some space")
            && err.contains("loopbox runs resume"),
        "{err}"
    );
    assert!(!text(&o.stdout).contains("done"), "{}", text(&o.stdout));
    let id = run_id(dir.path());
    let show: Value =
        serde_json::from_slice(&loopbox(dir.path(), &["runs", "show", &id, "--json"]).stdout)
            .unwrap();
    assert_eq!(show["status"], "interrupted", "{show}");
    let before = effects(dir.path()).len();
    assert!(
        before > 10 && before < 150,
        "{before} actions ran before the disk filled"
    );
    // With room again, the run picks up where the journal ends.
    let o = loopbox(dir.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let counts = effects(dir.path());
    assert_eq!(counts.len(), 150);
    assert!(counts.values().all(|n| *n == 1), "an action ran twice");
}

#[test]
fn an_action_marked_idempotent_runs_again_instead_of_coming_back_unknown() {
    let dir = workspace();
    let config = std::fs::read_to_string(dir.path().join("loopbox.toml"))
        .unwrap()
        .replace(
            "sandbox = \"none\"",
            "sandbox = \"none\"\nidempotent = [[\"tee\", \"-a\"]]",
        );
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    let o = command(dir.path(), &["run", "durable.wasm", "--input", &input()])
        .env("LOOPBOX_CRASH_AT", "action-started:1")
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(9));
    let id = run_id(dir.path());
    let (result, _) = resume_to_end(dir.path(), &id);
    assert!(
        check_finished(dir.path(), &id, &result).is_empty(),
        "nothing came back unknown: {result}"
    );
    let log = text(&loopbox(dir.path(), &["runs", "log", &id]).stdout);
    assert!(
        log.contains("was running when the run stopped; running it again (shell.idempotent)"),
        "{log}"
    );
}

/// A run killed by SIGKILL after its first action's result was recorded: it
/// stays `running` with a driver that is gone. Its id, from its banner.
fn killed_run(dir: &Path) -> String {
    let o = command(dir, &["run", "durable.wasm", "--input", &input()])
        .env("LOOPBOX_CRASH_AT", "action-recorded:1")
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.signal(), Some(9), "{err}");
    let banner = err.split("loopbox: run ").nth(1).expect("a banner");
    banner.split(' ').next().unwrap().to_string()
}

#[test]
fn on_a_full_disk_the_runs_can_still_be_read_and_resume_says_what_to_do() {
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skipped: filling a disk needs a small tmpfs of its own, and mounting one (in a private mount namespace) needs root; CI runs the suite as root"
        );
        return;
    }
    // Two stores: one whose last writer folded the write-ahead log into the file
    // (a clean exit), and one whose driver was killed with its WAL in place.
    let clean = workspace();
    let clean_id = killed_run(clean.path());
    let probe = guest("probe").to_string_lossy().into_owned();
    let o = loopbox(
        clean.path(),
        &["run", &probe, "--input", r#"{"op": "echo"}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!clean.path().join(".loopbox/loopbox.db-wal").exists());
    let killed = workspace();
    let killed_id = killed_run(killed.path());
    assert!(killed.path().join(".loopbox/loopbox.db-wal").exists());

    let outdir = tempfile::tempdir().unwrap();
    let mut script = String::from("set -u\n");
    for (name, ws, id) in [
        ("clean", clean.path(), &clean_id),
        ("killed", killed.path(), &killed_id),
    ] {
        let mnt = outdir.path().join(name);
        std::fs::create_dir(&mnt).unwrap();
        let o = outdir.path().join(format!("{name}-"));
        script.push_str(&format!(
            "mount -t tmpfs -o size=4m loopbox-full '{mnt}' || exit 99\n\
             cp -a '{ws}/.' '{mnt}/'\n\
             dd if=/dev/zero of='{mnt}/fill' bs=64k 2>/dev/null\n\
             dd if=/dev/zero of='{mnt}/fill2' bs=4k 2>/dev/null\n\
             df -k '{mnt}' > '{o}df'\n\
             for c in 'runs' 'runs show {id}' 'runs show {id} --json' 'runs log {id}' 'runs resume {id}'; do\n\
               f=$(echo \"$c\" | tr ' ' _)\n\
               CI=true LOOPBOX_CACHE_DIR='{cache}' '{bin}' -C '{mnt}' $c > '{o}'\"$f\".out 2> '{o}'\"$f\".err\n\
               echo $? > '{o}'\"$f\".code\n\
             done\n",
            mnt = mnt.display(),
            ws = ws.display(),
            o = o.display(),
            cache = std::env::temp_dir()
                .join("loopbox-durability-cache")
                .display(),
            bin = BIN,
        ));
    }
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    if o.status.code() == Some(99) {
        eprintln!(
            "skipped: root, but a tmpfs could not be mounted here (a container without CAP_SYS_ADMIN?): {}",
            text(&o.stderr)
        );
        return;
    }
    assert!(o.status.success(), "{:?}: {}", o.status, text(&o.stderr));
    let read = |name: &str, command: &str, what: &str| {
        let f = command.replace(' ', "_");
        std::fs::read_to_string(outdir.path().join(format!("{name}-{f}.{what}"))).unwrap()
    };
    for (name, id) in [("clean", &clean_id), ("killed", &killed_id)] {
        let df = std::fs::read_to_string(outdir.path().join(format!("{name}-df"))).unwrap();
        let ran = |command: &str| {
            let code: i32 = read(name, command, "code").trim().parse().unwrap();
            (code, read(name, command, "out"), read(name, command, "err"))
        };
        let (code, out, err) = ran("runs");
        assert_eq!(code, 0, "{name}: runs: {out}{err}\n{df}");
        assert!(
            out.lines()
                .any(|l| l.starts_with(id.as_str()) && l.contains(" interrupted ")),
            "{name}: {out}"
        );
        let (code, out, err) = ran(&format!("runs show {id}"));
        assert_eq!(code, 0, "{name}: runs show: {out}{err}");
        assert!(out.contains("status:   interrupted"), "{name}: {out}");
        let (code, out, err) = ran(&format!("runs show {id} --json"));
        assert_eq!(code, 0, "{name}: runs show --json: {out}{err}");
        let show: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (show["status"].as_str(), show["actions"].as_u64()),
            (Some("interrupted"), Some(1)),
            "{name}: {show}"
        );
        let (code, out, err) = ran(&format!("runs log {id}"));
        assert_eq!(code, 0, "{name}: runs log: {out}{err}");
        let (code, out, err) = ran(&format!("runs resume {id}"));
        assert_eq!(code, 70, "{name}: runs resume: {out}{err}");
        let want = format!(
            "error: run {id} of durable.wasm is interrupted (0 turn(s), 1 action(s), last change "
        );
        assert!(err.starts_with(&want), "{name}: {err}");
        assert!(
            err.contains(&format!(
                "no space left on device at {}: free some space, then run `loopbox runs resume {id}` again",
                outdir.path().join(name).join(".loopbox").display()
            )),
            "{name}: {err}"
        );
    }
}
