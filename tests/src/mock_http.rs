//! The HTTP/1.1 side of the model mocks: serves keep-alive connections on a
//! listener the test made (bound inside a client's network namespace, so
//! the client reaches it on its loopback), records every request whole, and
//! answers each with what a responder returns for it. The Anthropic and
//! OpenAI Responses mocks are responders over this.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::mock_openai::{MAX_REQUEST_BYTES, RecordedRequest, dechunk, find, write_response};

/// One answer: status, content type, body.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// Picks the answer for a request, given every request so far (the last is
/// this one).
pub type Responder = dyn Fn(&[RecordedRequest]) -> Reply + Send + Sync;

/// A running server; dropping it stops it and its connections.
pub struct MockHttp {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    _server: Acceptor,
}

/// An accept loop and the connections it serves; dropping it stops them all.
pub(crate) struct Acceptor {
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.accept.abort();
        if let Ok(conns) = self.conns.lock() {
            for c in conns.iter() {
                c.abort();
            }
        }
    }
}

impl Acceptor {
    /// Serves every connection `listener` accepts with `conn`, each in its
    /// own task (call inside a tokio runtime).
    pub(crate) fn spawn<F, Fut>(listener: TcpListener, conn: F) -> Acceptor
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let cs = Arc::clone(&conns);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let h = tokio::spawn(conn(stream));
                if let Ok(mut c) = cs.lock() {
                    c.retain(|h| !h.is_finished());
                    c.push(h);
                }
            }
        });
        Acceptor { accept, conns }
    }
}

impl MockHttp {
    /// Serves `listener` (a std listener: it may have been bound in another
    /// network namespace) with `respond`. Call inside a tokio runtime.
    pub fn serve(
        listener: std::net::TcpListener,
        respond: Arc<Responder>,
    ) -> std::io::Result<MockHttp> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = TcpListener::from_std(listener)?;
        let requests: Arc<Mutex<Vec<RecordedRequest>>> = Arc::new(Mutex::new(Vec::new()));
        let rq = Arc::clone(&requests);
        let server = Acceptor::spawn(listener, move |stream| {
            let (rq, respond) = (Arc::clone(&rq), Arc::clone(&respond));
            async move {
                let _ = serve(stream, rq, respond).await;
            }
        });
        Ok(MockHttp {
            addr,
            requests,
            _server: server,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// How a scripted model mock speaks its API.
pub(crate) struct Dialect<S: 'static> {
    /// Whether a request is a model request (others get a 404).
    pub is_model: fn(&RecordedRequest) -> bool,
    /// The tool results a model request's JSON carries.
    pub results_in: fn(&Value) -> Vec<Value>,
    /// The answer to the model request carrying `n` results: step `n`
    /// (the results themselves given, for a step built from one).
    pub reply: fn(usize, Option<&S>, &[Value]) -> Reply,
}

/// A scripted model mock: the answer to a model request is the step
/// numbered by how many tool results it carries, so a client's side
/// requests do not shift the script. Every request is recorded.
pub(crate) struct Scripted {
    http: MockHttp,
    is_model: fn(&RecordedRequest) -> bool,
    results_in: fn(&Value) -> Vec<Value>,
}

impl Scripted {
    /// Serves `script` in `dialect` on `listener` (inside a tokio runtime).
    pub(crate) fn serve<S: Send + Sync + 'static>(
        listener: std::net::TcpListener,
        script: Vec<S>,
        dialect: Dialect<S>,
    ) -> std::io::Result<Scripted> {
        let Dialect {
            is_model,
            results_in,
            reply,
        } = dialect;
        let script = Arc::new(script);
        let http = MockHttp::serve(
            listener,
            Arc::new(move |reqs: &[RecordedRequest]| match reqs.last() {
                Some(r) if is_model(r) => {
                    let results = r.json().map(|v| results_in(&v)).unwrap_or_default();
                    reply(results.len(), script.get(results.len()), &results)
                }
                _ => not_found(),
            }),
        )?;
        Ok(Scripted {
            http,
            is_model,
            results_in,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.http.addr()
    }

    /// The model requests, in order.
    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.http
            .requests()
            .into_iter()
            .filter(|r| (self.is_model)(r))
            .collect()
    }

    /// The result whose `id_key` is `id`, from the first request that
    /// carries it.
    pub(crate) fn result(&self, id_key: &str, id: &str) -> Option<Value> {
        self.requests().iter().find_map(|r| {
            let v = r.json()?;
            (self.results_in)(&v).into_iter().find(|b| b[id_key] == id)
        })
    }

    /// Every model request as text, for "never appears" checks.
    pub(crate) fn all_text(&self) -> String {
        self.requests()
            .iter()
            .map(|r| r.raw_text())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

async fn serve(
    mut stream: TcpStream,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    respond: Arc<Responder>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some((method, path, headers, body)) = read_request(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        let reply = {
            let mut r = requests
                .lock()
                .map_err(|_| std::io::Error::other("mock state poisoned"))?;
            r.push(RecordedRequest {
                method,
                path,
                headers,
                body,
                received_at: Instant::now(),
                replied_at: None,
            });
            respond(&r)
        };
        write_response(&mut stream, reply.status, reply.content_type, &reply.body).await?;
    }
}

pub(crate) type Request = (String, String, Vec<(String, String)>, Vec<u8>);

/// Reads one request (content-length or chunked body); `None` at EOF, or
/// after answering 413 to a body over [`MAX_REQUEST_BYTES`].
pub(crate) async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Request>> {
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let body_start = head_end + 4;
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            if let Some((b, used)) = dechunk(&buf[body_start..]) {
                buf.drain(..body_start + used);
                break b;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_REQUEST_BYTES {
            write_response(stream, 413, "text/plain", b"request too large").await?;
            return Ok(None);
        }
        while buf.len() < body_start + len {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let b = buf[body_start..body_start + len].to_vec();
        buf.drain(..body_start + len);
        b
    };
    Ok(Some((method, path, headers, body)))
}

/// Server-sent events: `event: NAME\ndata: JSON\n\n` each.
pub fn sse(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = String::new();
    for (name, data) in events {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    out.into_bytes()
}

/// A 404 for what the mocks do not serve.
pub fn not_found() -> Reply {
    Reply {
        status: 404,
        content_type: "application/json",
        body: br#"{"error":{"type":"not_found_error","message":"the mock serves the model endpoint only"}}"#.to_vec(),
    }
}

/// A content value as text: a string, the text of text blocks, or JSON of
/// another shape.
pub fn text_of(content: &Value) -> String {
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
