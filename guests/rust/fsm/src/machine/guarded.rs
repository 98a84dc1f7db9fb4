//! A state under `tamper_guard` or `prepatch_check`: the entry snapshot
//! before its action, the checks after its verdict and before its route, as
//! little-loops' `_execute_state` brackets them (`fsm/executor.py`). A `fail`
//! finding takes the loop's failure terminal whatever the state's routes say
//! (`_check_tamper_guard`); each check's record is appended to
//! `context._tamper_guard` / `context._prepatch_check`.

use serde_json::Value;

use crate::spec::State;
use crate::{prepatch, tamper};

use super::world::{Level, World};
use super::{End, Finish, Machine, failed};

/// What a guarded state's entry took.
pub(super) struct Entry {
    tamper: Option<(tamper::Policy, tamper::Snapshot)>,
    prepatch: Option<prepatch::Policy>,
}

impl<'a> Machine<'a> {
    /// Before the action: which guards apply, and the tamper snapshot.
    pub(super) fn guard_enter(&mut self, state: &State, world: &mut dyn World) -> Option<Entry> {
        let lp = &self.r.lp.guards;
        let tamper = tamper::effective(
            state.guards.tamper_guard.as_deref(),
            lp.tamper_guard.as_deref(),
        )
        .filter(|_| state.action.is_some());
        let prepatch = prepatch::effective(
            state.guards.prepatch_check.as_deref(),
            lp.prepatch_check.as_deref(),
        );
        if tamper.is_none() && prepatch.is_none() {
            return None;
        }
        let tamper = tamper.map(|policy| {
            let mut snap = match tamper::project(world) {
                Ok(project) => tamper::snapshot(world, &project),
                Err(e) => tamper::Snapshot {
                    trouble: Some(e),
                    ..Default::default()
                },
            };
            // `revert` puts files back as they are now: the host keeps copies.
            if policy == tamper::Policy::Revert && snap.trouble.is_none() {
                let present: Vec<String> = snap
                    .hashes
                    .iter()
                    .filter(|(_, h)| h.is_some())
                    .map(|(p, _)| p.clone())
                    .collect();
                let kept = world.snapshot(&present);
                if let Err(e) = &kept {
                    world.log(
                        Level::Warn,
                        &format!("`{}`: tamper_guard (revert): the host keeps no copies of the test files, so none can be put back: {e}", state.name),
                    );
                }
                snap.kept = Some(kept);
            }
            (policy, snap)
        });
        Some(Entry { tamper, prepatch })
    }

    /// After the verdict: the pre-patch check, then the tamper check
    /// (tamper first would let a revert change what the diff reads). The
    /// failure terminal to take when either fails under `fail` (tamper's
    /// wins); `None` to route as usual.
    pub(super) fn guard_exit(
        &mut self,
        state: &State,
        entry: Option<Entry>,
        succeeded: bool,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let Some(entry) = entry else {
            return Ok(None);
        };
        let project = tamper::project(world);
        // A `fail` finding of the pre-patch check; tamper's wins when both route.
        let mut prepatch_target = None;
        if let Some(policy) = entry.prepatch {
            let mut memo = std::mem::take(&mut self.prepatch_memo);
            let checked = project
                .as_ref()
                .map_err(|e| prepatch::Trouble::Refused(format!("prepatch_check: {e}")))
                .and_then(|p| prepatch::check(world, p, policy, &state.name, succeeded, &mut memo));
            self.prepatch_memo = memo;
            match checked {
                Ok(c) => {
                    if c.flagged {
                        world.log(
                            Level::Warn,
                            &format!(
                                "`{}`: prepatch_check ({}): a test the step added passes before the patch too (flagged)",
                                state.name,
                                policy.name()
                            ),
                        );
                        if policy == prepatch::Policy::Fail {
                            prepatch_target = failure_target(self.r.lp, state);
                        }
                    }
                    self.append("_prepatch_check", c.record);
                }
                Err(prepatch::Trouble::Raised(e)) => {
                    return Err(failed(End::Error, format!("state `{}`: {e}", state.name)));
                }
                Err(prepatch::Trouble::Refused(e)) => {
                    // A spent loopbox budget ends the run, wherever its refusal is quoted.
                    if let Some(end) = e
                        .find(super::BUDGET_EXHAUSTED)
                        .and_then(|i| super::budget_spent(&e[i..], &state.name))
                    {
                        return Err(end);
                    }
                    if policy == prepatch::Policy::Fail {
                        return Err(failed(
                            End::Error,
                            format!(
                                "state `{}`: prepatch_check gave no verdict: {e}",
                                state.name
                            ),
                        ));
                    }
                    world.log(
                        Level::Warn,
                        &format!(
                            "`{}`: prepatch_check ({}) gave no verdict: {e}",
                            state.name,
                            policy.name()
                        ),
                    );
                }
            }
        }
        if let Some((policy, before)) = &entry.tamper {
            let report = match &project {
                Ok(p) => tamper::check(world, p, before, *policy),
                Err(e) => {
                    let broken = tamper::Snapshot {
                        trouble: Some(e.clone()),
                        ..Default::default()
                    };
                    tamper::check(world, &tamper::Project::default(), &broken, *policy)
                }
            };
            if let Some(Ok(id)) = &before.kept {
                world.forget_snapshot(id);
            }
            self.append("_tamper_guard", report.record(&state.name));
            if !report.findings.is_empty() {
                // Only `fail` routes (`_check_tamper_guard`): `revert` and `allow` record.
                let enforced = !report.passed && *policy == tamper::Policy::Fail;
                let target = if enforced {
                    failure_target(self.r.lp, state)
                } else {
                    None
                };
                world.log(
                    Level::Warn,
                    &format!(
                        "`{}`: tamper_guard ({}): {}{}",
                        state.name,
                        policy.name(),
                        report.describe(),
                        match (&target, !enforced) {
                            (_, true) if *policy == tamper::Policy::Revert => format!(
                                "; put back: {}",
                                if report.reverted.is_empty() {
                                    "nothing".to_string()
                                } else {
                                    report.reverted.join(", ")
                                }
                            ),
                            (_, true) => String::new(),
                            (Some(t), false)
                                if self.r.lp.states.iter().any(|s| &s.name == t && s.failure) =>
                            {
                                format!("; going to the failure terminal `{t}`")
                            }
                            (Some(t), false) => {
                                format!("; going to `{t}`, its `on_no` (the loop has no failure terminal)")
                            }
                            (None, false) => {
                                "; the loop has no failure terminal, so the state routes as usual"
                                    .to_string()
                            }
                        }
                    ),
                );
                if target.is_some() {
                    return Ok(target);
                }
            }
        }
        Ok(prepatch_target)
    }

