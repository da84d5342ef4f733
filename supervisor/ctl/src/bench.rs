//! `supervisorctl bench` runs `tollgate-bench` (built from supervisor/bench),
//! found beside this executable or on PATH ([`crate::sibling`]), with the
//! arguments as given: supervisorctl links no bench code, and the .deb ships
//! no bench (docs/INTERFACES.md, docs/PERFORMANCE.md).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;

use anyhow::anyhow;

/// The bench binary's name.
pub const BINARY: &str = "tollgate-bench";

/// The hidden subcommand of the bench's bare gRPC server, which the bench
/// starts from its own executable; supervisorctl hands it on.
pub const FLOOR_SUBCOMMAND: &str = "__grpc-floor";

/// Replaces this process with `tollgate-bench ARGS…` (its output and exit
/// code are the command's); returns only when it cannot be started.
pub fn exec(args: &[OsString]) -> anyhow::Error {
    let exe = match crate::sibling::find(BINARY) {
        Ok(exe) => exe,
        Err(not) => {
            return anyhow!(
                "bench needs {BINARY}, which is neither beside supervisorctl{} nor on PATH, hint: cargo build --release -p tollgate-bench (the .deb does not ship it)",
                not.beside()
            );
        }
    };
    let err = std::process::Command::new(&exe).args(args).exec();
    anyhow!("cannot run {}: {err}", exe.display())
}
