//! The sandbox's edges that only a real `loopbox` process shows (issue 31,
//! section 7): what a command can read of loopbox's own process, and what is
//! left of a command once loopbox is killed. Each runs under bwrap and Landlock.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

const KINDS: [&str; 2] = ["bwrap", "landlock"];

fn workspace(kind: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n"),
    )
    .unwrap();
    // Landlock lets a command create nothing in the workspace root.
    std::fs::create_dir(dir.path().join("out")).unwrap();
    dir
}

fn script_input(source: &str) -> String {
    serde_json::json!({"op": "script", "source": source}).to_string()
}

/// `loopbox run probe --json` with a script, as a started process (the
/// script's output is in the outcome's data).
fn start(dir: &Path, source: &str, envs: &[(&str, &str)]) -> std::process::Child {
    trusted_command(dir)
        .arg("-C")
        .arg(dir)
        .args(["run", &probe().to_string_lossy(), "--json", "--input"])
        .arg(script_input(source))
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .envs(envs.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Section 7 item 1: an API key in loopbox's environment (meant for the agent)
/// came back to a granted command under Landlock through
/// `/proc/$PPID/environ`. loopbox now zeroes its initial environment block and
/// makes itself non-dumpable at start-up, so neither its own environ nor any
/// other process's holds the key for a command to read.
#[test]
fn no_command_reads_loopbox_s_environment() {
    const SECRET: &str = "SECRET-e7b14c";
    let scan = "cat /proc/$PPID/environ; echo; echo ppid=$PPID; n=0; \
                for f in /proc/[0-9]*/environ; do cat \"$f\" 2>/dev/null && n=$((n+1)); done; echo; echo \"read=$n\"";
    for kind in KINDS {
        let dir = workspace(kind);
        let child = start(dir.path(), scan, &[("ANTHROPIC_API_KEY", SECRET)]);
        let o = child.wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(0), "{kind}: {out}{err}");
        assert!(out.contains("read="), "{kind}: the scan ran: {out}{err}");
        assert!(
            !out.contains(SECRET) && !err.contains(SECRET),
            "{kind}: a command read loopbox's environment: {out}{err}"
        );
    }
}

/// Processes whose command line holds `needle`.
fn running(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// Section 7 item 4: under Landlock, a command still running when loopbox was
/// killed (SIGKILL, or a hook's deadline ending the process) was reparented
/// and ran on. Now the command and its process group die with loopbox: a
/// parent-death signal for the command, a reaper for its group. Under bwrap
/// the sandbox's PID namespace ends with it, so even a daemon that left the
/// group (`setsid`) dies; under Landlock such a daemon survives (nothing can
/// find it without a PID namespace or a cgroup), so it is not checked there.
#[test]
fn no_command_outlives_a_killed_loopbox() {
    for kind in KINDS {
        let dir = workspace(kind);
        let tag = format!("{}{}", std::process::id(), kind.len());
        // Distinct sleeps, to find each in /proc: the command's own, a child in
        // its group, and a daemon in a session of its own.
        let (own, child, daemon) = (
            format!("3.{tag}1"),
            format!("3.{tag}2"),
            format!("3.{tag}3"),
        );
        let source = format!(
            "(sleep {child}; touch out/child-marker) & setsid sleep {daemon} & \
             echo started > out/started; sleep {own}; touch out/marker"
        );
        let mut loopbox = start(dir.path(), &source, &[]);
        let begun = Instant::now();
        while !dir.path().join("out/started").exists() {
            assert!(
                begun.elapsed() < Duration::from_secs(60),
                "{kind}: the script never started"
            );
            if let Some(status) = loopbox.try_wait().unwrap() {
                let o = loopbox.wait_with_output().unwrap();
                panic!(
                    "{kind}: loopbox ended ({status}) before the script started: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !running(&format!("sleep {own}")).is_empty(),
            "{kind}: the command runs"
        );
        loopbox.kill().unwrap();
        loopbox.wait().unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let mut left = running(&format!("sleep {own}"));
        left.extend(running(&format!("sleep {child}")));
        if kind == "bwrap" {
            left.extend(running(&format!("sleep {daemon}")));
        }
        assert!(
            left.is_empty(),
            "{kind}: still running a second after loopbox was killed: {left:?}"
        );
        std::thread::sleep(Duration::from_secs(3));
        for marker in ["out/marker", "out/child-marker"] {
            assert!(
                !dir.path().join(marker).exists(),
                "{kind}: {marker} was written after loopbox was killed"
            );
        }
    }
}

/// The same when a hook's deadline ends the hook process mid-command (what it
/// does so that the agent's own timeout never kills it): the command and its
/// group end with it, under both sandboxes.
#[test]
fn no_command_outlives_a_hook_s_deadline() {
    for kind in KINDS {
        let dir = workspace(kind);
        let d = dir.path();
        let tag = format!("{}{}", std::process::id(), kind.len() + 7);
        let (own, child) = (format!("4.{tag}1"), format!("4.{tag}2"));
        let source =
            format!("(sleep {child}; touch out/child-marker) & sleep {own}; touch out/marker");
        let event = serde_json::json!({
            "session_id": "deadline", "transcript_path": "", "cwd": d,
            "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"op": "script", "source": source}, "tool_use_id": "t",
        });
        let mut hook = trusted_command(d)
            .args([
                "hook",
                "claude-code",
                "--policy",
                &probe().to_string_lossy(),
            ])
            .args(["--input", r#"{"op": "echo"}"#, "--timeout", "3"])
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            )
            .current_dir(d)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(
            &mut hook.stdin.take().unwrap(),
            event.to_string().as_bytes(),
        )
        .unwrap();
        let started = Instant::now();
        let o = hook.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            started.elapsed() < Duration::from_secs(4) && err.contains("no answer within"),
            "{kind}: the deadline ended the hook: {err}"
        );
        std::thread::sleep(Duration::from_secs(1));
        let mut left = running(&format!("sleep {own}"));
        left.extend(running(&format!("sleep {child}")));
        assert!(
            left.is_empty(),
            "{kind}: still running a second after the hook's deadline: {left:?}"
        );
        std::thread::sleep(Duration::from_secs(4));
        for marker in ["out/marker", "out/child-marker"] {
            assert!(
                !d.join(marker).exists(),
                "{kind}: {marker} was written after the hook ended"
            );
        }
    }
}
