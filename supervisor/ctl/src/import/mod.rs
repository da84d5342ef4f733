//! `policy import claude|codex FILE`: another client's permission rules as
//! a tollgate `policy.d/` drop-in on stdout (docs/OPERATIONS.md "Importing
//! a client's rules"). Every rule carries `match` examples (and `not_match`
//! where a boundary matters), which the engine checks when it loads the
//! file, so `supervisorctl policy test` against it proves the translation.
//! What does not map is listed at the end of the drop-in as comments and on
//! stderr, each with why.

mod claude;
mod codex;

use std::path::Path;

use anyhow::Context as _;

/// Which list a rule goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Allow,
    Ask,
    Deny,
}

impl List {
    fn name(self) -> &'static str {
        match self {
            List::Allow => "allow",
            List::Ask => "ask",
            List::Deny => "deny",
        }
    }
}

/// One translated rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub list: List,
    /// The tollgate specifier (`run_bash(npm run test *)`).
    pub rule: String,
    pub matches: Vec<String>,
    pub not_match: Vec<String>,
    /// The source rule it came from, as written there.
    pub from: String,
}

/// A source rule that has no tollgate translation, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unmapped {
    pub from: String,
    pub reason: String,
}

/// What an import made of a file.
#[derive(Debug, Default)]
pub struct Imported {
    pub rules: Vec<Rule>,
    pub unmapped: Vec<Unmapped>,
    /// Notes on rules that did map, but not one to one.
    pub notes: Vec<String>,
}

impl Imported {
    fn unmapped(&mut self, from: impl Into<String>, reason: impl Into<String>) {
        self.unmapped.push(Unmapped {
            from: from.into(),
            reason: reason.into(),
        });
    }

    fn rule(&mut self, list: List, rule: String, matches: Vec<String>, from: &str) {
        self.rules.push(Rule {
            list,
            rule,
            matches,
            not_match: Vec::new(),
            from: from.to_string(),
        });
    }
}

/// The client an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// Claude Code's settings.json (`permissions.allow`, `ask`, `deny`).
    Claude,
    /// Codex's execpolicy rules (`prefix_rule(...)`).
    Codex,
}

/// `policy import CLIENT FILE`: the drop-in on stdout, what did not map on
/// stderr. Exit 0 (a file with nothing to import is an error).
pub fn run(client: Client, file: &Path) -> anyhow::Result<u8> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let imported = match client {
        Client::Claude => claude::import(&text)?,
        Client::Codex => codex::import(&text)?,
    };
    if imported.rules.is_empty() && imported.unmapped.is_empty() {
        anyhow::bail!("{} holds no permission rules to import", file.display());
    }
    out!("{}", render(client, file, &imported));
    for u in &imported.unmapped {
        eprintln!("supervisorctl: not imported: {}: {}", u.from, u.reason);
    }
    Ok(0)
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", items.join(", "))
}

/// The drop-in's text.
pub fn render(client: Client, file: &Path, imported: &Imported) -> String {
    let source = match client {
        Client::Claude => "Claude Code settings",
        Client::Codex => "Codex execpolicy rules",
    };
    let mut out = format!(
        "# Imported from {source} {} by `supervisorctl policy import`.\n\
         # Save it into policy.d/ as it is; each rule's examples are checked when\n\
         # the supervisor (or `supervisorctl policy test`) loads it.\n",
        file.display()
    );
    for n in &imported.notes {
        out.push_str(&format!("# Note: {n}\n"));
    }
    out.push_str("\n[policy]\n");
    for list in [List::Allow, List::Ask, List::Deny] {
        let rules: Vec<&Rule> = imported.rules.iter().filter(|r| r.list == list).collect();
        if rules.is_empty() {
            continue;
        }
        out.push_str(&format!("{} = [\n", list.name()));
        for r in rules {
            let mut entry = format!(
                "  {{ rule = {}, match = {}",
                toml_str(&r.rule),
                toml_list(&r.matches)
            );
            if !r.not_match.is_empty() {
                entry.push_str(&format!(", not_match = {}", toml_list(&r.not_match)));
            }
            entry.push_str(&format!(" }},  # {}\n", comment(&r.from)));
            out.push_str(&entry);
        }
        out.push_str("]\n");
    }
    if !imported.unmapped.is_empty() {
        out.push_str("\n# Not imported:\n");
        for u in &imported.unmapped {
            out.push_str(&format!(
                "# - {}: {}\n",
                comment(&u.from),
                comment(&u.reason)
            ));
        }
    }
    out
}

/// Text safe inside a one-line comment.
fn comment(s: &str) -> String {
    crate::table::escape(s).replace(['\n', '\r'], " ")
}

/// Example text for a glob: each `**` a directory name, each `*` a word.
fn example_of(glob: &str) -> String {
    glob.replace("**", "a").replace('*', "arg")
}

/// The run_bash rules for "this command, or it followed by arguments" (a
/// prefix that ends at a word): the command alone and `COMMAND *`, each
/// with its example, the second also refusing the prefix glued to a longer
/// word.
fn prefix_rules(list: List, prefix: &str, from: &str, out: &mut Imported) {
    out.rule(
        list,
        format!("run_bash({prefix})"),
        vec![prefix.to_string()],
        from,
    );
    out.rules.push(Rule {
        list,
        rule: format!("run_bash({prefix} *)"),
        matches: vec![format!("{prefix} arg")],
        not_match: vec![format!("{prefix}arg")],
        from: from.to_string(),
    });
}

#[cfg(test)]
mod tests;