    fn append(&mut self, key: &str, record: Value) {
        let list = self
            .r
            .context
            .entry(key.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        if let Value::Array(items) = list {
            items.push(record);
        }
    }
}

/// Where a `fail` finding goes: the state's `on_no` when it is a failure
/// terminal, else the first failure terminal by name, else `on_no` (which
/// may be none: then the state routes as usual).
fn failure_target(lp: &crate::spec::Loop, state: &State) -> Option<String> {
    let on_no = if state.routes.table {
        None
    } else {
        state
            .routes
            .by_verdict
            .get("no")
            .map(|t| crate::route::resolve(state, t))
    };
    let mut failures: Vec<&str> = lp
        .states
        .iter()
        .filter(|s| s.failure)
        .map(|s| s.name.as_str())
        .collect();
    failures.sort();
    match &on_no {
        Some(n) if failures.contains(&n.as_str()) => on_no,
        _ => failures.first().map(|s| s.to_string()).or(on_no),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Map;

    use super::super::world::{Out, Request};
    use super::*;

    /// A workspace in a map. Shell text `write PATH TEXT` writes a file;
    /// `git` and `sha256sum` answer from the map (all files untracked).
    #[derive(Default)]
    struct Files {
        files: BTreeMap<String, String>,
        refuse_git: bool,
        logs: Vec<String>,
        /// The host's copies (`snapshot`), and whether it keeps any.
        kept: Vec<BTreeMap<String, String>>,
        no_snapshots: bool,
    }

    impl World for Files {
        fn act(&mut self, req: Request) -> Result<Out, String> {
            let mut stdout = String::new();
            match req {
                Request::Script { source, .. } => {
                    let mut w = source.splitn(3, ' ');
                    if w.next() == Some("write") {
                        let (p, t) = (w.next().unwrap(), w.next().unwrap_or(""));
                        self.files.insert(p.into(), t.into());
                    }
                }
                Request::Exec { argv, .. } if argv[0] == "git" => {
                    if self.refuse_git {
                        return Err("denied: `git ls-files` is not allowed".into());
                    }
                    if argv[1] == "ls-files" {
                        for f in self.files.keys() {
                            stdout.push_str(&format!("{f}\0"));
                        }
                    }
                }
                Request::Exec { argv, .. } => {
                    use sha2::{Digest, Sha256};
                    for f in &argv[3..] {
                        if let Some(t) = self.files.get(f) {
                            let h: String = Sha256::digest(t.as_bytes())
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect();
                            stdout.push_str(&format!("{h}  {f}\0"));
                        }
                    }
                }
                Request::Prompt { .. } => {}
            }
            Ok(Out {
                exit_code: Some(0),
                stdout,
                ..Default::default()
            })
        }
        fn log(&mut self, _: Level, message: &str) {
            self.logs.push(message.into());
        }
        fn progress(&mut self, _: &str) {}
        fn now_ms(&mut self) -> u64 {
            0
        }
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
        }
        fn snapshot(&mut self, paths: &[String]) -> Result<String, String> {
            if self.no_snapshots {
                return Err("denied: not granted".into());
            }
            let copy = paths
                .iter()
                .filter_map(|p| self.files.get(p).map(|t| (p.clone(), t.clone())))
                .collect();
            self.kept.push(copy);
            Ok(self.kept.len().to_string())
        }
        fn restore(&mut self, id: &str, paths: &[String]) -> Result<Vec<String>, String> {
            let kept = &self.kept[id.parse::<usize>().unwrap() - 1];
            let mut written = Vec::new();
            for p in paths {
                if let Some(t) = kept.get(p) {
                    self.files.insert(p.clone(), t.clone());
                    written.push(p.clone());
                }
            }
            Ok(written)
        }
    }

    fn run(yaml: &str, world: &mut Files) -> Vec<String> {
        struct NoFiles;
        impl crate::Files for NoFiles {
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no files".into())
            }
        }
        let lp = crate::load("t.yaml", yaml, &mut NoFiles)
            .unwrap_or_else(|p| panic!("{}", crate::render(&p)));
        super::super::run(&lp, &Map::new(), world).path
    }

