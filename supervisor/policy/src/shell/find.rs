//! `find`: what its actions do to the files it finds.
//!
//! `{}` in `-exec`/`-execdir`/`-ok`/`-okdir` stands for the files under a
//! start point, so `find ~ -type f -exec rm {} +` is judged as deleting the
//! home directory, the same as `rm -rf ~`, and `find /etc -exec cat {} \;`
//! as reading every file under /etc. `-delete` deletes what find matches. A
//! name test (`-name '*.o'`) before the action narrows it to some files
//! beneath the start point; without one the action covers the whole tree.

use super::lists;
use super::words::{Tree, Word};
use super::{Stdin, Walker};
use crate::paths::show;

/// Parentheses nested deeper than this are refused.
const MAX_FIND_DEPTH: usize = 64;

/// What one action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `-exec` and `-ok` (`dir`: `-execdir`, `-okdir`): the command words.
    Exec {
        dir: bool,
    },
    Delete,
    /// `-fprint FILE` and the like.
    Writes,
    /// `-files0-from FILE`.
    Reads,
}

/// An action with its words and what the tests before it say.
#[derive(Debug, Clone, Copy)]
struct Action<'w> {
    kind: Kind,
    words: &'w [Word],
    guard: Guard,
}

/// What a sub-expression being true says about the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Guard {
    /// A name test passed: only some files.
    narrows: bool,
    /// Every name it lets through is a directory a build recreates.
    build_dirs: bool,
}

impl Guard {
    fn and(self, b: Guard) -> Guard {
        Guard {
            narrows: self.narrows || b.narrows,
            build_dirs: (self.narrows && self.build_dirs) || (b.narrows && b.build_dirs),
        }
    }

    fn or(self, b: Guard) -> Guard {
        Guard {
            narrows: self.narrows && b.narrows,
            build_dirs: self.build_dirs && b.build_dirs,
        }
    }

    fn tree(self) -> Tree {
        if self.narrows {
            Tree::Part {
                build_dirs: self.build_dirs,
            }
        } else {
            Tree::Whole
        }
    }
}

/// Primaries that take one value.
const ONE_VALUE: &[&str] = &[
    "-amin",
    "-anewer",
    "-atime",
    "-cmin",
    "-cnewer",
    "-context",
    "-ctime",
    "-fstype",
    "-gid",
    "-group",
    "-ilname",
    "-iname",
    "-inum",
    "-ipath",
    "-iregex",
    "-iwholename",
    "-links",
    "-lname",
    "-maxdepth",
    "-mindepth",
    "-mmin",
    "-mtime",
    "-name",
    "-newer",
    "-path",
    "-perm",
    "-printf",
    "-regex",
    "-regextype",
    "-samefile",
    "-size",
    "-type",
    "-uid",
    "-used",
    "-user",
    "-wholename",
    "-xtype",
];

/// Name tests: they pick files by name.
const NAME_TESTS: &[&str] = &[
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-lname",
    "-ilname",
];

struct Expr<'w> {
    toks: &'w [Word],
    pos: usize,
    depth: usize,
    too_deep: bool,
    actions: Vec<Action<'w>>,
}

