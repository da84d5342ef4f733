//! Table tests of the shell analysis, through `analyze` with an in-memory
//! filesystem.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::facts::{FileFacts, FileKind};

#[derive(Default)]
struct MemFs(HashMap<PathBuf, (FileFacts, Option<PathBuf>)>);

impl MemFs {
    fn link(mut self, p: &str, t: &str) -> Self {
        let f = FileFacts {
            kind: FileKind::Symlink,
            size: 0,
            nlink: 1,
        };
        self.0.insert(p.into(), (f, Some(t.into())));
        self
    }
    fn dir(mut self, p: &str) -> Self {
        let f = FileFacts {
            kind: FileKind::Dir,
            size: 0,
            nlink: 1,
        };
        self.0.insert(p.into(), (f, None));
        self
    }
}

impl FsFacts for MemFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        self.0.get(path).map(|n| n.0)
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.0.get(path).and_then(|n| n.1.clone())
    }
}

fn fs() -> MemFs {
    MemFs::default()
        .dir("/")
        .dir("/w")
        .dir("/w/proj")
        .link("/w/proj/rc", "/home/u/.bashrc")
        .link("/w/proj/inlink", "src")
}

fn run_with(cmd: &str, extra: &[&str]) -> Report {
    run_lifting(cmd, extra, &[])
}

fn run_lifting(cmd: &str, extra: &[&str], lifted: &[&str]) -> Report {
    run_patterns(cmd, extra, lifted, super::patterns::PatternSet::default())
}

fn run_patterns(
    cmd: &str,
    extra: &[&str],
    lifted: &[&str],
    patterns: super::patterns::PatternSet,
) -> Report {
    run_where(cmd, extra, lifted, patterns, None)
}

/// As the sandbox of an owner whose home is /home/u, with `.rustup` shown
/// read-only in it, runs the command.
fn in_sandbox(cmd: &str) -> Report {
    in_sandbox_cached(cmd, None)
}

/// [`in_sandbox`], with the package cache at `cache` inside (`None`: off).
fn in_sandbox_cached(cmd: &str, cache: Option<&str>) -> Report {
    let view = crate::sandbox_env::SandboxView::of(
        Some(Path::new("/home/u")),
        vec![PathBuf::from("/home/u/.rustup")],
    )
    .with_cache(cache.map(PathBuf::from));
    run_where(
        cmd,
        &[],
        &[],
        super::patterns::PatternSet::default(),
        Some(&view),
    )
}

fn run_where(
    cmd: &str,
    extra: &[&str],
    lifted: &[&str],
    patterns: super::patterns::PatternSet,
    sandbox: Option<&crate::sandbox_env::SandboxView>,
) -> Report {
    let extra: lists::NameSet = extra.iter().map(|s| s.to_string()).collect();
    let allowed: Vec<String> = lifted.iter().map(|s| s.to_string()).collect();
    let fs = fs();
    let protected = vec![PathBuf::from("/var/lib/tollgate")];
    let sc = ShellCtx {
        workspace: Path::new("/w/proj"),
        home: Path::new("/home/u"),
        protected: &protected,
        extra_denied: &extra,
        allowed: &allowed,
        fs: &fs,
        collect: true,
        lifted: patterns,
        sandbox,
        network_wall: false,
    };
    analyze(cmd, &sc)
}

/// With `[network]` configured, network clients are decided by the wall
/// (where they connect), not refused by name; everything else on the
/// denied-binaries list stays refused.
#[test]
fn network_clients_are_left_to_the_network_wall_when_network_is_configured() {
    let none = lists::NameSet::default();
    let fs = fs();
    let wall = |cmd: &str, on: bool| {
        let sc = ShellCtx {
            workspace: Path::new("/w/proj"),
            home: Path::new("/home/u"),
            protected: &[],
            extra_denied: &none,
            allowed: &[],
            fs: &fs,
            collect: true,
            lifted: super::patterns::PatternSet::default(),
            network_wall: on,
            sandbox: None,
        };
        analyze(cmd, &sc).deny.map(|f| (f.rule, f.reason))
    };
    for cmd in [
        "curl -fsS https://example.org/",
        "wget -q http://example.org/",
        "nc example.org 7000",
        "ssh git@example.net",
        "scp a git@example.net:b",
        "dig example.org",
    ] {
        assert_eq!(wall(cmd, true), None, "{cmd}");
        let (rule, reason) = wall(cmd, false).unwrap_or_else(|| panic!("{cmd}"));
        assert!(rule.starts_with("floor:"), "{cmd}: {rule}");
        assert!(reason.contains("[network] allow list"), "{cmd}: {reason}");
    }
    for cmd in ["sudo ls", "chmod +x a", "docker ps"] {
        assert!(wall(cmd, true).is_some(), "{cmd}");
    }
}

