//! What the CLI test files share: the binary, the repository, copies of the
//! examples in temp dirs, and output normalized for exact comparison.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

/// Run `cmd` with `input` on its stdin, capturing stdout and stderr. The write
/// runs beside the wait, so a child that stops reading (an input over a limit)
/// ends the write, not the test.
pub fn feed(cmd: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let bytes = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// The probe guest (`guests/rust/probe`), built once per test binary.
pub fn probe() -> &'static Path {
    static PROBE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        loopbox_guest_build::Repo::containing(&repo())
            .build_rust_guests(&["probe"])
            .remove(0)
            .1
    })
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A copy of `examples/NAME` in a temp dir, so runs leave nothing behind.
pub fn example(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("examples").join(name), dir.path());
    dir
}

pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".loopbox" {
            continue;
        }
        let target = to.join(&name);
        // The agents' state dirs ship holding only their `.gitignore`; what a local
        // run of the examples left in them is not copied.
        if name == ".scripted-agent" || name == ".fix-agent" {
            std::fs::create_dir_all(&target).unwrap();
            std::fs::copy(entry.path().join(".gitignore"), target.join(".gitignore")).unwrap();
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A scratch workspace with the conformance loops (`tests/conformance/loops`)
/// in `.loops/`, where little-loops keeps loops, and shell text granted.
/// The conformance workspace's last lines: nobody waits for an answer, so a
/// `human_approval` state takes little-loops' headless route, as `record.py`
/// ran it without a terminal (a test that answers removes them).
pub const HEADLESS: &str = "[confirm]\nunattended = \"decline\"\n";

pub fn conformance_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let loops = dir.path().join(".loops");
    std::fs::create_dir_all(&loops).unwrap();
    copy_dir(&repo().join("tests/conformance/loops"), &loops);
    // A repository without a commit, as `record.py` makes; the guards'
    // commands (`tamper_guard`, `prepatch_check`) are granted.
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(init.success(), "git init");
    // The judge of `llm_structured` cases is the scripted `judge-agent`, as
    // in `record.py`.
    // The MCP cases' server is `probe` (`.mcp.json` for little-loops); the
    // pre-patch cases run `python -m pytest` (a Python with pytest on shell.path);
    // `tamper_guard: revert` needs the host's copies of the test files.
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!(
            "[shell]\nscripts = true\npath = \"{}:/usr/local/bin:/usr/bin:/bin\"\nallow = [[\"git\", \"ls-files\"], [\"git\", \"diff\"], [\"git\", \"hash-object\"], [\"git\", \"merge-base\"], [\"git\", \"show\"], [\"sha256sum\"]]\n\n\
             [agent]\ncommand = [\"./.loops/judge-agent\", \"{{prompt}}\"]\noutput = \"text\"\n\n[agents.loop-specialist]\nargs = [\"--agent\", \"loop-specialist\"]\n\n\
             [worktree]\nallow = true\n\n[workspace]\nread = [\".\"]\nrestore = [\"**/test_*.py\", \"**/*_test.py\", \"**/tests/**\", \"conftest.py\", \"**/conftest.py\"]\n\n\
             [mcp.servers.probe]\ncommand = [\"python3\", \".loops/mcp-server.py\"]\ntools = [\"echo\", \"fail\", \"nope\"]\n\n\
             {HEADLESS}",
            python_with_pytest().display()
        ),
    )
    .unwrap();
    dir
}

/// The files `tests/conformance/fixtures/<case>/` holds, copied into the
/// conformance workspace `dir` and committed on `main`, as `record.py` does.
pub fn fixture_commit(dir: &Path, case: &str) {
    let fixture = repo().join("tests/conformance/fixtures").join(case);
    if !fixture.is_dir() {
        return;
    }
    copy_dir(&fixture, dir);
    let names: Vec<String> = std::fs::read_dir(&fixture)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(ok.success(), "git {args:?}");
    };
    git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    let mut add = vec!["add", "--"];
    add.extend(names.iter().map(String::as_str));
    git(&add);
    git(&["commit", "-q", "-m", "base"]);
}

