//! Judging what a launcher runs (see `launchers.rs` for the table): the
//! command it runs is walked as if it were run directly, with the launcher's
//! own effects (a lock file written, a working directory, an input file)
//! checked too. xargs and GNU parallel put their input items into the
//! command; items they read at run time are unknown values, like `$X`.

use std::borrow::Cow;

use super::launchers::{self, Bare, Feed, Launcher, Parsed, Problem};
use super::options::{Role, Table};
use super::words::{Tree, Word};
use super::{Stdin, Walker};
use crate::paths::{lexical_join, show};

/// `env -S` strings inside `env -S` strings, at most.
const MAX_SPLITS: usize = 4;

/// At most this many input items are judged one by one; more are unknown.
const MAX_ITEMS: usize = 32;

/// How input items are separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sep {
    /// Blanks and newlines, with quotes and backslashes (xargs' default).
    Blanks,
    Lines,
    Char(char),
}

impl Walker<'_> {
    /// A program that runs another program: the command it runs is judged
    /// by what it is and what it gets, as if run directly.
    pub(super) fn launch(
        &mut self,
        name: &str,
        l: &Launcher,
        t: &Table,
        words: &[Word],
        stdin: &Stdin,
    ) {
        self.launch_split(name, l, t, words, stdin, 0);
    }

    fn launch_split(
        &mut self,
        name: &str,
        l: &Launcher,
        t: &Table,
        words: &[Word],
        stdin: &Stdin,
        splits: usize,
    ) {
        let p = launchers::parse(l, t, words);
        if let Some(problem) = &p.problem {
            self.launch_problem(name, problem);
            return;
        }
        if let Some(split) = &p.split {
            let (s, after) = &**split;
            // `env -S 'rm -rf' /`: the string's words take the option's place.
            if s.dynamic || splits >= MAX_SPLITS {
                self.deny(
                    "floor:hidden-command",
                    format!(
                        "the string given to `{name} -S` is only known when it runs (or nests too deeply), so the command cannot be checked. Write the command directly."
                    ),
                );
                return;
            }
            let mut spliced = vec![words[0].clone()];
            spliced.extend(split_string(&s.text));
            spliced.extend_from_slice(words.get(*after..).unwrap_or_default());
            self.launch_split(name, l, t, &spliced, stdin, splits + 1);
            return;
        }
        self.launcher_effects(name, &p);
        if self.stopped() {
            return;
        }
        if p.has(Role::Inert) {
            // `command -v x`, `taskset -p …`: nothing runs; an ordinary command.
            self.record(words);
            self.scan_args(&words[1..]);
            return;
        }
        // The working directory is saved only when an option changes it.
        let mut saved = None;
        if let Some(h) = p.hits.iter().rev().find(|h| h.role == Role::Chdir) {
            let cwd = match &h.value {
                Some(v) if !v.dynamic && !v.text.is_empty() => {
                    Some(lexical_join(self.base(), &v.text))
                }
                Some(_) | None => None,
            };
            saved = Some(self.cwd.clone());
            self.set_cwd(cwd);
        }
        let starts = p.starts;
        if self.spend(starts.as_slice().len().saturating_sub(1)) {
            for &start in starts.as_slice() {
                self.feed(name, l, &p, words, start, stdin);
                if self.stopped() {
                    break;
                }
            }
        }
        if let Some(saved) = saved {
            self.restore_cwd(saved);
        }
    }

    /// An ordinary command's options that run a program or a script, or
    /// name a file it writes or reads (`sort --compress-program=…`).
    pub(super) fn command_options(&mut self, name: &str, t: &Table, words: &[Word]) {
        let scan = super::options::scan(t, words);
        for f in &scan.found {
            let Some(v) = &f.value else { continue };
            let what = format!("{name} {}", f.name);
            match f.opt.role {
                Role::Script => self.nested_script(&what, Some(v)),
                Role::Program => self.invocation(std::slice::from_ref(v), &Stdin::Inherited),
                Role::Writes => self.write_target(v, &format!("`{}`", show(&what))),
                Role::Reads => self.read_target(v),
                Role::None
                | Role::Split
                | Role::Inert
                | Role::Chdir
                | Role::Replace
                | Role::Login
                | Role::Argv
                | Role::ShellWords
                | Role::Items
                | Role::Null
                | Role::Delimiter
                | Role::Lines
                | Role::Columns
                | Role::Quote
                | Role::SshOption
                | Role::GdbCommand
                | Role::Refuse
                | Role::Assign => {}
            }
            if self.stopped() {
                return;
            }
        }
    }

    fn launch_problem(&mut self, name: &str, problem: &Problem) {
        let reason = match problem {
            Problem::Unknown(opt) => format!(
                "`{}` is given the option `{}`, which the gate does not know, so it cannot tell which command `{}` runs. Leave the option out, or run the command directly.",
                show(name),
                show(opt),
                show(name)
            ),
            Problem::Computed(raw) => format!(
                "`{}` is given `{}` before its command; it is only known when the command runs (unquoted, it may become several words or none), so the gate cannot tell which command `{}` runs. Quote it or write it literally.",
                show(name),
                show(raw),
                show(name)
            ),
            Problem::Refused(opt) => format!(
                "`{} {}` changes what `{}` runs in a way the gate does not follow, so it is refused. Run the command directly.",
                show(name),
                show(opt),
                show(name)
            ),
            Problem::TooMany => format!(
                "the words before the command of `{}` are only known when it runs, with too many readings to check. Write them literally.",
                show(name)
            ),
        };
        self.deny("floor:hidden-command", reason);
    }

    /// What the launcher's options and operands do themselves.
    fn launcher_effects(&mut self, name: &str, p: &Parsed) {
        for w in &p.writes {
            self.write_target(w, &format!("`{}`", show(name)));
            if self.stopped() {
                return;
            }
        }
        for h in &p.hits {
            let what = format!("{name} {}", h.opt);
            match (h.role, &h.value) {
                (Role::Script, v) => self.nested_script(&what, v.as_ref()),
                // A program with the launcher's arguments: judged in `feed`.
                (Role::Program, Some(_)) => {}
                (Role::Writes, Some(v)) => self.write_target(v, &format!("`{}`", show(&what))),
                (Role::Reads | Role::Items, Some(v)) => self.read_target(v),
                (Role::Assign, _) => {
                    if let Some((var, _)) = h.opt.split_once('=')
                        && super::lists::is_dangerous_var(var)
                    {
                        let _refused = self.dangerous_var(var);
                    }
                }
                (Role::SshOption, Some(v)) => self.ssh_option(v),
                (Role::GdbCommand, Some(v)) => {
                    let t = v.text.trim_start();
                    if let Some(cmd) = t.strip_prefix("shell ").or_else(|| t.strip_prefix('!')) {
                        let script = Word {
                            text: cmd.to_string(),
                            ..v.clone()
                        };
                        self.nested_script(&what, Some(&script));
                    }
                }
                (
                    Role::Program
                    | Role::Writes
                    | Role::Reads
                    | Role::Items
                    | Role::SshOption
                    | Role::GdbCommand,
                    None,
                )
                | (
                    Role::None
                    | Role::Split
                    | Role::Inert
                    | Role::Chdir
                    | Role::Replace
                    | Role::Login
                    | Role::Argv
                    | Role::ShellWords
                    | Role::Null
                    | Role::Delimiter
                    | Role::Lines
                    | Role::Columns
                    | Role::Quote
                    | Role::Refuse,
                    _,
                ) => {}
            }
            if self.stopped() {
                return;
            }
        }
    }

    /// `ssh -o ProxyCommand=…` and the other options whose value is a command.
    fn ssh_option(&mut self, v: &Word) {
        let (key, value) = match v.text.split_once(['=', ' ']) {
            Some((k, val)) => (k.trim(), val.trim_start_matches(['=', ' '])),
            None => return,
        };
        let k = key.to_ascii_lowercase();
        if matches!(
            k.as_str(),
            "proxycommand" | "localcommand" | "knownhostscommand" | "remotecommand" | "match"
        ) {
            let script = Word {
                text: value.to_string(),
                ..v.clone()
            };
            self.nested_script(&format!("ssh -o {key}"), Some(&script));
        }
    }

    /// Runs the command found at `start` the way the launcher gives it.
    fn feed(
        &mut self,
        name: &str,
        l: &Launcher,
        p: &Parsed,
        words: &[Word],
        start: usize,
        stdin: &Stdin,
    ) {
        let rest = words.get(start..).unwrap_or_default();
        let feed = if p.has(Role::Argv) {
            Feed::Argv
        } else if p.has(Role::ShellWords) {
            Feed::ShellWords
        } else {
            l.feed
        };
        let bare = if p.has(Role::Login) {
            Bare::Shell
        } else {
            l.bare
        };
        // A program named by an option (`start-stop-daemon --startas P --
        // ARGS`, `su -s P`) runs with the words after the options.
        for h in p.hits.iter().filter(|h| h.role == Role::Program) {
            let Some(program) = &h.value else { continue };
            let mut command = vec![program.clone()];
            if matches!(feed, Feed::Nothing | Feed::ShellArgs) {
                command.extend_from_slice(rest);
            }
            self.invocation(&command, stdin);
            if self.stopped() {
                return;
            }
        }
        if rest.is_empty() && !matches!(feed, Feed::Items | Feed::Parallel) {
            if bare == Bare::Shell && !p.has(Role::Script) {
                self.program_from_stdin(name, stdin, true);
            }
            return;
        }
        match feed {
            Feed::Argv => self.invocation(rest, stdin),
            Feed::ShellWords => self.shell_words(name, rest),
            Feed::ShellArgs => {
                let mut shell = vec![Word::literal("sh")];
                shell.extend_from_slice(rest);
                self.invocation(&shell, stdin);
            }
            Feed::EachScript => {
                for w in rest {
                    self.nested_script(name, Some(w));
                    if self.stopped() {
                        return;
                    }
                }
            }
            Feed::Items => self.xargs(p, rest, stdin),
            Feed::Parallel => self.parallel(p, rest, stdin),
            Feed::Nothing => {
                // `at TIME`, `script FILE`: the words are no command; the
                // program comes from stdin unless an option gives it.
                if bare == Bare::Shell && !p.has(Role::Script) && !p.has(Role::Reads) {
                    self.program_from_stdin(name, stdin, true);
                }
            }
        }
    }

    /// Words joined with spaces and run by `sh -c` (watch, ssh).
    pub(super) fn shell_words(&mut self, name: &str, rest: &[Word]) {
        if rest.iter().any(|w| w.dynamic) {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command given to `{}` is only known when it runs, so it cannot be checked.",
                    show(name)
                ),
            );
            return;
        }
        let script: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
        let text = script.join(" ");
        self.subprogram(&text);
    }

    /// xargs: the command gets the input items appended, or in place of the
    /// replace string; it reads /dev/null.
    fn xargs(&mut self, p: &Parsed, rest: &[Word], stdin: &Stdin) {
        let echo = [Word::literal("echo")];
        let cmd = if rest.is_empty() { &echo[..] } else { rest };
        let replace = replace_string(p);
        let sep = separator(p, replace.is_some());
        let items = if p.has(Role::Items) {
            None
        } else {
            items_of(stdin, sep)
        };
        let unknown = Word::unknown("<input item>");
        match replace {
            Some(r) => {
                let items = items.unwrap_or_else(|| vec![unknown]);
                if !self.spend(items.len().saturating_sub(1)) {
                    return;
                }
                for item in &items {
                    let filled: Vec<Word> = cmd.iter().map(|w| fill(w, &r, item)).collect();
                    self.invocation(&filled, &Stdin::File);
                    if self.stopped() {
                        return;
                    }
                }
            }
            None => {
                let mut all = cmd.to_vec();
                all.extend(items.unwrap_or_else(|| vec![unknown]));
                self.invocation(&all, &Stdin::File);
            }
        }
    }

    /// GNU parallel: a command line with placeholders, run once per item
    /// (items after `:::`, from files after `::::`, or from the input).
    fn parallel(&mut self, p: &Parsed, rest: &[Word], stdin: &Stdin) {
        let sep = rest.iter().position(|w| is_parallel_sep(&w.text));
        let (cmd, groups) = match sep {
            Some(k) => (&rest[..k], &rest[k..]),
            None => (rest, &[][..]),
        };
        let mut items: Option<Vec<Word>> = Some(Vec::new());
        let mut files = false;
        for w in groups {
            if is_parallel_sep(&w.text) {
                files = w.text.starts_with("::::");
                continue;
            }
            if files {
                self.read_target(w);
                items = None;
            } else if let Some(list) = items.as_mut() {
                list.push(w.clone());
            }
        }
        if groups.is_empty() {
            items = if p.has(Role::Items) {
                None
            } else {
                items_of(stdin, separator(p, true))
            };
        }
        if p.has(Role::Columns) {
            // `{1}`, `{2}` are columns of an item: parts unknown here.
            items = None;
        }
        let items = match items {
            Some(list) if list.len() <= MAX_ITEMS && !list.is_empty() => list,
            Some(list) if list.is_empty() && !groups.is_empty() => return,
            Some(_) | None => vec![Word::unknown("<input item>")],
        };
        if !self.spend(items.len().saturating_sub(1)) {
            return;
        }
        let replace = replace_string(p).unwrap_or(Cow::Borrowed("{}"));
        let quote = p.has(Role::Quote);
        for item in &items {
            if cmd.is_empty() {
                // Each item is a command line of its own.
                self.nested_script("parallel", Some(item));
            } else if quote {
                let mut filled: Vec<Word> = cmd.iter().map(|w| fill(w, &replace, item)).collect();
                if !cmd.iter().any(|w| w.text.contains(replace.as_ref())) {
                    filled.push(item.clone());
                }
                self.invocation(&filled, &Stdin::File);
            } else {
                if cmd.iter().any(|w| w.dynamic) {
                    self.shell_words("parallel", cmd);
                    return;
                }
                let line: Vec<&str> = cmd.iter().map(|w| w.text.as_str()).collect();
                let text = fill_parallel(&line.join(" "), &replace, item);
                self.subprogram(&text);
            }
            if self.stopped() {
                return;
            }
        }
    }
}

