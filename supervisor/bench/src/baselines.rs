//! What people would use instead of us: a bare fork/exec, `unshare`,
//! `bwrap`. A tool that is not installed is a MISSING row, never dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{run_checked, run_quiet, time_blocking, warmup_for, which};
use super::stats::{Row, Unit};

pub const FORK_EXEC: &str = "base.fork_exec_true";
pub const UNSHARE: &str = "base.unshare_true";
pub const BWRAP: &str = "base.bwrap_true";

/// The bwrap line the native sandbox is compared with (docs/PERFORMANCE.md,
/// the `bwrap … true` baseline).
pub const BWRAP_ARGS: &[&str] = &[
    "--unshare-all",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
];

/// The same namespaces our native sandbox makes (pid, net, mount, ipc, uts),
/// with a fresh /proc.
pub const UNSHARE_ARGS: &[&str] = &[
    "--fork",
    "--pid",
    "--mount-proc",
    "--net",
    "--mount",
    "--ipc",
    "--uts",
];

/// Runs every process baseline (blocking; call inside `spawn_blocking`).
pub fn run(n: usize) -> Vec<Row> {
    let Some(truth) = which("true") else {
        let why = "no `true` on PATH";
        return vec![
            Row::missing(FORK_EXEC, "fork/exec `true`", Unit::Nanos, why),
            Row::missing(UNSHARE, "unshare … true", Unit::Nanos, why),
            Row::missing(BWRAP, "bwrap … true", Unit::Nanos, why),
        ];
    };
    vec![
        measure(
            FORK_EXEC,
            "fork/exec `true` (baseline)",
            Some(truth.clone()),
            &[],
            &truth,
            n,
            "install coreutils",
        ),
        measure(
            UNSHARE,
            "unshare … true (baseline)",
            which("unshare"),
            UNSHARE_ARGS,
            &truth,
            n,
            "install util-linux",
        ),
        measure(
            BWRAP,
            "bwrap … true (baseline)",
            which("bwrap"),
            BWRAP_ARGS,
            &truth,
            n,
            "install bubblewrap (apt-get install bubblewrap)",
        ),
    ]
}

fn measure(
    id: &str,
    name: &str,
    program: Option<PathBuf>,
    args: &[&str],
    truth: &Path,
    n: usize,
    hint: &str,
) -> Row {
    let Some(program) = program else {
        return Row::missing(id, name, Unit::Nanos, format!("not installed; {hint}"));
    };
    let cmd = || {
        let mut c = Command::new(&program);
        if program != truth {
            c.args(args).arg(truth);
        }
        c
    };
    // One run with stderr kept, so a failure says why (e.g. no user namespaces).
    if let Err(e) = run_checked(&mut cmd()) {
        return Row::failed(id, name, Unit::Nanos, format!("{e:#}"));
    }
    match time_blocking(warmup_for(n), n, |_| run_quiet(&mut cmd())) {
        Ok(s) => {
            let mut line = program.display().to_string();
            if program != truth {
                for a in args {
                    line.push(' ');
                    line.push_str(a);
                }
                line.push(' ');
                line.push_str(&truth.display().to_string());
            }
            Row::latency(id, name, &s).with_note(line)
        }
        Err(e) => Row::failed(id, name, Unit::Nanos, format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_is_not_installed_is_a_missing_row() {
        let r = measure(
            BWRAP,
            "bwrap … true",
            None,
            BWRAP_ARGS,
            Path::new("/bin/true"),
            5,
            "install it",
        );
        assert_eq!(
            r.status,
            super::super::stats::Status::Missing("not installed; install it".to_string())
        );
        assert_eq!(r.samples, 0);
        assert_eq!(r.median, None);
    }

    #[test]
    fn a_failing_tool_is_a_failed_row_with_its_stderr() {
        let Some(sh) = which("sh") else { return };
        let r = measure(
            "x",
            "x",
            Some(sh),
            &["-c", "echo nope >&2; exit 3", "sh"],
            Path::new("/bin/true"),
            5,
            "",
        );
        match r.status {
            super::super::stats::Status::Failed(why) => assert!(why.contains("nope"), "{why}"),
            other => panic!("expected a failed row, got {other:?}"),
        }
    }
}
