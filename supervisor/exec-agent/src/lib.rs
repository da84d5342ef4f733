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

pub mod links;
pub mod wire;

mod agent;
mod posture;
mod procs;
mod spawn;
mod sys;

pub use agent::{End, run, run_guarding};
pub use posture::from_status as posture_from_status;

/// Where the binary is mounted inside every session container.
pub const CONTAINER_BINARY: &str = "/.tollgate/exec-agent";
/// Where the supervisor's socket is mounted inside every session container.
pub const CONTAINER_SOCKET: &str = "/.tollgate/agent.sock";
/// The binary's file name, next to the supervisor's own executable.
pub const BINARY_NAME: &str = "tollgate-exec-agent";

/// The binary's `main`: `tollgate-exec-agent --socket PATH
/// [--no-links-beneath DIR]...` (each DIR a git directory whose split the
/// commands must not undermine, [`links`]).
pub fn main_with_args(args: &[String]) -> i32 {
    let usage = || {
        eprintln!(
            "usage: {BINARY_NAME} --socket PATH [{} DIR]... (started by the supervisor as a container's pid 1, not by hand)",
            links::ARG
        );
        64
    };
    let [_, flag, path, rest @ ..] = args else {
        return usage();
    };
    if flag != "--socket" || rest.len() % 2 != 0 {
        return usage();
    }
    let mut guard = Vec::new();
    for pair in rest.chunks(2) {
        if pair[0] != links::ARG {
            return usage();
        }
        guard.push(std::path::PathBuf::from(&pair[1]));
    }
    run_guarding(std::path::Path::new(path), guard) as i32
}
