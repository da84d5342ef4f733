//! `supervisorctl audit tail SESSION`: find a session's file(s) and follow
//! new records as they are appended, checking the chain as it goes.
//!
//! Everything printed is escaped for a terminal: records are re-encoded
//! with the log's own escaping, and a line that does not parse is shown with
//! its control, C1 and bidi characters escaped.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::AuditError;
use crate::chain::{ChainChecker, Problem, Record};
use crate::event::{Event, Parsed};
use crate::names::{FileKind, list_logs, valid_session};
use crate::record::{needs_extra_escape, to_safe_json};

/// The session's audit files in `dir`, oldest first (a session normally has
/// one; a new one is started if its file broke).
pub fn session_files(dir: &Path, session: &str) -> Result<Vec<PathBuf>, AuditError> {
    if !valid_session(session) {
        return Err(AuditError::InvalidSession {
            session: session.chars().take(80).collect(),
        });
    }
    Ok(list_logs(dir)?
        .into_iter()
        .filter(|(n, _)| matches!(&n.kind, FileKind::Session(s) if s == session))
        .map(|(_, p)| p)
        .collect())
}

/// The supervisor's logs in `dir`, oldest first.
pub fn supervisor_files(dir: &Path) -> Result<Vec<PathBuf>, AuditError> {
    Ok(list_logs(dir)?
        .into_iter()
        .filter(|(n, _)| n.kind == FileKind::Supervisor)
        .map(|(_, p)| p)
        .collect())
}

/// The session's newest audit file.
pub fn latest_session_file(dir: &Path, session: &str) -> Result<PathBuf, AuditError> {
    session_files(dir, session)?
        .pop()
        .ok_or_else(|| AuditError::NoSessionFile {
            dir: dir.to_path_buf(),
            session: session.to_string(),
        })
}

/// One line read by a [`Follower`].
#[derive(Debug, Clone, PartialEq)]
pub enum TailItem {
    /// A record that chains onto the previous one.
    Record { line: u64, record: Record },
    /// A line that breaks the chain (or follows a break: once broken, lines
    /// are shown but no longer checked).
    Broken {
        line: u64,
        problem: Option<Problem>,
        /// The raw line, escaped for a terminal.
        text: String,
    },
}

/// Follows one file from its start, returning new complete lines on each poll.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: File,
    consumed: u64,
    pending: Vec<u8>,
    line: u64,
    checker: Option<ChainChecker>,
}

impl Follower {
    pub fn open(path: &Path) -> Result<Follower, AuditError> {
        let file = File::open(path).map_err(|e| AuditError::io(path, e))?;
        Ok(Follower {
            path: path.to_path_buf(),
            file,
            consumed: 0,
            pending: Vec::new(),
            line: 0,
            checker: Some(ChainChecker::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether every line so far chained correctly.
    pub fn intact(&self) -> bool {
        self.checker.is_some()
    }

    /// Reads what was appended since the last poll. A partial last line is
    /// held back until its newline arrives.
    pub fn poll(&mut self) -> Result<Vec<TailItem>, AuditError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| AuditError::io(&self.path, e))?
            .len();
        let mut items = Vec::new();
        if len < self.consumed {
            self.checker = None;
            items.push(TailItem::Broken {
                line: self.line + 1,
                problem: None,
                text: format!(
                    "(file shrank from {} to {len} bytes while being followed)",
                    self.consumed
                ),
            });
            self.consumed = len;
            return Ok(items);
        }
        let mut buf = Vec::new();
        self.file
            .read_to_end(&mut buf)
            .map_err(|e| AuditError::io(&self.path, e))?;
        self.consumed += buf.len() as u64;
        self.pending.extend_from_slice(&buf);
        let mut start = 0;
        while let Some(i) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + i];
            self.line += 1;
            let item = match &mut self.checker {
                Some(checker) => match checker.check(line) {
                    Ok(record) => TailItem::Record {
                        line: self.line,
                        record,
                    },
                    Err(problem) => {
                        self.checker = None;
                        TailItem::Broken {
                            line: self.line,
                            problem: Some(problem),
                            text: sanitize(&String::from_utf8_lossy(line)),
                        }
                    }
                },
                None => TailItem::Broken {
                    line: self.line,
                    problem: None,
                    text: sanitize(&String::from_utf8_lossy(line)),
                },
            };
            items.push(item);
            start += i + 1;
        }
        self.pending.drain(..start);
        Ok(items)
    }
}

/// Escapes control characters, DEL, C1 controls and bidi/invisible
/// formatting characters as `\u{…}`, so a line cannot drive the terminal.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || needs_extra_escape(c) {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Longest value shown in full by [`format_record`].
pub const MAX_VALUE_CHARS: usize = 200;

