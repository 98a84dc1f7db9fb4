//! Learning states against a scripted registry: the workspace's
//! `.ll/learning-tests/` records, and an agent whose `/ll:explore-api`
//! writes one.

use std::collections::BTreeMap;

use super::*;

/// The scripted world, with workspace files read as the host reports them
/// and prompts that write a record.
#[derive(Default)]
struct Registry {
    w: Scripted,
    /// The record a prompt's text writes, by path.
    writes: BTreeMap<String, (String, String)>,
    /// Reads that fail as a refused grant does.
    denied: Vec<String>,
}

impl World for Registry {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        if let Request::Prompt { text, .. } = &req
            && let Some((path, record)) = self.writes.get(text)
        {
            self.w.files.insert(path.clone(), record.clone());
        }
        self.w.act(req)
    }
    fn log(&mut self, level: Level, message: &str) {
        self.w.log(level, message)
    }
    fn progress(&mut self, message: &str) {
        self.w.progress(message)
    }
    fn now_ms(&mut self) -> u64 {
        self.w.now_ms()
    }
    fn read(&mut self, path: &str) -> Result<String, String> {
        if self.denied.iter().any(|d| d == path) {
            return Err(format!(
                "reading `{path}` is not granted: no path in `workspace.read` covers it"
            ));
        }
        self.w
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
    }
}

const GATE: &str = "
name: gate
initial: prove
context:
  targets: 'Foo API, Bar SDK'
  max_retries: '2'
states:
  prove:
    type: learning
    learning:
      targets_csv: '${context.targets}'
      max_retries_expr: '${context.max_retries}'
    on_yes: done
    on_blocked: blocked
  done:
    terminal: true
  blocked:
    terminal: true
    failure: true
";

fn record(target: &str, status: &str, date: &str) -> String {
    format!("---\ntarget: {target}\ndate: '{date}'\nstatus: {status}\nassertions: []\n---\n")
}

fn with_records(records: &[(&str, &str)]) -> Registry {
    let mut r = Registry::default();
    for (target, status) in records {
        r.w.files.insert(
            crate::learning::record_path(target),
            record(target, status, "2099-01-01"),
        );
    }
    r
}

fn explore(target: &str) -> Request {
    Request::Prompt {
        text: format!("/ll:explore-api {target}"),
        slash: true,
        model: None,
        timeout_ms: None,
        profile: None,
    }
}

#[test]
fn proven_targets_route_on_yes_without_asking_the_agent() {
    let lp = lp(GATE);
    let mut r = with_records(&[("Foo API", "proven"), ("Bar SDK", "proven")]);
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "done"], "{:?}", r.w.logs);
    assert!(end.success);
    assert!(r.w.asked.is_empty());
    let logs = r.w.logs.join("\n");
    assert!(
        logs.contains("learning_target_proven: `prove`: `Foo API`"),
        "{logs}"
    );
    assert!(
        logs.contains("learning_complete: `prove`: 2 target(s) proven"),
        "{logs}"
    );
}

#[test]
fn a_refuted_target_routes_on_blocked() {
    let lp = lp(GATE);
    let mut r = with_records(&[("Foo API", "proven"), ("Bar SDK", "refuted")]);
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "blocked"], "{:?}", r.w.logs);
    assert!(!end.success);
    assert!(r.w.asked.is_empty());
    assert!(
        r.w.logs
            .iter()
            .any(|l| l.starts_with("learning_target_refuted"))
    );
}

#[test]
fn a_missing_record_is_explored_then_read_again() {
    let lp = lp(GATE);
    let mut r = with_records(&[("Foo API", "proven")]);
    r.w.replies = vec![exit(0, "explored")].into();
    r.writes.insert(
        "/ll:explore-api Bar SDK".into(),
        (
            ".ll/learning-tests/bar-sdk.md".into(),
            record("Bar SDK", "proven", "2099-01-01"),
        ),
    );
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "done"], "{:?}", r.w.logs);
    assert_eq!(r.w.asked, [explore("Bar SDK")]);
    let logs = r.w.logs.join("\n");
    assert!(
        logs.contains("learning_target_stale: `prove`: `Bar SDK` (missing)"),
        "{logs}"
    );
    assert!(
        logs.contains("learning_explore_invoked: `prove`: `Bar SDK`, attempt 1"),
        "{logs}"
    );
}

#[test]
fn an_unproven_target_blocks_after_max_retries_explorations() {
    // `on_no` when there is no `on_blocked`; `max_retries` as written.
    let yaml = GATE
        .replace("on_blocked: blocked", "on_no: blocked")
        .replace(
            "      max_retries_expr: '${context.max_retries}'\n",
            "      max_retries: 3\n",
        );
    let lp = lp(&yaml);
    let mut r = with_records(&[("Foo API", "stale")]);
    r.w.replies = vec![exit(0, ""), exit(1, ""), exit(0, "")].into();
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "blocked"], "{:?}", r.w.logs);
    assert_eq!(
        r.w.asked,
        [explore("Foo API"), explore("Foo API"), explore("Foo API")]
    );
    let logs = r.w.logs.join("\n");
    assert!(logs.contains("`Foo API` (stale)"), "{logs}");
    assert!(logs.contains("(retries_exhausted)"), "{logs}");
    // No retries at all: blocked at once, nothing asked.
    let mut ctx = Map::new();
    ctx.insert("max_retries".into(), json!("0"));
    let mut r = with_records(&[]);
    let end = run(&super::lp(GATE), &ctx, &mut r);
    assert_eq!(end.path, ["prove", "blocked"]);
    assert!(r.w.asked.is_empty());
}

