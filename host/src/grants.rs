//! Grant checks for shell requests, as pure functions over the config: an
//! `exec` is allowed only when an argv-prefix rule in `shell.allow` matches
//! token for token; `script` only with `shell.scripts`; policy-set environment
//! variables only when named in `shell.pass_env_from_policy`. A denial says
//! what was asked and which key would allow it.

use crate::config::ShellConfig;

/// The index of the rule that allows `argv`, or why nothing does.
pub fn check_exec(shell: &ShellConfig, argv: &[String], env: &[(String, String)]) -> Result<usize, String> {
    let rule = shell.allow.iter().position(|rule| rule.len() <= argv.len() && rule.iter().zip(argv).all(|(r, a)| r == a)).ok_or_else(|| {
        format!("`{}` is not allowed: no rule in `shell.allow` matches; to allow it add {} to `shell.allow` in loopbox.toml", show_argv(argv), toml_rule(argv))
    })?;
    for (name, _) in env {
        if !shell.pass_env_from_policy.iter().any(|n| n == name) {
            return Err(format!(
                "the policy may not set environment variable `{name}`: add \"{name}\" to `shell.pass_env_from_policy` in loopbox.toml to allow it"
            ));
        }
    }
    Ok(rule)
}

pub fn check_script(shell: &ShellConfig, source: &str) -> Result<(), String> {
    if shell.scripts {
        Ok(())
    } else {
        Err(format!(
            "shell text is not allowed (`{}`): set `shell.scripts = true` in loopbox.toml to let policies run scripts with `sh -c`, or have the policy use `exec` with an argv",
            shorten(source, 80)
        ))
    }
}

/// An argv as a person would type it.
pub fn show_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .map(|a| shorten(&crate::ui::sanitize(&a), 200))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The rule a user would add to allow exactly this program and its first argument.
fn toml_rule(argv: &[String]) -> String {
    let take = argv.len().min(2);
    let parts: Vec<String> = argv[..take].iter().map(|a| serde_json::to_string(&shorten(a, 60)).unwrap_or_default()).collect();
    format!("[{}]", parts.join(", "))
}

pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}… ({} bytes)", s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(rules: &[&[&str]]) -> ShellConfig {
        ShellConfig { allow: rules.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect(), ..ShellConfig::default() }
    }

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn prefix_rules_match_whole_tokens() {
        let s = shell(&[&["cargo", "test"], &["git", "status"]]);
        assert_eq!(check_exec(&s, &argv("cargo test --all"), &[]), Ok(0));
        assert_eq!(check_exec(&s, &argv("git status"), &[]), Ok(1));
        assert!(check_exec(&s, &argv("cargo testx"), &[]).is_err());
        assert!(check_exec(&s, &argv("cargo"), &[]).is_err());
        assert!(check_exec(&s, &argv("./cargo test"), &[]).is_err());
        assert!(check_exec(&s, &argv("/usr/bin/cargo test"), &[]).is_err());
    }

    #[test]
    fn shell_metacharacters_are_plain_tokens() {
        let s = shell(&[&["echo"]]);
        // Allowed, but only as echo's arguments: nothing interprets them.
        assert_eq!(check_exec(&s, &["echo".into(), "a; rm -rf /".into()], &[]), Ok(0));
        assert!(check_exec(&s, &["echo;rm".into()], &[]).is_err());
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let msg = check_exec(&ShellConfig::default(), &argv("ls -la"), &[]).unwrap_err();
        assert_eq!(msg, "`ls -la` is not allowed: no rule in `shell.allow` matches; to allow it add [\"ls\", \"-la\"] to `shell.allow` in loopbox.toml");
        assert!(check_script(&ShellConfig::default(), "ls").unwrap_err().contains("shell.scripts = true"));
    }

    #[test]
    fn policy_env_needs_a_grant() {
        let mut s = shell(&[&["env"]]);
        let env = [("LD_PRELOAD".to_string(), "/x.so".to_string())];
        assert!(check_exec(&s, &argv("env"), &env).unwrap_err().contains("shell.pass_env_from_policy"));
        s.pass_env_from_policy.push("LD_PRELOAD".into());
        assert!(check_exec(&s, &argv("env"), &env).is_ok());
    }

    #[test]
    fn shown_argv_is_quoted_and_sanitized() {
        assert_eq!(show_argv(&["echo".into(), "a b".into(), "\x1b[2J".into()]), "echo 'a b' '\u{FFFD}[2J'");
    }
}
