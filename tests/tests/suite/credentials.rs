//! One table of credential paths (`tollgate_policy::credentials`), and every
//! wall uses it (docs/THREAT_MODEL.md, "Credential paths"). One test walks
//! the table for a real session owner (a user created for the test, whose
//! home holds every entry) and proves each entry
//!
//! - (a) refused by the workspace check, at OpenSession and for
//!   `supervisorctl sandbox exec`: a workspace at, inside or holding it;
//! - (b) hidden in the native sandbox, and (c) absent from the Docker
//!   container: for run_bash and for `supervisorctl sandbox exec`, as the
//!   owner and as uid 0, with each entry a file and then a directory. The
//!   home lies beneath /opt, which the native sandbox shows read-only, so
//!   only the table's masks hide it there; the entries are world-readable,
//!   so file permissions hide nothing either. No write reaches them.
//!
//! The host-wide entries (/etc/shadow, the engine sockets, ...) are walked
//! too: no file of theirs is readable inside with the host's content, no
//! socket of theirs is there, and a workspace at one that exists as a
//! directory is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_policy::credentials::{
    CredentialKind, CredentialPath, HOME_CREDENTIALS, SYSTEM_CREDENTIALS,
};

const CONFIG: &str = r#"
[sandbox]
run_timeout_s = 60
max_run_timeout_s = 60

[session]
output_cap_bytes = 1000000
approval_timeout_s = 30

[llm]
provider = "script"
"#;

/// A local user made for this test (pid-suffixed), with its home beneath
/// /opt; removed again, home and all, when dropped.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
    /// Last, so it is released after `drop` has run userdel.
    _passwd: std::sync::MutexGuard<'static, ()>,
}

impl TestUser {
    fn create() -> TestUser {
        let passwd = tollgate_e2e::harness::passwd_writer();
        let pid = std::process::id();
        let name = format!("tgcred{pid}");
        let home = PathBuf::from(format!("/opt/tollgate-cred-{pid}"));
        let _ = std::fs::remove_dir_all(&home);
        // useradd takes /etc/passwd's lock: another test may hold it a moment.
        let mut last = String::new();
        for _ in 0..20 {
            let out = Command::new("useradd")
                .args(["-M", "-s", "/usr/sbin/nologin", "-d"])
                .arg(&home)
                .arg(&name)
                .output()
                .expect("run useradd");
            if out.status.success() {
                last.clear();
                break;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        assert!(last.is_empty(), "useradd {name}: {last}");
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").arg(flag).arg(&name).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        let user = TestUser {
            uid: id("-u"),
            gid: id("-g"),
            name,
            home,
            _passwd: passwd,
        };
        user.mkdir(&user.home);
        user
    }

    /// A directory owned by the user, world-readable.
    fn mkdir(&self, p: &Path) {
        std::fs::create_dir_all(p).unwrap();
        self.own(p, 0o755);
    }

    fn own(&self, p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        nix::unistd::chown(
            p,
            Some(nix::unistd::Uid::from_raw(self.uid)),
            Some(nix::unistd::Gid::from_raw(self.gid)),
        )
        .unwrap();
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        for _ in 0..20 {
            match Command::new("userdel").arg(&self.name).status() {
                Ok(s) if s.success() => return,
                _ => std::thread::sleep(std::time::Duration::from_millis(250)),
            }
        }
        eprintln!(
            "warning: userdel {} failed; remove the user by hand",
            self.name
        );
    }
}

/// Which shape every home entry gets in one round.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// As the table says (a directory for `.ssh`, a file for `.netrc`).
    Natural,
    /// The other one.
    Swapped,
    /// A directory holding `proj/`, for the workspace check.
    DirWithProject,
}

fn marker(i: usize) -> String {
    format!("tollgate-secret-{i}-{}\n", std::process::id())
}

