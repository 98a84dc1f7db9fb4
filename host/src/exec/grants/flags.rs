//! Flag normalization for deny rules, so a rule denies what the program would
//! do, however the flags are spelled: short clusters split (`-rf` is `-r -f`),
//! synonyms folded (`rm -R` and `rm --recursive` are `rm -r`), long options
//! matched by the unambiguous prefixes getopt and git accept (`--rec`), and
//! git's force and delete refspecs (`+main`, `:main`) read as the flags they are.
//!
//! Deny is a safety net over the allow list, not the boundary: a program the
//! table does not know keeps its flags as written.

/// One flag and the spellings that mean it, for one program.
struct Flag {
    canonical: &'static str,
    spellings: &'static [&'static str],
}

const fn flag(canonical: &'static str, spellings: &'static [&'static str]) -> Flag {
    Flag {
        canonical,
        spellings,
    }
}

const RM: &[Flag] = &[
    flag("-r", &["-r", "-R", "--recursive"]),
    flag("-f", &["-f", "--force"]),
    flag("-d", &["-d", "--dir"]),
    flag("--no-preserve-root", &["--no-preserve-root"]),
    flag("-i", &["-i", "--interactive"]),
    flag("-v", &["-v", "--verbose"]),
    flag("--one-file-system", &["--one-file-system"]),
    flag("--preserve-root", &["--preserve-root"]),
];
const CP_MV: &[Flag] = &[
    flag("-r", &["-r", "-R", "--recursive"]),
    flag("-f", &["-f", "--force"]),
    flag("-v", &["-v", "--verbose"]),
    flag("-i", &["-i", "--interactive"]),
];
const CHMOD: &[Flag] = &[
    flag("-R", &["-R", "--recursive"]),
    flag("-v", &["-v", "--verbose"]),
    flag("-c", &["-c", "--changes"]),
];
const GIT: &[Flag] = &[
    flag(
        "-f",
        &["-f", "--force", "--force-with-lease", "--force-if-includes"],
    ),
    flag("-d", &["-d", "--delete"]),
    flag("--hard", &["--hard"]),
    flag("--mirror", &["--mirror"]),
    flag("--all", &["--all"]),
    flag("--tags", &["--tags"]),
    flag("-x", &["-x"]),
    flag("-q", &["-q", "--quiet"]),
    flag("-v", &["-v", "--verbose"]),
    flag("-n", &["-n", "--dry-run"]),
];
const RSYNC: &[Flag] = &[
    flag(
        "--delete",
        &[
            "--delete",
            "--del",
            "--delete-before",
            "--delete-during",
            "--delete-delay",
            "--delete-after",
            "--delete-excluded",
        ],
    ),
    flag("-r", &["-r", "--recursive"]),
];

fn table(program: &str) -> Option<&'static [Flag]> {
    Some(match program {
        "rm" => RM,
        "cp" | "mv" => CP_MV,
        "chmod" | "chown" | "chgrp" => CHMOD,
        "git" => GIT,
        "rsync" => RSYNC,
        _ => return None,
    })
}

/// `args` of `program` (its file name) as canonical tokens: what a deny rule's
/// tokens are compared with, in any order.
pub fn normalize(program: &str, args: &[String]) -> Vec<String> {
    let table = table(program);
    let mut out = Vec::new();
    for arg in args {
        for token in split_cluster(arg) {
            out.extend(canonical(program, table, &token));
        }
    }
    out
}

/// `-rf` as `-r`, `-f`; anything else as it is.
fn split_cluster(t: &str) -> Vec<String> {
    let short_cluster = t.len() > 2
        && t.starts_with('-')
        && !t.starts_with("--")
        && t[1..].chars().all(|c| c.is_ascii_alphanumeric());
    if short_cluster {
        t[1..].chars().map(|c| format!("-{c}")).collect()
    } else {
        vec![t.to_string()]
    }
}

fn canonical(program: &str, table: Option<&[Flag]>, token: &str) -> Vec<String> {
    if program == "git" {
        // `git branch -D` deletes by force; `push origin +main` forces; `push origin :main` deletes.
        if token == "-D" {
            return vec!["-d".into(), "-f".into()];
        }
        if token.len() > 1 && token.starts_with('+') {
            return vec!["-f".into(), token[1..].to_string()];
        }
        if token.len() > 1 && token.starts_with(':') {
            return vec!["-d".into(), token[1..].to_string()];
        }
    }
    let Some(table) = table else {
        return vec![token.to_string()];
    };
    if let Some(f) = table.iter().find(|f| f.spellings.contains(&token)) {
        return vec![f.canonical.to_string()];
    }
    // `--rec` for `--recursive`: a prefix of exactly one long spelling's flag.
    let name = token.split_once('=').map_or(token, |(n, _)| n);
    if name.len() > 3 && name.starts_with("--") {
        let mut hits = table.iter().filter(|f| {
            f.spellings
                .iter()
                .any(|s| s.starts_with("--") && s.starts_with(name))
        });
        if let (Some(f), None) = (hits.next(), hits.next()) {
            return vec![f.canonical.to_string()];
        }
    }
    vec![token.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(program: &str, args: &str) -> Vec<String> {
        normalize(
            program,
            &args.split(' ').map(String::from).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn synonyms_fold_to_one_spelling() {
        for spelled in [
            "-rf",
            "-Rf",
            "-fR",
            "-r -f",
            "--recursive --force",
            "-r --force",
            "--rec --forc",
            "-R --force",
        ] {
            let mut got = n("rm", spelled);
            got.sort();
            assert_eq!(got, ["-f", "-r"], "{spelled}");
        }
        assert_eq!(
            n("git", "push -f origin main"),
            n("git", "push --force origin main")
        );
        assert!(n("git", "push origin +main").contains(&"-f".to_string()));
        assert!(n("git", "push --force-with-lease").contains(&"-f".to_string()));
        assert_eq!(n("chmod", "--recursive 777 ."), ["-R", "777", "."]);
        assert_eq!(
            n("ls", "-Rf"),
            ["-R", "-f"],
            "an unknown program keeps its case"
        );
    }
}
