//! tollgate-tools: the tools that run on the supervisor's side of the wall.
//!
//! File tools (read_file, write_file, edit_file, glob_files, grep) run as the
//! session owner, beneath the workspace, with the kernel enforcing "beneath"
//! (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS through cap-std), so a
//! symlink swapped in after the policy check cannot escape. They run on the
//! session's own worker threads, whose filesystem uid/gid and supplementary
//! groups are the session owner's (switched once, never back), so files they
//! create belong to the owner and the owner's permissions apply. Writes are
//! atomic (temp file, fsync, rename beneath). webfetch connects only to addresses the policy vetted, follows no redirect
//! by itself and re-vets every hop.
//!
//! It makes no policy decisions: the daemon's `pep.rs` decides, then calls
//! here. It must never open a path that is not beneath the workspace, never run
//! a file operation with the supervisor's own credentials when the supervisor
//! is root, and never connect to an address the policy did not vet.

#![forbid(unsafe_code)]

mod diff;
mod error;
mod fetch;
mod fsops;
mod html;
mod owner;
mod paths;
mod read;
mod search;
mod workspace;

pub use error::ToolError;
pub use fetch::{FetchLimits, HopVetter, webfetch};
pub use paths::display_path;
pub use workspace::Workspace;

/// What a tool returns to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    /// Some of the output was not shown (capped, a line or byte limit hit).
    pub truncated: bool,
}

/// The default output cap (docs/ARCHITECTURE.md "Reference"): 32 KiB.
pub const DEFAULT_OUTPUT_CAP: usize = 32 * 1024;

/// Caps `text` at `cap` bytes on a char boundary. When it cuts, it appends a
/// notice naming how many bytes were left out:
/// `"\n[output truncated: 12345 more bytes not shown; use offset/limit to read more]"`.
/// `notice_hint` replaces the part after the semicolon (empty = the
/// offset/limit hint). The notice is added after the `cap` bytes, so the
/// result is at most `cap` plus the notice's length (under 200 bytes).
pub fn cap_text(text: &str, cap: usize, notice_hint: &str) -> ToolOutput {
    if text.len() <= cap {
        return ToolOutput {
            text: text.to_string(),
            truncated: false,
        };
    }
    let cut = floor_char_boundary(text, cap);
    let hint = if notice_hint.is_empty() {
        "use offset/limit to read more"
    } else {
        notice_hint
    };
    let mut out = String::with_capacity(cut + 96);
    out.push_str(&text[..cut]);
    out.push_str(&format!(
        "\n[output truncated: {} more bytes not shown; {hint}]",
        text.len() - cut
    ));
    ToolOutput {
        text: out,
        truncated: true,
    }
}

/// The largest index `<= index` that lies on a char boundary of `s`.
pub(crate) fn floor_char_boundary(s: &str, index: usize) -> usize {
    if index >= s.len() {
        return s.len();
    }
    let mut i = index;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_text_short_text_is_unchanged() {
        assert_eq!(
            cap_text("hello", 5, ""),
            ToolOutput {
                text: "hello".into(),
                truncated: false
            }
        );
    }

    #[test]
    fn cap_text_cuts_on_a_char_boundary_and_counts_the_rest() {
        // "é" is two bytes: a cap of 2 falls inside the second char.
        let out = cap_text("aéb", 2, "");
        assert_eq!(
            out,
            ToolOutput {
                text:
                    "a\n[output truncated: 3 more bytes not shown; use offset/limit to read more]"
                        .into(),
                truncated: true
            }
        );
    }

    #[test]
    fn cap_text_uses_the_given_hint() {
        let out = cap_text("abcdef", 3, "narrow the pattern");
        assert_eq!(
            out.text,
            "abc\n[output truncated: 3 more bytes not shown; narrow the pattern]"
        );
    }

    #[test]
    fn floor_char_boundary_never_splits_a_char() {
        let s = "a😀b";
        for i in 0..=s.len() + 2 {
            let b = floor_char_boundary(s, i);
            assert!(s.is_char_boundary(b) && b <= i.min(s.len()));
        }
    }
}
