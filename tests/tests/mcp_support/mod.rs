//! Driving the real `agent mcp` process over stdio: with rmcp's own client (a
//! real MCP client, elicitation included), or line by line for the inputs no
//! well-behaved client would send.

#![allow(dead_code)]

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ErrorData, Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleClient, RunningService, serve_client};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tollgate_e2e::harness::{Supervisor, bin};

/// An MCP server (Python) that checks nothing: `run_shell` runs any
/// command, `write_file` and `read_file` take any path, `danger` leaves a
/// marker, `misbehave` writes garbage, answers a request never sent, floods,
/// hangs or crashes. `agent mcp-gateway` wraps it in the tests.
pub const SHELL_SERVER: &str = include_str!("shell_server.py");

/// A config where the session may approve (so asks reach the MCP client too),
/// `dangerouslySkipPermissions` is allowed, and approvals wait a minute.
pub const CONFIG: &str = r#"
[session]
approval_timeout_s = 60
session_can_approve = true
allow_dangerously_skip = true

[llm]
provider = "script"
"#;

/// An elicitation the server sent, for the test to answer.
pub struct Elicitation {
    pub message: String,
    /// The requested schema, as on the wire.
    pub schema: Value,
    /// Send the answer here (dropping it answers nothing: the request hangs
    /// until the server cancels it).
    pub reply: oneshot::Sender<ElicitResult>,
    /// Fires when the server cancelled the request (notifications/cancelled).
    pub cancelled: oneshot::Receiver<()>,
}

/// The test's MCP client: its capabilities, and elicitations handed to the
/// test through a channel.
#[derive(Clone)]
pub struct TestClient {
    pub info: ClientConfig,
    pub elicitations: Option<mpsc::UnboundedSender<Elicitation>>,
}

