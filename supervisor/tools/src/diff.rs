//! Unified diffs for approval previews.

use std::time::Duration;

use similar::TextDiff;

use crate::floor_char_boundary;

/// How long the diff algorithm may search before it settles for a coarser
/// (still correct) diff: bounds pathological inputs.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// A unified diff (3 lines of context) from `old` (`None`: the file does not
/// exist yet) to `new`, with `a/PATH` / `b/PATH` headers, capped at `cap`
/// bytes on a line boundary with a `… diff truncated` line.
pub(crate) fn unified(old: Option<&str>, new: &str, shown: &str, cap: usize) -> String {
    let (a, old_text) = match old {
        Some(text) => (format!("a/{shown}"), text),
        None => ("/dev/null".to_string(), ""),
    };
    if old == Some(new) {
        return format!("(no changes to {shown})\n");
    }
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old_text, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&a, &format!("b/{shown}"))
        .to_string();
    cap_diff(text, cap)
}

/// Caps a diff at `cap` bytes, cutting after a whole line when there is one.
pub(crate) fn cap_diff(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut cut = floor_char_boundary(&text, cap);
    if let Some(nl) = text[..cut].rfind('\n') {
        cut = nl + 1;
    }
    let mut out = text[..cut].to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "… diff truncated ({} more bytes not shown)\n",
        text.len() - cut
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_a_unified_diff_with_headers() {
        let d = unified(Some("a\nb\nc\n"), "a\nB\nc\n", "src/x.txt", 10_000);
        assert_eq!(
            d,
            "--- a/src/x.txt\n+++ b/src/x.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
    }

    #[test]
    fn a_new_file_diffs_against_dev_null() {
        let d = unified(None, "hello\n", "new.txt", 10_000);
        assert_eq!(d, "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n");
    }

    #[test]
    fn no_change_says_so() {
        assert_eq!(unified(Some("x\n"), "x\n", "f", 100), "(no changes to f)\n");
    }

    #[test]
    fn a_long_diff_is_cut_on_a_line_with_a_notice() {
        let new: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let d = unified(None, &new, "big.txt", 200);
        let (body, notice) = d.rsplit_once("… diff truncated (").unwrap();
        assert!(body.len() <= 200 && body.ends_with('\n'), "{body:?}");
        assert!(notice.ends_with("more bytes not shown)\n"), "{notice:?}");
    }
}
