//! What lets an allowed program run other programs, so that `mod.rs` allows
//! such a command only by a rule naming it whole: wrappers and interpreters
//! (`sh`, `env`, `python`), programs whose own language runs commands (`sed`'s
//! `e`, `awk`'s `system()`, `dc`'s `!`), editors and pagers, and the
//! program-running options of the rest (`find -exec`, `git grep -O`, `zip -TT`,
//! `tar --to-command`, `rsync -e`, `ssh -o ProxyCommand`, `curl -K`, `make
//! -f`/`VAR=`, `cargo rustc -- -Clinker=`, `cc -wrapper`).
//!
//! An option is found in every spelling its program's parser accepts: alone,
//! `--opt=value`, any prefix of a long name (GNU getopt and git take the
//! unambiguous ones: `--open-files`, `--unzip-c`), a short option with its value
//! attached (`-O<cmd>`) or in a cluster (`-nO<cmd>`). Finding leans to finding
//! too much: a prefix counts even where the program would call it ambiguous,
//! and words after `--` are read as options too.
//!
//! What a program reads from the workspace (`.git/config` and `.git/hooks`, a
//! `Makefile`, `build.rs`, `package.json` scripts, a script file a rule names)
//! is not an option: it runs inside the sandbox, and docs/security.md says so.
//! The table there lists every entry here; keep the two together.

use std::path::Path;

/// One program's (or subcommand's) program-running options.
struct Options {
    /// Long options, found as `--name`, `--name=value` and by any prefix.
    long: &'static [&'static str],
    /// Short options, found alone, with a value attached, and in a cluster.
    short: &'static str,
    /// Short options that take a value: the rest of a cluster after one is its value.
    value: &'static str,
    /// Options spelled as one-dash words (`find -exec`, `go -toolexec`), found
    /// alone, with `=value`, and with two dashes.
    words: &'static [&'static str],
}

const fn long(long: &'static [&'static str]) -> Options {
    Options {
        long,
        short: "",
        value: "",
        words: &[],
    }
}

impl Options {
    /// The first option found in `args`, as its canonical spelling.
    fn find(&self, args: &[String]) -> Option<String> {
        args.iter().find_map(|a| self.spelled(a))
    }

    fn spelled(&self, arg: &str) -> Option<String> {
        let name = arg.split_once('=').map_or(arg, |(n, _)| n);
        // `-toolexec`, `-toolexec=CMD`, and `--toolexec` (Go's flag package takes both).
        if let Some(w) = self
            .words
            .iter()
            .find(|w| name == **w || (name.starts_with("--") && name[1..] == ***w))
        {
            return Some(w.to_string());
        }
        if name.len() > 2 && name.starts_with("--") {
            // `--open-f` is `--open-files-in-pager`.
            return self
                .long
                .iter()
                .find(|l| l.starts_with(name))
                .map(|l| l.to_string());
        }
        if arg.len() > 1 && arg.starts_with('-') && !arg.starts_with("--") {
            for c in arg[1..].chars() {
                if self.short.contains(c) {
                    return Some(format!("-{c}"));
                }
                if self.value.contains(c) {
                    break;
                }
            }
        }
        None
    }
}

/// Wrappers: programs that run the command given to them (or anything, given code).
const WRAPPERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "xargs",
    "timeout",
    "nice",
    "nohup",
    "stdbuf",
    "setsid",
    "sudo",
    "doas",
    "su",
    "runuser",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "ltrace",
    "gdb",
    "time",
    "watch",
    "flock",
    "ionice",
    "taskset",
    "chrt",
    "script",
    "expect",
    "parallel",
    "python",
    "pypy",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "irb",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "pwsh",
    "rlwrap",
    "npx",
    "uvx",
    "pipx",
    "ssh-agent",
    "tmux",
    "screen",
    "systemd-run",
    "setpriv",
    "prlimit",
    "capsh",
    "valgrind",
    "fakeroot",
    "faketime",
    "proot",
    "bwrap",
    "firejail",
    "dbus-run-session",
    "xvfb-run",
    "pkexec",
    "entr",
    "watchexec",
];

/// Programs whose own language runs commands: no rule for the program alone can be safe.
const LANGUAGES: &[(&str, &str)] = &[
    (
        "sed",
        "its `e` command and the `e` flag of `s///e` run commands",
    ),
    (
        "awk",
        "`system()`, `print | CMD` and `CMD | getline` run commands",
    ),
    (
        "gawk",
        "`system()`, `print | CMD` and `CMD | getline` run commands",
    ),
    (
        "mawk",
        "`system()`, `print | CMD` and `CMD | getline` run commands",
    ),
    (
        "nawk",
        "`system()`, `print | CMD` and `CMD | getline` run commands",
    ),
    ("dc", "its `!` command runs a command"),
    ("m4", "`syscmd` and `esyscmd` run commands"),
    ("sqlite3", "`.shell` and `.system` run commands"),
    ("mlr", "its DSL's `system` and `exec` run commands"),
];

