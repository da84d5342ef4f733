//! `policy.d/*.toml` beside the config file (docs/OPERATIONS.md "Shared
//! policy"): drop-ins holding a `[policy]` table, merged into the config's
//! own in file-name order. Lists are unions (an entry already present is not
//! repeated); `[policy]` has no scalars today, and one added later is
//! "the last file wins". Each file's own table is kept, so a rule can be
//! traced to the file that brought it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tollgate_policy::{PolicyConfig, RuleSpec};

use crate::ConfigError;

/// A drop-in: only `[policy]`, every key checked like the main file's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DropIn {
    #[serde(default)]
    policy: PolicyConfig,
}

/// One drop-in as read.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySource {
    pub path: PathBuf,
    pub policy: PolicyConfig,
}

/// The drop-in directory of a config file: `policy.d` beside it.
pub fn dir_for(config: &Path) -> PathBuf {
    config
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("policy.d")
}

/// The `*.toml` files of `dir` in file-name (byte) order; an absent
/// directory has none.
fn files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read = |source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read(e)),
    };
    let mut v = Vec::new();
    for e in entries {
        let p = e.map_err(read)?.path();
        if p.extension().is_some_and(|x| x == "toml") && p.is_file() {
            v.push(p);
        }
    }
    v.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(v)
}

/// Reads every drop-in of `dir` (a parse error names the file and line).
pub fn read(dir: &Path) -> Result<Vec<PolicySource>, ConfigError> {
    files(dir)?
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            let d: DropIn = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                path: path.clone(),
                message: e.to_string().trim_end().to_string(),
            })?;
            Ok(PolicySource {
                path,
                policy: d.policy,
            })
        })
        .collect()
}

fn union<T: PartialEq + Clone>(into: &mut Vec<T>, add: &[T]) {
    for x in add {
        if !into.contains(x) {
            into.push(x.clone());
        }
    }
}

/// Merges `add` into `into`: every list a union, in order.
pub fn merge(into: &mut PolicyConfig, add: &PolicyConfig) {
    union(&mut into.allow, &add.allow);
    union(&mut into.ask, &add.ask);
    union(&mut into.deny, &add.deny);
    union(&mut into.extra_denied_binaries, &add.extra_denied_binaries);
    union(&mut into.allow_binaries, &add.allow_binaries);
    union(
        &mut into.extra_confirm_patterns,
        &add.extra_confirm_patterns,
    );
    union(&mut into.lift_patterns, &add.lift_patterns);
}

/// The file a rule came from: the config file itself (`None`) when its
/// own `[policy]` holds it, else the first drop-in holding it.
pub fn rule_file<'a>(
    own: &PolicyConfig,
    sources: &'a [PolicySource],
    rule: &RuleSpec,
) -> Option<&'a Path> {
    let holds = |p: &PolicyConfig| [&p.allow, &p.ask, &p.deny].iter().any(|l| l.contains(rule));
    if holds(own) {
        return None;
    }
    sources
        .iter()
        .find(|s| holds(&s.policy))
        .map(|s| s.path.as_path())
}

/// Every rule of the merged `policy` that a drop-in brought, by the label
/// a decision names it with ([`tollgate_policy::rule_label`]), and that
/// drop-in's path.
pub fn rule_files(
    own: &PolicyConfig,
    sources: &[PolicySource],
    policy: &PolicyConfig,
) -> Vec<(String, PathBuf)> {
    use tollgate_policy::{Verdict, rule_label};
    let lists = [
        (Verdict::Allow, &policy.allow),
        (Verdict::Ask, &policy.ask),
        (Verdict::Deny, &policy.deny),
    ];
    let mut v = Vec::new();
    for (verdict, list) in lists {
        for spec in list {
            if let Some(file) = rule_file(own, sources, spec) {
                v.push((rule_label(verdict, spec.rule()), file.to_path_buf()));
            }
        }
    }
    v
}
