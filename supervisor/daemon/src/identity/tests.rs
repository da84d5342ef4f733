//! Each name-service path with users and groups that exist only in
//! Debian's libnss-extrausers (`/var/lib/extrausers`), never in /etc/passwd
//! or /etc/group. The outer test builds the fixture in a private mount
//! namespace (`unshare --mount`): a test-only /etc/nsswitch.conf
//! (`files extrausers`) and a test-only /var/lib/extrausers are bind-mounted
//! over the real ones, and this test binary runs again inside it with the
//! `nss_` tests, which are ignored outside. Nothing on the host changes.

use std::path::Path;
use std::process::Command;

use super::*;

const OWNER_UID: u32 = 61_234;
const OWNER_GID: u32 = 61_234;
const OTHER_UID: u32 = 61_235;
const OPS_GID: u32 = 61_300;
const MODULE: &str = "/usr/lib/libnss_extrausers.so.2";
/// Set inside the fixture.
const INSIDE: &str = "TOLLGATE_NSS_FIXTURE";

fn write_fixture(dir: &Path) {
    let eu = dir.join("extrausers");
    std::fs::create_dir(&eu).unwrap();
    std::fs::write(
        eu.join("passwd"),
        format!(
            "tgx-owner:x:{OWNER_UID}:{OWNER_GID}:from extrausers:/srv/tgx-owner-home:/bin/sh\n\
             tgx-other:x:{OTHER_UID}:{OTHER_UID}::/srv/tgx-other-home:/bin/sh\n"
        ),
    )
    .unwrap();
    std::fs::write(
        eu.join("group"),
        format!(
            "tgx-owner:x:{OWNER_GID}:\ntgx-other:x:{OTHER_UID}:\ntgx-ops:x:{OPS_GID}:tgx-owner\n"
        ),
    )
    .unwrap();
    std::fs::write(eu.join("shadow"), "").unwrap();
    std::fs::write(
        dir.join("nsswitch.conf"),
        "passwd: files extrausers\ngroup: files extrausers\nshadow: files\nhosts: files\n",
    )
    .unwrap();
}

/// Runs the `nss_` tests inside the fixture and requires all of them to pass.
#[test]
fn users_and_groups_from_a_name_service_other_than_files() {
    if std::env::var_os(INSIDE).is_some() {
        return;
    }
    if !nix::unistd::geteuid().is_root() || !Path::new(MODULE).exists() {
        assert!(
            std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() != Ok("1"),
            "needs root and libnss-extrausers ({MODULE})"
        );
        eprintln!("skipped: needs root and libnss-extrausers ({MODULE})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path());
    let exe = std::env::current_exe().unwrap();
    let script = "mount --bind \"$1/nsswitch.conf\" /etc/nsswitch.conf && \
                  mount --bind \"$1/extrausers\" /var/lib/extrausers && \
                  exec \"$2\" --ignored --test-threads 1 identity::tests::nss_";
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(dir.path())
        .arg(&exe)
        .env(INSIDE, "1")
        .output()
        .expect("run unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("test result: ok. 5 passed"), "{text}");
}

fn inside() {
    assert!(
        std::env::var_os(INSIDE).is_some(),
        "runs only inside the extrausers fixture"
    );
    // The users really are not in the files: the name service found them.
    assert!(
        !tollgate_policy::host::passwd()
            .iter()
            .any(|u| u.uid == OWNER_UID)
    );
}

#[test]
#[ignore = "runs inside the extrausers fixture"]
fn nss_user_and_home() {
    inside();
    let u = user(OWNER_UID).expect("tgx-owner through NSS");
    assert_eq!(
        (u.name.as_str(), u.gid, u.home.as_path()),
        ("tgx-owner", OWNER_GID, Path::new("/srv/tgx-owner-home"))
    );
    assert_eq!(user(61_299), None);
}

#[test]
#[ignore = "runs inside the extrausers fixture"]
fn nss_group_by_name() {
    inside();
    assert_eq!(group_gid("tgx-ops"), Some(OPS_GID));
    assert_eq!(group_gid("tgx-no-such-group"), None);
}

#[test]
#[ignore = "runs inside the extrausers fixture"]
fn nss_operator_group_membership() {
    inside();
    // A supplementary member, though the peer's own gid is another.
    assert!(in_group(OWNER_UID, OWNER_GID, OPS_GID));
    assert!(!in_group(OTHER_UID, OTHER_UID, OPS_GID));
    // The peer's primary group counts by itself.
    assert!(in_group(OTHER_UID, OPS_GID, OPS_GID));
    // An unknown uid is in no group but its own.
    assert!(!in_group(61_299, 61_299, OPS_GID));
}

#[test]
#[ignore = "runs inside the extrausers fixture"]
fn nss_session_owner_and_credentials() {
    inside();
    let users = users_with(OWNER_UID);
    let owner = crate::backends::SandboxOwner::of(&users, OWNER_UID, 1);
    assert_eq!(owner.name, "tgx-owner");
    assert_eq!(owner.gid, OWNER_GID);
    assert_eq!(
        owner.home.as_deref(),
        Some(Path::new("/srv/tgx-owner-home"))
    );
    // The owner's credential files are hidden like any /etc/passwd user's.
    let creds = tollgate_policy::host::credential_paths(&users);
    assert!(
        creds.iter().any(|p| p.starts_with("/srv/tgx-owner-home")),
        "{creds:?}"
    );
    // The floor stays: /etc/passwd's users are all there.
    assert!(users.iter().any(|u| u.uid == 0));
}

#[test]
#[ignore = "runs inside the extrausers fixture"]
fn nss_other_users_are_not_enumerated() {
    inside();
    // Only the asked-for uid is added: the table's floor is /etc/passwd.
    let users = users_with(OWNER_UID);
    assert!(!users.iter().any(|u| u.uid == OTHER_UID));
}
