//! Parses every file under the given directories with the vendored
//! brush-parser and with the published 0.4.0, with extglob off and on, and
//! compares the two results' Debug text (the whole tree or the error, source
//! positions included). Exits 1 if any differ. Inputs the vendored crate
//! refuses as too complex, those the published one cannot parse within 2 s
//! (it backtracks exponentially on some, and never returns on one), and those
//! on which it panics while the vendored one does not, are counted, not
//! compared. The published crate runs in a child process (this program with
//! `--published-server`), killed and restarted when a parse overruns: a
//! thread left spinning would slow every later parse.
//!
//! cargo run --release --manifest-path scripts/brush-diff/Cargo.toml -- \
//!     supervisor/policy/fuzz/corpus/shell_command

use std::io::{BufRead, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// `fn $name(script, extglob) -> String`: the Debug text of what crate
/// `$krate` makes of the script ("panic" if it panics). One body for both
/// crates, whose types are distinct.
macro_rules! parse_with {
    ($name:ident, $krate:ident) => {
        fn $name(s: &str, extglob: bool) -> String {
            let o = $krate::ParserOptions {
                enable_extended_globbing: extglob,
                ..Default::default()
            };
            std::panic::catch_unwind(|| {
                format!(
                    "{:?}",
                    $krate::Parser::new(s.as_bytes(), &o).parse_program()
                )
            })
            .unwrap_or_else(|_| "panic".to_string())
        }
    };
}

parse_with!(vendored, brush_parser);
parse_with!(published, brush_parser_published);

/// The child's side: each request is a line `EXTGLOB LEN` then LEN bytes;
/// each answer one line (Debug text escapes newlines).
fn published_server() -> ExitCode {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let mut header = String::new();
    loop {
        header.clear();
        if input.read_line(&mut header).unwrap_or(0) == 0 {
            return ExitCode::SUCCESS;
        }
        let mut fields = header.split_whitespace();
        let extglob = fields.next() == Some("1");
        let len: usize = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let mut bytes = vec![0; len];
        if input.read_exact(&mut bytes).is_err() {
            return ExitCode::FAILURE;
        }
        let text = String::from_utf8_lossy(&bytes);
        let answer = published(&text, extglob).replace('\n', "\\n");
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
}

/// The published crate in a child process.
struct Published {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
}

impl Published {
    fn start() -> Published {
        let exe = std::env::current_exe().expect("own path");
        let mut child = Command::new(exe)
            .arg("--published-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the published-crate child");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Published {
            child,
            stdin,
            answers,
        }
    }

    /// The published crate's answer, or `None` after 2 s (the child is then
    /// killed and a fresh one started).
    fn parse(&mut self, text: &str, extglob: bool) -> Option<String> {
        let sent = writeln!(self.stdin, "{} {}", u8::from(extglob), text.len())
            .and_then(|()| self.stdin.write_all(text.as_bytes()))
            .and_then(|()| self.stdin.flush());
        let answer = match sent {
            Ok(()) => self.answers.recv_timeout(Duration::from_secs(2)).ok(),
            Err(_) => None,
        };
        if answer.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            *self = Published::start();
        }
        answer
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() -> ExitCode {
    // brush-parser may panic on odd input; both sides are caught and compared.
    std::panic::set_hook(Box::new(|_| {}));
    if std::env::args().nth(1).as_deref() == Some("--published-server") {
        return published_server();
    }
    let mut published_child = Published::start();
    let (mut parses, mut errors, mut differ) = (0u64, 0u64, 0u64);
    let (mut cut, mut slow, mut panicked) = (0u64, 0u64, 0u64);
    for dir in std::env::args().skip(1) {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("brush-diff: {dir}: {e}");
                return ExitCode::FAILURE;
            }
        };
        for entry in entries.flatten() {
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes).into_owned();
            for input in [
                text.clone(),
                format!("{text}\n{text}"),
                text.replace('\0', " "),
            ] {
                for extglob in [false, true] {
                    let v = vendored(&input, extglob);
                    if v.starts_with("Err(TooComplex") {
                        // Over the vendored parser's step budget (patch 9):
                        // the published one may backtrack for hours here.
                        cut += 1;
                        continue;
                    }
                    // The published crate backtracks exponentially on some
                    // inputs (patch 9) and never returns on one (patch 10).
                    let Some(p) = published_child.parse(&input, extglob) else {
                        slow += 1;
                        continue;
                    };
                    let v = v.replace('\n', "\\n");
                    if p == "panic" && v != "panic" {
                        // 0.4.0 panicked where the vendored copy parses or
                        // reports an error (patch 11).
                        panicked += 1;
                        continue;
                    }
                    parses += 1;
                    errors += u64::from(!v.starts_with("Ok"));
                    if v != p {
                        differ += 1;
                        if differ <= 5 {
                            eprintln!(
                                "differs on {input:?} (extglob {extglob}):\n vendored:  {v:.300}\n published: {p:.300}"
                            );
                        }
                    }
                }
            }
        }
    }
    println!(
        "{parses} parses compared ({errors} of them errors), {differ} differ; not compared: {cut} over the vendored step budget, {slow} the published crate did not finish in 2 s, {panicked} on which it panicked"
    );
    if differ == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
