//! Claude Code's `permissions` (settings.json): `allow`, `ask` and `deny`
//! lists of `Tool` or `Tool(specifier)` rules (docs/CLIENTS.md). What maps:
//! `Bash` (exact commands, `prefix:*`, `*` globs), `Read` (read_file,
//! glob_files and grep, as Claude applies Read rules to every reading
//! tool), `Edit` (edit_file and write_file), `Write`, `Glob`, `Grep`,
//! `WebFetch` (`domain:`), and `mcp__SERVER[__TOOL]`.

use serde_json::Value;

use super::{Imported, List, example_of, prefix_rules};

pub fn import(text: &str) -> anyhow::Result<Imported> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("not Claude Code settings JSON: {e}"))?;
    let perms = v
        .get("permissions")
        .ok_or_else(|| anyhow::anyhow!("the settings have no `permissions` object"))?;
    let mut out = Imported::default();
    for (key, list) in [
        ("allow", List::Allow),
        ("ask", List::Ask),
        ("deny", List::Deny),
    ] {
        for entry in perms
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match entry.as_str() {
                Some(rule) => translate(rule.trim(), list, &mut out),
                None => out.unmapped(entry.to_string(), format!("`{key}` entries are strings")),
            }
        }
    }
    for (key, why) in [
        (
            "defaultMode",
            "a session's mode is the supervisor's: [clients] mode (or [session] default_mode) in its config",
        ),
        (
            "additionalDirectories",
            "a session reaches its workspace only; another directory is another session's workspace",
        ),
    ] {
        if let Some(v) = perms.get(key) {
            out.unmapped(format!("permissions.{key} = {v}"), why);
        }
    }
    Ok(out)
}

/// Splits `Tool(specifier)`.
fn split(rule: &str) -> (&str, Option<&str>) {
    match rule.split_once('(') {
        Some((tool, rest)) if rule.ends_with(')') => (tool.trim(), Some(&rest[..rest.len() - 1])),
        _ => (rule, None),
    }
}

fn translate(rule: &str, list: List, out: &mut Imported) {
    let (tool, spec) = split(rule);
    if let Some(rest) = tool.strip_prefix("mcp__") {
        return mcp(rule, rest, list, out);
    }
    match (tool, spec) {
        ("Bash", None) => out.rule(list, "run_bash".into(), vec!["make".into()], rule),
        ("Bash", Some(s)) => bash(rule, s.trim(), list, out),
        ("Read", s) => paths(rule, s, &["read_file", "glob_files", "grep"], list, out),
        ("Edit", s) => paths(rule, s, &["edit_file", "write_file"], list, out),
        ("Write", s) => paths(rule, s, &["write_file"], list, out),
        ("Glob", s) => paths(rule, s, &["glob_files"], list, out),
        ("Grep", s) => paths(rule, s, &["grep"], list, out),
        ("WebFetch", None) => out.rule(
            list,
            "webfetch".into(),
            vec!["https://example.org/".into()],
            rule,
        ),
        ("WebFetch", Some(s)) => webfetch(rule, s.trim(), list, out),
        ("WebSearch", _) => out.unmapped(rule, "tollgate has no web search tool"),
        ("NotebookEdit", _) => out.unmapped(rule, "tollgate has no notebook tool"),
        ("Task" | "Agent", _) => out.unmapped(
            rule,
            "subagents are the client's own; each tool call they make is decided by the rules here",
        ),
        ("TodoWrite" | "TodoRead" | "ExitPlanMode" | "Skill" | "SlashCommand", _) => out.unmapped(
            rule,
            "the client's own bookkeeping, allowed by tollgate without a rule",
        ),
        _ => out.unmapped(rule, format!("`{tool}` is no tool tollgate decides")),
    }
}

fn bash(rule: &str, s: &str, list: List, out: &mut Imported) {
    if s.is_empty() {
        return out.unmapped(rule, "an empty command pattern");
    }
    let param = s.split_once(':').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    if param && !s.ends_with(":*") {
        return out.unmapped(
            rule,
            "a `param:value` rule; Claude Code ignores it on Bash's command, and so does the import",
        );
    }
    if let Some(prefix) = s.strip_suffix(":*") {
        // The legacy prefix form: the command, or it followed by arguments.
        return prefix_rules(list, prefix.trim_end(), rule, out);
    }
    let stars = s.matches('*').count();
    if stars == 1
        && let Some(prefix) = s.strip_suffix(" *")
    {
        // A single trailing ` *` is optional in Claude Code: `ls *` is `ls` too.
        return prefix_rules(list, prefix, rule, out);
    }
    out.rule(list, format!("run_bash({s})"), vec![example_of(s)], rule);
}

/// Read/Edit path rules: gitignore-style globs. `./p` and `p` are relative
/// to the project (the workspace); `/p` to the project root (anchored at
/// the workspace); `~/p` and `//p` lie outside any workspace.
fn paths(rule: &str, spec: Option<&str>, tools: &[&str], list: List, out: &mut Imported) {
    let Some(s) = spec.map(str::trim) else {
        for t in tools {
            out.rule(list, (*t).to_string(), vec!["a.txt".into()], rule);
        }
        return;
    };
    if s.starts_with("~/") || s.starts_with("//") || s == "~" {
        let why = match list {
            List::Deny => {
                "outside the workspace: tollgate refuses every path outside it already (floor:path-scope)"
            }
            List::Allow | List::Ask => {
                "outside the workspace: tollgate's file tools reach only the session's workspace"
            }
        };
        return out.unmapped(rule, why);
    }
    if s.split('/').any(|c| c == "..") {
        return out.unmapped(rule, "`..` leaves the workspace; rules are relative to it");
    }
    let glob = if let Some(rest) = s.strip_prefix('/') {
        format!("./{rest}")
    } else {
        s.to_string()
    };
    let example = example_of(glob.trim_start_matches("./"));
    let example = if example.ends_with('/') {
        format!("{example}a")
    } else {
        example
    };
    for t in tools {
        out.rule(list, format!("{t}({glob})"), vec![example.clone()], rule);
    }
}

fn webfetch(rule: &str, s: &str, list: List, out: &mut Imported) {
    let Some(domain) = s.strip_prefix("domain:") else {
        return out.unmapped(rule, "WebFetch takes `domain:HOST`");
    };
    let host = domain.trim().trim_start_matches("*.");
    let example = if domain.trim().starts_with("*.") {
        format!("https://www.{host}/")
    } else {
        format!("https://{host}/")
    };
    out.rule(
        list,
        format!("webfetch(domain:{})", domain.trim()),
        vec![example],
        rule,
    );
}

/// `mcp__SERVER` (every tool of the server), `mcp__SERVER__*` and
/// `mcp__SERVER__TOOL`. A name holding `__` more than once is read as
/// server before the first, tool after it (said in a note).
fn mcp(rule: &str, rest: &str, list: List, out: &mut Imported) {
    let (server, tool) = match rest.split_once("__") {
        Some((s, t)) => (s, t),
        None => (rest, "*"),
    };
    if server.is_empty() || tool.is_empty() || server.contains(['.', '*', '(']) {
        return out.unmapped(rule, "not `mcp__SERVER` or `mcp__SERVER__TOOL`");
    }
    if tool.contains("__") {
        out.notes.push(format!(
            "{rule} was read as server `{server}`, tool `{tool}`; rename it if the server's name holds `__`"
        ));
    }
    let example = format!("{server}.{}", example_of(tool));
    out.rule(list, format!("mcp({server}.{tool})"), vec![example], rule);
}
