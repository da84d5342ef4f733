//! Aligned tables for people; JSON for scripts.

use unicode_width::UnicodeWidthStr as _;

/// Prints rows as columns separated by two spaces, each as wide as its
/// widest cell on a terminal (display width: a CJK character takes two
/// columns, a combining mark none). Cells are escaped so a path cannot
/// forge a line.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
    for line in render(headers, rows) {
        outln!("{line}");
    }
}

/// The lines [`print`] prints, without trailing spaces.
fn render(headers: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let cols = headers.len();
    let mut lines: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    lines.extend(rows.iter().map(|r| r.iter().map(|c| escape(c)).collect()));
    let mut widths = vec![0usize; cols];
    for r in &lines {
        for (i, c) in r.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(c.width());
        }
    }
    lines
        .iter()
        .map(|cells| {
            let mut out = String::new();
            for (i, c) in cells.iter().enumerate() {
                out.push_str(c);
                if i + 1 < cells.len() {
                    let w = widths.get(i).copied().unwrap_or(0);
                    out.push_str(&" ".repeat(w.saturating_sub(c.width()) + 2));
                }
            }
            out.trim_end().to_string()
        })
        .collect()
}

/// Escapes control characters (log/terminal injection).
pub fn escape(s: &str) -> String {
    tollgate_policy::escape_for_display(s)
}

/// "12s ago", "3m ago" from a unix-ms timestamp.
pub fn ago(unix_ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let s = ((now - unix_ms) / 1000).max(0);
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// "in 4m" / "expired" for a deadline.
pub fn until(unix_ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let s = (unix_ms - now) / 1000;
    if s <= 0 {
        "due".to_string()
    } else if s < 60 {
        format!("in {s}s")
    } else {
        format!("in {}m", s / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::render;
    use unicode_width::UnicodeWidthStr as _;

    /// Columns line up by what a terminal shows: "日本語" takes six
    /// columns though it is three characters, "e\u{301}" (e and a
    /// combining acute accent) one though it is two.
    #[test]
    fn columns_align_by_display_width_with_wide_and_combining_characters() {
        let rows = vec![
            vec!["日本語".to_string(), "x".to_string()],
            vec!["e\u{301}te\u{301}".to_string(), "y".to_string()],
            vec!["ascii".to_string(), "z".to_string()],
        ];
        let lines = render(&["NAME", "V"], &rows);
        assert_eq!(
            lines,
            vec![
                "NAME    V".to_string(),
                "日本語  x".to_string(),
                "e\u{301}te\u{301}     y".to_string(),
                "ascii   z".to_string(),
            ]
        );
        // The second column starts at the same terminal column on every line.
        for l in &lines {
            let (first, _) = l.rsplit_once(' ').unwrap_or_default();
            assert_eq!(first.width() + 1, 8, "{l:?}");
        }
    }

    /// A control character is escaped before it is measured, so the
    /// padding counts what is printed.
    #[test]
    fn escaped_cells_are_measured_as_printed() {
        let rows = vec![vec!["a\nb".to_string(), "1".to_string()]];
        let lines = render(&["K", "V"], &rows);
        assert!(!lines[1].contains('\n'), "{:?}", lines[1]);
        let (cell, _) = lines[1].split_once("  ").unwrap_or_default();
        let value_column = lines[0].find('V').unwrap_or_default();
        assert_eq!(cell.width() + 2, value_column, "{lines:?}");
        assert_eq!(lines[1].find('1'), Some(value_column), "{lines:?}");
    }
}
