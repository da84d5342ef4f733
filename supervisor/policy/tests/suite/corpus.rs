//! The adversarial corpus (`tests/corpus/{shell,paths,ssrf}.jsonl`) run
//! through the engine, with the meaning of each `expect` taken from the
//! corpus README. Results are printed per category (`cargo test -p tollgate-policy --test
//! all -- corpus:: --nocapture`); every case must pass or be an accepted
//! alternative, and every `naive_fp` case must be allowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tollgate_policy::{
    Context, Decision, Engine, FileFacts, FileKind, FsFacts, HostAddrs, HostAddrsError, Mode,
    PolicyConfig, ResolveError, Resolver, ToolCall, Verdict,
};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/corpus");

fn load(name: &str) -> Vec<Value> {
    let path = Path::new(CORPUS).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the corpus file {}: {e} (the corpus fixtures live in tests/corpus)",
            path.display()
        )
    });
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The real filesystem, as the daemon's `RealFs` reads it.
struct RealFs;

impl FsFacts for RealFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        let m = std::fs::symlink_metadata(path).ok()?;
        let ft = m.file_type();
        let kind = if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Dir
        } else if ft.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        };
        Some(FileFacts {
            kind,
            size: m.len(),
            nlink: m.nlink(),
        })
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }
}

/// DNS from a fixed table; anything else does not resolve.
struct Table(HashMap<String, Vec<IpAddr>>);

impl Resolver for Table {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        self.0
            .get(host)
            .cloned()
            .ok_or_else(|| ResolveError::NotFound(host.to_string()))
    }
}

fn offline() -> Table {
    Table(HashMap::new())
}

#[derive(Default)]
struct Tally {
    by_category: BTreeMap<String, (usize, usize)>,
    notes: Vec<String>,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, category: &str, ok: bool, line: String) {
        let e = self.by_category.entry(category.to_string()).or_default();
        e.1 += 1;
        if ok {
            e.0 += 1;
        } else {
            self.failures.push(line);
        }
    }

    fn print_and_check(&self, name: &str) {
        println!("== {name}: results per category (passed/total)");
        let (mut p, mut t) = (0, 0);
        for (c, (pass, total)) in &self.by_category {
            println!("  {c:<22} {pass}/{total}");
            p += pass;
            t += total;
        }
        println!("  {:<22} {p}/{t}", "TOTAL");
        for n in &self.notes {
            println!("  note: {n}");
        }
        for f in &self.failures {
            println!("  FAIL: {f}");
        }
        assert!(
            self.failures.is_empty(),
            "{name}: {} failures",
            self.failures.len()
        );
    }
}

fn ctx(workspace: &Path, mode: Mode) -> Context {
    Context {
        workspace: workspace.to_path_buf(),
        mode,
        tools: None,
        home: Some(PathBuf::from("/home/dev")),
        protected: vec![],
        read_files: BTreeSet::new(),
        repo: Vec::new(),
        sandbox: None,
    }
}

fn call(tool: &str, args: Value) -> ToolCall {
    ToolCall {
        tool: tool.to_string(),
        args,
    }
}

fn show(d: &Decision) -> String {
    format!(
        "{}{} rule={} reason={:?}",
        d.verdict.as_str(),
        if d.destructive { "(destructive)" } else { "" },
        d.rule.as_deref().unwrap_or("-"),
        d.reason
    )
}

/// What an expectation means, per the corpus README.
fn shell_meets(expect: &str, default: &Decision, skip: &Decision) -> bool {
    match expect {
        // Denied in every mode; the always-confirm tier may instead ask
        // (destructive) in default mode, and is denied in skip mode.
        "block" => {
            skip.verdict == Verdict::Deny
                && (default.verdict == Verdict::Deny
                    || (default.verdict == Verdict::Ask && default.destructive))
        }
        // Ask with a typed confirmation in default, denied in skip mode. A
        // workspace secret-file read is the same tier for a different
        // reason: it asks (secret) in default and is denied in skip mode.
        "confirm" => {
            default.verdict == Verdict::Ask
                && (default.destructive || default.secret)
                && skip.verdict == Verdict::Deny
        }
        "allow" => skip.verdict == Verdict::Allow,
        other => panic!("unknown expect {other:?}"),
    }
}

