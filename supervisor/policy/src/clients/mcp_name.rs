//! `mcp__SERVER__TOOL`: which MCP server a client's tool name names.
//!
//! Both clients name an MCP tool `mcp__<server>__<tool>`, and both server
//! and tool names may hold `__`, so `mcp__a__b__c` is server `a`'s tool
//! `b__c` or server `a__b`'s tool `c`. The split is never taken from the
//! tool's input (the model writes it). It is taken from the server name the
//! client itself reports beside the call (Claude Code's `mcp_server`, the
//! key of the server in its configuration, in the name form Claude Code
//! uses in tool names); where the client names none (Codex) or its name
//! fits no split, every split is decided and the strictest wins, so no
//! choice of names can make a call pass for another server's.

use tollgate_toolcall::{self as tool, Tool};

use super::{Mapped, RULE_INPUT};
use crate::display::shorten;

/// Maps `mcp__{rest}`; `named` is the server the client reports.
pub(super) fn map(rest: &str, named: Option<&str>) -> Mapped {
    let splits = splits(rest);
    if splits.is_empty() {
        return Mapped::Refused {
            rule: RULE_INPUT,
            reason: format!(
                "the MCP tool name `mcp__{}` is not `mcp__SERVER__TOOL`, so it is refused.",
                shorten(rest, 120)
            ),
        };
    }
    let named = named.map(tool_name_form);
    let chosen: Vec<(&str, &str)> = match named
        .as_deref()
        .and_then(|n| splits.iter().find(|(s, _)| *s == n))
    {
        Some(one) => vec![*one],
        None => splits,
    };
    Mapped::Gated {
        tool: tool::ToolName::Mcp.as_str(),
        calls: chosen
            .into_iter()
            .map(|(server, tool)| {
                Tool::Mcp(tool::McpToolCall {
                    server: server.to_string(),
                    tool: tool.to_string(),
                })
            })
            .collect(),
        shell: None,
        search: None,
    }
}

/// Every (server, tool) that `rest` splits into at a `__`, both non-empty.
fn splits(rest: &str) -> Vec<(&str, &str)> {
    // Every position, overlapping ones too (`a___b`).
    (0..rest.len())
        .filter(|&i| rest.as_bytes()[i..].starts_with(b"__"))
        .map(|i| (&rest[..i], &rest[i + 2..]))
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
        .collect()
}

/// A server's configured name as Claude Code writes it in tool names: every
/// character but letters, digits, `_` and `-` becomes `_`.
fn tool_name_form(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(m: &Mapped) -> Vec<(String, String)> {
        match m {
            Mapped::Gated { calls, .. } => calls
                .iter()
                .map(|c| match c {
                    Tool::Mcp(m) => (m.server.clone(), m.tool.clone()),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("not gated: {other:?}"),
        }
    }

    fn pair(s: &str, t: &str) -> (String, String) {
        (s.to_string(), t.to_string())
    }

    #[test]
    fn a_name_with_one_split_is_that_server_and_tool() {
        assert_eq!(
            servers(&map("github__create_issue", None)),
            vec![pair("github", "create_issue")]
        );
    }

    #[test]
    fn the_clients_server_name_picks_the_split() {
        assert_eq!(
            servers(&map("my__srv__do_it", Some("my__srv"))),
            vec![pair("my__srv", "do_it")]
        );
        assert_eq!(
            servers(&map("my__srv__do_it", Some("my"))),
            vec![pair("my", "srv__do_it")]
        );
        // Claude Code's tool-name form of a configured name.
        assert_eq!(
            servers(&map("my_docs__search", Some("my docs"))),
            vec![pair("my_docs", "search")]
        );
    }

    #[test]
    fn without_the_clients_name_every_split_is_decided() {
        assert_eq!(
            servers(&map("a__b__c", None)),
            vec![pair("a", "b__c"), pair("a__b", "c")]
        );
        // A name the client reports that fits no split picks none.
        assert_eq!(
            servers(&map("a__b__c", Some("zzz"))),
            vec![pair("a", "b__c"), pair("a__b", "c")]
        );
        assert_eq!(
            servers(&map("a___b", None)),
            vec![pair("a", "_b"), pair("a_", "b")]
        );
    }

    #[test]
    fn a_name_without_a_split_is_refused() {
        for rest in ["nosplit", "__x", "x__", "__"] {
            assert!(matches!(map(rest, None), Mapped::Refused { .. }), "{rest}");
        }
    }
}