/// A directory holding `python`: an interpreter that has pytest (what
/// little-loops' pre-patch check runs, `python -m pytest`), outside /tmp (the
/// sandbox's /tmp is its own) and outside any workspace.
pub fn python_with_pytest() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = ["python3", "python"]
            .iter()
            .find_map(|p| {
                let o = Command::new(p)
                    .args(["-c", "import pytest, sys; print(sys.executable)"])
                    .output()
                    .ok()?;
                o.status
                    .success()
                    .then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            })
            .expect("these tests need a Python with pytest: `python3 -m pip install pytest` (scripts/test.sh installs it)");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-with-pytest");
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("python");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(exe, link).unwrap();
        dir
    })
    .clone()
}

/// A commit and the branch `wt-feat` in a conformance workspace, as
/// `record.py` makes them for its `BRANCHED` cases.
pub fn branch_fixture(dir: &Path) {
    for args in [
        &["commit", "-q", "--allow-empty", "-m", "base"][..],
        &["branch", "wt-feat"],
    ] {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(ok.success(), "git {args:?}");
    }
}

/// This test process's own data directory (`XDG_DATA_HOME`), where `loopbox trust`
/// records which configs are approved: tests neither read nor write the user's.
pub fn data_home() -> &'static Path {
    static DATA: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DATA.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Approve `config` as a user would, with `loopbox trust` (in this process's data
/// directory); a config that does not parse is left unapproved (the command that
/// reads it reports why).
pub fn trust(config: &Path) {
    if config.is_file() {
        let _ = Command::new(BIN)
            .arg("trust")
            .arg(config)
            .env("XDG_DATA_HOME", data_home())
            .stdin(std::process::Stdio::null())
            .output();
    }
}

/// The loopbox binary with this process's data directory, after approving the
/// workspace's `loopbox.toml` as it is now (`loopbox trust`): what a user who
/// wrote the config does once.
pub fn trusted_command(workspace: &Path) -> Command {
    trust(&workspace.join("loopbox.toml"));
    let mut c = Command::new(BIN);
    c.env("XDG_DATA_HOME", data_home());
    c
}

/// `loopbox -C DIR ARGS...` run in DIR, without a terminal, with a shared component
/// cache, the workspace's config (and a `--config` file) approved as it is now.
pub fn loopbox(dir: &Path, args: &[&str]) -> Output {
    loopbox_command(dir, args).output().unwrap()
}

fn loopbox_command(dir: &Path, args: &[&str]) -> Command {
    if let Some(at) = args.iter().position(|a| *a == "--config")
        && let Some(file) = args.get(at + 1)
    {
        trust(&dir.join(file));
    }
    let mut c = trusted_command(dir);
    c.arg("-C")
        .arg(dir)
        .args(args)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .current_dir(dir)
        .env("CI", "true");
    c
}

/// [`loopbox`] with `env` set in loopbox's environment besides the test's
/// own, killed (and the test failed) when it has not ended within `limit`.
pub fn loopbox_with(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> Output {
    use std::process::Stdio;
    let child = loopbox_command(dir, args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, killed) = wait_or_kill(child, limit);
    if killed {
        panic!(
            "loopbox {args:?} did not end within {limit:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// `child`'s output once it ends, killed with SIGKILL when it has not ended
/// within `limit` (then `true`): the waiter has not reaped it, so the pid is its.
pub fn wait_or_kill(child: std::process::Child, limit: std::time::Duration) -> (Output, bool) {
    let pid = child.id();
    let (done, ended) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = done.send(());
        out
    });
    let killed = ended.recv_timeout(limit).is_err();
    if killed {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    (waiter.join().unwrap().unwrap(), killed)
}

/// Replace run ids and durations so output can be compared exactly.
pub fn normalize(s: &[u8]) -> String {
    let s = String::from_utf8_lossy(s);
    let mut out = String::new();
    for word in s.split_inclusive([' ', '\n']) {
        let (w, sep) = word.split_at(word.trim_end_matches([' ', '\n']).len());
        let is_run_id =
            w.len() > 10 && w.starts_with('r') && w[1..].chars().all(|c| c.is_ascii_hexdigit());
        let is_duration = w.ends_with('s') && w[..w.len() - 1].parse::<f64>().is_ok();
        out.push_str(if is_run_id {
            "RUN"
        } else if is_duration {
            "T"
        } else {
            w
        });
        out.push_str(sep);
    }
    out
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}
