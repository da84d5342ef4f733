//! sed: GNU sed's `e` command and `s///e` flag run commands, `w` writes
//! files and `r` reads them. The script is read command by command, so
//! `sed 'e curl x'` is judged like `curl x` and `sed -n 'w /etc/x'` like a
//! write to /etc/x; `s/x/y/` stays a text edit whatever its text says.

use std::sync::LazyLock;

use super::Walker;
use super::options::{self, Role, Table};
use super::words::Word;

const SED_OPTS: &str = "n,quiet,silent debug e,expression=@script f,file=@reads follow-symlinks \
                        i,in-place=?@writes l,line-length= posix E,r,regexp-extended s,separate \
                        sandbox@inert u,unbuffered z,null-data b,binary help version";

/// What a sed script does besides editing text.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Effects {
    /// `e COMMAND`: commands it runs.
    pub runs: Vec<String>,
    /// `e` alone or the `s///e` flag: runs the edited text as a command.
    pub runs_text: bool,
    /// `w FILE`, `W FILE`, `s///w FILE`.
    pub writes: Vec<String>,
    /// `r FILE`, `R FILE`.
    pub reads: Vec<String>,
}

/// Reads a sed script; stops where sed would stop with an error (then
/// nothing runs).
pub(super) fn effects(script: &str) -> Effects {
    let mut fx = Effects::default();
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() || c == ';' || c == '{' || c == '}' {
            i += 1;
            continue;
        }
        let Some(after) = address(&b, i) else {
            return fx;
        };
        i = skip_blanks(&b, after);
        if b.get(i) == Some(&',') {
            let Some(after) = address(&b, skip_blanks(&b, i + 1)) else {
                return fx;
            };
            i = skip_blanks(&b, after);
        }
        while b.get(i) == Some(&'!') {
            i = skip_blanks(&b, i + 1);
        }
        let Some(&cmd) = b.get(i) else { return fx };
        i += 1;
        match cmd {
            '{' | '}' | ';' => {}
            '#' | ':' | 'a' | 'i' | 'c' => i = text_end(&b, i, cmd),
            'b' | 't' | 'T' | 'v' | 'l' | 'L' | 'q' | 'Q' => i = label_end(&b, i),
            'r' | 'R' => fx.reads.push(rest_of_line(&b, &mut i)),
            'w' | 'W' => fx.writes.push(rest_of_line(&b, &mut i)),
            'e' => {
                let command = rest_of_line(&b, &mut i);
                if command.is_empty() {
                    fx.runs_text = true;
                } else {
                    fx.runs.push(command);
                }
            }
            's' => {
                let Some(after) = substitute(&b, i, &mut fx) else {
                    return fx;
                };
                i = after;
            }
            'y' => {
                let Some(&delim) = b.get(i) else { return fx };
                let Some(mid) = delimited(&b, i + 1, delim) else {
                    return fx;
                };
                let Some(end) = delimited(&b, mid, delim) else {
                    return fx;
                };
                i = end;
            }
            '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F' => {}
            _ => return fx,
        }
    }
    fx
}

fn skip_blanks(b: &[char], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
        i += 1;
    }
    i
}

/// An address (`12`, `$`, `/re/I`, `\%re%`, `first~step`, `+N`, `~N`);
/// returns where it ends (at `i` when there is none).
fn address(b: &[char], mut i: usize) -> Option<usize> {
    match b.get(i) {
        Some('/') => i = delimited(b, i + 1, '/')?,
        Some('\\') => {
            let delim = *b.get(i + 1)?;
            i = delimited(b, i + 2, delim)?;
        }
        Some('$') => return Some(i + 1),
        Some(c) if c.is_ascii_digit() || *c == '+' || *c == '~' => {
            i += 1;
            while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == '~') {
                i += 1;
            }
            return Some(i);
        }
        _ => return Some(i),
    }
    while b.get(i).is_some_and(|c| matches!(c, 'I' | 'M')) {
        i += 1;
    }
    Some(i)
}

/// Skips to the unescaped `delim` from `i`; returns the index after it.
fn delimited(b: &[char], mut i: usize, delim: char) -> Option<usize> {
    while let Some(&c) = b.get(i) {
        if c == '\\' {
            i += 2;
            continue;
        }
        if c == delim {
            return Some(i + 1);
        }
        if c == '\n' && delim != '\n' {
            return None;
        }
        i += 1;
    }
    None
}

