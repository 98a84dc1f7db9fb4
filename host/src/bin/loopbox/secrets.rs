//! Keeping loopbox's own environment out of its children's reach.
//!
//! The kernel shows a process's initial environment block at
//! `/proc/PID/environ` to every process allowed to trace it for reading: a
//! command running as the same user (or as root) could read an API key meant
//! for the agent there, under Landlock, which has no PID namespace. Before
//! anything else runs, loopbox
//! - copies every variable to the heap (`setenv` allocates a new string for
//!   each, and the process's variables are read from there afterwards) and
//!   zeroes the initial block, so `/proc/PID/environ` holds nothing;
//! - makes itself non-dumpable, so that its `/proc/PID/` files (`environ`,
//!   `mem`, `maps`, ...) belong to root and only a process holding
//!   CAP_SYS_PTRACE can open them: no sandboxed child holds it.
//!
//! Children get their environment explicitly (`exec::child_env`), so they
//! lose nothing.

/// Scrub the initial environment block and turn off dumping. Call first in
/// `main`, while the process has one thread.
#[allow(clippy::disallowed_methods)] // moves the variables to the heap, before any thread or child
pub fn protect() {
    // SAFETY: prctl with integer arguments; it only changes this process's dumpable flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let Some((start, end)) = environment_block() else {
        return;
    };
    let vars: Vec<_> = std::env::vars_os().collect();
    for (key, value) in &vars {
        // SAFETY: called first in main, before any other thread exists, so no
        // one reads the environment while it changes.
        unsafe { std::env::set_var(key, value) };
    }
    // Every variable now lives on the heap; check that before zeroing.
    let inside = |p: usize| p >= start && p < end;
    // SAFETY: `environ` is the C library's array of variables, read while no
    // other thread can change it.
    let still_there = unsafe {
        let mut p = environ;
        let mut found = false;
        while !p.is_null() && !(*p).is_null() {
            found |= inside(*p as usize);
            p = p.add(1);
        }
        found
    };
    if still_there {
        return;
    }
    // SAFETY: [start, end) is this process's initial environment block, as the
    // kernel reports it; it is mapped writable (the initial stack) and nothing
    // points into it any more.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
}

unsafe extern "C" {
    static mut environ: *const *const libc::c_char;
}

/// `env_start` and `env_end` from `/proc/self/stat` (fields 50 and 51).
fn environment_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let start: usize = fields.get(50 - 3)?.parse().ok()?;
    let end: usize = fields.get(51 - 3)?.parse().ok()?;
    (start > 0 && end > start).then_some((start, end))
}
