//! The OS sandbox under every command a policy runs and under the agent
//! (`[shell] sandbox`).
//!
//! The contract: the child may write only to the workspace and a private temp
//! dir (and the agent to its own state); the protected paths ([`protect`]:
//! git's config and hooks, agent and editor settings, the store, the config, the
//! policy, the agent program) are neither writable nor creatable; the hidden
//! paths ([`hide`]: credential stores, and the agents' state for a policy's
//! commands) cannot be read; the network
//! is denied unless granted; sockets are limited by a seccomp filter
//! (`seccomp.rs`). A sandbox that cannot enforce all of it refuses the action and
//! says why: never a silent fallback.
//!
//! - `bwrap`: bubblewrap (`bwrap.rs`), the enforcing default. Missing protected
//!   names are held by placeholders ([`placeholder`]).
//! - `landlock`: Landlock ABI 3 or later (`landlock.rs`), the fallback where
//!   namespaces are not allowed. It cannot keep a missing name from being
//!   created, so children cannot create entries in the workspace root at all.
//! - `auto` (the default): bwrap when it works here, else Landlock when the
//!   kernel supports it, else none (shown in the run's banner; scripts are refused).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

mod bwrap;
pub mod hide;
mod landlock;
pub mod leftovers;
pub mod netns;
pub mod placeholder;
mod privileges;
pub mod protect;
mod seccomp;

pub use protect::{Kind, Protected};

/// `shell.sandbox` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxChoice {
    #[default]
    Auto,
    Landlock,
    Bwrap,
    None,
}

impl SandboxChoice {
    pub fn name(self) -> &'static str {
        match self {
            SandboxChoice::Auto => "auto",
            SandboxChoice::Landlock => "landlock",
            SandboxChoice::Bwrap => "bwrap",
            SandboxChoice::None => "none",
        }
    }
}

/// What this machine supports, probed once per process.
#[derive(Debug, Clone)]
pub struct Support {
    /// The Landlock ABI version, or why there is none.
    pub landlock: Result<i32, String>,
    /// bubblewrap's path, or why it cannot be used.
    pub bwrap: Result<PathBuf, String>,
}

/// Landlock ABI that covers truncation (3); earlier ones cannot protect files fully.
pub const MIN_LANDLOCK_ABI: i32 = 3;

impl Support {
    /// The Landlock ABI when it is new enough to enforce loopbox's sandbox, or why not.
    pub fn landlock_usable(&self) -> Result<i32, String> {
        match &self.landlock {
            Ok(abi) if *abi >= MIN_LANDLOCK_ABI => Ok(*abi),
            Ok(abi) => Err(format!(
                "Landlock ABI {abi} is older than {MIN_LANDLOCK_ABI}, which cannot stop a child truncating protected files"
            )),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The sandbox decision for a run, made when first needed: probing bubblewrap
/// costs a process spawn, which a run that never executes a command (a Stop hook) skips.
pub struct LazySandbox {
    choice: SandboxChoice,
    support: Option<Support>,
    decided: OnceLock<Sandbox>,
}

impl LazySandbox {
    /// `support` overrides what this machine supports (None: probe it).
    pub fn new(choice: SandboxChoice, support: Option<Support>) -> LazySandbox {
        LazySandbox {
            choice,
            support,
            decided: OnceLock::new(),
        }
    }

    pub fn get(&self) -> &Sandbox {
        self.decided.get_or_init(|| {
            Sandbox::decide(
                self.choice,
                self.support.as_ref().unwrap_or_else(|| support()),
            )
        })
    }
}

pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        landlock: landlock_abi(),
        bwrap: find_bwrap(),
    })
}

fn landlock_abi() -> Result<i32, String> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if abi < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)".into(),
            Some(libc::EOPNOTSUPP) => "Landlock is built in but disabled (add `landlock` to the kernel's `lsm=` boot parameter)".into(),
            _ => format!("Landlock is unavailable: {e}"),
        });
    }
    Ok(abi as i32)
}

