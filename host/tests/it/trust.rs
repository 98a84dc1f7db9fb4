//! The trust boundary as a user meets it at the command line: a run keeps the
//! grants it started with, the agent tier governs `inject`, and a component
//! cache a sandboxed command could write is refused (docs/security.md).

use crate::common;
// The edges only a real loopbox process shows: its environment, its children's lifetime.
mod boundary;
// Accepting changed grants on resume needs the config approved.
mod resume_gate;
// Program-running options of allowed programs need a rule naming the whole command.
mod program_options;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{code, example, loopbox, normalize, probe};
use serde_json::json;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_id(dir: &Path) -> String {
    let o = loopbox(dir, &["runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_changed_config_is_refused_on_resume_naming_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"ls\"]]\n",
    )
    .unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", r#"{"op": "echo", "then": "ask"}"#],
    );
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let id = run_id(dir.path());
    // Something (the agent, a script run without a sandbox) widens the grants mid-run.
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"ls\"], [\"sh\"]]\nnetwork = true\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["runs", "answer", &id, "go on"]);
    assert_eq!(code(&o), 2);
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "the grants changed since run {id} started (shell.allow, shell.network)"
        )),
        "{err}"
    );
    assert!(err.contains("--accept-config-change"), "{err}");
    // Restored, the run goes on; accepted, too.
    let o = loopbox(
        dir.path(),
        &["runs", "answer", &id, "go on", "--accept-config-change"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("continuing run")
            && text(&o.stderr).contains("under changed grants (shell.allow, shell.network)")
    );
}

fn hook(dir: &Path, extra: &[&str], session: &str) -> (i32, String) {
    let probe = probe().to_string_lossy().into_owned();
    let mut args = vec![
        "hook",
        "claude-code",
        "--policy",
        &probe,
        "--input",
        r#"{"op": "echo"}"#,
    ];
    args.extend(extra);
    let input = json!({"session_id": session, "cwd": dir, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "echo", "then": "pass"}});
    let o = common::feed(
        common::trusted_command(dir)
            .args(&args)
            .current_dir(dir)
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            ),
        input.to_string().as_bytes(),
    );
    (code(&o), text(&o.stderr))
}

#[test]
fn a_hook_session_keeps_the_grants_it_started_with() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[agent]\ncommand = [\"my-agent\", \"--\", \"{prompt}\"]\ntier = \"deny\"\n",
    )
    .unwrap();
    assert_eq!(hook(dir.path(), &[], "s1"), (0, String::new()));
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[agent]\ncommand = [\"my-agent\", \"--\", \"{prompt}\"]\ntier = \"allow\"\n",
    )
    .unwrap();
    let (c, err) = hook(dir.path(), &[], "s1");
    // A gate that cannot answer refuses the call: exit 0 with a deny, the reason on stderr too.
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains("the grants changed since run")
            && err.contains("(agent.tier)")
            && err.contains("start a new agent session"),
        "{err}"
    );
    // A new session starts under the config as it is; the old one accepts it only when told.
    assert_eq!(hook(dir.path(), &[], "s2"), (0, String::new()));
    assert_eq!(
        hook(dir.path(), &["--accept-config-change"], "s1"),
        (0, String::new())
    );
}

#[test]
fn inject_is_governed_by_the_agent_tier() {
    let p = example("project");
    let config = std::fs::read_to_string(p.path().join("loopbox.toml"))
        .unwrap()
        .replace("[agent]\n", "[agent]\ntier = \"deny\"\n");
    std::fs::write(p.path().join("loopbox.toml"), config).unwrap();
    let o = loopbox(
        p.path(),
        &["run", "builtin:ralph", "--input", "@ralph.json"],
    );
    assert_ne!(code(&o), 0);
    let out = normalize(&o.stdout) + &normalize(&o.stderr);
    assert!(
        out.contains("messages to the agent are denied by agent.tier = \"deny\""),
        "{out}"
    );
    assert!(
        !p.path().join(".scripted-agent/prompts").exists(),
        "the agent never ran"
    );
}

