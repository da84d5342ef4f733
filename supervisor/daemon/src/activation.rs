//! Sockets handed over by the service manager (systemd socket activation),
//! and readiness.
//!
//! When `LISTEN_FDS`/`LISTEN_PID` say the service manager passed sockets to
//! *this* process, agent.sock and operator.sock are taken from them (by
//! `LISTEN_FDNAMES` = `agent`/`operator`, else by the file name they are bound
//! to) and the supervisor creates none of its own. A socket that is not a
//! listening unix stream socket, a count other than two, a missing fd, or an
//! operator socket every user may open stops the start with a sentence that
//! says which. With `--socket-activation` the sockets are required.
//!
//! The pid check is strict (the `sd-notify` crate's): sockets meant for
//! another process (a parent that exec'd us without updating `LISTEN_PID`) are
//! never used.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// One socket taken from the service manager.
#[derive(Debug)]
pub struct PassedSocket {
    pub listener: UnixListener,
    /// The path it is bound to.
    pub path: PathBuf,
}

/// agent.sock and operator.sock, as the service manager passed them.
#[derive(Debug)]
pub struct Passed {
    pub agent: PassedSocket,
    pub operator: PassedSocket,
}

/// The two roles a passed socket can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Agent,
    Operator,
}

impl Role {
    fn of(name: &str, path: &Path) -> Option<Role> {
        match name {
            "agent" => return Some(Role::Agent),
            "operator" => return Some(Role::Operator),
            _ => {}
        }
        match path.file_name().and_then(|n| n.to_str()) {
            Some("agent.sock") => Some(Role::Agent),
            Some("operator.sock") => Some(Role::Operator),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Operator => "operator",
        }
    }
}

/// Takes the sockets the service manager passed to this process, if any.
/// `required`: no sockets is an error, not a cue to create our own.
pub fn take_passed(required: bool) -> anyhow::Result<Option<Passed>> {
    let Some(count) = passed_count(required)? else {
        return Ok(None);
    };
    if count != 2 {
        bail!(
            "the service manager passed {count} socket(s) (LISTEN_FDS={count}); tollgate expects 2, agent.sock and operator.sock: list both in the .socket units (tollgate.socket, tollgate-operator.socket)"
        );
    }
    let named: Vec<(i32, String)> = sd_notify::listen_fds_with_names()
        .context(
            "the sockets the service manager passed (LISTEN_FDS) cannot be used: an fd is not open",
        )?
        .collect();
    let mut fds = listenfd::ListenFd::from_env();
    let mut agent = None;
    let mut operator = None;
    for (idx, (fd, name)) in named.into_iter().enumerate() {
        let socket = take_one(&mut fds, idx, fd, &name)?;
        let role = Role::of(&name, &socket.path).with_context(|| {
            format!(
                "the socket passed as fd {fd} (name {name:?}, bound to {}) is neither agent.sock nor operator.sock; set FileDescriptorName=agent or operator in its .socket unit",
                socket.path.display()
            )
        })?;
        let slot = match role {
            Role::Agent => &mut agent,
            Role::Operator => &mut operator,
        };
        if slot.is_some() {
            bail!(
                "the service manager passed two {} sockets (the second is fd {fd}, {}); pass one agent.sock and one operator.sock",
                role.as_str(),
                socket.path.display()
            );
        }
        *slot = Some(socket);
    }
    let (Some(agent), Some(operator)) = (agent, operator) else {
        bail!("the service manager did not pass both agent.sock and operator.sock");
    };
    check_operator_mode(&operator.path)?;
    Ok(Some(Passed { agent, operator }))
}

/// How many sockets were passed to this process: `None` when none were (or
/// they were meant for another process and not `required`).
fn passed_count(required: bool) -> anyhow::Result<Option<u32>> {
    let hint = "start it through the socket units (systemctl start tollgate.socket), or drop --socket-activation to let the supervisor create its own sockets";
    let fds = std::env::var("LISTEN_FDS").unwrap_or_default();
    if fds.is_empty() {
        if required {
            bail!("--socket-activation: no sockets were passed (LISTEN_FDS is not set); {hint}");
        }
        return Ok(None);
    }
    let pid = std::env::var("LISTEN_PID").unwrap_or_default();
    if pid.parse::<u32>().ok() != Some(std::process::id()) {
        if required {
            bail!(
                "--socket-activation: the passed sockets are meant for process {pid:?} (LISTEN_PID), not this one ({}); {hint}",
                std::process::id()
            );
        }
        tracing::warn!(
            listen_pid = %pid,
            "LISTEN_FDS is set for another process; creating our own sockets"
        );
        return Ok(None);
    }
    let count = fds
        .parse::<u32>()
        .with_context(|| format!("LISTEN_FDS={fds:?} is not a number of sockets"))?;
    if count == 0 && required {
        bail!("--socket-activation: the service manager passed no sockets (LISTEN_FDS=0); {hint}");
    }
    Ok((count > 0).then_some(count))
}

