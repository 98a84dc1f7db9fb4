//! Grant checks for shell requests: the user's rules, each with a tier
//! (deny, ask, allow), matched on argv tokens after the program is resolved
//! to its real path through the granted `PATH`. The program that is matched is
//! the program that runs: the caller executes [`Grant::exec`] (a link to that
//! real file outside the workspace, or the file itself) with `argv[0]` as written.
//!
//! - Order: deny, then ask, then allow; no match is a denial that says what was
//!   asked and which config key would allow it.
//! - allow and ask rules are argv prefixes: `["cargo", "test"]` allows
//!   `cargo test --all`, not `cargo build`. A multi-call binary (rustup as
//!   `cargo`, busybox) is allowed only under the rule's own name.
//! - deny rules match their tokens in any order, flags normalized (`flags.rs`),
//!   so `["rm", "-rf"]` also denies `rm -fR` and `rm --recursive --force`.
//! - Wrappers and interpreters (`sh`, `env`, `xargs`, `python`, ...), programs
//!   whose language runs commands (`sed`, `awk`) and program-running options
//!   (`find -exec`, `git grep -O`, `zip -TT`) in every spelling (`runners.rs`)
//!   are allowed only by a rule naming the whole command exactly; an allow rule
//!   that therefore means less than it seems (`["sed"]`) is named by
//!   [`ShellGrants::warnings`] for `validate` and `doctor`.
//! - Strings holding `&&`, `;`, `|`, `$(...)` are plain arguments: nothing here
//!   or downstream interprets them.

use std::path::{Path, PathBuf};

use crate::exec::child_env::ChildEnv;
use crate::exec::config::ShellConfig;
use crate::ui::shorten;

mod flags;
mod runners;

pub use runners::runs_anything;

/// What happens to a matched request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Allow,
    Ask,
    Deny,
}

impl Tier {
    pub fn key(self) -> &'static str {
        match self {
            Tier::Allow => "allow",
            Tier::Ask => "ask",
            Tier::Deny => "deny",
        }
    }
}

/// One rule, where it came from, and its program resolved once per run.
#[derive(Debug, Clone)]
pub struct Rule {
    pub tier: Tier,
    pub argv: Vec<String>,
    /// `shell.allow[0]` or `--allow`, for messages and the run log.
    pub origin: String,
    program: Option<PathBuf>,
}

impl Rule {
    /// The rule as the user wrote it, for messages.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.origin, show_argv(&self.argv))
    }
}

/// Rules given on the command line, added to the config's.
#[derive(Debug, Clone, Default)]
pub struct ExtraRules {
    pub allow: Vec<Vec<String>>,
    pub ask: Vec<Vec<String>>,
    pub deny: Vec<Vec<String>>,
}

/// A request that may run (possibly after a person's yes).
#[derive(Debug, Clone)]
pub struct Grant {
    pub tier: Tier,
    pub rule: String,
    /// The real path of the program, which the rule matched.
    pub program: PathBuf,
    /// The path to execute: where the name was found (a link to `program`
    /// outside the workspace, so a multi-call binary sees its name), else `program`.
    pub exec: PathBuf,
    /// `argv[0]` as the policy wrote it.
    pub arg0: String,
}

/// Why a request may not run.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Denied(String),
    /// The program does not exist on the granted PATH.
    NotFound(String),
}

/// A run's shell rules, with programs resolved.
#[derive(Debug, Clone)]
pub struct ShellGrants {
    rules: Vec<Rule>,
    pass_env_from_policy: Vec<String>,
    /// `shell` or `policies.NAME.shell`, named in refusals.
    section: String,
}