#[test]
fn a_component_cache_a_command_could_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |config: &str, env: Option<PathBuf>| {
        std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
        let mut c = common::trusted_command(dir.path());
        c.args([
            "-C",
            &dir.path().to_string_lossy(),
            "run",
            "builtin:ralph",
            "--input",
            r#"{"prompt": "x"}"#,
        ])
        .env_remove("LOOPBOX_CACHE_DIR");
        if let Some(e) = env {
            c.env("LOOPBOX_CACHE_DIR", e);
        }
        c.output().unwrap()
    };
    let o = run("[engine]\ncache_dir = \"cache\"\n", None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("is a relative path"),
        "{}",
        text(&o.stderr)
    );
    let o = run("", Some(dir.path().join(".cache/loopbox")));
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("is inside the workspace"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        !dir.path().join(".cache").exists(),
        "nothing was written there"
    );
}

/// One file in each credential store `hide::SECRETS` names (a store that is a
/// file is that file): the list this test owns. A store dropped from the hidden
/// list leaves its file readable, and fails the test by name.
const STORE_FILES: &[&str] = &[
    ".ssh/id_ed25519",
    ".gnupg/private-keys-v1.d/key.key",
    ".password-store/bank.gpg",
    ".local/share/keyrings/login.keyring",
    ".config/sops/age/keys.txt",
    ".config/op/config",
    ".config/1Password/settings.json",
    ".1password/agent.sock.conf",
    ".aws/credentials",
    ".azure/accessTokens.json",
    ".config/gcloud/application_default_credentials.json",
    ".oci/config",
    ".kube/config",
    ".config/helm/registry/config.json",
    ".config/helm/repositories.yaml",
    ".config/doctl/config.yaml",
    ".s3cfg",
    ".boto",
    ".databrickscfg",
    ".config/rclone/rclone.conf",
    ".pulumi/credentials.json",
    ".terraformrc",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".wrangler/config/default.toml",
    ".config/.wrangler/config/default.toml",
    ".fly/config.yml",
    ".config/netlify/config.json",
    ".vercel/auth.json",
    ".local/share/com.vercel.cli/auth.json",
    ".config/stripe/config.toml",
    ".ngrok2/ngrok.yml",
    ".config/ngrok/ngrok.yml",
    ".config/configstore/firebase-tools.json",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".bluemix/config.json",
    ".aliyun/config.json",
    ".config/openstack/clouds.yaml",
    ".config/hcloud/cli.toml",
    ".config/linode-cli",
    ".config/scw/config.yaml",
    ".supabase/access-token",
    ".config/neonctl/credentials.json",
    ".sentryclirc",
    ".kaggle/kaggle.json",
    ".docker/config.json",
    ".dockercfg",
    ".config/containers/auth.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".config/glab-cli/config.yml",
    ".config/github-copilot/apps.json",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".pip/pip.conf",
    ".config/pip/pip.conf",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".ivy2/.credentials",
    ".sbt/.credentials",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet/NuGet.Config",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".pgpass",
    ".pg_service.conf",
    ".postgresql/postgresql.key",
    ".my.cnf",
    ".mylogin.cnf",
    ".myclirc",
    ".config/pgcli/config",
    ".dbt/profiles.yml",
    ".snowsql/config",
    ".snowflake/connections.toml",
    ".clickhouse-client/config.xml",
    ".cassandra/cqlshrc",
    ".mongodb/mongosh/mongosh_repl_history",
    ".influxdbv2/configs",
    ".sqlcmd/sqlconfig",
    ".bash_history",
    ".sh_history",
    ".zsh_history",
    ".local/share/fish/fish_history",
    ".local/share/atuin/history.db",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".mycli-history",
    ".dbshell",
    ".sqlite_history",
    ".rediscli_history",
    ".lesshst",
    ".mozilla/firefox/p.default/logins.json",
    ".config/google-chrome/Default/Cookies",
    ".config/chromium/Default/Login Data",
    ".config/BraveSoftware/Brave-Browser/Default/Cookies",
    ".config/microsoft-edge/Default/Cookies",
    // The agents' state, hidden from a policy's commands.
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".config/claude/config.json",
];

