//! `tamper_guard`: did a guarded state's action change a test file, or the
//! pytest config that decides which tests run? As little-loops 1.156 does it
//! (`fsm/executor.py` `_effective_tamper_guard_policy`, `_check_tamper_guard`;
//! `test_tamper_guard.py` `tamper_guard_candidate_paths`,
//! `tamper_guard_changed_files`, `snapshot_test_paths`, `compare_snapshots`,
//! `run_tamper_guard`), but from inside the sandbox: the file lists come from
//! `git` and the content hashes from `sha256sum`, each a granted command run
//! like any other action, so the guard reads no more than the loop's own
//! commands may. Hashes are of content, never of times, so an edit whose
//! mtime was put back is still seen.
//!
//! The guard fails closed: when it cannot look (a command refused or timed
//! out, too many files, output cut short) that is a finding, never a pass.
//!
//! `revert` (`apply_tamper_policy`): the modified and deleted test files that
//! git tracks are put back, the untracked ones stay findings, and added ones
//! are left alone. little-loops puts them back with `git checkout --`, from
//! git's index; loopbox puts them back from copies the host kept when the
//! state began (`actions.snapshot`/`restore`, granted by `workspace.restore`),
//! since the sandbox keeps `.git` read-only. The two differ only for a test
//! file already changed, and not staged, before the state: loopbox keeps
//! that earlier change, little-loops drops it. `passed` is whether every
//! revertable file was put back; under `revert` it routes nothing, as in
//! little-loops.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::machine::{Level, Out, Request, World};

/// Candidate files one snapshot may hold. Past it the guard does not look
/// (a finding): hashing them would take minutes and a policy or agent that
/// creates files by the thousand must not make the host do unbounded work.
pub const MAX_GUARDED_FILES: usize = 20_000;
/// little-loops' `_GIT_TIMEOUT` for the guard's git calls.
const GIT_TIMEOUT_MS: u64 = 10_000;
/// One `sha256sum` batch; a FIFO planted as a test file blocks it until then.
const HASH_TIMEOUT_MS: u64 = 60_000;
/// Paths per `sha256sum` call, and their bytes: well under `ARG_MAX`, and
/// the hashes it prints (67 bytes a file more) under `limits.output_bytes`'
/// default of 1 MiB. Each call is a sandboxed process (some 0.1 s), so few.
const HASH_BATCH: usize = 4096;
const HASH_BATCH_BYTES: usize = 256 << 10;

/// little-loops' default `project.test_patterns` (`config/core.py`).
const DEFAULT_TEST_PATTERNS: &[&str] = &[
    "**/test_*.py",
    "**/*_test.py",
    "**/tests/**",
    "conftest.py",
    "**/conftest.py",
];

/// little-loops' three policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fail,
    Allow,
    Revert,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fail => "fail",
            Policy::Allow => "allow",
            Policy::Revert => "revert",
        }
    }
}

/// The policy a state runs under: its own value when set (and not empty),
/// else the loop's; a value outside the known ones means no guard, as in
/// `_effective_tamper_guard_policy` (`state.tamper_guard or
/// self.fsm.tamper_guard`).
pub fn effective(state: Option<&str>, lp: Option<&str>) -> Option<Policy> {
    let raw = state.filter(|s| !s.is_empty()).or(lp)?;
    match raw {
        "fail" => Some(Policy::Fail),
        "allow" => Some(Policy::Allow),
        "revert" => Some(Policy::Revert),
        _ => None,
    }
}

/// What `.ll/ll-config.json` (or `ll-config.json`) says, for the guards.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    pub test_patterns: Vec<String>,
    /// `prepatch_check.enabled` (default false).
    pub prepatch_enabled: bool,
    /// `parallel.base_branch` (default `main`).
    pub base_branch: String,
    /// `project.src_dir` (default `src/`): prepended to the pre-patch run's
    /// `PYTHONPATH`, and required in the pre-patch worktree.
    pub src_dir: String,
    /// `prepatch_check.timeout_s` (default 300): each pre-patch pytest run's limit.
    pub prepatch_timeout_s: u64,
    /// `prepatch_check.modified_hard` (default false): a modified test that
    /// passes before the patch is a hard flag, not a soft one.
    pub modified_hard: bool,
}

impl Default for Project {
    fn default() -> Self {
        Project {
            test_patterns: DEFAULT_TEST_PATTERNS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            prepatch_enabled: false,
            base_branch: "main".into(),
            src_dir: "src/".into(),
            prepatch_timeout_s: 300,
            modified_hard: false,
        }
    }
}

