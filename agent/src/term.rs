//! The terminal: one stdin reader that hands lines to whoever waits (the REPL,
//! an approval prompt, a question), Ctrl-C, and where each kind of output goes.

use std::io::{BufRead, IsTerminal, Write};

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

/// Longest line accepted from stdin; the rest of a longer line is dropped.
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Lines from stdin, read by one dedicated thread (a blocked read on stdin must not
/// keep the async runtime from shutting down).
pub struct Stdin {
    rx: mpsc::Receiver<String>,
    eof: bool,
    pub is_tty: bool,
}

impl Stdin {
    /// Starts the reader thread.
    pub fn spawn() -> Stdin {
        let (tx, rx) = mpsc::channel::<String>(1);
        let is_tty = std::io::stdin().is_terminal();
        let spawned = std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || {
                let stdin = std::io::stdin();
                let mut lock = stdin.lock();
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match read_line_capped(&mut lock, &mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            while matches!(buf.last(), Some(b'\n' | b'\r')) {
                                buf.pop();
                            }
                            let line = String::from_utf8_lossy(&buf).into_owned();
                            if tx.blocking_send(line).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        Stdin {
            rx,
            eof: spawned.is_err(),
            is_tty,
        }
    }

    /// A reader with no input at all (for `agent demo` and `agent call`).
    pub fn closed() -> Stdin {
        let (_tx, rx) = mpsc::channel::<String>(1);
        Stdin {
            rx,
            eof: true,
            is_tty: false,
        }
    }

    pub fn at_eof(&self) -> bool {
        self.eof
    }

    /// The next line; `None` at end of input.
    pub async fn next_line(&mut self) -> Option<String> {
        if self.eof {
            return None;
        }
        match self.rx.recv().await {
            Some(l) => Some(l),
            None => {
                self.eof = true;
                None
            }
        }
    }

    /// Throws away input typed before a prompt appeared, so a keystroke meant for
    /// something else cannot answer an approval. Only on a terminal: piped input is
    /// a script of answers, in order.
    pub fn discard_typeahead(&mut self) {
        if !self.is_tty {
            return;
        }
        let _ = nix::sys::termios::tcflush(std::io::stdin(), nix::sys::termios::FlushArg::TCIFLUSH);
        while let Ok(_line) = self.rx.try_recv() {}
    }
}

fn read_line_capped(r: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let available = r.fill_buf()?;
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        if buf.len() < MAX_LINE_BYTES {
            let room = MAX_LINE_BYTES - buf.len();
            buf.extend_from_slice(&chunk[..n.min(room)]);
        }
        r.consume(n);
        total += n;
        if done {
            return Ok(total);
        }
    }
}

/// Ctrl-C. Installing the handler keeps SIGINT from killing the process, so a
/// turn can be aborted and the session closed cleanly.
pub struct CtrlC {
    sig: Option<Signal>,
}

impl CtrlC {
    pub fn install() -> CtrlC {
        CtrlC {
            sig: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// Resolves on the next Ctrl-C (never, if no handler could be installed).
    pub async fn recv(&mut self) {
        match self.sig.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Where the transcript goes. In an interactive session everything the user should
/// read is on stdout; with `-p` only the final answer (text) or the JSON object is,
/// and the transcript goes to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stdout,
    Stderr,
}

/// Writes one line to a sink, ignoring a closed pipe (the session still closes
/// cleanly when the reader of our output went away).
pub fn line(sink: Sink, text: &str) {
    match sink {
        Sink::Stdout => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
        Sink::Stderr => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{text}");
        }
    }
}

/// Writes a prompt (no newline) to stderr.
pub fn prompt(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{text}");
    let _ = err.flush();
}

/// A diagnostic line on stderr.
pub fn diag(text: &str) {
    line(Sink::Stderr, text);
}

/// An error on stderr as `agent: <message>`, escaped (messages can carry paths
/// and text from the workspace or the model).
pub fn error(e: &dyn std::fmt::Display) {
    diag(&format!(
        "agent: {}",
        crate::text::escape_display(&e.to_string(), false)
    ));
}
