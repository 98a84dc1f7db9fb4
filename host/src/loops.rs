//! YAML loops on the host's side. `loopbox run LOOP.yaml` and `loopbox
//! validate` read the loop and check it, with what it imports, before anything
//! runs; the imports are read from the same workspace, by the same rules, as
//! the sandboxed `builtin:fsm` reads them through its workspace capability.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use loopbox_fsm::spec::Loop;
use loopbox_fsm::{Files, Problem};

use crate::caps::workspace::Withheld;

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
struct WorkspaceFiles<'a> {
    dir: Option<Dir>,
    withheld: &'a Withheld,
    limit: u64,
}

impl Files for WorkspaceFiles<'_> {
    fn read(&mut self, path: &str) -> Result<String, String> {
        match &self.dir {
            Some(dir) => crate::caps::workspace::read_text(dir, self.withheld, path, self.limit),
            None => Err("the workspace cannot be opened".into()),
        }
    }
}

/// Parse, import and check the loop under `config` (its read limit, and what
/// it hides). Problems come back all together.
pub fn load(
    workspace: &Path,
    file: &LoopFile,
    config: &crate::config::Config,
) -> Result<Loop, Vec<Problem>> {
    let dir = Dir::open_ambient_dir(workspace, ambient_authority()).ok();
    // What the run's policy could not read, it cannot import either.
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let hidden = crate::exec::sandbox::hide::Hidden::new(&config.shell, &root).for_commands(&[]);
    let withheld = Withheld::new(&root, &hidden);
    loopbox_fsm::load(
        &file.path,
        &file.text,
        &mut WorkspaceFiles {
            dir,
            withheld: &withheld,
            limit: config.limits.read_bytes,
        },
    )
}

/// Where a run of a YAML loop keeps its files (`${context.run_dir}`), as
/// little-loops does: `.loops/runs/RUN_ID/`. Not under `.loopbox/`, which
/// sandboxed commands may never write.
pub fn run_dir(run_id: &str) -> String {
    format!(".loops/runs/{run_id}/")
}

/// Create the run's directory inside the workspace. Through a capability on
/// the workspace, so a `.loops` that a sandboxed command replaced with a link
/// to elsewhere is refused rather than followed out of the workspace.
pub fn create_run_dir(workspace: &Path, run_dir: &str) -> Result<()> {
    let dir = Dir::open_ambient_dir(workspace, ambient_authority())
        .with_context(|| format!("cannot open the workspace {}", workspace.display()))?;
    dir.create_dir_all(run_dir.trim_end_matches('/')).with_context(|| {
        format!(
            "cannot create the run's directory {run_dir} in the workspace (is `.loops` a link out of it?)"
        )
    })
}

/// The `start` payload for `builtin:fsm`: the loop, the `--input` text (a
/// JSON object of context values, or any text, which becomes the loop's
/// `input_key` value) and the run's directory. The loop's own rules are
/// checked here too (a required input that is missing), so a run that
/// cannot start is refused before it is created.
pub fn payload(
    lp: &Loop,
    file: &LoopFile,
    input: &str,
    run_dir: &str,
    workspace: &Path,
) -> Result<String> {
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let start = loopbox_fsm::start::Start {
        path: file.path.clone(),
        yaml: file.text.clone(),
        context: Default::default(),
        input: Some(input.to_string()),
        run_dir: Some(run_dir.to_string()),
        workspace: Some(workspace.to_string_lossy().into_owned()),
    };
    loopbox_fsm::start::context(lp, &start).map_err(anyhow::Error::msg)?;
    Ok(start.to_json().to_string())
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
        let text =
            "name: l\ninitial: a\nrequired_inputs: [issue]\nstates:\n  a:\n    terminal: true\n";
        let file = LoopFile {
            path: "l.yaml".into(),
            text: text.into(),
        };
        let lp = loopbox_fsm::load(
            "l.yaml",
            text,
            &mut WorkspaceFiles {
                dir: None,
                withheld: &Withheld::new(Path::new("/"), &[]),
                limit: 0,
            },
        )
        .unwrap();
        let p: serde_json::Value = serde_json::from_str(
            &payload(
                &lp,
                &file,
                r#"{"issue": "BUG-1"}"#,
                ".loops/runs/r1/",
                Path::new("/"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            p,
            serde_json::json!({"path": "l.yaml", "yaml": text, "input": "{\"issue\": \"BUG-1\"}", "run_dir": ".loops/runs/r1/", "workspace": "/"})
        );
        let refused = payload(&lp, &file, "{}", ".loops/runs/r1/", Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("requires input `issue` but none was given"),
            "{refused}"
        );
    }
}