    const GUARDED: &str = "
name: g
initial: prep
tamper_guard: fail
states:
  prep:
    tamper_guard: allow
    action: write tests/test_a.py one
    next: work
  work:
    action: ACTION
    on_yes: done
    on_no: done
  done:
    terminal: true
  failed:
    terminal: true
";

    #[test]
    fn a_fail_finding_takes_the_failure_terminal_whatever_the_routes_say() {
        let mut w = Files::default();
        let path = run(
            &GUARDED.replace("ACTION", "write tests/test_a.py two"),
            &mut w,
        );
        assert_eq!(path, ["prep", "work", "failed"]);
        assert!(
            w.logs
                .iter()
                .any(|l| l.contains("`tests/test_a.py` modified")
                    && l.contains("going to the failure terminal `failed`")),
            "{:?}",
            w.logs
        );
        // `prep` wrote the file under `allow`: a finding, and no route taken.
        assert!(w.logs.iter().any(|l| l.contains("tamper_guard (allow)")));
        // The same edit outside any window, or of a file that is not a test:
        let mut w = Files::default();
        assert_eq!(
            run(&GUARDED.replace("ACTION", "write src/a.py two"), &mut w),
            ["prep", "work", "done"]
        );
        let unguarded = GUARDED.replace("tamper_guard: fail\n", "");
        let mut w = Files::default();
        assert_eq!(
            run(
                &unguarded.replace("ACTION", "write tests/test_a.py two"),
                &mut w
            ),
            ["prep", "work", "done"]
        );
    }

    #[test]
    fn a_refused_guard_is_a_finding_and_no_failure_terminal_means_the_usual_route() {
        let mut w = Files {
            refuse_git: true,
            ..Default::default()
        };
        let path = run(&GUARDED.replace("ACTION", "echo"), &mut w);
        assert_eq!(path, ["prep", "work", "failed"]);
        assert!(
            w.logs.iter().any(|l| l.contains("could not check")),
            "{:?}",
            w.logs
        );
        let no_failure = GUARDED.replace("  failed:\n    terminal: true\n", "");
        let mut w = Files::default();
        assert_eq!(
            run(
                &no_failure.replace("ACTION", "write tests/test_a.py two"),
                &mut w
            ),
            ["prep", "work", "done"]
        );
    }

    #[test]
    fn revert_puts_back_what_the_action_changed_and_routes_as_usual() {
        let reverting = GUARDED.replace("tamper_guard: fail\n", "tamper_guard: revert\n");
        let mut w = Files::default();
        let path = run(
            &reverting.replace("ACTION", "write tests/test_a.py two"),
            &mut w,
        );
        assert_eq!(path, ["prep", "work", "done"]);
        assert_eq!(w.files["tests/test_a.py"], "one");
        assert!(
            w.logs
                .iter()
                .any(|l| l.contains("tamper_guard (revert)")
                    && l.contains("put back: tests/test_a.py")),
            "{:?}",
            w.logs
        );
        // Without the host's copies nothing is put back, and nothing routes either.
        let mut w = Files {
            no_snapshots: true,
            ..Default::default()
        };
        let path = run(
            &reverting.replace("ACTION", "write tests/test_a.py two"),
            &mut w,
        );
        assert_eq!(path, ["prep", "work", "done"]);
        assert_eq!(w.files["tests/test_a.py"], "two");
        assert!(
            w.logs.iter().any(|l| l.contains("keeps no copies")),
            "{:?}",
            w.logs
        );
    }
}
