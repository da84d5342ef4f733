//! `supervisorctl sandbox exec` as the tests run it (docs/INTERFACES.md,
//! "supervisorctl sandbox exec"): one argv, for a command waited for or one
//! left running.

use std::path::Path;
use std::process::{Command, Output};

use crate::harness::Supervisor;

/// `supervisorctl sandbox exec --workspace WS --backend BACKEND -- ARGV…`,
/// not yet run.
pub fn sandbox_exec_cmd(sup: &Supervisor, ws: &Path, backend: &str, argv: &[&str]) -> Command {
    let mut c = sup.ctl_cmd();
    c.args(["sandbox", "exec", "--workspace"])
        .arg(ws)
        .args(["--backend", backend, "--"])
        .args(argv);
    c
}

/// The same, run to its end.
pub fn sandbox_exec(sup: &Supervisor, ws: &Path, backend: &str, argv: &[&str]) -> Output {
    sandbox_exec_cmd(sup, ws, backend, argv)
        .output()
        .expect("run supervisorctl sandbox exec")
}
