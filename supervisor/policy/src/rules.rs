//! Rules from the supervisor's config (never from the workspace): allow, ask
//! and deny lists of tool specifiers. Deny beats ask beats allow.
//!
//! A specifier is a bare tool name (`webfetch`) or `tool(pattern)`:
//! - run_bash: a glob over the command text where `*` matches anything
//!   (`run_bash(cargo test*)`). An allow rule must match every command of a
//!   compound line (`cargo test; curl x` is not allowed by `cargo test*`); a
//!   deny or ask rule matches if any command matches.
//! - read_file, write_file, edit_file, glob_files, grep: a gitignore-style
//!   glob relative to the workspace (`./secrets/**`, `*.pem`).
//! - webfetch: `domain:docs.rs` (exact host), `domain:*.example.com` (its
//!   subdomains), or a glob over the whole URL.
//! - mcp: `SERVER.TOOL`, each side a glob where `*` matches anything
//!   (`mcp(github.*)`, `mcp(*.delete_*)`); the server is what comes before
//!   the first `.`. Calls no rule names are decided by the mode's row for
//!   actions (ask in default mode).
//!
//! Rules may carry `match` / `not_match` examples, checked when the config is
//! loaded: a rule that fails its own example refuses the config.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::PolicyError;
use crate::config::RuleSpec;
use crate::decision::Verdict;
use tollgate_toolcall::ToolName;

use crate::registry::{gated_tools, lookup, registry};

/// What a call offers for rules to match.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Subject {
    /// run_bash: the commands that run (wrappers stripped) and the simple
    /// commands as written.
    Command {
        commands: Vec<String>,
        outer: Vec<String>,
    },
    /// A workspace-relative path.
    Path(String),
    /// webfetch.
    Url { url: String, host: String },
    /// An MCP server's tool.
    Mcp { server: String, tool: String },
    /// An MCP protocol request the gateway decides (`roots/list` of the
    /// server, `resources/read` of the client, …).
    McpMethod { server: String, method: String },
    /// Tools without a pattern to match.
    Nothing,
}

#[derive(Debug)]
enum Pattern {
    /// A bare tool name: every call of the tool.
    Any,
    Command(String),
    Path(GlobSet),
    Domain(String),
    Url(String),
    /// `SERVER.TOOL` globs.
    Mcp {
        server: String,
        tool: String,
    },
    /// `SERVER.METHOD` globs, the method holding a `/` (`fs.roots/list`,
    /// `fs.resources/*`): never matched by a tool's pattern, nor a tool by it.
    McpMethod {
        server: String,
        method: String,
    },
}

#[derive(Debug)]
struct Rule {
    /// `deny: run_bash(curl*)`: what decisions and the audit log show.
    label: String,
    tool: ToolName,
    pattern: Pattern,
}

/// The compiled allow, ask and deny lists.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
}

impl RuleSet {
    /// Compiles the lists. `example_subject` turns an example string into
    /// what a call of that tool would offer (run_bash examples are analysed
    /// like real commands).
    pub(crate) fn compile(
        allow: &[RuleSpec],
        ask: &[RuleSpec],
        deny: &[RuleSpec],
        example_subject: &dyn Fn(ToolName, &str) -> Subject,
    ) -> Result<RuleSet, PolicyError> {
        let mut set = RuleSet::default();
        for (list, verdict, out) in [
            (deny, Verdict::Deny, &mut set.deny),
            (ask, Verdict::Ask, &mut set.ask),
            (allow, Verdict::Allow, &mut set.allow),
        ] {
            for spec in list {
                let rule = parse(spec.rule(), verdict)?;
                check_examples(&rule, spec, verdict, example_subject)?;
                out.push(rule);
            }
        }
        Ok(set)
    }

    /// The strictest rule that matches: deny, then ask, then allow.
    pub(crate) fn evaluate(&self, tool: ToolName, subject: &Subject) -> Option<(Verdict, &str)> {
        for (rules, verdict) in [
            (&self.deny, Verdict::Deny),
            (&self.ask, Verdict::Ask),
            (&self.allow, Verdict::Allow),
        ] {
            if let Some(r) = rules
                .iter()
                .find(|r| r.tool == tool && r.matches(subject, verdict))
            {
                return Some((verdict, r.label.as_str()));
            }
        }
        None
    }

    /// Whether any rule names this tool.
    pub(crate) fn has_tool(&self, tool: ToolName) -> bool {
        [&self.deny, &self.ask, &self.allow]
            .iter()
            .any(|rules| rules.iter().any(|r| r.tool == tool))
    }
}

