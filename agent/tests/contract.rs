//! The real `agent` binary against an in-process AgentService that follows the
//! gRPC contract (proto/tollgate.proto and the agent's brief): what the model is
//! sent, how approvals are answered at the terminal, Ctrl-C, revocation, caps,
//! trimming and token rotation. The supervisor's own behaviour is tested end to end
//! in tests/tests/agent_*.rs; here the server side is scripted so each agent rule
//! can be pinned exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tollgate_proto::agent_service_server::{AgentService, AgentServiceServer};
use tollgate_proto::*;
use tonic::{Request, Response, Status, Streaming};

// ---------------------------------------------------------------------------
// The scripted server
// ---------------------------------------------------------------------------

/// What CallTool does for a tool.
#[derive(Clone)]
enum Behaviour {
    Respond(CallToolResponse),
    /// Raise an approval; answer `ok_output` when approved, USER_DENIED otherwise.
    Approval {
        approval: Approval,
        ok_output: String,
    },
    /// Raise an approval, then resolve it as an operator after `after`.
    OperatorApproves {
        approval: Approval,
        after: Duration,
    },
    /// Never answer (until the client cancels).
    Block,
    /// Send SessionEnded on the control stream, then never answer.
    Revoke(String),
    /// Answer only after the token was rotated.
    WaitForRefresh,
}

#[derive(Default)]
struct St {
    chat_replies: VecDeque<Result<ChatResponse, Status>>,
    chats: Vec<ChatRequest>,
    chat_times: Vec<std::time::Instant>,
    chat_tokens: Vec<String>,
    calls: Vec<CallToolRequest>,
    behaviours: HashMap<String, Behaviour>,
    reports: Vec<(String, Value)>,
    decisions: Vec<ApprovalDecision>,
    pending: HashMap<String, oneshot::Sender<ApprovalDecision>>,
    cancelled: u32,
    closed: bool,
    opened: Vec<OpenSessionRequest>,
    refreshed: bool,
    token_ttl_ms: i64,
    can_approve: bool,
    tools: Vec<ToolSpec>,
}

#[derive(Clone)]
struct Fake {
    st: Arc<Mutex<St>>,
    control: broadcast::Sender<ApprovalServerMsg>,
    refreshed: Arc<tokio::sync::Notify>,
}

struct CancelGuard {
    st: Arc<Mutex<St>>,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.st.lock().unwrap().cancelled += 1;
        }
    }
}

/// Like the supervisor: a CallTool dropped while its approval is pending
/// withdraws the approval, and late decisions on it are refused.
struct WithdrawGuard {
    st: Arc<Mutex<St>>,
    control: broadcast::Sender<ApprovalServerMsg>,
    id: String,
    armed: bool,
}

impl Drop for WithdrawGuard {
    fn drop(&mut self) {
        if self.armed {
            self.st.lock().unwrap().pending.remove(&self.id);
            let _ = self
                .control
                .send(msg(approval_server_msg::Msg::Resolved(ApprovalResolved {
                    approval_id: self.id.clone(),
                    approval_outcome: ApprovalStatus::Withdrawn as i32,
                    decided_by: "agent disconnected".into(),
                    ..Default::default()
                })));
        }
    }
}

fn token_of<T>(req: &Request<T>) -> String {
    req.metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn spec(name: &str, class: ToolClass) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} tool"),
        tool_class: class as i32,
        parameters_json: r#"{"type":"object"}"#.into(),

        ..Default::default()
    }
}

fn default_tools() -> Vec<ToolSpec> {
    vec![
        spec("read_file", ToolClass::Read),
        spec("write_file", ToolClass::Write),
        spec("run_bash", ToolClass::Action),
        spec("todo_append", ToolClass::Planning),
        spec("todo_list", ToolClass::Planning),
        spec("ask_question", ToolClass::Interaction),
    ]
}

fn msg(m: approval_server_msg::Msg) -> ApprovalServerMsg {
    ApprovalServerMsg { msg: Some(m) }
}

