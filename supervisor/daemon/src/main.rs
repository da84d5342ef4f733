//! `supervisor`: runs in the foreground until SIGTERM or SIGINT.
//!
//! Also `supervisor __sandbox-init …`: the native sandbox's single-threaded
//! helper. That check comes first, before any thread or runtime exists.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};
use tollgate_config::{BackendChoice, DEFAULT_CONFIG};
use tollgate_supervisor::{
    ConfigFault, EX_CONFIG, Options, check_config, doctor, load_config, logging, run, take_passed,
};

/// tollgate's supervisor: sandboxes, secrets, policy and the audit log.
#[derive(Debug, Parser)]
#[command(name = "supervisor", version)]
struct Args {
    /// Config file (TOML). Default: $TOLLGATE_CONFIG or /etc/tollgate/supervisor.toml
    /// (built-in defaults when that default file is absent).
    #[arg(long, env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Directory for agent.sock and operator.sock (overrides [supervisor] state_dir).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Audit log directory (overrides [audit] dir).
    #[arg(long)]
    audit_dir: Option<PathBuf>,
    /// Sandbox backend (overrides [sandbox] backend).
    #[arg(long, value_enum)]
    sandbox: Option<BackendChoice>,
    /// Take agent.sock and operator.sock from the service manager (systemd
    /// socket activation: LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES=agent:operator)
    /// and refuse to start without them. Without this flag, passed sockets are
    /// used when present and the supervisor creates its own otherwise.
    #[arg(long)]
    socket_activation: bool,
    /// Validate the config as a start would (the file, every rule with its
    /// examples, the operator group, the LLM script, the directories), print
    /// each error, and exit: 0 when it would start, 78 (EX_CONFIG) when not.
    /// Starts, binds and writes nothing.
    #[arg(long)]
    check_config: bool,
    /// Run the sandbox's probes for the config (the native sandbox's kernel
    /// features, the Docker engine, image and exec agent), print them as one
    /// JSON document (`supervisorctl doctor --json`'s checks) and exit: 0, 1
    /// when one fails, 78 when the config does not load. supervisorctl doctor
    /// runs this itself when no supervisor answers.
    #[arg(long, conflicts_with = "check_config")]
    doctor: bool,
}

fn main() -> ExitCode {
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("__sandbox-init")) {
        return tollgate_sandbox::native::init_main();
    }
    // supervisor(8), and tollgate.toml(5) for the file it reads.
    let config_page = (
        "5",
        tollgate_clidocs::config_page::FILE,
        tollgate_clidocs::config_page::render(env!("CARGO_PKG_VERSION")),
    );
    if let Some(code) = tollgate_clidocs::main_if_asked_with(Args::command, "8", &[config_page]) {
        return code;
    }
    let args = Args::parse();
    let mut opts = Options {
        config_explicit: args.config.is_some(),
        config: args.config.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG)),
        state_dir: args.state_dir,
        audit_dir: args.audit_dir,
        sandbox: args.sandbox,
        passed: None,
    };
    if args.check_config {
        return check_config(&opts);
    }
    if args.doctor {
        return doctor(&opts);
    }
    // A config error stops the start with EX_CONFIG, which the unit's
    // RestartPreventExitStatus= keeps from restarting in a loop.
    let config = match load_config(&opts) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "supervisor: {e:#}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    logging::init(config.log.level);
    // A panic inside brush-parser on agent input is caught by the policy
    // engine and the command refused; it gets one warning, not a printed
    // (and with RUST_BACKTRACE set, captured) backtrace, since the agent can
    // send the same input in a loop. Every other panic is reported as usual.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if tollgate_policy::parsing_untrusted_input() {
            tracing::warn!(
                "the shell parser panicked on agent input (caught; the command is refused): {info}"
            );
        } else {
            report(info);
        }
    }));
    // Sockets the service manager passed are taken before the runtime opens
    // fds of its own (the fd numbers are the contract), so a unit started
    // without them, or with the wrong kind, stops here.
    opts.passed = match take_passed(args.socket_activation) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("supervisor: {e:#}");
            return ExitCode::from(1);
        }
    };
    // 16 MiB stacks instead of 2: parsing recurses per level of nesting.
    // The policy refuses deep nesting before it parses (tollgate-policy's
    // shell::nesting); this is the margin behind that estimate. Untouched
    // stack costs address space, not memory.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 << 20)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "supervisor: cannot start the async runtime: {e}"
            );
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(opts, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "supervisor: {e:#}");
            if e.downcast_ref::<ConfigFault>().is_some() {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// supervisor(8) and its completions come from the clap definition.
    #[test]
    fn man_page_and_completions_carry_every_flag() {
        assert_eq!(tollgate_clidocs::check(super::Args::command(), "8"), Ok(()));
    }
}
