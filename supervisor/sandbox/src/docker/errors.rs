//! Sorting bollard's errors into "the engine answered no" and "the engine is
//! not there".

use bollard::errors::Error;

/// The HTTP status of an error answer from the engine.
pub fn status_code(e: &Error) -> Option<u16> {
    match e {
        Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// True when the error says the engine could not be reached or the connection
/// broke (socket missing, refused, reset, timed out), rather than an answer.
pub fn is_engine_gone(e: &Error) -> bool {
    match e {
        Error::SocketNotFoundError(_)
        | Error::IOError { .. }
        | Error::HyperResponseError { .. }
        | Error::HyperLegacyError { .. }
        | Error::RequestTimeoutError => true,
        Error::DockerResponseServerError { .. } => false,
        _ => false,
    }
}
