//! `agent mcp`'s flags and their checks (docs/INTERFACES.md).

use std::path::PathBuf;

use crate::cli::{MODES, UsageError};

/// The flags of `agent mcp`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct McpArgs {
    /// Workspace directory (default: the current directory, which is where
    /// MCP clients start their servers)
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Permission mode for the session (within the supervisor's cap)
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Only these tools (comma separated); the client never sees the others
    #[arg(long, value_name = "a,b,c", value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Tool calls for the whole session (the supervisor may clamp it lower)
    #[arg(long, value_name = "N")]
    pub max_tool_calls: Option<u32>,
}

/// Settings of `agent mcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSettings {
    pub socket: PathBuf,
    pub workspace: Option<PathBuf>,
    pub mode: Option<String>,
    pub tools: Vec<String>,
    pub max_tool_calls: Option<u32>,
}

/// Checks the flags. `outer_mode` / `outer_tools` are `agent --mode/--tools`
/// given before the subcommand; the subcommand's own win.
pub fn validate(
    args: McpArgs,
    socket: PathBuf,
    outer_mode: Option<String>,
    outer_tools: Vec<String>,
) -> Result<McpSettings, UsageError> {
    let mode = args.mode.or(outer_mode);
    if let Some(m) = &mode
        && !MODES.contains(&m.as_str())
    {
        return Err(UsageError(format!(
            "unknown mode '{m}', hint: use one of {}",
            MODES.join(", ")
        )));
    }
    if args.max_tool_calls == Some(0) {
        return Err(UsageError("--max-tool-calls must be at least 1".into()));
    }
    let raw = if args.tools.is_empty() {
        outer_tools
    } else {
        args.tools
    };
    let mut tools: Vec<String> = Vec::new();
    for t in raw {
        let t = t.trim().to_string();
        if !t.is_empty() && !tools.contains(&t) {
            tools.push(t);
        }
    }
    Ok(McpSettings {
        socket,
        workspace: args.workspace,
        mode,
        tools,
        max_tool_calls: args.max_tool_calls,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Action, RawCli};

    fn parse(args: &[&str]) -> Result<Action, UsageError> {
        let raw = RawCli::try_parse_from(std::iter::once("agent").chain(args.iter().copied()))
            .map_err(|e| UsageError(e.to_string()))?;
        crate::cli::validate(raw, None)
    }

    #[test]
    fn flags_of_agent_mcp() {
        assert_eq!(
            parse(&[
                "mcp",
                "--workspace",
                "/w",
                "--mode",
                "plan",
                "--tools",
                "read_file, grep,read_file",
                "--max-tool-calls",
                "9",
                "--socket",
                "/s",
            ]),
            Ok(Action::Mcp(McpSettings {
                socket: PathBuf::from("/s"),
                workspace: Some(PathBuf::from("/w")),
                mode: Some("plan".into()),
                tools: vec!["read_file".into(), "grep".into()],
                max_tool_calls: Some(9),
            }))
        );
        // `agent --mode M --tools … mcp` works too; the subcommand's own wins.
        let Ok(Action::Mcp(s)) = parse(&["--mode", "plan", "--tools", "grep", "mcp"]) else {
            panic!()
        };
        assert_eq!(
            (s.mode.as_deref(), s.tools),
            (Some("plan"), vec!["grep".to_string()])
        );
        let Ok(Action::Mcp(s)) = parse(&["--mode", "plan", "mcp", "--mode", "default"]) else {
            panic!()
        };
        assert_eq!(s.mode.as_deref(), Some("default"));
    }

    #[test]
    fn usage_errors_of_agent_mcp() {
        assert_eq!(
            parse(&["mcp", "--mode", "yolo"]),
            Err(UsageError(
                "unknown mode 'yolo', hint: use one of default, acceptEdits, plan, dontAsk, dangerouslySkipPermissions".into()
            ))
        );
        assert_eq!(
            parse(&["mcp", "--max-tool-calls", "0"]),
            Err(UsageError("--max-tool-calls must be at least 1".into()))
        );
        assert!(parse(&["-p", "do it", "mcp"]).is_err());
    }
}
