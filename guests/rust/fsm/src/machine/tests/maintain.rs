//! `maintain`, `on_maintain` and `backoff`: a loop that starts again at its
//! terminal state, and pauses between its states; a top-level run parks
//! for the pause and goes on from what it saved. And `mcp_tool` states.

use super::*;

const HEALTH: &str = "
name: health
initial: check
maintain: true
backoff: 2.5
max_steps: 7
states:
  check:
    action: check
    on_yes: done
    on_no: fix
  fix:
    action: fix
    next: done
  done:
    terminal: true
    on_maintain: fix
";

/// A world that parks at every backoff, counting them.
struct Parking {
    inner: Scripted,
    parked: Vec<u64>,
}

impl World for Parking {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        self.inner.act(req)
    }
    fn log(&mut self, level: Level, message: &str) {
        self.inner.log(level, message)
    }
    fn progress(&mut self, message: &str) {
        self.inner.progress(message)
    }
    fn now_ms(&mut self) -> u64 {
        self.inner.now_ms()
    }
    fn read(&mut self, path: &str) -> Result<String, String> {
        self.inner.read(path)
    }
    fn backoff(&mut self, ms: u64) -> bool {
        self.parked.push(ms);
        true
    }
}

#[test]
fn maintain_starts_again_at_on_maintain_until_max_steps() {
    // check(no) fix done->fix(maintain) fix done->fix fix: 7 steps, the
    // maintain restarts counted, the terminal never entered.
    let mut w = Scripted::new(vec![exit(1, ""), exit(0, ""), exit(0, ""), exit(0, "")]);
    let end = run(&lp(HEALTH), &Map::new(), &mut w);
    assert_eq!(end.path, ["check", "fix", "fix", "fix"]);
    assert_eq!(end.end, End::MaxSteps, "{end:?}");
    assert_eq!(end.steps, 7);
    assert!(
        w.logs
            .iter()
            .any(|l| l.contains("maintain -> `fix` (pass 2)")),
        "{:?}",
        w.logs
    );
    // `run` parks nothing: the backoff is said once and skipped.
    assert_eq!(
        w.logs
            .iter()
            .filter(|l| l.contains("`backoff: 2.5s` is not kept here"))
            .count(),
        1
    );
    // Without `on_maintain` the loop starts again at `initial`.
    let plain = HEALTH.replace("    on_maintain: fix\n", "");
    let mut w = Scripted::new(vec![exit(0, ""), exit(0, ""), exit(0, ""), exit(0, "")]);
    let end = run(&lp(&plain), &Map::new(), &mut w);
    assert_eq!(end.path, ["check", "check", "check", "check"]);
}

#[test]
fn a_parked_run_goes_on_from_what_it_saved_through_json() {
    let l = lp(HEALTH);
    let mut w = Parking {
        inner: Scripted::new(vec![
            exit(1, "broken"),
            exit(0, ""),
            exit(0, ""),
            exit(0, ""),
        ]),
        parked: Vec::new(),
    };
    let mut outcome = start(&l, &Map::new(), Some("/ws"), &mut w);
    let mut rounds = 0;
    let end = loop {
        match outcome {
            Outcome::Ended(e) => break e,
            Outcome::Parked { saved, ms } => {
                assert_eq!(ms, 2500);
                rounds += 1;
                // What the guest stores, and reads back at the next event.
                let text = serde_json::to_string(&saved).unwrap();
                let back: Saved = serde_json::from_str(&text).unwrap();
                assert_eq!(*saved, back);
                outcome = resume(&l, back, &mut w);
            }
            Outcome::Asking { .. } => unreachable!("the loop asks nobody"),
        }
    };
    // A pause after every route: check->fix, fix->done, then fix->done twice;
    // the restarts at the terminal take none.
    assert_eq!(rounds, 4);
    assert_eq!(w.parked, [2500; 4]);
    assert_eq!(end.path, ["check", "fix", "fix", "fix"]);
    assert_eq!((end.end, end.steps), (End::MaxSteps, 7));
}

#[test]
fn a_parked_run_keeps_its_clock_so_the_loop_timeout_counts_the_pauses() {
    let yaml = HEALTH.replace("max_steps: 7\n", "max_steps: 50\ntimeout: 10\n");
    let l = lp(&yaml);
    let mut inner = Scripted::new(vec![exit(1, ""), exit(0, "")]);
    inner.tick_ms = 4000;
    let mut w = Parking {
        inner,
        parked: Vec::new(),
    };
    let mut outcome = start(&l, &Map::new(), None, &mut w);
    let end = loop {
        match outcome {
            Outcome::Ended(e) => break e,
            Outcome::Parked { saved, .. } => outcome = resume(&l, *saved, &mut w),
            Outcome::Asking { .. } => unreachable!("the loop asks nobody"),
        }
    };
    assert_eq!(end.end, End::Timeout, "{end:?}");
}

#[test]
fn an_mcp_state_routes_on_what_the_tool_said() {
    struct Mcp {
        inner: Scripted,
        reply: crate::mcp::Reply,
        asked: Vec<(String, String, String, Option<u64>)>,
    }
    impl World for Mcp {
        fn act(&mut self, req: Request) -> Result<Out, String> {
            self.inner.act(req)
        }
        fn log(&mut self, level: Level, message: &str) {
            self.inner.log(level, message)
        }
        fn progress(&mut self, _: &str) {}
        fn now_ms(&mut self) -> u64 {
            0
        }
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.inner.read(path)
        }
        fn mcp_call(
            &mut self,
            server: &str,
            tool: &str,
            arguments: &str,
            timeout_ms: Option<u64>,
        ) -> crate::mcp::Reply {
            self.asked
                .push((server.into(), tool.into(), arguments.into(), timeout_ms));
            self.reply.clone()
        }
    }
    let yaml = "
name: gate
initial: check
context:
  port: 3000
states:
  check:
    action_type: mcp_tool
    action: playwright/screenshot
    params:
      url: http://localhost:${context.port}
      full: true
    capture: shot
    route:
      success: passed
      tool_error: retry
      not_found: skipped
      timeout: retry
  passed:
    terminal: true
  retry:
    terminal: true
  skipped:
    terminal: true
";
    let cases = [
        (
            crate::mcp::Reply::Answered {
                status: crate::mcp::Status::Ok,
                answer: r#"{"content":[]}"#.into(),
                duration_ms: 3,
            },
            "passed",
        ),
        (
            crate::mcp::Reply::Answered {
                status: crate::mcp::Status::NoAnswer,
                answer: r#"{"error":"no answer"}"#.into(),
                duration_ms: 3,
            },
            "retry",
        ),
        (
            crate::mcp::Reply::Unreachable("denied: no MCP server `playwright`".into()),
            "skipped",
        ),
    ];
    for (reply, want) in cases {
        let mut w = Mcp {
            inner: Scripted::default(),
            reply,
            asked: Vec::new(),
        };
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.path, ["check", want], "{:?}", w.inner.logs);
        assert_eq!(
            w.asked,
            [(
                "playwright".to_string(),
                "screenshot".to_string(),
                r#"{"full":true,"url":"http://localhost:3000"}"#.to_string(),
                Some(30_000)
            )]
        );
        assert!(
            end.captured["shot"]["output"]
                .as_str()
                .unwrap()
                .starts_with('{')
        );
    }
    // A refusal that is not about reaching the tool takes the error route.
    let mut w = Mcp {
        inner: Scripted::default(),
        reply: crate::mcp::Reply::Refused("invalid: the arguments must be a JSON object".into()),
        asked: Vec::new(),
    };
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.end, End::Error, "{end:?}");
}