fn missing(e: &str) -> bool {
    e.contains("does not exist")
}

/// Read the project's little-loops config as `BRConfig(repo_root)` does
/// (`.ll/ll-config.json`, then `ll-config.json`); none means the defaults.
/// A config that exists but cannot be read or parsed is an error: the guard
/// must not run on guessed patterns.
pub fn project(world: &mut dyn World) -> Result<Project, String> {
    let mut text = None;
    for path in [".ll/ll-config.json", "ll-config.json"] {
        match world.read(path) {
            Ok(t) => {
                text = Some((path, t));
                break;
            }
            Err(e) if missing(&e) => continue,
            Err(e) => return Err(format!("cannot read `{path}`: {e}")),
        }
    }
    let mut p = Project::default();
    let Some((path, text)) = text else {
        return Ok(p);
    };
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("`{path}` is not valid JSON: {e}"))?;
    if let Some(list) = v
        .pointer("/project/test_patterns")
        .and_then(Value::as_array)
    {
        p.test_patterns = list
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect();
    }
    if let Some(b) = v
        .pointer("/prepatch_check/enabled")
        .and_then(Value::as_bool)
    {
        p.prepatch_enabled = b;
    }
    if let Some(d) = v.pointer("/project/src_dir").and_then(Value::as_str) {
        p.src_dir = d.to_string();
    }
    if let Some(t) = v
        .pointer("/prepatch_check/timeout_s")
        .and_then(Value::as_u64)
    {
        p.prepatch_timeout_s = t;
    }
    if let Some(b) = v
        .pointer("/prepatch_check/modified_hard")
        .and_then(Value::as_bool)
    {
        p.modified_hard = b;
    }
    if let Some(b) = v
        .pointer("/parallel/base_branch")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        p.base_branch = b.to_string();
    }
    Ok(p)
}

/// One piece of a Python `fnmatch` pattern.
enum Tok {
    Star,
    Any,
    Class(bool, Vec<(char, char)>),
    Lit(char),
}

fn tokens(pat: &str) -> Vec<Tok> {
    let chars: Vec<char> = pat.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if !matches!(out.last(), Some(Tok::Star)) {
                    out.push(Tok::Star);
                }
            }
            '?' => out.push(Tok::Any),
            '[' => {
                // `fnmatch.translate`: `]` right after `[` or `[!` is literal;
                // an unclosed `[` is a literal `[`.
                let mut j = i + 1;
                if j < chars.len() && chars[j] == '!' {
                    j += 1;
                }
                if j < chars.len() && chars[j] == ']' {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    out.push(Tok::Lit('['));
                } else {
                    let mut k = i + 1;
                    let negated = chars[k] == '!';
                    if negated {
                        k += 1;
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    while k < j || (first && chars[k] == ']') {
                        first = false;
                        let c = chars[k];
                        if k + 2 < j && chars[k + 1] == '-' {
                            ranges.push((c, chars[k + 2]));
                            k += 3;
                        } else {
                            ranges.push((c, c));
                            k += 1;
                        }
                    }
                    out.push(Tok::Class(negated, ranges));
                    i = j;
                }
            }
            c => out.push(Tok::Lit(c)),
        }
        i += 1;
    }
    out
}

fn one(t: &Tok, c: char) -> bool {
    match t {
        Tok::Any => true,
        Tok::Lit(l) => *l == c,
        Tok::Class(neg, ranges) => ranges.iter().any(|(a, b)| *a <= c && c <= *b) != *neg,
        Tok::Star => false,
    }
}

/// Python's `fnmatch.fnmatchcase` (what `fnmatch.fnmatch` is on Linux): `*`
/// crosses `/`.
pub fn fnmatch(name: &str, pat: &str) -> bool {
    let toks = tokens(pat);
    let s: Vec<char> = name.chars().collect();
    let (mut ti, mut si) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while si < s.len() {
        if ti < toks.len() {
            if let Tok::Star = toks[ti] {
                back = Some((ti, si));
                ti += 1;
                continue;
            }
            if one(&toks[ti], s[si]) {
                ti += 1;
                si += 1;
                continue;
            }
        }
        match back {
            Some((bt, bs)) => {
                back = Some((bt, bs + 1));
                ti = bt + 1;
                si = bs + 1;
            }
            None => return false,
        }
    }
    toks[ti..].iter().all(|t| matches!(t, Tok::Star))
}