/// (Re)creates every home entry in `shape`, each holding its marker.
fn plant(user: &TestUser, shape: Shape) {
    for (i, c) in HOME_CREDENTIALS.iter().enumerate() {
        let p = user.home.join(c.path);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
        user.mkdir(p.parent().unwrap());
        let as_dir = match (shape, c.kind) {
            (Shape::DirWithProject, _) => true,
            (Shape::Natural, CredentialKind::Dir) | (Shape::Swapped, CredentialKind::File) => true,
            (Shape::Swapped, CredentialKind::Socket) => true,
            (Shape::Natural, CredentialKind::File | CredentialKind::Socket)
            | (Shape::Swapped, CredentialKind::Dir) => false,
        };
        if as_dir {
            user.mkdir(&p);
            std::fs::write(p.join("secret"), marker(i)).unwrap();
            user.own(&p.join("secret"), 0o644);
            if let Shape::DirWithProject = shape {
                user.mkdir(&p.join("proj"));
            }
        } else {
            std::fs::write(&p, marker(i)).unwrap();
            user.own(&p, 0o644);
        }
    }
}

/// Every home entry as the host has it: each file beneath it with its
/// content.
fn snapshot(user: &TestUser) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = HOME_CREDENTIALS
        .iter()
        .map(|c| user.home.join(c.path))
        .collect();
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            out.insert(p, b"<dir>".to_vec());
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// Every entry of the table as this host has it: the user's home entries,
/// then the host-wide ones.
fn entries(user: &TestUser) -> Vec<(PathBuf, &'static CredentialPath)> {
    HOME_CREDENTIALS
        .iter()
        .map(|c| (user.home.join(c.path), c))
        .chain(
            SYSTEM_CREDENTIALS
                .iter()
                .map(|c| (PathBuf::from(c.path), c)),
        )
        .collect()
}

