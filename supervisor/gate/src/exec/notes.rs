//! The block of lines a command's result ends with when a wall of the
//! sandbox stopped something (docs/INTERFACES.md, "The `sandbox: ` block"):
//! each line begins `sandbox: `, says what was denied and the rule of
//! tollgate's that denied it, in words; lines are deduplicated and at most
//! [`MAX_LINES`] are shown, then `sandbox: … and N more`. Anything a
//! sandboxed program chose (paths, names) is escaped: no control
//! character, terminal escape or invalid UTF-8 reaches the reader as is.
//!
//! Other walls add their own lines to the same block ([`WallNotes::push`]).

use tollgate_sandbox::refusal::Refusals;

/// Lines shown before `… and N more`.
pub const MAX_LINES: usize = 10;
/// Characters of a path or program name shown, at most.
const MAX_NAME: usize = 160;

/// The `sandbox: ` lines of one command, in the order first seen.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WallNotes {
    lines: Vec<String>,
    /// Lines past [`MAX_LINES`], and refusals counted but not listed.
    more: u64,
    /// The lines past [`MAX_LINES`] already counted (hashed), so a repeated
    /// one is not counted twice (bounded: lines come from a bounded list).
    counted: std::collections::HashSet<u64>,
}

impl WallNotes {
    /// Adds one line (`text` without the `sandbox: ` prefix); an equal
    /// line already there is not added again.
    pub fn push(&mut self, text: &str) {
        let line = format!("sandbox: {text}");
        if self.lines.contains(&line) {
            return;
        }
        if self.lines.len() < MAX_LINES {
            self.lines.push(line);
        } else if self.counted.insert(hash(&line)) {
            self.more += 1;
        }
    }

    /// The lines for a command's attributed refusals.
    pub fn from_refusals(r: &Refusals) -> WallNotes {
        let mut notes = WallNotes::default();
        // First, so the cap never hides it.
        if r.lost > 0 {
            notes.push(&format!(
                "{} refusal records were lost (the kernel's audit queue overflowed): the list may be incomplete",
                r.lost
            ));
        }
        for (refusal, n) in &r.distinct {
            let mut text = format!(
                "denied {} {}",
                refusal.access.as_str(),
                shown(&refusal.path, "(unnamed)")
            );
            if let Some(p) = &refusal.program {
                text.push_str(&format!(" to {}", shown(p, "?")));
            }
            if *n > 1 {
                text.push_str(&format!(", {n} times"));
            }
            text.push_str(&format!(" ({})", refusal.rule.words()));
            notes.push(&text);
        }
        notes.more += r.not_kept();
        notes
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The block, each line ending in a newline; empty when nothing was
    /// refused.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(l);
            out.push('\n');
        }
        if self.more > 0 {
            out.push_str(&format!("sandbox: … and {} more\n", self.more));
        }
        out
    }

    /// `text` with the block appended on lines of its own.
    pub fn append_to(&self, text: &mut String) {
        if self.is_empty() {
            return;
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&self.render());
    }
}

fn hash(line: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut h);
    h.finish()
}

/// Raw bytes for a record or a line: invalid UTF-8 as `\xNN`, control
/// and invisible characters escaped, cut to [`MAX_NAME`] characters.
pub(crate) fn shown_bytes(bytes: &[u8]) -> String {
    shown(bytes, "")
}

fn shown(bytes: &[u8], empty: &str) -> String {
    if bytes.is_empty() {
        return empty.to_string();
    }
    let mut text = String::new();
    for chunk in bytes.utf8_chunks() {
        text.push_str(&tollgate_policy::escape_for_display(chunk.valid()));
        for b in chunk.invalid() {
            text.push_str(&format!("\\x{b:02x}"));
        }
        if text.chars().count() > MAX_NAME {
            break;
        }
    }
    if text.chars().count() > MAX_NAME {
        let cut: String = text.chars().take(MAX_NAME).collect();
        return format!("{cut}…");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_sandbox::refusal::{Access, Refusal, Rule};

    fn refusal(access: Access, path: &[u8], rule: Rule) -> Refusal {
        Refusal {
            access,
            path: path.to_vec(),
            rule,
            pid: Some(42),
            program: Some(b"cat".to_vec()),
        }
    }

    #[test]
    fn a_refusal_reads_as_what_which_and_why() {
        let mut r = Refusals::default();
        r.add(refusal(Access::Read, b"/etc/shadow", Rule::Credential));
        r.add(refusal(Access::Read, b"/etc/shadow", Rule::Credential));
        assert_eq!(
            WallNotes::from_refusals(&r).render(),
            "sandbox: denied read /etc/shadow to cat, 2 times (a credential path (withheld from the sandbox))\n"
        );
    }

    #[test]
    fn deduplicated_capped_and_counted() {
        let mut n = WallNotes::default();
        for i in 0..25 {
            n.push(&format!("line {}", i % 15));
        }
        let out = n.render();
        assert_eq!(out.lines().count(), MAX_LINES + 1, "{out}");
        assert!(out.ends_with("sandbox: … and 5 more\n"), "{out}");
        assert!(out.lines().all(|l| l.starts_with("sandbox: ")));
    }

    #[test]
    fn refusals_not_kept_and_lost_records_are_said() {
        let mut r = Refusals::default();
        for i in 0..100 {
            r.add(refusal(
                Access::Write,
                format!("/x{i}").as_bytes(),
                Rule::ReadOnlyRoot,
            ));
        }
        r.lost = 7;
        let out = WallNotes::from_refusals(&r).render();
        assert!(out.contains("… and 91 more"), "{out}");
        assert!(
            out.starts_with("sandbox: 7 refusal records were lost"),
            "{out}"
        );
        let mut few = Refusals::default();
        few.add(refusal(Access::Read, b"/etc/shadow", Rule::Credential));
        few.lost = 3;
        let out = WallNotes::from_refusals(&few).render();
        assert!(
            out.contains("sandbox: 3 refusal records were lost"),
            "{out}"
        );
    }

    #[test]
    fn hostile_paths_are_escaped_and_cut() {
        let mut path = b"/tmp/\x1b[31mred\x07\n\xff\xfe".to_vec();
        path.extend(std::iter::repeat_n(b'a', 4096));
        let mut r = Refusals::default();
        r.add(refusal(Access::Write, &path, Rule::OutsideWorkspace));
        let out = WallNotes::from_refusals(&r).render();
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
        assert!(out.contains("\\u{1b}[31mred\\u{7}\\n\\xff\\xfe"), "{out}");
        assert!(out.chars().count() < 400, "{}", out.len());
    }

    #[test]
    fn appended_on_lines_of_its_own() {
        let mut n = WallNotes::default();
        n.push("x");
        let mut t = "out".to_string();
        n.append_to(&mut t);
        assert_eq!(t, "out\nsandbox: x\n");
        let mut empty = "out".to_string();
        WallNotes::default().append_to(&mut empty);
        assert_eq!(empty, "out");
    }
}