/// Editors and pagers: each has a command that runs a program (`!`, `:!`, `+!cmd`).
const EDITORS: &[&str] = &[
    "less",
    "more",
    "most",
    "pg",
    "pager",
    "man",
    "info",
    "vi",
    "vim",
    "nvim",
    "view",
    "ex",
    "emacs",
    "nano",
    "pico",
    "ed",
    "joe",
    "mg",
    "micro",
    "kak",
    "hx",
    "editor",
    "sensible-editor",
    "sensible-pager",
    "w3m",
    "lynx",
];

/// Programs whose options can run other programs: the table below.
const OPTIONS: &[&str] = &[
    "find", "git", "cargo", "make", "gmake", "npm", "pnpm", "yarn", "ssh", "scp", "sftp", "tar",
    "rsync", "zip", "curl", "wget", "pip", "rg", "fd", "fdfind", "sort", "split", "sdiff", "diff3",
    "go", "rustup", "uv", "poetry", "pipenv", "bundle", "conda", "docker", "podman", "rustc",
    "rustdoc", "cc", "gcc", "g++", "c++", "clang", "clang++",
];

/// Why this command can run arbitrary programs, if it can. Both the name it is
/// called by and the real binary's name count (`vi` is `vim.basic`).
pub fn runs_anything(program: &Path, written: &str, args: &[String]) -> Option<String> {
    let real = super::file_name(program);
    let called = super::file_name(written);
    // python3.11 -> python, perl5.36 -> perl, vim.basic -> vim
    let bases: Vec<&str> = [called.as_str(), real.as_str()]
        .into_iter()
        .flat_map(|n| {
            [
                n.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'),
                n.split('.').next().unwrap_or(n),
            ]
        })
        .collect();
    if let Some(base) = bases.iter().find(|b| WRAPPERS.contains(b)) {
        return Some(format!(
            "`{called}` is a wrapper or interpreter that can run anything (`{base}`)"
        ));
    }
    if let Some((base, why)) = bases
        .iter()
        .find_map(|b| LANGUAGES.iter().find(|(l, _)| l == b))
    {
        // GNU sed refuses `e`, `r` and `w` when `--sandbox` comes first.
        if *base == "sed" && args.first().is_some_and(|a| a == "--sandbox") {
            return None;
        }
        return Some(format!(
            "`{called}` runs commands from its own language: {why}"
        ));
    }
    if bases.iter().any(|b| EDITORS.contains(b)) {
        return Some(format!(
            "`{called}` is an editor or pager, which can run commands"
        ));
    }
    let base = *bases.iter().find(|b| OPTIONS.contains(b))?;
    // What is named comes from the policy's words (`make NAME=`): shown escaped.
    options(base, args).map(|opt| {
        let opt = crate::ui::shorten(&crate::ui::sanitize(&opt), 80);
        format!("`{called} {opt}` runs other programs")
    })
}