type ApprovalStream =
    Pin<Box<dyn futures_util::Stream<Item = Result<ApprovalServerMsg, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for Fake {
    async fn open_session(
        &self,
        req: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionResponse>, Status> {
        let r = req.into_inner();
        if r.workspace.contains("refuse-me") {
            return Err(Status::permission_denied(
                "mode dangerouslySkipPermissions is not allowed by this supervisor",
            ));
        }
        let mut st = self.st.lock().unwrap();
        st.opened.push(r.clone());
        Ok(Response::new(OpenSessionResponse {
            session_id: "fake123".into(),
            token: "tok-1".into(),
            token_expires_unix_ms: now_ms() + st.token_ttl_ms,
            permission_mode: match r.mode.as_str() {
                "acceptEdits" => PermissionMode::AcceptEdits,
                "plan" => PermissionMode::Plan,
                "dontAsk" => PermissionMode::DontAsk,
                "dangerouslySkipPermissions" => PermissionMode::DangerouslySkipPermissions,
                _ => PermissionMode::Default,
            } as i32,
            tools: st.tools.iter().map(|t| t.name.clone()).collect(),
            session_can_approve: st.can_approve,
            sandbox: "native".into(),
            sandbox_backend: SandboxBackend::Native as i32,
            max_tool_calls: 200,
            max_cost_usd: 5.0,
            ..Default::default()
        }))
    }

    async fn refresh_token(
        &self,
        req: Request<RefreshTokenRequest>,
    ) -> Result<Response<RefreshTokenResponse>, Status> {
        assert_eq!(token_of(&req), "Bearer tok-1");
        self.st.lock().unwrap().refreshed = true;
        self.refreshed.notify_waiters();
        Ok(Response::new(RefreshTokenResponse {
            token: "tok-2".into(),
            token_expires_unix_ms: now_ms() + 3_600_000,
        }))
    }

    async fn list_tools(
        &self,
        _req: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        Ok(Response::new(ListToolsResponse {
            tools: self.st.lock().unwrap().tools.clone(),
        }))
    }

    async fn call_tool(
        &self,
        req: Request<CallToolRequest>,
    ) -> Result<Response<CallToolResponse>, Status> {
        let r = req.into_inner();
        let behaviour = {
            let mut st = self.st.lock().unwrap();
            st.calls.push(r.clone());
            st.behaviours.get(&r.tool).cloned()
        };
        let mut guard = CancelGuard {
            st: self.st.clone(),
            armed: true,
        };
        let resp = match behaviour {
            None => CallToolResponse {
                ok: true,
                output: format!("output of {}", r.tool),
                ..Default::default()
            },
            Some(Behaviour::Respond(resp)) => resp,
            Some(Behaviour::Approval {
                approval,
                ok_output,
            }) => {
                let (tx, rx) = oneshot::channel();
                self.st
                    .lock()
                    .unwrap()
                    .pending
                    .insert(approval.id.clone(), tx);
                let mut withdraw = WithdrawGuard {
                    st: self.st.clone(),
                    control: self.control.clone(),
                    id: approval.id.clone(),
                    armed: true,
                };
                let _ = self
                    .control
                    .send(msg(approval_server_msg::Msg::Requested(approval.clone())));
                let d = rx.await.unwrap();
                withdraw.armed = false;
                let _ =
                    self.control
                        .send(msg(approval_server_msg::Msg::Resolved(ApprovalResolved {
                            approval_id: approval.id.clone(),
                            approval_outcome: if d.approve {
                                ApprovalStatus::Approved
                            } else {
                                ApprovalStatus::Denied
                            } as i32,
                            decided_by: "uid 0 via session".into(),
                            approval_scope: d.approval_scope,
                            reason: d.reason.clone(),
                            ..Default::default()
                        })));
                let confirmed = !approval.destructive || d.confirm == approval.target;
                if d.approve && confirmed {
                    CallToolResponse {
                        ok: true,
                        output: ok_output,
                        allowance: AllowedBy::Approval as i32,
                        ..Default::default()
                    }
                } else {
                    CallToolResponse {
                        denied: Some(Denial {
                            code: DenialCode::UserDenied as i32,
                            reason: format!(
                                "user denied: {}. Do not retry this call; ask the user or change approach.",
                                approval.consequence
                            ),
                            rule: String::new(),
                            consequence: approval.consequence.clone(),
                            destructive: approval.destructive,
                        }),
                        ..Default::default()
                    }
                }
            }
            Some(Behaviour::OperatorApproves { approval, after }) => {
                let _ = self
                    .control
                    .send(msg(approval_server_msg::Msg::Requested(approval.clone())));
                tokio::time::sleep(after).await;
                let _ =
                    self.control
                        .send(msg(approval_server_msg::Msg::Resolved(ApprovalResolved {
                            approval_id: approval.id.clone(),
                            approval_outcome: ApprovalStatus::Approved as i32,
                            decided_by: "uid 0 via operator".into(),
                            approval_scope: ApprovalScope::Once as i32,
                            ..Default::default()
                        })));
                CallToolResponse {
                    ok: true,
                    output: "approved elsewhere".into(),
                    ..Default::default()
                }
            }
            Some(Behaviour::Block) => std::future::pending().await,
            Some(Behaviour::Revoke(reason)) => {
                let _ = self
                    .control
                    .send(msg(approval_server_msg::Msg::Ended(SessionEnded {
                        code: DenialCode::SessionRevoked as i32,
                        reason,
                    })));
                std::future::pending().await
            }
            Some(Behaviour::WaitForRefresh) => {
                loop {
                    let n = self.refreshed.notified();
                    if self.st.lock().unwrap().refreshed {
                        break;
                    }
                    n.await;
                }
                CallToolResponse {
                    ok: true,
                    output: "after refresh".into(),
                    ..Default::default()
                }
            }
        };
        guard.armed = false;
        Ok(Response::new(resp))
    }

    async fn chat(&self, req: Request<ChatRequest>) -> Result<Response<ChatResponse>, Status> {
        let token = token_of(&req);
        let mut st = self.st.lock().unwrap();
        st.chat_times.push(std::time::Instant::now());
        st.chat_tokens.push(token);
        st.chats.push(req.into_inner());
        match st.chat_replies.pop_front() {
            Some(Ok(r)) => Ok(Response::new(r)),
            Some(Err(s)) => Err(s),
            None => Ok(Response::new(text_reply("fake: no more replies"))),
        }
    }

    type ApprovalsStream = ApprovalStream;

    type McpGatewayStream = Pin<
        Box<
            dyn futures_util::Stream<Item = Result<tollgate_proto::McpGatewayServerMsg, Status>>
                + Send,
        >,
    >;

    async fn mcp_gateway(
        &self,
        _: Request<Streaming<tollgate_proto::McpGatewayClientMsg>>,
    ) -> Result<Response<Self::McpGatewayStream>, Status> {
        Err(Status::unimplemented("the fake serves no MCP gateway"))
    }

    async fn approvals(
        &self,
        req: Request<Streaming<ApprovalClientMsg>>,
    ) -> Result<Response<Self::ApprovalsStream>, Status> {
        let mut inbound = req.into_inner();
        let mut control = self.control.subscribe();
        let (tx, rx) = mpsc::channel(64);
        let st = self.st.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = control.recv() => match m {
                        Ok(m) => {
                            if tx.send(Ok(m)).await.is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    },
                    incoming = inbound.message() => match incoming {
                        Ok(Some(ApprovalClientMsg { msg: Some(approval_client_msg::Msg::Decide(d)) })) => {
                            let pending = {
                                let mut s = st.lock().unwrap();
                                s.decisions.push(d.clone());
                                s.pending.remove(&d.approval_id)
                            };
                            match pending {
                                Some(p) => {
                                    let _ = p.send(d);
                                }
                                None => {
                                    let _ = tx.send(Ok(msg(approval_server_msg::Msg::Error(
                                        format!("approval {} is not pending", d.approval_id),
                                    )))).await;
                                }
                            }
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => return,
                    },
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_event(
        &self,
        req: Request<ReportEventRequest>,
    ) -> Result<Response<ReportEventResponse>, Status> {
        let r = req.into_inner();
        let v: Value = serde_json::from_str(&r.fields_json).unwrap();
        self.st.lock().unwrap().reports.push((r.event, v));
        Ok(Response::new(ReportEventResponse {}))
    }

    async fn close_session(
        &self,
        _req: Request<CloseSessionRequest>,
    ) -> Result<Response<CloseSessionResponse>, Status> {
        self.st.lock().unwrap().closed = true;
        Ok(Response::new(CloseSessionResponse {
            session: Some(SessionInfo {
                id: "fake123".into(),
                tokens_in: 0,
                ..Default::default()
            }),
        }))
    }
}

fn text_reply(content: &str) -> ChatResponse {
    ChatResponse {
        message: Some(ChatMessage {
            role: "assistant".into(),
            chat_role: ChatRole::Assistant as i32,
            content: Some(content.into()),
            tool_calls: vec![],
            tool_call_id: String::new(),
        }),
        usage: Some(Usage {
            reported: true,
            prompt_tokens: 100,
            completion_tokens: 10,
        }),
        cost_usd: 0.001,
        session_cost_usd: 0.0,
        finish_reason: "stop".into(),
        denied: None,
    }
}

fn calls_reply(content: Option<&str>, calls: &[(&str, &str, &str)]) -> ChatResponse {
    ChatResponse {
        message: Some(ChatMessage {
            role: "assistant".into(),
            chat_role: ChatRole::Assistant as i32,
            content: content.map(str::to_string),
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| ChatToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: args.to_string(),
                })
                .collect(),
            tool_call_id: String::new(),
        }),
        usage: Some(Usage {
            reported: true,
            prompt_tokens: 100,
            completion_tokens: 10,
        }),
        cost_usd: 0.001,
        session_cost_usd: 0.0,
        finish_reason: "tool_calls".into(),
        denied: None,
    }
}

fn approval(id: &str, tool: &str, consequence: &str, target: &str, destructive: bool) -> Approval {
    Approval {
        id: id.into(),
        session_id: "fake123".into(),
        tool: tool.into(),
        consequence: consequence.into(),
        diff: if tool == "write_file" {
            "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-old\n+new".into()
        } else {
            String::new()
        },
        destructive,
        target: target.into(),
        created_unix_ms: now_ms(),
        deadline_unix_ms: now_ms() + 300_000,
        rule: "mode: default".into(),
        reason: String::new(),
        arguments_json: String::new(),
        approval_status: ApprovalStatus::Pending as i32,
        ..Default::default()
    }
}

struct Server {
    fake: Fake,
    socket: PathBuf,
    dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    async fn start_with(setup: impl FnOnce(&mut St)) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let mut st = St {
            token_ttl_ms: 15 * 60 * 1000,
            can_approve: true,
            tools: default_tools(),
            ..Default::default()
        };
        setup(&mut st);
        let (control, _) = broadcast::channel(64);
        let fake = Fake {
            st: Arc::new(Mutex::new(st)),
            control,
            refreshed: Arc::new(tokio::sync::Notify::new()),
        };
        let svc = AgentServiceServer::new(fake.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
        });
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Server {
            fake,
            socket,
            dir,
            task,
        }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws").canonicalize().unwrap()
    }

    fn st(&self) -> std::sync::MutexGuard<'_, St> {
        self.fake.st.lock().unwrap()
    }

    fn replies(&self, r: Vec<Result<ChatResponse, Status>>) {
        self.st().chat_replies.extend(r);
    }

    fn behave(&self, tool: &str, b: Behaviour) {
        self.st().behaviours.insert(tool.into(), b);
    }

    fn agent(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent"));
        c.args(args)
            .env("TOLLGATE_SOCKET", &self.socket)
            .current_dir(self.workspace())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs the agent with `stdin` (then EOF); a hang fails the test instead of
    /// blocking it forever.
    async fn run(&self, args: &[&str], stdin: &str) -> Out {
        let mut child = self.agent(args).spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        finish(child).await
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn finish(child: tokio::process::Child) -> Out {
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the agent hung")
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn tool_messages(req: &ChatRequest) -> Vec<(String, String)> {
    req.messages
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| {
            (
                m.tool_call_id.clone(),
                m.content.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn report<'a>(st: &'a St, event: &str) -> Option<&'a Value> {
    st.reports.iter().find(|(e, _)| e == event).map(|(_, v)| v)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test]
async fn one_shot_json_tells_the_model_exactly_what_happened() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(
            Some("looking"),
            &[
                ("c1", "read_file", r#"{"path":"README.md"}"#),
                ("c2", "delete_everything", "{}"),
                ("c3", "read_file", "{path: README.md"),
                ("c4", "todo_append", r#"{"text":"ship it"}"#),
                ("", "read_file", "[1,2]"),
            ],
        )),
        Ok(text_reply("all done")),
    ]);
    s.behave(
        "read_file",
        Behaviour::Respond(CallToolResponse {
            ok: true,
            output: "# readme".into(),
            ..Default::default()
        }),
    );
    let out = s
        .run(&["-p", "read the readme", "--output", "json"], "")
        .await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object on stdout");
    assert_eq!(v["final_text"], "all done");
    assert_eq!(v["stop_reason"], "done");
    assert_eq!(v["session"], "fake123");
    assert_eq!(v["usage"]["prompt_tokens"], 200);
    assert_eq!(v["usage"]["completion_tokens"], 20);
    let calls = v["tool_calls"].as_array().unwrap();
    let outcomes: Vec<&str> = calls
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec!["ok", "unknown_tool", "invalid_args", "ok", "invalid_args"]
    );
    assert_eq!(calls[0]["arguments"], json!({"path": "README.md"}));
    assert_eq!(calls[2]["arguments"], json!("{path: README.md"));

    let st = s.st();
    // Only the valid call of a supervisor tool reached CallTool.
    assert_eq!(st.calls.len(), 1);
    assert_eq!(st.calls[0].call_id, "c1");
    assert_eq!(st.calls[0].arguments_json, r#"{"path":"README.md"}"#);
    // The first request: the system prompt, the task, and every tool offered.
    let first = &st.chats[0];
    assert_eq!(first.messages[0].role, "system");
    assert_eq!(first.messages[0].chat_role(), ChatRole::System);
    assert_eq!(
        first.messages[0].content.as_deref(),
        Some(tollgate_agent::prompt::SYSTEM_PROMPT)
    );
    assert_eq!(
        first.messages[1].content.as_deref(),
        Some("read the readme")
    );
    assert_eq!(first.tools, default_tools());
    // The second request carries one tool message per call, in order.
    let tm = tool_messages(&st.chats[1]);
    assert_eq!(tm.len(), 5);
    assert_eq!(tm[0], ("c1".into(), "# readme".into()));
    assert_eq!(
        tm[1],
        (
            "c2".into(),
            "Error: unknown tool 'delete_everything'. Available tools: read_file, write_file, run_bash, todo_append, todo_list, ask_question".into()
        )
    );
    assert_eq!(tm[2].0, "c3");
    assert!(
        tm[2]
            .1
            .starts_with("Error: invalid arguments: not valid JSON: key must be a string"),
        "{}",
        tm[2].1
    );
    assert_eq!(
        tm[3],
        (
            "c4".into(),
            "Added 1 item. Todo list:\n1. [ ] ship it".into()
        )
    );
    // An empty call id got one the tool message can answer.
    assert_eq!(
        tm[4],
        (
            "call_agent_1".into(),
            "Error: invalid arguments: expected a JSON object, got an array".into()
        )
    );
    let assistant = &st.chats[1].messages[2];
    assert_eq!(assistant.tool_calls[4].id, "call_agent_1");
    assert!(st.closed, "the session was closed");
}

#[tokio::test]
async fn interactive_first_line_summary_and_escaping() {
    let s = Server::start().await;
    s.replies(vec![Ok(text_reply("hello \x1b[2J\x1b]0;pwned\x07 world"))]);
    let out = s.run(&[], "hi\n").await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let first = out.stdout.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "Agent started in 'default' mode (working dir: {}, session fake123)",
            s.workspace().display()
        )
    );
    assert!(
        !out.stdout.contains('\x1b'),
        "raw escape reached the terminal"
    );
    assert!(
        out.stdout
            .contains("hello \\u{1b}[2J\\u{1b}]0;pwned\\u{7} world")
    );
    assert!(
        out.stderr.contains(
            "agent: session fake123 closed: 0 tool calls (0 denied, 0 failed), 1 model call, tokens in 100 / out 10, cost $0.0010"
        ),
        "{}",
        out.stderr
    );
    let st = s.st();
    assert_eq!(st.opened[0].workspace, s.workspace().to_string_lossy());
    assert_eq!(st.opened[0].client, "agent");
    assert_eq!(
        st.opened[0].system_prompt,
        tollgate_agent::prompt::SYSTEM_PROMPT
    );
    assert!(st.closed);
}