fn is_parallel_sep(t: &str) -> bool {
    matches!(t, ":::" | "::::" | ":::+" | "::::+")
}

/// The replace string of `-I` / `-i` / `--replace`, if one was given.
fn replace_string(p: &Parsed) -> Option<Cow<'_, str>> {
    let h = p.hits.iter().rev().find(|h| h.role == Role::Replace)?;
    match &h.value {
        Some(v) if !v.text.is_empty() => Some(Cow::Borrowed(v.text.as_str())),
        Some(_) | None => Some(Cow::Borrowed("{}")),
    }
}

fn separator(p: &Parsed, lines: bool) -> Sep {
    if p.has(Role::Null) {
        return Sep::Char('\0');
    }
    if let Some(d) = p
        .hits
        .iter()
        .rev()
        .find(|h| h.role == Role::Delimiter)
        .and_then(|h| h.value.as_ref())
    {
        let c = super::words::decode_ansi_c(&d.text)
            .chars()
            .next()
            .unwrap_or('\n');
        return Sep::Char(c);
    }
    if lines || p.has(Role::Lines) {
        Sep::Lines
    } else {
        Sep::Blanks
    }
}

/// The items of a known input (a here-document or here-string); `None`
/// when the input is only known at run time.
fn items_of(stdin: &Stdin, sep: Sep) -> Option<Vec<Word>> {
    let Stdin::Doc(text) = stdin else {
        return None;
    };
    if text.contains(['$', '`']) {
        // An unquoted here-document expands these: not literal.
        return None;
    }
    let items: Vec<String> = match sep {
        Sep::Char(c) => text
            .split(c)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        Sep::Lines => text
            .lines()
            .map(str::trim_start)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        Sep::Blanks => split_blanks(text)?,
    };
    (items.len() <= MAX_ITEMS).then(|| items.iter().map(|s| Word::literal(s)).collect())
}

