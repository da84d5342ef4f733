//! The audit disk and the shared disk, end to end on real tmpfs mounts
//! (docs/OPERATIONS.md, "The audit disk and shared disks"):
//!
//! - a sandboxed loop of `fallocate`, `dd` and `head -c` on a filesystem it
//!   shares with the audit directory is stopped at the floor
//!   (`[sandbox] min_free_mb`) on both backends, the session is told why,
//!   and a new session of another user still opens and is recorded;
//! - on a full audit disk, refused sessions leave no file behind, refusals
//!   are counted and logged (rate-limited), a session closed meanwhile is
//!   named unanchored by `audit verify`, and its anchor is written once
//!   there is room.
//!
//! Every mount is undone by a guard, also when an assertion fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::harness::{Dirs, OTHER_UID, Supervisor, authed, read_records, root_or_skip};
use tollgate_proto::v1 as pb;

/// A tmpfs of `size` mounted on a fresh temporary directory; unmounted (then
/// the directory removed) on drop. Drop the supervisor using it first.
struct Disk {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Disk {
    fn new(size: &str) -> Disk {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-e2e-disk-")
            .tempdir()
            .unwrap();
        // Other uids reach their workspaces through it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0755"))
            .arg("tmpfs")
            .arg(&mnt)
            .status()
            .unwrap();
        assert!(ok.success(), "mount a tmpfs on {}", mnt.display());
        Disk { mnt, _dir: dir }
    }

    /// A directory on the tmpfs owned by `uid` (a workspace).
    fn workspace(&self, name: &str, uid: u32) -> PathBuf {
        let ws = self.mnt.join(name);
        std::fs::create_dir(&ws).unwrap();
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
        nix::unistd::chown(
            &ws,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(uid)),
        )
        .unwrap();
        ws
    }

    fn free_mb(&self) -> u64 {
        let s = nix::sys::statvfs::statvfs(&self.mnt).unwrap();
        (s.blocks_available() as u64 * s.fragment_size() as u64) >> 20
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("umount {} failed", self.mnt.display());
        }
    }
}