fn find_bwrap() -> Result<PathBuf, String> {
    let path = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")?;
    // Namespaces may be forbidden (some containers): try it once.
    let out = std::process::Command::new(&path)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-user",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{} cannot be run: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} cannot create namespaces here: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(path)
}

/// The sandbox a run uses, decided once from the choice and this machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Sandbox {
    Bwrap(PathBuf),
    Landlock(i32),
    /// No sandbox: explicitly chosen, or nothing is available under `auto`.
    None {
        why: String,
    },
    /// The chosen sandbox cannot be enforced here: every action is refused with this.
    Unavailable(String),
}

impl Sandbox {
    pub fn decide(choice: SandboxChoice, support: &Support) -> Sandbox {
        let landlock = support.landlock_usable();
        match choice {
            SandboxChoice::None => Sandbox::None {
                why: "shell.sandbox = \"none\"".into(),
            },
            SandboxChoice::Bwrap => support.bwrap.clone().map_or_else(
                |e| {
                    Sandbox::Unavailable(format!(
                        "shell.sandbox = \"bwrap\" cannot be enforced: {e}"
                    ))
                },
                Sandbox::Bwrap,
            ),
            SandboxChoice::Landlock => landlock.map_or_else(
                |e| {
                    Sandbox::Unavailable(format!(
                        "shell.sandbox = \"landlock\" cannot be enforced: {e}"
                    ))
                },
                Sandbox::Landlock,
            ),
            SandboxChoice::Auto => match (&support.bwrap, landlock) {
                (Ok(p), _) => Sandbox::Bwrap(p.clone()),
                (Err(_), Ok(abi)) => Sandbox::Landlock(abi),
                (Err(b), Err(l)) => Sandbox::None {
                    why: format!("no sandbox is available here ({b}; {l})"),
                },
            },
        }
    }

    pub fn name(&self) -> String {
        match self {
            Sandbox::Bwrap(_) => "bwrap".into(),
            Sandbox::Landlock(abi) => format!("landlock (ABI {abi})"),
            Sandbox::None { .. } => "none".into(),
            Sandbox::Unavailable(_) => "unavailable".into(),
        }
    }

    pub fn is_enforced(&self) -> bool {
        matches!(self, Sandbox::Bwrap(_) | Sandbox::Landlock(_))
    }
}

/// What the sandbox must allow and protect for one child.
#[derive(Debug, Clone)]
pub struct Confines {
    pub workspace: PathBuf,
    /// Paths the child may neither write nor create: in the workspace, and for the
    /// agent its own settings.
    pub protected: Vec<Protected>,
    /// The run's proxy for this child's side (its commands, or its agent), if
    /// it may reach any destination: never the host's network itself.
    pub egress: Option<std::sync::Arc<crate::exec::egress::EgressSide>>,
    /// Let the child create UNIX sockets (`shell.unix_sockets`): it could then
    /// reach daemons outside the workspace unless Landlock ABI 9 confines them.
    pub unix_sockets: bool,
    /// Paths outside the workspace the child may write (the agent's own state).
    pub writable_outside: Vec<PathBuf>,
    /// Existing paths the child may not read ([`hide::paths`]): secrets outside
    /// the workspace. The workspace and `writable_outside` stay usable even
    /// where one of these holds them.
    pub hidden: Vec<PathBuf>,
    /// Size of bwrap's private `/tmp` (a tmpfs) in bytes; 0: the kernel's default.
    pub tmp_bytes: u64,
}

