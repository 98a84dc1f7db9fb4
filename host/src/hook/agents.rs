//! The agents loopbox answers hooks for, and what each lets a hook say on
//! each of its events.
//!
//! The tables are read from each agent's own reference at the version named
//! beside it; `tests/fixtures/hooks/` holds a recorded input per event with
//! the page it came from. An event missing here (an agent newer than the
//! table) is still answered: it reaches the policy as a `custom` event and
//! can carry `pass`, `done` and `escalate`.

use std::fmt;

/// An agent whose hook protocol loopbox speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Gemini,
}

/// What the policy sees for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An agent turn ended: `turn-complete`.
    Turn,
    /// The agent is about to run a tool: `tool-call`.
    Tool,
    /// The agent asks the user's permission for a tool: `tool-call`.
    Permission,
    /// Anything else: `custom(name, input)`.
    Other,
}

/// How the agent lets a hook refuse on an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// The event cannot be refused.
    No,
    /// `decision: "block"` keeps the agent working with the reason as its next instruction.
    KeepWorking,
    /// The tool call is denied (`permissionDecision: "deny"`, Gemini `decision: "deny"`).
    DenyTool,
    /// The permission request is denied (`decision.behavior: "deny"`).
    DenyPermission,
    /// `decision: "block"` with a reason (Gemini: `"deny"`).
    Decision,
    /// Exit code 2 with the reason on stderr, the only blocking form the event has.
    ExitTwo,
}

/// One hook event of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub block: Block,
    /// `hookSpecificOutput.additionalContext` adds text to the agent's context.
    pub context: bool,
    /// The hook entry takes a matcher (a tool name pattern, a source, ...).
    pub matcher: bool,
}

const fn ev(
    name: &'static str,
    kind: Kind,
    block: Block,
    context: bool,
    matcher: bool,
) -> EventSpec {
    EventSpec {
        name,
        kind,
        block,
        context,
        matcher,
    }
}

use Block::*;
use Kind::*;

/// Claude Code 2.1.197 (its `/hooks` reference, https://code.claude.com/docs/en/hooks).
const CLAUDE_CODE: &[EventSpec] = &[
    ev("PreToolUse", Tool, DenyTool, true, true),
    ev("PermissionRequest", Permission, DenyPermission, false, true),
    ev("PostToolUse", Other, Decision, true, true),
    ev("PostToolUseFailure", Other, ExitTwo, true, true),
    ev("PostToolBatch", Other, ExitTwo, true, false),
    ev("PermissionDenied", Other, No, false, true),
    ev("Notification", Other, No, true, true),
    ev("UserPromptSubmit", Other, Decision, true, false),
    ev("UserPromptExpansion", Other, ExitTwo, true, true),
    ev("SessionStart", Other, No, true, true),
    ev("SessionEnd", Other, No, false, true),
    ev("Setup", Other, No, true, true),
    ev("Stop", Turn, KeepWorking, false, false),
    ev("StopFailure", Other, No, false, true),
    ev("SubagentStart", Other, No, true, true),
    ev("SubagentStop", Turn, KeepWorking, false, true),
    ev("PreCompact", Other, ExitTwo, false, true),
    ev("PostCompact", Other, No, false, true),
    ev("TeammateIdle", Other, ExitTwo, false, false),
    ev("TaskCreated", Other, ExitTwo, false, false),
    ev("TaskCompleted", Other, ExitTwo, false, false),
    ev("Elicitation", Other, ExitTwo, false, true),
    ev("ElicitationResult", Other, ExitTwo, false, true),
    ev("ConfigChange", Other, ExitTwo, false, true),
    ev("InstructionsLoaded", Other, No, false, true),
    ev("WorktreeCreate", Other, No, false, false),
    ev("WorktreeRemove", Other, No, false, false),
    ev("CwdChanged", Other, No, false, false),
    ev("FileChanged", Other, No, false, true),
    ev("MessageDisplay", Other, No, false, false),
];

/// Codex CLI 0.169.0 (the JSON schemas it ships, `codex-rs/hooks/schema/generated/`).
const CODEX: &[EventSpec] = &[
    ev("PreToolUse", Tool, DenyTool, true, true),
    ev("PermissionRequest", Permission, DenyPermission, false, true),
    ev("PostToolUse", Other, Decision, true, true),
    ev("UserPromptSubmit", Other, Decision, true, false),
    ev("SessionStart", Other, No, true, true),
    ev("SessionEnd", Other, No, false, false),
    ev("SubagentStart", Other, No, true, true),
    ev("SubagentStop", Turn, KeepWorking, false, true),
    ev("PreCompact", Other, No, false, true),
    ev("PostCompact", Other, No, false, true),
    ev("Stop", Turn, KeepWorking, false, false),
];

