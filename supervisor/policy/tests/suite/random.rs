//! Bad input: random bytes and shell-, path- and URL-shaped soups go through
//! `decide` as commands, paths and URLs. Every one gets a decision, never a
//! panic, and the decisions keep the floor's promises: an allowed path lies
//! inside the workspace, an allowed fetch carries only public addresses,
//! nothing shown holds a raw control character.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tollgate_policy::{
    Context, Decision, Engine, FileFacts, FileKind, FsFacts, HostAddrs, HostAddrsError, Mode,
    PolicyConfig, ResolveError, Resolver, ToolCall, Verdict,
};

/// xorshift64*: small, deterministic, good enough to shake input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn bytes(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        let v: Vec<u8> = (0..n).map(|_| self.next() as u8).collect();
        String::from_utf8_lossy(&v).into_owned()
    }
    fn soup(&mut self, tokens: &[&str], max: usize) -> String {
        let n = 1 + self.below(max);
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(self.pick(tokens));
            s.push_str(self.pick(&[" ", " ", " ", "", "\t", "\n"]));
        }
        s
    }
}

const SHELL: &[&str] = &[
    "curl",
    "rm",
    "-rf",
    "-r",
    "/",
    "..",
    ".git",
    "$(",
    ")",
    "`",
    "'",
    "\"",
    "|",
    "||",
    "&&",
    ";",
    "&",
    "\n",
    "<<",
    "<<'EOF'",
    "EOF",
    "<<<",
    ">",
    ">>",
    "2>&1",
    ">&",
    "<",
    "${",
    "}",
    "$'\\x63'",
    "$'",
    "sh",
    "bash",
    "-c",
    "{",
    "(",
    "((",
    "))",
    "*",
    "?",
    "[",
    "]",
    "~",
    "~root",
    "$HOME",
    "$X",
    "!",
    "#",
    "\\",
    "=",
    "PATH=x",
    "find",
    "-exec",
    "\\;",
    "+",
    "xargs",
    "env",
    "-S",
    "nice",
    "timeout",
    "5",
    "git",
    "push",
    "-f",
    "config",
    "core.fsmonitor",
    "-c",
    "<(",
    ">(",
    "case",
    "esac",
    "in",
    "do",
    "done",
    "for",
    "while",
    "true",
    "if",
    "then",
    "fi",
    "function",
    "f()",
    "coproc",
    "time",
    "alias",
    "a=curl",
    "eval",
    "trap",
    "exec",
    "busybox",
    "kill",
    "-9",
    "-1",
    "dd",
    "if=/dev/sda",
    "of=/etc/x",
    "tee",
    "cp",
    "mv",
    "ln",
    "-s",
    "/etc/passwd",
    "/proc/self/root",
    ".env",
    "id_rsa",
    "~/.ssh",
    "tar",
    "--checkpoint-action=exec=curl",
    "watch",
    "flock",
    "python3",
    "-",
    "echo",
    "cat",
    "ls",
    "cargo",
    "test",
    "\u{202e}",
    "\0",
    "é",
    "$((",
    "1+",
    "@(",
    "!(x)",
    "{a,b}",
    "[[",
    "-n",
    "history",
    "export",
];

const PATHS: &[&str] = &[
    "..", ".", "/", "a", "src", "main.rs", "~", "$HOME", "${X}", "\0", "proc", "self", "root",
    "fd", "link", "loop1", "up", "dangling", "%2e", "．", "\u{202e}", "//", "\n", ".git", "config",
    ".env", "etc", "passwd", "w", "proj", "-evil", "file:", "NUL",
];

const URL: &[&str] = &[
    "http://",
    "https://",
    "gopher://",
    "file://",
    "HTTP:",
    "//",
    "[",
    "]",
    "::ffff:",
    "::",
    "127.0.0.1",
    "0x7f",
    "0177",
    "2130706433",
    ".",
    "@",
    ":",
    "%00",
    "%2e",
    "%25",
    "localhost",
    "#",
    "?",
    "\\",
    "①",
    "xn--",
    "-",
    "999999999999",
    "1",
    "example.com",
    "docs.rs",
    "10.0.0.1",
    "169.254.169.254",
    "64:ff9b::",
    "fe80::1%25eth0",
    "\t",
    " ",
    "/",
    "80",
    "0",
    "65536",
];

struct MemFs(HashMap<PathBuf, (FileFacts, Option<PathBuf>)>);

impl FsFacts for MemFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        self.0.get(path).map(|n| n.0)
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.0.get(path).and_then(|n| n.1.clone())
    }
}

fn world() -> MemFs {
    let f = |kind, size| FileFacts {
        kind,
        size,
        nlink: 1,
    };
    let mut m = HashMap::new();
    for d in [
        "/",
        "/w",
        "/w/proj",
        "/w/proj/src",
        "/w/proj/.git",
        "/etc",
        "/proc",
        "/proc/self",
    ] {
        m.insert(PathBuf::from(d), (f(FileKind::Dir, 0), None));
    }
    for (p, size) in [
        ("/w/proj/src/main.rs", 10),
        ("/w/proj/.env", 5),
        ("/etc/passwd", 100),
    ] {
        m.insert(PathBuf::from(p), (f(FileKind::File, size), None));
    }
    for (p, t) in [
        ("/w/proj/link", "/etc"),
        ("/w/proj/up", ".."),
        ("/w/proj/loop1", "loop2"),
        ("/w/proj/loop2", "loop1"),
        ("/w/proj/dangling", "/tmp/nowhere"),
        ("/proc/self/root", "/"),
    ] {
        m.insert(
            PathBuf::from(p),
            (f(FileKind::Symlink, 0), Some(PathBuf::from(t))),
        );
    }
    MemFs(m)
}

