//! The native sandbox's /etc while the host changes it (docs/THREAT_MODEL.md,
//! "run_bash", native backend): a file the host replaces by a rename (as
//! `useradd` replaces /etc/passwd) is read, new content and all, by the
//! next command of a sandbox already running, while every withheld path
//! stays unreadable: the ones there at the start, names created since
//! (`*.key`, `*secret*`, the `shadow+`/`sudoers.tmp` kind a rewrite passes
//! through, a host key), and symlinks made to reach them (through /etc, or
//! through a workspace link the sandbox points at /etc/shadow). A
//! background process started before keeps its narrowed view.
//!
//! Each test holds [`passwd_writer`]: it replaces /etc/passwd (the same
//! entries, plus a comment line naming the test), and puts it back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate_e2e::harness::{Supervisor, TEST_CONFIG, passwd_writer, root_or_skip};

/// What the host put in /etc for one test, undone when dropped.
struct HostEtc {
    original: Vec<u8>,
    created: Vec<PathBuf>,
    tag: String,
    /// Last, so it is released after `drop` put /etc/passwd back.
    _passwd: std::sync::MutexGuard<'static, ()>,
}

impl HostEtc {
    fn new(test: &str) -> HostEtc {
        let passwd = passwd_writer();
        HostEtc {
            original: std::fs::read("/etc/passwd").unwrap(),
            created: Vec::new(),
            tag: format!("tollgate-e2e-{}-{test}", std::process::id()),
            _passwd: passwd,
        }
    }

    /// Replaces /etc/passwd as `useradd` does: a new file, renamed over
    /// it. `note`: a comment line after the entries (NSS skips it).
    fn replace_passwd(&self, note: Option<&str>) {
        let mut text = self.original.clone();
        if let Some(n) = note {
            text.extend_from_slice(format!("# {n}\n").as_bytes());
        }
        let meta = std::fs::metadata("/etc/passwd").unwrap();
        let tmp = PathBuf::from(format!("/etc/.{}-passwd", self.tag));
        std::fs::write(&tmp, &text).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
            .unwrap();
        std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid())).unwrap();
        std::fs::rename(&tmp, "/etc/passwd").unwrap();
    }

    /// A world-readable file in /etc: only the sandbox can hide it.
    fn create(&mut self, rel: &str, text: &str) -> PathBuf {
        let p = Path::new("/etc").join(rel);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        self.created.push(p.clone());
        p
    }

    fn symlink(&mut self, rel: &str, target: &str) {
        let p = Path::new("/etc").join(rel);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p).unwrap();
        self.created.push(p);
    }
}

impl Drop for HostEtc {
    fn drop(&mut self) {
        for p in &self.created {
            let _ = std::fs::remove_file(p);
        }
        self.replace_passwd(None);
    }
}

/// The files one test plants, by name: withheld ones and readable ones.
struct Plan {
    withheld: Vec<String>,
    readable: Vec<String>,
}

impl Plan {
    fn of(etc: &HostEtc) -> Plan {
        let t = &etc.tag;
        let mut withheld = vec![
            format!("/etc/{t}.key"),
            format!("/etc/{t}-secret"),
            format!("/etc/shadow.{t}"),
            format!("/etc/sudoers.{t}"),
            format!("/etc/{t}-to-shadow"),
            format!("/etc/{t}-to-key"),
            format!("/etc/{t}-to-ws"),
        ];
        if Path::new("/etc/ssh").is_dir() {
            withheld.push(format!("/etc/ssh/ssh_host_{t}_key"));
            withheld.push(format!("/etc/{t}-ssh/ssh_host_{t}_key"));
        }
        let readable = vec![format!("/etc/{t}.conf"), format!("/etc/{t}-to-conf")];
        Plan { withheld, readable }
    }

    /// Plants every file, the links to them, and the link into the
    /// workspace (`inner`, which the probe points at /etc/shadow).
    fn plant(&self, etc: &mut HostEtc, ws: &Path) {
        let t = etc.tag.clone();
        for name in [
            format!("{t}.key"),
            format!("{t}-secret"),
            format!("shadow.{t}"),
            format!("sudoers.{t}"),
            format!("{t}.conf"),
        ] {
            etc.create(&name, &format!("{name} content\n"));
        }
        if Path::new("/etc/ssh").is_dir() {
            let key = format!("ssh/ssh_host_{t}_key");
            etc.create(&key, &format!("{key} content\n"));
            etc.symlink(&format!("{t}-ssh"), "ssh");
        }
        etc.symlink(&format!("{t}-to-shadow"), "shadow");
        etc.symlink(&format!("{t}-to-key"), &format!("{t}.key"));
        etc.symlink(&format!("{t}-to-conf"), &format!("{t}.conf"));
        let inner = ws.join("inner");
        etc.symlink(&format!("{t}-to-ws"), inner.to_str().unwrap());
    }
}