/// A program-running option (or subcommand) of `base` in `args`, as named in messages.
fn options(base: &str, args: &[String]) -> Option<String> {
    let any = |word: &[&str]| args.iter().find(|a| word.contains(&a.as_str())).cloned();
    match base {
        "find" => Options {
            words: &[
                "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
                "-fls",
            ],
            ..long(&[])
        }
        .find(args),
        "git" => git(args),
        "cargo" => Options {
            short: "Z",
            value: "pjFC",
            ..long(&["--config"])
        }
        .find(args)
        .or_else(|| toolchain_path(args))
        .or_else(|| {
            // `cargo rustc -- -Clinker=CMD`: what follows `--` is the compiler's
            // (or rustdoc's) own options, some of which run programs.
            let dashes = args.iter().position(|a| a == "--")?;
            let sub = args[..dashes]
                .iter()
                .find(|a| *a == "rustc" || *a == "rustdoc")?;
            (dashes + 1 < args.len()).then(|| format!("{sub} -- OPTIONS"))
        }),
        "rustc" | "rustdoc" => toolchain_path(args).or_else(|| rustc(args)),
        "cc" | "gcc" | "g++" | "c++" | "clang" | "clang++" => compiler(args),
        "make" | "gmake" => make(args),
        "npm" | "pnpm" | "yarn" => any(&[
            "exec", "x", "dlx", "explore", "edit", "create", "config", "c", "set", "node",
        ])
        .or_else(|| {
            // npm takes an abbreviation of a command (`exe` for exec, `explo`
            // for explore): the command word, if it begins one, counts as it.
            let sub = args.iter().find(|a| !a.starts_with('-'))?;
            ["exec", "explore", "edit", "create", "config", "dlx"]
                .into_iter()
                .find(|c| sub.len() >= 2 && c.starts_with(sub.as_str()))
                .map(|c| format!("{sub} ({c})"))
        })
        .or_else(|| {
            // `npm init NAME` runs the package `create-NAME`.
            let init = args.iter().position(|a| a == "init")?;
            args[init + 1..]
                .iter()
                .any(|a| !a.starts_with('-'))
                .then(|| "init PACKAGE".to_string())
        })
        .or_else(|| {
            // npm's option parser (nopt) takes a long option with one dash too
            // (`-script-shell=X`, `-script-s X`), and older npm read `_` as `-`.
            let spelled: Vec<String> = args
                .iter()
                .map(|a| {
                    let (name, value) = a
                        .split_once('=')
                        .map_or((a.as_str(), None), |(n, v)| (n, Some(v)));
                    let name = if name.len() > 2 && name.starts_with('-') && !name.starts_with("--")
                    {
                        format!("-{name}")
                    } else {
                        name.to_string()
                    };
                    let name = if name.starts_with("--") {
                        name.replace('_', "-")
                    } else {
                        name
                    };
                    value.map_or(name.clone(), |v| format!("{name}={v}"))
                })
                .collect();
            long(&[
                "--script-shell",
                "--shell",
                "--userconfig",
                "--globalconfig",
                "--node-options",
                "--editor",
                "--browser",
                "--viewer",
                "--call",
                "--git",
                "--init-module",
                "--onload-script",
                "--use-yarnrc",
            ])
            .find(&spelled)
        }),
        // `-I LIB` loads a PKCS#11 library into ssh's helper: code, as `-o` runs it.
        "ssh" => Options {
            short: "oFI",
            value: "BbcDEeiJLlmOpQRSWw",
            ..long(&[])
        }
        .find(args),
        "scp" => Options {
            short: "oFSD",
            value: "ciJlPX",
            ..long(&[])
        }
        .find(args),
        "sftp" => Options {
            short: "oFSDb",
            value: "BciJlPRsX",
            ..long(&[])
        }
        .find(args),
        "tar" => Options {
            short: "IF",
            value: "fCTXbHKLNVg",
            ..long(&[
                "--to-command",
                "--use-compress-program",
                "--checkpoint-action",
                "--info-script",
                "--new-volume-script",
                "--rsh-command",
                "--rmt-command",
            ])
        }
        .find(args)
        .or_else(|| {
            // The old style, `tar xIf PROG a.tar`: letters with no dash, each taking
            // its value from the words that follow.
            let first = args.first()?;
            (!first.starts_with('-')
                && first.chars().all(|c| c.is_ascii_alphabetic())
                && first.contains(['I', 'F']))
            .then(|| first.clone())
        }),
        "rsync" => Options {
            short: "eM",
            value: "fBT",
            ..long(&[
                "--rsh",
                "--rsync-path",
                "--remote-option",
                "--config",
                "--daemon",
                "--dparam",
            ])
        }
        .find(args),
        // zip's `-TT` is one option of two letters, and may sit in a cluster.
        "zip" => long(&["--unzip-command"]).find(args).or_else(|| {
            args.iter()
                .any(|a| !a.starts_with("--") && a.starts_with('-') && a.contains("TT"))
                .then(|| "-TT".to_string())
        }),
        // `--engine PATH`: OpenSSL loads a path as a shared object.
        "curl" => Options {
            short: "K",
            value: "AbcCdDeEFHmoPQrTtuUwxXyYz",
            ..long(&["--config", "--engine"])
        }
        .find(args),
        "wget" => Options {
            short: "e",
            value: "oaiBOtTwQUPlARDIX",
            ..long(&["--execute", "--use-askpass", "--config"])
        }
        .find(args),
        "pip" => any(&["config"]).or_else(|| long(&["--python", "--editor"]).find(args)),
        "rg" => long(&["--pre"]).find(args),
        "fd" | "fdfind" => Options {
            short: "xX",
            value: "deEtScjo",
            ..long(&["--exec", "--exec-batch"])
        }
        .find(args),
        "sort" => long(&["--compress-program"]).find(args),
        "split" => long(&["--filter"]).find(args),
        "sdiff" | "diff3" => long(&["--diff-program"]).find(args),
        "go" => Options {
            words: &["-toolexec", "-exec", "-vettool"],
            ..long(&[])
        }
        .find(args)
        .or_else(|| {
            args.iter()
                .find(|a| a.contains("-extld") || a.contains("-extar"))
                .cloned()
        })
        .or_else(|| {
            // `go env -w GOFLAGS=-toolexec=...` keeps the option for every later command.
            (args.first().is_some_and(|a| a == "env") && args.iter().any(|a| a == "-w"))
                .then(|| "env -w".to_string())
        }),
        // `rustup toolchain link NAME DIR` makes `cargo +NAME` run DIR's bin/cargo.
        "rustup" => any(&["run", "tool", "link"]),
        "uv" | "poetry" | "pipenv" | "conda" => any(&["run", "tool"]),
        "bundle" => any(&["exec"]),
        "docker" | "podman" => any(&["run", "exec", "create", "compose", "build"]),
        _ => None,
    }
}