#[test]
fn shell_corpus() {
    let cases = load("shell.jsonl");
    assert!(cases.len() > 100, "shell corpus too small: {}", cases.len());
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("scripts")).unwrap();
    std::fs::create_dir_all(ws.join("target/release")).unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=x\n").unwrap();
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let mut tally = Tally::default();
    let mut let_through = Vec::new();
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        let cmd = c["cmd"].as_str().unwrap();
        let expect = c["expect"].as_str().unwrap();
        let alt = c["alt_ok"].as_str();
        let sandbox_only = c["sandbox_only"].as_bool().unwrap_or(false);
        let naive_fp = c["naive_fp"].as_bool().unwrap_or(false);
        let category = c["category"].as_str().unwrap();
        let args = json!({ "command": cmd });
        let default = engine.decide(
            &call("run_bash", args.clone()),
            &ctx(&ws, Mode::Default),
            &RealFs,
            &offline(),
        );
        let skip = engine.decide(
            &call("run_bash", args),
            &ctx(&ws, Mode::DangerouslySkipPermissions),
            &RealFs,
            &offline(),
        );
        // In default mode every run_bash at least asks.
        assert_ne!(
            default.verdict,
            Verdict::Allow,
            "{id}: default mode allowed a command"
        );
        let exact = shell_meets(expect, &default, &skip);
        let via_alt = !exact && alt.is_some_and(|a| shell_meets(a, &default, &skip));
        let through = !exact && !via_alt && sandbox_only && skip.verdict == Verdict::Allow;
        if naive_fp {
            // A benign command must never be blocked by a word in a string.
            let ok = skip.verdict == Verdict::Allow;
            tally.record(
                "naive_fp",
                ok,
                format!("{id} {cmd:?}: naive_fp case not allowed: {}", show(&skip)),
            );
        }
        if via_alt {
            tally.notes.push(format!(
                "{id}: accepted alternative {:?} (expected {expect})",
                alt.unwrap_or("")
            ));
        }
        if expect == "confirm" && exact && !default.destructive {
            tally.notes.push(format!(
                "{id}: confirm met by the secret-file approval (ask, secret; denied in skip mode)"
            ));
        }
        if through {
            let_through.push(format!("{id} ({category})"));
        }
        tally.record(
            category,
            exact || via_alt || through,
            format!(
                "{id} {cmd:?}: expected {expect}{}; default: {}; skip: {}",
                alt.map(|a| format!(" (or {a})")).unwrap_or_default(),
                show(&default),
                show(&skip)
            ),
        );
    }
    if !let_through.is_empty() {
        tally.notes.push(format!(
            "sandbox-only cases the gate lets through (the sandbox must stop them; escape.jsonl checks): {}",
            let_through.join(", ")
        ));
    }
    tally.print_and_check("shell.jsonl");
}

fn fill(s: &str, vars: &[(&str, String)]) -> String {
    let mut out = s.to_string();
    for (k, v) in vars {
        out = out.replace(k, v);
    }
    out
}

fn all_files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            all_files(&p, out);
        } else if m.is_file() {
            out.insert(p);
        }
    }
}

