//! Connecting to operator.sock.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tollgate_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::errors::{CtlError, Kind};

pub const DEFAULT_OPERATOR_SOCKET: &str = "/run/tollgate/operator.sock";

pub type Client = OperatorServiceClient<Channel>;

/// The socket to use: `--socket`, else $TOLLGATE_OPERATOR_SOCKET, else the default.
pub fn socket_path(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("TOLLGATE_OPERATOR_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_OPERATOR_SOCKET))
}

/// Connects, turning the usual failures into messages that say what to do.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    if let Err(e) = std::os::unix::net::UnixStream::connect(socket) {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => {
                ", hint: is the supervisor running? (supervisor --state-dir DIR; or --socket PATH)"
            }
            std::io::ErrorKind::PermissionDenied => {
                ", hint: operator.sock is for operators only (root, or the configured operator group)"
            }
            std::io::ErrorKind::ConnectionRefused => {
                ", hint: a stale socket; is the supervisor running?"
            }
            _ => "",
        };
        return Err(CtlError::wrap(
            Kind::Connect,
            format!("cannot connect to {}: {e}{hint}", socket.display()),
        ));
    }
    let uri = format!("unix://{}", socket.display());
    let channel = Endpoint::from_shared(uri)
        .context("bad socket path")?
        .connect()
        .await
        .map_err(|e| {
            CtlError::wrap(
                Kind::Connect,
                format!("cannot connect to {}: {e}", socket.display()),
            )
        })?;
    Ok(OperatorServiceClient::new(channel).max_decoding_message_size(64 * 1024 * 1024))
}

/// A gRPC status as one line: the server's message, which names the object.
pub fn status_error(s: tonic::Status) -> anyhow::Error {
    let code = match s.code() {
        tonic::Code::PermissionDenied => "permission denied: ",
        tonic::Code::Unauthenticated => "unauthenticated: ",
        _ => "",
    };
    CtlError::wrap(Kind::of_code(s.code()), format!("{code}{}", s.message()))
}
