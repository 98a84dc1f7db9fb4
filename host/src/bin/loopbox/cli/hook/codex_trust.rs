//! `hook install codex --trust`: record in Codex's own config that you
//! reviewed the hook just written, as Codex's `/hooks` view does.
//!
//! Codex (0.171 and later) runs a new or changed hook only once its hash is
//! recorded as trusted (`[hooks.state."FILE:event:group:index"] trusted_hash`
//! in `$CODEX_HOME/config.toml`); `codex exec` has no view to review one in,
//! only `--dangerously-bypass-hook-trust`, which runs every hook of every
//! project unreviewed. The hash is Codex's own, so Codex is asked for it:
//! `codex app-server` speaks JSON-RPC on stdio (`initialize`, `hooks/list` for
//! the workspace, `config/value/write`), and only the entry whose file and
//! command are exactly the ones written is trusted.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

/// How long Codex gets to answer each request (it starts in about 100 ms).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A `codex app-server` on our pipes, killed when dropped.
struct AppServer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
}

impl AppServer {
    fn start(codex: &Path, cwd: &Path) -> Result<AppServer> {
        let mut child = Command::new(codex)
            .arg("app-server")
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot run `{} app-server`", codex.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = AppServer {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        server.call(
            "initialize",
            json!({"clientInfo": {"name": "loopbox", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "initialized"}))?;
        Ok(server)
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        writeln!(self.stdin, "{message}")
            .and_then(|()| self.stdin.flush())
            .context("`codex app-server` stopped reading")
    }

    /// Send a request and wait for its answer (notifications in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    bail!("`codex app-server` did not answer {method} within {ANSWER_WITHIN:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("`codex app-server` exited before answering {method}")
                }
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] != json!(id) {
                continue;
            }
            if let Some(e) = message.get("error") {
                bail!(
                    "Codex refused {method}: {}",
                    e["message"].as_str().unwrap_or(&e.to_string())
                );
            }
            return Ok(message["result"].clone());
        }
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The entry `hooks/list` shows for `command` in `source`, as Codex sees it from `cwd`.
fn find(server: &mut AppServer, cwd: &Path, source: &Path, command: &str) -> Result<Option<Value>> {
    let listed = server.call("hooks/list", json!({"cwds": [cwd]}))?;
    let same_file = |p: &Value| {
        p.as_str()
            .map(PathBuf::from)
            .is_some_and(|p| p == source || p.canonicalize().ok().as_deref() == Some(source))
    };
    Ok(listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["hooks"].as_array().into_iter().flatten())
        .find(|h| same_file(&h["sourcePath"]) && h["command"] == json!(command))
        .cloned())
}

/// Trust the hook `command` that `source` holds, for Codex run in `cwd`: its
/// key in Codex's config, once Codex lists it as trusted.
pub(super) fn trust(codex: &Path, cwd: &Path, source: &Path, command: &str) -> Result<String> {
    let cwd = cwd
        .canonicalize()
        .with_context(|| format!("cannot resolve `{}`", cwd.display()))?;
    let source = source
        .canonicalize()
        .with_context(|| format!("cannot resolve `{}`", source.display()))?;
    let mut server = AppServer::start(codex, &cwd)?;
    let Some(hook) = find(&mut server, &cwd, &source, command)? else {
        bail!(
            "Codex does not list the hook just written in `{}`: it reads a project's .codex/hooks.json only when it trusts the project \
             (`[projects.\"{}\"] trust_level = \"trusted\"` in $CODEX_HOME/config.toml, or trust the folder when Codex asks), then run this again",
            source.display(),
            cwd.display()
        );
    };
    let key = hook["key"]
        .as_str()
        .ok_or_else(|| anyhow!("Codex listed the hook without a key"))?
        .to_string();
    if hook["trustStatus"] == json!("trusted") {
        return Ok(key);
    }
    let hash = hook["currentHash"]
        .as_str()
        .ok_or_else(|| anyhow!("Codex listed the hook without its hash"))?;
    server.call(
        "config/value/write",
        json!({"keyPath": "hooks.state", "mergeStrategy": "upsert",
               "value": {key.as_str(): {"trusted_hash": hash}}}),
    )?;
    match find(&mut server, &cwd, &source, command)? {
        Some(h) if h["trustStatus"] == json!("trusted") => Ok(key),
        Some(h) => bail!(
            "Codex still lists the hook as {} after recording its hash; review it in Codex's /hooks view",
            h["trustStatus"]
        ),
        None => bail!("Codex no longer lists the hook; review it in Codex's /hooks view"),
    }
}

/// The `codex` program on PATH (the one the user runs).
pub(super) fn codex_on_path() -> Result<PathBuf> {
    super::command::on_path("codex").ok_or_else(|| {
            anyhow!(
                "--trust asks Codex for the hook's hash, and there is no `codex` on PATH; put the Codex you run on PATH, or review the hook in Codex's /hooks view"
            )
        })
}
