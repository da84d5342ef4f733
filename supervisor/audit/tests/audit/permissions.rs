//! An audit directory with the wrong permissions is refused, with a reason.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tollgate_audit::{Audit, AuditError, SyncMode};

use crate::common::{have_root, tmp};

fn refused(dir: &Path, group: Option<u32>) -> String {
    match Audit::open(dir, SyncMode::Always, group) {
        Err(AuditError::BadDirectory { path, reason }) => {
            assert_eq!(path, dir);
            reason
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn dir_with_mode(base: &Path, mode: u32) -> std::path::PathBuf {
    let d = base.join(format!("audit-{mode:o}"));
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

#[test]
fn world_writable_directory_is_refused() {
    let t = tmp();
    let d = dir_with_mode(t.path(), 0o777);
    let reason = refused(&d, None);
    assert_eq!(
        reason,
        format!(
            "mode 0777 lets group or others write to it; chmod 0700 {}",
            d.display()
        )
    );
    let err = Audit::open(&d, SyncMode::Always, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("audit directory {}: mode 0777", d.display())),
        "{err}"
    );
}

#[test]
fn group_writable_directory_is_refused() {
    let t = tmp();
    let d = dir_with_mode(t.path(), 0o770);
    assert!(refused(&d, None).starts_with("mode 0770 lets group or others write"));
}

#[test]
fn world_readable_directory_is_refused() {
    let t = tmp();
    let d = dir_with_mode(t.path(), 0o755);
    assert_eq!(
        refused(&d, None),
        format!(
            "mode 0755 lets others read or enter it; chmod 0700 {}",
            d.display()
        )
    );
    let d = dir_with_mode(t.path(), 0o701);
    assert!(refused(&d, Some(0)).contains("chmod 0750"));
}

#[test]
fn private_directories_are_accepted() {
    let t = tmp();
    for mode in [0o700, 0o750, 0o500] {
        let d = dir_with_mode(t.path(), mode);
        Audit::open(&d, SyncMode::Always, None).unwrap();
    }
}

#[test]
fn directory_owned_by_another_uid_is_refused() {
    if !have_root() {
        return;
    }
    let t = tmp();
    let d = dir_with_mode(t.path(), 0o700);
    std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
    let euid = nix::unistd::geteuid().as_raw();
    assert_eq!(
        refused(&d, None),
        format!(
            "is owned by uid 65534 but the supervisor runs as uid {euid}; chown {euid} {}",
            d.display()
        )
    );
}

#[test]
fn group_readable_by_the_wrong_group_is_refused() {
    if !have_root() {
        return;
    }
    let t = tmp();
    let d = dir_with_mode(t.path(), 0o750);
    std::os::unix::fs::chown(&d, None, Some(65534)).unwrap();
    assert_eq!(
        refused(&d, Some(4)),
        format!(
            "group 65534 may read it but the operator group is 4; chgrp 4 {}",
            d.display()
        )
    );
}

#[test]
fn symlink_and_non_directory_are_refused() {
    let t = tmp();
    let real = dir_with_mode(t.path(), 0o700);
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(
        refused(&link, None),
        "is a symlink; point the audit dir at the real directory"
    );
    let file = t.path().join("file");
    std::fs::write(&file, b"").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(refused(&file, None), "is not a directory");
}