/// The probe: `READ path sha256` for each path it can read (not empty),
/// `NOREAD path` for the others. Run as a script: the policy does not read
/// inside scripts, so only the sandbox stands in its way. It first points
/// the workspace's `inner` at /etc/shadow (the target of one of /etc's
/// links).
fn write_probe(ws: &Path, plan: &Plan) {
    let paths: Vec<String> = plan
        .withheld
        .iter()
        .chain(&plan.readable)
        .map(|p| format!("'{p}'"))
        .collect();
    let script = format!(
        r#"h() {{ if [ -s "$1" ] && v=$(sha256sum < "$1" 2>/dev/null); then echo "READ $1 ${{v%% *}}"; else echo "NOREAD $1"; fi; }}
ln -sfn /etc/shadow inner
for p in /etc/passwd /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow- /etc/sudoers /etc/sudoers.d/* /etc/ssh/ssh_host_* /etc/ssl/private/* {paths}; do h "$p"; done
echo probe-done
"#,
        paths = paths.join(" ")
    );
    std::fs::write(ws.join("probe.sh"), script).unwrap();
}

/// One probe's view: path to hash of what it read.
fn parse(out: &str, what: &str) -> BTreeMap<String, String> {
    assert!(out.contains("probe-done"), "{what}: no probe-done:\n{out}");
    out.lines()
        .filter_map(|l| l.strip_prefix("READ "))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(p, h)| (p.to_string(), h.to_string()))
        .collect()
}

/// The probe on the host, as root: what a missing wall would show.
fn control(ws: &Path) -> BTreeMap<String, String> {
    let out = Command::new("sh")
        .arg("probe.sh")
        .current_dir(ws)
        .output()
        .unwrap();
    parse(&String::from_utf8_lossy(&out.stdout), "host control")
}

/// The hashes of everything withheld, as the host reads them.
fn withheld_hashes(host: &BTreeMap<String, String>, plan: &Plan) -> BTreeSet<String> {
    host.iter()
        .filter(|(p, _)| {
            p.as_str() != "/etc/passwd"
                && !p.ends_with(".pub")
                && !plan.readable.iter().any(|r| r == *p)
        })
        .map(|(_, h)| h.clone())
        .collect()
}

/// No withheld content read inside.
fn assert_nothing_withheld(
    inside: &BTreeMap<String, String>,
    secret: &BTreeSet<String>,
    what: &str,
) {
    let leaked: Vec<_> = inside.iter().filter(|(_, h)| secret.contains(*h)).collect();
    assert!(
        leaked.is_empty(),
        "{what}: withheld content read inside: {leaked:?}"
    );
}

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sha256(path: &str) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace().next().unwrap().to_string()
}

/// A native supervisor, `[sandbox] attribute_refusals = mode`.
fn supervisor(test: &str, mode: &str) -> Option<Supervisor> {
    if !root_or_skip(test) {
        return None;
    }
    let config = format!(
        "{TEST_CONFIG}\n[sandbox]\nrun_timeout_s = 60\nmax_run_timeout_s = 60\nattribute_refusals = \"{mode}\"\n"
    );
    Some(Supervisor::builder().config(&config).start())
}

async fn bash(sup: &Supervisor, token: &str, command: &str) -> String {
    let r = sup
        .call_tool(token, "run_bash", json!({ "command": command }))
        .await;
    assert!(r.ok && r.denied.is_none(), "{command}: {r:?}");
    r.output
}

/// (1) A running sandbox reads /etc/passwd after each replacement, with
/// the new content, and resolves names through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_native_sandbox_reads_etc_passwd_the_host_replaced() {
    let test = "a_running_native_sandbox_reads_etc_passwd_the_host_replaced";
    let Some(sup) = supervisor(test, "auto") else {
        return;
    };
    let etc = HostEtc::new("passwd");
    let ws = sup.dirs.workspace("ws", 0);
    let s = sup.open_skip_session(&ws).await;
    assert_eq!(bash(&sup, &s.token, "id -un").await, "root\n");
    for round in 0..2 {
        let note = format!("{} round {round}", etc.tag);
        etc.replace_passwd(Some(&note));
        // At once (the same tick of the file system's clock), and again
        // once the change has settled.
        for _ in 0..2 {
            let out = bash(&sup, &s.token, "tail -n 1 /etc/passwd; id -un").await;
            assert_eq!(out, format!("# {note}\nroot\n"), "round {round}");
            tokio::time::sleep(Duration::from_millis(2500)).await;
        }
    }
}

/// (2) What /etc withholds stays unreadable before and after a
/// replacement, new names and links included; with refusals attributed
/// (each command's own domain logged) and without.
async fn withheld_before_and_after(mode: &str) {
    let test = format!("withheld_etc_paths_stay_unreadable_across_a_replacement_{mode}");
    let Some(sup) = supervisor(&test, mode) else {
        return;
    };
    let mut etc = HostEtc::new(mode);
    let plan = Plan::of(&etc);
    let ws = sup.dirs.workspace("ws", 0);
    write_probe(&ws, &plan);
    let s = sup.open_skip_session(&ws).await;
    let before = parse(&bash(&sup, &s.token, "sh probe.sh").await, "before");
    assert_nothing_withheld(&before, &withheld_hashes(&control(&ws), &plan), "before");
    assert_eq!(before.get("/etc/passwd"), Some(&sha256("/etc/passwd")));
    plan.plant(&mut etc, &ws);
    etc.replace_passwd(Some(&etc.tag));
    let host = control(&ws);
    for p in &plan.withheld {
        assert!(
            host.contains_key(p),
            "the host control cannot read {p}: {host:?}"
        );
    }
    let secret = withheld_hashes(&host, &plan);
    for when in ["just after", "settled"] {
        let inside = parse(&bash(&sup, &s.token, "sh probe.sh").await, when);
        assert_nothing_withheld(&inside, &secret, when);
        for p in plan.readable.iter().chain([&"/etc/passwd".to_string()]) {
            assert_eq!(inside.get(p), host.get(p), "{when}: {p} as the host has it");
        }
        tokio::time::sleep(Duration::from_millis(2500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withheld_etc_paths_stay_unreadable_across_a_replacement_attributed() {
    withheld_before_and_after("auto").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withheld_etc_paths_stay_unreadable_across_a_replacement_unattributed() {
    withheld_before_and_after("off").await;
}

/// (3) A background process started before the host changed /etc, and a
/// child it starts after, read nothing withheld, while a later command
/// sees the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_from_an_earlier_call_stays_narrowed() {
    let test = "a_background_process_from_an_earlier_call_stays_narrowed";
    let Some(sup) = supervisor(test, "auto") else {
        return;
    };
    let mut etc = HostEtc::new("background");
    let plan = Plan::of(&etc);
    let ws = sup.dirs.workspace("ws", 0);
    write_probe(&ws, &plan);
    std::fs::write(
        ws.join("watch.sh"),
        ": > bg-started\nwhile [ ! -e go ]; do sleep 0.05; done\nsh probe.sh > bg-out 2>&1\nmv bg-out bg-done\n",
    )
    .unwrap();
    let s = sup.open_skip_session(&ws).await;
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            json!({"command": "sh watch.sh", "background": true}),
        )
        .await;
    assert!(r.ok && r.denied.is_none(), "{r:?}");
    wait_for(&ws.join("bg-started"), "the background job to start");
    plan.plant(&mut etc, &ws);
    etc.replace_passwd(Some(&etc.tag));
    // A command after the change: its own domain has the new /etc.
    let now = parse(&bash(&sup, &s.token, "sh probe.sh").await, "later call");
    let host = control(&ws);
    assert_eq!(now.get("/etc/passwd"), host.get("/etc/passwd"));
    std::fs::write(ws.join("go"), "").unwrap();
    let done = ws.join("bg-done");
    wait_for(&done, "the background probe");
    let bg = parse(&std::fs::read_to_string(&done).unwrap(), "background");
    let secret = withheld_hashes(&host, &plan);
    assert_nothing_withheld(&bg, &secret, "background");
    assert_nothing_withheld(&now, &secret, "later call");
}