async fn open(sup: &Supervisor, ws: &Path, mode: &str) -> pb::OpenSessionResponse {
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: mode.to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// `e2e-client` as `uid`; its one line of output.
fn client_as(uid: u32, sup: &Supervisor, token: &str, args: &[&str]) -> String {
    let out = Command::new(sup.dirs.staged_bin("e2e-client"))
        .arg(&sup.agent_socket)
        .arg(token)
        .args(args)
        .uid(uid)
        .gid(uid)
        .output()
        .expect("run e2e-client");
    assert!(
        out.status.success(),
        "e2e-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A tool call made as `uid`: the response as e2e-client prints it.
fn call_as(uid: u32, sup: &Supervisor, token: &str, tool: &str, args: Value) -> Value {
    let line = client_as(uid, sup, token, &["call", tool, &args.to_string()]);
    let json = line
        .strip_prefix("OK ")
        .unwrap_or_else(|| panic!("call {tool} as uid {uid}: {line}"));
    serde_json::from_str(json).unwrap()
}

fn status(sup: &Supervisor) -> Value {
    let out = sup.ctl(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn supervisor_records(sup: &Supervisor) -> Vec<Value> {
    sup.audit_files("supervisor-")
        .iter()
        .flat_map(|p| read_records(p))
        .collect()
}

/// Writes 4 MiB files three ways, forever (each file within `fsize_mb`, so
/// only the floor can stop it). In a script: the policy does not read
/// scripts, so what stops it is the supervisor's watch, not a rule.
const FILL: &str = "i=0\nwhile :; do\n  fallocate -l 4M a$i\n  dd if=/dev/zero of=b$i bs=1M count=4 2>/dev/null\n  head -c 4194304 /dev/zero > c$i\n  i=$((i+1))\ndone\n";

/// Opens a session as `uid` through e2e-client: (id, token).
fn open_as(uid: u32, sup: &Supervisor, ws: &Path, mode: &str) -> (String, String) {
    let line = client_as(uid, sup, "-", &["open", ws.to_str().unwrap(), mode]);
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("OK"), "{line}");
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

/// The disk floor on one backend, the filling session owned by `filler` and the
/// newcomer by `other`. The tmpfs holds the audit directory and both
/// workspaces; the floor is 192 of its 320 MiB, so a writer that overshoots
/// the floor between two looks (20 ms apart) still leaves room.
async fn filling_the_shared_disk_stops_at_the_floor(
    backend: &str,
    image: Option<&str>,
    filler: u32,
    other: u32,
) {
    let disk = Disk::new("320m");
    let ws = disk.workspace("ws", filler);
    let ws2 = disk.workspace("ws2", other);
    std::fs::write(ws.join("fill.sh"), FILL).unwrap();
    std::fs::write(ws2.join("notes.txt"), "notes\n").unwrap();
    let mut dirs = Dirs::new();
    dirs.audit = disk.mnt.join("audit");
    let image_line = image
        .map(|i| format!("image = \"{i}\"\n"))
        .unwrap_or_default();
    let config = format!(
        "[sandbox]\nmin_free_mb = 192\nfsize_mb = 4\ntmp_mb = 16\nrun_timeout_s = 60\nmax_run_timeout_s = 60\n{image_line}\n[audit]\nreserve_mb = 8\n\n[session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\n"
    );
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox(backend)
        .dirs(dirs)
        .start();
    let st = status(&sup);
    assert_eq!(st["disk_min_free_mb"], 192);
    assert_eq!(st["audit_reserve_bytes"], 8 << 20, "{st}");
    if backend == "docker" {
        let strength = st["sandbox_strength"].as_str().unwrap_or("");
        if strength.contains("MISSING") {
            let why = format!("docker backend unavailable: {strength}");
            assert!(
                std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    }

    // The filler: stopped at the floor, told why.
    let (a_id, a_token) = open_as(filler, &sup, &ws, "dangerouslySkipPermissions");
    let call =
        |uid: u32, token: &str, tool: &str, args: Value| call_as(uid, &sup, token, tool, args);
    let r = call(
        filler,
        &a_token,
        "run_bash",
        json!({"command": "sh fill.sh", "timeout_s": 60}),
    );
    assert_eq!(r["denied"]["code"], "POLICY_DENIED", "not stopped: {r}");
    assert_eq!(r["denied"]["rule"], "floor:disk", "{r}");
    let reason = r["denied"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the command was stopped: the filesystem of workspace"),
        "{reason}"
    );
    assert!(reason.contains("[sandbox] min_free_mb"), "{reason}");
    let free = disk.free_mb();
    assert!(free < 192, "the fill stopped early: {free} MiB free");
    assert!(free > 0, "the floor did not hold: the disk is full");
    let recs = sup.session_records(&a_id);
    let result = recs
        .iter()
        .find(|e| e["event"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["status"], "stopped", "{result}");
    assert_eq!(result["stopped"]["rule"], "floor:disk", "{result}");
    assert!(
        recs.iter().any(|e| e["event"] == "disk_floor_stop"),
        "no disk_floor_stop in the session's log: {recs:?}"
    );
    assert!(
        supervisor_records(&sup)
            .iter()
            .any(|e| e["event"] == "disk_floor_stop" && e["session"] == a_id.as_str()),
        "no disk_floor_stop in the supervisor log"
    );
    // The sandbox is gone: nothing of the filler keeps writing.
    let after_stop = disk.free_mb();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(disk.free_mb(), after_stop, "something still writes");

    // New commands and file writes are refused, with the reason.
    for (tool, args) in [
        ("run_bash", json!({"command": "true"})),
        ("write_file", json!({"path": "x.txt", "content": "x"})),
    ] {
        let r = call(filler, &a_token, tool, args);
        assert_eq!(
            (&r["denied"]["code"], &r["denied"]["rule"]),
            (&json!("POLICY_DENIED"), &json!("floor:disk")),
            "{tool} under the floor: {r}"
        );
        assert!(
            r["denied"]["reason"]
                .as_str()
                .unwrap()
                .contains("are refused"),
            "{r}"
        );
    }
    // Reading still works.
    let r = call(filler, &a_token, "read_file", json!({"path": "fill.sh"}));
    assert_eq!(r["ok"], true, "{r}");

    // Another user's new session opens; its refusal and its revocation
    // are recorded.
    let (b_id, b_token) = open_as(other, &sup, &ws2, "");
    let r = call(other, &b_token, "run_bash", json!({"command": "echo hi"}));
    assert_eq!(r["denied"]["rule"], "floor:disk", "{r}");
    let r = call(other, &b_token, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        sup.ctl(&["revoke", &b_id, "--reason", "cleanup"])
            .status
            .success()
    );
    let b = sup.session_records(&b_id);
    let kinds: Vec<&str> = b.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        b.iter().any(|e| e["event"] == "permission_check"
            && e["decision"] == "deny"
            && e["rule"] == "floor:disk"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"session_revoked"), "{kinds:?}");
    let b_file = sup.audit_files(&format!("audit-{b_id}-")).remove(0);
    let b_name = b_file.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        supervisor_records(&sup)
            .iter()
            .any(|e| e["event"] == "audit_file_closed" && e["file"] == b_name.as_str()),
        "no anchor for {b_name}"
    );

    // Room again: the session's commands run again (in a new sandbox).
    for entry in std::fs::read_dir(&ws).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name().is_some_and(|n| n != "fill.sh") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let r = call(
        filler,
        &a_token,
        "run_bash",
        json!({"command": "echo back"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["output"].as_str().unwrap().contains("back"), "{r}");
    let out = sup.ctl(&["audit", "verify", sup.dirs.audit.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_shared_disk_stops_at_the_floor_native() {
    if !root_or_skip("filling_the_shared_disk_stops_at_the_floor_native") {
        return;
    }
    filling_the_shared_disk_stops_at_the_floor("native", None, 0, OTHER_UID).await;
}

/// The same with a non-root session filling the disk (and root the newcomer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_shared_disk_stops_at_the_floor_native_non_root() {
    if !root_or_skip("filling_the_shared_disk_stops_at_the_floor_native_non_root") {
        return;
    }
    filling_the_shared_disk_stops_at_the_floor("native", None, OTHER_UID, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_shared_disk_stops_at_the_floor_docker() {
    if !root_or_skip("filling_the_shared_disk_stops_at_the_floor_docker") {
        return;
    }
    if !Path::new("/var/run/docker.sock").exists() {
        assert!(
            std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "no docker engine at /var/run/docker.sock"
        );
        eprintln!("skipped: needs docker");
        return;
    }
    filling_the_shared_disk_stops_at_the_floor(
        "docker",
        Some("tollgate-sandbox:0.1.0-minimal"),
        0,
        OTHER_UID,
    )
    .await;
}

/// Fills the filesystem of `dir` until not one more byte fits; returns the
/// filler (remove it to make room again).
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    for chunk in [64 * 1024, 4096, 1] {
        let block = vec![0u8; chunk];
        while f.write_all(&block).is_ok() {}
    }
    filler
}

/// Files in `dir` (not its hidden reserve) and whether any is empty.
fn audit_dir_files(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Polls `f` (a liveness guard, not a timing assertion).
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A full audit disk. The audit directory is a 1 MiB tmpfs (no room for a reserve:
/// `reserve_mb = 0`), filled to the last byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_audit_disk_leaves_no_empty_file_and_anchors_come_later() {
    if !root_or_skip("a_full_audit_disk_leaves_no_empty_file_and_anchors_come_later") {
        return;
    }
    let disk = Disk::new("1m");
    let mut dirs = Dirs::new();
    dirs.audit = disk.mnt.join("audit");
    let audit = dirs.audit.clone();
    let sup = Supervisor::builder()
        .config("[audit]\nreserve_mb = 0\n\n[session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\n")
        .dirs(dirs)
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let mut open_sessions = Vec::new();
    for _ in 0..8 {
        let s = open(&sup, &ws, "default").await;
        assert!(
            sup.call_tool(&s.token, "read_file", json!({"path": "a.txt"}))
                .await
                .ok
        );
        open_sessions.push(s);
    }
    let filler = fill(&disk.mnt);
    let before = audit_dir_files(&audit);

    // Refused sessions leave nothing behind.
    let mut c = sup.agent_client().await;
    for _ in 0..25 {
        let err = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert!(
            err.message().starts_with("AUDIT_UNAVAILABLE"),
            "{}",
            err.message()
        );
    }
    // The same files (the supervisor log may have grown: the refusals are
    // recorded in what is left of its last page), none empty.
    let now = audit_dir_files(&audit);
    assert_eq!(
        now.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        before.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "a refused session left a file"
    );
    assert!(now.iter().all(|(_, len)| *len > 0), "empty file: {now:?}");
    let st = status(&sup);
    assert!(st["audit_refusals"].as_u64().unwrap() >= 25, "{st}");
    // The refusals reach the supervisor's log, the first few one by one.
    let logged = |sup: &Supervisor| {
        sup.stderr()
            .lines()
            .filter(|l| l.contains("refused: the audit log cannot be written (AUDIT_UNAVAILABLE)"))
            .count()
    };
    assert!((1..=5).contains(&logged(&sup)), "{}", sup.stderr());

    // Sessions closed while the disk is full: some cannot be anchored.
    for s in &open_sessions {
        let mut c = sup.agent_client().await;
        c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
            .await
            .unwrap();
    }
    let st = status(&sup);
    let unanchored: Vec<String> = st["audit_unanchored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(!unanchored.is_empty(), "every anchor fitted: {st}");
    let out = sup.ctl(&["audit", "verify", audit.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    for f in &unanchored {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{f}: unanchored: "))),
            "{f} not named unanchored:\n{text}"
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unanchored"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Room again: the anchors are written, late, and everything verifies.
    std::fs::remove_file(&filler).unwrap();
    wait_for("the late anchors", Duration::from_secs(30), || {
        status(&sup)["audit_unanchored"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    });
    let late: Vec<Value> = supervisor_records(&sup)
        .into_iter()
        .filter(|e| e["event"] == "audit_file_closed" && e["late"] == true)
        .collect();
    assert_eq!(late.len(), unanchored.len(), "{late:?}");
    let out = sup.ctl(&["audit", "verify", audit.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("unanchored"), "{text}");
    for f in &unanchored {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{f}: ok: "))
                && l.ends_with("(head matches the anchor)")),
            "{f}:\n{text}"
        );
    }
    assert!(
        audit_dir_files(&audit).iter().all(|(_, len)| *len > 0),
        "an empty file is left"
    );
    // After the interval, the refusals not logged one by one are summed up.
    wait_for("the refusal summary", Duration::from_secs(30), || {
        sup.stderr().contains("more calls in the last 10s")
    });
    drop(sup);
}

fn doctor(sup: &Supervisor) -> String {
    let out = sup
        .ctl_cmd()
        .arg("doctor")
        .env("TOLLGATE_CONFIG", &sup.config_path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Doctor says when the audit directory shares a filesystem with
/// a workspace (here an active session's, on the audit dir's own tmpfs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_warns_when_the_audit_dir_shares_a_filesystem_with_a_workspace() {
    if !root_or_skip("doctor_warns_when_the_audit_dir_shares_a_filesystem_with_a_workspace") {
        return;
    }
    let disk = Disk::new("64m");
    let mut dirs = Dirs::new();
    dirs.audit = disk.mnt.join("audit");
    let sup = Supervisor::builder().dirs(dirs).start();
    let text = doctor(&sup);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no {name} line:\n{text}"))
            .to_string()
    };
    assert!(line("audit disk").starts_with("ok "), "{text}");
    assert!(
        line("audit reserve").starts_with("ok   audit reserve: 16 MiB held"),
        "{text}"
    );
    let ws = disk.workspace("ws", 0);
    let _s = open(&sup, &ws, "default").await;
    let text = doctor(&sup);
    let shared = text
        .lines()
        .find(|l| l.contains(" audit disk: "))
        .unwrap_or_else(|| panic!("no audit disk line:\n{text}"));
    assert!(shared.starts_with("warn "), "{shared}");
    assert!(
        shared.contains(&format!(
            "shares a filesystem with workspace {}",
            ws.display()
        )),
        "{shared}"
    );
    assert!(
        shared.contains("[sandbox] min_free_mb (256 MiB)"),
        "{shared}"
    );
    drop(sup);
}

/// The reserve: on a full audit disk, refusals, revocations and
/// their anchors are still recorded (drawn from `[audit] reserve_mb` once the
/// last pages are used up) while everything else is refused; once there is
/// room the reserve grows back and sessions open again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_audit_disk_still_records_refusals_and_revocations_from_the_reserve() {
    if !root_or_skip("a_full_audit_disk_still_records_refusals_and_revocations_from_the_reserve") {
        return;
    }
    let disk = Disk::new("4m");
    let mut dirs = Dirs::new();
    dirs.audit = disk.mnt.join("audit");
    let audit = dirs.audit.clone();
    let sup = Supervisor::builder()
        .config("[audit]\nreserve_mb = 1\n\n[session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\n")
        .dirs(dirs)
        .start();
    assert_eq!(status(&sup)["audit_reserve_bytes"], 1 << 20);
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let s = open(&sup, &ws, "default").await;
        assert!(
            sup.call_tool(&s.token, "read_file", json!({"path": "a.txt"}))
                .await
                .ok
        );
        sessions.push(s);
    }
    let filler = fill(&disk.mnt);
    let names = |files: Vec<(String, u64)>| files.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let before = names(audit_dir_files(&audit));

    // Ordinary records are refused (the last page of the file may hold a
    // few first) ...
    let mut denied = None;
    for _ in 0..50 {
        let r = sup
            .call_tool(&sessions[0].token, "read_file", json!({"path": "a.txt"}))
            .await;
        if let Some(d) = r.denied {
            denied = Some(d);
            break;
        }
    }
    let d = denied.expect("refused once the disk is full");
    assert_eq!(d.code(), pb::DenialCode::AuditUnavailable, "{d:?}");
    let mut c = sup.agent_client().await;
    for _ in 0..10 {
        let err = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(
            err.message().starts_with("AUDIT_UNAVAILABLE"),
            "{}",
            err.message()
        );
    }
    assert!(status(&sup)["audit_refusals"].as_u64().unwrap() >= 11);
    // ... but the refusals are on record, the first few one by one.
    let refused: Vec<Value> = supervisor_records(&sup)
        .into_iter()
        .filter(|e| e["event"] == "audit_refused")
        .collect();
    assert!((1..=5).contains(&refused.len()), "{refused:?}");
    assert!(refused.iter().all(|e| e["what"].is_string()), "{refused:?}");

    // Revocations and their anchors are recorded too: more than the log's
    // last page holds, so the reserve gives for them.
    for s in &sessions {
        assert!(sup.ctl(&["revoke", &s.session_id]).status.success());
    }
    let st = status(&sup);
    assert_eq!(st["audit_reserve_drawing"], true, "{st}");
    assert!(
        st["audit_reserve_bytes"].as_u64().unwrap() < 1 << 20,
        "{st}"
    );
    assert_eq!(st["audit_unanchored"], json!([]), "{st}");
    let sup_recs = supervisor_records(&sup);
    for s in &sessions {
        let recs = sup.session_records(&s.session_id);
        assert!(
            recs.iter().any(|e| e["event"] == "session_revoked"),
            "{recs:?}"
        );
        let file = sup
            .audit_files(&format!("audit-{}-", s.session_id))
            .remove(0);
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            sup_recs.iter().any(|e| e["event"] == "audit_file_closed"
                && e["file"] == name.as_str()
                && e.get("late").is_none()),
            "no anchor for {name}"
        );
    }
    // While it gives, everything else is refused, saying why.
    let err = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("kept for refusals, revocations and shutdown"),
        "{}",
        err.message()
    );
    // No refused session left a file.
    assert_eq!(names(audit_dir_files(&audit)), before);

    // Room again: the reserve grows back, and sessions open.
    std::fs::remove_file(&filler).unwrap();
    wait_for("the reserve to grow back", Duration::from_secs(30), || {
        let st = status(&sup);
        st["audit_reserve_drawing"] == false && st["audit_reserve_bytes"] == 1 << 20
    });
    let s2 = open(&sup, &ws, "default").await;
    assert!(
        sup.call_tool(&s2.token, "read_file", json!({"path": "a.txt"}))
            .await
            .ok
    );
    c.close_session(authed(pb::CloseSessionRequest {}, &s2.token))
        .await
        .unwrap();
    let out = sup.ctl(&["audit", "verify", audit.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("unanchored"), "{text}");
    // The refusals not recorded one by one are summed up in a record.
    wait_for(
        "the refusal summary record",
        Duration::from_secs(30),
        || {
            supervisor_records(&sup)
                .iter()
                .any(|e| e["event"] == "audit_refused" && e["more"].as_u64().is_some_and(|m| m > 0))
        },
    );
    drop(sup);
}

/// The operator's `sandbox exec` wrote its record with `let _ =`, so on a
/// full audit disk the command ran unrecorded. A refusal to record is a
/// refusal to run: the command is refused, saying why, and does not run.
#[test]
fn sandbox_exec_does_not_run_when_its_record_cannot_be_written() {
    if !root_or_skip("sandbox_exec_does_not_run_when_its_record_cannot_be_written") {
        return;
    }
    let disk = Disk::new("4m");
    let mut dirs = Dirs::new();
    dirs.audit = disk.mnt.join("audit");
    let sup = Supervisor::builder()
        .config("[audit]\nreserve_mb = 1\n")
        .sandbox("native")
        .dirs(dirs)
        .start();
    // The workspace is not on the full disk: only the record is refused.
    let ws = sup.dirs.workspace("ws", 0);
    let ws_arg = ws.display().to_string();
    let _filler = fill(&disk.mnt);
    let mut refused = None;
    // The log's last page may still take a record or two.
    for i in 0..50 {
        let marker = format!("ran-{i}");
        let out = sup.ctl(&[
            "sandbox",
            "exec",
            "--workspace",
            &ws_arg,
            "--backend",
            "native",
            "--",
            "touch",
            &marker,
        ]);
        let ran = ws.join(&marker).exists();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            assert!(ran, "recorded but did not run: {stderr}");
            continue;
        }
        assert!(!ran, "the command ran unrecorded: {stderr}");
        assert!(
            stderr.contains("AUDIT_UNAVAILABLE") && stderr.contains("not run"),
            "{stderr}"
        );
        refused = Some(stderr);
        break;
    }
    let stderr = refused.expect("sandbox exec refused once the audit disk is full");
    eprintln!("refused: {stderr}");
    assert!(status(&sup)["audit_refusals"].as_u64().unwrap() >= 1);
}
