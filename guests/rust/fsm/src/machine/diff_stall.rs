//! `diff_stall`'s reading of the work tree, as the release the loop follows
//! reads it (`little_loops:`, see [`crate::spec::Release`]):
//!
//! - before 1.166, `git diff --stat [-- scope]`, one count per scope for the
//!   whole run: an untracked file is no change, a commit of the changes is one;
//! - from 1.166 (`_diff_stall_fingerprint`), the content of every tracked and
//!   untracked (not ignored) file in scope, `.loops/` (and loopbox's own
//!   `.loopbox/`) aside, one count per
//!   state and scope: a new or edited file is a change whether or not it is
//!   committed, and a commit of changes already there is none.
//!
//! Each reading is one or two commands run through the host under the
//! user's `shell.allow` rules (`validate --grants` lists them).

use sha2::{Digest, Sha256};

use crate::eval::preview;
use crate::spec::Release;

use super::world::{Request, World};

/// What the evaluator compares between visits: the reading, or why there is none.
pub(super) struct Reading {
    /// The key the count is kept under in the run.
    pub key: String,
    pub text: Result<String, String>,
    /// What the verdict's detail calls it.
    pub what: &'static str,
}

/// The commands each release runs (for `validate --grants` as well).
pub fn commands(release: Release, scope: &[String]) -> Vec<Vec<String>> {
    if release < Release::DIFF_STALL_FINGERPRINT {
        let mut argv: Vec<String> = ["git", "diff", "--stat"].map(String::from).to_vec();
        if !scope.is_empty() {
            argv.push("--".into());
            argv.extend(scope.iter().cloned());
        }
        return vec![argv];
    }
    let mut list: Vec<String> = [
        "git",
        "ls-files",
        "-c",
        "-o",
        "-d",
        "-t",
        "--exclude-standard",
        "-z",
        "--",
    ]
    .map(String::from)
    .to_vec();
    if scope.is_empty() {
        list.push(".".into());
    } else {
        list.extend(scope.iter().cloned());
    }
    // The run's directory is under `.loops/` too (`.loops/runs/RUN_ID/`).
    // `.loopbox/` is loopbox's own store, which the run itself changes: as
    // `.loops/` is to little-loops, it is no progress.
    list.push(":(exclude).loops/".into());
    list.push(":(exclude).loopbox/".into());
    let hash = ["git", "hash-object", "--stdin-paths"]
        .map(String::from)
        .to_vec();
    vec![list, hash]
}

/// Read the work tree as `release` does, for the state `state`.
pub(super) fn read(
    release: Release,
    state: &str,
    scope: &[String],
    world: &mut dyn World,
) -> Result<Reading, String> {
    let mut cmds = commands(release, scope).into_iter();
    let first = cmds.next().unwrap_or_default();
    if release < Release::DIFF_STALL_FINGERPRINT {
        return Ok(Reading {
            key: format!("diff:{}", scope.join("|")),
            text: run(world, first, None)?,
            what: "git diff --stat",
        });
    }
    let mut sorted = scope.to_vec();
    sorted.sort();
    let key = format!("diff:{state}:{}", sorted.join("|"));
    let text = match run(world, first, None)? {
        Err(e) => Err(e),
        Ok(listing) => {
            let regular = regular_files(&listing);
            if regular.is_empty() {
                Ok(fingerprint(&[], &[]))
            } else {
                let stdin = regular.join("\n") + "\n";
                let hash = cmds.next().unwrap_or_default();
                run(world, hash, Some(stdin))?.map(|digests| {
                    let digests: Vec<&str> = digests.split_whitespace().collect();
                    fingerprint(&regular, &digests)
                })
            }
        }
    };
    Ok(Reading {
        key,
        text,
        what: "the content of the files in scope",
    })
}

/// The paths of `git ls-files -c -o -d -t -z`, sorted and once each, without
/// the tracked ones the work tree no longer has (tagged `R`): little-loops
/// hashes only what is there, so a deletion is a change by absence.
fn regular_files(listing: &str) -> Vec<String> {
    let mut present = std::collections::BTreeSet::new();
    let mut removed = std::collections::BTreeSet::new();
    for entry in listing.split('\0').filter(|e| !e.is_empty()) {
        let Some((tag, path)) = entry.split_once(' ') else {
            continue;
        };
        if tag == "R" {
            removed.insert(path.to_string());
        } else {
            present.insert(path.to_string());
        }
    }
    present.retain(|p| !removed.contains(p));
    present.into_iter().collect()
}

