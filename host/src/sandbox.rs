//! The OS sandbox under every command a policy runs (`[shell] sandbox`).
//!
//! The contract: the child may write only to the workspace and a private temp
//! dir; the store (`.loopbox/`), the config file and the policy file are never
//! writable; the network is denied unless `shell.network = true`. A sandbox that
//! cannot enforce all of it refuses the action and says why: never a silent
//! fallback.
//!
//! - `bwrap`: bubblewrap. `/` read-only, the workspace bound read-write with the
//!   protected paths bound read-only over it, a private `/tmp`, new network, PID
//!   and IPC namespaces, a new session, killed with its parent.
//! - `landlock`: Landlock (ABI 3 or later, so truncation is covered) plus a
//!   seccomp filter refusing IP and packet sockets and io_uring. Landlock only
//!   adds access, so it cannot make a hole read-only inside a writable tree:
//!   write access is granted to each existing entry of the workspace except the
//!   protected ones. A child can therefore not create new files directly in the
//!   workspace root (it can in any existing subdirectory).
//! - `auto` (the default): bwrap when it works here, else Landlock when the
//!   kernel supports it, else none (shown in the run's banner; scripts are refused).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

/// `shell.sandbox` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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
            Ok(abi) => Err(format!("Landlock ABI {abi} is older than {MIN_LANDLOCK_ABI}, which cannot stop a child truncating protected files")),
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
        LazySandbox { choice, support, decided: OnceLock::new() }
    }

    pub fn get(&self) -> &Sandbox {
        self.decided.get_or_init(|| Sandbox::decide(self.choice, self.support.as_ref().unwrap_or_else(|| support())))
    }
}

pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support { landlock: landlock_abi(), bwrap: find_bwrap() })
}

