//! One kind of decision, N times: for counting instructions on a noisy
//! machine, where wall-clock benchmarks (benches/decide.rs) swing by half.
//!
//! ```text
//! cargo build --profile bench -p tollgate-policy --example decide_count
//! perf stat -e instructions:u target/release/examples/decide_count write_file 200000
//! ```
//! KIND: run_bash, read_file, write_file, edit_file, script_4k. The inputs
//! are the criterion benches' (facts from memory, no DNS); the count of a
//! run with N = 0 is the fixed cost to subtract.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::hint::black_box;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::json;
use tollgate_policy::bench_input::script_4k;
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

struct NoDns;

impl Resolver for NoDns {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        Err(ResolveError::NotFound(host.to_string()))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "write_file".to_string());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
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
    let fs = MemFs(m);
    let cx = Context {
        workspace: PathBuf::from("/home/dev/proj"),
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
    };
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let call = match kind.as_str() {
        "run_bash" => ToolCall {
            tool: "run_bash".into(),
            args: json!({ "command": "cargo test -p tollgate-policy 2>&1 | tail -n 20" }),
        },
        "read_file" => ToolCall {
            tool: "read_file".into(),
            args: json!({ "path": "src/main.rs" }),
        },
        "write_file" => ToolCall {
            tool: "write_file".into(),
            args: json!({ "path": "src/lib.rs", "content": "pub fn f() {}\n" }),
        },
        "edit_file" => ToolCall {
            tool: "edit_file".into(),
            args: json!({ "path": "src/main.rs", "old_string": "a", "new_string": "b" }),
        },
        "script_4k" => ToolCall {
            tool: "run_bash".into(),
            args: json!({ "command": script_4k() }),
        },
        other => panic!("unknown kind {other}"),
    };
    for _ in 0..n {
        black_box(engine.decide(black_box(&call), &cx, &fs, &NoDns));
    }
}
