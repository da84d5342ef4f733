//! Routing JSON-RPC messages between the MCP client and the wrapped server,
//! and what each direction may carry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tollgate_proto::v1 as pb;

use super::Downstream;
use super::lines::{MAX_SERVER_LINE, Piece};
use super::requests::{self, REFUSED};
use super::result::{filter_tools_list, tools_call_answer};
use crate::pep;
use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// How long calls in flight get to be answered and recorded at the end.
const FINISH_GRACE: Duration = Duration::from_secs(10);

/// A JSON-RPC id as a key (its JSON text: `1` and `"1"` differ).
type IdKey = String;

fn key(id: &Value) -> IdKey {
    id.to_string()
}

/// What the router remembers of requests in flight.
#[derive(Default)]
struct Table {
    /// tools/call forwarded to the server, awaiting its answer.
    calls: HashMap<IdKey, oneshot::Sender<Value>>,
    /// Every tools/call being decided or run, to cancel.
    tokens: HashMap<IdKey, CancellationToken>,
    /// tools/list requests forwarded.
    listing: HashSet<IdKey>,
    /// Other requests of the client forwarded.
    client: HashSet<IdKey>,
    /// Requests of the server forwarded to the client.
    server: HashSet<IdKey>,
}

pub struct Router {
    sup: Arc<Supervisor>,
    session: Arc<Session>,
    name: String,
    stdin: mpsc::Sender<Bytes>,
    down: Downstream,
    table: Arc<Mutex<Table>>,
    tasks: tokio::sync::Mutex<JoinSet<()>>,
}

impl Router {
    pub fn new(
        sup: Arc<Supervisor>,
        session: Arc<Session>,
        name: String,
        stdin: mpsc::Sender<Bytes>,
        down: Downstream,
    ) -> Router {
        Router {
            sup,
            session,
            name,
            stdin,
            down,
            table: Arc::default(),
            tasks: tokio::sync::Mutex::new(JoinSet::new()),
        }
    }

    /// A line for the person at the agent's stderr; dropped when the agent
    /// is not keeping up (a server flooding its stderr cannot stall us).
    pub async fn note(&self, text: &str) {
        let mut t = text.to_string();
        if t.len() > 2048 {
            let mut end = 2048;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t.truncate(end);
            t.push('…');
        }
        let msg = pb::McpGatewayServerMsg {
            msg: Some(pb::mcp_gateway_server_msg::Msg::Note(
                self.sup.redactor.redact(&t),
            )),
        };
        let _ = self.down.try_send(Ok(msg));
    }

    async fn to_client(&self, v: &Value) {
        send_message(&self.down, v).await;
    }

    async fn to_server(&self, line: &str) -> bool {
        let mut b = Vec::with_capacity(line.len() + 1);
        b.extend_from_slice(line.as_bytes());
        b.push(b'\n');
        self.stdin.send(Bytes::from(b)).await.is_ok()
    }