/// One value for the (path, blob) pairs, as little-loops hashes them.
fn fingerprint(paths: &[String], digests: &[&str]) -> String {
    let mut h = Sha256::new();
    for (path, digest) in paths.iter().zip(digests) {
        h.update(format!("{path}\0{digest}\0").as_bytes());
    }
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// A command's output, `Err` in the inner result when it failed (an `error`
/// verdict); the outer `Err` is a spent budget, which ends the run.
fn run(
    world: &mut dyn World,
    argv: Vec<String>,
    stdin: Option<String>,
) -> Result<Result<String, String>, String> {
    let name = argv.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
    match world.act(Request::Exec {
        argv,
        timeout_ms: Some(30_000),
        stdin,
    }) {
        Ok(o) if o.code() == 0 => Ok(Ok(o.stdout)),
        Ok(o) => Ok(Err(format!("{name} failed: {}", preview(&o.stderr)))),
        Err(e) if e.starts_with(super::BUDGET_EXHAUSTED) => Err(e),
        Err(e) => Ok(Err(format!("{name}: {}", preview(&e)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_files_are_read_once_each_without_the_removed() {
        let listing = "? new.txt\0H a.txt\0H b.txt\0R b.txt\0H link\0";
        assert_eq!(regular_files(listing), ["a.txt", "link", "new.txt"]);
        assert!(regular_files("").is_empty());
    }

    #[test]
    fn the_fingerprint_changes_with_any_path_or_blob() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = fingerprint(&p(&["a", "b"]), &["1", "2"]);
        assert_eq!(base, fingerprint(&p(&["a", "b"]), &["1", "2"]));
        assert_ne!(base, fingerprint(&p(&["a", "b"]), &["1", "3"]));
        assert_ne!(base, fingerprint(&p(&["a", "c"]), &["1", "2"]));
        assert_ne!(base, fingerprint(&p(&["a"]), &["1"]));
    }

    #[test]
    fn each_release_runs_its_own_commands() {
        let scope = vec!["src".to_string()];
        assert_eq!(
            commands(Release(1, 156), &scope),
            [vec!["git", "diff", "--stat", "--", "src"]]
        );
        let new = commands(Release(1, 167), &scope);
        assert_eq!(
            new[0].join(" "),
            "git ls-files -c -o -d -t --exclude-standard -z -- src :(exclude).loops/ :(exclude).loopbox/"
        );
        assert_eq!(new[1].join(" "), "git hash-object --stdin-paths");
    }
}

#[cfg(test)]
mod release_tests {
    use crate::spec::Release;

    #[test]
    fn a_loop_names_its_release_or_follows_the_newest() {
        assert_eq!(Release::parse("1.156.0"), Some(Release(1, 156)));
        assert_eq!(Release::parse("1.166"), Some(Release(1, 166)));
        for bad in ["1", "latest", "1.x", "1.2.3.4", ""] {
            assert_eq!(Release::parse(bad), None, "{bad}");
        }
        struct NoFiles;
        impl crate::Files for NoFiles {
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no files".into())
            }
        }
        let yaml =
            |head: &str| format!("name: r\n{head}initial: a\nstates:\n  a:\n    terminal: true\n");
        let lp = crate::load("t.yaml", &yaml(""), &mut NoFiles).unwrap();
        assert_eq!(lp.release(), Release::NEWEST);
        let lp = crate::load("t.yaml", &yaml("little_loops: '1.156'\n"), &mut NoFiles).unwrap();
        assert_eq!(lp.release(), Release(1, 156));
        let problems =
            crate::load("t.yaml", &yaml("little_loops: newest\n"), &mut NoFiles).unwrap_err();
        assert!(
            crate::render(&problems).contains("t.yaml:2: `little_loops` names the little-loops release the loop follows, like `1.156` or `1.167.0`, not `newest`"),
            "{}",
            crate::render(&problems)
        );
    }
}
