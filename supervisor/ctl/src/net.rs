//! net allow, net deny, net list: one live session's network lists
//! (docs/OPERATIONS.md "Network").

use clap::Subcommand;
use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::{table, wire};

#[derive(Debug, Subcommand)]
pub enum NetCmd {
    /// Let SESSION's sandbox reach HOST[:PORT] (*.DOMAIN: its subdomains;
    /// no port: 443 and 80). The supervisor's [network] deny still wins.
    Allow {
        session: String,
        host: String,
        #[arg(long)]
        json: bool,
    },
    /// Refuse HOST[:PORT] to SESSION's sandbox, even when [network] allows it.
    Deny {
        session: String,
        host: String,
        #[arg(long)]
        json: bool,
    },
    /// What SESSION's sandbox may reach, in the order it is checked (or
    /// a running sandbox exec's, by its id: the supervisor's lists alone).
    List {
        session: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `net` subcommand.
pub async fn run(c: Client, cmd: NetCmd) -> anyhow::Result<()> {
    match cmd {
        NetCmd::Allow {
            session,
            host,
            json,
        } => change(c, session, pb::NetVerdict::Allow, host, json).await,
        NetCmd::Deny {
            session,
            host,
            json,
        } => change(c, session, pb::NetVerdict::Deny, host, json).await,
        NetCmd::List { session, json } => list(c, session, json).await,
    }
}

pub fn list_json(l: &pb::NetListResponse) -> Value {
    json!({
        "session": l.session_id,
        "unlisted": wire::unlisted(l),
        "entries": l.entries.iter().map(|e| json!({
            "entry": e.entry, "verdict": wire::entry_verdict(e), "source": wire::entry_source(e),
        })).collect::<Vec<_>>(),
        "allow_private": l.allow_private,
    })
}

/// `net allow|deny SESSION HOST[:PORT]`: prints the lists as they now are.
pub async fn change(
    mut c: Client,
    session: String,
    verb: pb::NetVerdict,
    entry: String,
    json_out: bool,
) -> anyhow::Result<()> {
    let l = c
        .net_change(wire::net_change(session, verb, entry.clone()))
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", list_json(&l));
        return Ok(());
    }
    let how = if verb == pb::NetVerdict::Allow {
        "allowed"
    } else {
        "denied"
    };
    outln!(
        "{} {how} for session {} (its next connections; recorded)",
        table::escape(&entry),
        l.session_id
    );
    Ok(())
}

/// `net list SESSION [--json]`: the entries in the order they are checked.
pub async fn list(mut c: Client, session: String, json_out: bool) -> anyhow::Result<()> {
    let l = c
        .net_list(pb::NetListRequest {
            session_id: session,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", list_json(&l));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = l
        .entries
        .iter()
        .map(|e| {
            vec![
                wire::entry_verdict(e).to_string(),
                table::escape(&e.entry),
                wire::entry_source(e).to_string(),
            ]
        })
        .collect();
    table::print(&["VERDICT", "ENTRY", "SOURCE"], &rows);
    outln!("unlisted hosts: {}", wire::unlisted(&l));
    if !l.allow_private.is_empty() {
        outln!("allow_private: {}", l.allow_private.join(", "));
    }
    Ok(())
}