fn run(cmd: &str) -> Report {
    run_with(cmd, &[])
}

/// The floor rule that denies `cmd`, or panics.
fn denied(cmd: &str) -> String {
    match run(cmd).deny {
        Some(f) => f.rule,
        None => panic!("{cmd:?} was not denied: {:?}", run(cmd)),
    }
}

fn clean(cmd: &str) -> Report {
    let r = run(cmd);
    assert_eq!(r.deny, None, "{cmd:?} was denied");
    r
}

#[test]
fn every_simple_command_is_found() {
    let r = clean(
        "a; b && c || d | e & f\ng $(h) `i` <(j) >(k); (l); { m; }; if n; then o; fi; for x in $(p); do q; done; while r; do s; done; case t in u) v;; esac",
    );
    let mut got: Vec<&str> = r
        .commands
        .iter()
        .map(|c| c.split(' ').next().unwrap_or(""))
        .collect();
    got.sort();
    let mut want = vec![
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
        "s", "v",
    ];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn denied_binaries_behind_every_disguise() {
    for cmd in [
        "curl http://x",
        "/usr/bin/curl x",
        "c''url x",
        "'curl' x",
        "\"cu\"rl x",
        "$'\\x63url' x",
        "$'\\143\\165\\162\\154' x",
        "\\curl x",
        "env curl x",
        "env -i FOO=1 curl x",
        "command curl x",
        "nice -n 19 timeout 5 nohup curl x",
        "timeout -s KILL 5 curl x",
        "echo x | xargs curl",
        "xargs -I{} curl {}",
        "find . -exec curl x \\;",
        "find . -execdir wget x +",
        "busybox nc 1.2.3.4 4444",
        "/lib64/ld-linux-x86-64.so.2 /usr/bin/curl x",
        "exec curl x",
        "stdbuf -oL curl x",
        "setsid curl x",
        "bash -c \"curl x\"",
        "sh -lc 'curl x'",
        "bash -euo pipefail -c 'curl x'",
        "bash <<'EOF'\ncurl x\nEOF",
        "bash <<< 'curl x'",
        "echo $(curl x)",
        "echo `curl x`",
        "echo \"$(curl x)\"",
        "ls > >(curl -d @- x)",
        "diff <(curl a) b",
        "x=$(curl a)",
        "for u in a; do curl $u; done",
        "[ -f x ] || curl x",
        "[[ -n $(curl x) ]]",
        "if true; then curl x; fi",
        "f() { curl x; }",
        "alias get=curl",
        "trap 'curl x' EXIT",
        "watch curl x",
        "flock /tmp/l curl x",
        "flock -c 'curl x' /tmp/l",
        "env -S 'curl x'",
        "git -c core.sshCommand='sh -c \"curl x\"' fetch origin",
        "tar -cf /dev/null . --checkpoint=1 --checkpoint-action=exec='curl x'",
        "echo ${X:-$(curl x)}",
        "sudo -n true",
        "mkfs.ext4 /dev/sdb",
        "docker ps",
        "chmod +x a.sh",
        "ssh -o ProxyCommand='x' h",
        "crontab -l",
    ] {
        assert_eq!(denied(cmd), "floor:denied-binary", "{cmd:?}");
    }
    assert_eq!(
        run_with("helm install x", &["helm"]).deny.map(|f| f.rule),
        Some("floor:denied-binary".to_string())
    );
}

#[test]
fn denied_words_as_data_are_fine() {
    for cmd in [
        "echo curl",
        "echo 'curl is a tool'",
        "git commit -m 'handle curl timeout'",
        "grep -rn 'sudo' src/",
        "rg 'wget|curl|nc ' -g '*.md'",
        "sed -i 's/curl/reqwest/g' src/net.rs",
        "cat docker-compose.yml",
        "ls /usr/bin | grep -c curl",
        "cargo test -- net::curl_like_client --nocapture",
        "cat <<'EOF' > notes.md\nUse curl or wget.\nEOF",
        "which curl",
        "command -v curl",
        "type curl",
        "man curl",
        "echo 'rm -rf / is dangerous' >> NOTES.md",
    ] {
        let r = clean(cmd);
        assert!(r.confirm.is_empty(), "{cmd:?}: {:?}", r.confirm);
    }
}

#[test]
fn hidden_commands_are_refused() {
    for cmd in [
        "$C x",
        "C=curl; $C x",
        "a=cu b=rl; $a$b x",
        "cu${EMPTY}rl x",
        "curl${IFS}http://x",
        "$(printf 'c%sl' ur) x",
        "`echo curl` x",
        "/???/???/c?rl x",
        "/usr/bin/cur[l] x",
        "c{u,}rl x",
        "eval \"cu\"\"rl x\"",
        "echo Y3VybA== | base64 -d | sh",
        "curl_output | bash",
        "cat x | python3",
        "bash -c \"$CMD\"",
        "git clone 'ext::sh -c curl% x' d",
        ". <(echo Y3VybA== | base64 -d)",
        "source <(cat x)",
        "bash <(echo aGk= | base64 -d)",
        "echo x | source /dev/stdin",
    ] {
        assert_eq!(denied(cmd), "floor:hidden-command", "{cmd:?}");
    }
    let mut deep = "ls".to_string();
    for _ in 0..MAX_DEPTH + 1 {
        deep = format!("echo $({deep})");
    }
    assert_eq!(denied(&deep), "floor:hidden-command");
    assert_eq!(denied("echo 'unterminated"), "floor:unparseable");
    assert_eq!(denied("echo $("), "floor:unparseable");
    assert_eq!(denied("if"), "floor:unparseable");
}

#[test]
fn redirect_targets_are_writes_and_path_scoped() {
    for cmd in [
        "echo c > /proc/sysrq-trigger",
        "mv a ../b",
        "touch ../x",
        "echo x > ../outside",
        "echo x >> rc",
        "echo x | tee /etc/x",
        "cp a /etc/",
    ] {
        assert_eq!(denied(cmd), "floor:path-scope", "{cmd:?}");
    }
    // Into /etc or onto a disk: the `system-write` pattern (and `dd`);
    // lifted, the path floor still refuses them.
    let all = all_patterns();
    for cmd in [
        "echo x >> /etc/hosts",
        ">/etc/ld.so.preload",
        "cat x > /dev/sda",
        "echo x &> /etc/x",
        "dd if=a of=/dev/sda",
        "cd /etc && echo x > passwd",
        "exec 3>/etc/x",
    ] {
        assert_eq!(denied(cmd), "floor:dangerous-pattern", "{cmd:?}");
        let lifted = run_patterns(cmd, &[], &[], all).deny.map(|f| f.rule);
        assert_eq!(lifted.as_deref(), Some("floor:path-scope"), "{cmd:?}");
    }
    for cmd in [
        "echo x > out.txt",
        "echo x 2>/dev/null > /tmp/scratch",
        "make 2>&1 | tee build.log",
        "cmd >/dev/null 2>&1",
        "cat < /dev/null",
        "cp -r src /tmp/x",
        "echo x > inlink/a.rs",
        "cd src && echo x > a.rs",
    ] {
        clean(cmd);
    }
    assert_eq!(denied("echo x > .git/config"), "floor:git-internals");
    assert_eq!(
        denied("cp hook .git/hooks/pre-commit"),
        "floor:git-internals"
    );
    assert_eq!(denied("cat /home/u/.ssh/id_rsa"), "floor:credential-path");
    assert_eq!(denied("tar czf - ~/.ssh ~/.aws"), "floor:credential-path");
    assert_eq!(denied("shred -u ~/.ssh/id_rsa"), "floor:credential-path");
    assert_eq!(denied("cat ~/.s*/id_rsa"), "floor:credential-path");
    assert_eq!(denied("cat /home/*/.ssh/id_rsa"), "floor:credential-path");
    assert_eq!(denied("cp -r ~/.{ssh,aws} /tmp/x"), "floor:credential-path");
    clean("ls ~/* src/*.rs");
    clean("source ./env.sh");
    assert_eq!(denied("cat /etc/shadow"), "floor:credential-path");
    assert_eq!(
        denied("cat --file=/root/.aws/credentials"),
        "floor:credential-path"
    );
    assert_eq!(denied("ls /var/lib/tollgate"), "floor:protected");
}

#[test]
fn dangerous_patterns() {
    for cmd in [
        "rm -rf /",
        "rm -rf ~/",
        "rm -rf $HOME",
        "rm -Rf /etc",
        "rm -rf ..",
        "rm -rf ../",
        "rm -rf \"$UNSET_BUILD_DIR\"/",
        "rm -rf \"${BUILD_DIR}\"/*",
        "\\rm -rf /",
        "rm -r -f /*",
        "rm -rf .",
        "rm -rf *",
        "rm --recursive /w",
        "find / -delete",
        "find .. -name x -delete",
        "kill -9 -1",
        "kill -- -1",
        "bomb(){ bomb|bomb& };bomb",
        ":(){ :|:& };:",
        "while true; do sleep 100 & done",
        "history -c",
        "export PATH=/tmp/evil:$PATH",
        "PATH=. ls",
        "env LD_PRELOAD=x.so ls",
        "declare -x BASH_ENV=x",
        "git config core.fsmonitor 'x'",
        "git config --global alias.st '!sh'",
        "git config set core.hooksPath /tmp/h",
        "dd if=/dev/sda of=disk.img",
    ] {
        let rule = denied(cmd);
        assert!(
            rule == "floor:dangerous-pattern" || rule == "floor:path-scope",
            "{cmd:?}: {rule}"
        );
    }
    for cmd in [
        "rm -rf target/",
        "rm -rf crates/x/target build node_modules",
        "rm -f a.o",
        "find . -name '*.o' -delete",
        "kill 1234",
        "kill -1 1234",
        "git config user.name x",
        "git config --get core.fsmonitor",
        "while read -r l; do echo \"$l\"; done < f",
        "while IFS= read -r line; do x; done",
        "rm -rf /tmp/build",
    ] {
        let r = clean(cmd);
        assert!(r.confirm.is_empty(), "{cmd:?}: {:?}", r.confirm);
    }
}

#[test]
fn always_confirm_shapes() {
    let confirm = |cmd: &str| -> (String, Option<String>) {
        let r = clean(cmd);
        let f = r
            .confirm
            .first()
            .unwrap_or_else(|| panic!("{cmd:?} not confirmed"));
        (f.rule.clone(), f.target.clone())
    };
    assert_eq!(confirm("rm -rf .git").0, "confirm:rm-recursive");
    assert_eq!(confirm("rm -r src").0, "confirm:rm-recursive");
    assert_eq!(confirm("git push").0, "confirm:git-push");
    assert_eq!(confirm("git push origin main").0, "confirm:git-push");
    for cmd in [
        "git push --force",
        "git push -f",
        "git push -uf origin main",
        "git push origin +main",
        "git push --force-with-lease",
        "git push --mirror",
        "git push origin --delete main",
        "git push origin :main",
        "git -c push.default=current push -f",
        "git -C . push --force origin feature",
    ] {
        assert_eq!(confirm(cmd).0, "confirm:git-push-force", "{cmd:?}");
    }
    assert_eq!(
        confirm("git push -uf origin main").1.as_deref(),
        Some("main")
    );
    assert_eq!(
        confirm("git push origin +feature/x").1.as_deref(),
        Some("feature/x")
    );
    assert_eq!(confirm("git push --force").1, None);
    assert_eq!(
        confirm("git reset --hard HEAD~5").0,
        "confirm:git-reset-hard"
    );
    assert_eq!(confirm("git clean -fdx").0, "confirm:git-clean");
    assert_eq!(confirm("git checkout -- .").0, "confirm:git-discard");
    assert_eq!(confirm("git restore src/a.rs").0, "confirm:git-discard");
    assert_eq!(confirm("git branch -D old").0, "confirm:git-branch-delete");
    assert_eq!(confirm("git stash clear").0, "confirm:git-stash-drop");
    for cmd in [
        "git fetch origin",
        "git status",
        "git reset HEAD a",
        "git clean -n",
        "git restore --staged a",
        "git checkout -b x",
        "git log --oneline -20",
    ] {
        assert!(clean(cmd).confirm.is_empty(), "{cmd:?}");
    }
}

#[test]
fn secrets_are_noted_not_denied() {
    assert_eq!(clean("cat .env").secret.as_deref(), Some(".env"));
    assert_eq!(
        clean("source config/.env.production").secret.as_deref(),
        Some("config/.env.production")
    );
    assert_eq!(clean("grep KEY < .env").secret.as_deref(), Some(".env"));
    assert_eq!(clean("cat .env.example").secret, None);
    assert_eq!(clean("echo .env").secret, None);
}

#[test]
fn rule_subjects_strip_wrappers() {
    let r = clean("nice -n 5 cargo test -p x && timeout 60 cargo build");
    assert_eq!(r.commands, vec!["cargo test -p x", "cargo build"]);
    assert_eq!(
        r.outer,
        vec!["nice -n 5 cargo test -p x", "timeout 60 cargo build"]
    );
    let r = clean("sh -c 'cargo test'");
    assert_eq!(r.commands, vec!["cargo test"]);
}

/// Found by the fuzzer: brush-parser 0.4 unwrapped a redirect's fd number
/// and panicked on overflow. Now (vendored patch 11) digits that do not fit
/// an int are an ordinary word, as in bash, and the redirect is checked like
/// any other.
#[test]
fn regression_brush_fd_number_overflow_is_a_word() {
    let cmd = ". ..\u{ca}. 4444444444444444444444444444444444444444444444444444444444<. ...";
    assert!(
        run(cmd).commands.iter().any(|c| c.contains("44444444")),
        "{:?}",
        run(cmd)
    );
    let r = clean("cat 99999999999999999999<x");
    assert_eq!(r.commands, ["cat 99999999999999999999"]);
    assert_eq!(
        denied("cat 99999999999999999999</etc/shadow"),
        "floor:credential-path"
    );
    assert_eq!(
        denied("echo 99999999999999999999>/etc/x"),
        "floor:dangerous-pattern"
    );
    assert_eq!(denied("echo 99999999999999999999>../x"), "floor:path-scope");
}

#[test]
fn odd_input_never_panics() {
    for cmd in [
        "",
        " ",
        "\0",
        ";;;;",
        "((((",
        "$((",
        "${",
        "`",
        "<<<",
        "<<EOF",
        "a\u{202E}b",
        "\u{feff}ls",
        "case",
        "for",
        "\\",
        "$'\\",
        "$'\\x",
        "$'\\u{'",
        "! ! !",
        "coproc x",
        "time -p ls",
        "function f { g; }",
    ] {
        let _ = run(cmd);
    }
}

#[test]
fn assignment_words_are_told_from_command_words() {
    // The vendored brush-parser skips its assignment parser for words
    // without '=' (vendor/brush-parser/TOLLGATE.md); every form with one
    // still goes through it.
    let names = |cmd: &str| -> Vec<String> {
        clean(cmd)
            .commands
            .iter()
            .map(|c| c.split(' ').next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(names("FOO=bar ls -l"), ["ls"]);
    assert_eq!(names("a+=b c[1]=d e= cmd x=y --opt=v"), ["cmd"]);
    assert_eq!(names("X=1"), Vec::<String>::new());
    assert_eq!(names("arr=(one two) ls"), ["ls"]);
    // Not assignments: a quoted name, no name, a name that is not one.
    assert_eq!(names("\"A=b\" ls"), ["A=b"]);
    assert_eq!(names("=x ls"), ["=x"]);
    assert_eq!(names("1a=b ls"), ["1a=b"]);
    // An assignment's value is still analysed: its substitution runs.
    assert_eq!(names("X=$(whoami) ls"), ["whoami", "ls"]);
    assert_eq!(denied("X=1 rm -rf /"), denied("rm -rf /"));
}

#[test]
fn launchers_record_the_command_they_run_for_rules() {
    let r = clean("timeout 5 env -i A=1 nice -n 2 cargo test -p x");
    assert_eq!(r.commands, ["cargo test -p x"]);
    assert_eq!(r.outer, ["timeout 5 env -i A=1 nice -n 2 cargo test -p x"]);
    let r = clean("find src -name '*.rs' -exec rustfmt {} +");
    assert_eq!(
        r.commands,
        ["rustfmt src", "find src -name *.rs -exec rustfmt {} +"]
    );
    let r = clean("xargs -I{} cargo test {} <<< net");
    assert_eq!(r.commands, ["cargo test net"]);
    // A launcher that runs nothing is an ordinary command.
    assert_eq!(clean("command -v cargo").commands, ["command -v cargo"]);
}

#[test]
fn aliases_expand_with_their_arguments() {
    assert_eq!(
        denied("alias t='timeout 5'; t rm -rf ~"),
        "floor:dangerous-pattern"
    );
    assert_eq!(denied("alias get=curl; get x"), "floor:denied-binary");
    // Never inside its own expansion, as in bash.
    let r = clean("alias ls='ls --color'; ls src");
    assert!(r.commands.iter().any(|c| c == "ls --color src"), "{r:?}");
    // Without `shopt -s expand_aliases` bash runs the command itself, so
    // that is judged too.
    assert!(r.commands.iter().any(|c| c == "ls src"), "{r:?}");
    assert_eq!(denied("alias curl=echo; curl x"), "floor:denied-binary");
}

#[test]
fn bare_names_are_paths_after_cd_elsewhere() {
    assert_eq!(denied("cd /etc && cat shadow"), "floor:credential-path");
    assert_eq!(denied("env -C ~/.ssh cat id_rsa"), "floor:credential-path");
    assert_eq!(denied("cd ~/.ssh; cat *"), "floor:credential-path");
    clean("cd src && cat main.rs");
    clean("cd /tmp && ls -la");
}

#[test]
fn fanning_out_has_a_budget() {
    // 30 start points, each running a command with 30 items: more walks
    // than the gate takes.
    let starts: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
    let starts = starts.join(" ");
    let cmd = format!("find {starts} -exec parallel echo {{}} ::: {starts} \\;");
    assert_eq!(denied(&cmd), "floor:hidden-command");
    let r = run(&cmd);
    assert!(
        r.deny
            .is_some_and(|f| f.reason.contains("more combinations")),
        "{cmd}"
    );
    // A few are fine.
    clean("find a b c -name '*.o' -exec echo {} +");
}

#[test]
fn lifted_binaries_are_judged_like_any_command() {
    let lift = |cmd: &str, lifted: &[&str]| run_lifting(cmd, &[], lifted).deny.map(|f| f.rule);
    assert_eq!(
        lift("sudo make install", &[]),
        Some("floor:denied-binary".into())
    );
    assert_eq!(lift("sudo make install", &["sudo"]), None);
    assert_eq!(
        lift("sudo rm -rf /", &["sudo"]),
        Some("floor:dangerous-pattern".into())
    );
    assert_eq!(
        lift("sudo curl x", &["sudo"]),
        Some("floor:denied-binary".into())
    );
    assert_eq!(lift("chmod +x a.sh", &["chmod"]), None);
    assert_eq!(
        lift("chmod 4755 /usr/bin/x", &["chmod"]),
        Some("floor:path-scope".into())
    );
    // A copy of a lifted binary is no longer a copy of a denied one.
    assert_eq!(lift("cp /usr/bin/ssh ./s", &["ssh"]), None);
    assert_eq!(
        lift("cp /usr/bin/ssh ./s", &[]),
        Some("floor:denied-binary".into())
    );
}

/// Each launcher is a level of recursion: 13,000 of them in 64 KiB must
/// cost a denial, not the worker's stack.
#[test]
fn regression_launcher_chains_do_not_overflow_the_stack() {
    for unit in [
        "nice ",
        "env ",
        "timeout 1 ",
        "xargs ",
        "command ",
        "nohup nice -n 1 ",
    ] {
        let mut cmd = unit.repeat(65_000 / unit.len());
        cmd.push_str("true");
        let rule = run(&cmd).deny.map(|f| f.rule);
        assert_eq!(rule.as_deref(), Some("floor:hidden-command"), "{unit:?}");
    }
    let nested = format!("find . -exec {}true \\;", "xargs timeout 1 ".repeat(40));
    let rule = run(&nested).deny.map(|f| f.rule);
    assert_eq!(rule.as_deref(), Some("floor:hidden-command"));
    clean("nice timeout 5 env A=1 nohup cargo test");
}

fn all_patterns() -> super::patterns::PatternSet {
    let mut all = super::patterns::PatternSet::default();
    for p in super::patterns::Pattern::ALL {
        all.insert(p);
    }
    all
}

fn lifting(cmd: &str, p: super::patterns::Pattern) -> Report {
    let mut set = super::patterns::PatternSet::default();
    set.insert(p);
    run_patterns(cmd, &[], &[], set)
}

/// The finding: `dd … of=FILE` inside the workspace ran, though `dd` is one
/// of the seed's dangerous patterns.
#[test]
fn dd_of_a_workspace_file_is_refused_by_default() {
    for cmd in [
        "dd if=/dev/zero of=blob bs=1k count=1",
        "dd of=disk.img if=src.img",
        "cat x | dd of=out.bin",
        "sh -c 'dd if=a of=b'",
    ] {
        let f = run(cmd).deny.unwrap_or_else(|| panic!("{cmd:?} ran"));
        assert_eq!(f.rule, "floor:dangerous-pattern", "{cmd:?}");
        assert!(f.reason.contains("dangerous pattern `dd`"), "{}", f.reason);
        assert!(f.reason.contains("lift_patterns"), "{}", f.reason);
    }
    // A `dd` that copies nothing named (a pipe filter) is no block copy.
    clean("head -c 10 f | dd bs=1 2>/dev/null");
    // Lifted: judged as before, the target path-scoped.
    let r = lifting(
        "dd if=/dev/zero of=blob bs=1k count=1",
        super::patterns::Pattern::Dd,
    );
    assert_eq!(r.deny, None);
    assert!(r.lifted.contains(super::patterns::Pattern::Dd));
    assert_eq!(
        lifting("dd if=a of=../out", super::patterns::Pattern::Dd)
            .deny
            .map(|f| f.rule),
        Some("floor:path-scope".to_string())
    );
    assert_eq!(
        lifting("dd if=/dev/sda of=disk.img", super::patterns::Pattern::Dd)
            .deny
            .map(|f| f.rule),
        Some("floor:dangerous-pattern".to_string()),
        "reading a raw device is not the lifted pattern"
    );
}

#[test]
fn every_seed_pattern_is_refused_by_default_and_liftable() {
    use super::patterns::Pattern;
    for (p, cmd) in [
        (Pattern::RmBroad, "rm -rf /w/proj"),
        (Pattern::ForkBomb, ":(){ :|:& };:"),
        (Pattern::ForkBomb, "while true; do sleep 1 & done"),
        (Pattern::Dd, "dd if=a of=b"),
        (Pattern::SystemWrite, "echo x > /dev/nvme0n1"),
        (Pattern::HistoryClear, "history -c"),
        (Pattern::PathChange, "export PATH=/w/proj/bin:$PATH"),
        (Pattern::PathChange, "PATH=/w/proj/bin make"),
    ] {
        let f = run(cmd).deny.unwrap_or_else(|| panic!("{cmd:?} ran"));
        assert_eq!(f.rule, "floor:dangerous-pattern", "{cmd:?}");
        assert!(
            f.reason.contains(&format!("dangerous pattern `{p}`")),
            "{cmd:?}: {}",
            f.reason
        );
        let lifted = lifting(cmd, p);
        assert!(lifted.lifted.contains(p), "{cmd:?}: {lifted:?}");
        // Lifting one pattern lifts that one only.
        for other in Pattern::ALL.into_iter().filter(|o| *o != p) {
            assert!(!lifted.lifted.contains(other), "{cmd:?}");
        }
    }
    // rm-broad lifted: the workspace root is still a recursive delete to
    // confirm; `/` is still outside the workspace.
    let r = lifting("rm -rf /w/proj", Pattern::RmBroad);
    assert_eq!(r.deny, None);
    assert_eq!(r.confirm[0].rule, "confirm:rm-recursive");
    assert_eq!(
        lifting("rm -rf /", Pattern::RmBroad).deny.map(|f| f.rule),
        Some("floor:path-scope".to_string())
    );
    // mkfs is a denied binary and a pattern: lifting the pattern lifts
    // every mkfs program.
    assert_eq!(denied("mkfs.ext4 img"), "floor:denied-binary");
    assert!(run("mkfs.ext4 img").deny.unwrap().reason.contains("`mkfs`"));
    let r = lifting("mkfs.ext4 img", Pattern::Mkfs);
    assert_eq!(r.deny, None);
    assert!(r.lifted.contains(Pattern::Mkfs));
    // Other loader variables are never lifted with PATH.
    assert_eq!(
        lifting("env LD_PRELOAD=x.so ls", Pattern::PathChange)
            .deny
            .map(|f| f.rule),
        Some("floor:dangerous-pattern".to_string())
    );
    // A lifted PATH assignment's value is still walked.
    assert_eq!(
        lifting("PATH=$(curl x) ls", Pattern::PathChange)
            .deny
            .map(|f| f.rule),
        Some("floor:denied-binary".to_string())
    );
}

/// In the sandbox, `~`, `$HOME`, `$TMPDIR` and `$PWD` are what the sandbox
/// sets them to: paths built from them resolve instead of being refused as
/// partly known, and writes into the private home and /tmp are the
/// sandbox's business; a command may set PATH and HOME for itself. On the
/// host (a client's shell not routed) the floor stays as it was.
#[test]
fn the_sandbox_environment_is_judged_as_the_sandbox_sets_it() {
    for ok in [
        "echo x > $TMPDIR/out",
        "echo x > \"${TMPDIR}/out\"",
        "mkdir -p $HOME/.cache/x && echo y > ~/.cache/x/f",
        "echo cfg > ~/.gitconfig",
        "echo x > $PWD/inside.txt",
        "cd src && echo x > $PWD/inside.txt",
        "export PATH=$HOME/.cargo/bin:$PATH; cargo build",
        "PATH=/home/u/.local/bin:$PATH make",
        "HOME=/tmp/h git config --global user.name x",
        "export HOME=/tmp/h2; echo x > ~/f",
    ] {
        let r = in_sandbox(ok);
        assert_eq!(r.deny, None, "{ok}");
    }
    for (bad, rule) in [
        ("echo x > ~/.rustup/settings.toml", "floor:path-scope"),
        ("cat ~/.ssh/id_rsa", "floor:credential-path"),
        ("echo x > /etc/motd", "floor:dangerous-pattern"),
        (
            "export HOME=/etc; echo x > ~/motd",
            "floor:dangerous-pattern",
        ),
        ("HOME=$(pwd)/x; echo x > ~/f", "floor:path-scope"),
        ("LD_PRELOAD=/tmp/x.so ls", "floor:dangerous-pattern"),
        ("echo x > $PWD/../outside", "floor:path-scope"),
    ] {
        let r = in_sandbox(bad);
        assert_eq!(
            r.deny.as_ref().map(|d| d.rule.as_str()),
            Some(rule),
            "{bad}: {r:?}"
        );
    }
    // On the host the old floor holds.
    for bad in [
        "echo x > $TMPDIR/out",
        "export PATH=$HOME/.cargo/bin:$PATH",
        "echo x > ~/.gitconfig",
    ] {
        assert!(run(bad).deny.is_some(), "{bad}");
    }
}

/// The package caches' variables are judged with the values the sandbox
/// sets: a path built from them resolves (and is judged where it lands);
/// with caches off they are unset inside and stay unknown, as on the host.
#[test]
fn the_cache_variables_are_judged_as_the_sandbox_sets_them() {
    let on = |cmd: &str| in_sandbox_cached(cmd, Some("/home/u/.tollgate-cache"));
    for ok in [
        "echo x > \"$npm_config_cache/x\"",
        "ls $PIP_CACHE_DIR",
        "mkdir -p \"${CARGO_HOME}/registry\" && echo y > $CARGO_HOME/registry/f",
        "echo x > $GOMODCACHE/m && cat $BUN_INSTALL_CACHE_DIR/b $YARN_CACHE_FOLDER/y",
        // Resolved: /home/u/etc/x, in the private home.
        "echo x > $PIP_CACHE_DIR/../../etc/x",
        "export npm_config_cache=/tmp/npm; echo x > $npm_config_cache/f",
    ] {
        let r = on(ok);
        assert_eq!(r.deny, None, "{ok}");
    }
    for (bad, rule) in [
        (
            "echo x > $PIP_CACHE_DIR/../../../../etc/x",
            "floor:dangerous-pattern",
        ),
        (
            "echo x > \"$npm_config_cache/../../../../var/x\"",
            "floor:path-scope",
        ),
        (
            "echo x > $PIP_CACHE_DIR/../../.rustup/settings.toml",
            "floor:path-scope",
        ),
        (
            "export npm_config_cache=$(pwd)/x; echo x > $npm_config_cache/f",
            "floor:path-scope",
        ),
        (
            "unset PIP_CACHE_DIR; echo x > $PIP_CACHE_DIR/f",
            "floor:path-scope",
        ),
    ] {
        let r = on(bad);
        assert_eq!(
            r.deny.as_ref().map(|d| d.rule.as_str()),
            Some(rule),
            "{bad}: {r:?}"
        );
    }
    // Caches off: unset inside, not known, as on the host.
    for cmd in ["echo x > \"$npm_config_cache/x\"", "echo x > $CARGO_HOME/f"] {
        let off = in_sandbox(cmd);
        assert_eq!(
            off.deny.as_ref().map(|d| d.rule.as_str()),
            Some("floor:path-scope"),
            "{cmd}: {off:?}"
        );
        assert!(run(cmd).deny.is_some(), "{cmd}");
    }
}
