//! Command-line options as getopt reads them, from a one-line spec per
//! program: which options take a value, and what a value or flag means to
//! the shell policy (a script to check, a file written, a directory the
//! command runs in, …). Used by the launcher table and by the few commands
//! whose options carry programs (sed, sort, split).
//!
//! A spec is whitespace-separated tokens `NAMES[ARITY][@ROLE]`:
//! - `NAMES`: comma-separated; one character is a short option (`-k`), more
//!   is a long one (`--kill-after`).
//! - `ARITY`: none for a flag, `=` for a required value (`-kV`, `-k V`,
//!   `--x=V`, `--x V`), `=?` for an optional one (only glued: `-kV`,
//!   `--x=V`), `=2` / `=3` for that many separate values (bwrap's `--bind`).
//! - `ROLE`: see [`Role`].

use std::collections::HashMap;

use super::words::Word;

/// How many values an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arity {
    Flag,
    Required,
    /// Only glued to the option.
    Optional,
    /// This many separate words.
    Many(u8),
}

/// What an option means to the shell policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Nothing the policy cares about.
    None,
    /// The value is a shell script the program runs (`flock -c`, `su -c`).
    Script,
    /// The value is split into words that take the option's place
    /// (`env -S`).
    Split,
    /// The value is a program the program runs (`sort --compress-program`).
    Program,
    /// The program runs no command (`command -v`, `taskset -p`, `--help`).
    Inert,
    /// The value is a file the program writes (`time -o`).
    Writes,
    /// The value is a file the program reads (`xargs -a`).
    Reads,
    /// The command runs in the directory given (`env -C`).
    Chdir,
    /// The value is the string replaced by each input item (`xargs -I`);
    /// without a value, `{}`.
    Replace,
    /// The command words are given to the program's shell (`sudo -s`);
    /// with no command it reads one from stdin.
    Login,
    /// The command words are a command, not arguments of a shell
    /// (`runuser -u`) nor a `sh -c` string (`watch -x`).
    Argv,
    /// The command words are joined and run by `sh -c` (`entr -s`).
    ShellWords,
    /// The items are read from a file (`xargs -a`).
    Items,
    /// Input items end with NUL (`xargs -0`).
    Null,
    /// Input items end with this character (`xargs -d`).
    Delimiter,
    /// One item per line (`xargs -L`, `-I`).
    Lines,
    /// Items are split into columns (`parallel --colsep`).
    Columns,
    /// The command words are quoted, not run by a shell (`parallel -q`).
    Quote,
    /// An ssh `-o Key=Value`: some keys are commands.
    SshOption,
    /// A gdb command: `shell …` and `!…` run a command.
    GdbCommand,
    /// The policy does not follow what this option does; refused.
    Refuse,
    /// A `NAME=VALUE` word that sets a variable for the command (env).
    Assign,
}

/// One option of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opt {
    pub arity: Arity,
    pub role: Role,
}

/// A compiled spec.
#[derive(Debug, Default)]
pub(super) struct Table {
    short: HashMap<char, Opt>,
    long: Vec<(&'static str, Opt)>,
}

/// What a long option name found.
pub(super) enum Long<'t> {
    Found(&'t str, Opt),
    Unknown,
    /// A prefix of several long options with different meanings.
    Ambiguous,
}

impl Table {
    pub(super) fn short(&self, c: char) -> Option<Opt> {
        self.short.get(&c).copied()
    }

    /// A long option by its name or, as getopt allows, an unambiguous prefix
    /// of it (`--kill` for `--kill-after`).
    pub(super) fn long(&self, name: &str) -> Long<'_> {
        if let Some((n, o)) = self.long.iter().find(|(n, _)| *n == name) {
            return Long::Found(n, *o);
        }
        let mut hits = self.long.iter().filter(|(n, _)| n.starts_with(name));
        let Some((first, opt)) = hits.next() else {
            return Long::Unknown;
        };
        if name.is_empty() || hits.any(|(_, o)| o != opt) {
            return Long::Ambiguous;
        }
        Long::Found(first, *opt)
    }
}

/// Compiles a spec; the second value lists tokens that did not parse (a
/// test keeps it empty for every spec in the code).
pub(super) fn compile(spec: &'static str) -> (Table, Vec<&'static str>) {
    let mut t = Table::default();
    let mut bad = Vec::new();
    for token in spec.split_whitespace() {
        let (head, role) = match token.split_once('@') {
            Some((h, r)) => (h, role_named(r)),
            None => (token, Some(Role::None)),
        };
        let (names, arity) = match head.split_once('=') {
            None => (head, Some(Arity::Flag)),
            Some((n, "")) => (n, Some(Arity::Required)),
            Some((n, "?")) => (n, Some(Arity::Optional)),
            Some((n, k)) => (n, k.parse::<u8>().ok().map(Arity::Many)),
        };
        let (Some(role), Some(arity)) = (role, arity) else {
            bad.push(token);
            continue;
        };
        let opt = Opt { arity, role };
        for name in names.split(',') {
            let mut chars = name.chars();
            match (chars.next(), chars.next()) {
                (None, _) => bad.push(token),
                (Some(c), None) => {
                    t.short.insert(c, opt);
                }
                (Some(_), Some(_)) => t.long.push((name, opt)),
            }
        }
    }
    (t, bad)
}

