//! YAML loops on the host's side. `loopbox run LOOP.yaml` and `loopbox
//! validate` read the loop and check it, with what it imports, before anything
//! runs; the imports are read from the same workspace, by the same rules, as
//! the sandboxed `builtin:fsm` reads them through its workspace capability.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use loopbox_fsm::spec::Loop;
use loopbox_fsm::{Files, Problem};

/// The policy that runs YAML loops.
pub const FSM: &str = "builtin:fsm";

/// True for a `.yaml` / `.yml` path given where a policy goes.
pub fn is_loop_file(arg: &str) -> bool {
    !arg.starts_with("builtin:") && (arg.ends_with(".yaml") || arg.ends_with(".yml"))
}

/// A loop file as read from disk.
#[derive(Debug, Clone)]
pub struct LoopFile {
    /// Its path relative to the workspace root (absolute when it lies outside,
    /// in which case it cannot import anything).
    pub path: String,
    pub text: String,
}

/// Read `file` (relative to the current directory, like any policy path).
pub fn read(workspace: &Path, file: &Path) -> Result<LoopFile> {
    let text = crate::files::read_text(file, loopbox_fsm::yaml::MAX_TEXT_BYTES as u64, "loop")?;
    let abs = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let path = match abs.strip_prefix(&root) {
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => abs.to_string_lossy().into_owned(),
    };
    Ok(LoopFile { path, text })
}

/// Workspace files, read as `workspace.read` reads them.
struct WorkspaceFiles {
    dir: Option<Dir>,
    limit: u64,
}

impl Files for WorkspaceFiles {
    fn read(&mut self, path: &str) -> Result<String, String> {
        match &self.dir {
            Some(dir) => crate::caps::workspace::read_text(dir, path, self.limit),
            None => Err("the workspace cannot be opened".into()),
        }
    }
}

/// Parse, import and check the loop. Problems come back all together.
pub fn load(workspace: &Path, file: &LoopFile, read_limit: u64) -> Result<Loop, Vec<Problem>> {
    let dir = Dir::open_ambient_dir(workspace, ambient_authority()).ok();
    loopbox_fsm::load(
        &file.path,
        &file.text,
        &mut WorkspaceFiles {
            dir,
            limit: read_limit,
        },
    )
}

/// The `start` payload for `builtin:fsm`: the loop and the `--input` object,
/// which replaces `context` values.
pub fn payload(file: &LoopFile, input: &str) -> Result<String> {
    let context = match serde_json::from_str::<serde_json::Value>(input)
        .context("--input is not JSON")?
    {
        serde_json::Value::Object(m) => m,
        other => bail!(
            "--input for a YAML loop must be a JSON object of context values, like {{\"target\": \"src\"}}, not {other}"
        ),
    };
    Ok(loopbox_fsm::start::payload(&file.path, &file.text, &context).to_string())
}

/// `LOOP.yaml` as typed, or the file behind `builtin:fsm --input @LOOP.yaml`.
pub fn loop_path(policy: &str, input: &str) -> Option<PathBuf> {
    if is_loop_file(policy) {
        return Some(PathBuf::from(policy));
    }
    let file = input.strip_prefix('@')?;
    (policy == FSM && is_loop_file(file)).then(|| PathBuf::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_files_are_told_from_policies() {
        assert!(is_loop_file("loops/fix.yaml") && is_loop_file("a.yml"));
        assert!(!is_loop_file("policy.wasm") && !is_loop_file("builtin:ralph"));
        assert_eq!(
            loop_path("builtin:fsm", "@l.yaml"),
            Some(PathBuf::from("l.yaml"))
        );
        assert_eq!(loop_path("builtin:fsm", "{}"), None);
        assert_eq!(loop_path("builtin:ralph", "@l.yaml"), None);
        assert_eq!(loop_path("x.yaml", "{}"), Some(PathBuf::from("x.yaml")));
    }

    #[test]
    fn the_input_becomes_context() {
        let file = LoopFile {
            path: "l.yaml".into(),
            text: "name: l".into(),
        };
        let p: serde_json::Value =
            serde_json::from_str(&payload(&file, r#"{"n": 1}"#).unwrap()).unwrap();
        assert_eq!(
            p,
            serde_json::json!({"path": "l.yaml", "yaml": "name: l", "context": {"n": 1}})
        );
        assert!(
            payload(&file, "[1]")
                .unwrap_err()
                .to_string()
                .contains("must be a JSON object of context values")
        );
    }
}