impl ShellGrants {
    pub fn new(shell: &ShellConfig, extra: &ExtraRules, env: &ChildEnv) -> ShellGrants {
        let mut rules = Vec::new();
        type Lists<'a> = [(Tier, &'a [Vec<String>], &'a [Vec<String>]); 3];
        let lists: Lists = [
            (Tier::Deny, &shell.deny, &extra.deny),
            (Tier::Ask, &shell.ask, &extra.ask),
            (Tier::Allow, &shell.allow, &extra.allow),
        ];
        for (tier, config, cli) in lists {
            for (i, argv) in config.iter().enumerate() {
                rules.push(Rule {
                    tier,
                    argv: argv.clone(),
                    origin: format!("{}.{}[{i}]", shell.section(), tier.key()),
                    program: resolve(env, &argv[0], env.root()).map(|(_, real)| real),
                });
            }
            for argv in cli {
                rules.push(Rule {
                    tier,
                    argv: argv.clone(),
                    origin: format!("--{}", tier.key()),
                    program: resolve(env, &argv[0], env.root()).map(|(_, real)| real),
                });
            }
        }
        ShellGrants {
            rules,
            pass_env_from_policy: shell.pass_env_from_policy.clone(),
            section: shell.section().to_string(),
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The allow and ask rules that cannot mean what they seem to (`["sed"]`
    /// allows only `sed` alone), each saying why: for `validate` and `doctor`.
    pub fn warnings(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| r.tier != Tier::Deny)
            .filter_map(|r| {
                let program = r.program.as_deref()?;
                let why = runners::narrow_rule(program, &r.argv)?;
                Some(format!(
                    "{} = {} {why}",
                    r.origin,
                    toml_rule(&r.argv, r.argv.len())
                ))
            })
            .collect()
    }

    /// Decide a request run in `cwd` with policy-set variables `env`.
    pub fn check(
        &self,
        argv: &[String],
        cwd: &Path,
        child: &ChildEnv,
        env: &[(String, String)],
    ) -> Result<Grant, Refusal> {
        for (name, _) in env {
            if !self.pass_env_from_policy.iter().any(|n| n == name) {
                return Err(Refusal::Denied(format!(
                    "the policy may not set environment variable `{name}`: add \"{name}\" to `{}.pass_env_from_policy` in loopbox.toml to allow it",
                    self.section
                )));
            }
        }
        let (found, program) = resolve(child, &argv[0], cwd).ok_or_else(|| {
            Refusal::NotFound(format!(
                "program `{}` not found (looked in shell.path = `{}`)",
                argv[0],
                child.path_var()
            ))
        })?;
        let args = &argv[1..];
        let same_program = |r: &&Rule| r.program.as_deref() == Some(program.as_path());
        let name = file_name(&argv[0]);
        // The deny safety net holds whatever name the binary is called by.
        let denied = |r: &&Rule| {
            contains_all(&file_name(&program), args, &r.argv[1..])
                || contains_all(&name, args, &r.argv[1..])
        };
        if let Some(r) = self
            .rules
            .iter()
            .filter(|r| r.tier == Tier::Deny)
            .filter(same_program)
            .find(denied)
        {
            return Err(Refusal::Denied(format!(
                "`{}` is denied by {}",
                show_argv(argv),
                r.describe()
            )));
        }
        // A multi-call program (rustup as cargo, busybox, vim as vi) acts by the name
        // it is called by: a rule allows its binary only under the rule's name,
        // unless the rule names the real path.
        let same_name =
            |r: &&Rule| file_name(&r.argv[0]) == name || Path::new(&r.argv[0]) == program;
        let risky = runs_anything(&program, &argv[0], args);
        for tier in [Tier::Ask, Tier::Allow] {
            let matched = self
                .rules
                .iter()
                .filter(|r| r.tier == tier)
                .filter(same_program)
                .filter(same_name)
                .find(|r| match &risky {
                    // A wrapper is allowed only by a rule naming the whole command.
                    Some(_) => r.argv[1..] == *args,
                    None => args.starts_with(&r.argv[1..]),
                });
            if let Some(r) = matched {
                // Run the binary by the path its name was found at when that is outside
                // the workspace (so a multi-call program sees the name), else by its real path.
                let exec = if found.starts_with(child.root()) {
                    program.clone()
                } else {
                    found.clone()
                };
                return Ok(Grant {
                    tier,
                    rule: r.describe(),
                    program,
                    exec,
                    arg0: argv[0].clone(),
                });
            }
        }
        // Only when no rule names it as called: else the reason is that rule's
        // (a wrapper's command must be named whole), not the name.
        let named = self
            .rules
            .iter()
            .filter(|r| r.tier != Tier::Deny)
            .filter(same_program)
            .any(|r| same_name(&r));
        if !named
            && let Some(r) = self
                .rules
                .iter()
                .filter(|r| r.tier != Tier::Deny)
                .filter(same_program)
                .find(|r| !same_name(r))
        {
            return Err(Refusal::Denied(format!(
                "`{}` is not allowed: `{}` is the same file as `{}` in {} ({}), a program that acts by the name it is called by, and the rule allows it only as `{}`; to allow `{name}` too, add a rule for it (or name the real path `{}` in the rule)",
                show_argv(argv),
                argv[0],
                r.argv[0],
                r.origin,
                program.display(),
                r.argv[0],
                program.display()
            )));
        }
        Err(Refusal::Denied(match risky {
            Some(why) => format!(
                "`{}` is not allowed: {why}, so only a rule naming the whole command exactly allows it; to allow exactly this, add {} to `{}.allow` in loopbox.toml",
                show_argv(argv),
                toml_rule(argv, argv.len()),
                self.section
            ),
            None => format!(
                "`{}` is not allowed: no rule in `{section}.allow` matches; to allow it add {} to `{section}.allow` in loopbox.toml",
                show_argv(argv),
                toml_rule(argv, 2),
                section = self.section
            ),
        }))
    }
}

/// The warnings of each shell section's rules (see [`ShellGrants::warnings`]):
/// what `validate` and `doctor` print.
pub fn rule_warnings<'a>(
    shells: impl IntoIterator<Item = &'a ShellConfig>,
    root: &Path,
) -> Vec<String> {
    shells
        .into_iter()
        .flat_map(|shell| {
            ShellGrants::new(shell, &ExtraRules::default(), &shell.child_env(root)).warnings()
        })
        .collect()
}

/// A program name as found (through the granted PATH for a bare name, relative
/// to `cwd` for one with a slash) and its real path.
fn resolve(env: &ChildEnv, name: &str, cwd: &Path) -> Option<(PathBuf, PathBuf)> {
    let found = env.resolve_program(name, cwd)?;
    let real = found.canonicalize().ok()?;
    Some((found, real))
}

/// The last component of a program name or path.
fn file_name(p: impl AsRef<Path>) -> String {
    p.as_ref()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Whether every token of `rule` appears in `args`, in any order, once both are
/// normalized for `program` (see [`flags`]).
fn contains_all(program: &str, args: &[String], rule: &[String]) -> bool {
    let have = flags::normalize(program, args);
    flags::normalize(program, rule)
        .iter()
        .all(|t| have.contains(t))
}

pub fn check_script(shell: &ShellConfig, source: &str) -> Result<(), String> {
    if shell.scripts {
        Ok(())
    } else {
        Err(format!(
            "shell text is not allowed (`{}`): set `{}.scripts = true` in loopbox.toml to let policies run scripts (`sh -c`; `bash -c` for YAML loops), or have the policy use `exec` with an argv",
            shorten(source, 80),
            shell.section()
        ))
    }
}

/// An argv as a person would type it, for messages: quoted, sanitized, long arguments shortened.
pub fn show_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shorten(&crate::ui::sanitize(&shell_quote(a)), 200))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One argument quoted for a POSIX shell (single quotes unless it is plainly safe).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A TOML rule for the first `take` tokens of `argv`.
fn toml_rule(argv: &[String], take: usize) -> String {
    let parts: Vec<String> = argv[..take.min(argv.len())]
        .iter()
        .map(|a| serde_json::to_string(&shorten(a, 60)).unwrap_or_default())
        .collect();
    format!("[{}]", parts.join(", "))
}

/// A rule from the command line: `--allow 'cargo test'` splits on white space.
pub fn parse_cli_rule(text: &str) -> Result<Vec<String>, String> {
    let argv: Vec<String> = text.split_whitespace().map(String::from).collect();
    if argv.is_empty() {
        return Err("a rule needs at least a program name, e.g. --allow 'cargo test'".into());
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        env: ChildEnv,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let env = ChildEnv::new(&ShellConfig::default().path, &[], &root);
        Fixture {
            _dir: dir,
            root,
            env,
        }
    }

    fn grants(f: &Fixture, allow: &[&str], ask: &[&str], deny: &[&str]) -> ShellGrants {
        let list = |v: &[&str]| v.iter().map(|s| argv(s)).collect::<Vec<_>>();
        let shell = ShellConfig {
            allow: list(allow),
            ask: list(ask),
            deny: list(deny),
            ..ShellConfig::default()
        };
        ShellGrants::new(&shell, &ExtraRules::default(), &f.env)
    }

    fn tier(g: &ShellGrants, f: &Fixture, cmd: &str) -> Result<Tier, String> {
        match g.check(&argv(cmd), &f.root, &f.env, &[]) {
            Ok(grant) => Ok(grant.tier),
            Err(Refusal::Denied(m) | Refusal::NotFound(m)) => Err(m),
        }
    }

    #[test]
    fn prefix_rules_match_whole_tokens_on_the_resolved_program() {
        let f = fixture();
        let g = grants(&f, &["ls -l", "cat"], &[], &[]);
        assert_eq!(tier(&g, &f, "ls -l -a"), Ok(Tier::Allow));
        assert_eq!(
            tier(&g, &f, "/bin/ls -l"),
            Ok(Tier::Allow),
            "the same program by its path"
        );
        assert!(tier(&g, &f, "ls -la").is_err());
        assert!(tier(&g, &f, "ls").is_err());
        let grant = g.check(&argv("cat x"), &f.root, &f.env, &[]).unwrap();
        assert!(grant.program.is_absolute() && grant.rule == "shell.allow[1] (cat)");
    }

    #[test]
    fn a_workspace_program_with_an_allowed_name_is_not_that_program() {
        let f = fixture();
        std::fs::create_dir(f.root.join("bin")).unwrap();
        for p in ["ls", "bin/ls"] {
            std::fs::write(f.root.join(p), "#!/bin/sh\necho pwned\n").unwrap();
            std::fs::set_permissions(
                f.root.join(p),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }
        let g = grants(&f, &["ls"], &[], &[]);
        assert!(tier(&g, &f, "./ls").unwrap_err().contains("not allowed"));
        assert!(tier(&g, &f, "bin/ls").unwrap_err().contains("not allowed"));
        assert_eq!(
            tier(&g, &f, "ls"),
            Ok(Tier::Allow),
            "the bare name resolves through the granted PATH, not the workspace"
        );
    }

    #[test]
    fn deny_wins_and_matches_flags_in_any_order() {
        let f = fixture();
        let g = grants(&f, &["rm"], &[], &["rm -rf"]);
        for cmd in [
            "rm -rf /",
            "rm -fr /",
            "rm -r -f x",
            "rm -f -r x",
            "rm x -rf",
        ] {
            assert!(
                tier(&g, &f, cmd)
                    .unwrap_err()
                    .contains("denied by shell.deny[0] (rm -rf)"),
                "{cmd}"
            );
        }
        assert_eq!(tier(&g, &f, "rm -f x"), Ok(Tier::Allow));
    }

    #[test]
    fn ask_comes_before_allow() {
        let f = fixture();
        let g = grants(&f, &["git"], &["git push"], &[]);
        assert_eq!(tier(&g, &f, "git push origin main"), Ok(Tier::Ask));
        assert_eq!(tier(&g, &f, "git status"), Ok(Tier::Allow));
    }

    #[test]
    fn wrappers_need_a_rule_naming_the_whole_command() {
        let f = fixture();
        let g = grants(
            &f,
            &["sh", "env", "python3 check.py", "find", "git", "xargs"],
            &[],
            &[],
        );
        for cmd in [
            "sh -c id",
            "env rm -rf /",
            "python3 -c print(1)",
            "find . -exec rm {} ;",
            "git -c core.pager=sh status",
            "xargs rm",
            "git submodule foreach rm",
        ] {
            let e = tier(&g, &f, cmd).unwrap_err();
            assert!(
                e.contains("only a rule naming the whole command exactly allows it"),
                "{cmd}: {e}"
            );
        }
        assert_eq!(
            tier(&g, &f, "python3 check.py"),
            Ok(Tier::Allow),
            "named exactly"
        );
        assert_eq!(tier(&g, &f, "find . -name x"), Ok(Tier::Allow));
        assert_eq!(tier(&g, &f, "git status"), Ok(Tier::Allow));
    }

    #[test]
    fn chaining_characters_are_plain_arguments() {
        let f = fixture();
        let g = grants(&f, &["echo"], &[], &[]);
        assert_eq!(
            g.check(
                &["echo".into(), "a && rm -rf / ; $(id) `id` | sh\nid".into()],
                &f.root,
                &f.env,
                &[]
            )
            .unwrap()
            .tier,
            Tier::Allow
        );
        assert!(tier(&g, &f, "echo;rm").unwrap_err().contains("not found"));
    }

    #[test]
    fn nothing_is_allowed_by_default_and_the_message_says_how() {
        let f = fixture();
        let g = grants(&f, &[], &[], &[]);
        assert_eq!(
            tier(&g, &f, "ls -la").unwrap_err(),
            "`ls -la` is not allowed: no rule in `shell.allow` matches; to allow it add [\"ls\", \"-la\"] to `shell.allow` in loopbox.toml"
        );
        assert!(
            check_script(&ShellConfig::default(), "ls")
                .unwrap_err()
                .contains("shell.scripts = true")
        );
    }

    #[test]
    fn policy_env_needs_a_grant() {
        let f = fixture();
        let g = grants(&f, &["ls"], &[], &[]);
        let env = [("LD_PRELOAD".to_string(), "/x.so".to_string())];
        match g.check(&argv("ls"), &f.root, &f.env, &env) {
            Err(Refusal::Denied(m)) => assert!(m.contains("shell.pass_env_from_policy")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cli_rules_are_named_by_their_flag() {
        let f = fixture();
        let extra = ExtraRules {
            allow: vec![parse_cli_rule("ls  -l").unwrap()],
            ..ExtraRules::default()
        };
        let g = ShellGrants::new(&ShellConfig::default(), &extra, &f.env);
        assert_eq!(
            g.check(&argv("ls -l"), &f.root, &f.env, &[]).unwrap().rule,
            "--allow (ls -l)"
        );
        assert!(parse_cli_rule("  ").is_err());
    }

    #[test]
    fn shown_argv_is_quoted_and_sanitized() {
        assert_eq!(
            show_argv(&["echo".into(), "a b".into(), "\x1b[2J".into()]),
            "echo 'a b' '\\x1b[2J'"
        );
    }

    /// docs/security.md's table of program-running options, row by row: each
    /// example is refused to a prefix rule (`exact`) or allowed by one.
    #[test]
    fn the_program_running_options_table_holds() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md"))
                .unwrap();
        let table = doc
            .split("<!-- program-running options: read by exec::grants::tests -->")
            .nth(1)
            .expect("the table's marker in docs/security.md");
        let mut checked = 0;
        for row in table.lines().skip(3).take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let (examples, outcome) = (cells[3], cells[4]);
            let exact = outcome.starts_with("exact");
            assert!(exact || outcome.starts_with("allowed"), "{row}");
            for example in examples.split('`').skip(1).step_by(2) {
                let words = crate::hook::settings::shell_words(example).unwrap();
                let program = Path::new("/usr/bin").join(&words[0]);
                let why = runs_anything(&program, &words[0], &words[1..]);
                assert_eq!(why.is_some(), exact, "`{example}`: {why:?}");
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} examples read");
    }

    /// Issue 49, item 1: `make` with an odd assignment or a makefile from elsewhere.
    /// `make` and `gmake` are one file here (as on Debian), each with a rule: the
    /// refusal names the exact rule needed, not the other name's rule.
    #[test]
    fn make_assignments_and_makefiles_from_elsewhere_need_the_exact_command() {
        let f = fixture();
        let bin = tempfile::tempdir().unwrap();
        let tool = bin.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for name in ["make", "gmake"] {
            std::os::unix::fs::symlink(&tool, bin.path().join(name)).unwrap();
        }
        let env = ChildEnv::new(&bin.path().to_string_lossy(), &[], &f.root);
        let shell = ShellConfig {
            allow: vec![
                vec!["make".into()],
                vec!["gmake".into()],
                vec!["make".into(), "CC=cc".into()],
            ],
            ..ShellConfig::default()
        };
        let g = ShellGrants::new(&shell, &ExtraRules::default(), &env);
        let check = |argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            match g.check(&argv, &f.root, &env, &[]) {
                Ok(grant) => Ok(grant.rule),
                Err(Refusal::Denied(m) | Refusal::NotFound(m)) => Err(m),
            }
        };
        for argv in [
            &["make", "x$(shell id>/tmp/p)=1"][..],
            &["make", "SHELL=/bin/sh -c id"],
            &["make", ".SHELLFLAGS=-c id"],
            &["make", "x != id"],
            &["make", " x=1"],
            &["make", "--", "-x$(shell id)=1"],
            &["make", "--eval=$(shell id)"],
            &["make", "-E", "$(shell id)"],
            &["make", "-f", "/dev/stdin"],
            &["make", "-sf-"],
            &["make", "--makefile=x"],
            &["make", "-C", "/elsewhere"],
            &["make", "-I", "d"],
            &["gmake", "x$(shell id)=1"],
            &["make", "CC=cc", "all"],
            &["make", "\x1b[2Jx=1"],
        ] {
            let e = check(argv).unwrap_err();
            assert!(
                e.contains("runs other programs, so only a rule naming the whole command exactly allows it; to allow exactly this, add"),
                "{argv:?}: {e}"
            );
            assert!(!e.contains('\x1b'), "shown escaped: {e:?}");
        }
        assert_eq!(
            check(&["make", "-j4", "test"]),
            Ok("shell.allow[0] (make)".to_string())
        );
        assert_eq!(
            check(&["gmake", "-k", "check"]),
            Ok("shell.allow[1] (gmake)".to_string())
        );
        assert_eq!(
            check(&["make", "CC=cc"]),
            Ok("shell.allow[2] (make CC=cc)".to_string())
        );
    }

    #[test]
    fn a_rule_for_a_program_whose_language_runs_commands_is_named_at_validate_time() {
        let f = fixture();
        let g = grants(
            &f,
            &["sed", "sed --sandbox", "git", "python3 check.py", "awk -F"],
            &["sh -c"],
            &["sed -i"],
        );
        let w = g.warnings();
        assert_eq!(w.len(), 3, "{w:#?}");
        assert_eq!(
            w[0],
            "shell.ask[0] = [\"sh\", \"-c\"] allows only `sh -c` exactly, never a longer command: `sh` is a wrapper or interpreter that can run anything (`sh`), so a rule for the program alone cannot be safe. Add a rule naming each whole command it should run"
        );
        assert!(
            w[1].starts_with("shell.allow[0] = [\"sed\"] allows only `sed` exactly")
                && w[1].contains("its `e` command and the `e` flag of `s///e` run commands")
                && w[1].ends_with("or allow [\"sed\", \"--sandbox\"], a prefix GNU sed runs with its `e`, `r` and `w` commands refused"),
            "{}",
            w[1]
        );
        assert!(
            w[2].starts_with("shell.allow[4] = [\"awk\", \"-F\"]"),
            "{}",
            w[2]
        );
        // The prefix `--sandbox` is what makes a sed rule one.
        assert_eq!(tier(&g, &f, "sed --sandbox -n 1p x"), Ok(Tier::Allow));
        let e = tier(&g, &f, "sed -n 1p x").unwrap_err();
        assert_eq!(
            e,
            "`sed -n 1p x` is not allowed: `sed` runs commands from its own language: its `e` command and the `e` flag of `s///e` run commands, so only a rule naming the whole command exactly allows it; to allow exactly this, add [\"sed\", \"-n\", \"1p\", \"x\"] to `shell.allow` in loopbox.toml"
        );
        let e = tier(&g, &f, "git grep -Oid x").unwrap_err();
        assert!(
            e.starts_with("`git grep -Oid x` is not allowed: `git grep -O` runs other programs, so only a rule naming the whole command exactly allows it"),
            "{e}"
        );
    }
}
