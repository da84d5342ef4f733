//! The stdio framing of `agent mcp`: one JSON-RPC message per line, handed to
//! rmcp's server, with an answer for everything a client can get wrong.
//!
//! rmcp's own stdio transport drops a line that is not JSON, or too long,
//! without a word, and its server gives up when the first message is not
//! `initialize`. A client then waits for an answer that never comes. Here:
//!
//! - a line that is not JSON gets a `-32700` parse error (id null);
//! - a line longer than [`MAX_LINE_BYTES`] is discarded as it streams in (never
//!   buffered whole) and gets a `-32600` error saying so;
//! - JSON that is not a JSON-RPC message gets a `-32600` error, with its id
//!   when it has one;
//! - a request before `initialize` gets a `-32600` error naming the lifecycle;
//!   a notification or response before it is dropped (there is nothing to
//!   answer, and rmcp would end the connection on it).
//!
//! Everything else is rmcp's: the protocol is never hand-parsed here beyond
//! telling a message from a non-message.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, watch};

/// The longest line accepted: rmcp's own default, and 4× the largest message
/// the supervisor accepts, so a request the supervisor would refuse still
/// reaches it and is answered with its reason.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What one line becomes.
#[derive(Debug)]
pub enum Line {
    /// A message for rmcp.
    Deliver(RxJsonRpcMessage<RoleServer>),
    /// An error to write back; the line goes no further.
    Reply(TxJsonRpcMessage<RoleServer>),
    /// Nothing to deliver or answer.
    Drop,
}

/// An error response.
fn error(code: ErrorCode, message: String, id: Option<RequestId>) -> TxJsonRpcMessage<RoleServer> {
    JsonRpcMessage::error(ErrorData::new(code, Cow::Owned(message), None), id)
}

/// Decides what one line is. `initialized`: an `initialize` request has
/// already been delivered.
pub fn classify(line: &[u8], initialized: bool) -> Line {
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(msg) if initialized => Line::Deliver(msg),
        Ok(msg) => before_initialize(msg),
        Err(e) => not_a_message(line, &e),
    }
}

/// Before `initialize`, only `initialize`, `ping` and `server/discover`.
fn before_initialize(msg: RxJsonRpcMessage<RoleServer>) -> Line {
    match msg {
        JsonRpcMessage::Request(r) => match &r.request {
            ClientRequest::InitializeRequest(_)
            | ClientRequest::PingRequest(_)
            | ClientRequest::DiscoverRequest(_) => Line::Deliver(JsonRpcMessage::Request(r)),
            other => Line::Reply(error(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "the server is not initialized: `{}` came before `initialize`, hint: send `initialize` first, then `notifications/initialized` (MCP lifecycle)",
                    other.method()
                ),
                Some(r.id.clone()),
            )),
        },
        JsonRpcMessage::Response(_)
        | JsonRpcMessage::Notification(_)
        | JsonRpcMessage::Error(_) => Line::Drop,
    }
}

/// A line rmcp cannot read as a message.
fn not_a_message(line: &[u8], e: &serde_json::Error) -> Line {
    let value = match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(v) => v,
        Err(parse) => {
            return Line::Reply(error(
                ErrorCode::PARSE_ERROR,
                format!(
                    "parse error: the line is not JSON ({parse}); send one JSON-RPC message per line"
                ),
                None,
            ));
        }
    };
    let id = value
        .get("id")
        .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok());
    let has_method = value.get("method").is_some_and(|m| m.is_string());
    if id.is_none() && has_method {
        // A notification: JSON-RPC never answers one (rmcp drops the
        // non-standard ones too).
        return Line::Drop;
    }
    let what = if value.is_array() {
        "a batch (JSON-RPC batches are not part of MCP since 2025-06-18); send one message per line"
            .to_string()
    } else {
        format!("not a JSON-RPC 2.0 message ({e})")
    };
    Line::Reply(error(
        ErrorCode::INVALID_REQUEST,
        format!("invalid request: {what}"),
        id,
    ))
}

/// The error for a line over [`MAX_LINE_BYTES`].
pub fn too_large() -> TxJsonRpcMessage<RoleServer> {
    error(
        ErrorCode::INVALID_REQUEST,
        format!(
            "request too large: a message over {MAX_LINE_BYTES} bytes was discarded unread and nothing ran; hint: send large files in parts"
        ),
        None,
    )
}

enum Step {
    Line,
    More,
    EndDiscard,
    Oversized,
    OversizedNeedsDiscard,
}

enum Read {
    Line,
    Oversized,
    Eof,
}