#[test]
fn paths_corpus() {
    let cases = load("paths.jsonl");
    assert!(cases.len() > 50, "paths corpus too small");
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let mut tally = Tally::default();
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        let category = c["category"].as_str().unwrap();
        let expect = c["expect"].as_str().unwrap();
        let alt = c["alt_ok"].as_str();
        let flag = c["flag"].as_str();
        let race = c.get("race").is_some();
        // A fresh world per case: the workspace W, a fake home and the
        // supervisor's own files.
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().canonicalize().unwrap();
        let ws = root_path.join("work");
        let home = root_path.join("home");
        let etc = root_path.join("etc-tollgate");
        for d in [&ws, &home, &etc] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".bashrc"), "# rc\n").unwrap();
        std::fs::write(home.join(".profile"), "# profile\n").unwrap();
        let policy_file = etc.join("supervisor.toml");
        let audit_log = etc.join("audit.jsonl");
        std::fs::write(&policy_file, "[policy]\n").unwrap();
        let vars = [
            ("{W_NAME}", "work".to_string()),
            ("{W}", ws.display().to_string()),
            ("{HOME}", home.display().to_string()),
            ("{POLICY_FILE}", policy_file.display().to_string()),
            ("{AUDIT_LOG}", audit_log.display().to_string()),
        ];
        for step in c["setup"].as_array().into_iter().flatten() {
            let s: Vec<String> = step
                .as_array()
                .unwrap()
                .iter()
                .map(|v| fill(v.as_str().unwrap(), &vars))
                .collect();
            let at = |p: &str| ws.join(p);
            match s[0].as_str() {
                "mkdir" => std::fs::create_dir_all(at(&s[1])).unwrap(),
                "file" => std::fs::write(at(&s[1]), &s[2]).unwrap(),
                "symlink" => std::os::unix::fs::symlink(&s[2], at(&s[1])).unwrap(),
                "hardlink" => std::fs::hard_link(&s[2], at(&s[1])).unwrap(),
                "fifo" => assert!(
                    std::process::Command::new("mkfifo")
                        .arg(at(&s[1]))
                        .status()
                        .unwrap()
                        .success()
                ),
                "rmdir" => std::fs::remove_dir(at(&s[1])).unwrap(),
                other => panic!("{id}: unknown setup step {other}"),
            }
        }
        let path = fill(c["path"].as_str().unwrap(), &vars);
        let (tool, args) = match c["kind"].as_str().unwrap() {
            "read" => ("read_file", json!({ "path": path })),
            "write" => (
                "write_file",
                json!({ "path": path, "content": "new content\n" }),
            ),
            other => panic!("{id}: unknown kind {other}"),
        };
        // acceptEdits: reads and writes inside the workspace need no
        // approval, so what remains is the floor. Every existing file counts
        // as read, so the overwrite-unread confirmation stays out of the way.
        let mut cx = ctx(&ws, Mode::AcceptEdits);
        cx.home = Some(home.clone());
        cx.protected = vec![etc.clone()];
        all_files(&ws, &mut cx.read_files);
        let d = engine.decide(&call(tool, args), &cx, &RealFs, &offline());
        let meets = |e: &str| match e {
            "allow" => {
                d.verdict == Verdict::Allow
                    || (flag == Some("secret") && d.verdict == Verdict::Ask && d.secret)
            }
            "block" => {
                d.verdict == Verdict::Deny
                    || (flag == Some("secret") && d.verdict == Verdict::Ask && d.secret)
            }
            other => panic!("unknown expect {other}"),
        };
        if race {
            // The race step runs between the check and the open: at check
            // time the path is fine, so the gate rightly allows it, and only
            // the executor's open (openat2 RESOLVE_BENEATH, the tools crate)
            // can stop the swapped-in link. Not a gate case.
            tally.notes.push(format!(
                "{id}: `race` case, for a TOCTOU harness against the executor; the gate sees the pre-race state and says {} (not counted)",
                d.verdict.as_str()
            ));
            continue;
        }
        let exact = meets(expect);
        let via_alt = !exact && alt.is_some_and(meets);
        let mut ok = exact || via_alt;
        if via_alt {
            tally.notes.push(format!(
                "{id}: accepted alternative {:?} (expected {expect}): {}",
                alt.unwrap_or(""),
                show(&d)
            ));
        }
        if flag == Some("secret") && d.verdict == Verdict::Ask {
            tally.notes.push(format!(
                "{id}: secret file: ask with secret=true ({})",
                d.rule.as_deref().unwrap_or("-")
            ));
        }
        if matches!(flag, Some("log-injection" | "display-spoofing")) {
            // Allowed, but escaped wherever it is shown.
            let raw_controls = |s: &str| {
                s.chars()
                    .any(|c| c.is_control() || ('\u{202A}'..='\u{202E}').contains(&c))
            };
            let escaped = !raw_controls(&d.consequence)
                && !raw_controls(&d.reason)
                && !raw_controls(&d.target);
            if !escaped {
                ok = false;
            }
        }
        tally.record(
            category,
            ok,
            format!(
                "{id} {path:?} ({}): expected {expect}; got {}; consequence {:?}",
                c["kind"],
                show(&d),
                d.consequence
            ),
        );
    }
    tally.print_and_check("paths.jsonl");
}

/// Plausible public answers for the names the corpus uses, plus the
/// rebinding-style names that answer private addresses.
fn pinned() -> Table {
    let mut t: HashMap<String, Vec<IpAddr>> = HashMap::new();
    let mut pin = |h: &str, ip: &str| {
        t.entry(h.to_string())
            .or_default()
            .push(ip.parse().unwrap());
    };
    pin("example.com", "93.184.216.34");
    pin("docs.rs", "18.164.96.48");
    pin("github.com", "140.82.112.3");
    pin("xn--bcher-kva.de", "185.53.177.52");
    pin("httpbin.org", "54.166.163.67");
    pin("localtest.me", "127.0.0.1");
    pin("169.254.169.254.nip.io", "169.254.169.254");
    pin("kubernetes.default.svc", "10.96.0.1");
    pin("instance-data.ec2.internal", "169.254.169.254");
    pin("metadata", "169.254.169.254");
    Table(t)
}

