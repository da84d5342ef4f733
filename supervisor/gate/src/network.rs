//! A sandbox's network connection as a channel of the gate
//! (docs/ARCHITECTURE.md "Network"): a connection to a host `[network]`
//! does not list, with `unlisted = "ask"`, is asked exactly as a tool call
//! is (the approvals table, `supervisorctl approvals`, the agent's own
//! stream when the session may approve), showing host, port and the command
//! that opened it. An approval for the session is kept as a grant of
//! `network` on `host:port`. What a session's operator changed of its lists
//! ([`NetState`]) and which commands are running now (for attribution) are
//! held here, per session.

use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tollgate_policy::network::{NetOverlay, ask_allowed_in};
use tollgate_policy::{Code, Decision, Verdict};

use crate::approvals::Scope;
use crate::ask::{Ask, ask};
use crate::denial::{Denial, denial};
use crate::host::Ctx;

/// The tool name network approvals and grants carry.
pub const NETWORK_TOOL: &str = "network";

/// One connection waiting for a person.
#[derive(Debug, Clone, Copy)]
pub struct NetAsk<'a> {
    /// `host:port`, `[v6]` bracketed: the approval's target and the key of
    /// a session-scope grant.
    pub target: &'a str,
    pub host: &'a str,
    pub port: u16,
    /// `http-connect`, `http`, `socks5`, `transparent`.
    pub via: &'a str,
    /// Why it is asked (the policy's sentence) and the rule.
    pub reason: &'a str,
    pub rule: &'a str,
    /// The tool call and command it is attributed to (empty when none is).
    pub call_id: &'a str,
    pub command: &'a str,
    pub wait: Duration,
}

/// Asks a person whether the connection may proceed. `Ok` carries the
/// scope it was approved for; `Err` the denial (a person's, the deadline's,
/// or the mode's, which never asks: dangerouslySkipPermissions refuses).
pub async fn ask_connection(cx: &Ctx, a: &NetAsk<'_>) -> Result<Scope, Denial> {
    let rule = a.rule.to_string();
    if let Err(why) = ask_allowed_in(cx.session.mode) {
        let reason = format!("{}; {why}", a.reason);
        return Err(denial(Code::PolicyDenied, reason, &rule, None));
    }
    let opened_by = if a.command.is_empty() {
        String::new()
    } else {
        format!(", opened by `{}`", one_line(a.command, 200))
    };
    let d = Decision {
        consequence: format!("connect to {}{opened_by}", a.target),
        target: a.target.to_string(),
        ..Decision::deny(Code::PolicyDenied, a.reason, Some(&rule))
    };
    let d = Decision {
        verdict: Verdict::Ask,
        ..d
    };
    let args = json!({
        "host": a.host,
        "port": a.port,
        "via": a.via,
        "command": a.command,
    });
    let call_id = if a.call_id.is_empty() {
        a.target
    } else {
        a.call_id
    };
    let q = Ask {
        call_id,
        tool: NETWORK_TOOL,
        args: &args,
        call: None,
        d: &d,
        timeout: a.wait,
        channel: Some(NETWORK_TOOL),
    };
    let by = ask(cx, &q, &cx.session.cancel).await?;
    Ok(if by == "approved(session-scope)" {
        Scope::Session
    } else {
        Scope::Once
    })
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// A session's network state the gate keeps: the operator's entries and
/// the commands running now.
#[derive(Debug, Default)]
pub struct NetState {
    /// `supervisorctl net allow|deny` entries for this session.
    pub overlay: Mutex<NetOverlay>,
    running: Mutex<Vec<(u64, String, String)>>,
    next: std::sync::atomic::AtomicU64,
}

/// What a connection is attributed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub call_id: String,
    pub command: String,
}

impl NetState {
    /// Marks a command running (`call_id`, its text) until the guard drops.
    pub fn running(&self, call_id: &str, command: &str) -> Running<'_> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.running
            .lock()
            .push((n, call_id.to_string(), command.to_string()));
        Running { state: self, n }
    }

    /// The command a connection opened now came from: the one running, or,
    /// when several run at once, each of them (their calls joined by
    /// `|`, the commands by newlines); empty when none runs.
    pub fn attribution(&self) -> Attribution {
        let r = self.running.lock();
        Attribution {
            call_id: r
                .iter()
                .map(|(_, c, _)| c.as_str())
                .collect::<Vec<_>>()
                .join("|"),
            command: r
                .iter()
                .map(|(_, _, c)| c.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Held while a command runs; see [`NetState::running`].
pub struct Running<'a> {
    state: &'a NetState,
    n: u64,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.state.running.lock().retain(|(n, _, _)| *n != self.n);
    }
}