/// One human line: `TS #SEQ EVENT key=value …` (values JSON-encoded,
/// long ones cut with a note of how much was left out).
pub fn format_record(rec: &Record) -> String {
    let mut out = format!("{} #{} {}", rec.ts, rec.seq, sanitize(&rec.event));
    if !rec.session.is_empty() {
        out.push_str(&format!(" session={}", to_safe_json(&rec.session)));
    }
    for (k, v) in &rec.fields {
        let shown = match v {
            Value::String(s) if s.chars().count() > MAX_VALUE_CHARS => {
                let head: String = s.chars().take(MAX_VALUE_CHARS).collect();
                format!(
                    "{}…(+{} chars)",
                    to_safe_json(&head),
                    s.chars().count() - MAX_VALUE_CHARS
                )
            }
            other => {
                let j = to_safe_json(other);
                if j.chars().count() > MAX_VALUE_CHARS * 2 {
                    let head: String = j.chars().take(MAX_VALUE_CHARS * 2).collect();
                    format!("{head}…")
                } else {
                    j
                }
            }
        };
        out.push_str(&format!(" {}={shown}", sanitize(k)));
    }
    out
}

/// How [`follow_session`] prints.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// How often to look for new records.
    pub poll: Duration,
    /// Print each record as its JSON line instead of [`format_record`].
    pub json: bool,
    /// Return after a `session_closed` record instead of following forever.
    pub until_closed: bool,
}

impl Default for FollowOptions {
    fn default() -> FollowOptions {
        FollowOptions {
            poll: Duration::from_millis(200),
            json: false,
            until_closed: false,
        }
    }
}

/// Prints a session's log from its start and follows it: new records as
/// they arrive, a newer file for the same session when one appears, a
/// `!! line N: …` line where the chain breaks. Returns when `stop()` says so,
/// or after `session_closed` with `until_closed`. Returns whether every line
/// chained correctly.
pub fn follow_session(
    dir: &Path,
    session: &str,
    opts: &FollowOptions,
    out: &mut dyn Write,
    stop: &dyn Fn() -> bool,
) -> Result<bool, AuditError> {
    let mut path = latest_session_file(dir, session)?;
    let mut follower = Follower::open(&path)?;
    let mut intact = true;
    let stdout_err = |e: std::io::Error| AuditError::io(Path::new("<output>"), e);
    loop {
        let items = follower.poll()?;
        let got = !items.is_empty();
        let mut closed = false;
        for item in items {
            match item {
                TailItem::Record { record, .. } => {
                    if let Parsed::Known(Event::SessionClosed(_)) = record.event() {
                        closed = true;
                    }
                    if opts.json {
                        writeln!(out, "{}", record_json(&record)).map_err(stdout_err)?;
                    } else {
                        writeln!(out, "{}", format_record(&record)).map_err(stdout_err)?;
                    }
                }
                TailItem::Broken {
                    line,
                    problem,
                    text,
                } => {
                    intact = false;
                    match problem {
                        Some(p) => writeln!(out, "!! line {line}: {p}: {text}"),
                        None => writeln!(out, "!! line {line} (unchecked): {text}"),
                    }
                    .map_err(stdout_err)?;
                }
            }
        }
        out.flush().map_err(stdout_err)?;
        if (closed && opts.until_closed) || stop() {
            return Ok(intact && follower.intact());
        }
        if !got {
            let newest = latest_session_file(dir, session)?;
            if newest != path {
                path = newest;
                follower = Follower::open(&path)?;
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                writeln!(out, "== {} ==", sanitize(&name.unwrap_or_default()))
                    .map_err(stdout_err)?;
                continue;
            }
            std::thread::sleep(opts.poll);
        }
    }
}

/// A record as one JSON line again (the writer-owned members first), escaped
/// for a terminal.
pub fn record_json(rec: &Record) -> String {
    let mut out = format!(
        "{{\"seq\":{},\"ts\":{},\"session\":{},\"event\":{}",
        rec.seq,
        to_safe_json(&rec.ts),
        to_safe_json(&rec.session),
        to_safe_json(&rec.event)
    );
    for (k, v) in &rec.fields {
        out.push_str(&format!(",{}:{}", to_safe_json(k), to_safe_json(v)));
    }
    out.push_str(&format!(",\"hash\":{}}}", to_safe_json(&rec.hash)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_terminal_controls() {
        assert_eq!(
            sanitize("ok\u{1b}[2J\r\n\u{9b}x\u{202e}y"),
            "ok\\u{001b}[2J\\u{000d}\\u{000a}\\u{009b}x\\u{202e}y"
        );
        assert_eq!(sanitize("plain é ✓"), "plain é ✓");
    }
}