#[tokio::test]
async fn flags_reach_open_session() {
    let s = Server::start().await;
    let out = s
        .run(
            &[
                "--mode",
                "plan",
                "--tools",
                "read_file,grep",
                "--max-tool-calls",
                "7",
                "--max-cost-usd",
                "0.25",
                "--llm-timeout",
                "9",
                "--model",
                "m1",
                "-p",
                "x",
            ],
            "",
        )
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let st = s.st();
    let o = &st.opened[0];
    assert_eq!(o.mode, "plan");
    assert_eq!(o.tools, vec!["read_file", "grep"]);
    assert_eq!(o.model, "m1");
    let caps = o.caps.unwrap();
    assert_eq!(
        (caps.max_tool_calls, caps.max_cost_usd, caps.llm_timeout_s),
        (Some(7), Some(0.25), Some(9))
    );
}

#[tokio::test]
async fn eof_denies_an_approval_and_the_model_gets_the_denial() {
    let s = Server::start().await;
    s.replies(vec![Ok(calls_reply(
        None,
        &[(
            "w1",
            "write_file",
            r#"{"path":"README.md","content":"new"}"#,
        )],
    ))]);
    let consequence = "overwrite README.md (existing 214 bytes will be lost)";
    s.behave(
        "write_file",
        Behaviour::Approval {
            approval: approval("ap1", "write_file", consequence, "README.md", false),
            ok_output: "written".into(),
        },
    );
    let out = s.run(&["-p", "rewrite the readme"], "").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Consequence first, then the diff, then the choices.
    let about = out
        .stderr
        .find("⚠ About to overwrite README.md (existing 214 bytes will be lost)")
        .expect("consequence shown");
    let diff = out.stderr.find("  +new").expect("diff shown");
    let choices = out
        .stderr
        .find("[y]es / [n]o / [s]ession")
        .expect("choices");
    assert!(about < diff && diff < choices);
    assert!(out.stderr.contains("(no input: denied)"));
    let st = s.st();
    assert_eq!(st.decisions.len(), 1);
    assert!(!st.decisions[0].approve);
    let tm = tool_messages(&st.chats[1]);
    assert_eq!(
        tm,
        vec![(
            "w1".to_string(),
            format!(
                "user denied: {consequence}. Do not retry this call; ask the user or change approach."
            )
        )]
    );
}

