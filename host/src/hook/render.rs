//! A policy's decision, or loopbox's own failure, as the hook answer each
//! agent understands: stdout JSON, stderr text and an exit code.
//!
//! Two rules hold for every agent. A rewritten tool call is never approved
//! by loopbox: the user's own permission flow still sees it (a policy that
//! could rewrite and approve at once could run anything through the agent).
//! And a failure on a gate (a tool call, a permission request) refuses by
//! default: a broken or trapping gate must not let every call through.
//!
//! Everything here is pure and tested without Wasm.

use serde_json::{Value, json};

use super::agents::{Agent, Block, EventSpec, Kind};
use crate::bindings::Decision;

/// What the hook process prints and exits with.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutput {
    /// The JSON object for stdout; None prints nothing.
    pub stdout: Option<Value>,
    /// A line for stderr (the reason, for exit code 2).
    pub stderr: Option<String>,
    pub exit: i32,
}

/// Exit code the agents read as "a non-blocking error": shown to the user, the agent goes on.
pub const NON_BLOCKING: i32 = 1;
/// Exit code the agents read as "blocked", with the reason on stderr.
pub const BLOCKING: i32 = 2;

impl HookOutput {
    pub fn json(v: Value) -> HookOutput {
        HookOutput {
            stdout: Some(v),
            stderr: None,
            exit: 0,
        }
    }

    pub fn nothing() -> HookOutput {
        HookOutput {
            stdout: None,
            stderr: None,
            exit: 0,
        }
    }

    fn exit_two(reason: &str) -> HookOutput {
        HookOutput {
            stdout: None,
            stderr: Some(reason.to_string()),
            exit: BLOCKING,
        }
    }
}

/// What a hook does when loopbox itself fails (bad input, a trapping policy, a timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Refuse, in the event's blocking form: deny the tool call, keep the agent from stopping.
    Block,
    /// Let the agent go on; the failure is shown to the user.
    Allow,
}

impl OnError {
    /// Gates fail closed; everything else fails open, so a broken Stop hook cannot trap the agent in a loop.
    pub fn default_for(spec: &EventSpec) -> OnError {
        match spec.kind {
            Kind::Tool | Kind::Permission => OnError::Block,
            Kind::Turn | Kind::Other => OnError::Allow,
        }
    }
}

fn system_message(text: &str) -> Value {
    json!({"systemMessage": format!("loopbox: {text}")})
}

fn cannot_carry(agent: Agent, spec: &EventSpec, decision: &Decision) -> String {
    format!(
        "the policy answered {} to a {} {} hook, which cannot carry it",
        crate::run::record::describe_decision(decision),
        agent.title(),
        if spec.name.is_empty() {
            "(unknown)"
        } else {
            spec.name
        }
    )
}

fn parse_rewrite(json: &str) -> Result<Value, String> {
    let input: Value =
        serde_json::from_str(json).map_err(|e| format!("rewrite is not JSON: {e}"))?;
    if !input.is_object() {
        return Err("rewrite of a tool input must be a JSON object".into());
    }
    Ok(input)
}

const REWROTE: &str =
    "the loop policy rewrote this tool call; approve the rewritten input to run it";

fn rewritten_instead(input: &Value) -> String {
    format!(
        "the loop policy does not allow this call as written; it would run this input instead, with your approval: {input}"
    )
}

/// The hook answer for `decision` on the event `spec` of `agent`.
pub fn render(agent: Agent, spec: &EventSpec, decision: &Decision) -> Result<HookOutput, String> {
    // Codex ignores a block or deny whose reason is empty, which would let the call through.
    let said = |text: &String| {
        if text.trim().is_empty() {
            "refused by the loop policy".to_string()
        } else {
            text.clone()
        }
    };
    let decision = match decision {
        Decision::Block(r) => Decision::Block(said(r)),
        Decision::Inject(m) => Decision::Inject(said(m)),
        other => other.clone(),
    };
    match agent {
        Agent::ClaudeCode | Agent::Codex => render_claude_like(agent, spec, &decision),
        Agent::Gemini => render_gemini(spec, &decision),
    }
}