/// `git_operations.file_matches_pattern`: gitignore-like matching of one
/// repo-relative path against one `project.test_patterns` entry.
pub fn matches_pattern(path: &str, pattern: &str) -> bool {
    let pattern = pattern.strip_prefix('!').unwrap_or(pattern);
    if let Some(dir) = pattern.strip_suffix('/') {
        let dir = dir.trim_end_matches('/');
        return path == dir || path.starts_with(&format!("{dir}/"));
    }
    if !pattern.contains('/') {
        let base = path.rsplit('/').next().unwrap_or(path);
        if pattern.contains('*') || pattern.contains('?') {
            return fnmatch(base, pattern);
        }
        return base == pattern;
    }
    if let Some(anchored) = pattern.strip_prefix('/') {
        return fnmatch(path, anchored);
    }
    let parts: Vec<&str> = path.split('/').collect();
    (0..parts.len()).any(|i| fnmatch(&parts[i..].join("/"), pattern))
}

fn is_test_file(path: &str, project: &Project) -> bool {
    project
        .test_patterns
        .iter()
        .any(|p| matches_pattern(path, p))
}

/// A file the guard hashes: a test file, or a `.gitignore`, whose edit could hide
/// a new test file (a root `conftest.py` that skips every test) from the listings.
fn is_guarded(path: &str, project: &Project) -> bool {
    is_test_file(path, project) || path.rsplit('/').next() == Some(".gitignore")
}

/// Untracked files git ignores, so that an ignored test file is still seen.
/// `--directory` makes an ignored directory one entry (a `node_modules/` must not
/// fill the cap), so a test file inside an ignored directory is not seen; a
/// `.gitignore` edited to ignore one is (see [`is_guarded`]).
const IGNORED: &[&str] = &[
    "ls-files",
    "-z",
    "--others",
    "--ignored",
    "--exclude-standard",
    "--directory",
];

/// A pytest config file pytest reads for this repo, and whether only its
/// `[tool.pytest.ini_options]` table counts (`pyproject.toml`).
#[derive(Debug, Clone, PartialEq)]
struct ConfigTarget {
    path: &'static str,
    section: bool,
}

const PYPROJECT_SECTION: &str = "[tool.pytest.ini_options]";

/// `resolved_pytest_config_targets`: pytest's own discovery order.
fn config_targets(world: &mut dyn World) -> Vec<ConfigTarget> {
    let mut read = |p: &str| world.read(p).ok();
    if read("pytest.ini").is_some() {
        return vec![ConfigTarget {
            path: "pytest.ini",
            section: false,
        }];
    }
    if read("pyproject.toml").is_some_and(|t| t.lines().any(|l| l.trim() == PYPROJECT_SECTION)) {
        return vec![ConfigTarget {
            path: "pyproject.toml",
            section: true,
        }];
    }
    if read("tox.ini").is_some_and(|t| t.contains("[pytest]")) {
        return vec![ConfigTarget {
            path: "tox.ini",
            section: false,
        }];
    }
    if read("setup.cfg").is_some_and(|t| t.contains("[tool:pytest]")) {
        return vec![ConfigTarget {
            path: "setup.cfg",
            section: false,
        }];
    }
    Vec::new()
}