#[tokio::test]
async fn yes_once_and_session_scope() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(None, &[("w1", "write_file", "{}")])),
        Ok(calls_reply(
            None,
            &[("r1", "run_bash", r#"{"command":"ls"}"#)],
        )),
    ]);
    s.behave(
        "write_file",
        Behaviour::Approval {
            approval: approval(
                "ap1",
                "write_file",
                "create notes.md (3 bytes)",
                "notes.md",
                false,
            ),
            ok_output: "written".into(),
        },
    );
    s.behave(
        "run_bash",
        Behaviour::Approval {
            approval: approval("ap2", "run_bash", "run `ls` in the sandbox", "ls", false),
            ok_output: "a\nb".into(),
        },
    );
    let out = s.run(&["-p", "go"], "maybe\ny\ns\n").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("please answer y, n or s"));
    let st = s.st();
    let d: Vec<(bool, String)> = st
        .decisions
        .iter()
        .map(|d| (d.approve, d.approval_scope().text().to_string()))
        .collect();
    assert_eq!(
        d,
        vec![(true, "once".to_string()), (true, "session".to_string())]
    );
    assert_eq!(
        tool_messages(&st.chats[2]),
        vec![
            ("w1".to_string(), "written".to_string()),
            ("r1".to_string(), "a\nb".to_string())
        ]
    );
}

