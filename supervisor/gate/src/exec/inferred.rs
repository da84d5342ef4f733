//! Refusals no kernel record names, inferred from a command's own error
//! messages (docs/THREAT_MODEL.md, "Refusals, attributed"): a write to the
//! sandbox's read-only root fails with `EROFS` before Landlock is asked, so
//! the only trace is the program's `Read-only file system` message. Each
//! such message that names a path is one refusal of the command, marked as
//! read from the output (a program may print the words for another
//! reason; the line and the record then say so): a `sandbox: ` line and a
//! `sandbox_denial` record (`inferred` `command_output`).
//!
//! Bounded whatever the output: a line is looked at up to [`MAX_LINE`]
//! bytes, and the refusals are a [`Refusals`] (distinct ones kept up to its
//! bound, the rest counted).

use tollgate_sandbox::refusal::{Access, Refusal, Refusals, Rule};

use super::notes::{WallNotes, shown_bytes};

/// strerror(EROFS), as every libc prints it.
const EROFS: &[u8] = b": Read-only file system";
/// Bytes of one line looked at, at most (a longer line's end is dropped:
/// the message is at its end, so such a line names no path it can show).
const MAX_LINE: usize = 8 << 10;

/// The read-only root's refusals read from one output stream, fed as it
/// comes: a message split across chunks is still seen whole.
#[derive(Debug, Default)]
pub struct ReadOnlyRoot {
    /// The line not yet ended (at most [`MAX_LINE`] bytes of it).
    line: Vec<u8>,
    /// The current line was longer than [`MAX_LINE`].
    overlong: bool,
    refusals: Refusals,
}

impl ReadOnlyRoot {
    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.extend(&rest[..nl]);
            self.end_line();
            rest = &rest[nl + 1..];
        }
        self.extend(rest);
    }

    /// The end of the stream: a last line without a newline counts too.
    pub fn finish(&mut self) -> &Refusals {
        if !self.line.is_empty() {
            self.end_line();
        }
        &self.refusals
    }

    /// All of `output` at once (run_bash's collected output).
    pub fn of(output: &[u8]) -> ReadOnlyRoot {
        let mut r = ReadOnlyRoot::default();
        r.feed(output);
        r.finish();
        r
    }

    /// Adds `other`'s (the command's other stream).
    pub fn merge(&mut self, other: &ReadOnlyRoot) {
        self.refusals.merge(&other.refusals);
    }

    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Adds their lines to `notes`.
    pub fn lines(&self, notes: &mut WallNotes) {
        for (refusal, n) in &self.refusals.distinct {
            let times = if *n > 1 {
                format!(", {n} times")
            } else {
                String::new()
            };
            notes.push(&format!(
                "denied write {}{times} ({}; {INFERRED_WORDS})",
                shown_bytes(&refusal.path),
                Rule::ReadOnlyRoot.words()
            ));
        }
    }

    fn extend(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.line.len());
        if bytes.len() > room {
            self.overlong = true;
        }
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn end_line(&mut self) {
        if !self.overlong
            && let Some(path) = erofs_path(&self.line)
        {
            self.refusals.add(Refusal {
                access: Access::Write,
                path: path.to_vec(),
                rule: Rule::ReadOnlyRoot,
                pid: None,
                program: None,
            });
        }
        self.line.clear();
        self.overlong = false;
    }
}

/// What the line says of where it came from.
pub const INFERRED_WORDS: &str = "from the command's error message";

