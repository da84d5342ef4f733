//! Shell words: what bash would make of one word before running it.
//!
//! Quotes are removed, escapes and `$'…'` decoded, `~`, `$HOME`, `$TMPDIR`
//! and `$PWD` expanded to what the sandbox sets them to (docs/THREAT_MODEL.md,
//! "The sandbox's environment"). Any other expansion is unknown at check time:
//! it is dropped from the text and the word is marked `dynamic`. Command
//! substitutions found anywhere in the word (even inside `${X:-$(…)}`) are
//! handed back so they are analysed as commands of their own.

use brush_parser::ParserOptions;
use brush_parser::word::{ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};

/// One evaluated word.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word {
    /// The static value: unknown expansions contribute nothing.
    pub text: String,
    /// Holds an expansion whose value is unknown here.
    pub dynamic: bool,
    /// Holds an unquoted glob (`* ? [`) or brace (`{a,b}`) pattern.
    pub glob: bool,
    /// Holds an unquoted expansion: bash may split it into several words,
    /// or drop it, so the words after it may shift.
    pub splits: bool,
    /// Stands for a directory tree rather than one path (find's `{}`).
    pub tree: Tree,
    /// The word as written, for messages; empty when it equals `text`.
    pub raw: String,
}

/// What a word that stands for many files covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Tree {
    /// One path.
    #[default]
    No,
    /// The path and every file beneath it (`find DIR -exec … {}`).
    Whole,
    /// Some files beneath the path, picked by name (`find DIR -name x`);
    /// `build_dirs` when every name picked is a directory a build recreates.
    Part { build_dirs: bool },
}

/// The positional parameters of a `sh -c` script given arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Positional {
    /// `$0`.
    pub zero: Word,
    /// `$1`, `$2`, …
    pub rest: Vec<Word>,
}

impl Word {
    /// A word known to be literal text.
    pub(crate) fn literal(s: &str) -> Word {
        Word {
            text: s.to_string(),
            ..Word::default()
        }
    }

    /// A value only known when the command runs (an item read from stdin).
    pub(crate) fn unknown(raw: &str) -> Word {
        Word {
            dynamic: true,
            raw: raw.to_string(),
            ..Word::default()
        }
    }

    /// The word may become several words, or none, when bash expands it.
    pub(crate) fn may_split(&self) -> bool {
        self.splits || self.glob
    }

    /// The word as written.
    pub(crate) fn raw(&self) -> &str {
        if self.raw.is_empty() {
            &self.text
        } else {
            &self.raw
        }
    }
}

/// The word could not be parsed (an unterminated quote or expansion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WordError(pub String);

/// What expansions may be resolved to: HOME, TMPDIR and PWD as the
/// sandbox sets them when the command runs there (`None`: not known here,
/// say after the command set one to a computed value).
pub(crate) struct Env<'a> {
    pub home: Option<&'a str>,
    pub tmpdir: Option<&'a str>,
    /// `$PWD`: the working directory, when known.
    pub pwd: Option<&'a str>,
    /// Other variables whose values are known: the package caches' as the
    /// sandbox sets them (`None`: set to something not known here).
    pub vars: &'a [(String, Option<String>)],
    pub cwd: &'a str,
    /// `$1`… when a `sh -c` script was given arguments.
    pub positional: Option<&'a Positional>,
}

/// Parser options as bash has them when it runs a script: extglob off.
pub(crate) fn options() -> ParserOptions {
    ParserOptions {
        enable_extended_globbing: false,
        ..ParserOptions::default()
    }
}

/// Characters that make a word more than plain text.
fn is_plain(raw: &str) -> bool {
    !raw.bytes().any(|b| {
        matches!(
            b,
            b'\''
                | b'"'
                | b'\\'
                | b'$'
                | b'`'
                | b'~'
                | b'{'
                | b'*'
                | b'?'
                | b'['
                | b'('
                | b'!'
                | b'@'
                | b'+'
        )
    })
}