#[tokio::test]
async fn destructive_needs_the_typed_target() {
    for (input, approved) in [
        ("y\nwrong\n", false),
        ("y\nrm -r build\n", true),
        ("y\n", false),
    ] {
        let s = Server::start().await;
        s.replies(vec![Ok(calls_reply(
            None,
            &[("r1", "run_bash", r#"{"command":"rm -r build"}"#)],
        ))]);
        s.behave(
            "run_bash",
            Behaviour::Approval {
                approval: approval(
                    "ap1",
                    "run_bash",
                    "run `rm -r build` in the sandbox (deletes build/)",
                    "rm -r build",
                    true,
                ),
                ok_output: "removed".into(),
            },
        );
        let out = s.run(&["-p", "clean"], input).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("type the target to confirm (rm -r build): ")
        );
        let st = s.st();
        assert_eq!(st.decisions.len(), 1, "input {input:?}");
        assert_eq!(st.decisions[0].approve, approved, "input {input:?}");
        if approved {
            assert_eq!(st.decisions[0].confirm, "rm -r build");
            assert_eq!(tool_messages(&st.chats[1])[0].1, "removed");
        } else {
            assert_eq!(st.decisions[0].confirm, "");
            assert!(
                tool_messages(&st.chats[1])[0]
                    .1
                    .starts_with("user denied: ")
            );
        }
    }
}

#[tokio::test]
async fn an_operator_decision_closes_the_prompt() {
    let s = Server::start().await;
    s.replies(vec![Ok(calls_reply(
        None,
        &[("r1", "run_bash", r#"{"command":"make"}"#)],
    ))]);
    s.behave(
        "run_bash",
        Behaviour::OperatorApproves {
            approval: approval(
                "ap9",
                "run_bash",
                "run `make` in the sandbox",
                "make",
                false,
            ),
            after: Duration::from_millis(300),
        },
    );
    // Keep stdin open: the prompt must close because of the resolution, not EOF.
    let mut child = s.agent(&["-p", "build"]).spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let out = finish(child).await;
    drop(stdin);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("approval ap9 approved by uid 0 via operator"),
        "{}",
        out.stderr
    );
    assert!(s.st().decisions.is_empty());
}

#[tokio::test]
async fn turn_cap_asks_for_a_summary_without_tools() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(None, &[("a", "todo_list", "{}")])),
        Ok(calls_reply(None, &[("b", "todo_list", "{}")])),
        Ok(calls_reply(
            Some("summary: listed todos twice"),
            &[("c", "todo_list", "{}")],
        )),
    ]);
    let out = s
        .run(&["--max-turns", "2", "-p", "loop", "--output", "json"], "")
        .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("turn limit reached (2 turns)"));
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["stop_reason"], "turn_cap");
    assert_eq!(v["final_text"], "summary: listed todos twice");
    let st = s.st();
    assert_eq!(st.chats.len(), 3);
    let last = &st.chats[2];
    assert!(last.tools.is_empty(), "the summary request offers no tools");
    let lm = last.messages.last().unwrap();
    assert_eq!(lm.role, "user");
    assert_eq!(lm.chat_role(), ChatRole::User);
    assert_eq!(
        lm.content.as_deref(),
        Some("Turn limit reached: stop and summarise what you did and what remains.")
    );
    assert_eq!(report(&st, "iteration_cap_hit"), Some(&json!({"turns": 2})));
}