impl<'w> Expr<'w> {
    fn peek(&self) -> Option<&'w str> {
        self.toks.get(self.pos).map(|w| w.text.as_str())
    }

    /// `a , b`
    fn list(&mut self, g: Guard) -> Guard {
        let mut r = self.or(g);
        while self.peek() == Some(",") {
            self.pos += 1;
            r = r.or(self.or(g));
        }
        r
    }

    /// `a -o b`
    fn or(&mut self, g: Guard) -> Guard {
        let mut r = self.and(g);
        while matches!(self.peek(), Some("-o" | "-or")) {
            self.pos += 1;
            r = r.or(self.and(g));
        }
        r
    }

    /// `a -a b`, `a b`: each factor runs only when those before it passed.
    fn and(&mut self, g: Guard) -> Guard {
        let mut acc = Guard::default();
        while let Some(t) = self.peek() {
            match t {
                ")" | "-o" | "-or" | "," => break,
                "-a" | "-and" => self.pos += 1,
                _ => {
                    let f = self.unary(g.and(acc));
                    acc = acc.and(f);
                }
            }
        }
        acc
    }

    fn unary(&mut self, g: Guard) -> Guard {
        match self.peek() {
            Some("!" | "-not") => {
                self.pos += 1;
                self.unary(g);
                Guard::default()
            }
            Some("(") => {
                self.pos += 1;
                self.depth += 1;
                if self.depth > MAX_FIND_DEPTH {
                    self.too_deep = true;
                    self.pos = self.toks.len();
                    return Guard::default();
                }
                let r = self.list(g);
                self.depth -= 1;
                if self.peek() == Some(")") {
                    self.pos += 1;
                }
                r
            }
            _ => self.primary(g),
        }
    }

    fn primary(&mut self, g: Guard) -> Guard {
        let Some(t) = self.peek() else {
            return Guard::default();
        };
        let at = self.pos;
        self.pos += 1;
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = self.pos;
                while !matches!(self.peek(), None | Some(";" | "+")) {
                    self.pos += 1;
                }
                let words = &self.toks[start..self.pos];
                self.pos = (self.pos + 1).min(self.toks.len());
                self.push(
                    Kind::Exec {
                        dir: t.ends_with("dir"),
                    },
                    words,
                    g,
                );
            }
            "-delete" => self.push(Kind::Delete, &[], g),
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                let file = self.toks.get(self.pos..self.pos + 1).unwrap_or_default();
                self.pos += if t == "-fprintf" { 2 } else { 1 };
                self.push(Kind::Writes, file, g);
            }
            "-files0-from" => {
                let file = self.toks.get(self.pos..self.pos + 1).unwrap_or_default();
                self.pos += 1;
                self.push(Kind::Reads, file, g);
            }
            "-empty" | "-false" => {
                return Guard {
                    narrows: true,
                    build_dirs: false,
                };
            }
            _ if NAME_TESTS.contains(&t) => {
                let pattern = self.peek().unwrap_or("");
                self.pos += 1;
                return name_guard(t, pattern);
            }
            _ if ONE_VALUE.contains(&t) || (t.starts_with("-newer") && t.len() == 8) => {
                self.pos += 1;
            }
            _ => {
                let _ = at;
            }
        }
        Guard::default()
    }

    fn push(&mut self, kind: Kind, words: &'w [Word], guard: Guard) {
        self.actions.push(Action { kind, words, guard });
    }
}

/// What a name test says. A pattern narrows only when it holds a literal
/// letter or digit: `*`, `?*`, `[a-z]*`, `.*` or `./*` match (nearly)
/// everything and say nothing.
fn name_guard(test: &str, pattern: &str) -> Guard {
    if !has_literal_word_char(pattern) {
        return Guard::default();
    }
    let literal = !pattern.contains(['*', '?', '[', '\\']);
    let last = pattern.rsplit('/').next().unwrap_or(pattern);
    Guard {
        narrows: true,
        build_dirs: matches!(test, "-name" | "-iname") && literal && lists::is_build_dir(last),
    }
}

/// A letter, digit or `_` outside bracket expressions and escapes.
fn has_literal_word_char(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' => {
                // Up to the closing bracket (a `]` first is part of the set).
                let mut first = true;
                for x in chars.by_ref() {
                    if x == ']' && !first {
                        break;
                    }
                    first = false;
                }
            }
            c if c.is_alphanumeric() || c == '_' => return true,
            _ => {}
        }
    }
    false
}

