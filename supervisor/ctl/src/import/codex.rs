//! Codex's execpolicy rules (`~/.codex/rules/*.rules`, Starlark):
//! `prefix_rule(pattern = [...], decision = "allow" | "prompt" |
//! "forbidden", justification = "...", match = [...], not_match = [...])`.
//! A pattern's tokens match a command's first words in order; a token that
//! is a list is a choice. Each choice becomes its own pair of run_bash
//! rules (the command, and it followed by arguments); Codex's own `match`
//! examples go to the rules they match and its `not_match` examples to
//! every one. Other calls (`host_executable`, network rules) do not map.

use super::{Imported, List, prefix_rules};

/// A Starlark value of the subset rules use.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Str(String),
    List(Vec<Val>),
    Other(String),
}

/// One top-level call: its name and keyword arguments.
#[derive(Debug)]
struct Call {
    name: String,
    args: Vec<(String, Val)>,
    line: usize,
}

/// The most rules one `prefix_rule` may expand to.
const MAX_CHOICES: usize = 32;

pub fn import(text: &str) -> anyhow::Result<Imported> {
    let mut out = Imported::default();
    for call in Parser::new(text).calls()? {
        let from = format!("line {}: {}(…)", call.line, call.name);
        if call.name == "prefix_rule" {
            prefix_rule(&call, &from, &mut out);
        } else {
            out.unmapped(
                from,
                format!(
                    "`{}` has no tollgate counterpart (tollgate judges each command by its own rules and floors)",
                    call.name
                ),
            );
        }
    }
    Ok(out)
}

fn arg<'a>(call: &'a Call, name: &str) -> Option<&'a Val> {
    call.args.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn prefix_rule(call: &Call, from: &str, out: &mut Imported) {
    let list = match arg(call, "decision") {
        None => List::Allow,
        Some(Val::Str(d)) if d == "allow" => List::Allow,
        Some(Val::Str(d)) if d == "prompt" => List::Ask,
        Some(Val::Str(d)) if d == "forbidden" => List::Deny,
        Some(other) => return out.unmapped(from, format!("unknown decision {other:?}")),
    };
    let Some(Val::List(pattern)) = arg(call, "pattern") else {
        return out.unmapped(from, "no `pattern` list");
    };
    let prefixes = match expand(pattern) {
        Ok(p) => p,
        Err(why) => return out.unmapped(from, why),
    };
    let examples = |key: &str| -> Vec<Vec<String>> {
        match arg(call, key) {
            Some(Val::List(v)) => v.iter().filter_map(example_words).collect(),
            _ => Vec::new(),
        }
    };
    let (matches, not_match) = (examples("match"), examples("not_match"));
    let from = match arg(call, "justification") {
        Some(Val::Str(j)) => format!("{from} {}", j.replace('\n', " ")),
        _ => from.to_string(),
    };
    for words in prefixes {
        let prefix = words.join(" ");
        let first = out.rules.len();
        prefix_rules(list, &prefix, &from, out);
        // The second rule (`PREFIX *`) takes Codex's longer examples.
        for ex in &matches {
            if ex.len() > words.len() && ex.starts_with(&words) {
                out.rules[first + 1].matches.push(ex.join(" "));
            }
        }
        for r in &mut out.rules[first..] {
            r.not_match.extend(not_match.iter().map(|ex| ex.join(" ")));
        }
    }
}

