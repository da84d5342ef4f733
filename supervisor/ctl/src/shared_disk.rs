//! `doctor`'s checks of the audit directory's disk: whether it shares a
//! filesystem with places workspaces live (a session that fills a shared
//! filesystem leaves the audit log no room), and the state of its reserve.
//!
//! Workspaces are judged two ways, since doctor may run with no supervisor
//! up: the directories users usually keep them in ([`COMMON_ROOTS`]), and,
//! when the supervisor answers, the workspace of every active session.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::doctor::{Check, Status};
use tollgate_proto::v1 as pb;

/// Where users usually keep workspaces.
pub const COMMON_ROOTS: [&str; 5] = ["/home", "/root", "/tmp", "/var/tmp", "/srv"];

const MIB: u64 = 1 << 20;

/// The device of `path`, or of its nearest existing ancestor (an audit dir
/// not created yet will be created there).
fn device(path: &Path) -> Option<u64> {
    path.ancestors()
        .find_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.dev())
}

/// The places among `common` and `workspaces` on the audit dir's filesystem.
pub fn sharing(audit_dir: &Path, common: &[&str], workspaces: &[PathBuf]) -> Vec<String> {
    let Some(dev) = device(audit_dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = common
        .iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.dev() == dev))
        .map(|p| p.to_string())
        .collect();
    out.extend(
        workspaces
            .iter()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.dev() == dev))
            .map(|p| format!("workspace {}", p.display())),
    );
    out
}

/// `audit disk`: warns when the audit directory shares a filesystem with
/// workspaces.
pub fn check(audit_dir: &Path, workspaces: &[PathBuf], floor_mb: u64, reserve_mb: u64) -> Check {
    let shared = sharing(audit_dir, &COMMON_ROOTS, workspaces);
    let looked_at = format!(
        "{} and {} active session workspace(s)",
        COMMON_ROOTS.join(", "),
        workspaces.len()
    );
    if shared.is_empty() {
        return Check {
            name: "audit disk".to_string(),
            status: Status::Ok,
            detail: format!(
                "{} is on a filesystem of its own (looked at {looked_at})",
                audit_dir.display()
            ),
            hint: None,
        };
    }
    Check {
        name: "audit disk".to_string(),
        status: Status::Warn,
        detail: format!(
            "{} shares a filesystem with {}: a session that fills it leaves the audit log no room",
            audit_dir.display(),
            shared.join(", ")
        ),
        hint: Some(format!(
            "give the audit dir a filesystem of its own (a partition or a size-limited mount); meanwhile [sandbox] min_free_mb ({floor_mb} MiB) stops commands at the floor and [audit] reserve_mb ({reserve_mb} MiB) keeps room for refusals, revocations and shutdown"
        )),
    }
}

/// `audit reserve`: from the running supervisor's status.
pub fn reserve_check(s: &pb::StatusResponse) -> Check {
    let (held, target) = (
        s.audit_reserve_bytes / MIB,
        s.audit_reserve_target_bytes / MIB,
    );
    let (status, detail, hint) = if s.audit_reserve_target_bytes == 0 {
        (
            Status::Warn,
            "none: a full audit disk refuses revocations and anchors too".to_string(),
            Some("set [audit] reserve_mb (16 by default)"),
        )
    } else if s.audit_reserve_drawing {
        (
            Status::Fail,
            format!(
                "{held} of {target} MiB left and being drawn on: the audit disk is full; only refusals, revocations, anchors and shutdown are recorded"
            ),
            Some("free space on the audit filesystem"),
        )
    } else if held < target {
        (
            Status::Warn,
            format!("{held} of {target} MiB held: the audit disk has no room for the rest"),
            Some("free space on the audit filesystem"),
        )
    } else {
        (
            Status::Ok,
            format!("{held} MiB held in {}", s.audit_dir),
            None,
        )
    };
    Check {
        name: "audit reserve".to_string(),
        status,
        detail,
        hint: hint.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_on_the_audit_dirs_filesystem_is_named() {
        let t = tempfile::tempdir().unwrap();
        let audit = t.path().join("audit-not-created-yet");
        let ws = t.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let shared = sharing(&audit, &[], std::slice::from_ref(&ws));
        assert_eq!(shared, vec![format!("workspace {}", ws.display())]);
        let c = check(&audit, std::slice::from_ref(&ws), 256, 16);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("shares a filesystem"), "{}", c.detail);
        // /proc is never the audit dir's filesystem.
        assert!(sharing(&audit, &["/proc"], &[PathBuf::from("/proc")]).is_empty());
    }
}