/// The sandboxes this machine can enforce.
fn enforcing_kinds() -> Vec<&'static str> {
    let support = loopbox::exec::sandbox::support();
    [
        ("bwrap", support.bwrap.is_ok()),
        ("landlock", support.landlock_usable().is_ok()),
    ]
    .into_iter()
    .filter_map(|(k, ok)| ok.then_some(k))
    .collect()
}

/// Run `script` as a one-state YAML loop in a fresh workspace under `kind`,
/// with `HOME` set to `home`; returns what it wrote to `loot` (made
/// beforehand: under Landlock a command cannot create root entries).
fn run_script(kind: &str, home: &Path, script: &str) -> String {
    run_script_with(kind, home, &[], script)
}

/// [`run_script`] with `env` set in loopbox's own environment as well.
fn run_script_with(kind: &str, home: &Path, env: &[(&str, &Path)], script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loot"), "").unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n"),
    )
    .unwrap();
    let indented: String = script.lines().map(|l| format!("      {l}\n")).collect();
    std::fs::write(
        dir.path().join("leak.yaml"),
        format!(
            "name: leak\ninitial: steal\nstates:\n  steal:\n    action: |\n{indented}    next: done\n  done:\n    terminal: true\n"
        ),
    )
    .unwrap();
    let o = common::trusted_command(dir.path())
        .args(["-C", &dir.path().to_string_lossy(), "run", "leak.yaml"])
        .current_dir(dir.path())
        .env("HOME", home)
        .envs(env.iter().copied())
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{kind}: {}", text(&o.stderr));
    std::fs::read_to_string(dir.path().join("loot"))
        .unwrap_or_else(|e| panic!("{kind}: {e}: {}", text(&o.stderr)))
}

/// The credential stores in the home directory are hidden from a policy's
/// commands by default, under every sandbox that can enforce it here, while the
/// rest of the home directory stays readable. Each store holds a SECRET; the
/// script names every file it could still read.
#[test]
fn the_credential_stores_in_home_are_hidden_by_default() {
    let kinds = enforcing_kinds();
    if kinds.is_empty() {
        eprintln!("skipped: neither bwrap nor Landlock can be used here");
        return;
    }
    // Every store in the list has a file here: a new entry needs a line above.
    for store in loopbox::exec::sandbox::hide::SECRETS
        .iter()
        .chain(loopbox::exec::sandbox::hide::AGENT_STATE)
    {
        assert!(
            STORE_FILES
                .iter()
                .any(|f| f == store || f.starts_with(&format!("{store}/"))),
            "STORE_FILES has no file in `~/{store}`"
        );
    }
    // Not under /tmp, which bwrap replaces with a private one.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path().canonicalize().unwrap();
    for f in STORE_FILES {
        std::fs::create_dir_all(h.join(f).parent().unwrap()).unwrap();
        std::fs::write(h.join(f), "SECRET\n").unwrap();
    }
    std::fs::write(h.join("notes.txt"), "visible\n").unwrap();
    let quoted: Vec<String> = STORE_FILES.iter().map(|f| format!("'{f}'")).collect();
    let script = format!(
        "W=$PWD; cd '{}' || exit 1\nfor f in {}; do grep -qs SECRET \"$f\" && echo \"$f\" >> \"$W/loot\"; done\ncat notes.txt >> \"$W/loot\"\n",
        h.display(),
        quoted.join(" ")
    );
    for kind in kinds {
        assert_eq!(run_script(kind, &h, &script), "visible\n", "{kind}: read");
    }
}

