//! tollgate-launch: starts a supervisor process the way the end-to-end tests
//! and `supervisorctl bench` both need it (config, state and audit dirs on
//! the command line, stderr captured), and waits for its ready line
//! ([`tollgate_proto::ready`]). One copy of that for both; the supervisor
//! itself never depends on it.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_proto::ready::ReadyLine;

/// Everything a supervisor printed on stderr so far, line by line.
pub type StderrLog = Arc<Mutex<String>>;

/// Adds the supervisor's arguments (its config file, state and audit dirs)
/// to `cmd`, which runs the supervisor binary (or a wrapper around it),
/// with stdin and stdout closed, stderr piped for [`wait_ready`], and no
/// `TOLLGATE_CONFIG` inherited.
pub fn configure(cmd: &mut Command, config: &Path, state_dir: &Path, audit_dir: &Path) {
    cmd.arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("--audit-dir")
        .arg(audit_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("TOLLGATE_CONFIG");
}

/// Reads `child`'s stderr on a thread for as long as it prints (so it never
/// blocks on a full pipe), keeping every line in the returned log, and
/// waits up to `timeout` for the ready line. The line is `None` when the
/// supervisor closed stderr (exited) first, when the timeout passed, or
/// when its stderr was not piped.
pub fn wait_ready(child: &mut Child, timeout: Duration) -> (StderrLog, Option<String>) {
    let log: StderrLog = Arc::new(Mutex::new(String::new()));
    let Some(stderr) = child.stderr.take() else {
        return (log, None);
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if ReadyLine::is_ready(&line)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(line.clone());
            }
            if let Ok(mut l) = kept.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
    let ready = rx.recv_timeout(timeout).ok();
    (log, ready)
}

/// The text of `log`.
pub fn text(log: &StderrLog) -> String {
    log.lock().map(|l| l.clone()).unwrap_or_default()
}
