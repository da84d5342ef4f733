//! A client's tool call as tollgate proposes it to the pipeline: mapped
//! (`tollgate_policy::clients`), and for the client's own search walked as
//! the client will run it, narrowed when it would read secret files
//! (docs/CLIENTS.md, "What a client's own tool reaches").

use std::sync::Arc;

use serde_json::Value;
use tollgate_policy::clients::{self, ClientSearch, Mapped, SearchPlan, ShellCall};
use tollgate_policy::host::{RealFs, RealWalk};
use tollgate_policy::{Code, Context, Decision, ToolCall};

use super::event::ToolEvent;
use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// What the pipeline decides for one client call.
pub(super) struct Proposal {
    /// What the audit log names it (run_bash, apply_patch, a client tool).
    pub tool: String,
    /// The arguments as recorded: the client's input, narrowed when it was.
    pub raw: String,
    /// What the engine decides, or the refusal to record.
    pub calls: Result<Vec<ToolCall>, Decision>,
    pub shell: Option<ShellCall>,
    /// The input the client runs instead, and the sentence for the model.
    pub narrowed: Option<(Value, String)>,
}

pub(super) enum Proposed {
    /// The client's own bookkeeping: recorded and allowed.
    Harmless,
    Call(Box<Proposal>),
}

/// Maps the call and, for a search, plans it.
pub(super) async fn propose(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    tool: &ToolEvent,
    mapped: Mapped,
) -> Proposed {
    let raw = tool.input.to_string();
    let (audit_tool, calls, shell, search) = match mapped {
        Mapped::Harmless => return Proposed::Harmless,
        Mapped::Refused { rule, reason } => {
            return Proposed::Call(Box::new(Proposal {
                tool: tool.name.clone(),
                raw,
                calls: Err(Decision::deny(Code::PolicyDenied, reason, Some(rule))),
                shell: None,
                narrowed: None,
            }));
        }
        Mapped::Gated {
            tool,
            calls,
            shell,
            search,
        } => (tool, calls, shell, search),
    };
    let mut p = Proposal {
        tool: audit_tool.to_string(),
        raw,
        calls: Ok(calls.into_iter().map(ToolCall::from).collect()),
        shell,
        narrowed: None,
    };
    if let Some(search) = search {
        match plan(sup, session, search).await {
            SearchPlan::AsAsked => {}
            SearchPlan::Narrowed {
                input,
                call,
                left_out,
            } => {
                p.raw = input.to_string();
                p.calls = Ok(vec![ToolCall::from(call)]);
                p.narrowed = Some((input, clients::left_out_note(&left_out)));
            }
            SearchPlan::Refused { rule, reason } => {
                p.calls = Err(Decision::deny(Code::PolicyDenied, reason, Some(rule)));
            }
        }
    }
    Proposed::Call(Box::new(p))
}

/// Walks the search off the async threads (a big workspace takes a while).
async fn plan(sup: &Arc<Supervisor>, session: &Arc<Session>, search: ClientSearch) -> SearchPlan {
    let ctx = Context {
        workspace: session.workspace.clone(),
        mode: session.mode,
        tools: session.tools.clone(),
        home: session.home.clone(),
        protected: sup.protected_paths(),
        read_files: session.read_files(),
        repo: session.repo.clone(),
        sandbox: tollgate_gate::Host::sandbox_view(sup.as_ref(), session),
    };
    tokio::task::spawn_blocking(move || clients::plan_search(&search, &ctx, &RealFs, &RealWalk))
        .await
        .unwrap_or_else(|e| SearchPlan::Refused {
            rule: clients::search::RULE_SEARCH,
            reason: format!(
                "the walk of this search failed inside the supervisor ({e}); the search is refused."
            ),
        })
}
