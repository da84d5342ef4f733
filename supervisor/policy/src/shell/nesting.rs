//! How deeply a command nests, estimated without parsing it, so the bash
//! parser never sees a command that nests too deep.
//!
//! brush-parser's tokenizer, its grammar and word parser, the walk in this
//! module's parent and the drop of the tree all recurse at least once per
//! level of nesting. On a 2 MiB thread stack (tokio's default) about 300
//! levels of `{ ` (900 bytes) overflow it, and a stack overflow aborts the
//! whole supervisor. Deep nesting also costs time that grows faster than the
//! text: 3,000 levels of `${x:-` took seconds.
//!
//! The estimate is never below the real depth. Quoting is ignored, so a
//! bracket inside a string counts too. Each kind of opener is counted on its
//! own and the counts are added, so one kind of closer cannot cancel another
//! kind's opener (a `case` pattern's `x)` does not cancel the `case`):
//! - `(` `)`, `{` `}` and `[` `]`, which cover subshells, brace groups,
//!   functions, `$( )`, `${ }`, `$(( ))`, `<( )`, arrays and `[[ ( ) ]]`;
//! - the words `if` `while` `until` `for` `select` `case` against `fi`
//!   `done` `esac`;
//! - a run of the prefix words `!` and `coproc`, which nest what follows
//!   them (`[[ ! ! ! x ]]`).

/// The deepest nesting the gate analyses. Real scripts stay far below it.
pub(crate) const MAX_NESTING: usize = 64;

/// The bytes that end a word for this estimate: ASCII whitespace and bash's
/// operator and quoting characters.
const DELIMITS: [bool; 256] = {
    let mut t = [false; 256];
    let set = b" \t\n\x0c\r()[]{};&|<>\"'`$";
    let mut i = 0;
    while i < set.len() {
        t[set[i] as usize] = true;
        i += 1;
    }
    t
};

/// The estimated deepest nesting in `text`.
pub(crate) fn depth(text: &str) -> usize {
    let mut n = Counts::default();
    let mut max = 0;
    let mut word_start = None;
    for (i, b) in text.bytes().enumerate() {
        if !DELIMITS[usize::from(b)] {
            word_start.get_or_insert(i);
            continue;
        }
        if let Some(start) = word_start.take() {
            n.word(&text.as_bytes()[start..i]);
        }
        match b {
            b'(' => n.parens += 1,
            b')' => n.parens = n.parens.saturating_sub(1),
            b'{' => n.braces += 1,
            b'}' => n.braces = n.braces.saturating_sub(1),
            b'[' => n.brackets += 1,
            b']' => n.brackets = n.brackets.saturating_sub(1),
            _ => {}
        }
        max = max.max(n.total());
    }
    if let Some(start) = word_start {
        n.word(&text.as_bytes()[start..]);
    }
    max.max(n.total())
}

#[derive(Default)]
struct Counts {
    parens: usize,
    braces: usize,
    brackets: usize,
    keywords: usize,
    prefixes: usize,
}

impl Counts {
    fn word(&mut self, w: &[u8]) {
        match w {
            b"if" | b"while" | b"until" | b"for" | b"select" | b"case" => self.keywords += 1,
            b"fi" | b"done" | b"esac" => self.keywords = self.keywords.saturating_sub(1),
            _ => {}
        }
        if matches!(w, b"!" | b"coproc") {
            self.prefixes += 1;
        } else {
            self.prefixes = 0;
        }
    }

    fn total(&self) -> usize {
        self.parens + self.braces + self.brackets + self.keywords + self.prefixes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delimiter_table_is_whitespace_and_bash_operators() {
        for b in 0..=255u8 {
            let expected = b.is_ascii_whitespace() || b"()[]{};&|<>\"'`$".contains(&b);
            assert_eq!(DELIMITS[usize::from(b)], expected, "byte {b:#x}");
        }
    }

    #[test]
    fn sequences_do_not_add_up() {
        let script = "a=$(date); b=${x:-y}; if true; then echo; fi\n".repeat(200);
        assert_eq!(depth(&script), 1);
        // `[[` twice, then `!`.
        assert_eq!(
            depth("case $x in a) echo a;; (b) echo b;; esac; [[ ! -f x ]]"),
            3
        );
    }

    #[test]
    fn every_kind_of_nesting_counts() {
        let n = 10;
        for (what, text) in [
            ("parens", format!("{}x{}", "(".repeat(n), ")".repeat(n))),
            ("braces", format!("{}x;{}", "{ ".repeat(n), "}; ".repeat(n))),
            (
                "params",
                format!("echo {}y{}", "${x:-".repeat(n), "}".repeat(n)),
            ),
            (
                "if",
                format!("{}x;{}", "if a; then ".repeat(n), "fi; ".repeat(n)),
            ),
            (
                "case",
                format!("{}x;;{}", "case x in x) ".repeat(n), " esac;;".repeat(n)),
            ),
            ("bang", format!("[[ {}-f x ]]", "! ".repeat(n))),
            ("coproc", format!("{}cat", "coproc ".repeat(n))),
            ("quoted", format!("echo '{}'", "(".repeat(n))),
        ] {
            assert!(depth(&text) >= n, "{what}: {} < {n}", depth(&text));
        }
    }
}
