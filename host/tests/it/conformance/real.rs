//! Real little-loops loops end to end: little-loops 1.167.0's own
//! `loops/*.yaml` (fetched from PyPI by `tests/conformance/real.py` and cached
//! under the target dir, never copied into this repository), each in a scratch
//! git project with the same scripted stand-in agent (`tests/conformance/real/agent`)
//! that little-loops ran as `claude`; a loop whose judge is asked runs a second
//! time as `NAME@no-first`, each judged question answered "no" before "yes".
//! `tests/conformance/real.json` holds, from `ll-loop run`, the path each took,
//! how it ended, every prompt its agent was given and the files it left;
//! `loopbox run` must take the same path, end the same way with the same exit
//! code, ask the same prompts and leave the same files (`real.py compare`,
//! which names the differences by design it evens out first).

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

/// The little-loops release `real.json` was recorded with.
const RELEASE: &str = "1.167.0";

fn script() -> PathBuf {
    repo().join("tests/conformance/real.py")
}

/// The corpus's `loops/` directory, fetched once into the target dir; `None`
/// (after saying why) when PyPI cannot be reached.
fn corpus() -> Option<PathBuf> {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("little-loops-{RELEASE}"));
    let o = Command::new("python3")
        .arg(script())
        .arg("fetch")
        .arg(&cache)
        .output()
        .expect("python3 runs tests/conformance/real.py");
    let stdout = String::from_utf8_lossy(&o.stdout);
    match o.status.code() {
        Some(0) => Some(PathBuf::from(stdout.trim())),
        // real.py's code for "pip could not download the wheel".
        // In CI (which has PyPI) a skip would hide a lost suite.
        Some(3) if std::env::var_os("CI").is_some() => {
            panic!("the real-loop conformance suite needs PyPI, and CI is set: {stdout}")
        }
        Some(3) => {
            println!("SKIPPED: the real-loop conformance suite needs PyPI: {stdout}");
            eprintln!("SKIPPED: the real-loop conformance suite needs PyPI: {stdout}");
            None
        }
        _ => panic!(
            "real.py fetch failed: {stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Run one recorded loop with loopbox; `Err` says how it differed.
fn check(corpus: &Path, t: &Value) -> Result<(), String> {
    let name = t["loop"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("python3")
        .arg(script())
        .args(["prepare", name])
        .arg(corpus)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: real.py prepare: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // `NAME@variant` runs the corpus loop NAME.
    let file = format!(".loops/{}.yaml", name.split('@').next().unwrap());
    let refused = t["spec"]["loopbox_refuses"].as_str();
    let extra = strings(&t["loopbox_args"]);
    // The release the records were made with (`diff_stall` differs after it).
    let mut args = vec!["run", file.as_str(), "--json", "--little-loops", RELEASE];
    args.extend(extra.iter().map(String::as_str));
    let o = loopbox(dir.path(), &args);
    let result: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let data = &result["outcome"]["data"];
    let path = strings(&data["path"]);
    let ended = data["terminated_by"].as_str().unwrap_or("refused");
    let code = code(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // A loop loopbox refuses by design (README, "Refused"): it must still be
    // refused before anything runs, for the reason named, until that changes.
    if let Some(why) = refused {
        if code == 2 && path.is_empty() && stderr.contains(why) {
            return Ok(());
        }
        return Err(format!(
            "{name}: loopbox was to refuse it for `{why}` (real.py); it exited {code} with path {path:?}\n{stderr}"
        ));
    }
    let want_path = strings(&t["path"]);
    let want_end = t["terminated_by"].as_str().unwrap();
    let want_code = t["exit_code"].as_i64().unwrap();
    if path == want_path && ended == want_end && i64::from(code) == want_code {
        // The same path: then the same prompts and the same files.
        let o = Command::new("python3")
            .arg(script())
            .args(["compare", name])
            .arg(dir.path())
            .output()
            .unwrap();
        return match o.status.code() {
            Some(0) => Ok(()),
            _ => Err(format!(
                "{name}: the same path as little-loops, but {}{}",
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr)
            )),
        };
    }
    let tail: String = stderr
        .chars()
        .rev()
        .take(1500)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Err(format!(
        "{name}: little-loops went {want_path:?}, ended `{want_end}`, exit {want_code}; \
         loopbox went {path:?}, ended `{ended}`, exit {code}\n{tail}"
    ))
}

#[test]
fn real_loops_take_the_path_little_loops_takes() {
    let text = std::fs::read_to_string(repo().join("tests/conformance/real.json")).unwrap();
    let recorded: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(recorded["little_loops"], RELEASE);
    let traces = recorded["traces"].as_array().unwrap();
    let compared = traces
        .iter()
        .filter(|t| t["spec"]["loopbox_refuses"].is_null())
        .count();
    assert!(compared >= 30, "{compared} real loops compared");
    let Some(corpus) = corpus() else { return };
    let started = std::time::Instant::now();
    let failures = Mutex::new(Vec::new());
    // The first alone, so the component is compiled once into the shared cache;
    // then a few at a time: most of a run is waiting on its processes.
    if let Err(e) = check(&corpus, &traces[0]) {
        failures.lock().unwrap().push(e);
    }
    let next = AtomicUsize::new(1);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while let Some(t) = traces.get(next.fetch_add(1, Ordering::SeqCst)) {
                    if let Err(e) = check(&corpus, t) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!(
        "{} real loops ({compared} compared, the rest refused by design) in {:.1} s",
        traces.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} real loops differ:\n{}",
        failures.len(),
        traces.len(),
        failures.join("\n")
    );
}
