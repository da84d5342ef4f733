//! A mock OpenAI-compatible server for tests: real HTTP/1.1 on 127.0.0.1, a queue
//! of scripted replies for `POST /v1/chat/completions`, and a record of every
//! request (headers and body) so a test can assert exactly what the model was sent.
//!
//! Replies cover the provider's bad days too: malformed JSON, tool calls whose
//! arguments are not JSON, made-up tool names, HTTP 500, a hang past the timeout,
//! a huge body. When the queue is empty it answers a plain final message.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mock_http::{Acceptor, read_request};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Largest request the mock reads (a request over it gets 413).
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum MockReply {
    /// An HTTP response with a JSON body.
    Json { status: u16, body: Value },
    /// An HTTP response with any body (malformed JSON, huge text, ...).
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// An HTTP error with a `Retry-After` header (`None`: without one).
    Busy {
        status: u16,
        retry_after: Option<String>,
    },
    /// Read the request, then never answer (the connection stays open until the
    /// client gives up or the mock is dropped).
    Hang,
    /// Read the request, then close the connection without a response.
    Close,
}

/// A chat completion with `content` and no tool calls.
pub fn completion(content: &str) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": "mock-model",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop"
        }]
    })
}

impl MockReply {
    /// A final answer.
    pub fn text(content: &str) -> MockReply {
        MockReply::Json {
            status: 200,
            body: completion(content),
        }
    }

    /// Tool calls: `(id, name, raw arguments text)`; the arguments are sent as
    /// the string OpenAI puts in `function.arguments`, valid JSON or not.
    pub fn tool_calls(content: Option<&str>, calls: &[(&str, &str, &str)]) -> MockReply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": args }
                })
            })
            .collect();
        MockReply::Json {
            status: 200,
            body: json!({
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "created": 0,
                "model": "mock-model",
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": content, "tool_calls": calls },
                    "finish_reason": "tool_calls"
                }]
            }),
        }
    }

    /// Adds a `usage` block to a JSON reply.
    pub fn with_usage(self, prompt_tokens: u64, completion_tokens: u64) -> MockReply {
        match self {
            MockReply::Json { status, mut body } => {
                if let Some(o) = body.as_object_mut() {
                    o.insert(
                        "usage".into(),
                        json!({
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens
                        }),
                    );
                }
                MockReply::Json { status, body }
            }
            other => other,
        }
    }

    /// A 200 whose body is not valid JSON.
    pub fn malformed_json() -> MockReply {
        MockReply::Raw {
            status: 200,
            content_type: "application/json".into(),
            body: br#"{"choices": [{"message": {"role": "assistant", "content": "cut off"#.to_vec(),
        }
    }

    /// An HTTP error with an OpenAI-style error body.
    pub fn http_error(status: u16, message: &str) -> MockReply {
        MockReply::Json {
            status,
            body: json!({ "error": { "message": message, "type": "server_error" } }),
        }
    }

    /// A valid completion whose content is `bytes` long. The body is built here,
    /// as bytes, so serving it costs no serialisation time.
    pub fn huge(bytes: usize) -> MockReply {
        let mut body = Vec::with_capacity(bytes + 256);
        body.extend_from_slice(
            br#"{"id":"chatcmpl-mock","object":"chat.completion","created":0,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":""#,
        );
        body.resize(body.len() + bytes, b'x');
        body.extend_from_slice(br#""},"finish_reason":"stop"}]}"#);
        MockReply::Raw {
            status: 200,
            content_type: "application/json".into(),
            body,
        }
    }
}

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the whole request had been read.
    pub received_at: Instant,
    /// When the reply had been written (None: no reply, e.g. a hang).
    pub replied_at: Option<Instant>,
}

