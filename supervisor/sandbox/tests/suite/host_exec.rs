//! Nothing a sandboxed command writes may run later on the host
//! (docs/THREAT_MODEL.md "What the host runs by itself"), on both backends, for
//! a root session and an ordinary one.
//!
//! Each scenario is an attack a sandboxed command can try against the
//! host's git: plant a config or hook, point `.git/commondir` elsewhere,
//! rename `.git` away and make a new one, repoint a worktree's `.git`
//! file, write into a worktree's git directory, create a repository where
//! none was (`git init`, or HEAD + objects/ + refs/ at the top), plant a
//! submodule's `.git`, fill the `core.hooksPath` directory or an included
//! config. Every scenario is run twice: once on the host without a sandbox
//! (the control: the host's real git then runs the planted command, so the
//! scenario is live), once in a sandbox; after the sandbox is gone, the
//! host's real `git status` and `git commit` must run nothing, and no
//! placeholder may be left in the workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use common::{NOBODY, sh, spec, workspace};
use tollgate_policy::host_exec::{GitDirMode, HOST_EXEC, HostExecKind};
use tollgate_sandbox::{Backend, SandboxSpec};

/// The uids a session may have: an ordinary user and root.
const UIDS: [u32; 2] = [NOBODY, 0];

/// Both ways a git directory may be attached (`[sandbox] git_dir`): every
/// attack must fail under each.
const MODES: [GitDirMode; 2] = [GitDirMode::ReadOnly, GitDirMode::Split];

fn spec_in(mode: GitDirMode, prefix: &str, ws: &Path, uid: u32) -> SandboxSpec {
    SandboxSpec {
        git_dir: mode,
        ..spec(prefix, ws, uid, uid)
    }
}

/// git on the host, as `uid`, in `dir`, with no system or global config of
/// the machine's (HOME is the scenario's own).
fn host_git(dir: &Path, uid: u32, home: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .uid(uid)
        .gid(uid)
        .output()
        .expect("git on the host")
}

