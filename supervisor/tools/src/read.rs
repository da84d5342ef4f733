//! read_file: `cat -n` style output of a window of lines.
//!
//! The file is streamed: memory stays bounded whatever its size or line
//! length. A file with a NUL byte in its first 8 KiB, or a shown line that is
//! not UTF-8, is reported as binary and not dumped.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::fsops::open_regular_read;
use crate::paths::show_rel;
use crate::{ToolError, ToolOutput, cap_text, floor_char_boundary};

/// Lines shown when the caller gives no limit.
pub(crate) const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut (on a char boundary) with a marker.
pub(crate) const MAX_LINE_CHARS: usize = 2000;
/// Bytes kept of one line while reading (a char is at most 4 bytes).
const MAX_LINE_KEEP: usize = MAX_LINE_CHARS * 4;
/// The binary sniff window.
const SNIFF_BYTES: usize = 8192;

pub(crate) fn read_file(
    dir: &cap_std::fs::Dir,
    rel: &Path,
    offset: Option<u64>,
    limit: Option<u64>,
    cap: usize,
) -> Result<ToolOutput, ToolError> {
    let shown = show_rel(rel);
    if limit == Some(0) {
        return Err(ToolError::InvalidArgument(
            "limit must be at least 1 (it is a number of lines)".into(),
        ));
    }
    let (file, md) = open_regular_read(dir, rel, &shown)?;
    let size = md.len();
    let buffer = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .clamp(8 * 1024, 64 * 1024);
    let mut reader = BufReader::with_capacity(buffer, file);

    let head = reader
        .fill_buf()
        .map_err(|e| ToolError::from_io("read", &shown, e))?;
    if head.is_empty() {
        return Ok(ToolOutput {
            text: format!("(empty file: {shown} has 0 bytes)"),
            truncated: false,
        });
    }
    if head[..head.len().min(SNIFF_BYTES)].contains(&0) {
        return Ok(binary(size));
    }
    let mut window = Window {
        first: offset.unwrap_or(1).max(1),
        limit: limit.unwrap_or(DEFAULT_LIMIT),
        cap,
        size,
        shown,
        out: String::with_capacity(
            usize::try_from(size)
                .unwrap_or(usize::MAX)
                .saturating_add(1024)
                .min(cap.saturating_add(256)),
        ),
        lineno: 0,
        consumed: 0,
        last_shown: None,
        stopped_early: false,
        cut_by_cap: false,
    };
    if let Some(early) = window.read_lines(&mut reader)? {
        return Ok(early);
    }
    Ok(window.finish())
}

/// The window of lines being shown, as it is read.
struct Window {
    /// The first line to show (1-based) and how many.
    first: u64,
    limit: u64,
    cap: usize,
    size: u64,
    shown: String,
    out: String,
    lineno: u64,
    /// Bytes of the file read up to the last line shown.
    consumed: u64,
    last_shown: Option<u64>,
    /// Stopped at `limit` lines.
    stopped_early: bool,
    /// Stopped at `cap` bytes of output.
    cut_by_cap: bool,
}

impl Window {
    /// Reads lines until the window is full or the file ends. Returns the
    /// whole answer when a line ends it early (not UTF-8, or not even the
    /// first line fits in `cap`).
    fn read_lines<R: Read>(
        &mut self,
        reader: &mut BufReader<R>,
    ) -> Result<Option<ToolOutput>, ToolError> {
        let mut line = Vec::with_capacity(256);
        loop {
            let keep = self.lineno + 1 >= self.first;
            let Some(read) = read_line(reader, &mut line, keep, &self.shown)? else {
                return Ok(None);
            };
            self.lineno += 1;
            if !keep {
                self.consumed += read.total;
                continue;
            }
            if self.lineno >= self.first.saturating_add(self.limit) {
                self.stopped_early = true;
                return Ok(None);
            }
            let was_cut = read.content_len > line.len() as u64;
            let Some(text) = line_text(&line, was_cut) else {
                let mut text = binary(self.size).text;
                text.push_str(&format!(": line {} is not valid UTF-8", self.lineno));
                return Ok(Some(ToolOutput {
                    text,
                    truncated: false,
                }));
            };
            match self.show(text, &read) {
                Shown::Added => {}
                Shown::Full => return Ok(None),
                Shown::Alone(capped) => return Ok(Some(capped)),
            }
        }
    }