/// The transport. Cancel-safe as rmcp needs (it polls `receive` in a
/// `select!`): a partial line stays in `line`, and error replies are written
/// by a task of their own.
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    discarding: bool,
    initialized: bool,
    write: Arc<Mutex<Option<W>>>,
    /// Set once the client closed its end: MCP's shutdown on stdio, after
    /// which no answer can matter.
    gone: watch::Sender<bool>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            discarding: false,
            initialized: false,
            write: Arc::new(Mutex::new(Some(write))),
            gone: watch::Sender::new(false),
        }
    }

    /// Turns true when the client has closed its end of the connection.
    pub fn client_gone(&self) -> watch::Receiver<bool> {
        self.gone.subscribe()
    }

    /// Reads one line into `self.line`, never letting it grow past the cap.
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let (consumed, step) = {
                let available = self.read.fill_buf().await?;
                if available.is_empty() {
                    return Ok(Read::Eof);
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    (take, newline.map_or(Step::More, |_| Step::EndDiscard))
                } else if self.line.len().saturating_add(take) > MAX_LINE_BYTES {
                    self.line.clear();
                    let step = if newline.is_some() {
                        Step::Oversized
                    } else {
                        Step::OversizedNeedsDiscard
                    };
                    (take, step)
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, newline.map_or(Step::More, |_| Step::Line))
                }
            };
            self.read.consume(consumed);
            match step {
                Step::Line => return Ok(Read::Line),
                Step::More => {}
                Step::EndDiscard => self.discarding = false,
                Step::Oversized => return Ok(Read::Oversized),
                Step::OversizedNeedsDiscard => {
                    self.discarding = true;
                    return Ok(Read::Oversized);
                }
            }
        }
    }

    /// Writes an error reply from a task of its own, so that a cancelled
    /// `receive` cannot cut it in half.
    fn reply(&self, msg: TxJsonRpcMessage<RoleServer>) {
        let lock = Arc::clone(&self.write);
        tokio::spawn(async move {
            let _ = write_message(&lock, &msg).await;
        });
    }
}

async fn write_message<W: AsyncWrite + Unpin>(
    lock: &Mutex<Option<W>>,
    msg: &TxJsonRpcMessage<RoleServer>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let mut guard = lock.lock().await;
    let Some(w) = guard.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MCP connection is closed",
        ));
    };
    w.write_all(&bytes).await?;
    w.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let lock = Arc::clone(&self.write);
        async move { write_message(&lock, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(Read::Line) => {}
                Ok(Read::Oversized) => {
                    self.reply(too_large());
                    continue;
                }
                Ok(Read::Eof) | Err(_) => {
                    self.gone.send_replace(true);
                    return None;
                }
            }
            let trimmed = {
                let l = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                l.strip_suffix(b"\r").unwrap_or(l)
            };
            if trimmed.iter().all(u8::is_ascii_whitespace) {
                self.line.clear();
                continue;
            }
            let verdict = classify(trimmed, self.initialized);
            self.line.clear();
            match verdict {
                Line::Deliver(msg) => {
                    if let JsonRpcMessage::Request(r) = &msg
                        && matches!(r.request, ClientRequest::InitializeRequest(_))
                    {
                        self.initialized = true;
                    }
                    return Some(msg);
                }
                Line::Reply(err) => self.reply(err),
                Line::Drop => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut guard = self.write.lock().await;
        if let Some(mut w) = guard.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn reply_of(line: &str, initialized: bool) -> Value {
        match classify(line.as_bytes(), initialized) {
            Line::Reply(m) => serde_json::to_value(&m).unwrap(),
            Line::Deliver(m) => panic!("delivered {m:?}"),
            Line::Drop => panic!("dropped"),
        }
    }

    #[test]
    fn garbage_gets_a_parse_error() {
        let r = reply_of("this is not json", true);
        assert_eq!(r["error"]["code"], -32700);
        assert!(r.get("id").is_none() || r["id"].is_null(), "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("parse error: the line is not JSON"),
            "{r}"
        );
    }

    #[test]
    fn json_that_is_not_a_message_is_answered_with_its_id() {
        let r = reply_of(r#"{"jsonrpc":"2.0","id":7}"#, true);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
        let r = reply_of(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, true);
        assert!(
            r["error"]["message"].as_str().unwrap().contains("a batch"),
            "{r}"
        );
    }

    #[test]
    fn a_broken_notification_is_not_answered() {
        assert!(matches!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/whatever","params":7}"#,
                true
            ),
            Line::Drop | Line::Deliver(_)
        ));
    }

    #[test]
    fn requests_before_initialize_are_refused_by_name() {
        let r = reply_of(
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"read_file","arguments":{"path":"x"}}}"#,
            false,
        );
        assert_eq!(r["id"], "a");
        assert_eq!(r["error"]["code"], -32600);
        assert!(
            r["error"]["message"].as_str().unwrap().starts_with(
                "the server is not initialized: `tools/call` came before `initialize`"
            ),
            "{r}"
        );
        // The same request after initialize goes to rmcp.
        assert!(matches!(
            classify(
                br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"read_file"}}"#,
                true
            ),
            Line::Deliver(_)
        ));
        // initialize and ping pass; a notification before it is dropped.
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, false),
            Line::Deliver(_)
        ));
        assert!(matches!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                false
            ),
            Line::Drop
        ));
    }

    #[tokio::test]
    async fn an_oversized_line_is_discarded_and_answered_and_the_next_one_read() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let mut t = LineTransport::new(server_read, server_write);
        let writer = tokio::spawn(async move {
            let big = vec![b'x'; MAX_LINE_BYTES + 10];
            client_write.write_all(&big).await.unwrap();
            client_write.write_all(b"\n").await.unwrap();
            client_write
                .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
                .await
                .unwrap();
            client_write.write_all(b"\n").await.unwrap();
            client_write
        });
        let msg = t.receive().await.expect("the ping after the big line");
        assert!(matches!(msg, JsonRpcMessage::Request(_)), "{msg:?}");
        let _keep_open = writer.await.unwrap();
        let mut reply = String::new();
        let mut r = tokio::io::BufReader::new(&mut client_read);
        r.read_line(&mut reply).await.unwrap();
        let v: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(v["error"]["code"], -32600);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("request too large"),
            "{v}"
        );
    }
}