/// A script that reports what it can see of each path: `SEEN p`, `SOCKET
/// p`, `HASH file sha256` for every readable file at p or directly in it,
/// and tries to write into each home entry. Run as a script: the policy
/// does not read inside scripts, so only the sandbox stands in its way.
fn probe_script(user: &TestUser) -> String {
    let quote = |p: &Path| format!("'{}'", p.display());
    let all: Vec<String> = entries(user).iter().map(|(p, _)| quote(p)).collect();
    let home: Vec<String> = HOME_CREDENTIALS
        .iter()
        .map(|c| quote(&user.home.join(c.path)))
        .collect();
    format!(
        r#"hash() {{ if [ -f "$1" ] && [ -r "$1" ]; then echo "HASH $1 $(sha256sum < "$1" 2>/dev/null | cut -d' ' -f1)"; fi; }}
for p in {all}; do
  if [ -e "$p" ] || [ -L "$p" ]; then echo "SEEN $p"; fi
  if [ -S "$p" ]; then echo "SOCKET $p"; fi
  hash "$p"
  if [ -d "$p" ]; then for f in "$p"/* "$p"/.[!.]*; do hash "$f"; done; fi
done
[ "$1" = read-only ] && {{ echo probe-done; exit 0; }}
for p in {home}; do
  if [ -d "$p" ]; then (echo pwned > "$p/written-from-inside") 2>/dev/null; else (echo pwned >> "$p") 2>/dev/null; fi
done
echo probe-done
"#,
        all = all.join(" "),
        home = home.join(" "),
    )
}

/// What one probe run reported.
#[derive(Debug, Default)]
struct Seen {
    seen: BTreeSet<PathBuf>,
    sockets: BTreeSet<PathBuf>,
    hashes: BTreeSet<(PathBuf, String)>,
}

/// sha256 of nothing: an unreadable or masked file; proves no leak.
const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn parse(out: &str, what: &str) -> Seen {
    assert!(
        out.contains("probe-done"),
        "{what}: the probe did not finish:\n{out}"
    );
    let mut s = Seen::default();
    for line in out.lines() {
        let mut w = line.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some("SEEN"), Some(p), None) => {
                s.seen.insert(p.into());
            }
            (Some("SOCKET"), Some(p), None) => {
                s.sockets.insert(p.into());
            }
            (Some("HASH"), Some(p), Some(h)) if !h.is_empty() && h != EMPTY => {
                s.hashes.insert((p.into(), h.to_string()));
            }
            _ => {}
        }
    }
    s
}

/// The probe on the host itself, as root: what a missing wall would show.
fn control(user: &TestUser, ws: &Path) -> Seen {
    let out = Command::new("sh")
        .arg(ws.join("probe.sh"))
        .arg("read-only")
        .output()
        .unwrap();
    let seen = parse(&String::from_utf8_lossy(&out.stdout), "host control");
    // The probe would see every home entry's content, so its silence
    // inside means something.
    for (i, c) in HOME_CREDENTIALS.iter().enumerate() {
        let p = user.home.join(c.path);
        assert!(
            seen.seen.contains(&p),
            "control does not see {}",
            p.display()
        );
        assert!(
            seen.hashes.iter().any(|(f, _)| f.starts_with(&p)),
            "control reads nothing of {} (marker {})",
            p.display(),
            marker(i).trim()
        );
    }
    seen
}

/// The walls held for `inside` (one run) against the host's `host` view.
fn assert_hidden(user: &TestUser, host: &Seen, inside: &Seen, backend: &str, what: &str) {
    let leaked: Vec<_> = inside.hashes.intersection(&host.hashes).collect();
    assert!(
        leaked.is_empty(),
        "{what}: host credential content readable inside: {leaked:?}"
    );
    assert!(
        inside.sockets.is_empty(),
        "{what}: credential sockets inside: {:?}",
        inside.sockets
    );
    for c in HOME_CREDENTIALS {
        let p = user.home.join(c.path);
        match backend {
            // Only the workspace is mounted: nothing of the home is there.
            "docker" => assert!(
                !inside.seen.contains(&p),
                "{what}: {} is in the container",
                p.display()
            ),
            // /opt is shown read-only: the entry is there, masked empty.
            _ => assert!(
                !inside.hashes.iter().any(|(f, _)| f.starts_with(&p)),
                "{what}: {} readable",
                p.display()
            ),
        }
    }
}

/// `e2e-client` as the user: its one line.
fn client(sup: &Supervisor, user: &TestUser, token: &str, args: &[&str]) -> String {
    let out = Command::new(sup.dirs.staged_bin("e2e-client"))
        .arg(&sup.agent_socket)
        .arg(token)
        .args(args)
        .uid(user.uid)
        .gid(user.gid)
        .output()
        .expect("run e2e-client");
    assert!(
        out.status.success(),
        "e2e-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// OpenSession as the user: Ok(token) or Err(the refusal).
fn open(sup: &Supervisor, user: &TestUser, ws: &Path) -> Result<String, String> {
    let line = client(
        sup,
        user,
        "-",
        &["open", ws.to_str().unwrap(), "dangerouslySkipPermissions"],
    );
    match line.strip_prefix("OK ") {
        Some(rest) => Ok(rest.split_whitespace().nth(1).unwrap().to_string()),
        None => Err(line),
    }
}

/// `sh probe.sh` through run_bash in a session of the user.
fn run_bash_probe(sup: &Supervisor, user: &TestUser, ws: &Path) -> String {
    let token = open(sup, user, ws).expect("the workspace beside the entries opens");
    let line = client(
        sup,
        user,
        &token,
        &[
            "call",
            "run_bash",
            r#"{"command":"sh probe.sh","timeout_s":60}"#,
        ],
    );
    let json: Value = serde_json::from_str(line.strip_prefix("OK ").unwrap_or_else(|| {
        panic!("run_bash: {line}");
    }))
    .unwrap();
    assert_eq!(json["ok"], true, "run_bash: {json}");
    json["output"].as_str().unwrap().to_string()
}

/// `supervisorctl sandbox exec -- sh probe.sh`; None when Docker is not
/// usable here (and not required).
fn sandbox_exec(sup: &Supervisor, ws: &Path, backend: &str, uid: Option<u32>) -> Option<String> {
    let mut args = vec![
        "sandbox".to_string(),
        "exec".into(),
        "--workspace".into(),
        ws.display().to_string(),
        "--backend".into(),
        backend.into(),
    ];
    if let Some(u) = uid {
        args.extend(["--user".into(), u.to_string()]);
    }
    args.extend(["--".into(), "sh".into(), "probe.sh".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sup.ctl(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if backend == "docker" && !docker_required() && stderr.contains("SANDBOX_UNAVAILABLE") {
        eprintln!("skipped docker: {stderr}");
        return None;
    }
    assert!(
        out.status.success(),
        "sandbox exec --backend {backend}: {stderr}"
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn docker_required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1")
}

/// (a) The workspace check, at OpenSession and for sandbox exec.
fn workspace_check_refuses_every_entry(sup: &Supervisor, user: &TestUser) {
    plant(user, Shape::DirWithProject);
    for c in HOME_CREDENTIALS {
        let entry = user.home.join(c.path);
        for ws in [entry.clone(), entry.join("proj")] {
            let e = open(sup, user, &ws).expect_err("a workspace in a credential path opened");
            assert!(
                e.starts_with("ERR InvalidArgument")
                    && e.contains("credential path")
                    && e.contains(c.path),
                "{}: {e}",
                ws.display()
            );
            let out = sup.ctl(&[
                "sandbox",
                "exec",
                "--workspace",
                ws.to_str().unwrap(),
                "--",
                "true",
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success()
                    && stderr.contains("credential path")
                    && stderr.contains(c.path),
                "sandbox exec in {}: {stderr}",
                ws.display()
            );
        }
    }
    // A workspace holding an entry (a home in disguise), in its own shape.
    let holder = user.home.join("holder");
    plant(user, Shape::Natural);
    for c in HOME_CREDENTIALS {
        let _ = std::fs::remove_dir_all(&holder);
        user.mkdir(&holder);
        let at = holder.join(c.path);
        user.mkdir(at.parent().unwrap());
        match c.kind {
            CredentialKind::Dir => user.mkdir(&at),
            CredentialKind::File | CredentialKind::Socket => std::fs::write(&at, "x").unwrap(),
        }
        let e = open(sup, user, &holder).expect_err("a workspace holding a credential opened");
        assert!(
            e.contains("holds a credential path") && e.contains(c.path),
            "{}: {e}",
            holder.display()
        );
    }
    std::fs::remove_dir_all(&holder).unwrap();
    // Host-wide entries that exist here as directories: as root's workspace.
    let mut walked = 0;
    for c in SYSTEM_CREDENTIALS {
        let p = Path::new(c.path);
        let is_dir = std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        walked += 1;
        let out = sup.ctl(&["sandbox", "exec", "--workspace", c.path, "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("credential path"),
            "sandbox exec in {}: {stderr}",
            c.path
        );
    }
    eprintln!("host-wide entries present as directories and refused: {walked}");
}

#[test]
fn every_credential_entry_is_refused_hidden_and_absent_on_both_backends() {
    if !root_or_skip("every_credential_entry_is_refused_hidden_and_absent_on_both_backends") {
        return;
    }
    let user = TestUser::create();
    let native = Supervisor::builder()
        .config(CONFIG)
        .sandbox("native")
        .start();

    workspace_check_refuses_every_entry(&native, &user);

    let ws = user.home.join("proj");
    user.mkdir(&ws);
    std::fs::write(ws.join("probe.sh"), probe_script(&user)).unwrap();
    user.own(&ws.join("probe.sh"), 0o644);

    let docker = Supervisor::builder()
        .config(CONFIG)
        .sandbox("docker")
        .start();
    for shape in [Shape::Natural, Shape::Swapped] {
        plant(&user, shape);
        let host = control(&user, &ws);
        let before = snapshot(&user);
        let mut runs: Vec<(&str, String, String)> = vec![(
            "native",
            format!("{shape:?}: run_bash, native, as the owner"),
            run_bash_probe(&native, &user, &ws),
        )];
        for backend in ["native", "docker"] {
            for (uid, who) in [(None, "the owner"), (Some(0), "uid 0")] {
                if let Some(out) = sandbox_exec(&native, &ws, backend, uid) {
                    runs.push((
                        backend,
                        format!("{shape:?}: sandbox exec, {backend}, as {who}"),
                        out,
                    ));
                }
            }
        }
        if let Some(out) = sandbox_exec(&docker, &ws, "docker", None) {
            runs.push((
                "docker",
                format!("{shape:?}: sandbox exec of a docker supervisor, as the owner"),
                out,
            ));
            // Docker works here: run_bash through the docker supervisor too.
            runs.push((
                "docker",
                format!("{shape:?}: run_bash, docker, as the owner"),
                run_bash_probe(&docker, &user, &ws),
            ));
        }
        for (backend, what, out) in &runs {
            assert_hidden(&user, &host, &parse(out, what), backend, what);
        }
        // Nothing written from inside reached the host.
        assert_eq!(snapshot(&user), before, "{shape:?}: an entry changed");
        eprintln!("{shape:?}: {} runs held", runs.len());
        assert!(
            runs.len() >= if docker_required() { 7 } else { 3 },
            "{shape:?}: only {} runs",
            runs.len()
        );
    }
}
