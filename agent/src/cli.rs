//! Command-line arguments, parsed in two stages: clap reads the raw flags, then
//! `validate` turns them into settings or a usage error (exit 2). Names and flags are
//! the contract of docs/INTERFACES.md.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// The default agent socket.
pub const DEFAULT_SOCKET: &str = "/run/tollgate/agent.sock";

/// The modes a session can ask for.
pub const MODES: [&str; 5] = [
    "default",
    "acceptEdits",
    "plan",
    "dontAsk",
    "dangerouslySkipPermissions",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "agent",
    version,
    about = "tollgate's agent: an LLM loop that can only ask the supervisor to run tools",
    after_help = "Without -p: an interactive session in the current directory. \
                  Ctrl-C aborts the current turn; /exit or Ctrl-D quits."
)]
pub struct RawCli {
    /// The supervisor's agent socket [env: TOLLGATE_SOCKET] [default: /run/tollgate/agent.sock]
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Permission mode: default, acceptEdits, plan, dontAsk, dangerouslySkipPermissions
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Only these tools (comma separated); the model never sees the others
    #[arg(long, value_name = "a,b,c", value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Model turns per user message before the agent stops and summarises
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub max_turns: u32,
    /// Tool calls for the whole session (the supervisor may clamp it lower)
    #[arg(long, value_name = "N")]
    pub max_tool_calls: Option<u32>,
    /// Context budget in tokens (estimated at 4 characters each); trimmed at 80 %
    #[arg(long, value_name = "N", default_value_t = 24_000)]
    pub max_context_tokens: u32,
    /// Cost cap for the session in USD (the supervisor may clamp it lower)
    #[arg(long, value_name = "X")]
    pub max_cost_usd: Option<f64>,
    /// Seconds to wait for one model response (the supervisor may clamp it lower)
    #[arg(long, value_name = "SECS")]
    pub llm_timeout: Option<u32>,
    /// Model name for the supervisor's LLM proxy (default: the supervisor's)
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Run one task, then exit
    #[arg(short = 'p', long = "prompt", value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// With -p: text, or one JSON object on stdout
    #[arg(long, value_enum, default_value = "text", value_name = "text|json")]
    pub output: OutputFormat,
    #[command(subcommand)]
    pub command: Option<RawCommand>,
}

#[derive(Debug, Subcommand)]
pub enum RawCommand {
    /// A guided, self-contained tour on a throwaway copy of a sample project
    Demo,
    /// One tool call in a fresh session; prints one JSON object
    Call {
        /// Tool name (read_file, run_bash, ...)
        tool: String,
        /// The arguments, as a JSON object
        #[arg(value_name = "JSON-ARGS")]
        args: String,
        /// Permission mode for the session
        #[arg(long, value_name = "MODE")]
        mode: Option<String>,
        /// Workspace directory (default: the current directory)
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Serve tollgate's tools to an MCP client over stdin/stdout
    Mcp(crate::mcp::McpArgs),
    /// Run a third-party MCP server in tollgate's sandbox, every call gated
    McpGateway(crate::mcp_gateway::McpGatewayArgs),
    /// Claude Code's or Codex's hook: reads one event on stdin, answers on stdout;
    /// every failure blocks (exit 2)
    Hook {
        #[command(subcommand)]
        action: Option<HookCommand>,
        /// claude-code or codex (default: guessed from the event)
        #[arg(long, value_name = "CLIENT")]
        client: Option<String>,
        /// The `timeout` the client runs this hook with, in seconds: the hook
        /// answers, or blocks, a tenth earlier (at least 1 s)
        #[arg(long, value_name = "SECS", default_value_t = crate::hook::DEFAULT_TIMEOUT_S)]
        timeout: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// Run a routed shell command (what an allowed Bash call is rewritten to)
    Exec {
        /// The routed command's id
        id: String,
    },
    /// Print the hook configuration to install for a client
    PrintConfig {
        /// claude or codex
        client: String,
        /// For the managed place: /etc/claude-code/managed-settings.json or
        /// /etc/codex/requirements.toml
        #[arg(long)]
        managed: bool,
        /// The agent binary the hooks run (default: this one)
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// The clients' hook timeout, in seconds
        #[arg(long, value_name = "SECS", default_value_t = crate::hook::config::DEFAULT_TIMEOUT_S)]
        timeout: u32,
    },
}

/// Settings of an interactive or `-p` session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSettings {
    pub socket: PathBuf,
    pub mode: Option<String>,
    pub tools: Vec<String>,
    pub max_turns: u32,
    pub max_tool_calls: Option<u32>,
    pub max_context_tokens: u32,
    pub max_cost_usd: Option<f64>,
    pub llm_timeout_s: Option<u32>,
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub output: OutputFormat,
}

/// Settings of `agent call`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSettings {
    pub socket: PathBuf,
    pub tool: String,
    pub args: serde_json::Map<String, serde_json::Value>,
    pub args_text: String,
    pub mode: Option<String>,
    pub workspace: Option<PathBuf>,
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Session(SessionSettings),
    Demo,
    Call(CallSettings),
    Hook(crate::hook::event::HookSettings),
    HookExec { socket: PathBuf, id: String },
    HookConfig(crate::hook::config::ConfigSettings),
    Mcp(crate::mcp::McpSettings),
    McpGateway(crate::mcp_gateway::McpGatewaySettings),
}

