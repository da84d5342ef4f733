//! tollgate-exec-agent: the resident exec agent of the Docker backend, and
//! the wire protocol it speaks with the supervisor.
//!
//! The agent is pid 1 of every session container, bind-mounted read-only from
//! the host (never from the image). It connects once to a Unix socket the
//! supervisor listens on, reports its own posture, then starts, streams and
//! kills commands as the supervisor asks, over that one connection ([`wire`]).
//! When the connection ends, it kills every process it started and exits, and
//! with it the container.
//!
//! It must never hold anything a command could use: it keeps no descriptor a
//! command inherits, is not dumpable (no /proc/<pid>/fd or mem for other
//! processes of the same uid), and trusts nothing it reads. It decides
//! nothing: the supervisor's policy already decided each command.
//!
//! Built twice: as a library of the workspace (the supervisor uses [`wire`];
//! the tests run here), and as a statically linked binary
//! (`--features static-bin`, see `supervisor/sandbox/build.rs`) that runs in
//! any image.

pub mod wire;

mod agent;
mod posture;
mod procs;
mod spawn;
mod sys;

pub use agent::{End, run};
pub use posture::from_status as posture_from_status;

/// Where the binary is mounted inside every session container.
pub const CONTAINER_BINARY: &str = "/.tollgate/exec-agent";
/// Where the supervisor's socket is mounted inside every session container.
pub const CONTAINER_SOCKET: &str = "/.tollgate/agent.sock";
/// The binary's file name, next to the supervisor's own executable.
pub const BINARY_NAME: &str = "tollgate-exec-agent";

/// The binary's `main`: `tollgate-exec-agent --socket PATH`.
pub fn main_with_args(args: &[String]) -> i32 {
    match args {
        [_, flag, path] if flag == "--socket" => run(std::path::Path::new(path)) as i32,
        _ => {
            eprintln!(
                "usage: {BINARY_NAME} --socket PATH (started by the supervisor as a container's pid 1, not by hand)"
            );
            64
        }
    }
}