/// xargs' default input: blank-separated, with '…', "…" and `\x`.
fn split_blanks(text: &str) -> Option<Vec<String>> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut started = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if started {
                    items.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            '\'' | '"' => {
                started = true;
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(x) => cur.push(x),
                        // An unmatched quote: xargs refuses the input.
                        None => return None,
                    }
                }
            }
            '\\' => {
                started = true;
                if let Some(x) = chars.next() {
                    cur.push(x);
                }
            }
            x => {
                started = true;
                cur.push(x);
            }
        }
    }
    if started {
        items.push(cur);
    }
    Some(items)
}

/// A word with the replace string put in: exactly the item when the word is
/// the replace string, a partly known word when the item is glued to text.
pub(super) fn fill(w: &Word, replace: &str, item: &Word) -> Word {
    if !w.text.contains(replace) {
        return w.clone();
    }
    if w.text == replace && !w.dynamic {
        return item.clone();
    }
    Word {
        text: w.text.replace(replace, &item.text),
        dynamic: w.dynamic || item.dynamic || item.tree != Tree::No,
        glob: w.glob || item.glob,
        splits: w.splits,
        tree: Tree::No,
        raw: w.raw().to_string(),
    }
}

/// parallel's command line with its placeholders filled in, each value
/// quoted for the shell as parallel quotes it (a plain word as it is); with
/// no placeholder the item is appended.
fn fill_parallel(line: &str, replace: &str, item: &Word) -> String {
    let quoted = |v: &str| -> String {
        if item.dynamic {
            // A value only known at run time, as the shell sees one.
            "\"$PARALLEL_ITEM\"".to_string()
        } else {
            tollgate_toolcall::shell::shell_quote(v)
        }
    };
    if replace != "{}" {
        // `-I XX`: the string replaces, and `{…}` is no placeholder.
        if line.contains(replace) {
            return line.replace(replace, &quoted(&item.text));
        }
        return format!("{line} {}", quoted(&item.text));
    }
    let mut out = String::with_capacity(line.len());
    let mut used = false;
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let tail = &rest[open..];
        let Some(close) = tail.find('}') else {
            out.push_str(tail);
            rest = "";
            break;
        };
        match placeholder(&tail[1..close], &item.text) {
            Some(v) => {
                out.push_str(&quoted(&v));
                used = true;
            }
            None => out.push_str(&tail[..=close]),
        }
        rest = &tail[close + 1..];
    }
    out.push_str(rest);
    if !used {
        out.push(' ');
        out.push_str(&quoted(&item.text));
    }
    out
}

