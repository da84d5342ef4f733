//! A minimal AgentService client for end-to-end tests that must run as
//! another uid (uid binding, foreign tokens). Prints `OK <detail>` or
//! `ERR <grpc code> <message>` and exits 0 either way (2 on usage errors).
//!
//! e2e-client SOCKET TOKEN list-tools
//! e2e-client SOCKET TOKEN refresh
//! e2e-client SOCKET - open WORKSPACE [MODE]   (prints OK <session> <token>)
//! e2e-client SOCKET TOKEN decide APPROVAL_ID  (approve through the Approvals stream)
//! e2e-client SOCKET - flood N                 (opens N raw connections, prints
//!                                              `OK held N`, holds them until stdin closes)
//! e2e-client SOCKET TOKEN call TOOL ARGS_JSON (prints OK <the response as JSON>)

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::harness::{agent_client, authed};
use tollgate_proto::v1 as pb;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: e2e-client SOCKET TOKEN COMMAND [ARG]");
        std::process::exit(2);
    }
    let (socket, token, cmd) = (&args[1], &args[2], args[3].as_str());
    let arg = args.get(4).cloned().unwrap_or_default();
    if cmd == "flood" {
        flood(socket, arg.parse().unwrap());
        return;
    }
    let mut c = agent_client(std::path::Path::new(socket)).await;
    let result: Result<String, tonic::Status> = match cmd {
        "list-tools" => c
            .list_tools(authed(pb::ListToolsRequest {}, token))
            .await
            .map(|r| format!("{} tools", r.into_inner().tools.len())),
        "refresh" => c
            .refresh_token(authed(pb::RefreshTokenRequest {}, token))
            .await
            .map(|_| "refreshed".to_string()),
        "open" => c
            .open_session(pb::OpenSessionRequest {
                workspace: arg,
                mode: args.get(5).cloned().unwrap_or_default(),
                permission_mode: args
                    .get(5)
                    .and_then(|m| pb::PermissionMode::from_text(m))
                    .unwrap_or(pb::PermissionMode::Unspecified)
                    as i32,
                client: "e2e-client".to_string(),
                ..Default::default()
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                format!("{} {}", r.session_id, r.token)
            }),
        "call" => c
            .call_tool(authed(
                pb::CallToolRequest {
                    call_id: "e2e-client".to_string(),
                    tool: arg,
                    arguments_json: args.get(5).cloned().unwrap_or_else(|| "{}".to_string()),
                },
                token,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                let denied = r.denied.map(|d| {
                    serde_json::json!({
                        "code": d.code().as_str_name(), "rule": d.rule, "reason": d.reason,
                    })
                });
                serde_json::json!({
                    "ok": r.ok, "output": r.output, "error": r.error,
                    "exit_code": r.exit_code, "denied": denied,
                })
                .to_string()
            }),
        "decide" => {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(pb::ApprovalClientMsg {
                msg: Some(pb::approval_client_msg::Msg::Decide(pb::ApprovalDecision {
                    approval_id: arg,
                    approve: true,
                    scope: "once".to_string(),
                    ..Default::default()
                })),
            })
            .await
            .unwrap();
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            match c.approvals(authed(stream, token)).await {
                Ok(resp) => {
                    let mut s = resp.into_inner();
                    match tokio::time::timeout(std::time::Duration::from_secs(5), s.message()).await
                    {
                        Ok(Ok(Some(pb::ApprovalServerMsg {
                            msg: Some(pb::approval_server_msg::Msg::Error(e)),
                        }))) => Err(tonic::Status::failed_precondition(e)),
                        Ok(Ok(Some(m))) => Ok(format!("{m:?}")),
                        Ok(Ok(None)) => Ok("stream ended".to_string()),
                        Ok(Err(s)) => Err(s),
                        Err(_) => Ok("no answer".to_string()),
                    }
                }
                Err(s) => Err(s),
            }
        }
        other => {
            eprintln!("unknown command {other}");
            std::process::exit(2);
        }
    };
    match result {
        Ok(d) => println!("OK {d}"),
        Err(s) => println!("ERR {:?} {}", s.code(), s.message()),
    }
}

/// Opens `n` connections that never send a byte and holds them (the peer
/// may close them: they stay open here) until stdin reaches end of file.
fn flood(socket: &str, n: usize) {
    use std::io::{Read, Write};
    let held: Vec<std::os::unix::net::UnixStream> = (0..n)
        .map(|i| {
            std::os::unix::net::UnixStream::connect(socket)
                .unwrap_or_else(|e| panic!("connection {i} of {n}: {e}"))
        })
        .collect();
    println!("OK held {}", held.len());
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(held);
}
