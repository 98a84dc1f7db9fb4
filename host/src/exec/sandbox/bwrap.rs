//! bubblewrap's command line for one child: `/` read-only, the workspace bound
//! read-write with every protected path bound read-only over it (placeholders
//! stand in for missing ones, see [`super::placeholder`]), the agent's own state
//! outside the workspace writable, a private `/tmp`, new PID, IPC and UTS
//! namespaces (and network, unless granted), a new session, killed with its
//! parent, and the seccomp filter read from a passed descriptor.

use std::path::Path;

use super::Confines;

pub fn args(
    c: &Confines,
    program: &Path,
    args: Vec<String>,
    cwd: &Path,
    seccomp_fd: Option<i32>,
) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut a: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .map(String::from)
    .into();
    for p in c.writable_outside.iter().filter(|p| p.exists()) {
        a.extend(["--bind".into(), s(p), s(p)]);
    }
    a.extend(["--bind".into(), s(&c.workspace), s(&c.workspace)]);
    for p in c.protected.iter().filter(|p| p.path.exists()) {
        a.extend(["--ro-bind".into(), s(&p.path), s(&p.path)]);
    }
    if !c.network {
        a.push("--unshare-net".into());
    }
    a.extend(
        [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--new-session",
        ]
        .map(String::from),
    );
    if let Some(fd) = seccomp_fd {
        a.extend(["--seccomp".into(), fd.to_string()]);
    }
    a.extend(["--chdir".into(), s(cwd), "--".into(), s(program)]);
    a.extend(args);
    a
}
