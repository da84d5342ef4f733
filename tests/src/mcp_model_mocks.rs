//! Mock model servers for the MCP client tests (issue 23): Anthropic's
//! Messages API as Claude Code calls it, and OpenAI's Responses API as Codex
//! calls it, each scripted so that the model calls tollgate's MCP tools.
//!
//! A small HTTP/1.1 server on std threads serves keep-alive connections on a
//! listener the test bound (inside the client's loopback-only network
//! namespace), records every request whole and answers with server-sent
//! events. The step answering a request is the number of tool results the
//! request carries, so a client's side requests do not shift the script;
//! the tool calls get the ids `toolu_N` (Claude Code) and `call_N` (Codex).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mock_openai::RecordedRequest;

/// Which API the mock speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/messages` (Claude Code).
    Anthropic,
    /// `POST /v1/responses` (Codex).
    Responses,
}

/// One model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Call an MCP tool of server `server`.
    McpTool {
        server: String,
        tool: String,
        input: Value,
    },
    /// A final answer.
    Text(String),
}

/// A running mock; dropping it stops it.
pub struct ModelMock {
    api: Api,
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Drop for ModelMock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl ModelMock {
    /// Serves `script` in `api`'s dialect on `listener`.
    pub fn serve(api: Api, listener: TcpListener, script: Vec<Step>) -> std::io::Result<ModelMock> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let requests: Arc<Mutex<Vec<RecordedRequest>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let script = Arc::new(script);
        let (rq, st) = (Arc::clone(&requests), Arc::clone(&stop));
        let accept = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (rq, st, script) =
                            (Arc::clone(&rq), Arc::clone(&st), Arc::clone(&script));
                        std::thread::spawn(move || {
                            let _ = serve_conn(api, stream, &rq, &st, &script);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(ModelMock {
            api,
            addr,
            requests,
            stop,
            accept: Some(accept),
        })
    }

    /// `ANTHROPIC_BASE_URL`, or Codex's provider `base_url`.
    pub fn base_url(&self) -> String {
        match self.api {
            Api::Anthropic => format!("http://{}", self.addr),
            Api::Responses => format!("http://{}/v1", self.addr),
        }
    }

    /// The model requests, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        let all = self.requests.lock().map(|r| r.clone()).unwrap_or_default();
        all.into_iter()
            .filter(|r| is_model_request(self.api, r))
            .collect()
    }

    /// What the model was told about tool call number `n`: its text and
    /// whether the client marked it an error (Codex does not say).
    pub fn result_of(&self, n: usize) -> Option<(String, bool)> {
        self.requests().iter().find_map(|r| {
            let v = r.json()?;
            results_in(self.api, &v)
                .into_iter()
                .find(|b| b[id_key(self.api)] == call_id(self.api, n))
                .map(|b| match self.api {
                    Api::Anthropic => (
                        text_of(&b["content"]),
                        b["is_error"].as_bool().unwrap_or(false),
                    ),
                    Api::Responses => (text_of(&b["output"]), false),
                })
        })
    }
}

fn is_model_request(api: Api, r: &RecordedRequest) -> bool {
    r.method == "POST"
        && match api {
            Api::Anthropic => r.path.starts_with("/v1/messages"),
            Api::Responses => r.path.ends_with("/responses"),
        }
}

fn id_key(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "tool_use_id",
        Api::Responses => "call_id",
    }
}

fn call_id(api: Api, n: usize) -> String {
    match api {
        Api::Anthropic => format!("toolu_{n}"),
        Api::Responses => format!("call_{n}"),
    }
}

/// The tool results a request carries.
fn results_in(api: Api, body: &Value) -> Vec<Value> {
    match api {
        Api::Anthropic => body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .cloned()
            .collect(),
        Api::Responses => body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "function_call_output")
            .cloned()
            .collect(),
    }
}