impl Walker<'_> {
    pub(super) fn find(&mut self, words: &[Word]) {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            match w.text.as_str() {
                "-H" | "-L" | "-P" => i += 1,
                "-D" => i += 2,
                "--" => {
                    i += 1;
                    break;
                }
                t if t.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let first = i;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if (t.starts_with('-') && t.len() > 1) || matches!(t, "(" | "!" | ")" | ",") {
                break;
            }
            i += 1;
        }
        let dot = Word::literal(".");
        let listed = Word::unknown("<start points from -files0-from>");
        let starts: &[Word] = if words[i.min(words.len())..]
            .iter()
            .any(|w| w.text == "-files0-from")
        {
            // The start points are read from a file.
            std::slice::from_ref(&listed)
        } else if i == first {
            std::slice::from_ref(&dot)
        } else {
            &words[first..i]
        };
        let mut expr = Expr {
            toks: words.get(i..).unwrap_or_default(),
            pos: 0,
            depth: 0,
            too_deep: false,
            actions: Vec::new(),
        };
        while expr.pos < expr.toks.len() {
            expr.list(Guard::default());
            // A stray `)`: what follows it is still read.
            expr.pos += 1;
        }
        if expr.too_deep {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the expression of `find` nests parentheses more than {MAX_FIND_DEPTH} deep, so it cannot be checked. Write it more plainly."
                ),
            );
            return;
        }
        for a in expr.actions {
            self.find_action(&a, starts);
            if self.stopped() {
                return;
            }
        }
    }

    fn find_action(&mut self, a: &Action, starts: &[Word]) {
        match a.kind {
            Kind::Exec { dir } => {
                if a.words.is_empty() || !self.spend(starts.len() - 1) {
                    return;
                }
                for s in starts {
                    let item = tree_word(s, a.guard.tree());
                    let filled: Vec<Word> = a
                        .words
                        .iter()
                        .map(|w| super::launch::fill(w, "{}", &item))
                        .collect();
                    if dir {
                        // The command runs in the directory of each file.
                        let saved = self.cwd.clone();
                        let cwd = (!s.dynamic).then(|| self.place(&item.text));
                        self.set_cwd(cwd);
                        self.invocation(&filled, &Stdin::Inherited);
                        self.restore_cwd(saved);
                    } else {
                        self.invocation(&filled, &Stdin::Inherited);
                    }
                    if self.stopped() {
                        return;
                    }
                }
            }
            Kind::Delete => {
                let targets: Vec<Word> = starts
                    .iter()
                    .map(|s| tree_word(s, a.guard.tree()))
                    .collect();
                for t in &targets {
                    if t.dynamic {
                        self.deny(
                            "floor:dangerous-pattern",
                            format!(
                                "`find {} -delete` deletes somewhere only known at run time. Name the directory literally.",
                                show(t.raw())
                            ),
                        );
                        return;
                    }
                }
                let refs: Vec<&Word> = targets.iter().collect();
                self.delete_all(&refs, false, "find -delete");
            }
            Kind::Writes => {
                for w in a.words {
                    self.write_target(w, "`find`");
                }
            }
            Kind::Reads => {
                for w in a.words {
                    self.read_target(w);
                }
            }
        }
    }
}

/// A start point as the files find passes for it.
fn tree_word(start: &Word, tree: Tree) -> Word {
    Word {
        tree,
        ..start.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(expr: &str) -> Vec<(Kind, Guard)> {
        let toks: Vec<Word> = expr.split(' ').map(Word::literal).collect();
        let mut e = Expr {
            toks: &toks,
            pos: 0,
            depth: 0,
            too_deep: false,
            actions: Vec::new(),
        };
        while e.pos < toks.len() {
            e.list(Guard::default());
            e.pos += 1;
        }
        e.actions.iter().map(|a| (a.kind, a.guard)).collect()
    }

    const WHOLE: Guard = Guard {
        narrows: false,
        build_dirs: false,
    };
    const PART: Guard = Guard {
        narrows: true,
        build_dirs: false,
    };
    const BUILD: Guard = Guard {
        narrows: true,
        build_dirs: true,
    };

    #[test]
    fn name_tests_before_an_action_narrow_it() {
        assert_eq!(actions("-delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-type f -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-name *.o -delete"), [(Kind::Delete, PART)]);
        assert_eq!(actions("-name * -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-name ?* -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-name [a-z]* -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-path ./* -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-regex .* -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-regex \\w* -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-regex .*\\.o -delete"), [(Kind::Delete, PART)]);
        assert_eq!(actions("-path */build/* -delete"), [(Kind::Delete, PART)]);
        assert_eq!(actions("! -name *.o -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(actions("-name x -o -delete"), [(Kind::Delete, WHOLE)]);
        assert_eq!(
            actions("( -name a -o -name b ) -delete"),
            [(Kind::Delete, PART)]
        );
        assert_eq!(
            actions("( -name a -o -type f ) -delete"),
            [(Kind::Delete, WHOLE)]
        );
        assert_eq!(
            actions("-name node_modules -prune -exec rm -rf {} +"),
            [(Kind::Exec { dir: false }, BUILD)]
        );
        // The value of a test is not an action.
        assert_eq!(actions("-name -delete"), []);
        assert_eq!(actions("-newermt -exec -print"), []);
    }
}
