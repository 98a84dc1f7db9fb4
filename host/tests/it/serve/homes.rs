//! Each tenant's agent keeps its state (`~/.claude`, `~/.codex`, ...) in a home
//! of its own under the data directory, or where the operator's server config
//! says, never in the server user's home; a tenant's config cannot name a
//! writable path or an agent program outside its roots and that home, and the
//! operator's config can give it more (`tenants.NAME.agent_paths`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use super::{Srv, scratch, tenant_config};

/// A tenant config whose probe's agent is `sh -c SCRIPT` (the message on
/// stdin), with `extra` lines in its `[policies.probe.agent]`.
fn agent_config(script: &str, extra: &str) -> String {
    format!(
        "{}\n[policies.probe.agent]\ncommand = [\"sh\", \"-c\", {script:?}]\nprompt_input = \"stdin\"\noutput = \"text\"\n{extra}",
        tenant_config()
    )
}

/// The server user's home as a server whose user runs Claude Code has it: a
/// `~/.claude` with its login, and a program of its own.
fn server_home(dir: &Path) -> std::path::PathBuf {
    let home = dir.join("server-home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::create_dir_all(home.join("bin")).unwrap();
    std::fs::write(
        home.join(".claude/.credentials.json"),
        "the server's login\n",
    )
    .unwrap();
    let agent = home.join("bin/agent");
    std::fs::write(&agent, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    home.canonicalize().unwrap()
}

/// The attack of issue 44: a tenant admin sets (`PUT /api/v1/config`) an agent
/// that is a `sh -c` with `agent.writable = ["~/.claude"]`, and its run writes
/// the server user's `~/.claude/settings.json`, whose hooks every other
/// tenant's agent (and the server user's own Claude Code) would run. Now `~`
/// is the tenant's own home, `DATA/tenants/NAME/home` (0700): the agent's
/// `HOME`, where its state lives; the server user's home is read-only to it,
/// and the server user's agent state hidden.
#[test]
fn a_tenants_agent_cannot_write_the_server_users_home() {
    let dir = scratch();
    let home = server_home(dir.path());
    let mut srv = Srv::prepare(dir.path(), "", &[("mallory", "")]);
    srv.env = vec![("HOME".into(), home.display().to_string())];
    srv.start();
    let h = home.display();
    let script = format!(
        "echo \"home=$HOME\"\n\
         mkdir -p '{h}/.claude' && echo hooked > '{h}/.claude/settings.json' && echo wrote-server-home\n\
         mkdir -p \"$HOME/.claude\" && echo mine > \"$HOME/.claude/settings.json\" && echo wrote-own-home\n\
         cat '{h}/.claude/.credentials.json'\n"
    );
    let admin = srv.token("mallory", "admin");
    let text = agent_config(&script, "writable = [\"~/.claude\"]\n");
    let r = srv.call("PUT", "/api/v1/config", admin, Some(json!({"text": text})));
    assert_eq!(r.status, 200, "{}", r.body);
    let run = srv.start_probe("mallory", json!({"op": "prompt", "text": "hello"}));
    let v = srv.wait_final("mallory", &run);
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    eprintln!("the agent printed: {out:?}");
    assert!(
        !home.join(".claude/settings.json").exists(),
        "the tenant's agent wrote the server user's ~/.claude/settings.json: {v:#}"
    );
    assert!(!out.contains("wrote-server-home"), "{out}");
    assert!(!out.contains("the server's login"), "{out}");
    let own = dir
        .path()
        .join("data/tenants/mallory/home")
        .canonicalize()
        .unwrap();
    assert!(
        out.starts_with(&format!("home={}\n", own.display())),
        "{out}"
    );
    assert!(out.contains("wrote-own-home"), "{out}");
    assert_eq!(
        std::fs::read_to_string(own.join(".claude/settings.json")).unwrap(),
        "mine\n"
    );
    let mode = std::fs::metadata(&own).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    // The tenant's own commands run, and never see its agent's home.
    let run = srv.start_probe(
        "mallory",
        json!({"op": "exec", "argv": ["cat", own.join(".claude/settings.json")]}),
    );
    let v = srv.wait_final("mallory", &run);
    let ok = &v["outcome"]["data"]["ok"];
    assert_ne!(ok["exit_code"].as_i64(), Some(0), "{v:#}");
    assert_eq!(ok["stdout"], "", "{v:#}");
    assert!(!ok["stderr"].as_str().unwrap().contains("bwrap"), "{v:#}");
}

/// A tenant's config cannot name a writable path or an agent program outside
/// its roots and its home (the server user's `~/.claude` by its full path, a
/// program in the server user's home); the operator's server config can give
/// it more: `tenants.NAME.home` names where its home is, and
/// `tenants.NAME.agent_paths` directories its config may name besides.
#[test]
fn a_tenant_config_cannot_name_paths_outside_its_roots_and_home_the_operators_can() {
    let dir = scratch();
    let home = server_home(dir.path());
    let shared = dir.path().join("shared-cache");
    std::fs::create_dir_all(&shared).unwrap();
    let shared = shared.canonicalize().unwrap();
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[
            ("mallory", ""),
            (
                "olive",
                "home = \"homes/olive\"\nagent_paths = [\"shared-cache\"]\n",
            ),
        ],
    );
    srv.env = vec![("HOME".into(), home.display().to_string())];
    srv.start();
    let put = |tenant: &str, text: &str| {
        srv.call(
            "PUT",
            "/api/v1/config",
            srv.token(tenant, "admin"),
            Some(json!({ "text": text })),
        )
    };
    let h = home.display();
    for (text, want) in [
        (
            agent_config("cat", &format!("writable = [\"{h}/.claude\"]\n")),
            format!("policies.probe.agent.writable: `{h}/.claude`"),
        ),
        (
            agent_config("cat", &format!("writable = [{:?}]\n", shared.display())),
            "is outside tenant `mallory`'s roots".to_string(),
        ),
        (
            format!(
                "{}\n[policies.probe.agent]\ncommand = [\"{h}/bin/agent\"]\nprompt_input = \"stdin\"\n",
                tenant_config()
            ),
            format!("policies.probe.agent.command: the program `{h}/bin/agent`"),
        ),
    ] {
        let r = put("mallory", &text);
        assert_eq!(r.status, 400, "{text}: {}", r.body);
        eprintln!("refused: {}", r.error());
        assert!(r.error().contains(&want), "{text}: {}", r.body);
    }
    // What the operator gave olive: its home where the server config says, and the shared cache.
    let r = put(
        "olive",
        &agent_config(
            &format!("echo \"home=$HOME\"; echo olive > '{}/x'", shared.display()),
            &format!("writable = [\"~/.claude\", {:?}]\n", shared.display()),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let run = srv.start_probe("olive", json!({"op": "prompt", "text": "hello"}));
    let v = srv.wait_final("olive", &run);
    let own = dir.path().join("homes/olive").canonicalize().unwrap();
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        out.lines().next(),
        Some(&*format!("home={}", own.display())),
        "{v:#}"
    );
    let mode = std::fs::metadata(&own).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert_eq!(
        std::fs::read_to_string(shared.join("x")).unwrap(),
        "olive\n"
    );
}