/// GNU make: what reads a makefile from somewhere else (`-f /dev/stdin`, `-C DIR`,
/// `-I DIR`, `--eval`/`-E` text) and every variable assignment on the command line.
fn make(args: &[String]) -> Option<String> {
    Options {
        short: "EfCI",
        value: "jlOoW",
        ..long(&[
            "--eval",
            "--file",
            "--makefile",
            "--directory",
            "--include-dir",
        ])
    }
    .find(args)
    .or_else(|| {
        // Any word with `=` is an assignment (`CC=./x`, `SHELL='sh -c id'`,
        // `.SHELLFLAGS=...`, `x != id`): it overrides the Makefile's, recipes run
        // what it holds, and make expands the name itself (`x$(shell id)=1`),
        // whatever characters it has. After `--` a word with a dash is one too.
        let after = args.iter().position(|a| a == "--").unwrap_or(args.len());
        args.iter()
            .enumerate()
            .find(|(i, a)| a.contains('=') && (*i > after || !a.starts_with('-')))
            .map(|(_, a)| format!("{}=...", a.split_once('=').map_or("", |(n, _)| n).trim()))
    })
}

/// A rustup proxy's `+TOOLCHAIN` given as a path (`cargo +./tc build`), which runs
/// that directory's `bin/cargo`.
fn toolchain_path(args: &[String]) -> Option<String> {
    args.first()
        .filter(|a| a.starts_with('+') && a.contains(['/', '\\']))
        .map(|_| "+PATH".to_string())
}

/// rustc's and rustdoc's options that run programs: the linker and what is passed
/// to it (`-C linker=`, `-C link-arg=`), `-Z`, rustdoc's test runners, `@file`.
fn rustc(args: &[String]) -> Option<String> {
    let mut words = args.iter().peekable();
    while let Some(a) = words.next() {
        let codegen = match a.as_str() {
            "-C" | "--codegen" => words.peek().map(|v| v.as_str()),
            _ => a
                .strip_prefix("--codegen=")
                .or_else(|| a.strip_prefix("-C")),
        };
        if codegen.is_some_and(|v| v.trim_start().starts_with("link")) {
            return Some("-C link...".to_string());
        }
        if a.starts_with('@') {
            return Some("@FILE".to_string());
        }
    }
    Options {
        short: "Z",
        value: "CLlWAFDo",
        ..long(&["--runtool", "--test-runtool", "--test-builder"])
    }
    .find(args)
}

/// C compilers: options that run another program in the compiler's stead
/// (`-wrapper`, `-B DIR`, `--ld-path`, `-fuse-ld=PATH`), load code (`-fplugin`,
/// `-Wl,-plugin`, `-Xclang -load`), or read more options from a file (`-specs`, `@file`).
fn compiler(args: &[String]) -> Option<String> {
    const RUNS: &[&str] = &[
        "-wrapper",
        "-B",
        "--prefix",
        "-specs",
        "--specs",
        "--ld-path",
        "-Xclang",
        "--gcc-toolchain",
        "--gcc-install-dir",
        "-ccc-",
    ];
    args.iter().find_map(|a| {
        if a.starts_with('@') {
            return Some("@FILE".to_string());
        }
        // `-fplugin=x.so`, `-Wl,-plugin,x.so`: code loaded into the compiler or linker.
        if a.contains("plugin") {
            return Some(a.split_once('=').map_or(a.as_str(), |(n, _)| n).to_string());
        }
        // `-fuse-ld=PATH` runs that file as the linker (`-fuse-ld=lld` looks on PATH).
        if a.starts_with("-fuse-ld=") && a.contains('/') {
            return Some("-fuse-ld=PATH".to_string());
        }
        RUNS.iter()
            .find(|r| a.starts_with(**r))
            .map(|r| r.to_string())
    })
}

