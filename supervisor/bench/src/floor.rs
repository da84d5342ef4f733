//! The baseline under ListTools: the same reply from a bare tonic server.
//!
//! `tollgate-bench __grpc-floor SOCKET` (started by `bench`, not for people)
//! serves AgentService on SOCKET with tonic's defaults and nothing else: no
//! token check, no session, no layers, no audit. Its ListTools returns the
//! supervisor's own reply (every tool's spec, the same bytes), and every
//! other method is UNIMPLEMENTED. Like the supervisor it runs in its own
//! process on a multi-thread runtime with a worker per core, so the client,
//! the socket and the wake-ups between the two processes are what the
//! supervisor's ListTools pays; the difference between the two rows is
//! tollgate's own share. Its Approvals holds the stream open and reads what
//! the client sends, as an idle session's does, so the memory rows can hold
//! 100 of them; every other method is UNIMPLEMENTED.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use tonic::{Request, Response, Status, Streaming};

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "__grpc-floor";

/// The line printed once the socket is bound.
const READY: &str = "grpc-floor: ready";

/// `supervisorctl __grpc-floor SOCKET`: serves until killed.
pub fn main(args: &[std::ffi::OsString]) -> ExitCode {
    let [socket] = args else {
        eprintln!("usage: tollgate-bench {SUBCOMMAND} SOCKET");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("supervisorctl {SUBCOMMAND}: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(Path::new(socket))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervisorctl {SUBCOMMAND}: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn serve(socket: &Path) -> anyhow::Result<()> {
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("cannot bind {}", socket.display()))?;
    // The bench reads this line from a pipe: one write, flushed.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{READY}")
        .and_then(|()| stdout.flush())
        .context("writing the ready line")?;
    drop(stdout);
    tonic::transport::Server::builder()
        .add_service(AgentServiceServer::new(Floor))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await
        .context("serving")
}

struct Floor;

/// What the supervisor's ListTools answers with every tool allowed: the
/// registry's schemas, rendered as the daemon's `agent_service::tool_specs`
/// renders them (the bench must not link the daemon: docs/ARCHITECTURE.md).
fn tool_specs() -> Vec<pb::ToolSpec> {
    tollgate_policy::registry()
        .iter()
        .map(|t| pb::ToolSpec {
            name: t.name.to_string(),
            description: t.description.to_string(),
            class: t.class.as_str().to_string(),
            parameters_json: t.parameters.to_string(),
            tool_class: pb::ToolClass::from_text(t.class.as_str()) as i32,
        })
        .collect()
}

type Reply<T> = Result<Response<T>, Status>;

fn unimplemented<T>() -> Reply<T> {
    Err(Status::unimplemented(
        "the bench's floor server answers ListTools and Approvals only",
    ))
}

#[tonic::async_trait]
impl AgentService for Floor {
    async fn list_tools(&self, _: Request<pb::ListToolsRequest>) -> Reply<pb::ListToolsResponse> {
        Ok(Response::new(pb::ListToolsResponse {
            tools: tool_specs(),
        }))
    }
    async fn open_session(
        &self,
        _: Request<pb::OpenSessionRequest>,
    ) -> Reply<pb::OpenSessionResponse> {
        unimplemented()
    }
    async fn refresh_token(
        &self,
        _: Request<pb::RefreshTokenRequest>,
    ) -> Reply<pb::RefreshTokenResponse> {
        unimplemented()
    }
    async fn call_tool(&self, _: Request<pb::CallToolRequest>) -> Reply<pb::CallToolResponse> {
        unimplemented()
    }
    async fn chat(&self, _: Request<pb::ChatRequest>) -> Reply<pb::ChatResponse> {
        unimplemented()
    }
    type ApprovalsStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ApprovalServerMsg, Status>> + Send>>;
    async fn approvals(
        &self,
        req: Request<Streaming<pb::ApprovalClientMsg>>,
    ) -> Reply<Self::ApprovalsStream> {
        let mut inbound = req.into_inner();
        tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
        Ok(Response::new(Box::pin(tokio_stream::pending())))
    }
    async fn report_event(
        &self,
        _: Request<pb::ReportEventRequest>,
    ) -> Reply<pb::ReportEventResponse> {
        unimplemented()
    }
    async fn close_session(
        &self,
        _: Request<pb::CloseSessionRequest>,
    ) -> Reply<pb::CloseSessionResponse> {
        unimplemented()
    }
    type McpGatewayStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::McpGatewayServerMsg, Status>> + Send>>;
    async fn mcp_gateway(
        &self,
        _: Request<Streaming<pb::McpGatewayClientMsg>>,
    ) -> Reply<Self::McpGatewayStream> {
        unimplemented()
    }
}

/// A running floor server, killed when dropped.
pub struct FloorProc {
    child: Child,
    pub socket: PathBuf,
}

impl FloorProc {
    /// Starts this executable's floor server on `<dir>/floor.sock`.
    pub fn start(dir: &Path) -> anyhow::Result<FloorProc> {
        use std::io::{BufRead as _, BufReader};

        let exe = std::env::current_exe().context("cannot find the bench's own executable")?;
        let socket = dir.join("floor.sock");
        let mut child = Command::new(&exe)
            .arg(SUBCOMMAND)
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} {SUBCOMMAND}", exe.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("the floor server has no stdout"))?;
        let mut proc = FloorProc { child, socket };
        // The ready line comes once the socket is bound; EOF means it died.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let ok = BufReader::new(stdout).read_line(&mut line).is_ok() && line.trim() == READY;
            let _ = tx.send(ok);
        });
        let started = Instant::now();
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(true) => Ok(proc),
            _ => {
                proc.kill();
                let mut err = String::new();
                if let Some(mut e) = proc.child.stderr.take() {
                    use std::io::Read as _;
                    let _ = e.read_to_string(&mut err);
                }
                bail!(
                    "the floor server did not get ready in {:?}: {}",
                    started.elapsed(),
                    err.trim()
                )
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FloorProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.socket);
    }
}
