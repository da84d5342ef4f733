//! Text shaping for the terminal and for the model: escaping what the model or the
//! workspace wrote before it reaches a terminal, truncating for display, and capping
//! tool results before they go back to the model.

/// Characters that reorder text on screen (bidi overrides and isolates, the marks):
/// a tool argument can use them to show one thing and mean another.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Escapes control characters (C0, C1, DEL: cursor moves, colours, OSC sequences)
/// and bidi controls, so text from the model or the workspace cannot repaint the
/// terminal or fake a prompt. Tabs stay; newlines stay only when `keep_newlines`.
pub fn escape_display(s: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            '\t' => out.push('\t'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || is_bidi_control(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// The first `max` characters of `s`, with an ellipsis and the count of what was
/// cut when it was longer.
pub fn truncate_chars(s: &str, max: usize) -> String {
    let total = s.chars().count();
    if total <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}… (+{} chars)", total - max)
}

/// One display line: truncated to `max` characters, then escaped (newlines shown
/// as `\n`), so it can never span or rewrite other lines.
pub fn one_line(s: &str, max: usize) -> String {
    escape_display(&truncate_chars(s, max), false)
}

/// Caps a tool result before it goes to the model: at most `cap` bytes, cut on a
/// char boundary, with a notice saying how much was left out and what to do.
/// Returns the text and whether it was cut.
pub fn cap_for_model(s: &str, cap: usize) -> (String, bool) {
    if s.len() <= cap {
        return (s.to_string(), false);
    }
    let mut end = cap;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let rest = s.len() - end;
    (
        format!(
            "{}\n[result truncated by the agent: {rest} more bytes not shown; read less at a time (offset/limit, a narrower pattern or command)]",
            &s[..end]
        ),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls_and_bidi() {
        let evil = "ok\x1b[2J\x1b]0;title\x07\u{202E}txt.exe\r\u{9b}31m";
        assert_eq!(
            escape_display(evil, true),
            "ok\\u{1b}[2J\\u{1b}]0;title\\u{7}\\u{202e}txt.exe\\r\\u{9b}31m"
        );
    }

    #[test]
    fn newlines_kept_or_escaped() {
        assert_eq!(escape_display("a\nb\tc", true), "a\nb\tc");
        assert_eq!(escape_display("a\nb\tc", false), "a\\nb\tc");
    }

    #[test]
    fn truncation_counts_chars_not_bytes() {
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert_eq!(truncate_chars("héllo wörld", 5), "héllo… (+6 chars)");
        let long = "x".repeat(500);
        let line = one_line(&long, 200);
        assert_eq!(line, format!("{}… (+300 chars)", "x".repeat(200)));
    }

    #[test]
    fn one_line_truncates_before_escaping() {
        assert_eq!(one_line("a\nb", 200), "a\\nb");
        assert_eq!(one_line("\x1b\x1b\x1b", 2), "\\u{1b}\\u{1b}… (+1 chars)");
    }

    #[test]
    fn cap_keeps_short_text_and_cuts_on_char_boundary() {
        assert_eq!(cap_for_model("short", 100), ("short".to_string(), false));
        let (text, cut) = cap_for_model("ééé", 3);
        assert!(cut);
        assert_eq!(
            text,
            "é\n[result truncated by the agent: 4 more bytes not shown; read less at a time (offset/limit, a narrower pattern or command)]"
        );
    }
}
