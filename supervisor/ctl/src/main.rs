//! `supervisorctl`: the operator's command line (docs/INTERFACES.md).
//!
//! Exit codes: 0 success; 1 failure (including "verification failed"); 2 usage
//! error; 3 denied. Errors print as `supervisorctl: <message>[, hint]`.

#![forbid(unsafe_code)]
// Every write to stdout goes through `out` (a closed pipe exits quietly).
#![deny(clippy::print_stdout)]

#[macro_use]
mod out;

mod approvals;
mod audit;
mod bench;
mod cache;
mod client;
mod complete;
mod doctor;
mod errors;
mod import;
mod net;
mod policy;
mod prometheus;
mod reload;
mod sandbox;
mod secrets;
mod sessions;
mod shared_disk;
mod sibling;
mod table;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};
use tollgate_config::BackendChoice;

/// Operate a tollgate supervisor: sessions, approvals, the kill switch,
/// the audit log, the policy and the sandbox.
#[derive(Debug, Parser)]
#[command(name = "supervisorctl", version)]
struct Cli {
    /// operator.sock (default: $TOLLGATE_OPERATOR_SOCKET or /run/tollgate/operator.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Is the supervisor up, and how strong is its sandbox?
    Status {
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// The counters as Prometheus text exposition.
        #[arg(long)]
        prometheus: bool,
    },
    /// List sessions.
    Sessions {
        #[arg(long)]
        json: bool,
        /// Include ended sessions.
        #[arg(long)]
        all: bool,
    },
    /// Show one session.
    Show {
        #[arg(add = complete::sessions(complete::Which::All))]
        session: String,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a session's token: in-flight work is killed, the agent stops.
    Revoke {
        #[arg(add = complete::sessions(complete::Which::Active))]
        session: String,
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Kill a session (or every session) now.
    Kill {
        #[arg(
            required_unless_present = "all",
            conflicts_with = "all",
            add = complete::sessions(complete::Which::Active)
        )]
        session: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// List approvals waiting for a decision.
    Approvals {
        #[arg(long)]
        json: bool,
        /// Include decided ones.
        #[arg(long)]
        all: bool,
    },
    /// Approve a pending approval.
    Approve {
        #[arg(add = complete::approvals())]
        approval: String,
        #[arg(long, default_value = "once", value_parser = ["once", "session"])]
        scope: String,
        /// Destructive approvals: type the target (path, branch) to confirm.
        #[arg(long)]
        confirm: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Deny a pending approval.
    Deny {
        #[arg(add = complete::approvals())]
        approval: String,
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Follow live events: approvals, decisions, tool calls, revocations.
    Watch {
        #[arg(long, add = complete::sessions(complete::Which::Active))]
        session: Option<String>,
        /// JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// One live session's network: allow or deny a host, list the lists.
    #[command(subcommand)]
    Net(net::NetCmd),
    /// [[secrets]]: names, bound hosts and use counts, never a value.
    #[command(subcommand)]
    Secrets(SecretsCmd),
    /// The owners' package caches: list, clear (audited).
    #[command(subcommand)]
    Cache(cache::CacheCmd),
    /// Probe the sandbox directly.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// The audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// The policy engine, offline.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Read the config again and put its policy in force for new decisions,
    /// as SIGHUP does; every live session keeps running. A refused reload
    /// exits 1 and the old config stays.
    Reload {
        #[arg(long)]
        json: bool,
    },
    /// Check this host: Landlock, seccomp, namespaces, cgroups, Docker,
    /// credential paths, sockets.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Measure every figure of docs/PERFORMANCE.md against its baselines
    /// (starts its own supervisors on a temporary directory; run as root).
    /// Runs tollgate-bench, beside supervisorctl or on PATH, with these
    /// arguments: `supervisorctl bench --help` lists its flags.
    #[command(disable_help_flag = true)]
    Bench {
        /// tollgate-bench's flags: --json, --samples N, --quick,
        /// --container-samples N, --dir DIR, --image IMAGE, --no-docker,
        /// --audit-sync always|batch, --keep.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Debug, Subcommand)]
enum SecretsCmd {
    /// List the configured secrets.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SandboxCmd {
    /// Run CMD in a fresh sandbox built exactly as a session's.
    Exec {
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Run as this uid (default: the owner of the workspace).
        #[arg(long)]
        user: Option<u32>,
        /// Sandbox backend (default: the supervisor's).
        #[arg(long, value_enum)]
        backend: Option<BackendChoice>,
        #[arg(long)]
        timeout: Option<u32>,
        /// JSON Lines: {"stdout"|"stderr": TEXT} as the command writes, then
        /// {"exit": {...}}.
        #[arg(long)]
        json: bool,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check hash chains; name the first broken line.
    Verify {
        /// Audit files; a directory stands for every audit file in it.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The expected hash of the last record (catches a truncated tail).
        /// Without it, heads recorded in the supervisor's log next to the file are used.
        #[arg(long)]
        head: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Follow a session's log.
    Tail {
        #[arg(add = complete::sessions(complete::Which::All))]
        session: String,
        /// The audit directory (default: asked from the supervisor).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print what is there and exit instead of following.
        #[arg(long)]
        no_follow: bool,
        /// The records as written (JSON Lines), not as lines for people.
        #[arg(long)]
        json: bool,
    },
    /// Move whole closed runs (a supervisor log and the session files it
    /// names) created before DATE into DIR; what stays and what moved still
    /// verify.
    Archive {
        /// YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC).
        #[arg(long)]
        before: String,
        /// Where the files go (created 0700 if absent).
        to: PathBuf,
        /// The audit directory (default: asked from the supervisor).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Allowed / asked / approved / denied per tool and rule, with suggestions.
    Report {
        /// Files or directories (default: the supervisor's audit directory).
        paths: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCmd {
    /// Translate another client's permission rules into a policy.d/ drop-in
    /// (on stdout; what does not map is listed as comments and on stderr).
    Import {
        #[arg(value_enum)]
        client: import::Client,
        /// Claude Code's settings.json, or a Codex execpolicy rules file.
        file: PathBuf,
    },
    /// Decide JSON Lines of tool calls offline: {"tool","args","mode"?} per line.
    Test {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[arg(long)]
        mode: Option<String>,
        /// Pin a host name: HOST=IP (repeatable).
        #[arg(long = "resolve")]
        resolve: Vec<String>,
        /// Input file, or - for stdin (default).
        file: Option<PathBuf>,
        /// Accepted for every command; the answers are JSON Lines already.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == bench::FLOOR_SUBCOMMAND) {
        eprintln!("supervisorctl: {:#}", bench::exec(&args[1..]));
        return ExitCode::from(1);
    }
    if let Some(code) = tollgate_clidocs::main_if_asked(Cli::command, "8") {
        return code;
    }
    // `COMPLETE=bash supervisorctl`: the shell's dynamic completion
    // (session and approval ids); exits when it answered.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let json = errors::json_requested(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(errors::usage(e, json)),
    };
    // One thread: a CLI waits on one socket at a time, and a reply handed
    // between runtime threads costs a wake-up per hop.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = anyhow::anyhow!("cannot start the async runtime: {e}");
            return ExitCode::from(errors::report(&e, json));
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => ExitCode::from(errors::report(&e, json)),
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let socket = client::socket_path(cli.socket.as_deref());
    let connect = || client::connect(&socket);
    match cli.cmd {
        Cmd::Status { json, prometheus } => {
            let format = match (json, prometheus) {
                (true, _) => sessions::Format::Json,
                (_, true) => sessions::Format::Prometheus,
                _ => sessions::Format::Table,
            };
            sessions::status(connect().await?, format).await.map(|()| 0)
        }
        Cmd::Sessions { json, all } => sessions::list(connect().await?, json, all)
            .await
            .map(|()| 0),
        Cmd::Show { session, json } => sessions::show(connect().await?, session, json)
            .await
            .map(|()| 0),
        Cmd::Revoke {
            session,
            reason,
            json,
        } => sessions::revoke(connect().await?, session, reason, json)
            .await
            .map(|()| 0),
        Cmd::Kill { session, all, json } => sessions::kill(connect().await?, session, all, json)
            .await
            .map(|()| 0),
        Cmd::Approvals { json, all } => approvals::list(connect().await?, json, all)
            .await
            .map(|()| 0),
        Cmd::Approve {
            approval,
            scope,
            confirm,
            json,
        } => {
            let d = approvals::Decide {
                id: approval,
                approve: true,
                scope,
                confirm,
                reason: None,
            };
            approvals::decide(connect().await?, d, json)
                .await
                .map(|()| 0)
        }
        Cmd::Deny {
            approval,
            reason,
            json,
        } => approvals::decide(
            connect().await?,
            approvals::Decide::deny(approval, reason),
            json,
        )
        .await
        .map(|()| 0),
        Cmd::Watch { session, json } => approvals::watch(connect().await?, session, json)
            .await
            .map(|()| 0),
        Cmd::Net(cmd) => net::run(connect().await?, cmd).await.map(|()| 0),
        Cmd::Cache(cmd) => cache::run(connect().await?, cmd).await.map(|()| 0),
        Cmd::Secrets(SecretsCmd::List { json }) => {
            secrets::list(connect().await?, json).await.map(|()| 0)
        }
        Cmd::Sandbox(SandboxCmd::Exec {
            workspace,
            user,
            backend,
            timeout,
            json,
            cmd,
        }) => {
            sandbox::exec(
                connect().await?,
                sandbox::ExecArgs {
                    workspace,
                    user,
                    backend,
                    timeout,
                    argv: cmd,
                    json,
                },
            )
            .await
        }
        Cmd::Audit(a) => audit_cmd(a, connect).await,
        Cmd::Policy(p) => policy_cmd(p),
        Cmd::Reload { json } => reload::run(connect().await?, json).await,
        Cmd::Doctor { json } => doctor::run(&socket, json).await,
        Cmd::Bench { args } => Err(bench::exec(&args)),
    }
}

/// `policy import|test`: offline, no supervisor needed.
fn policy_cmd(cmd: PolicyCmd) -> anyhow::Result<u8> {
    match cmd {
        PolicyCmd::Import { client, file } => import::run(client, &file),
        PolicyCmd::Test {
            config,
            workspace,
            mode,
            resolve,
            file,
            json: _,
        } => policy::test(policy::TestArgs {
            config,
            workspace,
            mode,
            resolve,
            file,
        }),
    }
}

/// `audit verify|tail|report`.
async fn audit_cmd<F, Fut>(cmd: AuditCmd, connect: F) -> anyhow::Result<u8>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<client::Client>>,
{
    match cmd {
        AuditCmd::Verify { files, head, json } => Ok(audit::verify(&files, head.as_deref(), json)),
        AuditCmd::Tail {
            session,
            dir,
            no_follow,
            json,
        } => {
            let dir = match dir {
                Some(d) => d,
                None => audit::dir_from_supervisor(connect().await?).await?,
            };
            audit::tail(&dir, &session, !no_follow, json)
                .await
                .map(|()| 0)
        }
        AuditCmd::Archive {
            before,
            to,
            dir,
            json,
        } => {
            let dir = match dir {
                Some(d) => d,
                None => audit::dir_from_supervisor(connect().await?).await?,
            };
            audit::archive(&dir, &before, &to, json)
        }
        AuditCmd::Report { paths, json } => {
            let paths = if paths.is_empty() {
                vec![audit::dir_from_supervisor(connect().await?).await?]
            } else {
                paths
            };
            audit::report(&paths, json).map(|()| 0)
        }
    }
}

#[cfg(test)]
mod docs_tests {
    use clap::CommandFactory as _;

    /// supervisorctl(8), a page per subcommand, and its completions come
    /// from the clap definition.
    #[test]
    fn man_pages_and_completions_carry_every_flag() {
        assert_eq!(tollgate_clidocs::check(super::Cli::command(), "8"), Ok(()));
    }
}