impl RecordedRequest {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// `messages` of a chat request.
    pub fn messages(&self) -> Vec<Value> {
        self.json()
            .and_then(|v| v.get("messages").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    }

    /// Names of the tools offered in a chat request.
    pub fn tool_names(&self) -> Vec<String> {
        self.json()
            .and_then(|v| v.get("tools").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect()
    }

    /// The whole request as text (request line, headers, body), for "never
    /// appears anywhere" checks.
    pub fn raw_text(&self) -> String {
        let mut s = format!("{} {}\n", self.method, self.path);
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s.push_str(&String::from_utf8_lossy(&self.body));
        s
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<MockReply>,
    requests: Vec<RecordedRequest>,
}

/// The running mock. Dropping it stops the server and every open connection.
pub struct MockOpenAi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _server: Acceptor,
}

impl MockOpenAi {
    /// Binds 127.0.0.1 on a free port and starts serving (call inside a tokio
    /// runtime).
    pub async fn start() -> std::io::Result<MockOpenAi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let st = Arc::clone(&state);
        let server = Acceptor::spawn(listener, move |stream| {
            let st = Arc::clone(&st);
            async move {
                let _ = serve(stream, st).await;
            }
        });
        Ok(MockOpenAi {
            addr,
            state,
            _server: server,
        })
    }

    /// `http://127.0.0.1:PORT/v1`, for a config's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply for the next chat request.
    pub fn push(&self, reply: MockReply) {
        if let Ok(mut s) = self.state.lock() {
            s.queue.push_back(reply);
        }
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        self.state.lock().map(|s| s.queue.len()).unwrap_or(0)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }

    /// The chat-completions requests only.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .collect()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

pub(crate) async fn write_response(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    write_response_with(stream, (status, ""), content_type, body).await
}

/// [`write_response`] with `extra` header lines (each ending in CRLF).
pub(crate) async fn write_response_with(
    stream: &mut TcpStream,
    (status, extra): (u16, &str),
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: keep-alive\r\n\r\n",
        reason(status),
        body.len()
    );
    // One write: a separate head and body meet Nagle and delayed ACKs (40 ms).
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out).await?;
    stream.flush().await
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decodes a chunked body at the start of `buf`: the body and the bytes it
/// took (with its empty trailer); `None` until it is complete.
pub(crate) fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
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

/// Serves one keep-alive connection.
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some((method, path, headers, body)) = read_request(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        let is_chat = method == "POST" && path.ends_with("/chat/completions");
        let (index, reply) = {
            let mut s = state
                .lock()
                .map_err(|_| std::io::Error::other("mock state poisoned"))?;
            s.requests.push(RecordedRequest {
                method: method.clone(),
                path: path.clone(),
                headers: headers.clone(),
                body,
                received_at: Instant::now(),
                replied_at: None,
            });
            let reply = if is_chat {
                s.queue
                    .pop_front()
                    .unwrap_or_else(|| MockReply::text("mock: no more scripted replies"))
            } else {
                MockReply::http_error(404, "the mock serves POST /v1/chat/completions only")
            };
            (s.requests.len() - 1, reply)
        };
        match reply {
            MockReply::Json { status, body } => {
                write_response(
                    &mut stream,
                    status,
                    "application/json",
                    body.to_string().as_bytes(),
                )
                .await?;
            }
            MockReply::Raw {
                status,
                content_type,
                body,
            } => write_response(&mut stream, status, &content_type, &body).await?,
            MockReply::Busy {
                status,
                retry_after,
            } => {
                let extra = retry_after
                    .map(|v| format!("Retry-After: {v}\r\n"))
                    .unwrap_or_default();
                let body = json!({"error": {"message": "the mock is busy", "type": "rate_limit"}});
                write_response_with(
                    &mut stream,
                    (status, &extra),
                    "application/json",
                    body.to_string().as_bytes(),
                )
                .await?;
            }
            MockReply::Hang => {
                // Keep the socket open; the client's timeout must fire first.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return Ok(());
            }
            MockReply::Close => return Ok(()),
        }
        if let Ok(mut s) = state.lock()
            && let Some(r) = s.requests.get_mut(index)
        {
            r.replied_at = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn post(addr: SocketAddr, body: &str, extra_headers: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n{extra_headers}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed early");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if buf.len() >= i + 4 + len {
                    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                    return (
                        status,
                        String::from_utf8_lossy(&buf[i + 4..i + 4 + len]).into_owned(),
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn scripted_replies_in_order_and_requests_recorded() {
        let mock = MockOpenAi::start().await.unwrap();
        mock.push(
            MockReply::tool_calls(None, &[("c1", "read_file", "{\"path\":\"a\"}")])
                .with_usage(10, 2),
        );
        mock.push(MockReply::http_error(500, "boom"));
        mock.push(MockReply::malformed_json());
        let (status, body) = post(
            mock.addr(),
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            "",
        )
        .await;
        assert_eq!(status, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "read_file"
        );
        assert_eq!(v["usage"]["prompt_tokens"], 10);
        let (status, _) = post(mock.addr(), "{}", "").await;
        assert_eq!(status, 500);
        let (status, body) = post(mock.addr(), "{}", "").await;
        assert_eq!(status, 200);
        assert!(serde_json::from_str::<Value>(&body).is_err());
        let (_, body) = post(mock.addr(), "{}", "").await;
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["choices"][0]["message"]["content"],
            "mock: no more scripted replies"
        );
        let reqs = mock.chat_requests();
        assert_eq!(reqs.len(), 4);
        assert_eq!(reqs[0].header("authorization"), Some("Bearer k"));
        assert_eq!(reqs[0].messages()[0]["content"], "hi");
        assert_eq!(mock.pending(), 0);
    }

    #[tokio::test]
    async fn chunked_bodies_are_decoded() {
        let mock = MockOpenAi::start().await.unwrap();
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"));
        assert_eq!(mock.requests()[0].json(), Some(json!({"a": 1})));
    }

    #[test]
    fn huge_is_valid_json_of_that_size() {
        let MockReply::Raw { body, .. } = MockReply::huge(1000) else {
            panic!("huge is prebuilt");
        };
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .len(),
            1000
        );
    }

    #[test]
    fn dechunk_needs_the_whole_body() {
        assert_eq!(dechunk(b"3\r\nabc\r\n"), None);
        assert_eq!(
            dechunk(b"3\r\nabc\r\n0\r\n\r\nGET"),
            Some((b"abc".to_vec(), 13))
        );
    }
}