/// The path of one `EROFS` message: the last quoted name before it
/// (coreutils: `touch: cannot touch '/usr/x': Read-only file system`), or
/// the last `: `-separated field (bash: `bash: /etc/x: Read-only file
/// system`; dash: `sh: 1: cannot create /etc/x: Read-only file system`).
/// Bytes, not text: a path need not be UTF-8.
fn erofs_path(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let at = rfind(line, EROFS)?;
    let head = &line[..at];
    let quoted = [
        (&b"'"[..], &b"'"[..]),
        ("‘".as_bytes(), "’".as_bytes()),
        (b"\"", b"\""),
        (b"`", b"'"),
    ]
    .iter()
    .find_map(|(open, close)| {
        let end = head.strip_suffix(*close)?;
        let start = rfind(end, open)?;
        Some(&end[start + open.len()..])
    });
    let path = quoted.unwrap_or_else(|| {
        let field = rfind(head, b": ").map_or(head, |i| &head[i + 2..]);
        field.strip_prefix(b"cannot create ").unwrap_or(field)
    });
    path.starts_with(b"/").then_some(path)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_messages_name_their_path() {
        for (line, path) in [
            (
                "touch: cannot touch '/usr/x': Read-only file system",
                "/usr/x",
            ),
            (
                "mkdir: cannot create directory ‘/etc/d’: Read-only file system",
                "/etc/d",
            ),
            ("bash: /etc/hosts: Read-only file system", "/etc/hosts"),
            ("bash: line 1: /etc/x1: Read-only file system", "/etc/x1"),
            (
                "sh: 1: cannot create /usr/lib/y: Read-only file system",
                "/usr/lib/y",
            ),
            ("bash: /etc/x: Read-only file system\r", "/etc/x"),
        ] {
            assert_eq!(erofs_path(line.as_bytes()), Some(path.as_bytes()), "{line}");
        }
        assert_eq!(erofs_path(b"mount: Read-only file system"), None);
        assert_eq!(erofs_path(b"no such words"), None);
        assert_eq!(
            erofs_path(b"bash: /usr/\xff\xfe: Read-only file system"),
            Some(&b"/usr/\xff\xfe"[..])
        );
    }

    #[test]
    fn lines_are_deduplicated_counted_escaped_and_capped() {
        let mut out = String::new();
        for i in 0..30 {
            out.push_str(&format!("bash: /etc/x{}: Read-only file system\n", i % 12));
        }
        out.push_str("bash: /etc/\u{1b}[31mred: Read-only file system\n");
        let r = ReadOnlyRoot::of(out.as_bytes());
        assert_eq!(r.refusals().total, 31);
        let mut notes = WallNotes::default();
        r.lines(&mut notes);
        let text = notes.render();
        assert_eq!(text.lines().count(), 11, "{text}");
        assert!(text.starts_with("sandbox: denied write /etc/x0, 3 times (the sandbox root is read-only; write inside the workspace; from the command's error message)\n"), "{text}");
        assert!(text.ends_with("sandbox: … and 3 more\n"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn a_message_split_across_chunks_is_seen_whole() {
        let msg = b"bash: line 1: /usr/tg-7: Read-only file system\nok\n";
        for cut in 0..msg.len() {
            let mut r = ReadOnlyRoot::default();
            r.feed(&msg[..cut]);
            r.feed(&msg[cut..]);
            let found = r.finish();
            assert_eq!(found.total, 1, "cut at {cut}");
            assert_eq!(found.distinct[0].0.path, b"/usr/tg-7");
        }
        let mut last = ReadOnlyRoot::default();
        last.feed(b"touch: cannot touch '/usr/a': Read-only file system");
        assert_eq!(last.finish().total, 1);
    }

    #[test]
    fn overlong_lines_and_many_messages_stay_bounded() {
        let mut r = ReadOnlyRoot::default();
        let mut long = vec![b'/'; MAX_LINE * 3];
        long.extend_from_slice(b": Read-only file system\n");
        r.feed(&long);
        assert!(r.line.capacity() <= MAX_LINE * 4);
        for i in 0..100_000 {
            r.feed(format!("bash: /usr/x{i}: Read-only file system\n").as_bytes());
        }
        let found = r.finish();
        assert_eq!(found.total, 100_000);
        assert_eq!(
            found.distinct.len(),
            tollgate_sandbox::refusal::MAX_DISTINCT
        );
    }
}
