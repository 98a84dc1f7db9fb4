//! A state's `agent:` (little-loops' `StateConfig.agent`): its prompts and
//! slash commands name that agent profile; its judge does not (little-loops'
//! `llm_structured` evaluator runs without it); shell states ignore it, with
//! a note; a name that could not be a profile is refused at load.

use super::*;

const ASK: &str = "name: p\ninitial: ask\nstates:\n  ask:\n    action: Is it done?\n    action_type: prompt\n    agent: loop-specialist\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n";

fn profile(req: &Request) -> Option<&str> {
    match req {
        Request::Prompt { profile, .. } => profile.as_deref(),
        other => panic!("not a prompt: {other:?}"),
    }
}

#[test]
fn a_prompt_states_agent_reaches_its_prompt_but_not_its_judge() {
    let mut w = Scripted::new(vec![
        exit(0, "All done."),
        exit(
            0,
            r#"{"verdict": "yes", "confidence": 0.95, "reason": "done", "evidence": "All done."}"#,
        ),
    ]);
    let end = run(&lp(ASK), &Map::new(), &mut w);
    assert_eq!(end.path, ["ask", "done"]);
    assert_eq!(profile(&w.asked[0]), Some("loop-specialist"));
    assert_eq!(profile(&w.asked[1]), None, "the judge: {:?}", w.asked[1]);
}

#[test]
fn a_slash_command_keeps_the_agent_and_a_state_without_one_has_none() {
    let yaml = ASK
        .replace("Is it done?", "/review")
        .replace("    action_type: prompt\n", "");
    let mut w = Scripted::new(vec![
        exit(0, "All done."),
        exit(
            0,
            r#"{"verdict": "yes", "confidence": 0.95, "reason": "done", "evidence": "All done."}"#,
        ),
    ]);
    run(&lp(&yaml), &Map::new(), &mut w);
    assert!(matches!(&w.asked[0], Request::Prompt { slash: true, .. }));
    assert_eq!(profile(&w.asked[0]), Some("loop-specialist"));

    let yaml = ASK.replace("    agent: loop-specialist\n", "");
    let mut w = Scripted::new(vec![
        exit(0, "All done."),
        exit(
            0,
            r#"{"verdict": "yes", "confidence": 0.95, "reason": "done", "evidence": "All done."}"#,
        ),
    ]);
    run(&lp(&yaml), &Map::new(), &mut w);
    assert_eq!(profile(&w.asked[0]), None);
}

fn load(yaml: &str) -> Result<Loop, String> {
    struct NoFiles;
    impl crate::Files for NoFiles {
        fn read(&mut self, _: &str) -> Result<String, String> {
            Err("no files".into())
        }
    }
    crate::load("a.yaml", yaml, &mut NoFiles).map_err(|p| crate::render(&p))
}

#[test]
fn agent_is_read_as_written_noted_on_shell_states_and_refused_when_not_a_name() {
    let lp = load(ASK).unwrap();
    assert_eq!(lp.states[0].agent.as_deref(), Some("loop-specialist"));
    assert!(lp.notes.is_empty(), "{:?}", lp.notes);

    let shell = ASK.replace("    action_type: prompt\n", "    action_type: shell\n");
    let lp = load(&shell).unwrap();
    let notes: Vec<String> = lp.notes.iter().map(|n| n.to_string()).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("a.yaml:7") && n.contains("`agent` applies to prompts; ignored")),
        "{notes:?}"
    );

    for bad in ["--help", "../x", "${context.who}"] {
        let e = load(&ASK.replace("loop-specialist", &format!("'{bad}'"))).unwrap_err();
        assert!(
            e.contains("a.yaml:7") && e.contains("must name an agent profile"),
            "{bad}: {e}"
        );
    }

    let e = load(&ASK.replace("    agent: loop-specialist\n", "    tools: [Read]\n")).unwrap_err();
    assert!(
        e.contains("define an `[agents.NAME]` profile") && e.contains("name it with `agent:`"),
        "{e}"
    );
}
