//! The policy in force (docs/OPERATIONS.md "Reloading"): the compiled
//! engine, the digest of the `[policy]` it was built from, and the drop-in
//! file each rule came from. A decision holds one `Arc` of it from its
//! first look at the engine to its record, so a reload in between changes
//! neither its verdict nor the file its record names; the engine a reload
//! replaced is freed when the last decision holding it ends.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::PathBuf;

use sha2::{Digest as _, Sha256};
use tollgate_policy::{Engine, PolicyConfig};

/// One compiled policy and where its rules came from.
pub struct InForce {
    engine: Engine,
    digest: String,
    /// How many allow, ask and deny rules it has.
    counts: [usize; 3],
    /// A decision's rule label (`deny: run_bash(curl *)`) and the
    /// `policy.d/` drop-in that brought it; a rule of the config file
    /// itself is absent.
    rule_files: HashMap<String, PathBuf>,
}

/// The SHA-256 of a parsed `[policy]` table (of its `Debug` form: lists
/// only, so the same policy always gives the same digest): what the
/// `config` records and the reload log name as the old and new digests.
pub fn digest(policy: &PolicyConfig) -> String {
    Sha256::digest(format!("{policy:?}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl InForce {
    /// `engine`, built from `policy`, whose drop-in rules are `rule_files`
    /// (`tollgate_config::dropins::rule_files`).
    pub fn new(engine: Engine, policy: &PolicyConfig, rule_files: Vec<(String, PathBuf)>) -> Self {
        InForce {
            engine,
            digest: digest(policy),
            counts: [policy.allow.len(), policy.ask.len(), policy.deny.len()],
            rule_files: rule_files.into_iter().collect(),
        }
    }

    /// The digest of the `[policy]` this engine was built from.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// How many allow, ask and deny rules it has.
    pub fn rule_counts(&self) -> [usize; 3] {
        self.counts
    }

    /// The drop-in that brought the rule a decision names, if a drop-in did.
    pub fn rule_file(&self, rule: Option<&str>) -> Option<String> {
        rule.and_then(|r| self.rule_files.get(r))
            .map(|p| p.display().to_string())
    }
}

impl Deref for InForce {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_names_the_drop_in_it_came_from() {
        let policy = PolicyConfig {
            deny: vec![tollgate_policy::RuleSpec::Bare("run_bash(curl *)".into())],
            ..PolicyConfig::default()
        };
        let files = vec![(
            "deny: run_bash(curl *)".to_string(),
            PathBuf::from("/etc/tollgate/policy.d/20-team.toml"),
        )];
        let p = InForce::new(Engine::new(&policy).unwrap(), &policy, files);
        assert_eq!(
            p.rule_file(Some("deny: run_bash(curl *)")).as_deref(),
            Some("/etc/tollgate/policy.d/20-team.toml")
        );
        assert_eq!(p.rule_file(Some("mode:default")), None);
        assert_eq!(p.rule_file(None), None);
        assert_eq!(p.digest(), digest(&policy));
        assert_ne!(p.digest(), digest(&PolicyConfig::default()));
    }
}
