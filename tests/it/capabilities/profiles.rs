//! Named agent profiles (`[agents.NAME]`, `prompt-request.profile`): a
//! policy picks a profile by name and reaches the command the user wrote,
//! with the profile's `args`; it can never put a word of its own into the
//! agent's argv, nor fall back to `[agent]` with a name the user did not define.

use loopbox_tests::*;
use serde_json::json;

use super::err_kind;

/// An agent that answers with its arguments, `|`-separated, and the directory it ran in.
fn recording_agent(ws: &Workspace) {
    ws.write("agent/rec", "#!/bin/sh\nprintf '%s|' \"$@\"\necho\npwd\n");
    std::fs::set_permissions(
        ws.root().join("agent/rec"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

const CONFIG: &str = "[agent]\ncommand = [\"./agent/rec\", \"--\", \"{prompt}\"]\noutput = \"text\"\n\n\
    [agents.specialist]\nargs = [\"--agent\", \"specialist\"]\n";

#[tokio::test]
async fn a_prompt_naming_a_profile_reaches_its_command_with_its_args() {
    let ws = Workspace::new();
    recording_agent(&ws);
    ws.write("sub/keep", "");
    let ctx = ws.run(&load("probe"), CONFIG);
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "hi", "profile": "specialist"}),
    )
    .await
    .unwrap();
    let out = v["ok"]["stdout"].as_str().unwrap_or_else(|| panic!("{v}"));
    // The args go after the command's fixed words, before `--` and the message.
    assert_eq!(out.lines().next(), Some("--agent|specialist|--|hi|"), "{v}");
    // Without a profile: `[agent]` as written.
    let v = probe(&ctx, json!({"op": "prompt", "text": "hi"}))
        .await
        .unwrap();
    let out = v["ok"]["stdout"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(out.lines().next(), Some("--|hi|"), "{v}");
    // `cwd`: the agent runs in that directory of the workspace.
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "hi", "profile": "specialist", "cwd": "sub"}),
    )
    .await
    .unwrap();
    let out = v["ok"]["stdout"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(out.trim_end().ends_with("/sub"), "{v}");
    let v = probe(&ctx, json!({"op": "prompt", "text": "hi", "cwd": "../"}))
        .await
        .unwrap();
    assert_eq!(err_kind(&v).0, "invalid", "{v}");
}

#[tokio::test]
async fn an_unknown_or_malformed_profile_is_refused_never_an_argv_word() {
    let ws = Workspace::new();
    recording_agent(&ws);
    let ctx = ws.run(&load("probe"), CONFIG);
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "hi", "profile": "nope"}),
    )
    .await
    .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "denied", "{v}");
    assert!(
        msg.contains("no agent profile `nope`: add an `[agents.nope]` section to loopbox.toml"),
        "{msg}"
    );
    for name in ["--help", "../x", "", "a b", &"x".repeat(65)] {
        let v = probe(&ctx, json!({"op": "prompt", "text": "hi", "profile": name}))
            .await
            .unwrap();
        let (kind, msg) = err_kind(&v);
        assert_eq!(kind, "invalid", "{name}: {v}");
        assert!(msg.contains("is not an agent profile name"), "{msg}");
    }
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l.contains("denied prompt: no agent profile `nope`")),
        "{:?}",
        log_messages(&ctx)
    );
}