/// Quote removal for the common case: plain text, `'…'` and `"…"` without
/// any expansion or escape inside. `None` means the word needs the full
/// word parser.
fn simple_quotes(raw: &str) -> Option<Word> {
    let mut text = String::with_capacity(raw.len());
    let mut glob = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    c => text.push(c),
                }
            },
            '"' => loop {
                match chars.next()? {
                    '"' => break,
                    '$' | '`' | '\\' => return None,
                    c => text.push(c),
                }
            },
            '$' | '`' | '\\' | '~' | '{' | '(' | '!' | '@' | '+' => return None,
            '*' | '?' => {
                glob = true;
                text.push(c);
            }
            '[' => return None,
            c => text.push(c),
        }
    }
    Some(Word {
        text,
        glob,
        raw: raw.to_string(),
        ..Word::default()
    })
}

/// [`eval`] into `out`. A literal word reuses `out`'s strings: a script's
/// words are mostly literal, and the walk keeps one command's words for the
/// next (on error `out` holds nothing useful).
pub(crate) fn eval_into(
    raw: &str,
    env: &Env,
    subs: &mut Vec<String>,
    out: &mut Word,
) -> Result<(), WordError> {
    if is_plain(raw) {
        out.text.clear();
        out.text.push_str(raw);
        out.dynamic = false;
        out.glob = false;
        out.splits = false;
        out.tree = Tree::No;
        out.raw.clear();
        return Ok(());
    }
    *out = eval(raw, env, subs)?;
    Ok(())
}

/// Evaluates `raw`. Command substitutions are appended to `subs`.
pub(crate) fn eval(raw: &str, env: &Env, subs: &mut Vec<String>) -> Result<Word, WordError> {
    if is_plain(raw) {
        return Ok(Word::literal(raw));
    }
    if let Some(w) = simple_quotes(raw) {
        return Ok(w);
    }
    let pieces = parse(raw)?;
    let mut w = Word {
        raw: raw.to_string(),
        ..Word::default()
    };
    pieces_into(&pieces, false, env, subs, &mut w)?;
    if w.tree != Tree::No && !is_whole_tree_value(&w, env) {
        // `{}` inside a longer word (`{}.bak`): a path only partly known.
        w.tree = Tree::No;
        w.dynamic = true;
    }
    Ok(w)
}

/// The word is exactly one positional parameter that stands for a tree.
fn is_whole_tree_value(w: &Word, env: &Env) -> bool {
    env.positional.is_some_and(|p| {
        std::iter::once(&p.zero)
            .chain(&p.rest)
            .any(|v| v.tree != Tree::No && v.text == w.text)
    })
}

/// Evaluates the body of an unquoted here-document (only `$` and backquote
/// expansions apply there); returns nothing but the substitutions.
pub(crate) fn heredoc_subs(body: &str, env: &Env, subs: &mut Vec<String>) -> Result<(), WordError> {
    if !body.contains('$') && !body.contains('`') {
        return Ok(());
    }
    let pieces = guarded(|| brush_parser::word::parse_heredoc(body, &options()))
        .ok_or_else(|| WordError("the word parser failed".to_string()))?
        .map_err(|e| WordError(e.to_string()))?;
    let mut w = Word::default();
    pieces_into(&pieces, true, env, subs, &mut w)
}

fn parse(raw: &str) -> Result<Vec<WordPieceWithSource>, WordError> {
    guarded(|| brush_parser::word::parse(raw, &options()))
        .ok_or_else(|| WordError("the word parser failed".to_string()))?
        .map_err(|e| WordError(e.to_string()))
}

thread_local! {
    static UNTRUSTED_PARSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs third-party parsing code that may panic; a panic becomes `None`.
/// Meanwhile [`parsing_untrusted_input`] is true on this thread.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    let outer = UNTRUSTED_PARSE.replace(true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    UNTRUSTED_PARSE.set(outer);
    result
}

/// Whether this thread is running brush-parser on agent input, inside the
/// engine's `catch_unwind`: a panic now is caught and the command refused.
/// For a process's panic hook: such a panic deserves one log line, not a
/// printed (and, with RUST_BACKTRACE set, captured) backtrace, since the
/// agent can send the same input in a loop.
pub fn parsing_untrusted_input() -> bool {
    UNTRUSTED_PARSE.get()
}

