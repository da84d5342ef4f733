//! The path corpus (`tests/corpus/paths.jsonl`) against the file tools
//! themselves, as if the policy gate had let every `block` case through with
//! the path only joined to the workspace (no normalisation, no symlink
//! resolution): the second wall must still keep everything outside the
//! workspace unread and unwritten. `race` steps run between the (skipped)
//! check and the call, as the corpus describes.
//!
//! Cases the tools legitimately allow (a `.git/config` write is inside the
//! workspace; refusing it is the policy's job) may succeed: the assertion is
//! about what lies outside.

use std::collections::BTreeMap;
use std::os::unix::fs::{chown, symlink};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{CAP, Fixture};

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/corpus/paths.jsonl"
);
const CANARY: &str = "OUTSIDE-CANARY-2f9c";

/// Every file under `dir` (not following symlinks) with its content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            } else {
                out.insert(e.path(), Vec::new());
            }
        }
    }
    out
}

struct Case {
    id: String,
    category: String,
    path: String,
    kind: String,
    setup: Vec<Vec<String>>,
    race: Vec<Vec<String>>,
}

fn load() -> Vec<Case> {
    let text = std::fs::read_to_string(CORPUS).unwrap_or_else(|e| {
        panic!("cannot read the corpus {CORPUS}: {e} (the corpus fixtures live in tests/corpus)")
    });
    let steps = |v: &Value| -> Vec<Vec<String>> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        s.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_str().unwrap().to_string())
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["expect"] == "block")
        .map(|v| Case {
            id: v["id"].as_str().unwrap().to_string(),
            category: v["category"].as_str().unwrap_or("").to_string(),
            path: v["path"].as_str().unwrap().to_string(),
            kind: v["kind"].as_str().unwrap().to_string(),
            setup: steps(&v["setup"]),
            race: steps(&v["race"]),
        })
        .collect()
}

struct Env {
    f: Fixture,
    home: PathBuf,
    audit_log: PathBuf,
    policy_file: PathBuf,
}

impl Env {
    fn new() -> Env {
        let f = Fixture::new();
        let home = f.outside.join("home");
        std::fs::create_dir(&home).unwrap();
        chown(&home, Some(f.uid), Some(f.gid)).unwrap();
        for name in [".bashrc", ".profile"] {
            let p = home.join(name);
            std::fs::write(&p, CANARY).unwrap();
            chown(&p, Some(f.uid), Some(f.gid)).unwrap();
        }
        let audit_log = f.outside_file("audit.jsonl", CANARY);
        let policy_file = f.outside_file("supervisor.toml", CANARY);
        Env {
            f,
            home,
            audit_log,
            policy_file,
        }
    }

    fn fill(&self, s: &str) -> String {
        let w = self.f.root.to_string_lossy();
        let w_name = self.f.root.file_name().unwrap().to_string_lossy();
        s.replace("{W}", &w)
            .replace("{W_NAME}", &w_name)
            .replace("{HOME}", &self.home.to_string_lossy())
            .replace("{AUDIT_LOG}", &self.audit_log.to_string_lossy())
            .replace("{POLICY_FILE}", &self.policy_file.to_string_lossy())
    }

    fn apply(&self, step: &[String]) {
        let arg = |i: usize| self.fill(&step[i]);
        let w = |rel: String| self.f.root.join(rel);
        match step[0].as_str() {
            "mkdir" => self.f.mkdirs(&w(arg(1))),
            "file" => {
                self.f.file(&arg(1), arg(2));
            }
            "symlink" => symlink(arg(2), w(arg(1))).unwrap(),
            "hardlink" => std::fs::hard_link(arg(2), w(arg(1))).unwrap(),
            "fifo" => {
                nix::unistd::mkfifo(&w(arg(1)), nix::sys::stat::Mode::from_bits_truncate(0o666))
                    .unwrap()
            }
            "rmdir" => std::fs::remove_dir(w(arg(1))).unwrap(),
            other => panic!("unknown setup step {other}"),
        }
    }
}

#[tokio::test]
async fn every_blocked_corpus_path_stays_blocked_at_the_tool_layer() {
    let cases = load();
    assert!(cases.len() >= 30, "only {} block cases loaded", cases.len());
    let mut per_category: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for case in &cases {
        let env = Env::new();
        for step in &case.setup {
            env.apply(step);
        }
        let before = snapshot(&env.f.outside);
        for step in &case.race {
            env.apply(step);
        }
        let raw = env.fill(&case.path);
        let path = if raw.starts_with('/') {
            PathBuf::from(&raw)
        } else {
            env.f.root.join(&raw)
        };
        let marker = format!("PWNED-{}", case.id);
        let result = match case.kind.as_str() {
            "read" => env.f.ws.read_file(&path, None, None, CAP).await,
            "write" => env.f.ws.write_file(&path, &marker).await,
            other => panic!("{}: unknown kind {other}", case.id),
        };
        if let Ok(out) = &result {
            assert!(
                !out.text.contains(CANARY),
                "{}: read something outside: {}",
                case.id,
                out.text
            );
        }
        assert_eq!(
            snapshot(&env.f.outside),
            before,
            "{}: something outside the workspace changed",
            case.id
        );
        // Absolute targets elsewhere on the host were not written either.
        if raw.starts_with('/') && !raw.starts_with(&*env.f.root.to_string_lossy()) {
            let wrote = std::fs::read(&raw).is_ok_and(|b| b.windows(6).any(|w| w == b"PWNED-"));
            assert!(!wrote, "{}: wrote {raw}", case.id);
        }
        // Nor were the absolute targets of the case's symlinks (`/tmp`, `/etc`).
        for step in case.setup.iter().chain(&case.race) {
            if step[0] != "symlink" {
                continue;
            }
            let target = PathBuf::from(env.fill(&step[2]));
            if !target.is_absolute() {
                continue;
            }
            let name = Path::new(&raw).file_name().unwrap_or_default();
            for candidate in [target.clone(), target.join(name)] {
                let wrote = std::fs::read(&candidate)
                    .is_ok_and(|b| b.windows(marker.len()).any(|w| w == marker.as_bytes()));
                assert!(!wrote, "{}: wrote {}", case.id, candidate.display());
            }
        }
        let entry = per_category.entry(case.category.clone()).or_default();
        if result.is_err() {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    for (category, (refused, inside_ok)) in &per_category {
        eprintln!(
            "paths corpus {category}: {refused} refused by the tool, {inside_ok} allowed inside"
        );
    }
}
