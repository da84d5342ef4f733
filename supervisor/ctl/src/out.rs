//! Everything supervisorctl prints on stdout goes through here.
//!
//! When the reader has gone away (`supervisorctl sessions --all | head -1`),
//! a write fails with EPIPE (Rust ignores SIGPIPE, so the process is not
//! killed by it): supervisorctl then exits at once, quietly, with status
//! 141, what a shell shows for a program SIGPIPE ended. Not 0: a command
//! whose output could not be written must not look as if it had reported
//! everything (`audit verify` of a broken chain piped into `head` still
//! fails). The crate denies `println!` (clippy::print_stdout), so no write
//! can bypass this.

use std::io::Write;

/// The exit status after the reader of stdout went away (128 + SIGPIPE).
pub const EXIT_BROKEN_PIPE: u8 = 141;

/// Exits quietly on a closed pipe; other results pass through.
fn quiet<T>(r: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(e) = &r
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(i32::from(EXIT_BROKEN_PIPE));
    }
    r
}

/// Writes formatted text to stdout (used by [`out!`] and [`outln!`]).
pub fn text(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut o = std::io::stdout().lock();
    let r = o
        .write_fmt(args)
        .and_then(|()| if newline { o.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| o.flush());
    if let Err(e) = quiet(r) {
        eprintln!("supervisorctl: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// stdout as a `Write`, for output written in pieces (sandbox exec, audit
/// tail, policy test).
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        quiet(std::io::stdout().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        quiet(std::io::stdout().write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        quiet(std::io::stdout().flush())
    }
}

/// `print!` that exits quietly when the reader went away.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::text(format_args!($($arg)*), false)
    };
}

/// `println!` that exits quietly when the reader went away.
macro_rules! outln {
    () => {
        $crate::out::text(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::out::text(format_args!($($arg)*), true)
    };
}
