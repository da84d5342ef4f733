//! The MCP server: `tools/list` is the session's `ListTools`, and each
//! `tools/call` is one `CallTool` to the supervisor, whose PEP, sandbox and
//! audit decide and run it exactly as for the interactive agent. What the
//! supervisor answers becomes a tool result in tollgate's own words
//! ([`crate::model_text`]); anything but a successful run is `isError: true`.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, CustomRequest, CustomResult, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::watch;
use tollgate_proto::CallToolRequest;
use tonic::Code;

use crate::client::{Client, status_text};
use crate::error::AgentError;
use crate::model_text::{self, Mapped, Outcome};

/// The newest protocol version served; every older one with an `initialize`
/// handshake is served too (Codex 0.169 speaks 2025-06-18, Claude Code 2.1
/// 2025-11-25).
pub const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

const INSTRUCTIONS: &str = "tollgate's tools. Every call is decided by the tollgate supervisor's policy, \
    runs in its sandbox (run_bash) or beneath the workspace (file tools), and is recorded in its audit log. \
    A refused call comes back as an error result that says why: do not retry it; change approach or ask the user.";

/// Why the session can take no more calls: a sentence, e.g.
/// `session revoked: …` or `lost the connection to the supervisor: …`.
pub type Ended = watch::Sender<Option<String>>;

/// What every call needs.
pub struct Shared {
    pub client: Client,
    /// The tools offered over MCP.
    pub tools: Vec<Tool>,
    /// The names of `tools`, for the unknown-tool message.
    pub names: Vec<String>,
    /// The session's agent-side tools (planning, questions): not offered.
    pub local: Vec<String>,
    pub ended: Ended,
    /// True once the client closed the connection (stdin EOF).
    pub client_gone: watch::Receiver<bool>,
    /// The signal that is stopping `agent mcp`, once one came.
    pub stopping: watch::Receiver<Option<&'static str>>,
    /// Calls being answered: on a signal, `agent mcp` waits for them to
    /// answer before it stops serving.
    pub calls: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts one call in flight while it lives.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    fn new(calls: &Arc<std::sync::atomic::AtomicUsize>) -> InFlight {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(Arc::clone(calls))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The rmcp service.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    pub fn new(shared: Shared) -> Server {
        Server {
            shared: Arc::new(shared),
        }
    }

    fn ended(&self) -> Option<String> {
        self.shared.ended.borrow().clone()
    }

    fn end(&self, why: String) -> String {
        self.shared.ended.send_if_modified(|cur| {
            if cur.is_none() {
                *cur = Some(why.clone());
                true
            } else {
                false
            }
        });
        self.ended().unwrap_or(why)
    }

    /// One call, answered.
    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _in_flight = InFlight::new(&self.shared.calls);
        let name = req.name.to_string();
        if let Some(why) = self.ended() {
            return error_result(why);
        }
        if self.shared.local.contains(&name) {
            return error_result(format!(
                "Error: {name} runs in tollgate's own agent loop and is not offered over MCP. Available tools: {}",
                self.shared.names.join(", ")
            ));
        }
        let arguments = req
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or_else(|| serde_json::json!({}));
        let grpc = CallToolRequest {
            call_id: format!("mcp-{}", ctx.id),
            tool: name.clone(),
            arguments_json: arguments.to_string(),
        };
        let mut client = self.shared.client.clone();
        let mut ended = self.shared.ended.subscribe();
        let mut gone = self.shared.client_gone.clone();
        let mut stopping = self.shared.stopping.clone();
        // Dropping the CallTool future cancels the call in the supervisor
        // (its process tree is killed, a pending approval withdrawn), exactly
        // as Ctrl-C does for the interactive agent.
        let answered = tokio::select! {
            r = client.call_tool(grpc) => r,
            why = ended.wait_for(Option::is_some) => {
                let why = why.ok().and_then(|w| w.clone()).unwrap_or_else(|| "the session ended".into());
                return error_result(why);
            }
            sig = stopping.wait_for(Option::is_some) => {
                let sig = sig.ok().and_then(|s| *s).unwrap_or("a signal");
                return error_result(format!("Error: agent mcp is stopping ({sig}); the call was cancelled"));
            }
            _ = ctx.ct.cancelled() => {
                let why = match *self.shared.stopping.borrow() {
                    Some(sig) => format!("Error: agent mcp is stopping ({sig}); the call was cancelled"),
                    None => "Error: the call was cancelled by the client".into(),
                };
                return error_result(why);
            }
            // Closing stdin is how an MCP client shuts its server down: no
            // answer can reach it, so the call is not left running.
            _ = gone.wait_for(|g| *g) => {
                return error_result("Error: the client closed the connection; the call was cancelled".into());
            }
        };
        match answered {
            Ok(resp) => {
                let resp = resp.into_inner();
                match model_text::map_response(&name, &resp, &self.shared.names) {
                    Mapped::Revoked(reason) => {
                        error_result(self.end(AgentError::Revoked(reason).to_string()))
                    }
                    Mapped::Text { text, outcome, .. } => match outcome {
                        Outcome::Ok => CallToolResult::success(vec![ContentBlock::text(text)]),
                        Outcome::Denied
                        | Outcome::Error
                        | Outcome::UnknownTool
                        | Outcome::InvalidArgs
                        | Outcome::Aborted => error_result(text),
                    },
                }
            }
            Err(status) => match status.code() {
                Code::Unauthenticated | Code::PermissionDenied => error_result(
                    self.end(AgentError::Revoked(status.message().to_string()).to_string()),
                ),
                _ => error_result(format!(
                    "Error: the supervisor could not run the call: {}",
                    status_text(&status)
                )),
            },
        }
    }
}

fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// The MCP methods rmcp reads into typed requests: one of them arriving as a
/// custom request means its params did not fit.
const TYPED_METHODS: [&str; 5] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
];

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tollgate", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(NEWEST_PROTOCOL)
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.shared.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(self.call(request, context).await.into())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.as_str();
        if TYPED_METHODS.contains(&method) {
            let why = match method {
                "tools/call" => request
                    .params_as::<CallToolRequestParams>()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "params missing".into()),
                _ => "they do not match the MCP schema".into(),
            };
            return Err(ErrorData::invalid_params(
                format!("invalid params for `{method}`: {why}"),
                None,
            ));
        }
        Err(unknown_method(method))
    }
}

/// The error for an unknown method, naming it and what is served.
fn unknown_method(method: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!(
            "unknown method `{}`: this server answers initialize, ping, tools/list and tools/call",
            crate::text::truncate_chars(method, 100)
        ),
        None,
    )
}