/// Claude Code's protocol; Codex speaks the same with fewer answers on its gates
/// (no `ask`, no `continue: false`, `updatedInput` only with `allow`).
fn render_claude_like(
    agent: Agent,
    spec: &EventSpec,
    decision: &Decision,
) -> Result<HookOutput, String> {
    let codex = agent == Agent::Codex;
    let gate = matches!(spec.kind, Kind::Tool | Kind::Permission);
    let deny = |reason: &str| match spec.kind {
        Kind::Permission => permission_deny(reason),
        _ => pre_tool_use("deny", reason, None),
    };
    Ok(match decision {
        Decision::Pass => HookOutput::nothing(),
        Decision::Done(o) => HookOutput::json(system_message(&o.summary)),
        Decision::Escalate(reason) if codex && gate => {
            let mut out = deny(&format!(
                "the loop policy handed this to a person: {reason}"
            ));
            out["systemMessage"] = json!(format!("loopbox: {reason}"));
            HookOutput::json(out)
        }
        // `continue: false` stops the agent whatever the event.
        Decision::Escalate(reason) => {
            HookOutput::json(json!({"continue": false, "stopReason": reason}))
        }
        Decision::Inject(msg) if spec.kind == Kind::Turn => {
            HookOutput::json(json!({"decision": "block", "reason": msg}))
        }
        Decision::Inject(msg) if spec.context => HookOutput::json(
            json!({"hookSpecificOutput": {"hookEventName": spec.name, "additionalContext": msg}}),
        ),
        Decision::Block(reason) => match spec.block {
            Block::KeepWorking | Block::Decision => {
                HookOutput::json(json!({"decision": "block", "reason": reason}))
            }
            Block::DenyTool | Block::DenyPermission => HookOutput::json(deny(reason)),
            Block::ExitTwo => HookOutput::exit_two(reason),
            Block::No => return Err(cannot_carry(agent, spec, decision)),
        },
        // The permission dialog the agent is about to show is the question.
        Decision::Ask(_) if spec.kind == Kind::Permission => HookOutput::nothing(),
        Decision::Ask(question) if spec.kind == Kind::Tool && codex => HookOutput::json(deny(
            &format!("the loop policy wants a person to approve this first: {question}"),
        )),
        Decision::Ask(question) if spec.kind == Kind::Tool => {
            HookOutput::json(pre_tool_use("ask", question, None))
        }
        Decision::Rewrite(json) if gate => {
            let input = parse_rewrite(json)?;
            // Claude Code shows a rewritten PreToolUse input and asks; elsewhere a
            // rewrite could only be said together with an approval, so it is a refusal
            // that tells the agent what would be accepted.
            if spec.kind == Kind::Tool && !codex {
                HookOutput::json(pre_tool_use("ask", REWROTE, Some(input)))
            } else {
                HookOutput::json(deny(&rewritten_instead(&input)))
            }
        }
        _ => return Err(cannot_carry(agent, spec, decision)),
    })
}

fn pre_tool_use(decision: &str, reason: &str, updated: Option<Value>) -> Value {
    let mut specific = json!({"hookEventName": "PreToolUse", "permissionDecision": decision, "permissionDecisionReason": reason});
    if let Some(input) = updated {
        specific["updatedInput"] = input;
    }
    json!({"hookSpecificOutput": specific})
}

fn permission_deny(message: &str) -> Value {
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": message}}})
}

/// Gemini CLI: `decision` is `allow`, `deny` (or `block`) or `ask` on every event that reads it.
fn render_gemini(spec: &EventSpec, decision: &Decision) -> Result<HookOutput, String> {
    let agent = Agent::Gemini;
    Ok(match decision {
        Decision::Pass => HookOutput::nothing(),
        Decision::Done(o) => HookOutput::json(system_message(&o.summary)),
        Decision::Escalate(reason) => {
            HookOutput::json(json!({"continue": false, "stopReason": reason}))
        }
        // AfterAgent `block`: the reason becomes the agent's next prompt.
        Decision::Inject(msg) if spec.kind == Kind::Turn => {
            HookOutput::json(json!({"decision": "block", "reason": msg}))
        }
        Decision::Inject(msg) if spec.context => HookOutput::json(
            json!({"hookSpecificOutput": {"hookEventName": spec.name, "additionalContext": msg}}),
        ),
        Decision::Block(reason) if spec.block == Block::KeepWorking => {
            HookOutput::json(json!({"decision": "block", "reason": reason}))
        }
        Decision::Block(reason) if spec.block != Block::No => {
            HookOutput::json(json!({"decision": "deny", "reason": reason}))
        }
        Decision::Ask(question) if spec.kind == Kind::Tool => HookOutput::json(
            json!({"decision": "ask", "systemMessage": format!("loopbox: {question}")}),
        ),
        Decision::Rewrite(json) if spec.kind == Kind::Tool => {
            let input = parse_rewrite(json)?;
            HookOutput::json(json!({
                "decision": "ask",
                "systemMessage": format!("loopbox: {REWROTE}"),
                "hookSpecificOutput": {"hookEventName": spec.name, "tool_input": input},
            }))
        }
        _ => return Err(cannot_carry(agent, spec, decision)),
    })
}