impl TestClient {
    /// A client speaking `version`, declaring form elicitation when `elicit`
    /// is given.
    pub fn new(
        version: ProtocolVersion,
        elicit: Option<mpsc::UnboundedSender<Elicitation>>,
    ) -> TestClient {
        let caps: ClientCapabilities = if elicit.is_some() {
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        TestClient {
            info: ClientConfig::new(caps, Implementation::new("tollgate-e2e", "0"))
                .with_protocol_version(version),
            elicitations: elicit,
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(tx) = &self.elicitations else {
            return Err(ErrorData::internal_error(
                "this client declared no elicitation",
                None,
            ));
        };
        let wire = serde_json::to_value(&request).unwrap();
        let (reply, answer) = oneshot::channel();
        let (cancel_tx, cancelled) = oneshot::channel();
        tx.send(Elicitation {
            message: wire["message"].as_str().unwrap_or_default().to_string(),
            schema: wire["requestedSchema"].clone(),
            reply,
            cancelled,
        })
        .unwrap();
        tokio::select! {
            r = answer => r.map_err(|_| ErrorData::internal_error("the test did not answer", None)),
            _ = context.ct.cancelled() => {
                let _ = cancel_tx.send(());
                Err(ErrorData::internal_error("cancelled", None))
            }
        }
    }
}

/// A running `agent mcp` with an rmcp client connected to it.
pub struct McpAgent {
    pub child: Child,
    pub client: Option<RunningService<RoleClient, TestClient>>,
    pub session: String,
    pub stderr: Arc<Mutex<String>>,
}

/// Starts `agent mcp ARGS` in `ws`, its stderr collected.
pub fn spawn(sup: &Supervisor, ws: &Path, args: &[&str]) -> (Child, Arc<Mutex<String>>) {
    let mut child = Command::new(bin("agent"))
        .arg("mcp")
        .args(args)
        .env("TOLLGATE_SOCKET", &sup.agent_socket)
        .current_dir(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn agent mcp");
    let buf = collect_stderr(&mut child);
    (child, buf)
}

/// Takes `child`'s stderr and collects it, as it comes, into the buffer.
pub fn collect_stderr(child: &mut Child) -> Arc<Mutex<String>> {
    let mut err = child.stderr.take().unwrap();
    let buf = Arc::new(Mutex::new(String::new()));
    let b = Arc::clone(&buf);
    tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = err.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            b.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    buf
}

/// The session id from `agent mcp: session <id> in …` (or `agent
/// mcp-gateway: …`) on stderr.
pub async fn session_of(stderr: &Arc<Mutex<String>>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = stderr.lock().unwrap().clone();
        if let Some(rest) = text.split(": session ").nth(1) {
            return rest.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "agent mcp printed no session line; stderr:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl McpAgent {
    pub async fn start(sup: &Supervisor, ws: &Path, args: &[&str], client: TestClient) -> McpAgent {
        let (child, stderr) = spawn(sup, ws, args);
        McpAgent::connect(child, stderr, client).await
    }

    /// Initialises `client` over the stdio of `child` (`agent mcp` or
    /// `agent mcp-gateway`, its stderr collected into `stderr`) and reads
    /// the session it printed.
    pub async fn connect(
        mut child: Child,
        stderr: Arc<Mutex<String>>,
        client: TestClient,
    ) -> McpAgent {
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let stdin: ChildStdin = child.stdin.take().unwrap();
        let Ok(running) = tokio::time::timeout(
            Duration::from_secs(60),
            serve_client(client, (stdout, stdin)),
        )
        .await
        else {
            panic!("initialize timed out; stderr:\n{}", stderr.lock().unwrap());
        };
        let running = match running {
            Ok(r) => r,
            Err(e) => panic!(
                "initialize failed: {e}; stderr:\n{}",
                stderr.lock().unwrap()
            ),
        };
        let session = session_of(&stderr).await;
        McpAgent {
            child,
            client: Some(running),
            session,
            stderr,
        }
    }

    pub fn client(&self) -> &RunningService<RoleClient, TestClient> {
        self.client.as_ref().unwrap()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The names `tools/list` gives.
    pub async fn tool_names(&self) -> Vec<String> {
        self.client()
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// One `tools/call`, its result as on the wire.
    pub async fn call(&self, tool: &str, args: Value) -> Value {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = args.as_object().cloned();
        let r = tokio::time::timeout(Duration::from_secs(120), self.client().call_tool(params))
            .await
            .unwrap_or_else(|_| panic!("tools/call {tool} hung; stderr:\n{}", self.stderr()))
            .unwrap_or_else(|e| {
                panic!("tools/call {tool} failed: {e}; stderr:\n{}", self.stderr())
            });
        serde_json::to_value(&r).unwrap()
    }

    /// Closes the connection (the client's end of stdin and stdout) and waits
    /// for the process to exit.
    pub async fn finish(mut self) -> (ExitStatus, String) {
        if let Some(c) = self.client.take() {
            let _ = c.cancel().await;
        }
        let status = wait_exit(&mut self.child, &self.stderr).await;
        (status, self.stderr())
    }
}

/// Waits for a child to exit (a guard against a hang, not a timing check).
pub async fn wait_exit(child: &mut Child, stderr: &Arc<Mutex<String>>) -> ExitStatus {
    match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(s) => s.unwrap(),
        Err(_) => {
            let _ = child.kill().await;
            panic!(
                "agent mcp did not exit after its client went away; stderr:\n{}",
                stderr.lock().unwrap()
            );
        }
    }
}

/// The text of a tool result and whether it is an error.
pub fn text_of(result: &Value) -> (String, bool) {
    (
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        result["isError"].as_bool().unwrap_or(false),
    )
}

/// A raw line-by-line connection, for inputs a real client would not send.
pub struct Raw {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    pub stderr: Arc<Mutex<String>>,
}

impl Raw {
    pub fn start(sup: &Supervisor, ws: &Path, args: &[&str]) -> Raw {
        let (mut child, stderr) = spawn(sup, ws, args);
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Raw {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(bytes).await.unwrap();
        w.flush().await.unwrap();
    }

    pub async fn send(&mut self, msg: &Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        self.send_bytes(&line).await;
    }

    /// The next line the server writes, parsed.
    pub async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.stdout.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no answer from agent mcp; stderr:\n{}",
                    self.stderr.lock().unwrap()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "agent mcp closed stdout; stderr:\n{}",
                    self.stderr.lock().unwrap()
                )
            });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// `initialize` + `notifications/initialized`; returns the result.
    pub async fn initialize(&mut self, version: &str) -> Value {
        self.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .await;
        let r = self.recv().await;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        r
    }

    /// Closes stdin and waits for the exit.
    pub async fn finish(mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let status = wait_exit(&mut self.child, &self.stderr).await;
        let err = self.stderr.lock().unwrap().clone();
        (status, err)
    }
}

/// The pids of processes whose argv holds `arg` exactly.
pub fn processes_with_arg(arg: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Waits until a process whose argv holds `arg` runs (a sandbox is built
/// on first use, after the call's `tool_started` record).
pub async fn wait_for_process(arg: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_with_arg(arg).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no process with argument {arg} started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no process with `arg` in its argv is left (the supervisor
/// kills the sandbox's tree; reaping it takes a moment). False if one is
/// still there after 10 s (the tests' commands sleep far longer).
pub async fn gone(arg: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with_arg(arg).is_empty() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Waits until the session's audit log shows `event` for `tool`.
pub async fn wait_for_record(sup: &Supervisor, session: &str, event: &str, tool: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = sup
            .session_records(session)
            .into_iter()
            .find(|r| r["event"] == event && r["tool"] == tool)
        {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no {event} record for {tool} in session {session}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
