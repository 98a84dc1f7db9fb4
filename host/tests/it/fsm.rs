//! YAML loops through the CLI: the bundled example loops run with the real
//! `builtin:fsm` component on a copy of `examples/loops`, with real processes
//! and the example agent script; `validate` on broken loops, message by message.

use crate::common;
mod alias_bomb;
mod approval;
mod diff_stall;
mod idle;
mod learning;
mod mcp;
mod parked;
mod prepatch;
mod revert;
mod runs_the_same;
mod tamper_guard;
mod worktree;

use std::path::Path;
use std::process::Output;

use common::*;
use serde_json::Value;

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&o.stdout), text(&o.stderr)))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path_of(result: &Value) -> Vec<String> {
    result["outcome"]["data"]["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The run log of a `--json` run (which prints no progress itself).
fn log_of(dir: &Path, result: &Value) -> String {
    text(&loopbox(dir, &["runs", "log", result["run_id"].as_str().unwrap()]).stdout)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

#[test]
fn fix_the_tests_hands_the_failure_to_the_agent_until_the_tests_pass() {
    let p = example("loops");
    assert!(
        read(p.path(), "calc.sh").contains("$1 - $2"),
        "the example starts broken"
    );
    let o = loopbox(p.path(), &["run", "fix-the-tests.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        normalize(&o.stdout),
        "done: reached `done` after 3 steps (test → fix → test → done)\n"
    );
    let stderr = text(&o.stderr);
    // The progress line names the state and the step, and each transition is logged.
    for line in [
        "loopbox: fix-the-tests · test · step 1/10",
        "loopbox: fix-the-tests · fix · step 2/10",
        "[policy] info: captured `tests`: exit 1, 55 bytes of output",
        "[policy] info: step 1 `test`: no (exit 1) -> `fix`",
        "[policy] info: step 2 `fix`: next -> `test`",
        "[policy] info: step 3 `test`: yes (exit 0) -> `done`",
        "[host] info: script `sh test.sh` allowed by shell.scripts = true",
    ] {
        assert!(stderr.contains(line), "missing `{line}` in:\n{stderr}");
    }
    assert!(
        read(p.path(), "calc.sh").contains("$1 + $2"),
        "the agent fixed calc.sh"
    );
    let prompts = read(p.path(), ".fix-agent/prompts");
    assert!(
        prompts.starts_with(
            "The tests fail:\nadd: FAIL, calc.sh 2 3 printed -1, expected 5\n1 failed\n"
        ),
        "{prompts}"
    );
    assert_eq!(prompts.matches("---").count(), 1, "one prompt");
}

#[test]
fn the_convergence_loop_burns_the_todos_down_to_zero() {
    let p = example("loops");
    let o = loopbox(p.path(), &["run", "convergence.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(
        path_of(&result),
        [
            "measure", "work", "measure", "work", "measure", "work", "measure", "done"
        ]
    );
    assert_eq!(result["actions"], 7);
    assert!(!read(p.path(), "notes.md").contains("TODO"));
    let log = log_of(p.path(), &result);
    assert!(
        log.contains("step 1 `measure`: progress (3 (first value; target 0)) -> `work`"),
        "{log}"
    );
    assert!(
        log.contains("step 3 `measure`: progress (3 -> 2 (target 0)) -> `work`"),
        "{log}"
    );
    assert!(
        log.contains("step 7 `measure`: target (0 is within 0 of 0) -> `done`"),
        "{log}"
    );

    // A step that makes no progress is a stall: with two TODOs on one line,
    // burning one down leaves the count of lines at 1 (`previous:` reads the
    // count burn-down printed before it worked).
    let p = example("loops");
    std::fs::write(p.path().join("notes.md"), "TODO and TODO\n").unwrap();
    let o = loopbox(p.path(), &["run", "convergence.yaml", "--json"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["measure", "work", "measure", "failed"]);
    let log = log_of(p.path(), &result);
    assert!(
        log.contains("step 3 `measure`: stall (1 -> 1 (target 0)) -> `failed`"),
        "{log}"
    );
}

#[test]
fn triage_routes_on_captures_and_the_agents_action_result() {
    let p = example("loops");
    let o = loopbox(p.path(), &["run", "triage.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(
        path_of(&result),
        [
            "run-tests",
            "ask-agent",
            "check-report",
            "run-tests",
            "done"
        ]
    );
    let stderr = log_of(p.path(), &result);
    assert!(
        stderr.contains("step 3 `check-report`: yes (`^success$` found) -> `run-tests`"),
        "{stderr}"
    );
    // `${state.iteration}` is the loop's step, as in little-loops.
    assert!(
        read(p.path(), ".fix-agent/prompts")
            .starts_with("The test suite `test.sh` fails (step 2):\n")
    );

    // A bug the agent cannot fix: it reports `failed`, and the loop routes there.
    let p = example("loops");
    std::fs::write(p.path().join("calc.sh"), "#!/bin/sh\necho $(( $1 * $2 ))\n").unwrap();
    let o = loopbox(p.path(), &["run", "triage.yaml", "--json"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(
        path_of(&result),
        ["run-tests", "ask-agent", "check-report", "failed"]
    );
    assert_eq!(
        result["summary"],
        "reached `failed`, a failure state, after 3 steps (run-tests → ask-agent → check-report → failed)"
    );
}

#[test]
fn without_the_scripts_grant_a_shell_action_is_refused_and_routed_as_an_error() {
    let p = example("loops");
    let config = read(p.path(), "loopbox.toml").replace("scripts = true", "scripts = false");
    std::fs::write(p.path().join("loopbox.toml"), config).unwrap();
    let o = loopbox(p.path(), &["run", "fix-the-tests.yaml", "--json"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["test", "failed"]);
    let stderr = log_of(p.path(), &result);
    assert!(stderr.contains("step 1 `test`: error (denied: shell text is not allowed (`sh test.sh`): set `shell.scripts = true`"), "{stderr}");
    assert!(stderr.contains("-> `failed`"), "{stderr}");
    assert!(read(p.path(), "calc.sh").contains("$1 - $2"), "nothing ran");
}

#[test]
fn an_llm_verdict_comes_from_the_configured_agent() {
    let p = example("loops");
    let yaml = "name: judged
initial: test
import: common.yaml
states:
  test:
    exec: [sh, test.sh]
    evaluate:
      type: llm_structured
      prompt: Did every test pass?
    on_yes: done
    on_no: fix
  fix:
    action: The tests FAILED; fix calc.sh.
    action_type: prompt
    next: test
";
    std::fs::write(p.path().join("judged.yaml"), yaml).unwrap();
    let o = loopbox(p.path(), &["run", "judged.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["test", "fix", "test", "done"]);
    let prompts = read(p.path(), ".fix-agent/prompts");
    // The question, then little-loops' evidence contract, then the output.
    assert_eq!(
        prompts
            .matches("Did every test pass?\n\n\nIMPORTANT: For each condition you evaluate:\n")
            .count(),
        2,
        "{prompts}"
    );
    assert_eq!(
        prompts.matches("\n\n<action_output>\n").count(),
        2,
        "{prompts}"
    );
    let stderr = log_of(p.path(), &result);
    assert!(
        stderr.contains("step 1 `test`: no (no at 0.80: no passing tests in the output) -> `fix`"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "step 3 `test`: yes (yes at 0.90: the output reports passing tests) -> `done`"
        ),
        "{stderr}"
    );
}

#[test]
fn context_values_can_come_from_an_input_file() {
    let p = example("loops");
    std::fs::write(p.path().join("stuck.md"), "TODO one\n").unwrap();
    std::fs::write(p.path().join("ctx.json"), r#"{"notes": "stuck.md"}"#).unwrap();
    let o = loopbox(
        p.path(),
        &["run", "convergence.yaml", "--json", "--input", "@ctx.json"],
    );
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(
        path_of(&result),
        ["measure", "work", "failed"],
        "the loop worked on stuck.md, not notes.md: burn-down of stuck.md is not granted, and the refusal takes `on_error`"
    );
    assert!(
        log_of(p.path(), &result).contains("denied exec `sh tools/burn-down stuck.md`"),
        "{}",
        log_of(p.path(), &result)
    );
    assert!(read(p.path(), "notes.md").contains("TODO"));
}

#[test]
fn builtin_fsm_takes_the_loop_as_its_input() {
    let p = example("loops");
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:fsm",
            "--input",
            "@fix-the-tests.yaml",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let result = json_of(&o);
    assert_eq!(result["policy"], "builtin:fsm");
    assert_eq!(path_of(&result), ["test", "fix", "test", "done"]);
}

/// `loopbox run LOOP` killed (SIGKILL, by `LOOPBOX_CRASH_AT`) at `point`.
fn killed_at(dir: &Path, loop_file: &str, point: &str) {
    let o = trusted_command(dir)
        .args(["run", loop_file])
        .current_dir(dir)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .env("LOOPBOX_CRASH_AT", point)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "killed: {}", text(&o.stderr));
}

#[test]
fn a_run_killed_mid_loop_resumes_without_redoing_finished_steps() {
    let p = example("loops");
    // Killed right after the agent's reply is recorded: the test and the prompt are done.
    killed_at(p.path(), "fix-the-tests.yaml", "action-recorded:2");
    let runs = json_of(&loopbox(p.path(), &["runs", "--json"]));
    let id = runs[0]["id"].as_str().unwrap().to_string();
    assert_eq!(runs[0]["status"], "interrupted");

    let o = loopbox(p.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(path_of(&json_of(&o)), ["test", "fix", "test", "done"]);
    assert_eq!(
        read(p.path(), ".fix-agent/prompts").matches("---").count(),
        1,
        "the agent was prompted once, not again on resume"
    );
}

/// little-loops 1.167's new words: each read with its meaning, noted with
/// what differs, or refused with what to do instead; none passes unremarked.
#[test]
fn validate_reads_notes_or_refuses_each_little_loops_1_167_word() {
    invalid(
        "name: k\ninitial: a\nllm:\n  model_hint: reasoning\nstates:\n  a:\n    action: echo ready\n    action_type: shell\n    next: b\n  b:\n    action: make\n    scopes: [github]\n    model_hint: coding\n    evaluate:\n      type: advisor_consult\n      question: Go on?\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n",
        &[
            "4: llm: `model_hint` is not supported by loopbox: loopbox has no model-hint table: name the model with `model:`",
            "12: state `b`: `scopes` is not supported by loopbox: a loopbox command inherits no host variable but those the user lists in loopbox.toml's `[shell] pass_env`; list them there and drop `scopes`",
            "13: state `b`: `model_hint` is not supported by loopbox: loopbox has no model-hint table: name the model with `model:`, or an agent profile of loopbox.toml with `agent:`",
            "15: state `b`: evaluate: evaluator `advisor_consult` is not supported by loopbox: loopbox has no advisor: judge with `type: llm_structured` and a `prompt`, or run your own consult as the state's action and route on its answer with `type: classify`",
        ],
    );
    // Read as little-loops 1.167 reads them: no note. The `_ok` flags only
    // silence little-loops' own lint.
    noted(
        "name: l\ninitial: a\nabstention_route_ok: true\ncontext:\n  gate: ''\n  base: 3\nstates:\n  a:\n    action: \"run ${context.gate:shell:default=true} ${context.none:default=x:shell} ${context.none?:shell}\"\n    evaluate:\n      type: exit_code\n      abstain_on_exit_3: true\n    on_yes: b\n    on_no: b\n    on_cannot_judge: b\n  b:\n    action: echo 2\n    evaluate:\n      type: convergence\n      target: 0\n      reference: ${context.base}\n    route:\n      target: done\n      progress: done\n      stall: done\n  done:\n    terminal: true\n",
        &[],
    );
    // human_approval asks a person; validate says how, and what differs.
    noted(
        "name: o\ninitial: a\nstates:\n  a:\n    action: Ship it?\n    action_type: human_approval\n    on_yes: done\n    on_no: done\n    on_edit: fix\n  fix:\n    action: \"echo ${captured.a.edit}\"\n    next: done\n  done:\n    terminal: true\n",
        &[
            "5: state `a`: `action_type: human_approval` asks a person: at the terminal, else the run waits for `loopbox runs approve|deny|answer` or the server's API (`[confirm] unattended = \"decline\"`: the `timeout` route at once, as little-loops without an operator); an answer after the state's `timeout` routes `timeout`, but a waiting run does not wake by itself at that deadline",
        ],
    );
    noted(
        "name: n\ninitial: a\nstates:\n  a:\n    action: \"echo ${context.counts:default={}\"\n    next: done\n  done:\n    terminal: true\n",
        &[
            "5: state `a`: action: `${context.counts:default={}`: a `:default=` value may not hold `{` (the reference ends at the first `}`; little-loops 1.167 stops here, 1.158 and earlier took it as text); put the text in `context` and refer to it; the state fails there when it runs",
        ],
    );
    noted(
        "name: n\nlittle_loops: '1.156'\ninitial: a\nstates:\n  a:\n    action: \"echo ${context.counts:default={} ${context.x:shell:default=y}\"\n    next: done\n  done:\n    terminal: true\n",
        &[
            "6: state `a`: action: `${context.x:shell:default=y}`: little-loops 1.156 does not combine `:shell` with `:default=` or `?` (1.159 and later do); follow a later release (`little_loops:`), or drop one suffix; the state fails there when it runs",
        ],
    );
    noted(
        "name: m\ninitial: a\nartifact_output:\n  from: index.html\nartifact_mode: template\nstates:\n  a:\n    action: make\n    evaluate:\n      type: exit_code\n      question: ignored here\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n",
        &[
            "3: `artifact_output` is read and not acted on: the deliverable is not promoted out of `run_dir`: copy it from there yourself (or in a last shell state) when the run ends",
            "5: `artifact_mode` is read and not acted on: it describes `artifact_output`'s promotion, which loopbox does not do; the loop's own states read `context.artifact_mode` as usual",
            "11: state `a`: evaluate: `question` has no meaning for `exit_code` and is ignored",
        ],
    );
}

/// little-loops matches `output_contains` with Python's `re`: what loopbox
/// cannot match alike is refused, naming the construct; what Python itself
/// refuses (then searched as text) and its own dialect (`\Z`, `(?P<n>)`,
/// `{,3}`) are accepted.
#[test]
fn validate_refuses_a_pattern_loopbox_cannot_match_as_python_does() {
    let state = |pattern: &str| {
        format!(
            "name: r\ninitial: a\nstates:\n  a:\n    action: echo x\n    evaluate:\n      type: output_contains\n      pattern: '{pattern}'\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n"
        )
    };
    invalid(
        &state(r"\N{EM DASH}"),
        &[
            "8: state `a`: evaluate: `pattern` uses `\\N{...}`, a character by its name (write the character itself): little-loops matches with Python's `re`, and loopbox cannot match this alike; rewrite the pattern",
        ],
    );
    invalid(
        &state("(?ai)k"),
        &[
            "8: state `a`: evaluate: `pattern` uses `(?a)` with `(?i)`, ASCII-only case folding (match both cases with a class such as `[kK]`): little-loops matches with Python's `re`, and loopbox cannot match this alike; rewrite the pattern",
        ],
    );
    for fine in [
        r"done\Z",
        r"(?P<w>\w+) (?P=w)",
        "^x{,3}$",
        r"\p{L}",
        "(?<n>a)",
    ] {
        noted(&state(fine), &[]);
    }
}

/// `${env.NAME}` reads what loopbox.toml passes to commands (`PATH`, `[shell]
/// pass_env`: HOME, LANG and TERM by default) and `PWD`; another name is
/// refused at validate, saying what to add.
#[test]
fn validate_refuses_an_env_reference_the_config_does_not_pass() {
    let with = |refs: &str| {
        format!(
            "name: e\ninitial: a\nstates:\n  a:\n    action: 'echo {refs}'\n    next: done\n  done:\n    terminal: true\n"
        )
    };
    invalid(
        &with("${env.HOME} ${env.SECRET_TOKEN:default=x}"),
        &[
            "5: state `a`: `${env.SECRET_TOKEN}`: a command sees only the variables loopbox.toml passes it, and `SECRET_TOKEN` is not one; add \"SECRET_TOKEN\" to `[shell] pass_env` in loopbox.toml, or give the value in `context` (`--input` can set it)",
        ],
    );
    noted(
        &with("${env.HOME} ${env.PATH} ${env.PWD} ${env.LANG:shell}"),
        &[],
    );
}

/// `loopbox validate` on a broken loop: exit 2 and exactly these problems.
fn invalid(yaml: &str, problems: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loop.yaml"), yaml).unwrap();
    let o = loopbox(dir.path(), &["validate", "loop.yaml"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let mut want: Vec<String> = problems.iter().map(|p| format!("loop.yaml:{p}")).collect();
    want.push(format!(
        "error: loop.yaml has {} problem(s); fix them and run `loopbox validate loop.yaml` again",
        problems.len()
    ));
    assert_eq!(
        text(&o.stderr).lines().collect::<Vec<_>>(),
        want,
        "\n{yaml}"
    );
    assert!(o.stdout.is_empty());
}

/// `loopbox validate` on a loop that runs but has notes: exit 0 and exactly these notes
/// (shell text granted, so that the grants note stays out of them).
fn noted(yaml: &str, notes: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loop.yaml"), yaml).unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    let o = loopbox(dir.path(), &["validate", "loop.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let want: Vec<String> = notes
        .iter()
        .map(|n| format!("note: loop.yaml:{n}"))
        .collect();
    assert_eq!(
        text(&o.stderr).lines().collect::<Vec<_>>(),
        want,
        "\n{yaml}"
    );
    assert!(text(&o.stdout).starts_with("ok: loop.yaml is loop"));
}

#[test]
fn validate_names_each_problem_with_its_line() {
    invalid(
        "name: a\ninitial: start\nstates:\n  begin:\n    action: echo hi\n    next: done\n  done:\n    terminal: true\n",
        &["2: initial state `start` is not defined (states: begin, done)"],
    );
    invalid(
        "name: b\ninitial: test\nstates:\n  test:\n    action: cargo test\n    on_yes: done\n    on_no: fix\n  done:\n    terminal: true\n",
        &["7: state `test`: routes to `fix`, which is not defined (states: done, test)"],
    );
    // little-loops runs a loop with a state nothing reaches; loopbox says so.
    noted(
        "name: c\ninitial: test\nstates:\n  test:\n    action: cargo test\n    on_yes: done\n    on_no: done\n  orphan:\n    action: echo lost\n    next: done\n  done:\n    terminal: true\n",
        &["8: state `orphan` is unreachable: no route from `test` leads to it"],
    );
    invalid(
        "name: d\ninitial: a\nstates:\n  a:\n    action: echo a\n    next: b\n  b:\n    action: echo b\n    next: a\n",
        &["2: no terminal state defined: at least one state must have `terminal: true`"],
    );
    // A terminal state out of reach: little-loops runs it to max_steps, and so does loopbox.
    noted(
        "name: d\ninitial: a\nstates:\n  a:\n    action: echo a\n    next: b\n  b:\n    action: echo b\n    next: a\n  done:\n    terminal: true\n",
        &[
            "2: no terminal state can be reached from `a`: the loop can only stop at max_steps (or `on_max_steps`)",
            "10: state `done` is unreachable: no route from `a` leads to it",
        ],
    );
    invalid(
        "name: e\ninitial: a\nmax_step: 3\non_max_iterations: a\nstates:\n  a:\n    action: echo a\n    acton: echo typo\n    loop: other.yaml\n    next: done\n  done:\n    terminal: true\n",
        &[
            "4: `on_max_iterations` is not supported by loopbox: use `max_steps` and `on_max_steps`",
            "6: state `a`: give `loop` or `action`, not both",
            "9: state `a`: sub-loop `other.yaml` cannot be read (other.yaml: `other.yaml` does not exist in the workspace)",
        ],
    );
    // Unknown fields are ignored, as little-loops ignores them, and named.
    noted(
        "name: e\ninitial: a\nmax_step: 3\nstates:\n  a:\n    action: echo a\n    acton: echo typo\n    next: done\n  done:\n    terminal: true\n",
        &[
            "3: unknown field `max_step` is ignored (fields: name, description, initial, states, context, max_steps, on_max_steps, max_iterations, timeout, default_timeout, default_idle_timeout, llm, import, input_key, required_inputs, parameters, circuit, max_edge_revisits, tamper_guard, prepatch_check, maintain, backoff, little_loops)",
            "7: state `a`: unknown field `acton` is ignored (fields: action, exec, action_type, evaluate, route, next, terminal, failure, capture, append_to_messages, timeout, idle_timeout, model, agent, max_retries, on_retry_exhausted, loop, with, context_passthrough, sub_loop_markers, worktree, fragment, description, throttle, retryable_exit_codes, type, learning, tamper_guard, prepatch_check, params, on_maintain, on_<verdict>)",
        ],
    );
    invalid(
        "name: f\ninitial: a\nstates:\n  a:\n    action: echo 3\n    evaluate:\n      type: output_regex\n    on_yes: b\n    on_no: c\n  b:\n    action: echo 3\n    evaluate:\n      type: mcp_result\n    on_yes: done\n  c:\n    action: echo 3\n    evaluate:\n      type: output_numeric\n      operator: approx\n      target: many\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n",
        &[
            "7: state `a`: evaluate: unknown evaluator type `output_regex` (types: exit_code, output_contains, output_numeric, output_json, convergence, llm_structured, diff_stall, score_stall, open_question_stall, action_stall, classify, harbor_scorer, mcp_result)",
            "19: state `c`: evaluate: `operator` must be one of eq, ne, lt, le, gt, ge, not `approx`",
            "20: state `c`: evaluate: `target` must be a number or a `${...}` reference, not `many`",
        ],
    );
    invalid(
        "name: g\ninitial: a\nstates:\n  a:\n    action: print('hi')\n    action_type: python\n    next: b\n  b:\n    action: github/create_issue\n    action_type: mcp_tool\n    next: done\n  done:\n    terminal: true\n",
        &[
            "6: state `a`: `action_type` must be one of shell, prompt, slash_command, mcp_tool, not `python`",
        ],
    );
    invalid(
        "name: h\ninitial: a\nstates:\n  a:\n    action: \"unclosed\n    next: done\n",
        &["5: not valid YAML: invalid indentation in quoted scalar"],
    );
    invalid(
        "name: i\ninitial: a\ncontext:\n  dir: src\nstates:\n  a:\n    action: \"ls ${context.dir} ${context.missing} ${captured.nope.output} ${prev.oops} ${context.dir:default=x}\"\n    next: done\n  done:\n    terminal: true\n",
        &[
            "7: state `a`: action: `${captured.nope.output}`: no state captures `nope` (captures: none); add `capture: nope` to the state that produces it, or `:default=` / `?` to the reference",
        ],
    );
    // What little-loops finds only when the state runs is a note: the run stops there.
    noted(
        "name: i\ninitial: a\ncontext:\n  dir: src\nstates:\n  a:\n    action: \"ls ${context.dir} ${context.missing} ${prev.oops} ${context.dir:default=x} ${env.PWD}\"\n    next: done\n  done:\n    terminal: true\n",
        &[
            "7: state `a`: action: `${context.missing}` is not declared: it must come from --input, or the run stops at this state",
            "7: state `a`: action: `${prev.oops}`: `prev` has output, exit_code, stderr, duration_ms, state, result and timeout_kind",
        ],
    );
    // A verdict nothing routes: little-loops runs the loop and ends it there
    // ("No valid transition"), and so does loopbox.
    noted(
        "name: j\ninitial: a\nstates:\n  a:\n    action: make\n    on_yes: done\n  done:\n    terminal: true\n",
        &[
            "4: state `a`: verdict `no` of `exit_code` goes nowhere: the run ends there (no valid transition); add `on_no` or `on_error`, or `_` in a `route` table",
        ],
    );
    // A capture no state makes: little-loops refuses it at load
    // (`_validate_capture_reachability`), unless `capture_reachability_ok`.
    let uncaptured = "name: i\ninitial: a\nstates:\n  a:\n    action: \"echo ${captured.nope.output} ${captured.maybe.output?}\"\n    next: done\n  done:\n    terminal: true\n";
    invalid(
        uncaptured,
        &[
            "5: state `a`: action: `${captured.nope.output}`: no state captures `nope` (captures: none); add `capture: nope` to the state that produces it, or `:default=` / `?` to the reference",
        ],
    );
    noted(
        &uncaptured.replace(
            "initial: a\n",
            "initial: a\ncapture_reachability_ok: true\n",
        ),
        &[
            "6: state `a`: action: `${captured.nope.output}`: no state captures `nope` (captures: none)",
        ],
    );
    invalid(
        "name: j\ninitial: a\nstates:\n  a:\n    action: make\n    on_yes: b\n  b:\n    action: make\n    next: c\n    on_yes: a\n  c:\n    terminal: true\n    failure: maybe\n    on_yes: a\n  d:\n    failure: true\n    next: done\n  done:\n    terminal: true\n",
        &[
            "13: state `c`: `failure` must be true or false, not `maybe`",
            "16: state `d`: `failure: true` marks how a terminal state ends; add `terminal: true`",
        ],
    );
    invalid(
        "name: k\ninitial: a\nimport: [missing.yaml, ../outside.yaml]\nstates:\n  a:\n    next: done\n  done:\n    terminal: true\n  a:\n    next: done\n",
        &["9: not valid YAML: key `a` appears twice in this mapping (first on line 5)"],
    );
}

/// `validate --grants` lists what a loop needs from loopbox.toml, checked
/// against it; without the flag, the missing ones are one note.
#[test]
fn validate_lists_the_grants_a_loop_needs() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "name: g
initial: test
states:
  test:
    exec: [make, test]
    on_yes: checks
    on_no: fix
  fix:
    action: Fix the tests.
    action_type: prompt
    on_yes: checks
    on_no: checks
  checks:
    action: gh pr checks 12 | grep -q pass
    evaluate:
      type: diff_stall
    on_yes: done
    on_no: done
  done:
    terminal: true
";
    std::fs::write(dir.path().join("loop.yaml"), yaml).unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\nallow = [[\"make\", \"test\"]]\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["validate", "--grants", "loop.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().skip(2).collect();
    assert_eq!(
        lines,
        [
            "  granted  shell.allow [\"make\", \"test\"]: `exec: make test` (state `test`)",
            "  missing  [agent]: prompts (state `fix`)",
            "  missing  [agent]: the judge (`llm_structured`) (state `fix`)",
            "  granted  shell.scripts = true: shell text (`action`) (state `checks`)",
            "  missing  shell.network = true: runs gh: without the network it fails in the sandbox, and its verdict changes (state `checks`)",
            "  missing  shell.allow [\"git\", \"ls-files\"]: `diff_stall` runs `git ls-files -c -o -d -t --exclude-standard -z -- . ':(exclude).loops/' ':(exclude).loopbox/'` (state `checks`)",
            "  missing  shell.allow [\"git\", \"hash-object\"]: `diff_stall` runs `git hash-object --stdin-paths` (state `checks`)",
        ],
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap().starts_with("needs from "),
        "{out}"
    );
    assert!(!out.contains("not trusted"), "{out}");
    // The same config, never approved (another user's data directory): its
    // `granted` lines are marked as what it would grant, never as granted now.
    let stranger = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(common::BIN)
        .current_dir(dir.path())
        .args(["validate", "--grants", "loop.yaml"])
        .env("XDG_DATA_HOME", stranger.path())
        .output()
        .unwrap();
    let untrusted = text(&o.stdout);
    assert!(
        untrusted.contains("(not trusted yet: nothing is granted until `loopbox trust "),
        "{untrusted}{}",
        text(&o.stderr)
    );
    // Without --grants: one note naming the missing keys.
    let o = loopbox(dir.path(), &["validate", "loop.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(
            "note: a run needs what loopbox.toml does not grant: [agent], shell.network = true, shell.allow [\"git\", \"ls-files\"], shell.allow [\"git\", \"hash-object\"]; `loopbox validate --grants loop.yaml` lists each state's needs"
        ),
        "{}",
        text(&o.stderr)
    );
    // --json carries them too.
    let o = loopbox(dir.path(), &["validate", "loop.yaml", "--json"]);
    let v = json_of(&o);
    assert_eq!(v["needs"][1]["key"], "[agent]", "{v}");
    assert_eq!(v["needs"][1]["status"], "missing", "{v}");
}

#[test]
fn validate_checks_imports_and_reports_json() {
    let p = example("loops");
    let o = loopbox(p.path(), &["validate", "triage.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "ok: triage.yaml is loop `triage`: 5 states, starts at `run-tests`, ends at `done` or `failed`, at most 12 steps\n"
    );

    std::fs::write(
        p.path().join("bad.yaml"),
        "name: k\ninitial: a\nimport: [missing.yaml, ../outside.yaml, common.yaml]\nstates:\n  a:\n    next: done\n  failed:\n    terminal: true\n",
    )
    .unwrap();
    let o = loopbox(p.path(), &["validate", "bad.yaml", "--json"]);
    assert_eq!(code(&o), 2);
    let result = json_of(&o);
    assert_eq!(result["valid"], false);
    let problems: Vec<String> = result["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}:{}: {}",
                p["file"].as_str().unwrap(),
                p["line"],
                p["message"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        problems,
        [
            "bad.yaml:3: cannot import `missing.yaml`: no missing.yaml in the workspace",
            "bad.yaml:3: import `../outside.yaml` leaves the workspace; imports are read through the workspace and must stay inside it",
            "common.yaml:5: state `failed` is already defined in bad.yaml (line 7)",
        ]
    );

    // A loop with problems never starts a run.
    let o = loopbox(p.path(), &["run", "bad.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr)
            .starts_with("error: the loop has 3 problem(s):\n  │ bad.yaml:3: cannot import"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("(`loopbox validate bad.yaml` checks a loop without running it)")
    );
    assert_eq!(
        text(&loopbox(p.path(), &["runs", "--json"]).stdout).trim(),
        "[]"
    );
}

#[test]
fn hostile_or_missing_loop_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["validate", "nowhere.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).starts_with("error: loop `nowhere.yaml` cannot be read: No such file"),
        "{}",
        text(&o.stderr)
    );

    std::fs::write(dir.path().join("huge.yaml"), "a".repeat(2 << 20)).unwrap();
    let o = loopbox(dir.path(), &["run", "huge.yaml"]);
    assert_eq!(code(&o), 2);
    assert_eq!(
        text(&o.stderr),
        "error: loop `huge.yaml` cannot be read: it is 2097152 bytes; at most 1048576 bytes are read\n"
    );

    // Aliases that expand exponentially stop at the node cap instead of eating memory.
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{}", i - 1); 10].join(", ")
        ));
    }
    std::fs::write(dir.path().join("bomb.yaml"), bomb).unwrap();
    let o = loopbox(dir.path(), &["validate", "bomb.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("not valid YAML: aliases expand to more than 100000 values, the most they may add to a loop file (each `*name` copies all its anchor holds; are aliases nesting?)"),
        "{}",
        text(&o.stderr)
    );

    // A plain loop of 50,000 states (under 1 MiB, no aliases) is no alias bomb:
    // it was refused as one (`expands to more than 100000 values (are aliases
    // nesting?)`). Names of three letters keep it under the byte limit.
    let abc: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    let name = |i: usize| -> String {
        [abc[i / (52 * 52) % 52], abc[i / 52 % 52], abc[i % 52]]
            .iter()
            .collect()
    };
    let mut big = format!("name: big\ninitial: {}\nstates:\n", name(0));
    for i in 0..50_000 {
        big.push_str(&format!("  {}: {{next: {}}}\n", name(i), name(i + 1)));
    }
    big.push_str(&format!("  {}: {{terminal: true}}\n", name(50_000)));
    assert!(big.len() < 1 << 20, "{}", big.len());
    std::fs::write(dir.path().join("big.yaml"), big).unwrap();
    let o = loopbox(dir.path(), &["validate", "big.yaml"]);
    assert_eq!(
        text(&o.stdout),
        "ok: big.yaml is loop `big`: 50001 states, starts at `aaa`, ends at `szC`, at most 50 steps\n",
        "{}",
        text(&o.stderr)
    );

    std::fs::write(dir.path().join("binary.yaml"), [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let o = loopbox(dir.path(), &["validate", "binary.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("it must be UTF-8 text"),
        "{}",
        text(&o.stderr)
    );

    // An --input file that is not there is named; nothing runs.
    let p = example("loops");
    let o = loopbox(
        p.path(),
        &["run", "convergence.yaml", "--input", "@nope.json"],
    );
    assert_eq!(code(&o), 2);
    assert!(text(&o.stderr).contains("nope.json"), "{}", text(&o.stderr));
    assert_eq!(
        text(&loopbox(p.path(), &["runs", "--json"]).stdout).trim(),
        "[]"
    );
}

#[test]
fn inspect_describes_the_fsm_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["inspect", "builtin:fsm", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let report = json_of(&o);
    assert_eq!(report["info"]["name"], "fsm");
    assert_eq!(report["world"], "loop-policy");
}

#[test]
fn a_sub_loop_killed_mid_run_resumes_without_redoing_its_finished_actions() {
    let p = conformance_workspace();
    std::fs::write(
        p.path().join(".loops/appends.yaml"),
        "name: appends\ninitial: one\nstates:\n  one:\n    action: echo one >> log.txt\n    next: two\n  two:\n    action: echo two >> log.txt\n    next: three\n  three:\n    action: echo three >> log.txt\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    std::fs::write(
        p.path().join(".loops/outer.yaml"),
        "name: outer\ninitial: call\nstates:\n  call:\n    loop: appends\n    on_yes: after\n    on_no: failed\n  after:\n    action: echo after >> log.txt\n    next: done\n  done:\n    terminal: true\n  failed:\n    terminal: true\n",
    )
    .unwrap();
    killed_at(p.path(), ".loops/outer.yaml", "action-recorded:2");
    assert_eq!(read(p.path(), "log.txt"), "one\ntwo\n");
    let runs = json_of(&loopbox(p.path(), &["runs", "--json"]));
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let o = loopbox(p.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(path_of(&json_of(&o)), ["call", "after", "done"]);
    assert_eq!(
        read(p.path(), "log.txt"),
        "one\ntwo\nthree\nafter\n",
        "the child's finished actions were replayed from the journal, not run again"
    );
}

#[test]
fn names_a_loop_controls_cannot_leave_the_workspace() {
    let p = conformance_workspace();
    // A sub-loop chosen at run time from the input.
    std::fs::write(
        p.path().join(".loops/pick.yaml"),
        "name: pick\ninitial: call\ncontext:\n  which: none\nstates:\n  call:\n    loop: ${context.which}\n    on_yes: done\n    on_no: done\n    on_error: refused\n  done:\n    terminal: true\n  refused:\n    terminal: true\n    failure: true\n",
    )
    .unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("evil.yaml"), "name: evil\ninitial: a\nstates:\n  a:\n    action: touch pwned\n    next: done\n  done:\n    terminal: true\n").unwrap();
    let escape = format!(
        "{{\"which\": \"../../../../../../..{}/evil\"}}",
        outside.path().display()
    );
    for which in [escape.as_str(), r#"{"which": "/etc/passwd"}"#] {
        let o = loopbox(
            p.path(),
            &["run", ".loops/pick.yaml", "--json", "--input", which],
        );
        assert_eq!(code(&o), 2, "{}", text(&o.stderr));
        let result = json_of(&o);
        assert_eq!(path_of(&result), ["call", "refused"], "{which}");
        assert!(
            log_of(p.path(), &result).contains("cannot be read"),
            "{}",
            log_of(p.path(), &result)
        );
    }
    assert!(!p.path().join("pwned").exists());

    // A `.loops` that a sandboxed command turned into a link out of the
    // workspace: the run's directory is not created through it.
    let q = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("tests/conformance/loops/flow.yaml"),
        q.path().join("flow.yaml"),
    )
    .unwrap();
    std::fs::write(q.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    std::os::unix::fs::symlink(target.path(), q.path().join(".loops")).unwrap();
    let o = loopbox(q.path(), &["run", "flow.yaml"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("cannot create the run's directory .loops/runs/"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_dir(target.path()).unwrap().count(),
        0,
        "nothing was created outside"
    );
}

/// A loop cannot import from loopbox's store or a path `shell.hide` names, by
/// name or through a symbolic link a sandboxed command could have planted.
#[test]
fn imports_do_not_reach_the_store_or_hidden_paths() {
    let p = example("loops");
    let toml =
        read(p.path(), "loopbox.toml").replacen("[shell]\n", "[shell]\nhide = [\"vault\"]\n", 1);
    std::fs::write(p.path().join("loopbox.toml"), toml).unwrap();
    std::fs::create_dir_all(p.path().join(".loopbox")).unwrap();
    std::fs::create_dir_all(p.path().join("vault")).unwrap();
    for f in [".loopbox/lib.yaml", "vault/lib.yaml"] {
        std::fs::copy(p.path().join("common.yaml"), p.path().join(f)).unwrap();
    }
    std::os::unix::fs::symlink(".loopbox/lib.yaml", p.path().join("store-lib.yaml")).unwrap();
    std::os::unix::fs::symlink("vault", p.path().join("shelf")).unwrap();
    for import in ["store-lib.yaml", "shelf/lib.yaml", "vault/lib.yaml"] {
        std::fs::write(
            p.path().join("l.yaml"),
            format!("name: l\ninitial: a\nimport: [{import}]\nstates:\n  a:\n    next: done\n"),
        )
        .unwrap();
        let o = loopbox(p.path(), &["validate", "l.yaml"]);
        assert_eq!(code(&o), 2, "{import}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(&format!("`{import}` is hidden from policies")),
            "{import}: {}",
            text(&o.stderr)
        );
    }
    // The same library, not hidden, imports.
    std::os::unix::fs::symlink("common.yaml", p.path().join("plain-lib.yaml")).unwrap();
    std::fs::write(
        p.path().join("l.yaml"),
        "name: l\ninitial: a\nimport: [plain-lib.yaml]\nstates:\n  a:\n    next: done\n",
    )
    .unwrap();
    let o = loopbox(p.path(), &["validate", "l.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
}

#[test]
fn the_little_loops_corpus_shapes_validate_with_notes() {
    // A loop shaped like little-loops' own: metadata, a fragment library, a
    // parent via `from:`, a sub-loop, `run_dir`, and a route table.
    let p = conformance_workspace();
    let o = loopbox(p.path(), &["validate", ".loops/sub-loop.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v = json_of(&o);
    assert_eq!(v["valid"], true);
    let o = loopbox(p.path(), &["validate", ".loops/route-table.yaml"]);
    assert_eq!(code(&o), 0);
    assert!(
        text(&o.stderr).contains("note: .loops/route-table.yaml:10: state `boom`: `on_*` routes beside a `route` table are ignored"),
        "{}",
        text(&o.stderr)
    );
}

/// Issue 45, item 11: a loop's run is listed and shown by its loop's name,
/// with its path of states and its journal as state, command and outcome.
#[test]
fn runs_and_runs_show_name_the_loop_and_show_its_path_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"echo\"], [\"cat\"], [\"sleep\"]]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("tidy.yaml"), crate::serve::loops::TIDY).unwrap();
    let o = loopbox(dir.path(), &["run", "tidy.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let id = json_of(&o)["run_id"].as_str().unwrap().to_string();
    let list = text(&loopbox(dir.path(), &["runs", "--policy", "tidy"]).stdout);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&id) && l.contains("loop tidy")),
        "{list}"
    );
    let shown = text(&loopbox(dir.path(), &["runs", "show", &id]).stdout);
    for want in [
        format!("run {id} of loop tidy (builtin:fsm)"),
        "loop:     tidy.yaml".to_string(),
        "path:     look → wait → check → fixed → done (4 step(s))".to_string(),
        "    1.4  look         shell  echo looking  -> exit 0 in".to_string(),
        "check        shell  cat nothing.txt  -> exit 1 in".to_string(),
        " ms: no (exit 1), then fixed".to_string(),
    ] {
        assert!(shown.contains(&want), "{want:?} in:\n{shown}");
    }
    assert!(!shown.contains("{\"exec\""), "{shown}");
    let v = json_of(&loopbox(dir.path(), &["runs", "show", &id, "--json"]));
    assert_eq!(
        (
            &v["policy_name"],
            &v["loop"]["path"][2],
            &v["journal"][2]["command"]
        ),
        (
            &serde_json::json!("tidy"),
            &serde_json::json!("check"),
            &serde_json::json!("cat nothing.txt")
        )
    );
}
