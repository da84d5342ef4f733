//! `agent`: tollgate's unprivileged LLM loop (see the library for what it owns).
#![forbid(unsafe_code)]

use clap::Parser;
use clap::error::ErrorKind;
use tollgate_agent::cli::{self, Action, RawCli};

fn main() {
    // `agent hook` runs once per tool call of Claude Code or Codex: its
    // plain form is read here, before clap builds every command's parser
    // (start-up is most of its cost).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let fast = tollgate_agent::hook::args::fast(&args, std::env::var("TOLLGATE_SOCKET").ok());
    let raw = match fast {
        Some(Ok(action)) => run(action),
        Some(Err(e)) => {
            eprintln!("agent hook: {e}; the call is blocked");
            std::process::exit(2);
        }
        None => {
            use clap::CommandFactory as _;
            if let Some(code) = tollgate_clidocs::main_if_asked(RawCli::command, "1") {
                std::process::exit(i32::from(code != std::process::ExitCode::SUCCESS));
            }
            RawCli::try_parse()
        }
    };
    let raw = match raw {
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
    run(action)
}

/// Runs what the command line asked for, then exits.
fn run(action: Action) -> ! {
    if let Action::Hook(_) | Action::HookExec { .. } = &action {
        // A hook that panics would exit 101, and the client would let the
        // call run: a panic blocks instead.
        std::panic::set_hook(Box::new(|info| {
            let msg = info.to_string().replace('\n', " ");
            eprintln!("agent hook: internal error ({msg}); the call is blocked");
            std::process::exit(2);
        }));
    }
    if let Action::HookConfig(c) = &action {
        for w in tollgate_agent::hook::config::warnings(c) {
            eprintln!("agent: warning: {w}");
        }
        print!("{}", tollgate_agent::hook::config::render(c));
        std::process::exit(0);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent: cannot start the async runtime: {e}");
            // A hook's failure must block the call.
            let code = match action {
                Action::Hook(_) => 2,
                _ => 1,
            };
            std::process::exit(code);
        }
    };
    let code = runtime.block_on(async move {
        match action {
            Action::Session(s) => tollgate_agent::session::run(s).await,
            Action::Call(c) => tollgate_agent::call::run(c).await,
            Action::Demo => tollgate_agent::demo::run().await,
            Action::Hook(h) => {
                let o = tollgate_agent::hook::event::run(h).await;
                use std::io::Write as _;
                let printed = std::io::stdout()
                    .write_all(o.stdout.as_bytes())
                    .and_then(|_| std::io::stdout().flush());
                eprint!("{}", o.stderr);
                if printed.is_err() {
                    eprintln!("agent hook: cannot write the answer on stdout; the call is blocked");
                    2
                } else {
                    o.code
                }
            }
            Action::HookExec { socket, id } => tollgate_agent::hook::exec::run(&socket, &id).await,
            Action::HookConfig(_) => 0,
            Action::Mcp(m) => tollgate_agent::mcp::run(m).await,
            Action::McpGateway(g) => tollgate_agent::mcp_gateway::run(g).await,
        }
    });
    // The stdin reader thread may sit in a blocking read: leave without waiting.
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// agent(1) and its completions come from the clap definition: every
    /// long flag of every subcommand is on its page and in each script.
    #[test]
    fn man_page_and_completions_carry_every_flag() {
        assert_eq!(
            tollgate_clidocs::check(tollgate_agent::cli::RawCli::command(), "1"),
            Ok(())
        );
    }
}