/// libpq's client key and certificates (`~/.postgresql/`: the certificate
/// login docs/scale.md recommends for the store) and the files `PGPASSFILE`,
/// `PGSERVICEFILE` and `PGSSLKEY` name, wherever they are, are hidden from a
/// granted `cat` under both sandboxes, as `~/.pgpass` is.
#[test]
fn a_granted_cat_of_libpqs_client_key_gets_nothing() {
    let kinds = enforcing_kinds();
    if kinds.is_empty() {
        eprintln!("skipped: neither bwrap nor Landlock can be used here");
        return;
    }
    // Not under /tmp, which bwrap replaces with a private one.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path().canonicalize().unwrap();
    let elsewhere = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let e = elsewhere.path().canonicalize().unwrap();
    std::fs::create_dir_all(h.join(".postgresql")).unwrap();
    let files = [
        h.join(".postgresql/postgresql.key"),
        h.join(".postgresql/postgresql.crt"),
        e.join("pgpass"),
        e.join("pg_service.conf"),
        e.join("client.key"),
    ];
    for f in &files {
        std::fs::write(f, "SECRET\n").unwrap();
    }
    std::fs::write(e.join("notes.txt"), "visible\n").unwrap();
    let env = [
        ("PGPASSFILE", files[2].as_path()),
        ("PGSERVICEFILE", files[3].as_path()),
        ("PGSSLKEY", files[4].as_path()),
    ];
    let cats: String = files
        .iter()
        .chain([&e.join("notes.txt")])
        .map(|f| format!("cat '{}' >> loot 2>/dev/null\n", f.display()))
        .collect();
    let read: Vec<(&str, String)> = kinds
        .into_iter()
        .map(|kind| (kind, run_script_with(kind, &h, &env, &cats)))
        .collect();
    for (kind, loot) in &read {
        assert_eq!(loot, "visible\n", "{kind}: read; all: {read:?}");
    }
}

/// As root, `/etc/shadow`, `/etc/gshadow` and root's own credential stores
/// (in `/root`, though `HOME` points elsewhere) are hidden from commands under
/// both sandboxes; `/etc/passwd` beside them stays readable.
#[test]
fn as_root_shadow_and_roots_stores_are_hidden() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root (the attack needs root's rights)");
        return;
    }
    let kinds = enforcing_kinds();
    if kinds.is_empty() {
        eprintln!("skipped: neither bwrap nor Landlock can be used here");
        return;
    }
    // A store of root's that does not exist yet, made for the test and removed after.
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let store = [".vault-token", ".s3cfg", ".boto", ".databrickscfg"]
        .iter()
        .map(|n| Path::new("/root").join(n))
        .find(|p| !p.exists())
        .expect("one of root's candidate stores is free");
    std::fs::write(&store, "SECRET\n").unwrap();
    let _remove = Remove(store.clone());
    // A secret a container runtime mounts (Docker and Compose put them here).
    struct RemoveDir(Option<PathBuf>);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            if let Some(d) = &self.0 {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
    let secrets = Path::new("/run/secrets");
    let _made = RemoveDir((!secrets.exists()).then(|| secrets.to_path_buf()));
    std::fs::create_dir_all(secrets).unwrap();
    let container = secrets.join(format!("loopbox-test-{}", std::process::id()));
    std::fs::write(&container, "SECRET\n").unwrap();
    let _remove_container = Remove(container.clone());
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let script = format!(
        "for f in /etc/shadow /etc/gshadow '{}' '{}'; do [ -n \"$(head -c 40 \"$f\" 2>/dev/null)\" ] && echo \"$f\" >> loot; done\nhead -c 5 /etc/passwd >> loot\n",
        store.display(),
        container.display()
    );
    for kind in kinds {
        // A hidden file reads as empty (its cover) or not at all; the
        // script names each it could read, then prints `root:`.
        let loot = run_script(kind, home.path(), &script);
        assert_eq!(loot, "root:", "{kind}: read");
    }
}

