//! Decisions on the tools of third-party MCP servers that `agent
//! mcp-gateway` runs in a sandbox (docs/MCP.md).
//!
//! Rules name them `mcp(NAME.TOOL)`, where NAME is the gateway's `--name`
//! and TOOL the server's tool; `*` matches any run of characters
//! (`mcp(fs.*)`, `mcp(*.delete_*)`). Deny beats ask beats allow, as for
//! every rule. A call no rule names is decided by the mode as an action
//! (ask in default and acceptEdits, allow in dangerouslySkipPermissions,
//! deny in plan and dontAsk): an unknown server's tool is never allowed by
//! default.

use crate::decision::{Code, Decision, Verdict};
use crate::engine::mode_verdict;
use crate::mode::Mode;
use crate::registry::ToolClass;
use crate::rules::{RuleSet, Subject};
pub use tollgate_toolcall::McpToolCall;
use tollgate_toolcall::ToolName;

/// The rule specifier's tool name: `mcp(NAME.TOOL)`.
pub const MCP_RULE_TOOL: &str = ToolName::Mcp.as_str();

/// The longest server name and tool name accepted.
const MAX_SERVER: usize = 64;
const MAX_TOOL: usize = 128;

/// Why a server name cannot be used (`None`: it can). Letters, digits, `_`
/// and `-`: a name never contains the `.` that separates it from the tool.
pub fn check_server_name(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_SERVER {
        return Some(format!(
            "an MCP server name is 1 to {MAX_SERVER} characters"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Some(format!(
            "MCP server name {name:?} may hold only letters, digits, `_` and `-`"
        ));
    }
    None
}

/// Tool names as MCP allows them: letters, digits, `_`, `-`, `.`.
pub(crate) fn check_tool_name(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_TOOL {
        return Some(format!("an MCP tool name is 1 to {MAX_TOOL} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Some(format!(
            "MCP tool name {:?} may hold only letters, digits, `_`, `-` and `.`",
            crate::display::escape_for_display(name)
        ));
    }
    None
}

/// Decides one call of a wrapped server's tool.
pub(crate) fn decide(rules: &RuleSet, call: &McpToolCall, mode: Mode) -> Decision {
    let target = call.target();
    let consequence = format!(
        "call tool `{}` of the MCP server `{}` (it runs in the session's sandbox)",
        call.tool, call.server
    );
    let refused = check_server_name(&call.server).or_else(|| check_tool_name(&call.tool));
    if let Some(reason) = refused {
        let mut d = Decision::deny(
            Code::InvalidArgs,
            format!("{reason}; the call is refused."),
            Some("mcp:name"),
        );
        d.consequence = consequence;
        return d;
    }
    let (verdict, rule, reason) = match rules.evaluate(
        ToolName::Mcp,
        &Subject::Mcp {
            server: call.server.clone(),
            tool: call.tool.clone(),
        },
    ) {
        Some((Verdict::Deny, label)) => (
            Verdict::Deny,
            label.to_string(),
            format!(
                "this supervisor's policy refuses it (rule `{label}`). Do the task another way, or ask the user."
            ),
        ),
        Some((Verdict::Ask, label)) => (
            Verdict::Ask,
            label.to_string(),
            format!("rule `{label}` asks a person to approve it."),
        ),
        Some((Verdict::Allow, label)) => (
            Verdict::Allow,
            label.to_string(),
            format!("rule `{label}` allows it."),
        ),
        None => {
            let v = mode_verdict(mode, ToolClass::Action);
            let reason = match v {
                Verdict::Allow => {
                    format!("MCP tools no rule names run without approval in {mode} mode.")
                }
                Verdict::Ask => format!("MCP tools no rule names need approval in {mode} mode."),
                Verdict::Deny => format!(
                    "MCP tools no rule names are refused in {mode} mode. Do the task another way, or ask the user."
                ),
            };
            (v, format!("mode:{mode}"), reason)
        }
    };
    Decision {
        verdict,
        code: match verdict {
            Verdict::Allow => Code::Ok,
            Verdict::Ask => Code::ApprovalRequired,
            Verdict::Deny => Code::PolicyDenied,
        },
        reason,
        rule: Some(rule),
        destructive: false,
        consequence,
        target,
        path: None,
        fetch: None,
        secret: false,
        rule_file: None,
    }
}

/// Whether the gateway decides a protocol request (docs/INTERFACES.md, "MCP
/// gateway"): every request of the wrapped server to the client but `ping`
/// (`sampling/createMessage`, `elicitation/create`, `roots/list`, and any
/// newer one), and the client's `resources/*` and `prompts/*`. Tools go
/// through [`decide`]; the rest of the protocol (initialize, ping, tools/list,
/// notifications, completion, logging) passes.
pub fn is_decided_method(method: &str, from_server: bool) -> bool {
    if from_server {
        method != "ping"
    } else {
        method.starts_with("resources/") || method.starts_with("prompts/")
    }
}

/// Decides one protocol request `method` between the client and the
/// wrapped server `server`, by the rules `mcp(SERVER.METHOD)` (the method
/// holds a `/`: `mcp(fs.roots/list)`, `mcp(fs.resources/*)`). Refused
/// unless a rule allows it, in every mode: a wrapped server must not read
/// the client's roots or drive its model unasked. An `ask` rule refuses too
/// (these requests are not put to a person).
pub(crate) fn decide_method(rules: &RuleSet, server: &str, method: &str) -> Decision {
    let target = format!("{server}.{method}");
    let consequence =
        format!("pass the MCP request `{method}` between the client and the server `{server}`");
    let found = rules.evaluate(
        ToolName::Mcp,
        &Subject::McpMethod {
            server: server.to_string(),
            method: method.to_string(),
        },
    );
    let (verdict, rule, reason) = match found {
        Some((Verdict::Allow, label)) => (
            Verdict::Allow,
            label.to_string(),
            format!("rule `{label}` allows it."),
        ),
        Some((Verdict::Deny, label)) => (
            Verdict::Deny,
            label.to_string(),
            format!("this supervisor's policy refuses it (rule `{label}`)."),
        ),
        Some((Verdict::Ask, label)) => (
            Verdict::Deny,
            label.to_string(),
            format!(
                "rule `{label}` asks, but MCP protocol requests are not put to a person; allow it with `mcp({target})`."
            ),
        ),
        None => (
            Verdict::Deny,
            "mcp:method-default".to_string(),
            format!(
                "no rule allows it; an operator may allow it with `mcp({target})` in [policy] allow."
            ),
        ),
    };
    Decision {
        verdict,
        code: if verdict == Verdict::Allow {
            Code::Ok
        } else {
            Code::PolicyDenied
        },
        reason,
        rule: Some(rule),
        destructive: false,
        consequence,
        target,
        path: None,
        fetch: None,
        secret: false,
        rule_file: None,
    }
}

/// `supervisorctl policy test`'s form of a call: `mcp(NAME.TOOL)`.
pub(crate) fn parse_call(tool: &str) -> Option<McpToolCall> {
    let inner = tool.trim().strip_prefix("mcp(")?.strip_suffix(')')?.trim();
    let (server, tool) = inner.split_once('.')?;
    Some(McpToolCall {
        server: server.to_string(),
        tool: tool.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, PolicyConfig, RuleSpec};

    fn engine(allow: &[&str], ask: &[&str], deny: &[&str]) -> Engine {
        let v = |l: &[&str]| l.iter().map(|s| RuleSpec::Bare(s.to_string())).collect();
        Engine::new(&PolicyConfig {
            allow: v(allow),
            ask: v(ask),
            deny: v(deny),
            ..Default::default()
        })
        .unwrap()
    }

    fn call(server: &str, tool: &str) -> McpToolCall {
        McpToolCall {
            server: server.into(),
            tool: tool.into(),
        }
    }

    #[test]
    fn deny_beats_ask_beats_allow_and_no_rule_follows_the_mode() {
        let e = engine(&["mcp(fs.*)"], &["mcp(fs.edit_*)"], &["mcp(fs.write_file)"]);
        let v = |t: &str, m: Mode| e.decide_mcp(&call("fs", t), m);
        let d = v("read_file", Mode::Default);
        assert_eq!(
            (d.verdict, d.rule.as_deref()),
            (Verdict::Allow, Some("allow: mcp(fs.*)"))
        );
        let d = v("edit_file", Mode::Default);
        assert_eq!(
            (d.verdict, d.rule.as_deref()),
            (Verdict::Ask, Some("ask: mcp(fs.edit_*)"))
        );
        let d = v("write_file", Mode::DangerouslySkipPermissions);
        assert_eq!(d.verdict, Verdict::Deny);
        assert!(
            d.reason.contains("deny: mcp(fs.write_file)"),
            "{}",
            d.reason
        );
        assert_eq!(d.target, "fs.write_file");
        let other = |m: Mode| e.decide_mcp(&call("git", "push"), m).verdict;
        assert_eq!(other(Mode::Default), Verdict::Ask);
        assert_eq!(other(Mode::AcceptEdits), Verdict::Ask);
        assert_eq!(other(Mode::DangerouslySkipPermissions), Verdict::Allow);
        assert_eq!(other(Mode::Plan), Verdict::Deny);
        assert_eq!(other(Mode::DontAsk), Verdict::Deny);
    }

    #[test]
    fn names_are_checked() {
        let e = engine(&["mcp(*.*)"], &[], &[]);
        for (s, t) in [
            ("f.s", "x"),
            ("", "x"),
            ("fs", "a b"),
            ("fs", ""),
            ("fs", "x\u{0}"),
        ] {
            let d = e.decide_mcp(&call(s, t), Mode::DangerouslySkipPermissions);
            assert_eq!(
                (d.verdict, d.code),
                (Verdict::Deny, Code::InvalidArgs),
                "{s:?} {t:?}"
            );
        }
        assert!(check_server_name("fs-1_a").is_none());
        assert!(check_server_name("a.b").is_some());
    }

    #[test]
    fn bad_mcp_rules_are_refused_naming_the_rule() {
        for (spec, want) in [
            ("mcp(fs)", "`SERVER.TOOL`"),
            ("mcp(f s.x)", "is not SERVER.TOOL"),
            ("mcp(.x)", "must be non-empty"),
            ("mcp(fs.)", "must be non-empty"),
        ] {
            let e = Engine::new(&PolicyConfig {
                deny: vec![RuleSpec::Bare(spec.into())],
                ..Default::default()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(spec) && e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn rule_examples_are_names() {
        let spec = RuleSpec::WithExamples {
            rule: "mcp(fs.write_*)".into(),
            matches: vec!["fs.write_file".into()],
            not_match: vec!["fs.read_file".into(), "other.write_file".into()],
        };
        Engine::new(&PolicyConfig {
            deny: vec![spec],
            ..Default::default()
        })
        .unwrap();
    }

    #[test]
    fn policy_test_calls_parse() {
        assert_eq!(
            parse_call("mcp(fs.write_file)"),
            Some(call("fs", "write_file"))
        );
        assert_eq!(parse_call("mcp(fs.a.b)"), Some(call("fs", "a.b")));
        assert_eq!(parse_call("read_file"), None);
    }

    /// The MCP finding: a wrapped server's requests to the client and the
    /// client's resources/prompts passed undecided. Refused unless a
    /// `mcp(SERVER.METHOD)` rule allows them, whatever the mode and
    /// whatever the tool rules say.
    #[test]
    fn mcp_protocol_requests_are_refused_unless_a_method_rule_allows_them() {
        let e = engine(
            &[
                "mcp",
                "mcp(fs.*)",
                "mcp(fs.roots/list)",
                "mcp(*.resources/*)",
            ],
            &["mcp(fs.prompts/get)"],
            &["mcp(fs.resources/read)"],
        );
        let d = |m: &str| e.decide_mcp_method("fs", m);
        assert_eq!(d("roots/list").verdict, Verdict::Allow);
        assert_eq!(
            d("roots/list").rule.as_deref(),
            Some("allow: mcp(fs.roots/list)")
        );
        assert_eq!(d("resources/list").verdict, Verdict::Allow);
        let r = d("resources/read");
        assert_eq!(
            (r.verdict, r.rule.as_deref()),
            (Verdict::Deny, Some("deny: mcp(fs.resources/read)"))
        );
        let p = d("prompts/get");
        assert_eq!(p.verdict, Verdict::Deny);
        assert!(p.reason.contains("not put to a person"), "{}", p.reason);
        // `mcp` and `mcp(fs.*)` name tools, not sampling.
        let s = d("sampling/createMessage");
        assert_eq!(
            (s.verdict, s.rule.as_deref()),
            (Verdict::Deny, Some("mcp:method-default"))
        );
        assert!(
            s.reason.contains("mcp(fs.sampling/createMessage)"),
            "{}",
            s.reason
        );
        assert_eq!(
            e.decide_mcp_method("other", "roots/list").verdict,
            Verdict::Deny
        );
        // A method rule never allows a tool.
        let only = engine(&["mcp(fs.*/*)"], &[], &[]);
        assert_ne!(
            only.decide_mcp(&call("fs", "read_file"), Mode::Default)
                .verdict,
            Verdict::Allow
        );
        assert_eq!(
            only.decide_mcp_method("fs", "elicitation/create").verdict,
            Verdict::Allow
        );
        assert!(is_decided_method("roots/list", true) && !is_decided_method("ping", true));
        assert!(
            is_decided_method("resources/read", false) && is_decided_method("prompts/list", false)
        );
        assert!(!is_decided_method("tools/list", false) && !is_decided_method("initialize", false));
    }
}
