//! The agent's errors and the exit codes they map to (docs/INTERFACES.md: 1 failure,
//! 2 usage, 3 denied or revoked).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "cannot connect to the supervisor at {path}: {cause}, hint: start the supervisor, or point --socket / TOLLGATE_SOCKET at its agent.sock"
    )]
    Connect { path: PathBuf, cause: String },
    /// The supervisor refused by policy (PERMISSION_DENIED): exit 3.
    #[error("{0}")]
    Refused(String),
    #[error("could not {what}: {message}")]
    Rpc { what: &'static str, message: String },
    /// The session was revoked or killed: exit 3.
    #[error("session revoked: {0}")]
    Revoked(String),
    #[error("lost the connection to the supervisor: {0}")]
    Lost(String),
    #[error("{0}")]
    Protocol(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Demo(String),
    #[error("interrupted (ctrl-c)")]
    Interrupted,
}

impl AgentError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            AgentError::Refused(_) | AgentError::Revoked(_) => 3,
            AgentError::Connect { .. }
            | AgentError::Rpc { .. }
            | AgentError::Lost(_)
            | AgentError::Protocol(_)
            | AgentError::Io { .. }
            | AgentError::Demo(_)
            | AgentError::Interrupted => 1,
        }
    }
}