/// The `[tool.pytest.ini_options]` table's lines, comments and blank lines
/// left out (little-loops hashes the parsed table, so layout does not count);
/// the whole text when the table is gone.
fn section_hash(text: &str) -> String {
    let mut lines = text.lines();
    let mut body = Vec::new();
    let mut found = false;
    for l in lines.by_ref() {
        if l.trim() == PYPROJECT_SECTION {
            found = true;
            break;
        }
    }
    if found {
        for l in lines {
            let t = l.trim();
            if t.starts_with('[') {
                break;
            }
            if !t.is_empty() && !t.starts_with('#') {
                body.push(t);
            }
        }
    }
    let blob = if found {
        format!("section\n{}", body.join("\n"))
    } else {
        text.to_string()
    };
    hex(&Sha256::digest(blob.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn show(argv: &[String]) -> String {
    argv.join(" ")
}

/// Run one of the guard's commands. `Ok(None)`: it ran and exited non-zero
/// (little-loops' `_git` returns None then); `Err`: it could not run or its
/// answer cannot be trusted, which the guard counts as a finding.
fn command(
    world: &mut dyn World,
    argv: Vec<String>,
    timeout_ms: u64,
) -> Result<Option<Out>, String> {
    let shown = show(&argv[..argv.len().min(4)]);
    let out = world
        .act(Request::Exec {
            argv,
            timeout_ms: Some(timeout_ms),
            stdin: None,
        })
        .map_err(|e| {
            format!(
                "`{shown}` was not run: {e}; the guard needs `git` (ls-files, diff) and `sha256sum` granted (`loopbox validate --grants` lists them)"
            )
        })?;
    if out.timed_out {
        return Err(format!("`{shown}` timed out after {}s", timeout_ms / 1000));
    }
    if out.truncated {
        return Err(format!(
            "`{shown}` printed more than `limits.output_bytes` allows, so its list is incomplete"
        ));
    }
    Ok((out.code() == 0).then_some(out))
}

fn git(args: &[&str]) -> Vec<String> {
    std::iter::once("git")
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

/// NUL-separated names (`-z`): no quoting, any byte but NUL allowed.
fn names(out: &Out) -> Vec<String> {
    out.stdout
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Hashes taken of the guarded files, and why the guard could not look, if
/// it could not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Path to its content's hash; `None` when missing or unreadable.
    pub hashes: BTreeMap<String, Option<String>>,
    pub trouble: Option<String>,
    /// Under `revert`: the host's copies of the files there (its snapshot
    /// id), or why it keeps none.
    pub kept: Option<Result<String, String>>,
}

/// Hash `paths` (content only). Missing and unreadable files are `None`, as
/// in `snapshot_test_paths`; a section-scoped config by its section.
fn hash(world: &mut dyn World, paths: &BTreeSet<String>, targets: &[ConfigTarget]) -> Snapshot {
    let mut snap = Snapshot::default();
    if paths.len() > MAX_GUARDED_FILES {
        snap.trouble = Some(format!(
            "{} files to guard, more than the tamper guard's limit of {MAX_GUARDED_FILES}",
            paths.len()
        ));
        return snap;
    }
    let section: BTreeSet<&str> = targets
        .iter()
        .filter(|t| t.section)
        .map(|t| t.path)
        .collect();
    let mut plain: Vec<&String> = Vec::new();
    for p in paths {
        if section.contains(p.as_str()) {
            snap.hashes
                .insert(p.clone(), world.read(p).ok().map(|t| section_hash(&t)));
        } else {
            snap.hashes.insert(p.clone(), None);
            plain.push(p);
        }
    }
    let mut start = 0;
    while start < plain.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < plain.len() && end - start < HASH_BATCH && bytes < HASH_BATCH_BYTES {
            bytes += plain[end].len() + 1;
            end += 1;
        }
        // `--` first: a test file named `-c` is a name, never a flag.
        let mut argv: Vec<String> = vec!["sha256sum".into(), "-z".into(), "--".into()];
        argv.extend(plain[start..end].iter().map(|p| p.to_string()));
        let out = match world.act(Request::Exec {
            argv,
            timeout_ms: Some(HASH_TIMEOUT_MS),
            stdin: None,
        }) {
            Ok(o) => o,
            Err(e) => {
                snap.trouble = Some(format!(
                    "`sha256sum` was not run: {e}; the guard needs it granted (`loopbox validate --grants` lists it)"
                ));
                return snap;
            }
        };
        if out.timed_out || out.truncated || out.code() < 0 {
            snap.trouble = Some(format!(
                "`sha256sum` {} while hashing the guarded files",
                if out.timed_out {
                    "timed out (a file that never ends?)"
                } else if out.truncated {
                    "printed more than `limits.output_bytes` allows"
                } else {
                    "was killed"
                }
            ));
            return snap;
        }
        // Exit 1 means some files could not be read: they stay `None`.
        for rec in out.stdout.split('\0').filter(|r| !r.is_empty()) {
            if rec.len() < 67 || !rec.is_char_boundary(64) || !rec.is_char_boundary(66) {
                continue;
            }
            let (h, name) = (&rec[..64], &rec[66..]);
            if let Some(slot) = snap.hashes.get_mut(name)
                && plain[start..end].iter().any(|p| p.as_str() == name)
            {
                *slot = Some(h.to_string());
            }
        }
        start = end;
    }
    snap
}

/// The entry snapshot (`snapshot_test_paths` over
/// `tamper_guard_candidate_paths`): tracked and untracked test files (ignored
/// ones too, unlike little-loops) and `.gitignore` files, plus the pytest config. When `git ls-files` fails (not a
/// repository), just the config, as little-loops falls back.
pub fn snapshot(world: &mut dyn World, project: &Project) -> Snapshot {
    let targets = config_targets(world);
    let mut paths: BTreeSet<String> = targets.iter().map(|t| t.path.to_string()).collect();
    match command(
        world,
        git(&[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ]),
        GIT_TIMEOUT_MS,
    ) {
        Ok(Some(out)) => {
            let mut all = names(&out);
            match command(world, git(IGNORED), GIT_TIMEOUT_MS) {
                Ok(Some(out)) => all.extend(names(&out)),
                Ok(None) => {}
                Err(e) => {
                    return Snapshot {
                        trouble: Some(e),
                        ..Default::default()
                    };
                }
            }
            if all.len() > MAX_GUARDED_FILES * 10 {
                return Snapshot {
                    trouble: Some(format!(
                        "`git ls-files` listed {} files, more than the tamper guard reads ({})",
                        all.len(),
                        MAX_GUARDED_FILES * 10
                    )),
                    ..Default::default()
                };
            }
            paths.extend(all.into_iter().filter(|p| is_guarded(p, project)));
        }
        Ok(None) => {}
        Err(e) => {
            return Snapshot {
                trouble: Some(e),
                ..Default::default()
            };
        }
    }
    hash(world, &paths, &targets)
}

/// One changed file (`TamperFinding`), or `unverified` when the guard could
/// not look.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub path: String,
    pub kind: &'static str,
    pub is_config: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub policy: Policy,
    pub findings: Vec<Finding>,
    /// Why the guard could not look, when it could not.
    pub trouble: Option<String>,
    pub passed: bool,
    /// Under `revert`: the files put back.
    pub reverted: Vec<String>,
}

impl Report {
    /// The record little-loops appends to `context._tamper_guard`.
    pub fn record(&self, state: &str) -> Value {
        let findings: Vec<Value> = self
            .findings
            .iter()
            .map(|f| json!({"path": f.path, "kind": f.kind, "is_config": f.is_config}))
            .collect();
        let mut r = json!({
            "state": state,
            "policy": self.policy.name(),
            "passed": self.passed,
            "findings": findings,
            "reverted": self.reverted,
        });
        if let Some(t) = &self.trouble {
            r["unverified"] = json!(t);
        }
        r
    }

    /// One line for the run log.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .findings
            .iter()
            .filter(|f| f.kind != "unverified")
            .take(5)
            .map(|f| format!("`{}` {}", f.path, f.kind))
            .collect();
        let real = self
            .findings
            .iter()
            .filter(|f| f.kind != "unverified")
            .count();
        if real > 5 {
            parts.push(format!("and {} more", real - 5));
        }
        if let Some(t) = &self.trouble {
            parts.push(format!("the guard could not check: {t}"));
        }
        parts.join("; ")
    }
}

/// `tamper_guard_changed_files`: modified against HEAD, and untracked. A git
/// call that fails is left out, as little-loops does; one that is refused is
/// trouble.
fn changed(world: &mut dyn World) -> Result<Vec<String>, String> {
    let mut all = Vec::new();
    for args in [
        &["diff", "-z", "--name-only", "HEAD"][..],
        &["ls-files", "-z", "--others", "--exclude-standard"][..],
        IGNORED,
    ] {
        if let Some(out) = command(world, git(args), GIT_TIMEOUT_MS)? {
            all.extend(names(&out));
        }
    }
    Ok(all)
}

/// The exit check (`run_tamper_guard`): hash again the entry's files, the
/// test files changed since HEAD or new, and the pytest config; compare.
pub fn check(
    world: &mut dyn World,
    project: &Project,
    before: &Snapshot,
    policy: Policy,
) -> Report {
    let targets = config_targets(world);
    let config: BTreeSet<String> = targets.iter().map(|t| t.path.to_string()).collect();
    let mut trouble = before.trouble.clone();
    let mut findings = Vec::new();
    if trouble.is_none() {
        match changed(world) {
            Err(e) => trouble = Some(e),
            Ok(changed) => {
                let mut paths: BTreeSet<String> = before.hashes.keys().cloned().collect();
                paths.extend(changed.into_iter().filter(|p| is_guarded(p, project)));
                paths.extend(config.iter().cloned());
                let after = hash(world, &paths, &targets);
                match after.trouble {
                    Some(t) => trouble = Some(t),
                    None => {
                        for (path, now) in &after.hashes {
                            let was = before.hashes.get(path).cloned().flatten();
                            let kind = match (&was, now) {
                                (a, b) if a == b => continue,
                                (None, _) => "added",
                                (_, None) => "deleted",
                                _ => "modified",
                            };
                            findings.push(Finding {
                                path: path.clone(),
                                kind,
                                is_config: config.contains(path),
                            });
                        }
                    }
                }
            }
        }
    }
    if trouble.is_some() {
        findings.push(Finding {
            path: String::new(),
            kind: "unverified",
            is_config: false,
        });
    }
    let (passed, reverted) = match policy {
        Policy::Allow => (true, Vec::new()),
        Policy::Fail => (findings.is_empty(), Vec::new()),
        Policy::Revert => revert(world, before, &findings),
    };
    Report {
        policy,
        findings,
        trouble,
        passed,
        reverted,
    }
}

/// The `revert` policy: put back the modified and deleted files git tracks,
/// from the host's copies; whether every modified or deleted one was (an
/// untracked one never is, nor is any when the guard could not look), and
/// which were.
fn revert(world: &mut dyn World, before: &Snapshot, findings: &[Finding]) -> (bool, Vec<String>) {
    if findings.is_empty() {
        return (true, Vec::new());
    }
    let revertable: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.kind == "modified" || f.kind == "deleted")
        .collect();
    if revertable.is_empty() {
        // Only added files (or an unverified look): nothing to put back.
        let unverified = findings.iter().any(|f| f.kind == "unverified");
        return (!unverified, Vec::new());
    }
    let kept = match &before.kept {
        Some(Ok(id)) => id.clone(),
        Some(Err(e)) => {
            world.log(
                Level::Warn,
                &format!("tamper_guard: revert: the host kept no copies of the test files ({e}); nothing is put back"),
            );
            return (false, Vec::new());
        }
        None => return (false, Vec::new()),
    };
    let tracked: BTreeSet<String> =
        match command(world, git(&["ls-files", "-z", "--cached"]), GIT_TIMEOUT_MS) {
            Ok(Some(out)) => names(&out).into_iter().collect(),
            Ok(None) => BTreeSet::new(),
            Err(e) => {
                world.log(
                    Level::Warn,
                    &format!("tamper_guard: revert: cannot tell which files git tracks: {e}"),
                );
                return (false, Vec::new());
            }
        };
    let paths: Vec<String> = revertable
        .iter()
        .filter(|f| tracked.contains(&f.path))
        .map(|f| f.path.clone())
        .collect();
    if paths.is_empty() {
        return (false, Vec::new());
    }
    match world.restore(&kept, &paths) {
        Ok(written) => (written.len() == revertable.len(), written),
        Err(e) => {
            world.log(
                Level::Warn,
                &format!("tamper_guard: revert: the files could not be put back: {e}"),
            );
            (false, Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Level;

    #[test]
    fn fnmatch_is_pythons() {
        assert!(!fnmatch("tests/a/b.py", "**/tests/**"));
        assert!(fnmatch("x/tests/a/b.py", "**/tests/**"));
        assert!(fnmatch("test_a.py", "test_*.py"));
        assert!(!fnmatch("atest_a.py", "test_*.py"));
        assert!(fnmatch("a[b", "a[b"));
        assert!(fnmatch("t1", "t[0-9]"));
        assert!(!fnmatch("t1", "t[!0-9]"));
        assert!(fnmatch("a/b/c", "a*c"));
    }

    #[test]
    fn test_patterns_match_as_little_loops_does() {
        // Each answer as little-loops 1.156's `file_matches_pattern` gives it
        // with the default patterns: `**/` wants a directory before it.
        let p = Project::default();
        for yes in [
            "tests/test_a.py",
            "pkg/a_test.py",
            "a/tests/b",
            "conftest.py",
            "sub/conftest.py",
        ] {
            assert!(is_test_file(yes, &p), "{yes}");
        }
        for no in [
            "test_a.py",
            "tests/data/x.json",
            "-rf_test.py",
            "tests/-rf.py",
            "src/a.py",
            "testing.py",
            "contest.py",
            "tests",
        ] {
            assert!(!is_test_file(no, &p), "{no}");
        }
        assert!(!matches_pattern("a/b/spec/x.rs", "spec/"));
        assert!(matches_pattern("a/src/x.spec.ts", "src/*.spec.ts"));
        assert!(!matches_pattern("a/b/spec/x.rs", "/spec/"));
        assert!(matches_pattern("spec/x.rs", "spec/"));
        assert!(matches_pattern("src/x.spec.ts", "*.spec.ts"));
        assert!(matches_pattern("src/x.spec.ts", "/src/*.spec.ts"));
    }

    #[test]
    fn the_effective_policy_is_the_states_then_the_loops() {
        assert_eq!(effective(None, Some("fail")), Some(Policy::Fail));
        assert_eq!(effective(Some("allow"), Some("fail")), Some(Policy::Allow));
        assert_eq!(effective(Some(""), Some("fail")), Some(Policy::Fail));
        // An unknown state value is no guard, not the loop's.
        assert_eq!(effective(Some("bogus"), Some("fail")), None);
        assert_eq!(effective(None, None), None);
    }

    #[test]
    fn a_pyproject_section_is_hashed_alone() {
        let a = "[project]\nname='x'\n[tool.pytest.ini_options]\naddopts='-q'\n[tool.other]\nx=1\n";
        let b = "[project]\nname='y'\n[tool.pytest.ini_options]\n# hi\naddopts='-q'\n\n[tool.other]\nx=2\n";
        let c = "[project]\nname='x'\n[tool.pytest.ini_options]\naddopts='-q -k nothing'\n";
        assert_eq!(section_hash(a), section_hash(b));
        assert_ne!(section_hash(a), section_hash(c));
    }

    /// A world whose files live in a map: `git` and `sha256sum` answer from it.
    struct Tree {
        files: BTreeMap<String, String>,
        tracked: BTreeSet<String>,
        /// Untracked files a `.gitignore` names.
        ignored: BTreeSet<String>,
        refuse: bool,
        calls: Vec<Vec<String>>,
    }

    impl World for Tree {
        fn act(&mut self, req: Request) -> Result<Out, String> {
            let Request::Exec { argv, .. } = req else {
                return Err("not an exec".into());
            };
            self.calls.push(argv.clone());
            if self.refuse {
                return Err("denied: `git` is not allowed".into());
            }
            let mut stdout = String::new();
            let args: Vec<&str> = argv.iter().map(String::as_str).collect();
            match args.as_slice() {
                ["git", "ls-files", "-z", "--others", "--ignored", ..] => {
                    for f in &self.ignored {
                        stdout.push_str(f);
                        stdout.push('\0');
                    }
                }
                ["git", "ls-files", "-z", "--cached", ..] => {
                    let ignored = |f: &&String| !self.ignored.contains(*f);
                    for f in self.files.keys().filter(ignored).chain(self.tracked.iter()) {
                        stdout.push_str(f);
                        stdout.push('\0');
                    }
                }
                ["git", "ls-files", "-z", "--others", ..] => {
                    let listed =
                        |f: &&String| !self.tracked.contains(*f) && !self.ignored.contains(*f);
                    for f in self.files.keys().filter(listed) {
                        stdout.push_str(f);
                        stdout.push('\0');
                    }
                }
                ["git", "diff", ..] => {}
                ["sha256sum", "-z", "--", rest @ ..] => {
                    for f in rest {
                        if let Some(t) = self.files.get(*f) {
                            stdout.push_str(&format!(
                                "{}  {f}\0",
                                hex(&Sha256::digest(t.as_bytes()))
                            ));
                        }
                    }
                }
                other => return Err(format!("unexpected {other:?}")),
            }
            Ok(Out {
                exit_code: Some(0),
                stdout,
                ..Default::default()
            })
        }
        fn log(&mut self, _: Level, _: &str) {}
        fn progress(&mut self, _: &str) {}
        fn now_ms(&mut self) -> u64 {
            0
        }
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
        }
    }

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree {
            files: files
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            tracked: BTreeSet::new(),
            ignored: BTreeSet::new(),
            refuse: false,
            calls: Vec::new(),
        }
    }

    #[test]
    fn an_edit_inside_the_window_is_a_finding_and_one_before_it_is_not() {
        let mut w = tree(&[("tests/test_a.py", "assert 1"), ("src/a.py", "x")]);
        let p = Project::default();
        w.files.insert("tests/test_a.py".into(), "assert 2".into());
        let before = snapshot(&mut w, &p);
        assert_eq!(before.hashes.len(), 1, "{before:?}");
        let clean = check(&mut w, &p, &before, Policy::Fail);
        assert!(clean.passed && clean.findings.is_empty(), "{clean:?}");
        w.files
            .insert("tests/test_a.py".into(), "assert True".into());
        w.files.insert("src/a.py".into(), "y".into());
        w.files.insert("tests/test_new.py".into(), "".into());
        let r = check(&mut w, &p, &before, Policy::Fail);
        assert!(!r.passed);
        let kinds: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.path.as_str(), f.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("tests/test_a.py", "modified"),
                ("tests/test_new.py", "added")
            ]
        );
        assert!(check(&mut w, &p, &before, Policy::Allow).passed);
        w.files.remove("tests/test_a.py");
        let r = check(&mut w, &p, &before, Policy::Fail);
        assert_eq!(r.findings[0].kind, "deleted");
    }

    #[test]
    fn a_test_file_hidden_by_gitignore_is_still_a_finding() {
        let mut w = tree(&[("tests/test_a.py", "assert 1"), (".gitignore", "*.pyc\n")]);
        w.tracked.insert(".gitignore".into());
        let p = Project::default();
        let before = snapshot(&mut w, &p);
        assert!(before.hashes.contains_key(".gitignore"), "{before:?}");
        // The step writes a root conftest.py that skips every test, and ignores it.
        w.files.insert("conftest.py".into(), "skip all".into());
        w.files
            .insert(".gitignore".into(), "*.pyc\nconftest.py\n".into());
        w.ignored.insert("conftest.py".into());
        let r = check(&mut w, &p, &before, Policy::Fail);
        let kinds: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.path.as_str(), f.kind))
            .collect();
        assert_eq!(
            kinds,
            [(".gitignore", "modified"), ("conftest.py", "added")],
            "{r:?}"
        );
        assert!(!r.passed);
    }

    #[test]
    fn a_refused_command_is_a_finding_never_a_pass() {
        let mut w = tree(&[("tests/test_a.py", "assert 1")]);
        let p = Project::default();
        w.refuse = true;
        let before = snapshot(&mut w, &p);
        assert!(before.trouble.as_deref().unwrap().contains("not run"));
        let r = check(&mut w, &p, &before, Policy::Fail);
        assert!(!r.passed);
        assert_eq!(r.findings[0].kind, "unverified");
        assert!(
            r.describe().contains("validate --grants"),
            "{}",
            r.describe()
        );
        // Refused only at the exit: still a finding.
        w.refuse = false;
        let before = snapshot(&mut w, &p);
        w.refuse = true;
        assert!(!check(&mut w, &p, &before, Policy::Fail).passed);
    }

    #[test]
    fn a_dash_name_follows_the_double_dash_and_many_names_are_batched() {
        let mut files: Vec<(String, String)> = (0..HASH_BATCH + 600)
            .map(|i| (format!("t{i}_test.py"), "x".to_string()))
            .collect();
        files.push(("-rf_test.py".into(), "x".into()));
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let mut w = tree(&refs);
        let p = Project {
            test_patterns: vec!["*_test.py".into()],
            ..Project::default()
        };
        let before = snapshot(&mut w, &p);
        assert!(before.trouble.is_none());
        assert_eq!(before.hashes.len(), HASH_BATCH + 601);
        assert!(before.hashes.values().all(Option::is_some));
        let hashes: Vec<&Vec<String>> = w.calls.iter().filter(|c| c[0] == "sha256sum").collect();
        assert_eq!(hashes.len(), 2);
        for c in hashes {
            assert_eq!(&c[..3], ["sha256sum", "-z", "--"]);
            assert!(c.len() <= HASH_BATCH + 3);
        }
    }

    #[test]
    fn too_many_files_is_a_named_limit() {
        let files: Vec<(String, String)> = (0..=MAX_GUARDED_FILES)
            .map(|i| (format!("a/tests/t{i}.py"), String::new()))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let mut w = tree(&refs);
        let before = snapshot(&mut w, &Project::default());
        let t = before.trouble.unwrap();
        assert!(t.contains("limit of 20000"), "{t}");
        assert!(!w.calls.iter().any(|c| c[0] == "sha256sum"));
    }

    #[test]
    fn the_project_config_sets_the_patterns() {
        let mut w = tree(&[(
            ".ll/ll-config.json",
            r#"{"project": {"test_patterns": ["spec/"]}, "prepatch_check": {"enabled": true}}"#,
        )]);
        let p = project(&mut w).unwrap();
        assert_eq!(p.test_patterns, ["spec/"]);
        assert!(p.prepatch_enabled);
        let mut w = tree(&[(".ll/ll-config.json", "{not json")]);
        assert!(project(&mut w).unwrap_err().contains("not valid JSON"));
        assert_eq!(project(&mut tree(&[])).unwrap(), Project::default());
    }
}