#[test]
fn ssrf_corpus() {
    let cases = load("ssrf.jsonl");
    assert!(cases.len() > 90, "ssrf corpus too small");
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let ws = std::env::temp_dir();
    let mut tally = Tally::default();
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        let url = c["url"].as_str().unwrap();
        let category = c["category"].as_str().unwrap();
        let expect = c["expect"].as_str().unwrap();
        let alt = c["alt_ok"].as_str();
        let needs_dns = c["needs_dns"].as_bool().unwrap_or(false);
        let redirect = c["stage"].as_str() == Some("redirect");
        let fetch = |dns: &Table| {
            engine.decide(
                &call("webfetch", json!({ "url": url })),
                &ctx(&ws, Mode::DangerouslySkipPermissions),
                &RealFs,
                dns,
            )
        };
        // Offline, a name never resolves: it must be blocked, never allowed.
        let off = fetch(&offline());
        if needs_dns && off.verdict != Verdict::Deny {
            tally.record(
                category,
                false,
                format!(
                    "{id} {url:?}: needs DNS but was allowed offline: {}",
                    show(&off)
                ),
            );
            continue;
        }
        // With answers (pinned for names), judge against `expect`. A
        // redirect case is judged at its hop: the Location is the `url`
        // query parameter the public first hop redirects to.
        let d = if needs_dns {
            fetch(&pinned())
        } else {
            off.clone()
        };
        let blocked = if redirect && d.verdict == Verdict::Allow {
            let first = url::Url::parse(url).unwrap();
            let hop = first
                .query_pairs()
                .find(|(k, _)| k == "url")
                .map(|(_, v)| v.into_owned())
                .expect("redirect case without a url parameter");
            let hop_result = engine.vet_url(&hop, &pinned());
            tally.notes.push(format!(
                "{id}: first hop allowed ({}), redirect hop {hop:?} {}",
                d.consequence,
                if hop_result.is_err() {
                    "refused"
                } else {
                    "ALLOWED"
                }
            ));
            hop_result.is_err()
        } else {
            d.verdict == Verdict::Deny
        };
        let meets = |e: &str| match e {
            "block" => blocked,
            "allow" => !blocked && d.verdict == Verdict::Allow,
            other => panic!("unknown expect {other}"),
        };
        let exact = meets(expect);
        let via_alt = !exact && alt.is_some_and(meets);
        if via_alt {
            tally.notes.push(format!(
                "{id}: accepted alternative {:?}",
                alt.unwrap_or("")
            ));
        }
        if d.verdict == Verdict::Allow {
            // The decision carries the vetted addresses to pin.
            let f = d
                .fetch
                .as_ref()
                .expect("allowed fetch without vetted addresses");
            assert!(!f.addrs.is_empty(), "{id}: no addresses");
            assert!(
                d.consequence.starts_with("fetch "),
                "{id}: {}",
                d.consequence
            );
        }
        tally.record(
            category,
            exact || via_alt,
            format!(
                "{id} {url:?}: expected {expect}; got {} (offline: {})",
                show(&d),
                off.verdict.as_str()
            ),
        );
    }
    tally.print_and_check("ssrf.jsonl");
}

/// The corpus through the `supervisorctl policy test` line protocol: every
/// output line is exactly the decision the engine gives the same call, so
/// the protocol gives the expected decisions checked above.
#[test]
fn corpus_through_the_policy_test_protocol() {
    use tollgate_policy::policy_test::{TestOptions, run};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=x\n").unwrap();
    let mut input = String::new();
    let mut calls = Vec::new();
    for c in load("shell.jsonl") {
        for mode in ["default", "dangerouslySkipPermissions"] {
            let line = json!({"tool": "run_bash", "args": {"command": c["cmd"]}, "mode": mode});
            input.push_str(&format!("{line}\n"));
            calls.push(line);
        }
    }
    for c in load("ssrf.jsonl") {
        let line = json!({"tool": "webfetch", "args": {"url": c["url"]}, "mode": "dangerouslySkipPermissions"});
        input.push_str(&format!("{line}\n"));
        calls.push(line);
    }
    input.push_str("this line is not json\n");
    let mut opts = TestOptions::new(ws.clone(), Mode::Default, PolicyConfig::default());
    opts.home = Some(PathBuf::from("/home/dev"));
    let mut out = Vec::new();
    run(&mut input.as_bytes(), &mut out, &opts, &RealFs, &offline()).unwrap();
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        calls.len() + 1,
        "one output line per input line"
    );
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    for (line, got) in calls.iter().zip(&lines) {
        let mode = Mode::parse(line["mode"].as_str().unwrap()).unwrap();
        let d = engine.decide(
            &call(line["tool"].as_str().unwrap(), line["args"].clone()),
            &ctx(&ws, mode),
            &RealFs,
            &offline(),
        );
        let want = json!({
            "decision": d.verdict.as_str(),
            "code": d.code.as_str(),
            "reason": d.reason,
            "rule": d.rule,
            "destructive": d.destructive,
            "consequence": d.consequence,
        });
        assert_eq!(got, &want, "{line}");
    }
    assert!(
        lines.last().unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
}