fn pieces_into(
    pieces: &[WordPieceWithSource],
    quoted: bool,
    env: &Env,
    subs: &mut Vec<String>,
    w: &mut Word,
) -> Result<(), WordError> {
    for p in pieces {
        match &p.piece {
            WordPiece::Text(s) => {
                if !quoted && has_pattern(s) {
                    w.glob = true;
                }
                w.text.push_str(s);
            }
            WordPiece::SingleQuotedText(s) => w.text.push_str(s),
            WordPiece::AnsiCQuotedText(s) => w.text.push_str(&decode_ansi_c(s)),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                pieces_into(inner, true, env, subs, w)?;
            }
            WordPiece::TildeExpansion(t) => match t {
                TildeExpr::Home => match env.home {
                    Some(h) => w.text.push_str(h),
                    None => w.dynamic = true,
                },
                TildeExpr::UserHome(user) => {
                    if user == "root" {
                        w.text.push_str("/root");
                    } else {
                        w.text.push_str("/home/");
                        w.text.push_str(user);
                    }
                }
                TildeExpr::WorkingDir => w.text.push_str(env.cwd),
                TildeExpr::OldWorkingDir
                | TildeExpr::NthDirFromTopOfDirStack { .. }
                | TildeExpr::NthDirFromBottomOfDirStack { .. } => w.dynamic = true,
            },
            WordPiece::ParameterExpansion(expr) => {
                if let Some(known) = known_var(expr, env) {
                    match known {
                        Some(v) => w.text.push_str(v),
                        None => {
                            w.splits |= !quoted;
                            w.dynamic = true;
                        }
                    }
                } else if let Some(p) = env.positional
                    && let Some(arg) = positional_arg(expr)
                {
                    push_positional(p, arg, quoted, w);
                } else {
                    w.splits |= !quoted;
                    w.dynamic = true;
                    for embedded in embedded_words(expr) {
                        // Defaults, alternatives and patterns are words too:
                        // `${X:-$(curl …)}` runs curl.
                        let inner = eval(embedded, env, subs)?;
                        let _ = inner;
                    }
                }
            }
            WordPiece::CommandSubstitution(s) => {
                w.dynamic = true;
                w.splits |= !quoted;
                subs.push(s.clone());
            }
            WordPiece::BackquotedCommandSubstitution(s) => {
                w.dynamic = true;
                w.splits |= !quoted;
                subs.push(unescape_backquoted(s));
            }
            WordPiece::EscapeSequence(s) => {
                let mut chars = s.chars();
                let _backslash = chars.next();
                let rest: String = chars.collect();
                if rest != "\n" {
                    w.text.push_str(&rest);
                }
            }
            WordPiece::ArithmeticExpression(expr) => {
                w.dynamic = true;
                if expr.value.contains('$') || expr.value.contains('`') {
                    let inner = eval(&expr.value, env, subs)?;
                    let _ = inner;
                }
            }
        }
    }
    Ok(())
}

/// Which positional parameter a plain `$N`, `$@` or `$*` names.
enum Arg {
    /// `$N`.
    Nth(usize),
    /// `$@` or `$*` inside a longer word.
    All,
}

fn positional_arg(expr: &ParameterExpr) -> Option<Arg> {
    use brush_parser::word::{Parameter, SpecialParameter};
    match expr {
        ParameterExpr::Parameter {
            parameter: Parameter::Positional(n),
            indirect: false,
        } => Some(Arg::Nth(*n as usize)),
        ParameterExpr::Parameter {
            parameter: Parameter::Special(SpecialParameter::AllPositionalParameters { .. }),
            indirect: false,
        } => Some(Arg::All),
        ParameterExpr::Parameter {
            parameter: Parameter::Special(SpecialParameter::ShellName),
            indirect: false,
        } => Some(Arg::Nth(0)),
        _ => None,
    }
}