/// A command prepared to run inside the sandbox.
pub struct Prepared {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// `argv[0]` for the program when it differs from `program` (None: the path).
    pub arg0: Option<String>,
    /// Extra variables for the child (TMPDIR).
    pub env: Vec<(String, String)>,
    /// Applied in the child between fork and exec (capabilities, Landlock, seccomp).
    pub confinement: Option<Confinement>,
    /// Descriptors the child gets as fds 3, 4, ... (bwrap's `--add-seccomp-fd`).
    pub pass_fd: Vec<OwnedFd>,
    /// The proxy's port to make in the sandbox once bwrap runs, before the
    /// command starts (bwrap with a network grant; see [`netns`]).
    pub net: Option<netns::SandboxNet>,
    /// The private temp dir, removed when this is dropped.
    pub _tmp: Option<tempfile::TempDir>,
    /// The placeholders of missing protected names, kept while the child runs.
    pub _hold: Option<placeholder::Hold>,
}

impl Prepared {
    /// A command run as it is, with no sandbox around it.
    pub fn unconfined(program: PathBuf, arg0: Option<String>, args: Vec<String>) -> Prepared {
        Prepared {
            program,
            args,
            arg0,
            env: Vec::new(),
            confinement: None,
            pass_fd: Vec::new(),
            net: None,
            _tmp: None,
            _hold: None,
        }
    }
}

impl Confines {
    fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| p.path == path)
    }

    fn holds_protected(&self, dir: &Path) -> bool {
        self.protected.iter().any(|p| p.path.starts_with(dir))
    }

    fn is_hidden(&self, path: &Path) -> bool {
        self.hidden.iter().any(|h| h == path)
    }

    fn holds_hidden(&self, dir: &Path) -> bool {
        self.hidden.iter().any(|h| h.starts_with(dir))
    }

    fn sockets(&self, unix_confined: bool) -> seccomp::Sockets {
        seccomp::Sockets {
            network: self.egress.is_some(),
            unix: self.unix_sockets || unix_confined,
        }
    }

    /// Wrap `program args` (to run in `cwd`, with `arg0` as its `argv[0]`) in `sandbox`.
    pub fn prepare(
        &self,
        sandbox: &Sandbox,
        program: PathBuf,
        arg0: Option<String>,
        args: Vec<String>,
        cwd: &Path,
    ) -> Result<Prepared, String> {
        match sandbox {
            Sandbox::Unavailable(why) => Err(why.clone()),
            Sandbox::None { .. } => {
                let mut p = Prepared::unconfined(program, arg0, args);
                // No sandbox to hold the child to it: the variables only.
                if let Some(side) = &self.egress {
                    p.env = side.endpoint()?.env(true);
                }
                Ok(p)
            }
            Sandbox::Bwrap(bwrap) => {
                for p in &self.protected {
                    if std::fs::symlink_metadata(&p.path).is_ok_and(|m| m.file_type().is_symlink())
                    {
                        return Err(format!(
                            "the protected path `{}` is a symbolic link, which bwrap cannot keep read-only; replace the link with what it points to, or use shell.sandbox = \"landlock\"",
                            p.path.display()
                        ));
                    }
                }
                let hold = placeholder::hold(&self.workspace, &self.protected)?;
                let mut env = vec![("TMPDIR".into(), "/tmp".into())];
                // With the network, bwrap reports its sandbox and waits while
                // loopbox makes the proxy's port in it (`netns`).
                let mut net = None;
                let mut net_ends = None;
                if let Some(side) = &self.egress {
                    env.extend(side.endpoint()?.env(false));
                    let (n, ends) = netns::SandboxNet::new(side.clone())
                        .map_err(|e| format!("cannot prepare the sandbox's network: {e}"))?;
                    net = Some(n);
                    net_ends = Some(ends);
                }
                let mut pass_fd = Vec::new();
                for filter in seccomp::filters(self.sockets(false))? {
                    let (read, write) = crate::exec::fd::pipe()
                        .map_err(|e| format!("cannot pass the seccomp filter to bwrap: {e}"))?;
                    // A pipe holds 64 KiB; the largest filter is under 4 KiB.
                    std::fs::File::from(write)
                        .write_all(&seccomp::to_bytes(&filter))
                        .map_err(|e| format!("cannot pass the seccomp filter to bwrap: {e}"))?;
                    pass_fd.push(read);
                }
                let seccomp_count = pass_fd.len() as i32;
                if let Some(ends) = net_ends {
                    pass_fd.push(ends.info);
                    pass_fd.push(ends.block);
                }
                let fds: Vec<i32> = (0..seccomp_count).map(|i| PASSED_FD + i).collect();
                let net_fds = net
                    .as_ref()
                    .map(|_| (PASSED_FD + seccomp_count, PASSED_FD + seccomp_count + 1));
                Ok(Prepared {
                    program: bwrap.clone(),
                    args: bwrap::args(self, &program, args, cwd, &fds, net_fds),
                    arg0: None,
                    env,
                    confinement: None,
                    pass_fd,
                    net,
                    _tmp: None,
                    _hold: Some(hold),
                })
            }
            Sandbox::Landlock(abi) => {
                let tmp = leftovers::private_tmp()?;
                let mut env = vec![("TMPDIR".into(), tmp.path().to_string_lossy().into_owned())];
                let port = match &self.egress {
                    None => None,
                    Some(_) if *abi < 4 => {
                        return Err(format!(
                            "this command may use the network only through loopbox's proxy, and Landlock ABI {abi} cannot hold it to the proxy (ABI 4, Linux 6.7, confines TCP); install bubblewrap or leave the network out of the grants"
                        ));
                    }
                    Some(side) => {
                        let end = side.endpoint()?;
                        env.extend(end.env(true));
                        Some(end.port)
                    }
                };
                let ruleset = landlock::ruleset(*abi, self, tmp.path(), port)
                    .map_err(|e| format!("the Landlock sandbox cannot be set up: {e}"))?;
                let mut seccomp =
                    seccomp::filters(self.sockets(landlock::confines_unix_sockets(*abi)))?;
                let privileges = privileges::CapDrop::prepare();
                if !privileges.isolates_ipc() {
                    seccomp.push(seccomp::ipc_filter()?);
                }
                let confinement = Some(Confinement {
                    privileges,
                    ruleset,
                    seccomp,
                });
                Ok(Prepared {
                    program,
                    args,
                    arg0,
                    env,
                    confinement,
                    pass_fd: Vec::new(),
                    net: None,
                    _tmp: Some(tmp),
                    _hold: None,
                })
            }
        }
    }
}

