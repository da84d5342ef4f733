//! git inside the sandbox with `[sandbox] git_dir = "split"`
//! (docs/THREAT_MODEL.md, "A git directory is read-only by default; split
//! on request"): ordinary git work succeeds on both backends, for a root
//! session and an ordinary one, while what the host's git obeys stays
//! read-only; after every vector planted from inside, the owner's real git
//! on the host (`status`, `log -p`, `diff`, `commit`, `fetch` from a local
//! remote) runs nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use common::{NOBODY, sh, workspace};
use tollgate_policy::host_exec::GitDirMode;
use tollgate_sandbox::{Backend, SandboxSpec};

/// Every test here runs with the git directory split (`[sandbox] git_dir =
/// "split"`; the default keeps all of it read-only, where git cannot commit).
fn spec(prefix: &str, ws: &Path, uid: u32, gid: u32) -> SandboxSpec {
    SandboxSpec {
        git_dir: GitDirMode::Split,
        ..common::spec(prefix, ws, uid, gid)
    }
}

const UIDS: [u32; 2] = [NOBODY, 0];

/// An identity for commits inside, without any config file.
const IDENTITY: &str = "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t.invalid \
     GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t.invalid GIT_CONFIG_NOSYSTEM=1 HOME=/tmp; set -e\n";

