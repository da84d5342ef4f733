//! `agent`: tollgate's unprivileged LLM loop (see the library for what it owns).
#![forbid(unsafe_code)]

use clap::Parser;
use clap::error::ErrorKind;
use tollgate_agent::cli::{self, Action, RawCli};

fn main() {
    let raw = match RawCli::try_parse() {
        Ok(r) => r,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                std::process::exit(0);
            }
            _ => {
                let text = e.to_string();
                let text = text.strip_prefix("error: ").unwrap_or(&text);
                eprint!("agent: {text}");
                std::process::exit(2);
            }
        },
    };
    let action = match cli::validate(raw, std::env::var("TOLLGATE_SOCKET").ok()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agent: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        match action {
            Action::Session(s) => tollgate_agent::session::run(s).await,
            Action::Call(c) => tollgate_agent::call::run(c).await,
            Action::Demo => tollgate_agent::demo::run().await,
            Action::Mcp(m) => tollgate_agent::mcp::run(m).await,
            Action::McpGateway(g) => tollgate_agent::mcp_gateway::run(g).await,
        }
    });
    // The stdin reader thread may sit in a blocking read: leave without waiting.
    std::process::exit(code);
}