/// Gemini CLI 0.61.0 (its hooks reference, https://geminicli.com/docs/hooks/reference/).
const GEMINI: &[EventSpec] = &[
    ev("BeforeTool", Tool, DenyTool, false, true),
    ev("AfterTool", Other, Decision, true, true),
    ev("BeforeAgent", Other, Decision, true, false),
    ev("AfterAgent", Turn, KeepWorking, false, false),
    ev("BeforeModel", Other, Decision, false, false),
    ev("AfterModel", Other, Decision, false, false),
    ev("BeforeToolSelection", Other, No, false, false),
    ev("SessionStart", Other, No, true, true),
    ev("SessionEnd", Other, No, false, true),
    ev("Notification", Other, No, false, true),
    ev("PreCompress", Other, No, false, true),
];

/// Gemini CLI's tool names and the names policies see (Claude Code's).
const GEMINI_TOOLS: &[(&str, &str)] = &[
    ("run_shell_command", "Bash"),
    ("read_file", "Read"),
    ("write_file", "Write"),
    ("replace", "Edit"),
    ("glob", "Glob"),
    ("grep_search", "Grep"),
    ("list_directory", "LS"),
    ("web_fetch", "WebFetch"),
    ("google_web_search", "WebSearch"),
    ("write_todos", "TodoWrite"),
];

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::ClaudeCode, Agent::Codex, Agent::Gemini];

    /// The name on the command line and in `origin.agent`.
    pub fn id(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "Claude Code",
            Agent::Codex => "Codex",
            Agent::Gemini => "Gemini CLI",
        }
    }

    /// Prefix of the run ids of this agent's hook sessions.
    pub fn run_prefix(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "cc",
            Agent::Codex => "cx",
            Agent::Gemini => "gm",
        }
    }

    pub fn events(self) -> &'static [EventSpec] {
        match self {
            Agent::ClaudeCode => CLAUDE_CODE,
            Agent::Codex => CODEX,
            Agent::Gemini => GEMINI,
        }
    }

    /// The spec of `name`; an event this table does not know is `Other` and cannot be refused.
    pub fn event(self, name: &str) -> EventSpec {
        self.events()
            .iter()
            .copied()
            .find(|e| e.name == name)
            .unwrap_or(EventSpec {
                name: "",
                kind: Other,
                block: No,
                context: false,
                matcher: false,
            })
    }

    pub fn known(self, name: &str) -> bool {
        self.events().iter().any(|e| e.name == name)
    }

    /// Seconds the agent gives a hook when its entry names no timeout.
    pub fn default_timeout_s(self) -> u64 {
        match self {
            Agent::ClaudeCode | Agent::Codex => 600,
            Agent::Gemini => 60,
        }
    }

    /// The entry's `timeout` field for `seconds`, in the agent's unit.
    pub fn timeout_field(self, seconds: u64) -> u64 {
        match self {
            Agent::Gemini => seconds * 1000,
            _ => seconds,
        }
    }

    /// The environment variable the agent sets to the project's root for hooks.
    pub fn project_dir_var(self) -> Option<&'static str> {
        match self {
            Agent::ClaudeCode => Some("CLAUDE_PROJECT_DIR"),
            Agent::Codex => None,
            Agent::Gemini => Some("GEMINI_PROJECT_DIR"),
        }
    }

    /// The policy-facing name of the agent's tool `native`, when it differs.
    pub fn shared_tool_name(self, native: &str) -> Option<&'static str> {
        match self {
            Agent::Gemini => GEMINI_TOOLS
                .iter()
                .find(|(n, _)| *n == native)
                .map(|(_, shared)| *shared),
            _ => None,
        }
    }

    /// The agent's name for the shared tool name `shared` (for matchers given in the shared vocabulary).
    pub fn native_tool_name(self, shared: &str) -> Option<&'static str> {
        match self {
            Agent::Gemini => GEMINI_TOOLS
                .iter()
                .find(|(_, s)| *s == shared)
                .map(|(n, _)| *n),
            _ => None,
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_agent_has_a_turn_and_a_tool_gate_and_names_each_event_once() {
        for agent in Agent::ALL {
            let events = agent.events();
            assert!(
                events
                    .iter()
                    .any(|e| e.kind == Kind::Turn && e.block == Block::KeepWorking),
                "{agent}"
            );
            assert!(
                events
                    .iter()
                    .any(|e| e.kind == Kind::Tool && e.block == Block::DenyTool),
                "{agent}"
            );
            let mut names: Vec<_> = events.iter().map(|e| e.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), events.len(), "{agent}");
        }
        assert_eq!(Agent::ClaudeCode.events().len(), 30);
        assert_eq!(Agent::Gemini.event("NewEvent").kind, Kind::Other);
        assert_eq!(
            Agent::Gemini.shared_tool_name("run_shell_command"),
            Some("Bash")
        );
        assert_eq!(
            Agent::Gemini.native_tool_name("Bash"),
            Some("run_shell_command")
        );
        assert_eq!(Agent::ClaudeCode.shared_tool_name("Bash"), None);
    }
}
