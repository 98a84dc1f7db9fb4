//! The Landlock ruleset for one child, built with the `landlock` crate in the
//! parent; the child only calls `landlock_restrict_self` on its descriptor
//! (between clone and exec nothing may allocate, so the crate's own
//! `restrict_self` is not used there).
//!
//! Landlock only adds access, so a read-only hole cannot be cut in a writable
//! tree, and a name that does not exist yet cannot be kept from being created:
//! write access is given to each existing entry of the workspace except the
//! protected ones (directories holding a protected path are walked into). A
//! child can therefore not create new entries directly in the workspace root.
//! Read access is given the same way: to each entry of `/` but the hidden
//! ones, walking into those that hold one, and in `/dev` only to the devices
//! programs use (no disks: as root they would open by owner match). Directories on the way stay listable, and so the names inside a
//! hidden directory can be listed, not read. Making device nodes is handled
//! and granted nowhere.
//!
//! - ABI 4+: TCP bind and connect are handled: denied, but for connecting to
//!   the run's proxy when the network is granted.
//! - ABI 6+: the abstract UNIX socket and signal scopes: no connecting to
//!   abstract sockets or signalling processes outside the sandbox.
//! - ABI 9+: connecting to pathname UNIX sockets is allowed only beneath the
//!   workspace and the private temp dir.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::Confines;

/// Whether this ABI confines pathname UNIX sockets (so AF_UNIX can be allowed).
pub fn confines_unix_sockets(abi: i32) -> bool {
    abi >= 9
}

/// A ruleset for `confines` plus the private temp dir `tmp`, as a descriptor the child applies.
pub fn ruleset(
    abi: i32,
    confines: &Confines,
    tmp: &Path,
    proxy_port: Option<u16>,
) -> Result<OwnedFd, String> {
    let abi = ABI::from(abi);
    let handled = AccessFs::from_all(abi);
    // Everything but making device nodes, which is handled (so refused)
    // everywhere: a character or block device made in the workspace is a door
    // to the hardware. The seccomp filter and the dropped capabilities refuse
    // it too.
    let all = handled & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let file = AccessFs::from_file(abi);
    fn e(what: &'static str) -> impl Fn(landlock::RulesetError) -> String {
        move |err| format!("{what}: {err}")
    }
    let mut rules = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(e("handling file access"))?;
    if abi >= ABI::V4 {
        rules = rules
            .handle_access(AccessNet::from_all(abi))
            .map_err(e("handling network access"))?;
    }
    if abi >= ABI::V6 {
        rules = rules
            .scope(Scope::from_all(abi))
            .map_err(e("scoping sockets and signals"))?;
    }
    let mut created = rules.create().map_err(e("creating the ruleset"))?;
    // The proxy's port, the one TCP connect allowed (on any address: Landlock
    // rules name ports only, see docs/security.md).
    if let Some(port) = proxy_port {
        created = created
            .add_rule(landlock::NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(e("allowing the proxy's port"))?;
    }
    let add = |created: RulesetCreated,
               path: &Path,
               access: BitFlags<AccessFs>|
     -> Result<RulesetCreated, String> {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            // An entry another process removed since it was listed (a temp dir
            // in /tmp): nothing to grant, and no reason to refuse the command.
            Err(_)
                if std::fs::symlink_metadata(path)
                    .is_err_and(|m| m.kind() == std::io::ErrorKind::NotFound) =>
            {
                return Ok(created);
            }
            Err(err) => return Err(format!("{}: {err}", path.display())),
        };
        created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|err| format!("{}: {err}", path.display()))
    };
    let read = AccessFs::from_read(abi);
    let dev = Path::new("/dev");
    let mut dirs = vec![PathBuf::from("/")];
    while let Some(dir) = dirs.pop() {
        if dir == dev {
            // Only what programs use: as root, every disk and hardware device
            // is root's and would open for reading by owner match.
            created = add(created, dev, AccessFs::ReadDir.into())?;
            for name in DEV_READABLE {
                let path = dev.join(name);
                if confines.is_hidden(&path) {
                    continue;
                }
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() && confines.holds_hidden(&path) => dirs.push(path),
                    Ok(m) if m.is_dir() => created = add(created, &path, read)?,
                    Ok(m) if !m.file_type().is_symlink() => {
                        created = add(created, &path, read & file)?
                    }
                    _ => {}
                }
            }
            continue;
        }
        if !confines.holds_hidden(&dir) && !dev.starts_with(&dir) {
            created = add(created, &dir, read)?;
            continue;
        }
        // Listing stays (a rule is for everything beneath, so the names in a
        // hidden directory can be listed too, though not read).
        created = add(created, &dir, AccessFs::ReadDir.into())?;
        // A directory that cannot be listed gets no access beneath it.
        for path in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
        {
            if confines.is_hidden(&path) {
                continue;
            }
            // A symbolic link needs no rule: what it points at has its own.
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => dirs.push(path),
                Ok(m) if m.is_file() => created = add(created, &path, read & file)?,
                _ => {}
            }
        }
    }
    for dev in ["/dev/null", "/dev/zero", "/dev/full"] {
        created = add(created, Path::new(dev), file)?;
    }
    // A workspace inside a hidden directory still lists its own root; its
    // entries get their rules below.
    if confines
        .hidden
        .iter()
        .any(|h| confines.workspace.starts_with(h))
    {
        created = add(created, &confines.workspace, AccessFs::ReadDir.into())?;
    }
    created = add(created, tmp, all)?;
    // Trees holding a protected path are walked entry by entry, as the workspace is.
    let mut dirs = vec![confines.workspace.clone()];
    for outside in &confines.writable_outside {
        match std::fs::metadata(outside) {
            Ok(meta)
                if meta.is_dir()
                    && (confines.holds_protected(outside) || confines.holds_hidden(outside)) =>
            {
                dirs.push(outside.clone())
            }
            Ok(meta) => created = add(created, outside, if meta.is_dir() { all } else { file })?,
            Err(_) => {}
        }
    }
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|err| format!("{}: {err}", dir.display()))?
                .path();
            if confines.is_protected(&path) || confines.is_hidden(&path) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|err| format!("{}: {err}", path.display()))?;
            if meta.is_dir() && (confines.holds_protected(&path) || confines.holds_hidden(&path)) {
                dirs.push(path);
            } else if meta.is_dir() {
                created = add(created, &path, all)?;
            } else if meta.is_file() {
                created = add(created, &path, file)?;
            }
        }
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "the kernel did not create a Landlock ruleset".to_string())
}

/// What a child may read in `/dev` under Landlock (and list `/dev` itself);
/// `fd`, `stdin`, `stdout` and `stderr` are links into `/proc`, which is
/// readable. Block devices and hardware character devices are left out.
const DEV_READABLE: [&str; 9] = [
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm",
];

/// Apply the ruleset to the calling thread. Called in the child between clone
/// and exec: system calls only.
///
/// # Safety
/// Only async-signal-safe work: the caller is a vfork-style child.
pub unsafe fn restrict_self(ruleset: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: prctl and landlock_restrict_self take no pointers here.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
