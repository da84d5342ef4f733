//! Dynamic completion of session and approval ids (clap_complete's
//! `CompleteEnv`; docs/OPERATIONS.md "Shell completion"): the shell runs
//! `COMPLETE=bash supervisorctl -- supervisorctl revoke s` and gets the ids
//! the running supervisor knows. The socket is `$TOLLGATE_OPERATOR_SOCKET`
//! or the default (a `--socket` on the line being completed is not parsed
//! yet); a supervisor that does not answer completes nothing.

use std::ffi::OsStr;

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use tollgate_proto::v1 as pb;

/// Which sessions an argument takes.
#[derive(Debug, Clone, Copy)]
pub enum Which {
    /// Live ones (revoke, kill, watch).
    Active,
    /// Ended ones too (show, audit tail).
    All,
}

/// Completes a session id, each with its state, owner and workspace.
pub fn sessions(which: Which) -> ArgValueCompleter {
    ArgValueCompleter::new(move |current: &OsStr| {
        let req = pb::ListSessionsRequest {
            include_ended: matches!(which, Which::All),
        };
        let list = ask(|mut c| async move {
            c.list_sessions(req)
                .await
                .ok()
                .map(|r| r.into_inner().sessions)
        })
        .unwrap_or_default();
        let items = list.into_iter().map(|s| {
            let help = format!("{} uid {} {}", s.session_state().text(), s.uid, s.workspace);
            (s.id, help)
        });
        candidates(items, current)
    })
}

/// Completes a pending approval's id, with what it would do.
pub fn approvals() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        let list = ask(|mut c| async move {
            c.list_approvals(pb::ListApprovalsRequest {
                include_decided: false,
            })
            .await
            .ok()
            .map(|r| r.into_inner().approvals)
        })
        .unwrap_or_default();
        let items = list.into_iter().map(|a| {
            let help = format!("{}: {}", a.tool, a.consequence);
            (a.id, help)
        });
        candidates(items, current)
    })
}

/// The `(id, help)` pairs whose id starts with what was typed.
fn candidates(
    items: impl Iterator<Item = (String, String)>,
    current: &OsStr,
) -> Vec<CompletionCandidate> {
    let typed = current.to_string_lossy();
    items
        .filter(|(id, _)| id.starts_with(typed.as_ref()))
        .map(|(id, help)| {
            let help: String = crate::table::escape(&help).chars().take(80).collect();
            CompletionCandidate::new(id).help(Some(help.into()))
        })
        .collect()
}

/// Runs one query against the supervisor on a runtime of its own (a
/// completer is called before `main` starts one).
fn ask<T, F, Fut>(query: F) -> Option<T>
where
    F: FnOnce(crate::client::Client) -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let socket = crate::client::socket_path(None);
    rt.block_on(async {
        let c = crate::client::connect(&socket).await.ok()?;
        query(c).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_starting_with_what_was_typed_are_offered() {
        let items = vec![
            ("s1abc".to_string(), "active uid 1000 /w".to_string()),
            ("s2def".to_string(), "active uid 0 /x".to_string()),
        ];
        let got = candidates(items.into_iter(), OsStr::new("s1"));
        let ids: Vec<String> = got
            .iter()
            .map(|c| c.get_value().to_string_lossy().into_owned())
            .collect();
        assert_eq!(ids, ["s1abc"]);
        assert_eq!(
            got[0].get_help().map(|h| h.to_string()).as_deref(),
            Some("active uid 1000 /w")
        );
    }
}
