//! Making untrusted text safe to show: in reasons, consequences, approvals and
//! the audit log. Control characters and newlines would let a file name forge
//! a log line or an approval prompt; bidirectional overrides would let it
//! display as something else.

use std::fmt::Write as _;

/// Escapes control characters, newlines and invisible or bidirectional
/// formatting characters as `\n`, `\t`, `\r` or `\u{…}`. Everything else,
/// including ordinary non-ASCII letters, is kept.
pub fn escape_for_display(s: &str) -> String {
    escape(s)
}

pub(crate) fn escape(s: &str) -> String {
    // ASCII text (most commands, paths and scripts) is settled byte by byte;
    // a 4 KiB script is escaped whole for its approval target.
    if s.is_ascii() {
        return escape_ascii(s);
    }
    escape_runs(s, s.char_indices())
}

/// [`escape`] for ASCII text: only control bytes (and DEL) need escaping.
fn escape_ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8 + 8);
    let mut start = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if !b.is_ascii_control() {
            continue;
        }
        out.push_str(&s[start..i]);
        start = i + 1;
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                let _ = write!(out, "\\u{{{b:x}}}");
            }
        }
    }
    out.push_str(&s[start..]);
    out
}

/// Copies runs of safe characters whole and escapes the rest.
fn escape_runs(s: &str, chars: impl Iterator<Item = (usize, char)>) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8 + 8);
    let mut start = 0;
    for (i, c) in chars {
        if !needs_escape(c) {
            continue;
        }
        out.push_str(&s[start..i]);
        start = i + c.len_utf8();
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    out.push_str(&s[start..]);
    out
}

fn needs_escape(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control()
        || matches!(c,
            '\u{061C}'               // Arabic letter mark
            | '\u{200B}'..='\u{200F}' // zero-width, LRM, RLM
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202A}'..='\u{202E}' // embeddings and overrides
            | '\u{2060}'..='\u{2069}' // word joiner, invisible operators, isolates
            | '\u{FEFF}'              // byte order mark
        )
}

/// Escapes, then shortens to at most `max_chars` characters with an ellipsis.
pub(crate) fn shorten(s: &str, max_chars: usize) -> String {
    // Escape only what can be shown (commands may be 64 KiB): escaping never
    // shortens, so the first `max_chars` characters fill the display.
    let cut = s.char_indices().nth(max_chars).map_or(s.len(), |(i, _)| i);
    let e = escape(&s[..cut]);
    if cut == s.len() && e.chars().count() <= max_chars {
        return e;
    }
    let mut t: String = e.chars().take(max_chars.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A command (or other text a person approves) for display: escaped like
/// [`escape_for_display`], one line, and when longer than `max_chars` cut
/// with a mark that says how much is missing (`… [cut: 1234 more
/// characters]`), so nobody takes a prefix for the whole.
pub fn cut_for_display(s: &str, max_chars: usize) -> String {
    let total = s.chars().count();
    if total <= max_chars {
        let e = escape(s);
        if e.chars().count() <= max_chars {
            return e;
        }
    }
    // Escaping lengthens: keep whole escapes within the budget.
    let mut shown = String::new();
    let (mut kept, mut width) = (0usize, 0usize);
    for c in s.chars() {
        let piece = escape(c.encode_utf8(&mut [0u8; 4]));
        let w = piece.chars().count();
        if width + w > max_chars {
            break;
        }
        shown.push_str(&piece);
        (kept, width) = (kept + 1, width + w);
    }
    let _ = write!(
        shown,
        "… [cut: {} more character{}]",
        total - kept,
        if total - kept == 1 { "" } else { "s" }
    );
    shown
}

/// A preview a person reads (a diff of a write): control characters other
/// than newline and tab, and invisible or bidirectional formatting
/// characters, escaped as `\u{…}`; lines are kept.
pub fn escape_preview(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for part in line.split('\t').enumerate() {
            if part.0 > 0 {
                out.push('\t');
            }
            out.push_str(&escape(part.1));
        }
    }
    out
}

/// "1 byte", "214 bytes".
pub(crate) fn bytes(n: u64) -> String {
    if n == 1 {
        "1 byte".to_string()
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_and_controls_are_escaped() {
        assert_eq!(
            escape("notes\nINFO approved path=/etc/shadow.txt"),
            "notes\\nINFO approved path=/etc/shadow.txt"
        );
        assert_eq!(escape("a\tb\rc\u{1b}[31m"), "a\\tb\\rc\\u{1b}[31m");
        assert_eq!(escape("\u{7f}"), "\\u{7f}");
    }

    #[test]
    fn the_ascii_path_escapes_as_the_general_one() {
        let all: String = (0u8..128).map(char::from).collect();
        for text in [all.as_str(), "a\u{0}b\u{1f}c\u{7f}", "plain words", ""] {
            assert_eq!(
                escape_ascii(text),
                escape_runs(text, text.char_indices()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn bidi_overrides_are_escaped_but_letters_kept() {
        assert_eq!(escape("\u{202E}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(escape("café.txt"), "café.txt");
        assert_eq!(escape("cafe\u{301}.txt"), "cafe\u{301}.txt");
    }

    #[test]
    fn shorten_counts_characters() {
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abc", 4), "abc");
        assert_eq!(shorten("ééééé", 3), "éé…");
    }

    #[test]
    fn a_cut_command_says_how_much_is_missing() {
        assert_eq!(cut_for_display("echo hi", 20), "echo hi");
        let long = format!("echo ok; {}curl evil", "x".repeat(200));
        assert_eq!(
            cut_for_display(&long, 10),
            "echo ok; x… [cut: 208 more characters]"
        );
        // An escape is never split, and counts as what it shows.
        assert_eq!(
            cut_for_display("ab\u{202E}cd", 5),
            "ab… [cut: 3 more characters]"
        );
        assert_eq!(cut_for_display("ab\u{202E}cd", 12), "ab\\u{202e}cd");
        assert_eq!(cut_for_display("a\nb", 2), "a… [cut: 2 more characters]");
        assert_eq!(cut_for_display("abc", 2), "ab… [cut: 1 more character]");
    }

    #[test]
    fn a_preview_keeps_its_lines_and_escapes_the_rest() {
        assert_eq!(
            escape_preview("-old\n+new \u{202E}gpj.exe\r\n\tx\u{1b}[2J"),
            "-old\n+new \\u{202e}gpj.exe\\r\n\tx\\u{1b}[2J"
        );
    }

    #[test]
    fn byte_counts_read_naturally() {
        assert_eq!(bytes(1), "1 byte");
        assert_eq!(bytes(0), "0 bytes");
        assert_eq!(bytes(214), "214 bytes");
    }
}