/// The descriptor number the child gets the first of [`Prepared::pass_fd`] as
/// (the next ones follow it).
pub const PASSED_FD: i32 = 3;

/// Kernel-side restrictions made in the parent, applied in the child before exec.
#[derive(Debug)]
pub struct Confinement {
    privileges: privileges::CapDrop,
    ruleset: OwnedFd,
    seccomp: Vec<seccompiler::BpfProgram>,
}

impl Confinement {
    /// In the child, after clone and before exec: only system calls. Capabilities
    /// go first (the secure bits need CAP_SETPCAP), seccomp last.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        // SAFETY: each only makes system calls on data prepared in the parent.
        unsafe {
            self.privileges.apply()?;
            landlock::restrict_self(&self.ruleset)?;
            for program in &self.seccomp {
                seccomp::install(program)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn support(landlock: Result<i32, String>, bwrap: Result<PathBuf, String>) -> Support {
        Support { landlock, bwrap }
    }

    #[test]
    fn auto_prefers_bwrap_then_landlock_then_none() {
        let both = support(Ok(7), Ok("/usr/bin/bwrap".into()));
        assert_eq!(
            Sandbox::decide(SandboxChoice::Auto, &both),
            Sandbox::Bwrap("/usr/bin/bwrap".into())
        );
        let landlock_only = support(Ok(7), Err("no bwrap".into()));
        assert_eq!(
            Sandbox::decide(SandboxChoice::Auto, &landlock_only),
            Sandbox::Landlock(7)
        );
        let old = support(Ok(2), Err("no bwrap".into()));
        assert!(
            matches!(Sandbox::decide(SandboxChoice::Auto, &old), Sandbox::None { why } if why.contains("ABI 2"))
        );
    }

    #[test]
    fn an_explicit_choice_that_cannot_be_enforced_is_unavailable_not_none() {
        let nothing = support(Err("no landlock".into()), Err("no bwrap".into()));
        assert!(
            matches!(Sandbox::decide(SandboxChoice::Bwrap, &nothing), Sandbox::Unavailable(m) if m.contains("no bwrap"))
        );
        assert!(
            matches!(Sandbox::decide(SandboxChoice::Landlock, &nothing), Sandbox::Unavailable(m) if m.contains("no landlock"))
        );
        let c = Confines {
            workspace: "/w".into(),
            protected: vec![],
            egress: None,
            unix_sockets: false,
            writable_outside: vec![],
            hidden: vec![],
            tmp_bytes: 0,
        };
        assert!(
            c.prepare(
                &Sandbox::Unavailable("x".into()),
                "/bin/true".into(),
                None,
                vec![],
                Path::new("/w")
            )
            .is_err()
        );
    }

    #[test]
    fn bwrap_arguments_protect_and_isolate() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().to_path_buf();
        std::fs::create_dir(ws.join(".loopbox")).unwrap();
        let protected = [".loopbox", "missing.toml"]
            .map(|n| Protected {
                path: ws.join(n),
                kind: Kind::File,
            })
            .to_vec();
        let c = Confines {
            workspace: ws.clone(),
            protected,
            egress: None,
            unix_sockets: false,
            writable_outside: vec!["/nonexistent/agent-home".into()],
            hidden: vec![],
            tmp_bytes: 1 << 20,
        };
        let a = bwrap::args(
            &c,
            Path::new("/bin/echo"),
            vec!["hi".into()],
            &ws,
            &[3, 4],
            None,
        )
        .join(" ");
        let w = ws.display();
        assert!(
            a.contains(&format!(
                "--bind {w} {w} --ro-bind {w}/.loopbox {w}/.loopbox \
                 --tmpfs {w}/.loopbox --remount-ro {w}/.loopbox --unshare-net"
            )),
            "the store is bound read-only, then covered: {a}"
        );
        assert!(
            a.contains("--unshare-pid --unshare-user --cap-drop ALL --unshare-ipc"),
            "no capabilities, as root too: {a}"
        );
        assert!(
            !a.contains("missing.toml") && !a.contains("agent-home"),
            "only what exists is bound: {a}"
        );
        assert!(
            a.ends_with(&format!(
                "--add-seccomp-fd 3 --add-seccomp-fd 4 --chdir {w} -- /bin/echo hi"
            )),
            "{a}"
        );
        assert!(
            a.contains("--proc /proc --size 1048576 --tmpfs /tmp "),
            "{a}"
        );

        // Hidden paths: outside the workspace covered before its bind (so a
        // workspace inside one comes back), inside it after; covers read-only last.
        let out = tempfile::tempdir().unwrap();
        let o = out.path().display();
        std::fs::create_dir(out.path().join("keys")).unwrap();
        std::fs::write(out.path().join("token"), "t").unwrap();
        std::fs::write(ws.join(".env"), "e").unwrap();
        let c = Confines {
            hidden: vec![
                out.path().join("keys"),
                out.path().join("token"),
                ws.join(".env"),
                out.path().join("gone"),
            ],
            ..c
        };
        let a = bwrap::args(&c, Path::new("/bin/echo"), vec![], &ws, &[], None).join(" ");
        assert!(
            a.contains(&format!(
                "--size 1048576 --tmpfs /tmp --tmpfs {o}/keys --ro-bind /dev/null {o}/token --bind {w} {w} --ro-bind {w}/.loopbox {w}/.loopbox --ro-bind /dev/null {w}/.env --tmpfs {w}/.loopbox --remount-ro {o}/keys --remount-ro {w}/.loopbox --unshare-net"
            )),
            "{a}"
        );
        assert!(!a.contains("gone"), "{a}");
    }
}
