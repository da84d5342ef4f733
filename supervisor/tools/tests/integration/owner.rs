//! The tools run with the session owner's credentials, not the supervisor's.

use std::os::unix::fs::{MetadataExt, PermissionsExt, chown};

use tollgate_tools::{ToolError, Workspace};

use crate::common::{CAP, Fixture, require_root};

#[tokio::test]
async fn files_written_for_uid_65534_belong_to_65534() {
    if !require_root() {
        return;
    }
    let f = Fixture::new();
    assert_eq!((f.uid, f.gid), (65534, 65534));
    f.ws.write_file(&f.p("made/by/agent.txt"), "hi\n")
        .await
        .unwrap();
    for rel in ["made", "made/by", "made/by/agent.txt"] {
        let md = std::fs::metadata(f.p(rel)).unwrap();
        assert_eq!((md.uid(), md.gid()), (65534, 65534), "{rel}");
    }
    // An edit replaces the file with one the owner owns too.
    f.ws.edit_file(&f.p("made/by/agent.txt"), "hi", "ho", false)
        .await
        .unwrap();
    let md = std::fs::metadata(f.p("made/by/agent.txt")).unwrap();
    assert_eq!((md.uid(), md.gid()), (65534, 65534));
}

#[tokio::test]
async fn the_owners_permissions_apply_not_roots() {
    if !require_root() {
        return;
    }
    let f = Fixture::new();
    // A 0600 root-owned file inside the workspace: unreadable for uid 65534.
    let secret = f.p("root_only.txt");
    std::fs::write(&secret, "root's secret").unwrap();
    chown(&secret, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = f.ws.read_file(&secret, None, None, CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "permission denied: the session owner may not read root_only.txt"
    );
    let err =
        f.ws.edit_file(&secret, "root", "mine", false)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
    let err = f.ws.preview_write(&secret, "x", CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");

    // A root-owned 0644 file: readable, but not writable by the owner.
    let ro = f.p("root_ro.txt");
    std::fs::write(&ro, "read only").unwrap();
    chown(&ro, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = f.ws.read_file(&ro, None, None, CAP).await.unwrap();
    assert_eq!(out.text, "     1\tread only\n");
    let err = f.ws.write_file(&ro, "mine now").await.unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&ro).unwrap(), "read only");

    // A root-owned 0755 directory: nothing can be created in it.
    let locked = f.p("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err =
        f.ws.write_file(&f.p("locked/new.txt"), "x")
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
    let err =
        f.ws.write_file(&f.p("locked/sub/new.txt"), "x")
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
    assert_eq!(std::fs::read_dir(&locked).unwrap().count(), 0);

    // A directory the owner cannot search: grep and glob skip it silently,
    // they do not list it with root's eyes.
    let hidden = f.p("private");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::write(hidden.join("needle.txt"), "needle").unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = f.ws.glob_files("*.txt", None, CAP).await.unwrap();
    assert!(!out.text.contains("needle"), "{}", out.text);
    let out = f.ws.grep("needle", None, None, false, CAP).await.unwrap();
    assert!(!out.text.contains("private/needle.txt"), "{}", out.text);
}

#[tokio::test]
async fn root_groups_are_not_kept() {
    if !require_root() {
        return;
    }
    let f = Fixture::new();
    // Group-readable by gid 0 only: root's own group must not leak in.
    let p = f.p("group_root.txt");
    std::fs::write(&p, "group 0 only").unwrap();
    chown(&p, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = f.ws.read_file(&p, None, None, CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied { .. }), "{err}");
}

#[test]
fn workspace_open_wants_an_absolute_canonical_directory() {
    let f = Fixture::new();
    let (uid, gid) = (f.uid, f.gid);
    let err = Workspace::open(std::path::Path::new("relative/ws"), uid, gid).unwrap_err();
    assert!(err.to_string().contains("not absolute"), "{err}");
    let err = Workspace::open(&f.root.join("../ws"), uid, gid).unwrap_err();
    assert!(err.to_string().contains("not canonical"), "{err}");
    let file = f.file("plain.txt", "x");
    let err = Workspace::open(&file, uid, gid).unwrap_err();
    assert!(matches!(err, ToolError::Workspace { .. }), "{err}");
    let ws = Workspace::open(&f.root, uid, gid).unwrap();
    assert_eq!(ws.root(), f.root);
    assert_eq!((ws.uid(), ws.gid()), (uid, gid));
}

/// The daemon keeps a Workspace in a shared session and awaits the tools on
/// tokio worker threads: the handle must be Send + Sync, the futures Send.
#[test]
fn the_workspace_and_its_futures_can_cross_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let f = Fixture::new();
    send_sync(&f.ws);
    let p = f.p("x.txt");
    send(&f.ws.read_file(&p, None, None, CAP));
    send(&f.ws.write_file(&p, "x"));
    send(&f.ws.edit_file(&p, "a", "b", false));
    send(&f.ws.glob_files("*", None, CAP));
    send(&f.ws.grep("x", None, None, false, CAP));
    send(&f.ws.preview_write(&p, "x", CAP));
    send(&f.ws.preview_edit(&p, "a", "b", false, CAP));
    struct V;
    impl tollgate_tools::HopVetter for V {
        fn vet(&self, url: &str) -> Result<tollgate_policy::VettedFetch, String> {
            Err(url.to_string())
        }
        fn vet_peer(&self, ip: std::net::IpAddr) -> Result<(), String> {
            Err(ip.to_string())
        }
    }
    let first = tollgate_policy::VettedFetch {
        url: "http://a.test/".into(),
        host: "a.test".into(),
        addrs: vec![],
    };
    let limits = tollgate_tools::FetchLimits::default();
    send(&tollgate_tools::webfetch(&first, &limits, &V));
}