/// A string, text blocks, or JSON of another shape.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn serve_conn(
    api: Api,
    mut stream: TcpStream,
    requests: &Mutex<Vec<RecordedRequest>>,
    stop: &AtomicBool,
    script: &[Step],
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut stream, &mut buf, stop)? else {
            return Ok(());
        };
        let (status, ctype, body) = if is_model_request(api, &req) {
            let n = req.json().map(|v| results_in(api, &v).len()).unwrap_or(0);
            (200, "text/event-stream", reply(api, n, script.get(n)))
        } else {
            (
                404,
                "application/json",
                br#"{"error":"not served"}"#.to_vec(),
            )
        };
        if let Ok(mut r) = requests.lock() {
            r.push(req);
        }
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n",
            if status == 200 { "OK" } else { "Not Found" },
            body.len()
        );
        let mut out = head.into_bytes();
        out.extend_from_slice(&body);
        stream.write_all(&out)?;
    }
}

/// Reads one request (content-length or chunked body); `None` at EOF or stop.
fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    stop: &AtomicBool,
) -> std::io::Result<Option<RecordedRequest>> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if !fill(stream, buf, stop)? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let method = first.next().unwrap_or_default().to_string();
    let path = first.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let start = head_end + 4;
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            if let Some((b, used)) = dechunk(&buf[start..]) {
                buf.drain(..start + used);
                break b;
            }
            if !fill(stream, buf, stop)? {
                return Ok(None);
            }
        }
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < start + len {
            if !fill(stream, buf, stop)? {
                return Ok(None);
            }
        }
        let b = buf[start..start + len].to_vec();
        buf.drain(..start + len);
        b
    };
    Ok(Some(RecordedRequest {
        method,
        path,
        headers,
        body,
        received_at: Instant::now(),
        replied_at: None,
    }))
}

/// Reads more into `buf`; false at EOF or when the mock stops.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> std::io::Result<bool> {
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(true);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A complete chunked body in `buf` and the bytes it took.
fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let line_end = find(&buf[pos..], b"\r\n")? + pos;
        let size_text = std::str::from_utf8(&buf[pos..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            let end = find(&buf[pos..], b"\r\n")? + pos + 2;
            return Some((out, end));
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        out.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

fn sse(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = String::new();
    for (name, data) in events {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    out.into_bytes()
}

fn reply(api: Api, n: usize, step: Option<&Step>) -> Vec<u8> {
    match api {
        Api::Anthropic => anthropic_reply(n, step),
        Api::Responses => responses_reply(n, step),
    }
}

fn anthropic_reply(n: usize, step: Option<&Step>) -> Vec<u8> {
    let start = json!({"type": "message_start", "message": {
        "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "claude-mock",
        "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let text = |t: &str| {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": t}),
            "end_turn",
        )
    };
    let (block, delta, stop) = match step {
        Some(Step::McpTool {
            server,
            tool,
            input,
        }) => (
            json!({"type": "tool_use", "id": call_id(Api::Anthropic, n),
                   "name": format!("mcp__{server}__{tool}"), "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            "tool_use",
        ),
        Some(Step::Text(t)) => text(t),
        None => text("mock: the script is done"),
    };
    sse(&[
        ("message_start", start),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

fn responses_reply(n: usize, step: Option<&Step>) -> Vec<u8> {
    let id = format!("resp_{n}");
    let message = |t: &str| {
        json!({"type": "message", "role": "assistant", "id": "msg_mock",
               "content": [{"type": "output_text", "text": t}]})
    };
    let item = match step {
        Some(Step::McpTool {
            server,
            tool,
            input,
        }) => json!({"type": "function_call", "call_id": call_id(Api::Responses, n),
                     "namespace": format!("mcp__{server}"), "name": tool,
                     "arguments": input.to_string()}),
        Some(Step::Text(t)) => message(t),
        None => message("mock: the script is done"),
    };
    sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": id}}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id,
            "usage": {"input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
                      "output_tokens_details": null, "total_tokens": 15}}}),
        ),
    ])
}