#[tokio::test]
async fn context_is_trimmed_deterministically_and_reported() {
    let s = Server::start().await;
    let mut replies = Vec::new();
    for i in 0..8 {
        let id = format!("r{i}");
        replies.push(Ok(calls_reply(
            None,
            &[(id.as_str(), "read_file", r#"{"path":"big.txt"}"#)],
        )));
    }
    replies.push(Ok(text_reply("done")));
    s.replies(replies);
    s.behave(
        "read_file",
        Behaviour::Respond(CallToolResponse {
            ok: true,
            output: "y".repeat(900),
            ..Default::default()
        }),
    );
    let out = s
        .run(&["--max-context-tokens", "1000", "-p", "read a lot"], "")
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let st = s.st();
    // The last trimmed request carries the summary of the last trim.
    let trimmed = st
        .chats
        .iter()
        .rev()
        .find(|c| {
            c.messages
                .get(1)
                .and_then(|m| m.content.as_deref())
                .is_some_and(|t| t.starts_with("[Context trimmed by the agent:"))
        })
        .expect("a trimmed request");
    assert_eq!(trimmed.messages[0].role, "system");
    assert!(trimmed.messages.len() <= 2 + 9);
    // Never a tool message right after the summary: calls stay with their results.
    assert_ne!(trimmed.messages[2].role, "tool");
    let r = st
        .reports
        .iter()
        .rev()
        .find(|(e, _)| e == "context_trim")
        .map(|(_, v)| v)
        .expect("context_trim reported");
    assert_eq!(r["summary_sha256_16"].as_str().unwrap().len(), 16);
    let summary = trimmed.messages[1].content.as_deref().unwrap();
    assert!(summary.contains(&format!(
        "sha256:{}",
        r["summary_sha256_16"].as_str().unwrap()
    )));
    assert!(summary.contains("Tools used in them: read_file"));
    assert!(summary.contains(&format!(
        "{} earlier messages ({} characters)",
        r["dropped_messages"], r["dropped_chars"]
    )));
}

#[tokio::test]
async fn ctrl_c_cancels_the_in_flight_tool_and_the_turn() {
    let s = Server::start().await;
    s.replies(vec![Ok(calls_reply(
        None,
        &[("s1", "run_bash", r#"{"command":"sleep 1000"}"#)],
    ))]);
    s.behave("run_bash", Behaviour::Block);
    let mut child = s.agent(&["-p", "sleep"]).spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    wait_until("the call to reach the server", || !s.st().calls.is_empty()).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = finish(child).await;
    drop(stdin);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("aborted (Ctrl-C): the turn was stopped"),
        "{}",
        out.stderr
    );
    wait_until("the server to see the cancellation", || {
        s.st().cancelled == 1
    })
    .await;
    let st = s.st();
    assert_eq!(
        report(&st, "abort"),
        Some(&json!({"reason": "ctrl-c", "turns": 1}))
    );
    assert!(st.closed);
}

#[tokio::test]
async fn ctrl_c_in_the_repl_keeps_the_session_and_the_history_valid() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(
            None,
            &[("s1", "run_bash", "{}"), ("s2", "todo_list", "{}")],
        )),
        Ok(text_reply("second answer")),
    ]);
    s.behave("run_bash", Behaviour::Block);
    let mut child = s.agent(&[]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"first\n").await.unwrap();
    wait_until("the call", || !s.st().calls.is_empty()).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    wait_until("the abort report", || report(&s.st(), "abort").is_some()).await;
    stdin.write_all(b"second\n").await.unwrap();
    drop(stdin);
    let out = finish(child).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("second answer"));
    let st = s.st();
    // Both calls of the aborted turn have a result before the next user message.
    let tm = tool_messages(&st.chats[1]);
    let abort = "Error: aborted by the user (Ctrl-C) before this call finished.";
    assert_eq!(
        tm,
        vec![
            ("s1".to_string(), abort.to_string()),
            ("s2".to_string(), abort.to_string())
        ]
    );
    assert_eq!(
        st.chats[1].messages.last().unwrap().content.as_deref(),
        Some("second")
    );
}