#[test]
fn a_proven_record_older_than_stale_after_days_is_explored_when_enabled() {
    let lp = lp(GATE);
    let day = crate::learning::iso_day("2026-01-01").unwrap() as u64;
    let old = |r: &mut Registry| {
        for t in ["Foo API", "Bar SDK"] {
            r.w.files.insert(
                crate::learning::record_path(t),
                record(t, "proven", "2026-01-01"),
            );
        }
        r.w.clock = (day + 31) * 86_400_000;
    };
    // Off by default: the old records count.
    let mut r = Registry::default();
    old(&mut r);
    assert_eq!(run(&lp, &Map::new(), &mut r).path, ["prove", "done"]);
    // Enabled, 30 days by default: both are stale; the first is explored
    // twice (its record stays old) and then blocks the state.
    let mut r = Registry::default();
    old(&mut r);
    r.w.files.insert(
        ".ll/ll-config.json".into(),
        r#"{"learning_tests": {"enabled": true}}"#.into(),
    );
    r.w.replies = vec![exit(0, ""), exit(0, "")].into();
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "blocked"], "{:?}", r.w.logs);
    assert_eq!(r.w.asked, [explore("Foo API"), explore("Foo API")]);
    assert!(r.w.logs.join("\n").contains("`Foo API` (missing)"));
    // The local override turns it off again; 40 days keeps them fresh.
    let mut r = Registry::default();
    old(&mut r);
    r.w.files.insert(
        ".ll/ll-config.json".into(),
        r#"{"learning_tests": {"enabled": true}}"#.into(),
    );
    r.w.files.insert(
        ".ll/ll.local.md".into(),
        "---\nlearning_tests:\n  stale_after_days: 40\n---\n".into(),
    );
    assert_eq!(run(&lp, &Map::new(), &mut r).path, ["prove", "done"]);
}

#[test]
fn a_record_that_cannot_be_read_ends_the_run_naming_it() {
    let lp = lp(GATE);
    let mut r = with_records(&[]);
    r.denied.push(".ll/learning-tests/foo-api.md".into());
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.end, End::Error);
    assert!(
        end.summary
            .contains("learning record `.ll/learning-tests/foo-api.md`"),
        "{}",
        end.summary
    );
    assert!(end.summary.contains("not granted"), "{}", end.summary);
    assert!(r.w.asked.is_empty());
    // A record without a date: little-loops raises, the run ends.
    let mut r = with_records(&[]);
    r.w.files.insert(
        ".ll/learning-tests/foo-api.md".into(),
        "---\ntarget: Foo API\n---\n".into(),
    );
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.end, End::Error);
    assert!(end.summary.contains("no `date`"), "{}", end.summary);
    // A bad retry count, too.
    let mut ctx = Map::new();
    ctx.insert("max_retries".into(), json!("two"));
    let end = run(&lp, &ctx, &mut with_records(&[]));
    assert!(
        end.summary.contains("not a whole number"),
        "{}",
        end.summary
    );
}

#[test]
fn learning_states_are_checked_as_little_loops_checks_them() {
    struct NoFiles;
    impl crate::Files for NoFiles {
        fn read(&mut self, _: &str) -> Result<String, String> {
            Err("no files".into())
        }
    }
    let problems = |yaml: &str| match crate::load("t.yaml", yaml, &mut NoFiles) {
        Ok(_) => String::new(),
        Err(p) => crate::render(&p),
    };
    assert_eq!(problems(GATE), "");
    let no_yes = GATE.replace("    on_yes: done\n", "");
    assert!(
        problems(&no_yes).contains("needs `on_yes`"),
        "{}",
        problems(&no_yes)
    );
    let no_block = GATE.replace("    on_blocked: blocked\n", "    on_error: blocked\n");
    assert!(problems(&no_block).contains("`on_blocked` or `on_no`"));
    let empty = GATE.replace(
        "      targets_csv: '${context.targets}'\n",
        "      targets: []\n",
    );
    assert!(problems(&empty).contains("non-empty `targets` or `targets_csv`"));
    let table = GATE.replace(
        "    on_yes: done\n    on_blocked: blocked\n",
        "    route:\n      yes: done\n      blocked: blocked\n",
    );
    assert!(problems(&table).contains("never reads its `route` table"));
}

/// The remedy is the state's action turned slash command (little-loops'
/// `_dc_replace(state, action_type="slash_command")`): it keeps `agent:`.
#[test]
fn the_remedy_goes_to_the_states_agent_profile() {
    let lp = lp(&GATE.replace(
        "    type: learning\n",
        "    type: learning\n    agent: explorer\n",
    ));
    let mut r = with_records(&[("Foo API", "proven")]);
    r.w.replies = vec![exit(0, "explored")].into();
    r.writes.insert(
        "/ll:explore-api Bar SDK".into(),
        (
            ".ll/learning-tests/bar-sdk.md".into(),
            record("Bar SDK", "proven", "2099-01-01"),
        ),
    );
    let end = run(&lp, &Map::new(), &mut r);
    assert_eq!(end.path, ["prove", "done"], "{:?}", r.w.logs);
    let Request::Prompt { profile, .. } = &r.w.asked[0] else {
        panic!("{:?}", r.w.asked)
    };
    assert_eq!(profile.as_deref(), Some("explorer"));
}