    /// Adds one line (cut to [`MAX_LINE_CHARS`], with a marker) if it fits.
    fn show(&mut self, text: &str, read: &LineRead) -> Shown {
        let lineno = self.lineno;
        let kept = capped_line(text);
        let dropped = read.content_len - kept.len() as u64;
        let marker = if dropped > 0 {
            format!(" … [line truncated: {dropped} more bytes]")
        } else {
            String::new()
        };
        // `{lineno:>6}\t{kept}{marker}\n`, sized before it is written.
        let entry_len = decimal_len(lineno).max(6) + 1 + kept.len() + marker.len() + 1;
        if self.out.len() + entry_len > self.cap {
            if self.out.is_empty() {
                // Not even one line fits: cap the line itself.
                let entry = format!("{lineno:>6}\t{kept}{marker}\n");
                let mut capped = cap_text(&entry, self.cap, "");
                capped.truncated = true;
                return Shown::Alone(capped);
            }
            self.cut_by_cap = true;
            return Shown::Full;
        }
        push_line_number(&mut self.out, lineno);
        self.out.push('\t');
        self.out.push_str(kept);
        self.out.push_str(&marker);
        self.out.push('\n');
        self.consumed += read.total;
        self.last_shown = Some(lineno);
        Shown::Added
    }

    /// The lines shown, and where to read on when some were not.
    fn finish(mut self) -> ToolOutput {
        let (first, cap, shown) = (self.first, self.cap, &self.shown);
        let Some(last) = self.last_shown else {
            return ToolOutput {
                text: format!(
                    "(no lines to show: {shown} has {} lines and offset was {first})",
                    self.lineno
                ),
                truncated: false,
            };
        };
        let remaining = self.size.saturating_sub(self.consumed);
        if (self.stopped_early || self.cut_by_cap) && remaining > 0 {
            let why = if self.cut_by_cap {
                format!("output truncated at {cap} bytes")
            } else {
                format!("showing lines {first}-{last}")
            };
            self.out.push_str(&format!(
                "[{why}: {remaining} more bytes of {shown} after line {last} not shown; use offset={} to read more]",
                last + 1
            ));
            return ToolOutput {
                text: self.out,
                truncated: true,
            };
        }
        ToolOutput {
            text: self.out,
            truncated: false,
        }
    }
}

/// What [`Window::show`] did with a line.
enum Shown {
    Added,
    /// It did not fit: the window is full.
    Full,
    /// Not even the first line fits: this is the whole answer.
    Alone(ToolOutput),
}

fn binary(size: u64) -> ToolOutput {
    ToolOutput {
        text: format!("binary file ({size} bytes, not shown)"),
        truncated: false,
    }
}

struct LineRead {
    /// Bytes consumed from the file, newline included.
    total: u64,
    /// Bytes of the line without its newline.
    content_len: u64,
}

/// Reads one line. When `keep`, the first [`MAX_LINE_KEEP`] bytes (without
/// the newline) go into `buf`; the rest is skipped. `None` at end of file.
fn read_line<R: Read>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    keep: bool,
    shown: &str,
) -> Result<Option<LineRead>, ToolError> {
    buf.clear();
    let mut total: u64 = 0;
    let mut newline = false;
    loop {
        let chunk = reader
            .fill_buf()
            .map_err(|e| ToolError::from_io("read", shown, e))?;
        if chunk.is_empty() {
            break;
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if keep {
            let content = if done {
                &chunk[..take - 1]
            } else {
                &chunk[..take]
            };
            let room = MAX_LINE_KEEP.saturating_sub(buf.len());
            buf.extend_from_slice(&content[..content.len().min(room)]);
        }
        reader.consume(take);
        total += take as u64;
        if done {
            newline = true;
            break;
        }
    }
    if total == 0 {
        return Ok(None);
    }
    let content_len = if newline { total - 1 } else { total };
    Ok(Some(LineRead { total, content_len }))
}

/// The line as text. A line cut while reading may end inside a char: that
/// tail is dropped. Any other invalid UTF-8 gives `None`.
fn line_text(line: &[u8], was_cut: bool) -> Option<&str> {
    match std::str::from_utf8(line) {
        Ok(s) => Some(s),
        Err(e) if was_cut && e.error_len().is_none() => {
            std::str::from_utf8(&line[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    }
}

/// At most [`MAX_LINE_CHARS`] chars of `text`.
fn capped_line(text: &str) -> &str {
    if text.len() <= MAX_LINE_CHARS {
        // Fewer bytes than the limit: fewer chars too.
        return text;
    }
    match text.char_indices().nth(MAX_LINE_CHARS) {
        None => text,
        Some((at, _)) => &text[..floor_char_boundary(text, at)],
    }
}

/// Digits of `n` in decimal.
fn decimal_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// Appends `n` right-aligned in 6 columns (`cat -n` style), like
/// `{n:>6}` without the formatting machinery (this runs once per line).
fn push_line_number(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for _ in (digits.len() - start)..6 {
        out.push(' ');
    }
    for &d in &digits[start..] {
        out.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers_match_the_format_macro() {
        for n in [0u64, 1, 9, 10, 99_999, 999_999, 1_000_000, u64::MAX] {
            let mut s = String::new();
            push_line_number(&mut s, n);
            assert_eq!(s, format!("{n:>6}"));
            assert_eq!(decimal_len(n), n.to_string().len());
        }
    }
}