/// How a decision names the rule of `list` written `rule`
/// (`deny: run_bash(curl *)`): what `Decision::rule` holds when it matched.
pub fn rule_label(list: Verdict, rule: &str) -> String {
    format!("{}: {}", list_name(list), rule.trim())
}

fn list_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Ask => "ask",
        Verdict::Deny => "deny",
    }
}

fn invalid(spec: &str, reason: impl Into<String>) -> PolicyError {
    PolicyError::InvalidRule {
        rule: spec.to_string(),
        reason: reason.into(),
    }
}

fn parse(spec: &str, verdict: Verdict) -> Result<Rule, PolicyError> {
    let s = spec.trim();
    let (tool, pattern) = match s.find('(') {
        Some(open) => {
            if !s.ends_with(')') {
                return Err(invalid(
                    spec,
                    "a specifier is `tool` or `tool(pattern)`; the closing parenthesis is missing",
                ));
            }
            (s[..open].trim(), Some(&s[open + 1..s.len() - 1]))
        }
        None => (s, None),
    };
    let Some(t) = lookup(tool) else {
        let names: Vec<&str> = registry()
            .iter()
            .chain(gated_tools())
            .map(|t| t.name)
            .collect();
        return Err(invalid(
            spec,
            format!("unknown tool `{tool}`; the tools are {}", names.join(", ")),
        ));
    };
    let pattern = match pattern {
        None => Pattern::Any,
        Some(p) if p.trim().is_empty() => {
            return Err(invalid(
                spec,
                "the pattern is empty; write the bare tool name to match every call",
            ));
        }
        Some(p) => match t.tool {
            ToolName::RunBash => Pattern::Command(p.trim().to_string()),
            ToolName::Mcp => mcp_pattern(spec, p.trim())?,
            ToolName::Webfetch => match p.trim().strip_prefix("domain:") {
                Some(d) => {
                    let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
                    if d.is_empty() || d.contains(['/', ':', '@', ' ']) {
                        return Err(invalid(
                            spec,
                            "`domain:` takes a host name such as docs.rs or *.example.com",
                        ));
                    }
                    Pattern::Domain(d)
                }
                None => Pattern::Url(p.trim().to_string()),
            },
            ToolName::ReadFile
            | ToolName::GlobFiles
            | ToolName::Grep
            | ToolName::WriteFile
            | ToolName::EditFile => Pattern::Path(path_globs(spec, p.trim())?),
            ToolName::JobOutput
            | ToolName::KillJob
            | ToolName::TodoAppend
            | ToolName::TodoList
            | ToolName::TodoUpdate
            | ToolName::ReadScratchpad
            | ToolName::WriteScratchpad
            | ToolName::AskQuestion => {
                return Err(invalid(
                    spec,
                    format!("`{}` takes no pattern; write the bare tool name", t.name),
                ));
            }
        },
    };
    Ok(Rule {
        label: rule_label(verdict, s),
        tool: t.tool,
        pattern,
    })
}

/// `SERVER.TOOL`: both sides non-empty globs; the server side holds no `.`.
fn mcp_pattern(spec: &str, p: &str) -> Result<Pattern, PolicyError> {
    let Some((server, tool)) = p.split_once('.') else {
        return Err(invalid(
            spec,
            "an mcp pattern is `SERVER.TOOL` (globs with `*`), e.g. `mcp(github.*)`",
        ));
    };
    let (server, tool) = (server.trim(), tool.trim());
    if server.is_empty() || tool.is_empty() {
        return Err(invalid(
            spec,
            "both sides of `SERVER.TOOL` must be non-empty; write `*` to match any",
        ));
    }
    if tool.contains('/') {
        return mcp_method_pattern(spec, server, tool);
    }
    // The names MCP allows (crate::mcp), and `*`.
    let name = |s: &str, dot: bool| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*') || (dot && c == '.'))
    };
    if !name(server, false) || !name(tool, true) {
        return Err(invalid(
            spec,
            format!(
                "`{server}.{tool}` is not SERVER.TOOL: names hold letters, digits, `_`, `-` (and `.` in the tool), and `*`"
            ),
        ));
    }
    Ok(Pattern::Mcp {
        server: server.to_string(),
        tool: tool.to_string(),
    })
}