/// A usage error: printed as `agent: <message>` and exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn check_mode(mode: Option<String>) -> Result<Option<String>, UsageError> {
    match mode {
        None => Ok(None),
        Some(m) if MODES.contains(&m.as_str()) => Ok(Some(m)),
        Some(m) => Err(UsageError(format!(
            "unknown mode '{m}', hint: use one of {}",
            MODES.join(", ")
        ))),
    }
}

/// Resolves the socket path: `--socket`, then `env_socket` (TOLLGATE_SOCKET), then
/// the default.
pub fn socket_path(flag: Option<PathBuf>, env_socket: Option<String>) -> PathBuf {
    flag.or_else(|| env_socket.filter(|s| !s.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// The second stage: checks the raw flags against each other.
pub fn validate(mut raw: RawCli, env_socket: Option<String>) -> Result<Action, UsageError> {
    let socket = socket_path(raw.socket.take(), env_socket);
    let session_flags_used = raw.prompt.is_some()
        || !raw.tools.is_empty()
        || raw.output == OutputFormat::Json
        || raw.model.is_some();
    match raw.command.take() {
        Some(RawCommand::Hook {
            action,
            client,
            timeout,
        }) => {
            if session_flags_used || raw.mode.is_some() {
                return Err(UsageError(
                    "`agent hook` takes only --client, --timeout and --socket".into(),
                ));
            }
            hook_action(action, client, timeout, socket)
        }
        Some(RawCommand::Demo) => {
            if session_flags_used || raw.mode.is_some() {
                return Err(UsageError(
                    "`agent demo` takes no session flags, hint: run `agent demo` on its own".into(),
                ));
            }
            Ok(Action::Demo)
        }
        Some(RawCommand::Call {
            tool,
            args,
            mode,
            workspace,
        }) => {
            if session_flags_used {
                return Err(UsageError(
                    "`agent call` takes only --mode, --workspace and --socket".into(),
                ));
            }
            call_action(tool, args, mode.or(raw.mode), workspace, socket)
        }
        Some(RawCommand::Mcp(args)) => {
            if raw.prompt.is_some() || raw.output == OutputFormat::Json || raw.model.is_some() {
                return Err(UsageError(
                    "`agent mcp` takes only --workspace, --mode, --tools, --max-tool-calls and --socket".into(),
                ));
            }
            crate::mcp::validate(args, socket, raw.mode, raw.tools).map(Action::Mcp)
        }
        Some(RawCommand::McpGateway(args)) => {
            if session_flags_used {
                return Err(UsageError(
                    "`agent mcp-gateway` takes only --name, --allow-net, --workspace, --mode and --socket".into(),
                ));
            }
            crate::mcp_gateway::validate(args, socket, raw.mode).map(Action::McpGateway)
        }
        None => session_action(raw, socket),
    }
}

/// `agent call TOOL ARGS`: the tool named and its arguments a JSON object.
fn call_action(
    tool: String,
    args: String,
    mode: Option<String>,
    workspace: Option<PathBuf>,
    socket: PathBuf,
) -> Result<Action, UsageError> {
    let mode = check_mode(mode)?;
    if tool.trim().is_empty() {
        return Err(UsageError("the tool name is empty".into()));
    }
    let value: serde_json::Value = serde_json::from_str(&args).map_err(|e| {
        UsageError(format!(
            "the arguments for {tool} are not valid JSON: {e}, hint: quote them, e.g. '{{\"path\":\"README.md\"}}'"
        ))
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(UsageError(format!(
            "the arguments for {tool} must be a JSON object, e.g. '{{\"path\":\"README.md\"}}'"
        )));
    };
    Ok(Action::Call(CallSettings {
        socket,
        tool,
        args: map,
        args_text: args,
        mode,
        workspace,
    }))
}

/// A session (interactive, or one prompt with -p): the limits checked, the
/// tools deduplicated.
fn session_action(raw: RawCli, socket: PathBuf) -> Result<Action, UsageError> {
    let mode = check_mode(raw.mode)?;
    if raw.max_turns == 0 {
        return Err(UsageError("--max-turns must be at least 1".into()));
    }
    if raw.max_context_tokens < 1_000 {
        return Err(UsageError(format!(
            "--max-context-tokens {} is too small, hint: use at least 1000",
            raw.max_context_tokens
        )));
    }
    if let Some(c) = raw.max_cost_usd
        && (!c.is_finite() || c < 0.0)
    {
        return Err(UsageError(format!(
            "--max-cost-usd {c} is not a non-negative amount"
        )));
    }
    if raw.llm_timeout == Some(0) {
        return Err(UsageError("--llm-timeout must be at least 1 second".into()));
    }
    if raw.max_tool_calls == Some(0) {
        return Err(UsageError("--max-tool-calls must be at least 1".into()));
    }
    let mut tools: Vec<String> = Vec::new();
    for t in raw.tools {
        let t = t.trim().to_string();
        if t.is_empty() {
            continue;
        }
        if !tools.contains(&t) {
            tools.push(t);
        }
    }
    if let Some(p) = &raw.prompt
        && p.trim().is_empty()
    {
        return Err(UsageError("-p needs a non-empty prompt".into()));
    }
    if raw.output == OutputFormat::Json && raw.prompt.is_none() {
        return Err(UsageError(
            "--output json needs -p PROMPT (an interactive session prints text)".into(),
        ));
    }
    Ok(Action::Session(SessionSettings {
        socket,
        mode,
        tools,
        max_turns: raw.max_turns,
        max_tool_calls: raw.max_tool_calls,
        max_context_tokens: raw.max_context_tokens,
        max_cost_usd: raw.max_cost_usd,
        llm_timeout_s: raw.llm_timeout,
        model: raw.model.filter(|m| !m.is_empty()),
        prompt: raw.prompt,
        output: raw.output,
    }))
}

/// `agent hook`'s values, checked (clap's reader and the fast one both use it).
pub fn hook_action(
    action: Option<HookCommand>,
    client: Option<String>,
    timeout: u32,
    socket: PathBuf,
) -> Result<Action, UsageError> {
    // The routed command runs in another directory: name the socket whole.
    let socket = if socket.is_absolute() {
        socket
    } else {
        std::path::absolute(&socket)
            .map_err(|e| UsageError(format!("cannot make {} absolute ({e})", socket.display())))?
    };
    match action {
        None => {
            if let Some(c) = &client
                && c != "claude-code"
                && c != "codex"
            {
                return Err(UsageError(format!(
                    "unknown client '{c}', hint: use claude-code or codex"
                )));
            }
            if timeout < 2 {
                return Err(UsageError(
                    "--timeout must be at least 2 seconds (the hook answers a tenth earlier, and at least 1 s)".into(),
                ));
            }
            Ok(Action::Hook(crate::hook::event::HookSettings {
                socket,
                client,
                timeout_s: timeout,
            }))
        }
        Some(HookCommand::Exec { id }) => Ok(Action::HookExec { socket, id }),
        Some(HookCommand::PrintConfig {
            client: target,
            managed,
            agent,
            timeout,
        }) => {
            let target = crate::hook::config::Target::parse(&target).ok_or_else(|| {
                UsageError(format!(
                    "unknown client '{target}', hint: use claude or codex"
                ))
            })?;
            if timeout < 2 {
                return Err(UsageError("--timeout must be at least 2 seconds".into()));
            }
            let agent = match agent {
                Some(a) if a.is_absolute() => a,
                Some(a) => {
                    return Err(UsageError(format!(
                        "--agent {} is not an absolute path",
                        a.display()
                    )));
                }
                None => std::env::current_exe()
                    .and_then(std::fs::canonicalize)
                    .map_err(|e| {
                        UsageError(format!(
                            "cannot find this agent binary ({e}); pass --agent PATH"
                        ))
                    })?,
            };
            Ok(Action::HookConfig(crate::hook::config::ConfigSettings {
                target,
                managed,
                agent,
                socket,
                timeout_s: timeout,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Action, UsageError> {
        let raw = RawCli::try_parse_from(std::iter::once("agent").chain(args.iter().copied()))
            .map_err(|e| UsageError(e.to_string()))?;
        validate(raw, None)
    }

    #[test]
    fn defaults() {
        let Action::Session(s) = parse(&[]).unwrap() else {
            panic!()
        };
        assert_eq!(
            s,
            SessionSettings {
                socket: PathBuf::from(DEFAULT_SOCKET),
                mode: None,
                tools: vec![],
                max_turns: 40,
                max_tool_calls: None,
                max_context_tokens: 24_000,
                max_cost_usd: None,
                llm_timeout_s: None,
                model: None,
                prompt: None,
                output: OutputFormat::Text,
            }
        );
    }

    #[test]
    fn every_flag() {
        let Action::Session(s) = parse(&[
            "--socket",
            "/tmp/a.sock",
            "--mode",
            "acceptEdits",
            "--tools",
            "read_file,grep,read_file",
            "--max-turns",
            "3",
            "--max-tool-calls",
            "9",
            "--max-context-tokens",
            "8000",
            "--max-cost-usd",
            "0.5",
            "--llm-timeout",
            "30",
            "--model",
            "m",
            "-p",
            "do it",
            "--output",
            "json",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.socket, PathBuf::from("/tmp/a.sock"));
        assert_eq!(s.mode.as_deref(), Some("acceptEdits"));
        assert_eq!(s.tools, vec!["read_file", "grep"]);
        assert_eq!(
            (s.max_turns, s.max_tool_calls, s.max_context_tokens),
            (3, Some(9), 8000)
        );
        assert_eq!(
            (s.max_cost_usd, s.llm_timeout_s, s.model.as_deref()),
            (Some(0.5), Some(30), Some("m"))
        );
        assert_eq!(
            (s.prompt.as_deref(), s.output),
            (Some("do it"), OutputFormat::Json)
        );
    }

    #[test]
    fn socket_precedence() {
        assert_eq!(
            socket_path(Some("/a".into()), Some("/b".into())),
            PathBuf::from("/a")
        );
        assert_eq!(socket_path(None, Some("/b".into())), PathBuf::from("/b"));
        assert_eq!(
            socket_path(None, Some(String::new())),
            PathBuf::from(DEFAULT_SOCKET)
        );
    }

    #[test]
    fn usage_errors() {
        assert_eq!(
            parse(&["--mode", "yolo"]),
            Err(UsageError(
                "unknown mode 'yolo', hint: use one of default, acceptEdits, plan, dontAsk, dangerouslySkipPermissions"
                    .into()
            ))
        );
        assert!(parse(&["--output", "json"]).is_err());
        assert!(parse(&["--max-turns", "0"]).is_err());
        assert!(parse(&["--max-cost-usd", "NaN"]).is_err());
        assert!(parse(&["-p", "  "]).is_err());
        assert!(parse(&["-p", "x", "demo"]).is_err());
        assert!(parse(&["call", "read_file", "{"]).is_err());
        assert!(parse(&["call", "read_file", "[1]"]).is_err());
    }

    #[test]
    fn hook_commands() {
        let Action::Hook(h) = parse(&[
            "hook",
            "--client",
            "codex",
            "--timeout",
            "60",
            "--socket",
            "/s",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            h,
            crate::hook::event::HookSettings {
                socket: "/s".into(),
                client: Some("codex".into()),
                timeout_s: 60
            }
        );
        assert_eq!(
            parse(&["hook", "exec", "rX", "--socket", "/s"]),
            Ok(Action::HookExec {
                socket: "/s".into(),
                id: "rX".into()
            })
        );
        let Action::HookConfig(c) = parse(&[
            "hook",
            "print-config",
            "claude",
            "--managed",
            "--agent",
            "/usr/bin/agent",
        ])
        .unwrap() else {
            panic!()
        };
        assert!(c.managed);
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert!(parse(&["hook", "--client", "cursor"]).is_err());
        assert!(parse(&["hook", "--timeout", "1"]).is_err());
        assert!(parse(&["hook", "print-config", "vim"]).is_err());
        assert!(parse(&["hook", "print-config", "codex", "--agent", "agent"]).is_err());
        assert!(parse(&["--mode", "plan", "hook"]).is_err());
    }

    #[test]
    fn call_and_demo() {
        assert_eq!(parse(&["demo"]), Ok(Action::Demo));
        let Action::Call(c) = parse(&[
            "call",
            "read_file",
            r#"{"path":"a"}"#,
            "--mode",
            "plan",
            "--workspace",
            "/w",
            "--socket",
            "/s",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.tool, "read_file");
        assert_eq!(c.args.get("path").and_then(|v| v.as_str()), Some("a"));
        assert_eq!(c.mode.as_deref(), Some("plan"));
        assert_eq!(c.workspace, Some(PathBuf::from("/w")));
        assert_eq!(c.socket, PathBuf::from("/s"));
    }
}