/// Appends a positional parameter's value: known when the script was given
/// literal arguments, unknown otherwise.
fn push_positional(p: &Positional, arg: Arg, quoted: bool, w: &mut Word) {
    let value = match arg {
        Arg::Nth(0) => Some(&p.zero),
        Arg::Nth(n) => p.rest.get(n - 1),
        Arg::All if p.rest.len() == 1 => p.rest.first(),
        Arg::All => {
            // Several words glued to the text around them: partly known.
            for (i, v) in p.rest.iter().enumerate() {
                if i > 0 {
                    w.text.push(' ');
                }
                w.text.push_str(&v.text);
            }
            w.dynamic = true;
            w.splits |= !quoted;
            return;
        }
    };
    let Some(v) = value else {
        // Unset: empty, but treated as unknown like any other variable.
        w.dynamic = true;
        w.splits |= !quoted;
        return;
    };
    if v.tree != Tree::No {
        if w.text.is_empty() {
            w.tree = v.tree;
        } else {
            w.dynamic = true;
        }
    }
    w.text.push_str(&v.text);
    w.dynamic |= v.dynamic;
    w.splits |= v.splits || (!quoted && (v.dynamic || v.text.contains(char::is_whitespace)));
    w.glob |= v.glob || (!quoted && has_pattern(&v.text));
}

/// `$HOME`, `$TMPDIR`, `$PWD` or one of [`Env::vars`] alone: `Some` with
/// its value (`None` inside when not known here); `None` for any other
/// expansion.
fn known_var<'e>(expr: &ParameterExpr, env: &Env<'e>) -> Option<Option<&'e str>> {
    use brush_parser::word::Parameter;
    let ParameterExpr::Parameter {
        parameter: Parameter::Named(n),
        indirect: false,
    } = expr
    else {
        return None;
    };
    match n.as_str() {
        "HOME" => Some(env.home),
        "TMPDIR" => Some(env.tmpdir),
        "PWD" => Some(env.pwd),
        name => env
            .vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_deref()),
    }
}

/// The word-like strings inside a parameter expansion.
fn embedded_words(expr: &ParameterExpr) -> Vec<&str> {
    let mut out = Vec::new();
    match expr {
        ParameterExpr::UseDefaultValues {
            default_value: v, ..
        }
        | ParameterExpr::AssignDefaultValues {
            default_value: v, ..
        }
        | ParameterExpr::UseAlternativeValue {
            alternative_value: v,
            ..
        }
        | ParameterExpr::IndicateErrorIfNullOrUnset {
            error_message: v, ..
        }
        | ParameterExpr::RemoveSmallestSuffixPattern { pattern: v, .. }
        | ParameterExpr::RemoveLargestSuffixPattern { pattern: v, .. }
        | ParameterExpr::RemoveSmallestPrefixPattern { pattern: v, .. }
        | ParameterExpr::RemoveLargestPrefixPattern { pattern: v, .. }
        | ParameterExpr::UppercaseFirstChar { pattern: v, .. }
        | ParameterExpr::UppercasePattern { pattern: v, .. }
        | ParameterExpr::LowercaseFirstChar { pattern: v, .. }
        | ParameterExpr::LowercasePattern { pattern: v, .. } => out.extend(v.as_deref()),
        ParameterExpr::ReplaceSubstring {
            pattern,
            replacement,
            ..
        } => {
            out.push(pattern.as_str());
            out.extend(replacement.as_deref());
        }
        ParameterExpr::Substring { offset, length, .. } => {
            out.push(offset.value.as_str());
            out.extend(length.as_ref().map(|l| l.value.as_str()));
        }
        ParameterExpr::Parameter { .. }
        | ParameterExpr::ParameterLength { .. }
        | ParameterExpr::Transform { .. }
        | ParameterExpr::VariableNames { .. }
        | ParameterExpr::MemberKeys { .. } => {}
    }
    out
}

/// Unquoted glob or brace-expansion syntax.
fn has_pattern(s: &str) -> bool {
    if s.contains(['*', '?']) {
        return true;
    }
    // A bracket expression needs its closing bracket; a lone `[` (the test
    // command) is literal.
    if let Some(open) = s.find('[')
        && s[open + 1..].contains(']')
    {
        return true;
    }
    if let Some(open) = s.find('{')
        && let Some(close) = s[open..].find('}')
    {
        let inner = &s[open + 1..open + close];
        if inner.contains(',') || inner.contains("..") {
            return true;
        }
    }
    // extglob: @(…) !(…) +(…)
    s.contains("@(") || s.contains("!(") || s.contains("+(")
}