/// git: its own options before the subcommand, then the subcommand's.
fn git(args: &[String]) -> Option<String> {
    let mut i = 0;
    while let Some(a) = args.get(i).filter(|a| a.starts_with('-')) {
        // `-c core.pager=CMD`, `--config-env=core.pager=VAR`, `--exec-path=DIR`.
        if a.starts_with("-c") || a.starts_with("--config-env") || a.starts_with("--exec-path") {
            return Some(a.split_once('=').map_or(a.as_str(), |(n, _)| n).to_string());
        }
        if [
            "-C",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--super-prefix",
            "--attr-source",
            "--shallow-file",
        ]
        .contains(&a.as_str())
        {
            i += 1;
        }
        i += 1;
    }
    let sub = args.get(i).map(String::as_str).unwrap_or_default();
    let rest = args.get(i + 1..).unwrap_or_default();
    let next = rest
        .iter()
        .find(|a| !a.starts_with('-'))
        .map(String::as_str);
    let whole = match (sub, next) {
        ("submodule", Some("foreach")) | ("bisect", Some("run")) => true,
        // `git config core.pager CMD`: what later git commands run.
        ("filter-branch" | "difftool" | "mergetool" | "config" | "instaweb", _) => true,
        // `for-each-repo -- ARGS` runs `git ARGS` (`-c alias.x=!CMD x`) in each repo a
        // config key lists; `remote-ext URL` runs the command its URL spells, past
        // `protocol.ext.allow`; `submodule--helper foreach` is `submodule foreach`.
        ("for-each-repo" | "remote-ext" | "submodule--helper", _) => true,
        // `send-email` reads its options with Perl's Getopt::Long: one dash and
        // abbreviations (`-sendm=CMD`, `-smtp-server=PATH`, `-to-cmd`) run programs.
        ("send-email", _) => true,
        // They write the user's ~/.gitconfig and scheduler, which run git later.
        ("maintenance", Some("start" | "register")) => true,
        _ => false,
    };
    if whole {
        return Some(match next {
            Some(n) if matches!(sub, "submodule" | "bisect" | "maintenance") => {
                format!("{sub} {n}")
            }
            _ => sub.to_string(),
        });
    }
    let specific = match sub {
        "grep" => Options {
            short: "O",
            value: "efABCm",
            ..long(&["--open-files-in-pager"])
        },
        "clone" => Options {
            short: "uc",
            value: "obj",
            ..long(&["--upload-pack", "--template", "--config"])
        },
        "ls-remote" => Options {
            short: "u",
            value: "o",
            ..long(&["--upload-pack", "--exec"])
        },
        "fetch" | "pull" | "push" | "archive" | "remote" | "submodule" | "fetch-pack"
        | "send-pack" => long(&["--upload-pack", "--receive-pack", "--exec"]),
        "init" => long(&["--template"]),
        "daemon" => long(&["--access-hook"]),
        "rebase" => Options {
            short: "x",
            value: "sXC",
            ..long(&["--exec"])
        },
        "send-email" => long(&[
            "--sendmail-cmd",
            "--smtp-server",
            "--to-cmd",
            "--cc-cmd",
            "--header-cmd",
        ]),
        _ => long(&[]),
    };
    specific
        .find(rest)
        .or_else(|| long(&["--ext-diff"]).find(rest))
        .map(|opt| format!("{sub} {opt}"))
}

/// What a rule allowing `argv` (a program that resolves to `program`) cannot do,
/// for `validate` and `doctor`: a rule of options alone for a program that runs
/// anything allows only that exact command, never one that starts with it.
pub fn narrow_rule(program: &Path, argv: &[String]) -> Option<String> {
    let args = &argv[1..];
    if args.iter().any(|a| !a.starts_with('-')) {
        // `["python3", "check.py"]` names a command: exact is what it means.
        return None;
    }
    let why = runs_anything(program, &argv[0], args)?;
    let name = super::file_name(&argv[0]);
    let sandbox = if name == "sed" || super::file_name(program) == "sed" {
        format!(
            "; or allow [\"{name}\", \"--sandbox\"], a prefix GNU sed runs with its `e`, `r` and `w` commands refused"
        )
    } else {
        String::new()
    };
    Some(format!(
        "allows only `{}` exactly, never a longer command: {why}, so a rule for the program alone cannot be safe. Add a rule naming each whole command it should run{sandbox}",
        super::show_argv(argv),
    ))
}