/// Native, and Docker with the full image (it has git; the minimal one has
/// none). TOLLGATE_REQUIRE_DOCKER_FULL=1 makes a missing image a failure.
async fn backends() -> Vec<(&'static str, Arc<dyn Backend>)> {
    let mut v: Vec<(&'static str, Arc<dyn Backend>)> =
        vec![("native", common::native() as Arc<dyn Backend>)];
    match common::docker::backend_full().await {
        Some(d) => v.push(("docker", d)),
        None if std::env::var("TOLLGATE_REQUIRE_DOCKER_FULL").as_deref() == Ok("1") => {
            panic!("the full docker image is required (TOLLGATE_REQUIRE_DOCKER_FULL=1)")
        }
        None => {}
    }
    v
}

/// The owner's git on the host, as `uid`, with no config of the machine's.
fn host_git(dir: &Path, uid: u32, home: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_EDITOR", "true")
        .env("PAGER", "cat")
        .uid(uid)
        .gid(uid)
        .output()
        .expect("git on the host")
}

fn git_ok(dir: &Path, uid: u32, home: &Path, args: &[&str]) -> String {
    let out = host_git(dir, uid, home, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Place {
    _home_dir: tempfile::TempDir,
    home: PathBuf,
    _ws_dir: tempfile::TempDir,
    ws: PathBuf,
    /// A bare repository outside the workspace: the local remote.
    _remote_dir: tempfile::TempDir,
    remote: PathBuf,
}

impl Place {
    /// A repository with two commits on `main` and a remote holding them.
    fn new(uid: u32) -> Place {
        let (home_dir, ws_dir, remote_dir) = (
            workspace(uid, uid),
            workspace(uid, uid),
            workspace(uid, uid),
        );
        let canon = |d: &tempfile::TempDir| d.path().canonicalize().unwrap();
        let p = Place {
            home: canon(&home_dir),
            ws: canon(&ws_dir),
            remote: canon(&remote_dir),
            _home_dir: home_dir,
            _ws_dir: ws_dir,
            _remote_dir: remote_dir,
        };
        let ws = &p.ws;
        git_ok(ws, uid, &p.home, &["init", "-q", "-b", "main"]);
        for (i, text) in ["one\ntwo\nthree\n", "one\n2\nthree\n"].iter().enumerate() {
            let f = ws.join("file.txt");
            std::fs::write(&f, text).unwrap();
            std::os::unix::fs::chown(&f, Some(uid), Some(uid)).unwrap();
            git_ok(ws, uid, &p.home, &["add", "file.txt"]);
            git_ok(ws, uid, &p.home, &["commit", "-qm", &format!("c{i}")]);
        }
        git_ok(
            &p.remote,
            uid,
            &p.home,
            &["init", "-q", "--bare", "-b", "main"],
        );
        let remote = p.remote.display().to_string();
        git_ok(ws, uid, &p.home, &["remote", "add", "origin", &remote]);
        git_ok(ws, uid, &p.home, &["push", "-q", "origin", "main"]);
        p
    }

    fn marker(&self) -> PathBuf {
        self.home.join("pwned")
    }
}

/// Every ordinary git command the issue lists, in one script; each prints
/// its name after it succeeds.
const ORDINARY: &str = r#"
step() { echo "ok:$1"; }
echo more >> file.txt; git add file.txt; step add
git commit -qm third; step commit
git commit -q --amend -m third-amended; step amend
git checkout -q -b feature; step checkout-b
echo feat > feat.txt; git add feat.txt; git commit -qm feat
git switch -q main; step switch
echo dirty >> file.txt; git stash -q; git stash pop -q; git checkout -q -- file.txt; step stash
git merge -q --no-edit feature; step merge
git checkout -q -b topic HEAD~1; echo t > t.txt; git add t.txt; git commit -qm topic
git rebase -q main; step rebase
git switch -q main; git cherry-pick topic >/dev/null; step cherry-pick
git reset -q --hard HEAD~1; step reset
git tag v1; git tag -a -m annotated v2; step tag
git gc -q; git repack -q -a -d; step gc
git worktree add -q wt-inside -b wt-branch; git -C wt-inside log --oneline >/dev/null; step worktree
git log -p >/dev/null; step log
git diff HEAD~1 >/dev/null; step diff
git blame file.txt >/dev/null; step blame
mkdir fresh; cd fresh; git init -q; echo x > x; git add x; git commit -qm fresh; cd ..; step init
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_git_works_inside_on_both_backends_root_or_not() {
    if !common::require_root() {
        return;
    }
    for (backend, b) in backends().await {
        for uid in UIDS {
            let p = Place::new(uid);
            let sb = b.create(&spec("git", &p.ws, uid, uid)).await.unwrap();
            let r = sh(sb.as_ref(), &format!("{IDENTITY}{ORDINARY}")).await;
            sb.destroy().await.unwrap();
            let what = format!("{backend}, uid {uid}");
            assert_eq!(r.code(), Some(0), "{what}: {r:?}");
            let steps: Vec<&str> = ORDINARY
                .lines()
                .filter_map(|l| l.split("step ").nth(1))
                .collect();
            let done: Vec<&str> = r
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix("ok:"))
                .collect();
            assert_eq!(done, steps, "{what}: {r:?}");
            eprintln!("{what}: {} steps done inside", done.len());
            // The host sees the work: a sound repository holding it.
            git_ok(&p.ws, uid, &p.home, &["fsck", "--no-progress"]);
            let log = git_ok(&p.ws, uid, &p.home, &["log", "--format=%s", "main"]);
            assert!(
                log.contains("third-amended") && log.contains("feat"),
                "{what}: {log}"
            );
            let tags = git_ok(&p.ws, uid, &p.home, &["tag"]);
            assert_eq!(tags, "v1\nv2\n", "{what}");
            // No placeholder is left in the git directory.
            for name in ["commondir", "config.worktree", "objects/info/alternates"] {
                assert!(
                    !p.ws.join(".git").join(name).exists(),
                    "{what}: {name} left"
                );
            }
        }
    }
}

/// A new gitlink to a repository made inside, whose config runs
/// `touch MARK/gitlink` when git enters it (the open hole of the split,
/// docs/THREAT_MODEL.md).
fn gitlink_plant() -> String {
    format!(
        "mkdir n && cd n && git init -q && {} >> .git/config && echo x > x && git add x && git commit -qm n && cd .. && git add n",
        fsmonitor("gitlink")
    )
}

/// A config line that runs `touch MARK/<what>` on git's next `status`.
fn fsmonitor(what: &str) -> String {
    format!(r#"printf '[core]\n\tfsmonitor = "touch MARK/{what}; false"\n'"#)
}

/// Every hook name git knows.
const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// (vector, the marker the host's git makes when the vector is planted
/// without a sandbox (`None`: git obeys it only in a command the owner
/// does not run here, or never from a repository's config), the plant).
fn vectors() -> Vec<(&'static str, Option<&'static str>, String)> {
    let hook = |m: &str| format!(r#"printf '#!/bin/sh\ntouch MARK/{m}\n'"#);
    let every_hook = HOOKS
        .iter()
        .map(|h| {
            format!(
                "{} > .git/hooks/{h}; chmod +x .git/hooks/{h}",
                hook(&format!("hook-{h}"))
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    vec![
        ("core.fsmonitor", Some("fsmonitor"), r#"git config core.fsmonitor "touch MARK/fsmonitor; false""#.into()),
        ("core.hooksPath", Some("hookspath"), format!("mkdir -p eh && {} > eh/pre-commit && chmod +x eh/pre-commit && git config core.hooksPath eh", hook("hookspath"))),
        ("core.sshCommand", Some("sshcommand"), r#"git config core.sshCommand "touch MARK/sshcommand; false" && git config remote.sshr.url example.invalid:repo && git config remote.sshr.fetch '+refs/heads/*:refs/remotes/sshr/*'"#.into()),
        ("core.pager", Some("pager"), r#"git config core.pager "touch MARK/pager; cat""#.into()),
        ("core.editor", Some("editor"), r#"git config core.editor "touch MARK/editor; true""#.into()),
        ("diff.external", Some("diffexternal"), r#"git config diff.external "touch MARK/diffexternal; true""#.into()),
        ("filter driver (config, info/attributes)", Some("filter"), r#"git config filter.evil.clean "touch MARK/filter; cat" && echo '* filter=evil' >> .git/info/attributes"#.into()),
        ("diff driver (config, .gitattributes)", Some("diffdriver"), r#"git config diff.evil.command "touch MARK/diffdriver; true" && echo '*.txt diff=evil' >> .gitattributes"#.into()),
        ("merge driver (config, .gitattributes)", Some("merge"), r#"git config merge.evil.driver "touch MARK/merge; false" && echo '*.txt merge=evil' >> .gitattributes"#.into()),
        ("alias.*", Some("alias"), r#"git config alias.st "!touch MARK/alias""#.into()),
        ("include.path", Some("include"), format!("{} > evil.inc && git config include.path ../evil.inc", fsmonitor("include"))),
        ("includeIf", Some("includeif"), format!("{} > evil2.inc && git config includeIf.gitdir:/.path ../evil2.inc", fsmonitor("includeif"))),
        ("credential.helper", Some("credential"), r#"git config credential.helper "!touch MARK/credential; false""#.into()),
        ("uploadpack.packObjectsHook", None, r#"git config uploadpack.packObjectsHook "touch MARK/packobjects; git""#.into()),
        ("protocol.ext.allow with ext::", Some("ext"), r#"git config protocol.ext.allow always && git config remote.extr.url 'ext::sh -c touch% MARK/ext' && git config remote.extr.fetch '+refs/heads/*:refs/remotes/extr/*'"#.into()),
        ("submodule update = !cmd", None, r#"git config submodule.evil.update '!touch MARK/submodule' && printf '[submodule "evil"]\n\tpath = evil\n\turl = ./evil\n\tupdate = !touch MARK/submodule\n' > .gitmodules"#.into()),
        ("every hook name", Some("hook-pre-commit"), every_hook),
        ("config.worktree", Some("configworktree"), format!("{} > .git/config.worktree && git config extensions.worktreeConfig true", fsmonitor("configworktree"))),
        ("commondir", Some("commondir"), format!("mkdir evil && cp -r .git/. evil/ && {} >> evil/config && echo ../evil > .git/commondir", fsmonitor("commondir"))),
        (".git renamed and remade", Some("rename"), format!("mv .git .git-old && cp -r .git-old .git && {} >> .git/config", fsmonitor("rename"))),
        (".git/config replaced by a rename", Some("replace"), format!("cp .git/config c.new && {} >> c.new && mv c.new .git/config", fsmonitor("replace"))),
        ("hooks replaced by a symlink", Some("hooklink"), format!("mkdir -p eh2 && {} > eh2/pre-commit && chmod +x eh2/pre-commit && rm -rf .git/hooks && ln -s ../eh2 .git/hooks", hook("hooklink"))),
        ("a worktree's .git file repointed", Some("worktree"), format!("mkdir evilwt && cp -r .git/. evilwt/ && {} >> evilwt/config && echo \"gitdir: $PWD/evilwt\" > lw/.git", fsmonitor("worktree"))),
        ("COMMIT_EDITMSG a symlink the owner's commit writes through", Some("editmsg"), "rm -f .git/COMMIT_EDITMSG && ln -s MARK/editmsg .git/COMMIT_EDITMSG".into()),
        ("FETCH_HEAD a symlink the owner's fetch writes through", Some("fetchhead"), "rm -f .git/FETCH_HEAD && ln -s MARK/fetchhead .git/FETCH_HEAD".into()),
        ("a worktree's commondir repointed", Some("wtcommondir"), format!("mkdir evilc && cp -r .git/. evilc/ && {} >> evilc/config && echo \"$PWD/evilc\" > .git/worktrees/lw/commondir", fsmonitor("wtcommondir"))),
    ]
}

/// The owner's git on the host after a sandbox: status (also in the
/// linked worktree), a paged `log -p` (on a terminal), `diff`, `commit`
/// with hooks and with the editor, a merge, `fetch` from every remote (the
/// local one among them), a credential fill and an alias. Failures are
/// fine: what counts is what ran.
fn owner_uses_the_repository(p: &Place, uid: u32) {
    let script = r#"
git status >/dev/null 2>&1
git -C lw status >/dev/null 2>&1
script -qec 'git log -p -1' /dev/null >/dev/null 2>&1
echo change >> file.txt
git diff >/dev/null 2>&1
git commit -qam host >/dev/null 2>&1
git commit -q --amend >/dev/null 2>&1
git merge -q --no-edit side >/dev/null 2>&1
git fetch -q --all >/dev/null 2>&1
printf 'protocol=https\nhost=example.invalid\n\n' | git credential fill >/dev/null 2>&1
git st >/dev/null 2>&1
true
"#;
    Command::new("sh")
        .args(["-c", script])
        .current_dir(&p.ws)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &p.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("EDITOR", "true")
        .env("TERM", "dumb")
        .env("GIT_TERMINAL_PROMPT", "0")
        .envs(identity())
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
}

fn identity() -> [(&'static str, &'static str); 4] {
    [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@t.invalid"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@t.invalid"),
    ]
}

/// The repository of [`Place::new`] with a linked worktree `lw` inside the
/// workspace and a branch `side` that merging needs a content merge for;
/// `MARK` (the markers' directory) in the owner's home.
fn victim(uid: u32) -> (Place, PathBuf) {
    let p = Place::new(uid);
    let (ws, home) = (&p.ws, &p.home);
    git_ok(ws, uid, home, &["branch", "side", "HEAD~1"]);
    git_ok(ws, uid, home, &["worktree", "add", "-q", "lw", "side"]);
    std::fs::write(ws.join("lw/file.txt"), "one\ntwo\nTHREE\n").unwrap();
    git_ok(&ws.join("lw"), uid, home, &["commit", "-qam", "side"]);
    let marks = p.marker();
    std::fs::create_dir(&marks).unwrap();
    std::os::unix::fs::chown(&marks, Some(uid), Some(uid)).unwrap();
    (p, marks)
}

fn marks_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn host_sh(p: &Place, uid: u32, script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .current_dir(&p.ws)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &p.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .envs(identity())
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap()
}

/// Each vector, planted on the host without a sandbox, makes the owner's
/// git run its command (so the vector is live); all of them planted from
/// inside a sandbox make it run nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_planted_from_inside_runs_in_the_owners_git() {
    if !common::require_root() {
        return;
    }
    let all = vectors();
    for (name, marker, plant) in &all {
        let Some(marker) = marker else { continue };
        let (p, marks) = victim(NOBODY);
        let out = host_sh(
            &p,
            NOBODY,
            &plant.replace("MARK", &marks.display().to_string()),
        );
        assert!(
            out.status.success(),
            "control {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        owner_uses_the_repository(&p, NOBODY);
        eprintln!("control {name}: {:?}", marks_in(&marks));
        assert!(
            marks_in(&marks).contains(&marker.to_string()),
            "control {name}: not live, the owner's git ran nothing without a sandbox ({:?})",
            marks_in(&marks)
        );
    }
    for (backend, b) in backends().await {
        for uid in UIDS {
            let (p, marks) = victim(uid);
            let config = std::fs::read(p.ws.join(".git/config")).unwrap();
            let script: String = all
                .iter()
                .map(|(name, _, plant)| {
                    let plant = plant.replace("MARK", &marks.display().to_string());
                    // Quoted for sh: a name holds apostrophes, and an
                    // unterminated quote would end the script there.
                    let name = name.replace('\'', "'\\''");
                    format!("if ( {plant} ) 2>/dev/null; then echo 'PLANTED: {name}'; fi\necho 'TRIED: {name}'\n")
                })
                .collect();
            let sb = b.create(&spec("gitvec", &p.ws, uid, uid)).await.unwrap();
            let identity = IDENTITY.replace("set -e\n", "\n");
            let r = sh(sb.as_ref(), &format!("{identity}{script}")).await;
            sb.destroy().await.unwrap();
            let what = format!("{backend}, uid {uid}");
            owner_uses_the_repository(&p, uid);
            eprintln!("{what}: {} vectors tried inside: {:?}", all.len(), r.stderr);
            assert_eq!(
                marks_in(&marks),
                Vec::<String>::new(),
                "{what}: the owner's git ran a planted command ({r:?})"
            );
            // The alias plant and the .gitattributes ones touch only data
            // files; everything git obeys refused them.
            // Every vector was tried: the script ran to its end.
            let tried = r
                .stdout
                .lines()
                .filter(|l| l.starts_with("TRIED: "))
                .count();
            assert_eq!(tried, all.len(), "{what}: {r:?}");
            let planted: Vec<&str> = r
                .stdout
                .lines()
                .filter(|l| !l.starts_with("TRIED: "))
                .collect();
            assert_eq!(
                planted,
                Vec::<&str>::new(),
                "{what}: planted from inside: {r:?}"
            );
            assert_eq!(
                std::fs::read(p.ws.join(".git/config")).unwrap(),
                config,
                "{what}"
            );
        }
    }
}

/// What a command inside tries beneath the git directory (each must fail)
/// and beside it (each must succeed), one line each: `no:<what>` when it
/// failed, `yes:<what>` when it succeeded.
const LINKS: &str = r#"
try() { what=$1; shift; if ( "$@" ) 2>/dev/null; then echo "yes:$what"; else echo "no:$what"; fi; }
sock() { python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$1"; }
try ref-to-bashrc ln -s "$HOME/.bashrc" .git/refs/heads/x
try objects-to-ssh sh -c 'mv .git/objects .git/objects.old && ln -s "$HOME/.ssh" .git/objects'
try objects-link ln -s /etc .git/objects/evil
try logs-link ln -s /tmp/evil .git/logs/HEAD2
try new-dir-link sh -c 'mkdir .git/refs/d && ln -s x .git/refs/d/y'
try fifo mkfifo .git/FETCH_HEAD2
try socket sock .git/sock
try moved-in-link sh -c 'ln -s /etc sub/l && mv sub/l .git/l'
try hardlink-from-outside ln file.txt .git/file-link
try same-dir-hardlink ln .git/HEAD .git/HEAD-link
try hardlink-of-fifo-outside sh -c 'mkfifo sub/f && ln sub/f .git/f'
try beside-link ln -s ../file.txt sub/link
try beside-fifo mkfifo sub/fifo2
try beside-socket sock sub/sock
try shm-link ln -s /etc /dev/shm/l
try top-link ln -s file.txt top-link
try new-top-dir-link sh -c 'mkdir newtop && ln -s ../file.txt newtop/link'
"#;

/// Nothing in the sandbox can make a symlink, FIFO, socket or device
/// beneath a split git directory, nor move or link one in, on both
/// backends, root or not; beside it they work, except directly in the
/// workspace's top and in a top-level directory the same command made
/// (the layer's cost, docs/THREAT_MODEL.md), which the next command may use.
/// (The test workspaces lie in /tmp, so /tmp is on that path too: the
/// control outside the workspace is /dev/shm.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_link_or_special_file_can_be_made_beneath_the_git_directory() {
    if !common::require_root() {
        return;
    }
    let want: Vec<String> = [
        "no:ref-to-bashrc",
        "no:objects-to-ssh",
        "no:objects-link",
        "no:logs-link",
        "no:new-dir-link",
        "no:fifo",
        "no:socket",
        "no:moved-in-link",
        "no:hardlink-from-outside",
        // Landlock cannot tell a hard link from a new file in one directory:
        // a second name, in the same git directory, for a file already there
        // (docs/THREAT_MODEL.md).
        "yes:same-dir-hardlink",
        "no:hardlink-of-fifo-outside",
        "yes:beside-link",
        "yes:beside-fifo",
        "yes:beside-socket",
        "yes:shm-link",
        "no:top-link",
        "no:new-top-dir-link",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (backend, b) in backends().await {
        for uid in UIDS {
            let p = Place::new(uid);
            // A directory that exists when the command starts.
            std::fs::create_dir(p.ws.join("sub")).unwrap();
            std::os::unix::fs::chown(p.ws.join("sub"), Some(uid), Some(uid)).unwrap();
            let sb = b.create(&spec("gitln", &p.ws, uid, uid)).await.unwrap();
            let r = sh(sb.as_ref(), &format!("{IDENTITY}{LINKS}")).await;
            // The next command: the directory the last one made is granted now.
            let next = sh(
                sb.as_ref(),
                "ln -s ../file.txt newtop/link2 && echo next-ok",
            )
            .await;
            sb.destroy().await.unwrap();
            let what = format!("{backend}, uid {uid}");
            let got: Vec<String> = r.stdout.lines().map(str::to_string).collect();
            assert_eq!(got, want, "{what}: {r:?}");
            assert_eq!(next.stdout.trim(), "next-ok", "{what}: {next:?}");
            // Nothing special is left beneath the git directory.
            let odd = special_files_beneath(&p.ws.join(".git"));
            assert_eq!(odd, Vec::<PathBuf>::new(), "{what}");
            git_ok(&p.ws, uid, &p.home, &["fsck", "--no-progress"]);
        }
    }
}

/// Symlinks, FIFOs, sockets and devices at or below `dir`.
fn special_files_beneath(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if !t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

/// The split's open hole, proven both ways (docs/THREAT_MODEL.md): a
/// repository made inside and added to the index as a gitlink has the
/// owner's plain `git status` run its fsmonitor; with the documented
/// owner-side setting (`diff.ignoreSubmodules = all`, and
/// `fetch.recurseSubmodules = false`, in the owner's own global config)
/// none of the owner's commands enters it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_gitlink_is_entered_unless_the_owner_ignores_submodules() {
    if !common::require_root() {
        return;
    }
    for (backend, b) in backends().await {
        for mitigated in [false, true] {
            let uid = NOBODY;
            let (p, marks) = victim(uid);
            let sb = b.create(&spec("gitlnk", &p.ws, uid, uid)).await.unwrap();
            let plant = gitlink_plant().replace("MARK", &marks.display().to_string());
            let r = sh(
                sb.as_ref(),
                &format!("{IDENTITY}{plant} 2>/dev/null; echo planted"),
            )
            .await;
            sb.destroy().await.unwrap();
            assert_eq!(r.stdout.trim(), "planted", "{backend}: {r:?}");
            if mitigated {
                for (k, v) in [
                    ("diff.ignoreSubmodules", "all"),
                    ("fetch.recurseSubmodules", "false"),
                ] {
                    git_ok(&p.ws, uid, &p.home, &["config", "--global", k, v]);
                }
            }
            owner_uses_the_repository(&p, uid);
            let want: Vec<String> = if mitigated {
                vec![]
            } else {
                vec!["gitlink".into()]
            };
            assert_eq!(marks_in(&marks), want, "{backend}, mitigated: {mitigated}");
        }
    }
}

/// A repository of one commit at `dir`, owned by `uid`.
fn repo_at(dir: &Path, uid: u32, home: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
    git_ok(dir, uid, home, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("f"), "f\n").unwrap();
    std::os::unix::fs::chown(dir.join("f"), Some(uid), Some(uid)).unwrap();
    git_ok(dir, uid, home, &["add", "f"]);
    git_ok(dir, uid, home, &["commit", "-qm", "f"]);
}

/// The layouts of the issue's "bad input", each on both backends: it works
/// inside, or git or the sandbox refuses it with a sentence naming the
/// path and why; the owner's git on the host runs nothing planted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_git_layouts_work_or_are_refused_naming_the_path() {
    if !common::require_root() {
        return;
    }
    let uid = NOBODY;
    for (backend, b) in backends().await {
        let (p, marks) = victim(uid);
        let m = marks.display().to_string();
        // A nested repository one directory down: split like the top one.
        repo_at(&p.ws.join("inner"), uid, &p.home);
        // The workspace's .git as a file pointing outside the workspace.
        let out = workspace(uid, uid);
        let outside = out.path().canonicalize().unwrap().join("repo");
        repo_at(&outside, uid, &p.home);
        let gitfile_ws = workspace(uid, uid);
        let gws = gitfile_ws.path().canonicalize().unwrap();
        std::fs::write(
            gws.join(".git"),
            format!("gitdir: {}/.git\n", outside.display()),
        )
        .unwrap();
        let sb = b.create(&spec("gitbad", &p.ws, uid, uid)).await.unwrap();
        let plant = format!(
            "{IDENTITY}set +e\n\
             git -C inner config core.fsmonitor 'touch {m}/inner' 2>/dev/null && echo planted-config\n\
             ln -s /etc inner/.git/refs/heads/x 2>/dev/null && echo planted-link\n\
             echo x >> inner/f && git -C inner commit -qam inner && echo inner-commit\n\
             mkdir later && cd later && git init -q && echo y > y && git add y && git commit -qm y && echo later-commit\n"
        );
        let r = sh(sb.as_ref(), &plant).await;
        sb.destroy().await.unwrap();
        let what = backend.to_string();
        assert!(
            r.stdout.contains("inner-commit") && r.stdout.contains("later-commit"),
            "{what}: {r:?}"
        );
        assert!(!r.stdout.contains("planted"), "{what}: {r:?}");
        host_sh(&p, uid, "git -C inner status; git -C inner log -p -1");
        owner_uses_the_repository(&p, uid);
        assert_eq!(marks_in(&marks), Vec::<String>::new(), "{what}");

        // .git a file pointing outside: read-only inside, and git names it.
        let sb = b.create(&spec("gitbad2", &gws, uid, uid)).await.unwrap();
        let r = sh(
            sb.as_ref(),
            "git status 2>&1; echo \"gitdir: $PWD/evil\" > .git 2>/dev/null && echo repointed",
        )
        .await;
        sb.destroy().await.unwrap();
        assert!(
            r.stdout
                .contains(&format!("not a git repository: {}/.git", outside.display())),
            "{what}: {r:?}"
        );
        assert!(!r.stdout.contains("repointed"), "{what}: {r:?}");

        // A workspace that becomes a repository during the session: its top
        // .git is reserved (an empty read-only directory), so `git init`
        // there fails, and git names the path.
        let plain = workspace(uid, uid);
        let pws = plain.path().canonicalize().unwrap();
        let sb = b.create(&spec("gitbad6", &pws, uid, uid)).await.unwrap();
        let r = sh(sb.as_ref(), &format!("{IDENTITY}set +e\ngit init -q 2>&1; echo x > x; git add x 2>&1 && git commit -qm x 2>&1 && echo committed")).await;
        sb.destroy().await.unwrap();
        eprintln!("{what}: git init at the top: {}", r.stdout);
        assert!(
            r.stdout.contains(&format!("{}/.git", pws.display()))
                && !r.stdout.contains("committed"),
            "{what}: {r:?}"
        );
        assert!(
            !pws.join(".git").exists(),
            "{what}: the placeholder is left"
        );

        // The session's uid differs from the repository's owner: git's own
        // sentence names the path and why.
        let other = workspace(uid, uid);
        let ows = other.path().canonicalize().unwrap();
        repo_at(&ows, 0, &p.home);
        std::os::unix::fs::chown(&ows, Some(uid), Some(uid)).unwrap();
        let sb = b.create(&spec("gitbad3", &ows, uid, uid)).await.unwrap();
        let r = sh(sb.as_ref(), "HOME=/tmp git status 2>&1").await;
        sb.destroy().await.unwrap();
        assert!(
            r.stdout.contains("dubious ownership") && r.stdout.contains(&ows.display().to_string()),
            "{what}: {r:?}"
        );

        // Refused before anything starts, naming the path and why: a .git
        // that is a symlink, a bare repository as the workspace.
        let link = workspace(uid, uid);
        let lws = link.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(outside.join(".git"), lws.join(".git")).unwrap();
        let e = b
            .create(&spec("gitbad4", &lws, uid, uid))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("{}/.git is a symlink", lws.display())),
            "{what}: {e}"
        );
        let bare = workspace(uid, uid);
        let bws = bare.path().canonicalize().unwrap();
        git_ok(&bws, uid, &p.home, &["init", "-q", "--bare"]);
        let e = b
            .create(&spec("gitbad5", &bws, uid, uid))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is itself a git directory"), "{what}: {e}");
    }
}
