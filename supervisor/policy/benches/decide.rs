//! Decision latency (docs/PERFORMANCE.md): a typical run_bash decision
//! (target ≤ 20 µs), a read_file decision (≤ 3 µs), a 4 KiB script of
//! pipelines (≤ 500 µs), and loading the default policy (≤ 5 ms). Also
//! webfetch decisions (a literal address, and a name answered from
//! memory); adding them may make no decision path more than 5 % slower.
//!
//! The engine's own cost is measured with in-memory filesystem facts; the
//! `real fs` variants add the lstat calls the daemon's RealFs makes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::hint::black_box;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tollgate_policy::bench_input::{REPRESENTATIVE_POLICY, script_4k, script_4k_substitutions};
use tollgate_policy::{
    Context, Engine, FileFacts, FileKind, FsFacts, HostAddrs, HostAddrsError, Mode, PolicyConfig,
    ResolveError, Resolver, ToolCall,
};

struct MemFs(HashMap<PathBuf, FileFacts>);

impl FsFacts for MemFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        self.0.get(path).copied()
    }
    fn read_link(&self, _: &Path) -> Option<PathBuf> {
        None
    }
}

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

struct NoDns;

impl Resolver for NoDns {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        Err(ResolveError::NotFound(host.to_string()))
    }
}

/// One name, answered from memory (the webfetch cases).
struct OneName;

impl Resolver for OneName {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if host == "docs.example.org" {
            Ok(vec!["93.184.216.34".parse().unwrap()])
        } else {
            Err(ResolveError::NotFound(host.to_string()))
        }
    }
}

fn mem_fs() -> MemFs {
    let dir = FileFacts {
        kind: FileKind::Dir,
        size: 0,
        nlink: 1,
    };
    let file = FileFacts {
        kind: FileKind::File,
        size: 1234,
        nlink: 1,
    };
    let mut m = HashMap::new();
    for d in [
        "/",
        "/home",
        "/home/dev",
        "/home/dev/proj",
        "/home/dev/proj/src",
    ] {
        m.insert(PathBuf::from(d), dir);
    }
    m.insert(PathBuf::from("/home/dev/proj/src/main.rs"), file);
    MemFs(m)
}

fn ctx(ws: &Path) -> Context {
    Context {
        workspace: ws.to_path_buf(),
        mode: Mode::Default,
        tools: None,
        home: Some(PathBuf::from("/home/dev")),
        protected: vec![
            PathBuf::from("/run/tollgate"),
            PathBuf::from("/var/log/tollgate"),
        ],
        read_files: BTreeSet::new(),
        repo: Vec::new(),
        sandbox: None,
    }
}

fn bench(c: &mut Criterion) {
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let fs = mem_fs();
    let ws = Path::new("/home/dev/proj");
    let cx = ctx(ws);

    let typical = ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": "cargo test -p tollgate-policy 2>&1 | tail -n 20" }),
    };
    c.bench_function("decide run_bash typical", |b| {
        b.iter(|| black_box(engine.decide(black_box(&typical), &cx, &fs, &NoDns)))
    });

    let read = ToolCall {
        tool: "read_file".into(),
        args: json!({ "path": "src/main.rs" }),
    };
    c.bench_function("decide read_file", |b| {
        b.iter(|| black_box(engine.decide(black_box(&read), &cx, &fs, &NoDns)))
    });

    // Writes: the path walk plus the write-only checks (git internals,
    // names the host runs by itself).
    let write = ToolCall {
        tool: "write_file".into(),
        args: json!({ "path": "src/lib.rs", "content": "pub fn f() {}\n" }),
    };
    c.bench_function("decide write_file", |b| {
        b.iter(|| black_box(engine.decide(black_box(&write), &cx, &fs, &NoDns)))
    });
    let edit = ToolCall {
        tool: "edit_file".into(),
        args: json!({ "path": "src/main.rs", "old_string": "a", "new_string": "b" }),
    };
    c.bench_function("decide edit_file", |b| {
        b.iter(|| black_box(engine.decide(black_box(&edit), &cx, &fs, &NoDns)))
    });

    let script = script_4k();
    let long = ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": script }),
    };
    c.bench_function("decide run_bash 4 KiB script", |b| {
        b.iter(|| black_box(engine.decide(black_box(&long), &cx, &fs, &NoDns)))
    });

    let subst = ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": script_4k_substitutions() }),
    };
    c.bench_function("decide run_bash 4 KiB script with substitutions", |b| {
        b.iter(|| black_box(engine.decide(black_box(&subst), &cx, &fs, &NoDns)))
    });

    // webfetch: the SSRF guard on a literal address and on a name (DNS
    // answered from memory, so the engine's own cost is what is measured).
    let fetch_ip = ToolCall {
        tool: "webfetch".into(),
        args: json!({ "url": "http://93.184.216.34/index.html" }),
    };
    c.bench_function("decide webfetch literal IP", |b| {
        b.iter(|| black_box(engine.decide(black_box(&fetch_ip), &cx, &fs, &OneName)))
    });
    let fetch_name = ToolCall {
        tool: "webfetch".into(),
        args: json!({ "url": "https://docs.example.org/guide/index.html?q=1" }),
    };
    c.bench_function("decide webfetch name", |b| {
        b.iter(|| black_box(engine.decide(black_box(&fetch_name), &cx, &fs, &OneName)))
    });

    // For scale: brush-parser alone on the same script.
    c.bench_function("brush-parser alone, 4 KiB script", |b| {
        b.iter(|| {
            // The options the engine parses with (bash's defaults for a script).
            let opts = brush_parser::ParserOptions {
                enable_extended_globbing: false,
                ..brush_parser::ParserOptions::default()
            };
            black_box(
                brush_parser::Parser::new(black_box(script.as_bytes()), &opts).parse_program(),
            )
        })
    });

    c.bench_function("load default policy", |b| {
        b.iter(|| black_box(Engine::new(black_box(&PolicyConfig::default())).unwrap()))
    });
    c.bench_function(
        "load representative policy (toml + rules + examples)",
        |b| {
            b.iter(|| {
                let cfg: PolicyConfig = toml::from_str(black_box(REPRESENTATIVE_POLICY)).unwrap();
                black_box(Engine::new(&cfg).unwrap())
            })
        },
    );

    // The same decisions on the real filesystem (lstat per component).
    let dir = tempfile::tempdir().unwrap();
    let real_ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(real_ws.join("src")).unwrap();
    std::fs::write(real_ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    let real_cx = ctx(&real_ws);
    c.bench_function("decide read_file (real fs)", |b| {
        b.iter(|| black_box(engine.decide(black_box(&read), &real_cx, &RealFs, &NoDns)))
    });
    c.bench_function("decide run_bash typical (real fs)", |b| {
        b.iter(|| black_box(engine.decide(black_box(&typical), &real_cx, &RealFs, &NoDns)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