fn role_named(name: &str) -> Option<Role> {
    Some(match name {
        "script" => Role::Script,
        "split" => Role::Split,
        "program" => Role::Program,
        "inert" => Role::Inert,
        "writes" => Role::Writes,
        "reads" => Role::Reads,
        "chdir" => Role::Chdir,
        "replace" => Role::Replace,
        "login" => Role::Login,
        "argv" => Role::Argv,
        "shellwords" => Role::ShellWords,
        "items" => Role::Items,
        "null" => Role::Null,
        "delimiter" => Role::Delimiter,
        "lines" => Role::Lines,
        "columns" => Role::Columns,
        "quote" => Role::Quote,
        "ssh" => Role::SshOption,
        "gdb" => Role::GdbCommand,
        "refuse" => Role::Refuse,
        _ => return None,
    })
}

/// One option found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub opt: Opt,
    /// The option as written (`-e`, `--expression`).
    pub name: String,
    pub value: Option<Word>,
}

/// A command line read the GNU way: options may follow operands, `--` ends
/// them. Unknown options count as flags (the program refuses them and runs
/// nothing).
#[derive(Debug, Default)]
pub(super) struct Scan<'w> {
    pub operands: Vec<&'w Word>,
    pub found: Vec<Found>,
}

impl Scan<'_> {
    pub(super) fn has(&self, role: Role) -> bool {
        self.found.iter().any(|f| f.opt.role == role)
    }

    pub(super) fn values(&self, role: Role) -> impl Iterator<Item = (&str, &Word)> {
        self.found
            .iter()
            .filter(move |f| f.opt.role == role)
            .filter_map(|f| Some((f.name.as_str(), f.value.as_ref()?)))
    }
}

pub(super) fn scan<'w>(t: &Table, words: &'w [Word]) -> Scan<'w> {
    let mut out = Scan::default();
    let mut i = 1;
    let mut ended = false;
    while let Some(w) = words.get(i) {
        let text = w.text.as_str();
        i += 1;
        if ended || !text.starts_with('-') || text == "-" {
            out.operands.push(w);
            continue;
        }
        if text == "--" {
            ended = true;
            continue;
        }
        let glued = |v: &str| Word {
            text: v.to_string(),
            raw: String::new(),
            ..w.clone()
        };
        if let Some(long) = text.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let Long::Found(full, opt) = t.long(name) else {
                continue;
            };
            let value = match (opt.arity, value) {
                (Arity::Flag, _) => None,
                (_, Some(v)) => Some(glued(v)),
                (Arity::Optional, None) => None,
                (Arity::Required | Arity::Many(_), None) => {
                    i += 1;
                    words.get(i - 1).cloned()
                }
            };
            out.found.push(Found {
                opt,
                name: format!("--{full}"),
                value,
            });
            continue;
        }
        let cluster = &text[1..];
        for (k, c) in cluster.char_indices() {
            let Some(opt) = t.short(c) else {
                continue;
            };
            let rest = &cluster[k + c.len_utf8()..];
            let value = match opt.arity {
                Arity::Flag => None,
                Arity::Optional => (!rest.is_empty()).then(|| glued(rest)),
                Arity::Required | Arity::Many(_) if !rest.is_empty() => Some(glued(rest)),
                Arity::Required | Arity::Many(_) => {
                    i += 1;
                    words.get(i - 1).cloned()
                }
            };
            let takes = opt.arity != Arity::Flag;
            out.found.push(Found {
                opt,
                name: format!("-{c}"),
                value,
            });
            if takes {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let (t, bad) =
            compile("k,kill-after= s,signal= v preserve-status c,command=@script i=? bind=2");
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(t.short('k').map(|o| o.arity), Some(Arity::Required));
        assert_eq!(t.short('v').map(|o| o.arity), Some(Arity::Flag));
        assert_eq!(t.short('c').map(|o| o.role), Some(Role::Script));
        assert_eq!(t.short('i').map(|o| o.arity), Some(Arity::Optional));
        assert!(matches!(
            t.long("bind"),
            Long::Found(
                "bind",
                Opt {
                    arity: Arity::Many(2),
                    ..
                }
            )
        ));
        assert!(matches!(t.long("kill"), Long::Found("kill-after", _)));
        assert!(matches!(
            t.long("preserve"),
            Long::Found("preserve-status", _)
        ));
        assert!(matches!(t.long("nope"), Long::Unknown));
        let (_, bad) = compile("x@nosuchrole y=z");
        assert_eq!(bad, ["x@nosuchrole", "y=z"]);
    }

    #[test]
    fn ambiguous_prefixes_are_not_guessed() {
        let (t, _) = compile("verbose version@inert");
        assert!(matches!(t.long("ver"), Long::Ambiguous));
        assert!(matches!(t.long("verb"), Long::Found("verbose", _)));
    }
}