struct Dns;

impl Resolver for Dns {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        match host {
            "example.com" => Ok(vec!["93.184.216.34".parse().unwrap()]),
            "docs.rs" => Ok(vec![
                "18.164.96.48".parse().unwrap(),
                "10.1.1.1".parse().unwrap(),
            ]),
            "localtest.me" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            _ => Err(ResolveError::NotFound(host.to_string())),
        }
    }
}

fn ctx(mode: Mode) -> Context {
    Context {
        workspace: PathBuf::from("/w/proj"),
        mode,
        tools: None,
        home: Some(PathBuf::from("/home/u")),
        protected: vec![PathBuf::from("/etc/tollgate")],
        read_files: BTreeSet::new(),
        repo: Vec::new(),
        sandbox: None,
    }
}

fn no_raw_controls(s: &str) -> bool {
    !s.chars()
        .any(|c| c.is_control() || ('\u{202A}'..='\u{202E}').contains(&c))
}

/// The promises every decision keeps, whatever the input.
fn check(d: &Decision, tool: &str, input: &str) {
    assert!(!d.reason.is_empty(), "{tool} {input:?}: empty reason");
    for s in [&d.reason, &d.consequence, &d.target] {
        assert!(no_raw_controls(s), "{tool} {input:?}: raw control in {s:?}");
    }
    if d.verdict != Verdict::Deny {
        let rule = d.rule.as_deref().unwrap_or("");
        assert!(
            !rule.starts_with("floor:") || rule == "floor:secret-file",
            "{tool} {input:?}: {rule}"
        );
        if let Some(p) = &d.path {
            assert!(
                p.starts_with("/w/proj"),
                "{tool} {input:?}: allowed path {p:?}"
            );
        }
        if matches!(
            tool,
            "read_file" | "write_file" | "edit_file" | "glob_files" | "grep"
        ) {
            assert!(d.path.is_some(), "{tool} {input:?}: no path on a non-deny");
        }
        if tool == "webfetch" {
            let f = d
                .fetch
                .as_ref()
                .expect("an allowed fetch carries vetted addresses");
            assert!(!f.addrs.is_empty());
            for a in &f.addrs {
                let ip = a.ip();
                let public = match ip {
                    IpAddr::V4(v4) => {
                        !(v4.is_loopback()
                            || v4.is_private()
                            || v4.is_link_local()
                            || v4.is_unspecified()
                            || v4.is_broadcast()
                            || v4.is_multicast())
                    }
                    IpAddr::V6(v6) => {
                        !(v6.is_loopback() || v6.is_unspecified() || v6.is_multicast())
                    }
                };
                assert!(public, "{input:?}: fetch pinned to {ip}");
            }
        }
    }
}

fn run(tool: &str, args: Value, mode: Mode, engine: &Engine, fs: &MemFs, input: &str) {
    let call = ToolCall {
        tool: tool.to_string(),
        args,
    };
    let d = engine.decide(&call, &ctx(mode), fs, &Dns);
    check(&d, tool, input);
}

#[test]
fn random_input_always_gets_a_decision() {
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let fs = world();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let iterations = std::env::var("TOLLGATE_RANDOM_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500usize);
    for i in 0..iterations {
        let mode = Mode::ALL[i % Mode::ALL.len()];
        let cmd = if i % 3 == 0 {
            rng.bytes(80)
        } else {
            rng.soup(SHELL, 14)
        };
        run(
            "run_bash",
            json!({ "command": cmd }),
            mode,
            &engine,
            &fs,
            &cmd,
        );

        let path = if i % 4 == 0 {
            rng.bytes(40)
        } else {
            let mut p = rng.soup(PATHS, 8);
            p.retain(|c| c != ' ' && c != '\t');
            p = p.replace('\n', "/");
            p
        };
        for tool in ["read_file", "write_file"] {
            let args = if tool == "read_file" {
                json!({ "path": path })
            } else {
                json!({ "path": path, "content": if i % 2 == 0 { "" } else { "x" } })
            };
            run(tool, args, mode, &engine, &fs, &path);
        }
        run(
            "glob_files",
            json!({ "pattern": path, "path": path }),
            mode,
            &engine,
            &fs,
            &path,
        );

        let url = if i % 4 == 0 {
            rng.bytes(40)
        } else {
            let mut u = rng.soup(URL, 8);
            u.retain(|c| c != ' ' && c != '\n');
            u
        };
        run("webfetch", json!({ "url": url }), mode, &engine, &fs, &url);
    }
}

#[test]
fn random_json_arguments_are_validated_not_trusted() {
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let fs = world();
    let mut rng = Rng(42);
    let values = [
        json!(null),
        json!(1),
        json!(-1),
        json!(1.5),
        json!("x"),
        json!(""),
        json!([]),
        json!({}),
        json!(true),
        json!(u64::MAX),
    ];
    let keys = [
        "path",
        "content",
        "command",
        "url",
        "pattern",
        "offset",
        "limit",
        "replace_all",
        "x",
        "",
    ];
    for i in 0..2000 {
        let tool = tollgate_policy::registry()[rng.below(tollgate_policy::registry().len())].name;
        let mut args = serde_json::Map::new();
        for _ in 0..rng.below(4) {
            args.insert(
                keys[rng.below(keys.len())].to_string(),
                values[rng.below(values.len())].clone(),
            );
        }
        let args = if i % 10 == 0 {
            values[rng.below(values.len())].clone()
        } else {
            Value::Object(args)
        };
        let input = args.to_string();
        run(tool, args, Mode::ALL[i % 5], &engine, &fs, &input);
    }
}