/// Start `loopbox run` of a loop whose one command is `script`, in `dir` under
/// `kind`, wait until the command wrote `ready`, and kill loopbox with SIGKILL.
fn kill_mid_command(dir: &Path, kind: &str, script: &str) {
    std::fs::write(dir.join("ready"), "").unwrap();
    std::fs::write(
        dir.join("loopbox.toml"),
        format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("wait.yaml"),
        format!(
            "name: wait\ninitial: work\nstates:\n  work:\n    action: \"{script}; echo x > ready; sleep 20\"\n    next: done\n  done:\n    terminal: true\n"
        ),
    )
    .unwrap();
    let mut child = common::trusted_command(dir)
        .args(["-C", &dir.to_string_lossy(), "run", "wait.yaml"])
        .current_dir(dir)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(dir.join("ready")).unwrap_or_default() != "x\n" {
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}: the command never started"
        );
        assert!(child.try_wait().unwrap().is_none(), "{kind}: loopbox ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// A loopbox killed with SIGKILL mid-command leaves bwrap's placeholders in the
/// workspace and Landlock's private temp dir behind; the next loopbox command
/// there removes both. The temp dir was private (0700) while it lived.
#[test]
fn leftovers_of_a_killed_loopbox_go_at_the_next_start() {
    let support = loopbox::exec::sandbox::support();
    if support.bwrap.is_ok() {
        let dir = tempfile::tempdir().unwrap();
        kill_mid_command(dir.path(), "bwrap", "true");
        assert!(
            dir.path().join(".claude").is_dir() && dir.path().join(".envrc").is_file(),
            "bwrap: the placeholders are there after the kill"
        );
        let o = loopbox(dir.path(), &["runs"]);
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        let left: Vec<&str> = [
            ".claude",
            ".codex",
            ".gemini",
            ".envrc",
            ".mcp.json",
            ".vscode",
        ]
        .into_iter()
        .filter(|n| dir.path().join(n).exists())
        .collect();
        assert!(left.is_empty(), "bwrap: placeholders left: {left:?}");
    } else {
        eprintln!("bwrap part skipped: {:?}", support.bwrap);
    }
    if support.landlock_usable().is_ok() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tmp"), "").unwrap();
        kill_mid_command(
            dir.path(),
            "landlock",
            "stat -c '%a %n' \\\"$TMPDIR\\\" > tmp",
        );
        let line = std::fs::read_to_string(dir.path().join("tmp")).unwrap();
        let (mode, tmp) = line.trim_end().split_once(' ').unwrap();
        assert_eq!(mode, "700", "landlock: the private temp dir's mode ({tmp})");
        let o = loopbox(dir.path(), &["runs"]);
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        assert!(
            !Path::new(tmp).exists(),
            "landlock: the dead loopbox's temp dir `{tmp}` is still there"
        );
    } else {
        eprintln!("landlock part skipped: {:?}", support.landlock_usable());
    }
}

/// An agent program kept under /tmp (outside the workspace) was reported found
/// by `doctor` while bwrap's private /tmp hid it and the run failed with
/// `execvp ... No such file`. What holds it there is bound back read-only: the
/// run works, and `doctor` says so.
#[test]
fn an_agent_under_tmp_runs_under_bwrap_and_doctor_says_how() {
    if let Err(e) = &loopbox::exec::sandbox::support().bwrap {
        eprintln!("skipped: bwrap cannot be used here: {e}");
        return;
    }
    let tools = tempfile::Builder::new()
        .prefix("loopbox-agent-")
        .tempdir_in("/tmp")
        .unwrap();
    let agent = tools.path().join("bin/agent");
    std::fs::create_dir(tools.path().join("bin")).unwrap();
    std::fs::write(
        &agent,
        "#!/bin/sh\ncat > /dev/null\necho ran > agent-ran\necho done\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!(
            "[shell]\nsandbox = \"bwrap\"\n\n[agent]\ncommand = [\"{}\"]\nprompt_input = \"stdin\"\n",
            agent.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ask.yaml"),
        "name: ask\ninitial: ask\nstates:\n  ask:\n    action: hello\n    action_type: prompt\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["run", "ask.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent-ran"))
            .ok()
            .as_deref(),
        Some("ran\n"),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let o = loopbox(dir.path(), &["doctor"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains(&format!(
            "{} ({}; under /tmp, so bound read-only into the sandbox's private /tmp)",
            agent.display(),
            agent.display()
        )),
        "{}",
        text(&o.stdout)
    );
}

/// `doctor` says when loopbox runs as root and what that changes.
#[test]
fn doctor_says_when_it_runs_as_root() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(v["root"], root, "{v}");
    let o = loopbox(dir.path(), &["doctor"]);
    let out = text(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("root "));
    if root {
        let line = line.unwrap_or_else(|| panic!("no root line: {out}"));
        assert!(
            line.contains("no capabilities") && line.contains("/etc/shadow"),
            "{line}"
        );
    } else {
        assert!(line.is_none(), "{out}");
    }
}