/// The hook answer when loopbox could not get a decision: `message` says why.
pub fn fail(agent: Agent, spec: &EventSpec, on_error: OnError, message: &str) -> HookOutput {
    let allow = HookOutput {
        stdout: None,
        stderr: Some(format!(
            "loopbox: the hook failed and let {} go on: {message}",
            agent.title()
        )),
        exit: NON_BLOCKING,
    };
    if on_error == OnError::Allow {
        return allow;
    }
    if spec.block == Block::No && !spec.name.is_empty() {
        return HookOutput {
            stderr: Some(format!(
                "loopbox: the hook failed; a {} {} event cannot be refused, so {} goes on: {message}",
                agent.title(),
                spec.name,
                agent.title()
            )),
            ..allow
        };
    }
    refuse(
        agent,
        spec,
        &format!("loopbox: the hook failed, so this is refused (--on-error block): {message}"),
    )
}

/// The event's blocking answer with `reason`: what a gate says when loopbox cannot
/// let the call through (a failure under `--on-error block`, a config not trusted).
/// An event loopbox does not know (its input could not be read, and the hook
/// command names no `--event`) is refused with exit 2, which every agent reads as
/// blocking.
pub fn refuse(agent: Agent, spec: &EventSpec, reason: &str) -> HookOutput {
    let reason = reason.to_string();
    let mut out = match (spec.block, agent) {
        (Block::No, _) => HookOutput::exit_two(&reason),
        (
            Block::DenyTool | Block::DenyPermission | Block::Decision | Block::KeepWorking,
            Agent::Gemini,
        ) => HookOutput::json(json!({"decision": "deny", "reason": reason})),
        (Block::DenyTool, _) => HookOutput::json(pre_tool_use("deny", &reason, None)),
        (Block::DenyPermission, _) => HookOutput::json(permission_deny(&reason)),
        (Block::KeepWorking | Block::Decision | Block::ExitTwo, _) => HookOutput::exit_two(&reason),
    };
    // Said on stderr too, so the user sees it whatever the agent shows of stdout.
    out.stderr.get_or_insert(reason);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::Outcome;

    fn r(agent: Agent, event: &str, d: Decision) -> Result<HookOutput, String> {
        render(agent, &agent.event(event), &d)
    }
    fn out(agent: Agent, event: &str, d: Decision) -> Option<Value> {
        r(agent, event, d).unwrap().stdout
    }

    #[test]
    fn claude_code_decisions_render_per_the_protocol() {
        let c = Agent::ClaudeCode;
        assert_eq!(
            out(c, "Stop", Decision::Inject("again".into())),
            Some(json!({"decision": "block", "reason": "again"}))
        );
        assert_eq!(out(c, "Stop", Decision::Pass), None);
        assert_eq!(
            out(
                c,
                "Stop",
                Decision::Done(Outcome {
                    success: true,
                    summary: "ok".into(),
                    data: None
                })
            ),
            Some(json!({"systemMessage": "loopbox: ok"}))
        );
        assert_eq!(
            out(c, "Stop", Decision::Escalate("help".into())),
            Some(json!({"continue": false, "stopReason": "help"}))
        );
        assert_eq!(
            out(c, "PreToolUse", Decision::Block("no rm".into())),
            Some(
                json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no rm"}})
            )
        );
        assert_eq!(
            out(c, "PreToolUse", Decision::Ask("sure?".into())).unwrap()["hookSpecificOutput"]["permissionDecision"],
            "ask"
        );
        let rw = out(
            c,
            "PreToolUse",
            Decision::Rewrite("{\"command\":\"ls -a\"}".into()),
        )
        .unwrap();
        assert_eq!(
            (
                rw["hookSpecificOutput"]["permissionDecision"].as_str(),
                &rw["hookSpecificOutput"]["updatedInput"]
            ),
            (Some("ask"), &json!({"command": "ls -a"}))
        );
        // inject adds context where the protocol has it, instead of refusing.
        for event in [
            "SessionStart",
            "PreToolUse",
            "PostToolUse",
            "UserPromptSubmit",
            "SubagentStart",
            "PostToolUseFailure",
        ] {
            assert_eq!(
                out(c, event, Decision::Inject("ctx".into())),
                Some(
                    json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": "ctx"}})
                ),
                "{event}"
            );
        }
        assert_eq!(
            out(c, "PostToolUse", Decision::Block("x".into())),
            Some(json!({"decision": "block", "reason": "x"}))
        );
        assert_eq!(
            out(c, "PermissionRequest", Decision::Block("no".into())),
            Some(
                json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "no"}}})
            )
        );
        assert_eq!(
            out(c, "PermissionRequest", Decision::Ask("?".into())),
            None,
            "the agent's own dialog asks"
        );
        let rw = out(
            c,
            "PermissionRequest",
            Decision::Rewrite("{\"command\":\"ls\"}".into()),
        )
        .unwrap();
        assert_eq!(
            rw["hookSpecificOutput"]["decision"]["behavior"], "deny",
            "a rewrite is never an approval"
        );
        let two = r(c, "ConfigChange", Decision::Block("keep settings".into())).unwrap();
        assert_eq!(
            (two.exit, two.stderr.as_deref(), two.stdout),
            (2, Some("keep settings"), None)
        );
        assert!(r(c, "PreToolUse", Decision::Rewrite("[1]".into())).is_err());
        assert!(
            r(c, "Notification", Decision::Ask("?".into()))
                .unwrap_err()
                .contains("cannot carry it")
        );
        assert!(
            r(c, "SessionEnd", Decision::Block("x".into()))
                .unwrap_err()
                .contains("Claude Code SessionEnd hook")
        );
    }

    #[test]
    fn codex_gets_only_answers_its_gates_accept() {
        let x = Agent::Codex;
        let ask = out(x, "PreToolUse", Decision::Ask("sure?".into())).unwrap();
        assert_eq!(ask["hookSpecificOutput"]["permissionDecision"], "deny");
        let rw = out(
            x,
            "PreToolUse",
            Decision::Rewrite("{\"command\":\"ls\"}".into()),
        )
        .unwrap();
        assert_eq!(
            rw["hookSpecificOutput"]["permissionDecision"], "deny",
            "Codex would take updatedInput only with allow"
        );
        assert!(
            rw["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("{\"command\":\"ls\"}")
        );
        let esc = out(x, "PreToolUse", Decision::Escalate("help".into())).unwrap();
        assert_eq!(
            (
                esc["hookSpecificOutput"]["permissionDecision"].as_str(),
                esc.get("continue")
            ),
            (Some("deny"), None)
        );
        assert_eq!(
            out(x, "Stop", Decision::Escalate("help".into())),
            Some(json!({"continue": false, "stopReason": "help"}))
        );
        assert_eq!(
            out(x, "Stop", Decision::Inject("again".into())),
            Some(json!({"decision": "block", "reason": "again"}))
        );
    }

    #[test]
    fn gemini_decisions_render_per_its_protocol() {
        let g = Agent::Gemini;
        assert_eq!(
            out(g, "AfterAgent", Decision::Inject("again".into())),
            Some(json!({"decision": "block", "reason": "again"}))
        );
        assert_eq!(
            out(g, "BeforeTool", Decision::Block("no".into())),
            Some(json!({"decision": "deny", "reason": "no"}))
        );
        assert_eq!(
            out(g, "BeforeTool", Decision::Ask("?".into())).unwrap()["decision"],
            "ask"
        );
        let rw = out(
            g,
            "BeforeTool",
            Decision::Rewrite("{\"command\":\"ls\"}".into()),
        )
        .unwrap();
        assert_eq!(
            (
                rw["decision"].as_str(),
                &rw["hookSpecificOutput"]["tool_input"]
            ),
            (Some("ask"), &json!({"command": "ls"}))
        );
        assert_eq!(
            out(g, "SessionStart", Decision::Inject("c".into())).unwrap()["hookSpecificOutput"]["additionalContext"],
            "c"
        );
        assert!(r(g, "SessionEnd", Decision::Inject("c".into())).is_err());
    }

    #[test]
    fn failures_refuse_on_gates_and_let_the_rest_go_on() {
        for agent in Agent::ALL {
            let gate = agent
                .events()
                .iter()
                .find(|e| e.kind == Kind::Tool)
                .unwrap();
            assert_eq!(OnError::default_for(gate), OnError::Block);
            let f = fail(agent, gate, OnError::Block, "trap");
            let v = f.stdout.clone().unwrap();
            let denied =
                v["hookSpecificOutput"]["permissionDecision"] == "deny" || v["decision"] == "deny";
            assert!(
                denied && f.exit == 0 && f.stderr.as_deref().unwrap().contains("trap"),
                "{agent}: {f:?}"
            );
            let stop = agent
                .events()
                .iter()
                .find(|e| e.kind == Kind::Turn)
                .unwrap();
            assert_eq!(OnError::default_for(stop), OnError::Allow);
            assert_eq!(fail(agent, stop, OnError::Allow, "x").exit, NON_BLOCKING);
        }
        let c = Agent::ClaudeCode;
        assert_eq!(
            fail(c, &c.event("Stop"), OnError::Block, "x").exit,
            BLOCKING
        );
        let p = fail(c, &c.event("PermissionRequest"), OnError::Block, "x")
            .stdout
            .unwrap();
        assert_eq!(p["hookSpecificOutput"]["decision"]["behavior"], "deny");
        let n = fail(c, &c.event("Notification"), OnError::Block, "x");
        assert!(n.exit == NON_BLOCKING && n.stderr.unwrap().contains("cannot be refused"));
    }
}