fn landlock_abi() -> Result<i32, String> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns the ABI.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
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
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--unshare-net", "--unshare-pid", "--die-with-parent", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{} cannot be run: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!("{} cannot create namespaces here: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim()));
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
            SandboxChoice::None => Sandbox::None { why: "shell.sandbox = \"none\"".into() },
            SandboxChoice::Bwrap => {
                support.bwrap.clone().map_or_else(|e| Sandbox::Unavailable(format!("shell.sandbox = \"bwrap\" cannot be enforced: {e}")), Sandbox::Bwrap)
            }
            SandboxChoice::Landlock => {
                landlock.map_or_else(|e| Sandbox::Unavailable(format!("shell.sandbox = \"landlock\" cannot be enforced: {e}")), Sandbox::Landlock)
            }
            SandboxChoice::Auto => match (&support.bwrap, landlock) {
                (Ok(p), _) => Sandbox::Bwrap(p.clone()),
                (Err(_), Ok(abi)) => Sandbox::Landlock(abi),
                (Err(b), Err(l)) => Sandbox::None { why: format!("no sandbox is available here ({b}; {l})") },
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

/// What the sandbox must allow and protect for one run.
#[derive(Debug, Clone)]
pub struct Confines {
    pub workspace: PathBuf,
    /// Paths inside the workspace the child may never write.
    pub protected: Vec<PathBuf>,
    pub network: bool,
}

/// A command prepared to run inside the sandbox.
pub struct Prepared {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra variables for the child (TMPDIR).
    pub env: Vec<(String, String)>,
    /// Applied in the child between fork and exec (Landlock and seccomp).
    pub confinement: Option<Confinement>,
    /// The private temp dir, removed when this is dropped.
    pub _tmp: Option<tempfile::TempDir>,
}

impl Confines {
    /// Wrap `program args` (to run in `cwd`) in `sandbox`.
    pub fn prepare(&self, sandbox: &Sandbox, program: PathBuf, args: Vec<String>, cwd: &Path) -> Result<Prepared, String> {
        match sandbox {
            Sandbox::Unavailable(why) => Err(why.clone()),
            Sandbox::None { .. } => Ok(Prepared { program, args, env: Vec::new(), confinement: None, _tmp: None }),
            Sandbox::Bwrap(bwrap) => Ok(Prepared {
                program: bwrap.clone(),
                args: self.bwrap_args(&program, args, cwd),
                env: vec![("TMPDIR".into(), "/tmp".into())],
                confinement: None,
                _tmp: None,
            }),
            Sandbox::Landlock(abi) => {
                let tmp =
                    tempfile::Builder::new().prefix("loopbox-child-").tempdir().map_err(|e| format!("cannot create the child's private temp dir: {e}"))?;
                let confinement = Confinement::landlock(*abi, self, tmp.path()).map_err(|e| format!("the Landlock sandbox cannot be set up: {e}"))?;
                let env = vec![("TMPDIR".into(), tmp.path().to_string_lossy().into_owned())];
                Ok(Prepared { program, args, env, confinement: Some(confinement), _tmp: Some(tmp) })
            }
        }
    }

    fn bwrap_args(&self, program: &Path, args: Vec<String>, cwd: &Path) -> Vec<String> {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut a: Vec<String> = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"].map(String::from).into();
        a.extend(["--bind".into(), s(&self.workspace), s(&self.workspace)]);
        for p in self.protected.iter().filter(|p| p.exists()) {
            a.extend(["--ro-bind".into(), s(p), s(p)]);
        }
        if !self.network {
            a.push("--unshare-net".into());
        }
        a.extend(["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"].map(String::from));
        a.extend(["--chdir".into(), s(cwd), "--".into(), s(program)]);
        a.extend(args);
        a
    }
}

// Landlock access rights (linux/landlock.h).
const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_TRUNCATE: u64 = 1 << 14;
/// Every filesystem right of ABI 1 (bits 0-12), plus REFER (ABI 2) and TRUNCATE (ABI 3).
const FS_ALL_V3: u64 = (1 << 15) - 1;
const FS_READ: u64 = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
const FS_FILE_WRITE: u64 = FS_READ_FILE | FS_EXECUTE | FS_WRITE_FILE | FS_TRUNCATE;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const RULE_PATH_BENEATH: u32 = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Kernel-side restrictions made in the parent, applied in the child before exec.
#[derive(Debug)]
pub struct Confinement {
    ruleset: OwnedFd,
    seccomp: Option<Vec<libc::sock_filter>>,
}

impl Confinement {
    fn landlock(abi: i32, confines: &Confines, tmp: &Path) -> std::io::Result<Confinement> {
        let net = if abi >= 4 && !confines.network { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 };
        let attr = RulesetAttr { handled_access_fs: FS_ALL_V3, handled_access_net: net };
        let size = if net == 0 { std::mem::size_of::<u64>() } else { std::mem::size_of::<RulesetAttr>() };
        // SAFETY: attr outlives the call; size covers only the fields we set.
        let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr as *const RulesetAttr, size, 0u32) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new file descriptor we own.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let add = |path: &Path, access: u64| -> std::io::Result<()> {
            let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| std::io::Error::other("path with NUL"))?;
            // SAFETY: c is a valid C string; O_PATH opens for reference only.
            let pfd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if pfd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: pfd was just opened and is owned here.
            let pfd = unsafe { OwnedFd::from_raw_fd(pfd) };
            let rule = PathBeneathAttr { allowed_access: access, parent_fd: pfd.as_raw_fd() };
            // SAFETY: rule outlives the call; ruleset and pfd are valid descriptors.
            let r = unsafe { libc::syscall(libc::SYS_landlock_add_rule, ruleset.as_raw_fd(), RULE_PATH_BENEATH, &rule as *const PathBeneathAttr, 0u32) };
            if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        };
        add(Path::new("/"), FS_READ)?;
        for dev in ["/dev/null", "/dev/zero", "/dev/full"] {
            add(Path::new(dev), FS_FILE_WRITE)?;
        }
        add(tmp, FS_ALL_V3)?;
        // Grant each entry whole, except protected ones (skipped) and directories
        // holding a protected path (walked into instead).
        let mut dirs = vec![confines.workspace.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if confines.protected.iter().any(|p| p == &path) {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path)?;
                if meta.is_dir() && confines.protected.iter().any(|p| p.starts_with(&path)) {
                    dirs.push(path);
                } else if meta.is_dir() {
                    add(&path, FS_ALL_V3)?;
                } else if meta.is_file() {
                    add(&path, FS_FILE_WRITE)?;
                }
            }
        }
        let seccomp = if confines.network { None } else { Some(deny_ip_sockets()?) };
        Ok(Confinement { ruleset, seccomp })
    }

    /// In the child, after fork and before exec: only async-signal-safe syscalls.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        // SAFETY: prctl and the Landlock/seccomp syscalls do not allocate or lock.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset.as_raw_fd(), 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(filter) = &self.seccomp {
                let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut libc::sock_filter };
                if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// A seccomp filter: `socket()` for IPv4, IPv6 and packet sockets fails with
