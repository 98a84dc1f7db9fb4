//! bubblewrap's command line for one child: `/` read-only, the hidden paths
//! and loopbox's store covered (an empty read-only directory, or `/dev/null`
//! for a file), the workspace bound read-write with every protected path bound
//! read-only over it (placeholders stand in for missing ones, see
//! [`super::placeholder`]), the agent's own state outside the workspace
//! writable, a private `/tmp` of `shell.tmp_bytes` (a tmpfs, so memory), new
//! user, PID, IPC, UTS and network namespaces (with a network grant, the
//! proxy's port made in it, see [`super::netns`]), no
//! capabilities, a new session, killed with its parent, and the seccomp
//! filters read from passed descriptors. In the fresh `/proc`, the kernel's
//! settings are read-only and its memory, keys and timers masked.

use std::path::{Path, PathBuf};

use super::Confines;

pub fn args(
    c: &Confines,
    program: &Path,
    args: Vec<String>,
    cwd: &Path,
    seccomp_fds: &[i32],
    net_fds: Option<(i32, i32)>,
) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut a: Vec<String> = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        .map(String::from)
        .into();
    if c.tmp_bytes > 0 {
        a.extend(["--size".into(), c.tmp_bytes.to_string()]);
    }
    a.extend(["--tmpfs".into(), "/tmp".into()]);
    // A program kept under /tmp would vanish in the private one: what holds it
    // there is bound back read-only (before the covers, which apply inside it).
    for p in tmp_roots(program, &c.workspace) {
        a.extend(["--ro-bind".into(), s(&p), s(&p)]);
    }
    // Hidden paths outside the workspace are covered before the binds below, so
    // a workspace or agent state inside one is mounted back over the cover;
    // those inside the workspace after its bind. Covers are made read-only
    // last, since bwrap creates later mount points in them.
    let (mut inside, outside): (Vec<&PathBuf>, Vec<&PathBuf>) =
        c.hidden.iter().partition(|h| h.starts_with(&c.workspace));
    // The store too (every run's journal and state). Only here: under Landlock,
    // hiding it would grant every directory above the workspace entry by entry,
    // tens of milliseconds per command beside a large /tmp.
    let store = c.workspace.join(crate::db::STORE_DIR);
    if !inside.contains(&&store) {
        inside.push(&store);
    }
    let mut covered = Vec::new();
    cover(&mut a, &outside, &mut covered);
    for p in c.writable_outside.iter().filter(|p| p.exists()) {
        a.extend(["--bind".into(), s(p), s(p)]);
    }
    a.extend(["--bind".into(), s(&c.workspace), s(&c.workspace)]);
    for p in c.protected.iter().filter(|p| p.path.exists()) {
        a.extend(["--ro-bind".into(), s(&p.path), s(&p.path)]);
    }
    cover(&mut a, &inside, &mut covered);
    for h in covered {
        a.extend(["--remount-ro".into(), s(h)]);
    }
    // Never the host's network: a network grant is the proxy's port, made in
    // this namespace while bwrap waits (`super::netns`): it reports the
    // sandbox's pid on the first descriptor and runs the command once a byte
    // arrives on the second.
    a.push("--unshare-net".into());
    if let Some((info, block)) = net_fds {
        a.extend([
            "--info-fd".into(),
            info.to_string(),
            "--block-fd".into(),
            block.to_string(),
        ]);
    }
    // A user namespace whoever runs loopbox, and no capabilities in it: as
    // root, bwrap would otherwise make none and leave the child every
    // capability (one `mount -o remount,rw /` undoes every bind below), and
    // `--cap-drop ALL` alone leaves root's bounding set full. Inside it uid 0
    // is still root's own uid, so root's files stay root's.
    a.extend(
        [
            "--unshare-pid",
            "--unshare-user",
            "--cap-drop",
            "ALL",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--new-session",
        ]
        .map(String::from),
    );
    // Mounts apply in order whatever flags lie between: these go after `--proc`.
    proc_confined(&mut a);
    for fd in seccomp_fds {
        a.extend(["--add-seccomp-fd".into(), fd.to_string()]);
    }
    a.extend(["--chdir".into(), s(cwd), "--".into(), s(program)]);
    a.extend(args);
    a
}

/// `/proc` entries made read-only in the child's fresh proc mount, as Docker
/// does (moby's `readonlyPaths`). bwrap 0.8 makes `/proc/sys` read-only only
/// when it is writable at setup, and with `--unshare-user` uid 0 inside is the
/// host's root, whom sysctls let write: `kernel.core_pattern = |/workspace/x`
/// would run `x` as root on the host at the next crash.
const PROC_READ_ONLY: [&str; 5] = [
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];

/// `/proc` entries masked (moby's `maskedPaths`): `/dev/null` over a file, an
/// empty read-only tmpfs over a directory. They show the kernel's memory,
/// keys, timers and hardware.
const PROC_MASKED: [&str; 8] = [
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/asound",
];

/// Bind [`PROC_READ_ONLY`] onto itself and mask [`PROC_MASKED`], after
/// `--proc /proc` (the binds apply inside the new proc mount). Only entries
/// this kernel has: bwrap cannot create a mount point in proc. The new mount
/// shows the same kernel's entries as loopbox's own `/proc`.
fn proc_confined(a: &mut Vec<String>) {
    for p in PROC_READ_ONLY {
        a.extend(["--ro-bind-try".into(), p.into(), p.into()]);
    }
    for p in PROC_MASKED {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => {
                a.extend(["--tmpfs".into(), p.into(), "--remount-ro".into(), p.into()])
            }
            Ok(_) => a.extend(["--ro-bind".into(), "/dev/null".into(), p.into()]),
            Err(_) => {}
        }
    }
}

/// What a program under `/tmp` (outside the workspace, which is bound anyway)
/// needs from the real `/tmp`, as named and as resolved: the entry directly in
/// `/tmp` that holds it (an install prefix, say, with the interpreter and
/// libraries beside the program), or the program itself when it lies directly
/// in `/tmp`.
fn tmp_roots(program: &Path, workspace: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in [Some(program.to_path_buf()), program.canonicalize().ok()]
        .into_iter()
        .flatten()
    {
        let Ok(rest) = p.strip_prefix("/tmp") else {
            continue;
        };
        let Some(first) = rest.components().next() else {
            continue;
        };
        let top = Path::new("/tmp").join(first);
        if !p.starts_with(workspace) && top.exists() && !out.contains(&top) {
            out.push(top);
        }
    }
    out
}

/// Cover each hidden path: an empty tmpfs over a directory (noted in `dirs`, to
/// be made read-only), `/dev/null` over anything else.
fn cover<'a>(a: &mut Vec<String>, hidden: &[&'a PathBuf], dirs: &mut Vec<&'a PathBuf>) {
    for h in hidden {
        let path = h.to_string_lossy().into_owned();
        match std::fs::metadata(h) {
            Ok(m) if m.is_dir() => {
                a.extend(["--tmpfs".into(), path]);
                dirs.push(h);
            }
            Ok(_) => a.extend(["--ro-bind".into(), "/dev/null".into(), path]),
            Err(_) => {}
        }
    }
}