    /// One message from the MCP client.
    pub async fn on_client_message(&self, line: &str) {
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                self.to_client(&error(
                    Value::Null,
                    -32700,
                    &format!("parse error: the message is not JSON ({e})"),
                ))
                .await;
                return;
            }
        };
        if !v.is_object() {
            let msg = "invalid request: not a JSON-RPC message object (batches are not supported)";
            self.to_client(&error(Value::Null, -32600, msg)).await;
            return;
        }
        let id = v.get("id").filter(|i| !i.is_null()).cloned();
        let method = v.get("method").and_then(Value::as_str).map(str::to_string);
        match (method.as_deref(), id) {
            (Some("tools/call"), Some(id)) => self.call(id, v, line).await,
            (Some("tools/call"), None) => {
                self.note("dropped a tools/call without an id from the client")
                    .await
            }
            (Some("tools/list"), Some(id)) => {
                self.table.lock().listing.insert(key(&id));
                self.forward_or_fail(Some(id), line).await;
            }
            (Some("notifications/cancelled"), None) => {
                if let Some(rid) = v.pointer("/params/requestId")
                    && let Some(t) = self.table.lock().tokens.get(&key(rid))
                {
                    t.cancel();
                }
                self.forward_or_fail(None, line).await;
            }
            (Some(m), id) => {
                if tollgate_policy::is_decided_method(m, false)
                    && let Err(why) = self.decide(m, id.as_ref(), requests::Asker::Client)
                {
                    self.note(&why).await;
                    if let Some(id) = id {
                        self.to_client(&error(id, REFUSED, &why)).await;
                    }
                    return;
                }
                if let Some(id) = &id {
                    self.table.lock().client.insert(key(id));
                }
                self.forward_or_fail(id, line).await;
            }
            (None, Some(id)) => {
                let known = self.table.lock().server.remove(&key(&id));
                if known {
                    self.forward_or_fail(None, line).await;
                } else {
                    self.note(&format!("dropped an answer from the client to a request the server never sent (id {id})")).await;
                }
            }
            (None, None) => {
                self.to_client(&error(
                    Value::Null,
                    -32600,
                    "invalid request: no method and no id",
                ))
                .await;
            }
        }
    }

    /// Decides and records a protocol request ([`requests::decide`]).
    fn decide(
        &self,
        method: &str,
        id: Option<&Value>,
        from: requests::Asker,
    ) -> Result<(), String> {
        let id = id.cloned().unwrap_or(Value::Null);
        requests::decide(&self.sup, &self.session, &self.name, (method, &id), from)
    }

    async fn forward_or_fail(&self, id: Option<Value>, line: &str) {
        if !self.to_server(line).await
            && let Some(id) = id
        {
            self.to_client(&error(
                id,
                -32603,
                &format!("the MCP server `{}` is gone", self.name),
            ))
            .await;
        }
    }

    /// A `tools/call`: decided, maybe approved, forwarded and recorded by
    /// the PEP in a task of its own (an approval may take minutes).
    async fn call(&self, id: Value, v: Value, line: &str) {
        let k = key(&id);
        let Some(tool) = v
            .pointer("/params/name")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            self.to_client(&error(
                id,
                -32602,
                "invalid params: tools/call needs params.name, the tool's name",
            ))
            .await;
            return;
        };
        let args = v
            .pointer("/params/arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let (tx, rx) = oneshot::channel::<Value>();
        let token = self.session.cancel.child_token();
        let in_use = {
            let mut t = self.table.lock();
            let in_use = t.tokens.contains_key(&k);
            if !in_use {
                t.calls.insert(k.clone(), tx);
                t.tokens.insert(k.clone(), token.clone());
            }
            in_use
        };
        if in_use {
            self.to_client(&error(
                id,
                -32600,
                "invalid request: this id is already in use by a call in flight",
            ))
            .await;
            return;
        }
        let (sup, session, server) = (
            Arc::clone(&self.sup),
            Arc::clone(&self.session),
            self.name.clone(),
        );
        let (stdin, down, table) = (
            self.stdin.clone(),
            self.down.clone(),
            Arc::clone(&self.table),
        );
        let mut wire = line.as_bytes().to_vec();
        wire.push(b'\n');
        self.tasks.lock().await.spawn(async move {
            let call_id: String = format!("mcp-gw-{server}-{k}").chars().take(128).collect();
            let cap = sup.config.session.output_cap_bytes;
            let name = server.clone();
            let sup2 = Arc::clone(&sup);
            let forward = || async move {
                stdin.send(Bytes::from(wire)).await.map_err(|_| {
                    format!("the MCP server `{server}` is gone; the call was not sent")
                })?;
                let answer = rx
                    .await
                    .map_err(|_| format!("the MCP server `{server}` ended before it answered"))?;
                Ok(tools_call_answer(answer, &sup2.redactor, cap))
            };
            let r = match session.begin() {
                Some(_work) => {
                    let call = pep::McpCall {
                        server: &name,
                        tool: &tool,
                        call_id: &call_id,
                        args: &args,
                    };
                    let cx = pep::ctx(&sup, &session);
                    pep::mcp_tool_call(&cx, call, &token, forward).await
                }
                None => Err(pep::revoked(&session)),
            };
            {
                let mut t = table.lock();
                t.calls.remove(&k);
                t.tokens.remove(&k);
            }
            let v = match r {
                Ok(a) => a.response,
                Err(d) => json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": d.reason}], "isError": true}}),
            };
            send_message(&down, &v).await;
        });
    }

    /// One line from the server's stdout.
    pub async fn on_server_line(&self, piece: Piece) {
        let line = match piece {
            Piece::TooLong(n) => {
                self.note(&format!(
                    "dropped a line of {n} bytes from the server (the limit is {MAX_SERVER_LINE})"
                ))
                .await;
                return;
            }
            Piece::Line(l) => l,
        };
        let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
            self.note(&format!(
                "dropped a line from the server that is not JSON: {line}"
            ))
            .await;
            return;
        };
        if !v.is_object() {
            self.note("dropped a message from the server that is not a JSON-RPC object")
                .await;
            return;
        }
        let id = v.get("id").filter(|i| !i.is_null()).cloned();
        if let Some(method) = v.get("method") {
            // A request (with an id) of the server to the client.
            let m = method.as_str().unwrap_or_default();
            if let Some(id) = &id
                && tollgate_policy::is_decided_method(m, true)
                && let Err(why) = self.decide(m, Some(id), requests::Asker::Server)
            {
                self.note(&why).await;
                let refusal = error(id.clone(), REFUSED, &why).to_string();
                let _ = self.to_server(&refusal).await;
                return;
            }
            if let Some(id) = &id {
                self.table.lock().server.insert(key(id));
            }
            self.sup.redactor.redact_json(&mut v);
            self.to_client(&v).await;
            return;
        }
        let Some(id) = id else {
            self.note("dropped a message from the server with neither method nor id")
                .await;
            return;
        };
        let k = key(&id);
        enum Waiting {
            Call(oneshot::Sender<Value>),
            List,
            Other,
            Nobody,
        }
        let waiting = {
            let mut t = self.table.lock();
            if let Some(tx) = t.calls.remove(&k) {
                Waiting::Call(tx)
            } else if t.listing.remove(&k) {
                Waiting::List
            } else if t.client.remove(&k) {
                Waiting::Other
            } else {
                Waiting::Nobody
            }
        };
        match waiting {
            Waiting::Call(tx) => {
                let _ = tx.send(v);
            }
            Waiting::List => {
                let removed = filter_tools_list(
                    &mut v,
                    &self.sup.engine.load(),
                    &self.name,
                    self.session.mode,
                );
                if !removed.is_empty() {
                    self.note(&format!(
                        "tools/list: removed {} (denied by policy)",
                        removed.join(", ")
                    ))
                    .await;
                }
                self.sup.redactor.redact_json(&mut v);
                self.to_client(&v).await;
            }
            Waiting::Other => {
                self.sup.redactor.redact_json(&mut v);
                self.to_client(&v).await;
            }
            Waiting::Nobody => {
                self.note(&format!(
                    "dropped an answer from the server to a request it was never sent (id {id})"
                ))
                .await;
            }
        }
    }

    /// At the end: calls in flight are cancelled (approvals withdrawn) or
    /// told the server is gone, and get their answer and records.
    pub async fn finish(&self) {
        {
            // Dropping the answer slots first: a call waiting for the server
            // learns it is gone rather than that it was cancelled.
            let mut t = self.table.lock();
            t.calls.clear();
            for tok in t.tokens.values() {
                tok.cancel();
            }
        }
        let mut tasks = self.tasks.lock().await;
        let drained = tokio::time::timeout(FINISH_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tasks.abort_all();
        }
    }
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

async fn send_message(down: &Downstream, v: &Value) {
    let msg = pb::McpGatewayServerMsg {
        msg: Some(pb::mcp_gateway_server_msg::Msg::Message(v.to_string())),
    };
    let _ = down.send(Ok(msg)).await;
}
