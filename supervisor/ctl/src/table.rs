//! Aligned tables for people; JSON for scripts.

/// How `supervisorctl bench` (tollgate-bench) prints its report.
pub const BENCH_PRINTER: tollgate_bench::Printer = tollgate_bench::Printer {
    line: |args| crate::out::text(args, true),
    table: print,
    escape,
};

/// Prints rows as columns separated by two spaces, each as wide as its
/// widest cell. Cells are escaped so a path cannot forge a line.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
    let cols = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| escape(c)).collect())
        .collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        outln!("{}", out.trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
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