/// The value of a parallel placeholder `{…}` (its inside given), if it is one.
fn placeholder(inner: &str, item: &str) -> Option<String> {
    let inner = inner.trim_start_matches(|c: char| c.is_ascii_digit());
    let base = item.rsplit('/').next().unwrap_or(item);
    let no_ext = |s: &str| -> String {
        match s.rfind('.') {
            Some(i) if i > 0 && !s[i..].contains('/') => s[..i].to_string(),
            Some(_) | None => s.to_string(),
        }
    };
    Some(match inner {
        "" => item.to_string(),
        "." => no_ext(item),
        "/" => base.to_string(),
        "//" => match item.rfind('/') {
            Some(0) => "/".to_string(),
            Some(i) => item[..i].to_string(),
            None => ".".to_string(),
        },
        "/." => no_ext(base),
        "#" | "%" => "1".to_string(),
        _ if inner.starts_with('=') && inner.ends_with('=') => item.to_string(),
        _ => return None,
    })
}

/// `env -S` splitting: blanks separate words; quotes, `\_` (a space) and
/// other backslash escapes; `${NAME}` is a value only known at run time; `#`
/// at a word's start begins a comment.
pub(super) fn split_string(s: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut cur = Word::default();
    let mut started = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}' => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            '#' if !started => break,
            '\'' => {
                started = true;
                for x in chars.by_ref() {
                    if x == '\'' {
                        break;
                    }
                    cur.text.push(x);
                }
            }
            '"' => {
                started = true;
                while let Some(x) = chars.next() {
                    match x {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.text.push(unescape(e));
                            }
                        }
                        '$' if chars.peek() == Some(&'{') => skip_var(&mut chars, &mut cur),
                        x => cur.text.push(x),
                    }
                }
            }
            '\\' => {
                started = true;
                match chars.next() {
                    Some('c') => break,
                    Some(e) => cur.text.push(unescape(e)),
                    None => {}
                }
            }
            '$' if chars.peek() == Some(&'{') => {
                started = true;
                skip_var(&mut chars, &mut cur);
            }
            x => {
                started = true;
                cur.text.push(x);
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

fn unescape(e: char) -> char {
    match e {
        '_' => ' ',
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'f' => '\u{c}',
        'v' => '\u{b}',
        other => other,
    }
}

/// `${NAME}` in an `env -S` string: its value is not known here.
fn skip_var(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, cur: &mut Word) {
    for x in chars.by_ref() {
        if x == '}' {
            break;
        }
    }
    cur.dynamic = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_split_strings() {
        let texts =
            |s: &str| -> Vec<String> { split_string(s).into_iter().map(|w| w.text).collect() };
        assert_eq!(texts("rm -rf"), ["rm", "-rf"]);
        assert_eq!(texts("'a b' \"c d\" e\\_f"), ["a b", "c d", "e f"]);
        assert_eq!(texts("x #comment"), ["x"]);
        assert!(split_string("${X}")[0].dynamic);
    }

    #[test]
    fn xargs_items_from_a_here_string() {
        let doc = Stdin::Doc("a 'b c'\n d\n".to_string());
        let t = |sep| -> Option<Vec<String>> {
            items_of(&doc, sep).map(|v| v.into_iter().map(|w| w.text).collect())
        };
        assert_eq!(
            t(Sep::Blanks),
            Some(vec!["a".into(), "b c".into(), "d".into()])
        );
        assert_eq!(t(Sep::Lines), Some(vec!["a 'b c'".into(), "d".into()]));
        assert_eq!(items_of(&Stdin::Pipe, Sep::Blanks), None);
        assert_eq!(items_of(&Stdin::Doc("$HOME".into()), Sep::Blanks), None);
    }

    #[test]
    fn parallel_placeholders() {
        let item = Word::literal("/a/b.txt");
        assert_eq!(fill_parallel("rm {}", "{}", &item), "rm /a/b.txt");
        assert_eq!(
            fill_parallel("rm {}", "{}", &Word::literal("a b's")),
            r"rm 'a b'\''s'"
        );
        assert_eq!(
            fill_parallel("rm {.} {/} {//} {/.}", "{}", &item),
            "rm /a/b b.txt /a b"
        );
        assert_eq!(fill_parallel("rm -rf", "{}", &item), "rm -rf /a/b.txt");
        assert_eq!(
            fill_parallel("echo {a,b}", "{}", &item),
            "echo {a,b} /a/b.txt"
        );
        assert_eq!(fill_parallel("rm XX", "XX", &item), "rm /a/b.txt");
        assert_eq!(
            fill_parallel("rm {1}", "{}", &Word::unknown("x")),
            "rm \"$PARALLEL_ITEM\""
        );
    }
}