/// Inside backquotes a backslash escapes only `$`, backquote and backslash.
fn unescape_backquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '$' | '`' | '\\')
        {
            out.push(n);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// Decodes the body of `$'…'` as bash does.
pub(crate) fn decode_ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'e' | 'E' => out.push('\u{1b}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            '0'..='7' => {
                let mut n = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            n = n * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(n & 0xFF).unwrap_or('\u{FFFD}'));
            }
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut n: u32 = 0;
                let mut digits = 0;
                while digits < max {
                    match chars.peek().and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            n = n.wrapping_mul(16).wrapping_add(d);
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push('\\');
                    out.push(e);
                } else {
                    out.push(char::from_u32(n).unwrap_or('\u{FFFD}'));
                }
            }
            'c' => match chars.next() {
                Some(x) => out.push(char::from_u32(u32::from(x) & 0x1F).unwrap_or('\u{FFFD}')),
                None => out.push_str("\\c"),
            },
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_marks_the_thread_while_it_parses() {
        assert!(!parsing_untrusted_input());
        assert_eq!(guarded(parsing_untrusted_input), Some(true));
        assert_eq!(
            guarded(|| guarded(parsing_untrusted_input)),
            Some(Some(true))
        );
        assert!(!parsing_untrusted_input());
        // A panic is caught (its message is printed), and the mark is
        // cleared all the same.
        let caught = guarded(|| -> u8 { panic!("like brush-parser's unwraps") });
        assert_eq!(caught, None);
        assert!(!parsing_untrusted_input());
    }

    fn ev(raw: &str) -> (Word, Vec<String>) {
        let env = Env {
            home: Some("/home/u"),
            tmpdir: Some("/tmp"),
            pwd: None,
            vars: &[],
            cwd: "/w",
            positional: None,
        };
        let mut subs = Vec::new();
        let w = eval(raw, &env, &mut subs).unwrap();
        (w, subs)
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(ev("c''url").0.text, "curl");
        assert_eq!(ev("'curl'").0.text, "curl");
        assert_eq!(ev("\"cu\"rl").0.text, "curl");
        assert_eq!(ev("\\rm").0.text, "rm");
        assert_eq!(ev("$'\\x63url'").0.text, "curl");
        assert_eq!(ev("$'\\143\\165\\162\\154'").0.text, "curl");
        assert_eq!(ev("$'\\u0063url'").0.text, "curl");
        assert_eq!(ev("\"a\\\"b\\qc\"").0.text, "a\"b\\qc");
        assert!(!ev("'a*b'").0.glob);
    }

    #[test]
    fn expansions_are_dynamic_except_home() {
        let (w, _) = ev("cu${EMPTY}rl");
        assert_eq!((w.text.as_str(), w.dynamic), ("curl", true));
        let (w, _) = ev("\"$UNSET\"/");
        assert_eq!((w.text.as_str(), w.dynamic), ("/", true));
        let (w, _) = ev("~/.ssh");
        assert_eq!((w.text.as_str(), w.dynamic), ("/home/u/.ssh", false));
        assert_eq!(ev("$HOME").0.text, "/home/u");
        assert_eq!(ev("${HOME}/x").0.text, "/home/u/x");
        assert_eq!(ev("~root/.bashrc").0.text, "/root/.bashrc");
        assert!(ev("$((1+2))").0.dynamic);
    }

    #[test]
    fn substitutions_are_collected_wherever_they_hide() {
        assert_eq!(ev("$(printf 'c%sl' ur)").1, vec!["printf 'c%sl' ur"]);
        assert_eq!(ev("`echo curl`").1, vec!["echo curl"]);
        assert_eq!(ev("\"a $(b c) d\"").1, vec!["b c"]);
        assert_eq!(ev("${X:-$(curl x)}").1, vec!["curl x"]);
        assert_eq!(ev("$(( $(curl x) + 1 ))").1, vec!["curl x"]);
        assert_eq!(ev("`echo \\`id\\``").1, vec!["echo `id`"]);
    }

    #[test]
    fn positional_parameters_of_a_script_given_arguments() {
        let p = Positional {
            zero: Word::literal("sh"),
            rest: vec![
                Word::literal("/etc/passwd"),
                Word::literal("a b"),
                Word {
                    text: "/home/u".into(),
                    tree: Tree::Whole,
                    ..Word::default()
                },
            ],
        };
        let env = Env {
            home: Some("/home/u"),
            tmpdir: Some("/tmp"),
            pwd: None,
            vars: &[],
            cwd: "/w",
            positional: Some(&p),
        };
        let ev = |raw: &str| eval(raw, &env, &mut Vec::new()).unwrap();
        assert_eq!(ev("\"$1\"").text, "/etc/passwd");
        assert!(!ev("\"$1\"").dynamic);
        assert_eq!(ev("${1}x").text, "/etc/passwdx");
        assert_eq!(ev("$0").text, "sh");
        // Unquoted, a value with a blank becomes two words.
        assert!(ev("$2").splits);
        assert!(!ev("\"$2\"").splits);
        // Unset: unknown.
        assert!(ev("\"$7\"").dynamic);
        // A tree stays a tree only as the whole word.
        assert_eq!(ev("\"$3\"").tree, Tree::Whole);
        let glued = ev("\"$3\"/x");
        assert_eq!((glued.tree, glued.dynamic), (Tree::No, true));
        // `$@` inside a longer word: several words glued, partly known.
        assert!(ev("\"x$@\"").dynamic);
    }

    #[test]
    fn globs_and_braces_are_flagged_only_unquoted() {
        assert!(ev("/???/???/c?rl").0.glob);
        assert!(ev("/usr/bin/cur[l]").0.glob);
        assert!(ev("c{u,}rl").0.glob);
        assert!(ev("{1..3}").0.glob);
        assert!(!ev("{}").0.glob);
        assert!(!ev("[").0.glob);
        assert!(!ev("[[").0.glob);
        assert!(!ev("\"*\"").0.glob);
        assert!(!ev("\\*").0.glob);
    }

    #[test]
    fn the_quote_fast_path_agrees_with_the_word_parser() {
        let env = Env {
            home: Some("/home/u"),
            tmpdir: Some("/tmp"),
            pwd: None,
            vars: &[],
            cwd: "/w",
            positional: None,
        };
        for raw in [
            "'a b'",
            "\"a b\"",
            "a'b'\"c\"d",
            "\"TODO(1)\"",
            "'*'",
            "a*b",
            "'it''s'",
            "\"\"",
            "''",
            "\"a'b\"",
            "'a\"b'",
            "x=\"1 2\"",
            "\"é ü\"",
        ] {
            let fast = simple_quotes(raw).unwrap_or_else(|| panic!("{raw:?} not on the fast path"));
            let pieces = parse(raw).unwrap();
            let mut slow = Word {
                raw: raw.to_string(),
                ..Word::default()
            };
            pieces_into(&pieces, false, &env, &mut Vec::new(), &mut slow).unwrap();
            assert_eq!(fast, slow, "{raw:?}");
        }
        for raw in [
            "\"$x\"",
            "'unterminated",
            "\"a",
            "\"a\\\"b\"",
            "~/x",
            "a[1]",
            "{a,b}",
        ] {
            assert!(simple_quotes(raw).is_none(), "{raw:?}");
        }
    }

    #[test]
    fn ansi_c_edge_cases() {
        assert_eq!(decode_ansi_c("\\x"), "\\x");
        assert_eq!(decode_ansi_c("\\"), "\\");
        assert_eq!(decode_ansi_c("a\\tb\\n"), "a\tb\n");
        assert_eq!(decode_ansi_c("\\cA"), "\u{1}");
        assert_eq!(decode_ansi_c("\\U0001F600"), "😀");
        assert_eq!(decode_ansi_c("\\UFFFFFFFF"), "\u{FFFD}");
    }
}
