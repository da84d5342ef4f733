//! `agent mcp-gateway`'s flags and their checks (docs/INTERFACES.md).

use std::path::PathBuf;

use crate::cli::{MODES, UsageError};

/// The flags of `agent mcp-gateway`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct McpGatewayArgs {
    /// The server's name in `mcp(NAME.TOOL)` rules and the audit log
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// HOST[:PORT] the server may reach, forwarded and vetted by the supervisor (default ports 443 and 80; repeatable)
    #[arg(long = "allow-net", value_name = "HOST[:PORT]")]
    pub allow_net: Vec<String>,
    /// Workspace directory (default: the current directory)
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Permission mode for the session (within the supervisor's cap)
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// The MCP server's command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Settings of `agent mcp-gateway`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpGatewaySettings {
    pub socket: PathBuf,
    pub name: String,
    pub allow_net: Vec<String>,
    pub workspace: Option<PathBuf>,
    pub mode: Option<String>,
    pub command: Vec<String>,
}

/// Checks the flags; `outer_mode` is `agent --mode` given before the
/// subcommand (the subcommand's own wins).
pub fn validate(
    args: McpGatewayArgs,
    socket: PathBuf,
    outer_mode: Option<String>,
) -> Result<McpGatewaySettings, UsageError> {
    let mode = args.mode.or(outer_mode);
    if let Some(m) = &mode
        && !MODES.contains(&m.as_str())
    {
        return Err(UsageError(format!(
            "unknown mode '{m}', hint: use one of {}",
            MODES.join(", ")
        )));
    }
    if args.command.first().is_none_or(|c| c.is_empty()) {
        return Err(UsageError(
            "no MCP server to run, hint: agent mcp-gateway --name fs -- COMMAND ARGS…".into(),
        ));
    }
    Ok(McpGatewaySettings {
        socket,
        name: args.name,
        allow_net: args.allow_net,
        workspace: args.workspace,
        mode,
        command: args.command,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Action, RawCli, validate as cli_validate};

    fn parse(args: &[&str]) -> Result<Action, String> {
        let mut v = vec!["agent"];
        v.extend_from_slice(args);
        let raw = RawCli::try_parse_from(v).map_err(|e| e.to_string())?;
        cli_validate(raw, None).map_err(|e| e.0)
    }

    #[test]
    fn flags() {
        let Ok(Action::McpGateway(s)) = parse(&[
            "mcp-gateway",
            "--name",
            "fs",
            "--mode",
            "default",
            "--",
            "npx",
            "server",
            "/",
        ]) else {
            panic!()
        };
        assert_eq!(s.name, "fs");
        assert_eq!(s.command, vec!["npx", "server", "/"]);
        assert!(s.allow_net.is_empty());
        let Ok(Action::McpGateway(s)) = parse(&[
            "mcp-gateway",
            "--name",
            "web",
            "--allow-net",
            "api.example.com",
            "--allow-net",
            "93.184.216.34:80",
            "--",
            "python3",
            "server.py",
        ]) else {
            panic!()
        };
        // Passed on as given: the supervisor parses and vets them.
        assert_eq!(s.allow_net, vec!["api.example.com", "93.184.216.34:80"]);
        assert!(parse(&["mcp-gateway", "--name", "fs"]).is_err());
        assert!(parse(&["mcp-gateway", "--name", "fs", "--mode", "yolo", "--", "x"]).is_err());
    }
}