/// EACCES, and `io_uring_setup` (which can open sockets past seccomp) with ENOSYS.
fn deny_ip_sockets() -> std::io::Result<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return Err(std::io::Error::other("network denial under Landlock supports x86_64 and aarch64 only"));

    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | e as u32;
    let socket = libc::SYS_socket as u32;
    let io_uring = libc::SYS_io_uring_setup as u32;
    Ok(vec![
        op(LD_W_ABS, 0, 0, 4),                    // 0: arch
        op(JEQ_K, 1, 0, ARCH),                    // 1: native arch -> 3
        op(RET_K, 0, 0, errno(libc::ENOSYS)),     // 2: foreign ABI: refuse everything
        op(LD_W_ABS, 0, 0, 0),                    // 3: syscall number
        op(JGE_K, 8, 0, 0x4000_0000),             // 4: x32 syscalls -> 13 (ENOSYS)
        op(JEQ_K, 7, 0, io_uring),                // 5: io_uring_setup -> 13 (ENOSYS)
        op(JEQ_K, 0, 5, socket),                  // 6: socket -> 7, else -> 12 (allow)
        op(LD_W_ABS, 0, 0, 16),                   // 7: args[0], the domain
        op(JEQ_K, 2, 0, libc::AF_INET as u32),    // 8 -> 11
        op(JEQ_K, 1, 0, libc::AF_INET6 as u32),   // 9 -> 11
        op(JEQ_K, 0, 1, libc::AF_PACKET as u32),  // 10 -> 11, else 12
        op(RET_K, 0, 0, errno(libc::EACCES)),     // 11
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW), // 12
        op(RET_K, 0, 0, errno(libc::ENOSYS)),     // 13
    ])
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
        assert_eq!(Sandbox::decide(SandboxChoice::Auto, &both), Sandbox::Bwrap("/usr/bin/bwrap".into()));
        let landlock_only = support(Ok(7), Err("no bwrap".into()));
        assert_eq!(Sandbox::decide(SandboxChoice::Auto, &landlock_only), Sandbox::Landlock(7));
        let old = support(Ok(2), Err("no bwrap".into()));
        assert!(matches!(Sandbox::decide(SandboxChoice::Auto, &old), Sandbox::None { why } if why.contains("ABI 2")));
    }

    #[test]
    fn an_explicit_choice_that_cannot_be_enforced_is_unavailable_not_none() {
        let nothing = support(Err("no landlock".into()), Err("no bwrap".into()));
        assert!(matches!(Sandbox::decide(SandboxChoice::Bwrap, &nothing), Sandbox::Unavailable(m) if m.contains("no bwrap")));
        assert!(matches!(Sandbox::decide(SandboxChoice::Landlock, &nothing), Sandbox::Unavailable(m) if m.contains("no landlock")));
        let c = Confines { workspace: "/w".into(), protected: vec![], network: false };
        assert!(c.prepare(&Sandbox::Unavailable("x".into()), "/bin/true".into(), vec![], Path::new("/w")).is_err());
    }

    #[test]
    fn bwrap_arguments_protect_and_isolate() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().to_path_buf();
        std::fs::create_dir(ws.join(".loopbox")).unwrap();
        let c = Confines { workspace: ws.clone(), protected: vec![ws.join(".loopbox"), ws.join("missing.toml")], network: false };
        let a = c.bwrap_args(Path::new("/bin/echo"), vec!["hi".into()], &ws).join(" ");
        let w = ws.display();
        assert!(a.contains(&format!("--bind {w} {w} --ro-bind {w}/.loopbox {w}/.loopbox --unshare-net")), "{a}");
        assert!(!a.contains("missing.toml"));
        assert!(a.ends_with(&format!("--chdir {w} -- /bin/echo hi")), "{a}");
    }
}