/// `SERVER.METHOD`: a protocol method (`roots/list`, `resources/*`).
fn mcp_method_pattern(spec: &str, server: &str, method: &str) -> Result<Pattern, PolicyError> {
    let ok = |s: &str, slash: bool| {
        s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*') || (slash && c == '/')
        })
    };
    if !ok(server, false) || !ok(method, true) {
        return Err(invalid(
            spec,
            format!(
                "`{server}.{method}` is not SERVER.METHOD: names hold letters, digits, `_`, `-` (and `/` in the method), and `*`"
            ),
        ));
    }
    Ok(Pattern::McpMethod {
        server: server.to_string(),
        method: method.to_string(),
    })
}

/// gitignore-style: `./x` and `/x` are anchored at the workspace; a pattern
/// without a slash matches at any depth; `dir/` and `dir/**` cover the
/// directory and everything in it.
fn path_globs(spec: &str, p: &str) -> Result<GlobSet, PolicyError> {
    let anchored = p.starts_with("./") || p.starts_with('/');
    let mut body = p
        .trim_start_matches("./")
        .trim_start_matches('/')
        .to_string();
    if body.split('/').any(|c| c == "..") {
        return Err(invalid(
            spec,
            "path patterns are relative to the workspace and cannot use `..`",
        ));
    }
    if body.ends_with('/') {
        body.push_str("**");
    }
    if !anchored && !body.contains('/') {
        body = format!("**/{body}");
    }
    let mut alternatives = vec![body.clone()];
    if let Some(dir) = body.strip_suffix("/**") {
        alternatives.push(dir.to_string());
    }
    let mut b = GlobSetBuilder::new();
    for a in alternatives {
        let g = GlobBuilder::new(&a)
            .literal_separator(true)
            .build()
            .map_err(|e| invalid(spec, format!("bad glob: {e}")))?;
        b.add(g);
    }
    b.build()
        .map_err(|e| invalid(spec, format!("bad glob: {e}")))
}

impl Rule {
    fn matches(&self, subject: &Subject, verdict: Verdict) -> bool {
        match (&self.pattern, subject) {
            // A bare `mcp` names every tool, not the protocol's requests.
            (Pattern::Any, Subject::McpMethod { .. }) => false,
            (Pattern::Any, _) => true,
            (Pattern::Command(p), Subject::Command { commands, outer }) => match verdict {
                // Allow only when every command that runs is covered.
                Verdict::Allow => !commands.is_empty() && commands.iter().all(|c| wildcard(p, c)),
                Verdict::Ask | Verdict::Deny => {
                    commands.iter().chain(outer).any(|c| wildcard(p, c))
                }
            },
            (Pattern::Path(g), Subject::Path(rel)) => g.is_match(rel),
            (Pattern::Domain(d), Subject::Url { host, .. }) => {
                let h = host.trim_end_matches('.').to_ascii_lowercase();
                wildcard(d, &h)
            }
            (Pattern::Url(p), Subject::Url { url, .. }) => wildcard(p, url),
            (
                Pattern::Mcp {
                    server: ps,
                    tool: pt,
                },
                Subject::Mcp { server, tool },
            ) => wildcard(ps, server) && wildcard(pt, tool),
            (
                Pattern::McpMethod {
                    server: ps,
                    method: pm,
                },
                Subject::McpMethod { server, method },
            ) => wildcard(ps, server) && wildcard(pm, method),
            (
                Pattern::Command(_)
                | Pattern::Path(_)
                | Pattern::Domain(_)
                | Pattern::Url(_)
                | Pattern::Mcp { .. }
                | Pattern::McpMethod { .. },
                _,
            ) => false,
        }
    }
}

fn check_examples(
    rule: &Rule,
    spec: &RuleSpec,
    verdict: Verdict,
    example_subject: &dyn Fn(ToolName, &str) -> Subject,
) -> Result<(), PolicyError> {
    let RuleSpec::WithExamples {
        matches, not_match, ..
    } = spec
    else {
        return Ok(());
    };
    for ex in matches {
        if !rule.matches(&example_subject(rule.tool, ex), verdict) {
            return Err(PolicyError::ExampleFailed {
                rule: spec.rule().to_string(),
                example: ex.clone(),
                reason: "it is listed under `match` but the rule does not match it".to_string(),
            });
        }
    }
    for ex in not_match {
        if rule.matches(&example_subject(rule.tool, ex), verdict) {
            return Err(PolicyError::ExampleFailed {
                rule: spec.rule().to_string(),
                example: ex.clone(),
                reason: "it is listed under `not_match` but the rule matches it".to_string(),
            });
        }
    }
    Ok(())
}