fn git_ok(dir: &Path, uid: u32, home: &Path, args: &[&str]) {
    let out = host_git(dir, uid, home, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sh -c` on the host as `uid` in `dir`: the control.
fn host_sh(dir: &Path, uid: u32, script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap()
}

/// What an editor does when the folder opens, and what a commit runs.
fn host_uses_the_repository(ws: &Path, uid: u32, home: &Path) {
    let _ = host_git(ws, uid, home, &["status"]);
    let _ = host_git(ws, uid, home, &["commit", "--allow-empty", "-qm", "probe"]);
}

/// A fresh place for one run: a home (holding the marker the planted
/// command would create) and a workspace, both owned by `uid`.
struct Place {
    _home_dir: tempfile::TempDir,
    home: PathBuf,
    _ws_dir: tempfile::TempDir,
    ws: PathBuf,
    marker: PathBuf,
}

impl Place {
    fn new(uid: u32) -> Place {
        let home_dir = workspace(uid, uid);
        let home = home_dir.path().canonicalize().unwrap();
        let ws_dir = workspace(uid, uid);
        let ws = ws_dir.path().canonicalize().unwrap();
        Place {
            marker: home.join("pwned"),
            _home_dir: home_dir,
            home,
            _ws_dir: ws_dir,
            ws,
        }
    }

    fn script(&self, attack: &str) -> String {
        attack
            .replace("MARKER", &self.marker.display().to_string())
            .replace("WS", &self.ws.display().to_string())
    }
}

/// A repository with one commit.
fn repo(p: &Place, uid: u32) {
    git_ok(&p.ws, uid, &p.home, &["init", "-q", "-b", "main"]);
    std::fs::write(p.ws.join("README"), "hello\n").unwrap();
    std::os::unix::fs::chown(p.ws.join("README"), Some(uid), Some(uid)).unwrap();
    git_ok(&p.ws, uid, &p.home, &["add", "README"]);
    git_ok(&p.ws, uid, &p.home, &["commit", "-qm", "first"]);
}

/// A working tree whose `.git` is a file naming a git directory inside the
/// workspace (`.bare`, the bare-repository-with-worktree layout).
fn worktree_with_gitfile(p: &Place, uid: u32) {
    git_ok(
        &p.ws,
        uid,
        &p.home,
        &["init", "-q", "--bare", "-b", "main", ".bare"],
    );
    git_ok(
        &p.ws,
        uid,
        &p.home,
        &["--git-dir=.bare", "config", "core.bare", "false"],
    );
    std::fs::write(p.ws.join(".git"), "gitdir: ./.bare\n").unwrap();
    std::os::unix::fs::chown(p.ws.join(".git"), Some(uid), Some(uid)).unwrap();
    git_ok(
        &p.ws,
        uid,
        &p.home,
        &["commit", "--allow-empty", "-qm", "first"],
    );
}

/// A repository with a submodule (a gitlink) at `sub`; without its `.git`
/// when `populated` is false (as a clone without --recursive leaves it).
fn with_submodule(p: &Place, uid: u32, populated: bool) {
    repo(p, uid);
    let sub = p.ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::os::unix::fs::chown(&sub, Some(uid), Some(uid)).unwrap();
    git_ok(&sub, uid, &p.home, &["init", "-q", "-b", "main"]);
    git_ok(
        &sub,
        uid,
        &p.home,
        &["commit", "--allow-empty", "-qm", "sub"],
    );
    git_ok(&p.ws, uid, &p.home, &["add", "sub"]);
    git_ok(&p.ws, uid, &p.home, &["commit", "-qm", "gitlink"]);
    if !populated {
        std::fs::remove_dir_all(sub.join(".git")).unwrap();
    }
}

const FSMONITOR: &str = r#"printf '[core]\n\tfsmonitor = "touch MARKER; false"\n'"#;

/// (name, setup, attack). The attack is `sh`, run in the workspace.
type Setup = fn(&Place, u32);

fn scenarios() -> Vec<(&'static str, Setup, String)> {
    let hook = r#"printf '#!/bin/sh\ntouch MARKER\n'"#;
    vec![
        (
            "a config written into .git",
            repo as Setup,
            format!("{FSMONITOR} >> .git/config"),
        ),
        (
            "a hook written into .git/hooks",
            repo,
            format!("{hook} > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"),
        ),
        (
            "(a) .git/commondir pointed at a copy with a planted config",
            repo,
            format!(
                "mkdir evil && cp -r .git/. evil/ && {FSMONITOR} >> evil/config && echo ../evil > .git/commondir"
            ),
        ),
        (
            "(b) .git renamed away and a new one made",
            repo,
            format!("mv .git .git-old && cp -r .git-old .git && {FSMONITOR} >> .git/config"),
        ),
        (
            "(b) .git removed and replaced by a gitfile",
            repo,
            format!(
                "mkdir evil && cp -r .git/. evil/ && {FSMONITOR} >> evil/config && rm -rf .git && echo 'gitdir: evil' > .git"
            ),
        ),
        (
            "(c) a write into the git directory a .git file names",
            worktree_with_gitfile,
            format!("{FSMONITOR} >> .bare/config"),
        ),
        (
            "(c) a hook written into that git directory",
            worktree_with_gitfile,
            format!("{hook} > .bare/hooks/pre-commit && chmod +x .bare/hooks/pre-commit"),
        ),
        (
            "(c) the .git file repointed at a planted git directory",
            worktree_with_gitfile,
            format!(
                "mkdir evil && cp -r .bare/. evil/ && {FSMONITOR} >> evil/config && echo 'gitdir: ./evil' > .git"
            ),
        ),
        (
            "(d) git init where no .git existed",
            |_: &Place, _: u32| {},
            format!(
                "(git init -q . 2>/dev/null || mkdir .git) && test -f .git/HEAD && {FSMONITOR} >> .git/config"
            ),
        ),
        (
            "(d) the workspace itself made a git directory (HEAD, objects/, refs/)",
            |_: &Place, _: u32| {},
            r#"mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD && printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = WS\n\tfsmonitor = "touch MARKER; false"\n' > config"#
                .to_string(),
        ),
        (
            "a submodule's missing .git planted",
            |p: &Place, uid: u32| with_submodule(p, uid, false),
            format!("mkdir -p sub/.git && cp -r .git/. sub/.git/ && {FSMONITOR} >> sub/.git/config"),
        ),
        (
            "a submodule renamed away and replaced",
            |p: &Place, uid: u32| with_submodule(p, uid, true),
            format!(
                "mv sub sub-old && mkdir -p sub/.git && cp -r sub-old/.git/. sub/.git/ && {FSMONITOR} >> sub/.git/config"
            ),
        ),
        (
            "a hook planted in the core.hooksPath directory",
            |p: &Place, uid: u32| {
                repo(p, uid);
                git_ok(&p.ws, uid, &p.home, &["config", "core.hooksPath", "tools/git-hooks"]);
            },
            format!(
                "mkdir -p tools/git-hooks && {hook} > tools/git-hooks/pre-commit && chmod +x tools/git-hooks/pre-commit"
            ),
        ),
        (
            "a config file the repository includes",
            |p: &Place, uid: u32| {
                repo(p, uid);
                git_ok(&p.ws, uid, &p.home, &["config", "include.path", "../shared.gitconfig"]);
            },
            format!("{FSMONITOR} > shared.gitconfig"),
        ),
    ]
}

/// What must look the same after a sandbox as before it: every table name
/// at the top and every path the scenarios reserve.
fn watched() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = HOST_EXEC.iter().map(|e| PathBuf::from(e.name)).collect();
    for p in ["sub/.git", "tools/git-hooks", "tools", "shared.gitconfig"] {
        v.push(PathBuf::from(p));
    }
    v
}

fn snapshot(ws: &Path) -> Vec<(PathBuf, bool)> {
    watched()
        .into_iter()
        .map(|p| {
            let e = std::fs::symlink_metadata(ws.join(&p)).is_ok();
            (p, e)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_planted_inside_runs_on_the_host_later() {
    if !common::require_root() {
        return;
    }
    let backends: Vec<(&str, Arc<dyn Backend>)> = common::backends().await;
    for (name, setup, attack) in scenarios() {
        for uid in UIDS {
            // The control: without a sandbox the attack works, and the
            // host's git runs the planted command.
            let control = Place::new(uid);
            setup(&control, uid);
            let out = host_sh(&control.ws, uid, &control.script(&attack));
            assert!(
                out.status.success(),
                "{name} (uid {uid}): the control's attack failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            host_uses_the_repository(&control.ws, uid, &control.home);
            assert!(
                control.marker.exists(),
                "{name} (uid {uid}): not live: the host's git ran nothing even without a sandbox"
            );
            for ((backend, b), mode) in backends
                .iter()
                .flat_map(|b| MODES.iter().map(move |m| (b, *m)))
            {
                let backend = format!("{backend} ({})", mode.as_str());
                let p = Place::new(uid);
                setup(&p, uid);
                let before = snapshot(&p.ws);
                let sb = b
                    .create(&spec_in(mode, "hostexec", &p.ws, uid))
                    .await
                    .unwrap_or_else(|e| panic!("{name} on {backend} (uid {uid}): {e}"));
                let r = sh(sb.as_ref(), &p.script(&attack)).await;
                sb.destroy().await.unwrap();
                assert_ne!(
                    r.code(),
                    Some(0),
                    "{name} on {backend} (uid {uid}): the attack went through inside: {r:?}"
                );
                host_uses_the_repository(&p.ws, uid, &p.home);
                assert!(
                    !p.marker.exists(),
                    "{name} on {backend} (uid {uid}): the host's git ran a command planted in the sandbox ({r:?})"
                );
                assert_eq!(
                    snapshot(&p.ws),
                    before,
                    "{name} on {backend} (uid {uid}): placeholders or planted names left in the workspace"
                );
            }
        }
    }
}

/// The shell lines that try to write, rename, remove and replace `name`
/// (`kind` when it exists), each printing `ALLOWED:` when it worked.
fn tamper(name: &str, kind: HostExecKind, mode: GitDirMode) -> String {
    let try_ = |what: &str, cmd: String| {
        format!("if {cmd} 2>/dev/null; then echo 'ALLOWED:{name}:{what}'; fi\n")
    };
    let mut s = String::new();
    match kind {
        HostExecKind::Dir => {
            let inner = inner(name, mode).display().to_string();
            s += &try_(
                "create inside",
                format!("mkdir -p '{inner}' && echo x > '{inner}/planted'"),
            );
        }
        HostExecKind::File => {
            s += &try_("write", format!("echo x >> '{name}'"));
        }
    }
    s += &try_("rename", format!("mv '{name}' '{name}.moved'"));
    s += &try_("remove", format!("rm -rf '{name}' && ! test -e '{name}'"));
    s += &try_(
        "replace",
        format!("mkdir -p x-{name} && echo y > 'x-{name}/f' && mv -T 'x-{name}' '{name}'"),
    );
    s
}

/// Where a directory's content is read-only: the directory itself, but for
/// `.git` when its git directory is split (only hooks/, config, ... are).
fn inner(name: &str, mode: GitDirMode) -> PathBuf {
    if name == ".git" && mode == GitDirMode::Split {
        PathBuf::from(".git/hooks")
    } else {
        PathBuf::from(name)
    }
}

/// (e): every other name of the table, existing or not when the sandbox
/// starts, cannot be created, written, renamed, removed or replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_host_executed_name_is_read_only_inside_existing_or_not() {
    if !common::require_root() {
        return;
    }
    for (backend, b) in common::backends().await {
        for (uid, mode) in UIDS.into_iter().flat_map(|u| MODES.map(|m| (u, m))) {
            for existing in [false, true] {
                let p = Place::new(uid);
                if existing {
                    for e in HOST_EXEC {
                        let path = p.ws.join(e.name);
                        match e.kind {
                            HostExecKind::Dir => {
                                let kept = p.ws.join(inner(e.name, mode));
                                std::fs::create_dir_all(&kept).unwrap();
                                std::fs::write(kept.join("kept"), "original\n").unwrap();
                                std::os::unix::fs::chown(kept.join("kept"), Some(uid), Some(uid))
                                    .unwrap();
                                std::os::unix::fs::chown(&kept, Some(uid), Some(uid)).unwrap();
                            }
                            HostExecKind::File => std::fs::write(&path, "original\n").unwrap(),
                        }
                        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
                    }
                }
                let script: String = HOST_EXEC
                    .iter()
                    .map(|e| tamper(e.name, e.kind, mode))
                    .collect();
                let sb = b.create(&spec_in(mode, "names", &p.ws, uid)).await.unwrap();
                let r = sh(sb.as_ref(), &script).await;
                sb.destroy().await.unwrap();
                let what = format!(
                    "{backend}, uid {uid}, git_dir {}, existing {existing}",
                    mode.as_str()
                );
                assert_eq!(r.stdout, "", "{what}: {r:?}");
                for e in HOST_EXEC {
                    let path = p.ws.join(e.name);
                    assert!(
                        !p.ws.join(format!("{}.moved", e.name)).exists(),
                        "{what}: {} renamed",
                        e.name
                    );
                    if existing {
                        let content = match e.kind {
                            HostExecKind::Dir => {
                                let kept = p.ws.join(inner(e.name, mode));
                                assert!(!kept.join("planted").exists(), "{what}: {}", e.name);
                                std::fs::read_to_string(kept.join("kept"))
                            }
                            HostExecKind::File => std::fs::read_to_string(&path),
                        };
                        assert_eq!(content.unwrap(), "original\n", "{what}: {}", e.name);
                    } else {
                        // The placeholder is gone, and nothing took its place.
                        assert!(
                            std::fs::symlink_metadata(&path).is_err(),
                            "{what}: {} left in the workspace",
                            e.name
                        );
                    }
                }
            }
        }
    }
}

/// Two sandboxes of one workspace share its placeholders: the first one
/// to end must not take the second one's protection away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sandbox_keeps_its_protection_when_the_first_ends() {
    if !common::require_root() {
        return;
    }
    for (backend, b) in common::backends().await {
        let p = Place::new(NOBODY);
        let first = b
            .create(&spec("first", &p.ws, NOBODY, NOBODY))
            .await
            .unwrap();
        let second = b
            .create(&spec("second", &p.ws, NOBODY, NOBODY))
            .await
            .unwrap();
        first.destroy().await.unwrap();
        assert!(p.ws.join(".envrc").is_dir(), "{backend}: placeholder gone");
        let r = sh(
            second.as_ref(),
            "echo x > .envrc || echo denied; mkdir .git/x || echo denied",
        )
        .await;
        assert_eq!(r.stdout, "denied\ndenied\n", "{backend}: {r:?}");
        second.destroy().await.unwrap();
        assert_eq!(std::fs::read_dir(&p.ws).unwrap().count(), 0, "{backend}");
    }
}
