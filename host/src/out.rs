//! Writing to stdout and stderr without ever panicking.
//!
//! `println!` panics when stdout is closed or its reader went away (exit 101).
//! loopbox writes through [`outln!`](crate::outln) and [`errln!`](crate::errln)
//! instead: a failed write to stdout is remembered, and the command's exit code
//! says so ([`stdout_failure`]); a failed write to stderr is dropped. At start-up
//! [`guard_std_fds`] puts `/dev/null` on any of fds 0-2 that is closed, so a file
//! loopbox opens later (the store) can never become stdout.

use std::fmt;
use std::io::Write;
use std::sync::Mutex;

static STDOUT_FAILURE: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Write one line to stdout; a failure is kept for [`stdout_failure`].
pub fn out_line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        let mut failure = STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(e);
    }
}

/// Write to stderr; there is nowhere to report a failure, so it is dropped.
pub fn err_write(args: fmt::Arguments<'_>, newline: bool) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| {
        if newline {
            err.write_all(b"\n")
        } else {
            Ok(())
        }
    });
}

/// Why stdout could not be written, unless its reader just went away (a
/// closed pipe, as with `| head`: what was not read was not wanted).
pub fn stdout_failure() -> Option<String> {
    let failure = STDOUT_FAILURE.lock().unwrap_or_else(|p| p.into_inner());
    failure
        .as_ref()
        .filter(|e| e.kind() != std::io::ErrorKind::BrokenPipe)
        .map(|e| e.to_string())
}

/// Open `/dev/null` on any of stdin, stdout and stderr that is closed.
pub fn guard_std_fds() {
    for fd in 0..=2 {
        // SAFETY: fcntl(F_GETFD) only queries the descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // open() returns the lowest free descriptor: this one.
            // SAFETY: open with a NUL-terminated constant path.
            let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if got != fd && got >= 0 {
                // SAFETY: closing the descriptor we just opened and do not keep.
                unsafe { libc::close(got) };
            }
        }
    }
}

/// `println!` that does not panic: see the module docs.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::out_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::out_line(format_args!($($arg)*)) };
}

/// `eprintln!` that does not panic.
#[macro_export]
macro_rules! errln {
    () => { $crate::out::err_write(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::out::err_write(format_args!($($arg)*), true) };
}

/// `eprint!` that does not panic.
#[macro_export]
macro_rules! errprint {
    ($($arg:tt)*) => { $crate::out::err_write(format_args!($($arg)*), false) };
}