/// Every sequence of words a pattern stands for.
fn expand(pattern: &[Val]) -> Result<Vec<Vec<String>>, String> {
    let mut all: Vec<Vec<String>> = vec![Vec::new()];
    for token in pattern {
        let choices: Vec<&str> = match token {
            Val::Str(s) => vec![s.as_str()],
            Val::List(v) => v
                .iter()
                .map(|c| match c {
                    Val::Str(s) => Ok(s.as_str()),
                    _ => Err("a choice that is not a string".to_string()),
                })
                .collect::<Result<_, _>>()?,
            Val::Other(o) => return Err(format!("a pattern token `{o}` that is not a string")),
        };
        for c in &choices {
            if c.is_empty()
                || c.chars()
                    .any(|ch| ch.is_whitespace() || "*\"'\\$`".contains(ch))
            {
                return Err(format!(
                    "the token {c:?} holds a space, quote or `*`, which a run_bash glob cannot match word for word"
                ));
            }
        }
        all = all
            .into_iter()
            .flat_map(|p| {
                choices.iter().map(move |c| {
                    let mut p = p.clone();
                    p.push((*c).to_string());
                    p
                })
            })
            .collect();
        if all.len() > MAX_CHOICES {
            return Err(format!("its choices make more than {MAX_CHOICES} commands"));
        }
    }
    if all.iter().all(Vec::is_empty) {
        return Err("an empty pattern".to_string());
    }
    Ok(all)
}

/// An example as words: a list of tokens, or a string split on whitespace.
fn example_words(v: &Val) -> Option<Vec<String>> {
    match v {
        Val::Str(s) => Some(s.split_whitespace().map(str::to_string).collect()),
        Val::List(items) => items
            .iter()
            .map(|i| match i {
                Val::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        Val::Other(_) => None,
    }
}

/// A reader of top-level `name(key = value, ...)` calls.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser {
            s: text.as_bytes(),
            at: 0,
        }
    }

    fn line(&self) -> usize {
        1 + self.s[..self.at].iter().filter(|&&b| b == b'\n').count()
    }

    fn fail<T>(&self, what: &str) -> anyhow::Result<T> {
        anyhow::bail!("line {}: {what}", self.line())
    }

    /// Skips whitespace and `#` comments.
    fn skip(&mut self) {
        while self.at < self.s.len() {
            match self.s[self.at] {
                b' ' | b'\t' | b'\r' | b'\n' => self.at += 1,
                b'#' => {
                    while self.at < self.s.len() && self.s[self.at] != b'\n' {
                        self.at += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip();
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> String {
        self.skip();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.at]).into_owned()
    }

    fn calls(mut self) -> anyhow::Result<Vec<Call>> {
        let mut calls = Vec::new();
        while self.peek().is_some() {
            let line = self.line();
            let name = self.ident();
            if name.is_empty() || !self.eat(b'(') {
                return self.fail("expected a call such as prefix_rule(...)");
            }
            let mut args = Vec::new();
            while !self.eat(b')') {
                let key = self.ident();
                if key.is_empty() || !self.eat(b'=') {
                    return self.fail("expected `name = value`");
                }
                args.push((key, self.value()?));
                if !self.eat(b',') && self.peek() != Some(b')') {
                    return self.fail("expected `,` or `)`");
                }
            }
            calls.push(Call { name, args, line });
        }
        Ok(calls)
    }

    fn value(&mut self) -> anyhow::Result<Val> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string(q).map(Val::Str),
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat(b']') {
                    items.push(self.value()?);
                    if !self.eat(b',') && self.peek() != Some(b']') {
                        return self.fail("expected `,` or `]`");
                    }
                }
                Ok(Val::List(items))
            }
            Some(_) => {
                let word = self.ident();
                if word.is_empty() {
                    return self.fail("expected a string, a list or a name");
                }
                Ok(Val::Other(word))
            }
            None => self.fail("the file ends inside a call"),
        }
    }

    fn string(&mut self, quote: u8) -> anyhow::Result<String> {
        self.at += 1;
        let mut out = Vec::new();
        while let Some(&b) = self.s.get(self.at) {
            self.at += 1;
            match b {
                b'\\' => {
                    let Some(&e) = self.s.get(self.at) else { break };
                    self.at += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        other => other,
                    });
                }
                b'\n' => return self.fail("a string runs past the end of its line"),
                b if b == quote => return Ok(String::from_utf8_lossy(&out).into_owned()),
                b => out.push(b),
            }
        }
        self.fail("a string is not closed")
    }
}
