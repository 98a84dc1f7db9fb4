//! A loop file is untrusted: `loopbox validate` parses it on the host, with
//! no Wasm memory limit around it. A 900 KB string aliased a thousand times
//! (900 MB once expanded) must end at the named byte cap, quickly, with the
//! child's own peak memory (`wait4`) far below what the expansion would take.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// Peak memory allowed to `validate` on the bomb; it took 896 MB unbounded.
const MAX_RSS_KB: i64 = 200 << 10;
/// Far longer than it takes, far shorter than a hang.
const DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn validate_stops_an_alias_bomb_at_the_byte_cap_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "name: bomb\ninitial: a\ns: &s \"{}\"\nl:\n",
        "x".repeat(900_000)
    );
    yaml.push_str(&"  - *s\n".repeat(1_000));
    assert!(yaml.len() < 1 << 20, "the bomb is a legal-sized file");
    std::fs::write(dir.path().join("loop.yaml"), &yaml).unwrap();

    let (status, usage, stderr, took) = validate(dir.path());

    assert!(
        usage.ru_maxrss < MAX_RSS_KB,
        "validate peaked at {} KiB (limit {MAX_RSS_KB} KiB)",
        usage.ru_maxrss
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    // Written text (900 KB) and the anchor's copy, then 17 aliases: line 4 + 17.
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "loop.yaml:21: not valid YAML: aliases expand this document past 16 MiB (the limit for a loop file); each `*name` copies all its `&name` holds, so write a large value once instead of aliasing it",
            "error: loop.yaml has 1 problem(s); fix them and run `loopbox validate loop.yaml` again",
        ]
    );
    assert!(took < Duration::from_secs(10), "validate took {took:?}");
}

/// `loopbox validate loop.yaml` in `dir`: its status, peak memory, stderr and time.
fn validate(dir: &std::path::Path) -> (ExitStatus, libc::rusage, String, Duration) {
    let started = Instant::now();
    let child = trusted_command(dir)
        .arg("-C")
        .arg(dir)
        .args(["validate", "loop.yaml"])
        .current_dir(dir)
        .env("CI", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, usage, stderr) = finish(child);
    (status, usage, stderr, started.elapsed())
}

/// Wait for `child` (up to [`DEADLINE`]): its status, its own peak memory
/// (`wait4`), and its stderr.
fn finish(mut child: Child) -> (ExitStatus, libc::rusage, String) {
    let started = Instant::now();
    let mut err = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
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
            break (ExitStatus::from_raw(status), usage);
        }
        assert!(r == 0, "wait4 failed: {}", std::io::Error::last_os_error());
        if started.elapsed() > DEADLINE {
            child.kill().ok();
            panic!("validate did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, usage, err.join().unwrap())
}

/// The same bomb through `fragment:`: one 900 KB fragment used by a thousand
/// states is a few values but 900 MB of text once expanded (it took 1.78 GB
/// and 97 s before fragments were charged in bytes).
#[test]
fn validate_stops_a_fragment_bomb_at_the_byte_cap_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "name: bomb\ninitial: s0\nfragments:\n  big:\n    action: \"{}\"\nstates:\n",
        "x".repeat(900_000)
    );
    for i in 0..1_000 {
        yaml.push_str(&format!("  s{i}:\n    fragment: big\n    next: done\n"));
    }
    yaml.push_str("  done:\n    terminal: true\n");
    assert!(yaml.len() < 1 << 20, "the bomb is a legal-sized file");
    std::fs::write(dir.path().join("loop.yaml"), &yaml).unwrap();

    let (status, usage, stderr, took) = validate(dir.path());

    assert!(
        usage.ru_maxrss < MAX_RSS_KB,
        "validate peaked at {} KiB (limit {MAX_RSS_KB} KiB)",
        usage.ru_maxrss
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "fragments expand this loop past 16 MiB of text in all (the limit for a loop file)"
        ),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "validate took {took:?}");
}