/// `*` matches any run of characters (including none); everything else is
/// literal. Linear-time greedy matching with one backtrack point.
pub(crate) fn wildcard(pattern: &str, text: &str) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(commands: &[&str]) -> Subject {
        Subject::Command {
            commands: commands.iter().map(|s| s.to_string()).collect(),
            outer: commands.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn simple_subject(tool: ToolName, ex: &str) -> Subject {
        match tool {
            ToolName::RunBash => Subject::Command {
                commands: ex.split(';').map(|s| s.trim().to_string()).collect(),
                outer: vec![],
            },
            ToolName::Webfetch => Subject::Url {
                url: ex.to_string(),
                host: ex.to_string(),
            },
            ToolName::Mcp => mcp_subject(ex),
            ToolName::ReadFile
            | ToolName::GlobFiles
            | ToolName::Grep
            | ToolName::WriteFile
            | ToolName::EditFile
            | ToolName::JobOutput
            | ToolName::KillJob
            | ToolName::TodoAppend
            | ToolName::TodoList
            | ToolName::TodoUpdate
            | ToolName::ReadScratchpad
            | ToolName::WriteScratchpad
            | ToolName::AskQuestion => Subject::Path(ex.trim_start_matches("./").to_string()),
        }
    }

    fn mcp_subject(ex: &str) -> Subject {
        let (server, tool) = ex.split_once('.').unwrap_or((ex, ""));
        Subject::Mcp {
            server: server.to_string(),
            tool: tool.to_string(),
        }
    }

    fn set(allow: &[&str], ask: &[&str], deny: &[&str]) -> RuleSet {
        let v = |l: &[&str]| {
            l.iter()
                .map(|s| RuleSpec::Bare(s.to_string()))
                .collect::<Vec<_>>()
        };
        RuleSet::compile(&v(allow), &v(ask), &v(deny), &simple_subject).unwrap()
    }

    #[test]
    fn wildcard_semantics() {
        assert!(wildcard("cargo test*", "cargo test"));
        assert!(wildcard("cargo test*", "cargo test -p x"));
        assert!(!wildcard("cargo test*", "cargo build"));
        assert!(wildcard("*", ""));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("a*b*c", "axxbyy"));
        assert!(wildcard("*.example.com", "a.b.example.com"));
        assert!(!wildcard("*.example.com", "example.com"));
        assert!(!wildcard("*.example.com", "example.com.evil"));
    }

    #[test]
    fn deny_beats_ask_beats_allow() {
        let s = set(
            &["run_bash(git*)"],
            &["run_bash(git push*)"],
            &["run_bash(git push --force*)"],
        );
        let v = |c: &str| {
            s.evaluate(ToolName::RunBash, &cmd(&[c]))
                .map(|(v, l)| (v, l.to_string()))
        };
        assert_eq!(
            v("git status"),
            Some((Verdict::Allow, "allow: run_bash(git*)".into()))
        );
        assert_eq!(
            v("git push"),
            Some((Verdict::Ask, "ask: run_bash(git push*)".into()))
        );
        assert_eq!(
            v("git push --force"),
            Some((Verdict::Deny, "deny: run_bash(git push --force*)".into()))
        );
        assert_eq!(v("ls"), None);
        assert_eq!(
            s.evaluate(ToolName::ReadFile, &Subject::Path("x".into())),
            None
        );
    }

    #[test]
    fn allow_needs_every_command_deny_needs_one() {
        let s = set(&["run_bash(cargo test*)"], &[], &["run_bash(curl*)"]);
        assert_eq!(
            s.evaluate(ToolName::RunBash, &cmd(&["cargo test", "ls"])),
            None,
            "allow must cover every command"
        );
        assert_eq!(
            s.evaluate(ToolName::RunBash, &cmd(&["cargo test", "curl x"]))
                .map(|x| x.0),
            Some(Verdict::Deny)
        );
        assert_eq!(
            s.evaluate(ToolName::RunBash, &cmd(&["cargo test", "cargo test -p y"]))
                .map(|x| x.0),
            Some(Verdict::Allow)
        );
        assert_eq!(s.evaluate(ToolName::RunBash, &cmd(&[])), None);
    }

    #[test]
    fn path_rules_are_gitignore_style() {
        let s = set(
            &[],
            &[
                "read_file(./secrets/**)",
                "read_file(*.pem)",
                "write_file(/docs/)",
            ],
            &[],
        );
        let hit = |tool: &str, p: &str| {
            let tool = ToolName::parse(tool).unwrap();
            s.evaluate(tool, &Subject::Path(p.into())).is_some()
        };
        assert!(hit("read_file", "secrets/a.txt"));
        assert!(hit("read_file", "secrets/x/y"));
        assert!(hit("read_file", "secrets"));
        assert!(!hit("read_file", "src/secrets/a.txt"));
        assert!(hit("read_file", "deep/dir/server.pem"));
        assert!(hit("write_file", "docs/a/b.md"));
        assert!(!hit("write_file", "src/docs/a.md"));
        assert!(!hit("edit_file", "docs/a.md"));
    }

    #[test]
    fn domain_rules() {
        let s = set(
            &["webfetch(domain:docs.rs)", "webfetch(domain:*.example.com)"],
            &[],
            &[],
        );
        let hit = |h: &str| {
            s.evaluate(
                ToolName::Webfetch,
                &Subject::Url {
                    url: format!("https://{h}/"),
                    host: h.into(),
                },
            )
            .is_some()
        };
        assert!(hit("docs.rs"));
        assert!(hit("DOCS.RS."));
        assert!(!hit("docs.rs.evil.com"));
        assert!(hit("a.example.com"));
        assert!(!hit("example.com"));
        assert!(!hit("evilexample.com"));
    }

    #[test]
    fn mcp_rules_match_server_and_tool_globs_deny_first() {
        let s = set(
            &["mcp(github.get_*)", "mcp(docs.*)"],
            &["mcp(github.create_*)"],
            &["mcp(*.delete_*)"],
        );
        let v = |ex: &str| s.evaluate(ToolName::Mcp, &mcp_subject(ex)).map(|(v, _)| v);
        assert_eq!(v("github.get_issue"), Some(Verdict::Allow));
        assert_eq!(v("docs.search"), Some(Verdict::Allow));
        assert_eq!(v("github.create_issue"), Some(Verdict::Ask));
        assert_eq!(v("github.delete_repo"), Some(Verdict::Deny));
        assert_eq!(v("docs.delete_page"), Some(Verdict::Deny));
        assert_eq!(v("githubx.get_issue"), None, "the server is matched whole");
        assert_eq!(v("slack.post"), None);
        // A bare `mcp` names every MCP call.
        let all = set(&[], &["mcp"], &[]);
        assert_eq!(
            all.evaluate(ToolName::Mcp, &mcp_subject("any.thing"))
                .map(|x| x.0),
            Some(Verdict::Ask)
        );
    }

    #[test]
    fn bad_specifiers_are_refused_naming_the_rule() {
        for (spec, want) in [
            ("run_bash(cargo test*", "closing parenthesis"),
            ("bash(ls)", "unknown tool `bash`"),
            ("run_bash()", "pattern is empty"),
            ("todo_list(x)", "takes no pattern"),
            ("read_file(../x)", "cannot use `..`"),
            ("read_file([)", "bad glob"),
            ("webfetch(domain:)", "`domain:` takes a host name"),
            ("webfetch(domain:http://x)", "`domain:` takes a host name"),
            ("mcp(github)", "`SERVER.TOOL`"),
            ("mcp(.x)", "must be non-empty"),
            ("mcpx(a.b)", "unknown tool `mcpx`"),
        ] {
            let r = RuleSet::compile(&[RuleSpec::Bare(spec.into())], &[], &[], &simple_subject);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(spec) && e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn examples_are_checked_at_load() {
        let good = RuleSpec::WithExamples {
            rule: "run_bash(git status*)".into(),
            matches: vec!["git status".into(), "git status --short".into()],
            not_match: vec!["git push".into()],
        };
        RuleSet::compile(&[good], &[], &[], &simple_subject).unwrap();
        let bad = RuleSpec::WithExamples {
            rule: "run_bash(git status*)".into(),
            matches: vec!["git diff".into()],
            not_match: vec![],
        };
        let e = RuleSet::compile(&[bad], &[], &[], &simple_subject).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rule \"run_bash(git status*)\" fails its own example \"git diff\": it is listed under `match` but the rule does not match it"
        );
        let bad = RuleSpec::WithExamples {
            rule: "run_bash(cargo*)".into(),
            matches: vec![],
            not_match: vec!["cargo build".into()],
        };
        let e = RuleSet::compile(&[], &[], &[bad], &simple_subject).unwrap_err();
        assert!(e.to_string().contains("listed under `not_match`"), "{e}");
    }
}
