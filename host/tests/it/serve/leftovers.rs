//! Issue 45, defect 4: whatever kills loopbox, its sandboxes and their
//! children die with it. bubblewrap's own process inside the new namespaces
//! runs a while (mounts) without a parent-death signal of its own, and when
//! bubblewrap's outer process dies before it lets it go on, it waits for
//! good: a `kill -9` of loopbox at that moment left it behind, holding a PID
//! namespace and the workspace's mount. Here `loopbox run` is killed 60
//! times in a loop that runs a command at every step: a quarter at random
//! points, the rest as a sandbox's namespace appears (bwrap's inner process
//! is born), and no process of its sandboxes may be left.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::trusted_command;

const KILLS: u32 = 60;

/// Live (not zombie) processes other than this one whose command line or
/// working directory names `dir`: what a killed run left.
fn leftovers(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let me = std::process::id().to_string();
    let mut out = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let p = entry.path();
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue;
        };
        // The state follows the command name in parentheses.
        let state = stat.rsplit_once(") ").map_or("", |(_, r)| &r[..1]);
        if state == "Z" || state == "X" {
            continue;
        }
        let cmdline = std::fs::read(p.join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        let cwd = std::fs::read_link(p.join("cwd"))
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        if cmdline.contains(&needle) || cwd.starts_with(&needle) {
            out.push(format!(
                "{pid} [{state}] {}",
                cmdline.chars().take(160).collect::<String>()
            ));
        }
    }
    out
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Return as soon as a bwrap that loopbox `pid` started has a child (its
/// process inside the new namespaces), or after a second.
fn namespace_born(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        for c in children(pid) {
            if std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|n| n.trim() == "bwrap")
            {
                let inner = format!("/proc/{c}/task/{c}/children");
                let until = Instant::now() + Duration::from_millis(50);
                while Instant::now() < until {
                    match std::fs::read_to_string(&inner) {
                        Ok(k) if !k.trim().is_empty() => return,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            }
        }
    }
}

#[test]
fn kill_9_of_loopbox_run_at_random_points_leaves_no_sandbox_behind() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"true\"], [\"sleep\"]]\n",
    )
    .unwrap();
    // A command at every step, alternately a short and a longer one.
    std::fs::write(
        ws.path().join("l.yaml"),
        "name: busy\ninitial: a\nmax_steps: 10000\nstates:\n  a:\n    exec: [true]\n    next: b\n  b:\n    exec: [sleep, \"0.05\"]\n    next: a\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let started = Instant::now();
    for i in 0..KILLS {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the kills took too long"
        );
        let mut child = trusted_command(ws.path())
            .arg("-C")
            .arg(ws.path())
            .args(["run", "l.yaml"])
            .current_dir(ws.path())
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            )
            .env("CI", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // From the start (policy loading) to many steps in.
        let after = Duration::from_millis(seed % 1500 + 200);
        std::thread::sleep(after);
        if i % 4 != 0 {
            namespace_born(child.id());
        }
        if child.try_wait().unwrap().is_some() {
            panic!("the loop ended by itself within {after:?}");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // What dies with loopbox dies at once; give the kernel a moment to deliver.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = leftovers(ws.path());
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = leftovers(ws.path());
    }
    // Whatever the verdict, none outlives the test.
    for l in &left {
        if let Some(pid) = l.split(' ').next().and_then(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill(2) on a process this test's runs left behind.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    assert!(
        left.is_empty(),
        "{} process(es) outlived their loopbox after {KILLS} kill -9:\n{}",
        left.len(),
        left.join("\n")
    );
}