/// Regression: Ctrl-C at an approval prompt used to send a denial that raced the
/// withdrawal; the supervisor's "already withdrawn" error then re-opened the dead
/// approval's prompt on the next turn, which hung there.
#[tokio::test]
async fn ctrl_c_at_an_approval_prompt_does_not_reopen_it() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(None, &[("w1", "write_file", "{}")])),
        Ok(text_reply("second answer")),
    ]);
    s.behave(
        "write_file",
        Behaviour::Approval {
            approval: approval(
                "ap1",
                "write_file",
                "create a.txt (1 bytes)",
                "a.txt",
                false,
            ),
            ok_output: "written".into(),
        },
    );
    let mut child = s.agent(&[]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Read stderr as it comes, to send Ctrl-C only once the prompt is open.
    let mut err_pipe = child.stderr.take().unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let err2 = err.clone();
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        while let Ok(n) = err_pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            err2.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    stdin.write_all(b"first\n").await.unwrap();
    wait_until("the prompt", || {
        err.lock().unwrap().contains("[y]es / [n]o / [s]ession")
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    wait_until("the abort report", || report(&s.st(), "abort").is_some()).await;
    stdin.write_all(b"second\n").await.unwrap();
    drop(stdin);
    let out = finish(child).await;
    reader.await.unwrap();
    let stderr = err.lock().unwrap().clone();
    assert_eq!(out.code, 0, "{stderr}");
    assert!(out.stdout.contains("second answer"), "{}", out.stdout);
    assert_eq!(
        stderr.matches("[y]es / [n]o / [s]ession").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("did not accept"), "{stderr}");
    let st = s.st();
    assert!(st.decisions.is_empty(), "no decision races the withdrawal");
    assert_eq!(st.cancelled, 1);
}

#[tokio::test]
async fn revocation_ends_the_agent_with_exit_3() {
    let s = Server::start().await;
    s.replies(vec![Ok(calls_reply(None, &[("x", "run_bash", "{}")]))]);
    s.behave(
        "run_bash",
        Behaviour::Revoke("revoked by uid 0: runaway".into()),
    );
    let out = s.run(&["-p", "go"], "").await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("agent: session revoked: revoked by uid 0: runaway"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn llm_errors_end_the_turn_not_the_repl() {
    let s = Server::start().await;
    s.replies(vec![
        Err(Status::unavailable(
            "llm call failed: provider answered HTTP 500: boom",
        )),
        Err(Status::deadline_exceeded("llm timed out after 2s")),
        Ok(text_reply("third time lucky")),
    ]);
    let out = s.run(&[], "one\ntwo\nthree\n").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("agent: llm call failed: provider answered HTTP 500: boom")
    );
    assert!(out.stderr.contains("agent: llm timed out after 2s"));
    assert!(out.stdout.contains("third time lucky"));
    // -p exits 1 on an LLM failure.
    let s = Server::start().await;
    s.replies(vec![Err(Status::unavailable("llm call failed: x"))]);
    let out = s.run(&["-p", "one"], "").await;
    assert_eq!(out.code, 1);
}

#[tokio::test]
async fn cost_cap_stops_the_turn() {
    let s = Server::start().await;
    s.replies(vec![Ok(ChatResponse {
        message: Some(ChatMessage {
            role: "assistant".into(),
            chat_role: ChatRole::Assistant as i32,
            content: Some("Cost limit reached: stop.".into()),
            tool_calls: vec![],
            tool_call_id: String::new(),
        }),
        usage: Some(Usage::default()),
        cost_usd: 0.0,
        session_cost_usd: 0.02,
        finish_reason: "cost_limit".into(),
        denied: Some(Denial {
            code: DenialCode::CapReached as i32,
            reason: "the session's cost limit of $0.01 is reached".into(),
            rule: "cap:max_cost_usd".into(),
            consequence: String::new(),
            destructive: false,
        }),
    })]);
    let out = s.run(&["-p", "spend", "--output", "json"], "").await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("agent: cost limit reached: the session's cost limit of $0.01 is reached")
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["stop_reason"], "cost_cap");
    assert_eq!(v["usage"]["cost_usd"], 0.02);
    assert_eq!(s.st().chats.len(), 1);
}

#[tokio::test]
async fn ask_question_reads_stdin_and_is_reported() {
    let s = Server::start().await;
    s.replies(vec![
        Ok(calls_reply(
            None,
            &[("q1", "ask_question", r#"{"question":"Which branch?"}"#)],
        )),
        Ok(calls_reply(
            None,
            &[("q2", "ask_question", r#"{"question":"And then?"}"#)],
        )),
    ]);
    let out = s.run(&["-p", "ask"], "main\n").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("? Which branch?"));
    let st = s.st();
    assert_eq!(
        tool_messages(&st.chats[1]),
        vec![("q1".into(), "main".into())]
    );
    assert_eq!(
        tool_messages(&st.chats[2])[1],
        ("q2".into(), "(no answer - EOF)".into())
    );
    let asked: Vec<&Value> = st
        .reports
        .iter()
        .filter(|(e, _)| e == "question_asked")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        asked,
        vec![
            &json!({"question": "Which branch?", "answer": "main"}),
            &json!({"question": "And then?", "answer": "(no answer - EOF)"})
        ]
    );
}

#[tokio::test]
async fn the_token_is_rotated_before_it_expires() {
    let s = Server::start_with(|st| st.token_ttl_ms = 900).await;
    s.replies(vec![
        Ok(calls_reply(None, &[("t", "read_file", "{}")])),
        Ok(text_reply("ok")),
    ]);
    s.behave("read_file", Behaviour::WaitForRefresh);
    let out = s.run(&["-p", "wait"], "").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let st = s.st();
    assert_eq!(st.chat_tokens, vec!["Bearer tok-1", "Bearer tok-2"]);
}

#[tokio::test]
async fn agent_call_prints_the_contract_json() {
    let s = Server::start().await;
    s.behave(
        "run_bash",
        Behaviour::Respond(CallToolResponse {
            ok: true,
            output: "hi\n".into(),
            exit_code: Some(0),
            ..Default::default()
        }),
    );
    s.behave(
        "write_file",
        Behaviour::Respond(CallToolResponse {
            denied: Some(Denial {
                code: DenialCode::PolicyDenied as i32,
                reason: "writes are denied in plan mode.".into(),
                rule: "mode:plan".into(),
                consequence: String::new(),
                destructive: false,
            }),
            ..Default::default()
        }),
    );
    s.behave(
        "read_file",
        Behaviour::Respond(CallToolResponse {
            error: "file not found: nope.txt".into(),
            ..Default::default()
        }),
    );
    let ws = s.workspace();
    let ws = ws.to_str().unwrap();
    let out = s
        .run(
            &[
                "call",
                "run_bash",
                r#"{"command":"echo hi"}"#,
                "--workspace",
                ws,
            ],
            "",
        )
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (
            0,
            "{\"ok\":true,\"output\":\"hi\\n\",\"exit_code\":0,\"truncated\":false}\n"
        ),
        "{}",
        out.stderr
    );
    let out = s
        .run(
            &[
                "call",
                "write_file",
                r#"{"path":"a","content":""}"#,
                "--mode",
                "plan",
            ],
            "",
        )
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (
            3,
            "{\"ok\":false,\"denied\":{\"code\":\"POLICY_DENIED\",\"reason\":\"writes are denied in plan mode.\",\"rule\":\"mode:plan\"}}\n"
        )
    );
    let out = s
        .run(&["call", "read_file", r#"{"path":"nope.txt"}"#], "")
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (1, "{\"ok\":false,\"error\":\"file not found: nope.txt\"}\n")
    );
    let out = s.run(&["call", "read_file", "{nope"], "").await;
    assert_eq!(out.code, 2);
    let st = s.st();
    assert_eq!(st.opened.len(), 3);
    assert_eq!(st.opened[0].client, "agent call");
    assert_eq!(st.opened[0].workspace, ws);
    assert_eq!(st.opened[1].mode, "plan");
}

#[tokio::test]
async fn agent_call_without_a_terminal_leaves_the_ask_to_operators() {
    let s = Server::start().await;
    s.behave(
        "run_bash",
        Behaviour::OperatorApproves {
            approval: approval(
                "ap5",
                "run_bash",
                "run `make` in the sandbox",
                "make",
                false,
            ),
            after: Duration::from_millis(200),
        },
    );
    let out = s
        .run(&["call", "run_bash", r#"{"command":"make"}"#], "")
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("approval ap5 is waiting for an operator: run `make` in the sandbox")
    );
    assert!(
        s.st().decisions.is_empty(),
        "nothing was decided by the agent"
    );
}

#[tokio::test]
async fn refusals_and_usage_errors() {
    // No supervisor at the socket.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["-p", "x"])
        .env("TOLLGATE_SOCKET", &missing)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "agent: cannot connect to the supervisor at {}",
            missing.display()
        )),
        "{err}"
    );
    // Usage errors exit 2.
    for args in [
        &["--mode", "yolo"][..],
        &["--output", "json"][..],
        &["--bogus"][..],
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent"))
            .args(args)
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("agent: "));
    }
    // A policy refusal at OpenSession exits 3.
    let s = Server::start().await;
    let refused = s.dir.path().join("refuse-me");
    std::fs::create_dir(&refused).unwrap();
    let out = s
        .agent(&["--mode", "dangerouslySkipPermissions", "-p", "x"])
        .current_dir(&refused)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "agent: mode dangerouslySkipPermissions is not allowed by this supervisor\n"
    );
}

/// A measurement, not a test: the agent's own share of a turn (receive a Chat
/// response, run a planning tool, check the context budget, send the next Chat),
/// with a server that answers at once. Run with
/// `cargo test --release -p tollgate-agent --test contract -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn agent_share_of_a_turn() {
    const TURNS: usize = 300;
    let s = Server::start().await;
    let mut replies = Vec::new();
    for i in 0..TURNS {
        let id = format!("c{i}");
        replies.push(Ok(calls_reply(None, &[(id.as_str(), "todo_list", "{}")])));
    }
    replies.push(Ok(text_reply("done")));
    s.replies(replies);
    let out = s.run(&["--max-turns", "1000", "-p", "loop"], "").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let st = s.st();
    let mut gaps: Vec<Duration> = st.chat_times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    println!(
        "agent share of a turn over {TURNS} turns (gRPC both ways included): median {:?}, p90 {:?}, max {:?}",
        gaps[gaps.len() / 2],
        gaps[gaps.len() * 9 / 10],
        gaps.last().unwrap()
    );
}
