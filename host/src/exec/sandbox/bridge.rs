//! The bridge: what bubblewrap runs in a sandbox that may use the network. The
//! sandbox has a network namespace of its own with only loopback in it; the
//! bridge listens on [`SANDBOX_PORT`] there and carries each
//! connection to the proxy's Unix socket, bound in at
//! [`SANDBOX_SOCKET`], then runs the command as its child under the
//! command's own seccomp filters (which take the UNIX sockets the bridge
//! needs away again) and ends as it ends.
//!
//! The bridge is loopbox's own binary (`loopbox __egress-bridge`): no
//! `socat` to install, and nothing the command could replace. It makes
//! itself undumpable, so the command (same user, no capabilities) cannot
//! trace it or read its memory.

use std::ffi::OsString;
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::exec::egress::{SANDBOX_PORT, SANDBOX_SOCKET, splice};

/// The program bubblewrap runs as the bridge (the `loopbox` binary, set by
/// its `main`); None in a process that has none, where a network grant under
/// bubblewrap is refused.
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Name the program that serves as the bridge ([`ARG`] as its first argument).
pub fn set_program(path: &Path) {
    let _ = PROGRAM.set(path.to_path_buf());
}

pub fn program() -> Option<&'static Path> {
    PROGRAM.get().map(PathBuf::as_path)
}

/// The bridge's first argument, which `main` looks for before anything else.
pub const ARG: &str = "__egress-bridge";

/// The bridge's arguments for `program args` (after the bridge program itself).
pub fn args(unix_sockets: bool, program: String, args: Vec<String>) -> Vec<String> {
    let mut a = vec![
        ARG.to_string(),
        SANDBOX_SOCKET.to_string(),
        SANDBOX_PORT.to_string(),
        if unix_sockets { "unix" } else { "no-unix" }.to_string(),
        "--".to_string(),
        program,
    ];
    a.extend(args);
    a
}

/// Run as the bridge (`args` after [`ARG`]) and exit as the command did.
pub fn main(args: &[OsString]) -> ! {
    match run(args) {
        Ok(status) => {
            if let Some(sig) = status.signal() {
                // SAFETY: restoring the default action, then raising the signal, on ourselves.
                unsafe {
                    libc::signal(sig, libc::SIG_DFL);
                    libc::raise(sig);
                }
            }
            std::process::exit(status.code().unwrap_or(128));
        }
        Err(e) => {
            eprintln!("loopbox: the sandbox's network bridge failed: {e}");
            std::process::exit(126);
        }
    }
}

fn run(args: &[OsString]) -> Result<std::process::ExitStatus, String> {
    let s = |a: &OsString| a.to_string_lossy().into_owned();
    let [socket, port, unix, dashes, program, rest @ ..] = args else {
        return Err("usage: __egress-bridge SOCKET PORT unix|no-unix -- PROGRAM ARGS".into());
    };
    if dashes != "--" {
        return Err("usage: __egress-bridge SOCKET PORT unix|no-unix -- PROGRAM ARGS".into());
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot make itself undumpable: {}",
            std::io::Error::last_os_error()
        ));
    }
    let port: u16 = s(port).parse().map_err(|_| "a bad port".to_string())?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let socket = s(socket);
    let filters = super::command_filters(unix == "unix")?;
    // One thread carries every connection (a thread per connection cost each
    // one 2 to 3 ms on a busy machine, waiting for a core before anything
    // moved). The listener takes connections before it runs: the command
    // need not wait for it.
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        let _ = client.set_nodelay(true);
                        tokio::spawn(carry(client, socket.clone()));
                    }
                    // Out of descriptors: wait for connections to end.
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                }
            }
        });
    });
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    // SAFETY: only system calls on data made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for f in &filters {
                super::install_filter(f)?;
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run `{}`: {e}", s(program)))?;
    child
        .wait()
        .map_err(|e| format!("waiting for the command: {e}"))
}

/// Carry one connection both ways until both ends are done.
async fn carry(client: tokio::net::TcpStream, socket: String) {
    let Ok(proxy) = tokio::net::UnixStream::connect(&socket).await else {
        return;
    };
    let (up, down) = tokio::join!(
        splice::one_way(splice::Way::Splice, &client, &proxy, |_| true),
        splice::one_way(splice::Way::Splice, &proxy, &client, |_| true)
    );
    let _ = (up, down);
}