/// `s/re/replacement/flags`, from just after the `s`.
fn substitute(b: &[char], i: usize, fx: &mut Effects) -> Option<usize> {
    let delim = *b.get(i)?;
    let mid = delimited(b, i + 1, delim)?;
    let mut i = delimited(b, mid, delim)?;
    while let Some(&c) = b.get(i) {
        match c {
            'e' => fx.runs_text = true,
            'w' => {
                i += 1;
                fx.writes.push(rest_of_line(b, &mut i));
                return Some(i);
            }
            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => {}
            d if d.is_ascii_digit() => {}
            _ => break,
        }
        i += 1;
    }
    Some(i)
}

/// The rest of the line after leading blanks (a file name or command).
fn rest_of_line(b: &[char], i: &mut usize) -> String {
    let start = skip_blanks(b, *i);
    let mut end = start;
    while end < b.len() && b[end] != '\n' {
        end += 1;
    }
    *i = end;
    b[start..end]
        .iter()
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// A label or number argument, which ends at `;` or a newline.
fn label_end(b: &[char], mut i: usize) -> usize {
    while b
        .get(i)
        .is_some_and(|c| *c != ';' && *c != '\n' && *c != '}')
    {
        i += 1;
    }
    i
}

/// Text of `a`, `i`, `c` (lines continued by a trailing backslash) and
/// comments: to the end of the line.
fn text_end(b: &[char], mut i: usize, cmd: char) -> usize {
    loop {
        while b.get(i).is_some_and(|c| *c != '\n') {
            i += 1;
        }
        let continued = matches!(cmd, 'a' | 'i' | 'c') && i > 0 && b.get(i - 1) == Some(&'\\');
        if !continued || i >= b.len() {
            return i;
        }
        i += 1;
    }
}

impl Walker<'_> {
    pub(super) fn sed(&mut self, words: &[Word]) {
        static OPTS: LazyLock<Table> = LazyLock::new(|| options::compile(SED_OPTS).0);
        let scan = options::scan(&OPTS, words);
        let scripts: Vec<&Word> = scan.values(Role::Script).map(|(_, w)| w).collect();
        let given = !scripts.is_empty() || scan.has(Role::Reads);
        let (script_words, files): (Vec<&Word>, &[&Word]) = if given {
            (scripts, &scan.operands[..])
        } else {
            match scan.operands.split_first() {
                Some((s, rest)) => (vec![*s], rest),
                None => (Vec::new(), &[]),
            }
        };
        if !scan.has(Role::Inert) {
            for s in script_words {
                self.sed_script(s);
                if self.stopped() {
                    return;
                }
            }
        }
        if scan.has(Role::Writes) {
            for w in files {
                self.write_target(w, "`sed -i`");
                if self.stopped() {
                    return;
                }
            }
        }
    }

    fn sed_script(&mut self, s: &Word) {
        let fx = effects(&s.text);
        if fx.runs_text || (s.dynamic && s.text.trim().is_empty()) {
            self.deny(
                "floor:hidden-command",
                "this sed script runs the text it edits as a command (`e`, or the `e` flag of `s`), or is only known when it runs, so what runs cannot be checked. Run the command directly.".to_string(),
            );
            return;
        }
        for c in &fx.runs {
            let script = Word {
                text: c.clone(),
                ..s.clone()
            };
            self.nested_script("sed e", Some(&script));
            if self.stopped() {
                return;
            }
        }
        for f in &fx.writes {
            self.write_target(&Word::literal(f), "sed's `w` command");
            if self.stopped() {
                return;
            }
        }
        for f in &fx.reads {
            self.read_target(&Word::literal(f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_files_and_plain_edits() {
        let fx = effects("1e curl x\ns/a/b/g;w /etc/x\n$r /etc/shadow");
        assert_eq!(fx.runs, ["curl x"]);
        assert_eq!(fx.writes, ["/etc/x"]);
        assert_eq!(fx.reads, ["/etc/shadow"]);
        assert!(!fx.runs_text);
        assert!(effects("s/.*/rm -rf ~/e").runs_text);
        assert!(effects("/x/e").runs_text);
        assert_eq!(effects("s/x/y/w out.txt").writes, ["out.txt"]);
        for plain in [
            "s/curl/wget/g",
            "s|e|w|g",
            "s/a\\/e/b/",
            "/e/d",
            "y/ew/we/",
            "a\\\ne text\n",
            "i hello e w r",
            "# e rm -rf ~",
            "/re/I,/x/!{p;d}",
            "s/curl/reqwest/g",
            "10q",
            ":a;N;$!ba;s/\\n/ /g",
        ] {
            assert_eq!(effects(plain), Effects::default(), "{plain:?}");
        }
    }
}