/// Takes fd `3 + idx` as a listening unix stream socket bound to a path.
fn take_one(
    fds: &mut listenfd::ListenFd,
    idx: usize,
    fd: i32,
    name: &str,
) -> anyhow::Result<PassedSocket> {
    let listener = match fds.take_unix_listener(idx) {
        Ok(Some(l)) => l,
        Ok(None) => bail!("the socket passed as fd {fd} ({name:?}) is gone"),
        Err(e) => bail!(
            "the socket passed as fd {fd} ({name:?}) is not a unix stream socket ({e}); use ListenStream=/run/tollgate/….sock in the .socket unit"
        ),
    };
    let listening = nix::sys::socket::getsockopt(&listener, nix::sys::socket::sockopt::AcceptConn)
        .with_context(|| format!("the socket passed as fd {fd} ({name:?})"))?;
    if !listening {
        bail!(
            "the socket passed as fd {fd} ({name:?}) is not listening; use ListenStream= (not Accept=yes) in the .socket unit"
        );
    }
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .with_context(|| {
            format!(
                "the socket passed as fd {fd} ({name:?}) is not bound to a path; tollgate's sockets are files (ListenStream=/run/tollgate/….sock)"
            )
        })?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("the socket passed as fd {fd} ({})", path.display()))?;
    Ok(PassedSocket { listener, path })
}

/// operator.sock must not be open to every user: the service manager set its
/// mode, and a unit that forgot SocketMode= would hand OperatorService to all
/// (the per-call operator check would still refuse them; fail closed anyway).
fn check_operator_mode(path: &Path) -> anyhow::Result<()> {
    let mode = std::fs::metadata(path)
        .with_context(|| format!("operator socket {}", path.display()))?
        .permissions()
        .mode();
    // Connecting needs write permission on the socket file.
    if mode & 0o002 != 0 {
        bail!(
            "operator socket {} passed by the service manager is open to every user (mode {:o}); set SocketMode=0660 and SocketGroup=tollgate (or 0600) in tollgate-operator.socket",
            path.display(),
            mode & 0o777
        );
    }
    Ok(())
}

/// Tells the service manager the sockets listen (`READY=1`); nothing when
/// the supervisor was not started by one (`NOTIFY_SOCKET` unset).
pub fn notify_ready(agent: &Path, operator: &Path) {
    let status = format!(
        "serving agent={} operator={}",
        agent.display(),
        operator.display()
    );
    if let Err(e) = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]) {
        tracing::warn!(error = %e, "cannot tell the service manager we are ready");
    }
}

/// Tells the service manager the supervisor is stopping (`STOPPING=1`).
pub fn notify_stopping() {
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Stopping]) {
        tracing::warn!(error = %e, "cannot tell the service manager we are stopping");
    }
}

/// Tells the service manager a reload began (`RELOADING=1` with
/// `MONOTONIC_USEC=`, which systemd 253 and later require).
pub fn notify_reloading() {
    let mut states = vec![sd_notify::NotifyState::Reloading];
    if let Ok(now) = sd_notify::NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    if let Err(e) = sd_notify::notify(&states) {
        tracing::warn!(error = %e, "cannot tell the service manager we are reloading");
    }
}

/// Tells the service manager the reload is over (`READY=1`), with a
/// `STATUS=` saying whether the new config was refused.
pub fn notify_reloaded(refused: Option<&str>) {
    let status = match refused {
        None => "serving; config reloaded".to_string(),
        Some(e) => format!("serving the old config; reload refused: {e}"),
    };
    if let Err(e) = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]) {
        tracing::warn!(error = %e, "cannot tell the service manager the reload is over");
    }
}

/// With `WatchdogSec=` set (`WATCHDOG_USEC` for this pid), sends
/// `WATCHDOG=1` at half the interval from the runtime until shutdown: a
/// supervisor whose runtime hangs is restarted by systemd.
pub fn spawn_watchdog(shutdown: &tokio_util::sync::CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 2);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                }
                _ = shutdown.cancelled() => return,
            }
        }
    });
}
