//! The `[policy]` section of the supervisor config. Rules come from here only,
//! never from the workspace.

use serde::Deserialize;

/// `[policy]`: allow / ask / deny rule lists and the extra floors.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    #[serde(default)]
    pub allow: Vec<RuleSpec>,
    #[serde(default)]
    pub ask: Vec<RuleSpec>,
    #[serde(default)]
    pub deny: Vec<RuleSpec>,
    /// Binaries denied in every mode, on top of the built-in denylist.
    #[serde(default)]
    pub extra_denied_binaries: Vec<String>,
    /// Names lifted from the built-in denylist for this host (`["ssh"]`).
    /// A lifted binary is still judged like any command: its arguments,
    /// the command it runs, its paths.
    #[serde(default)]
    pub allow_binaries: Vec<String>,
    /// Regexes over a run_bash command that put it in the always-confirm tier,
    /// on top of the built-in destructive patterns.
    #[serde(default)]
    pub extra_confirm_patterns: Vec<String>,
    /// Dangerous patterns of the shell floor lifted for this host, each
    /// with why (`[[policy.lift_patterns]] pattern = "dd"`, `reason = …`).
    /// Every pattern not named here is refused.
    #[serde(default)]
    pub lift_patterns: Vec<LiftPattern>,
}

/// One lifted dangerous pattern: its name and the host's reason, shown
/// beside the consequence of every command it lets through.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LiftPattern {
    pub pattern: String,
    pub reason: String,
}

/// One rule: either a bare specifier string (`"run_bash(cargo test*)"`) or a
/// table with examples checked at load:
/// `{ rule = "run_bash(cargo test*)", match = ["cargo test -p x"], not_match = ["cargo build"] }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum RuleSpec {
    Bare(String),
    WithExamples {
        rule: String,
        #[serde(default, rename = "match")]
        matches: Vec<String>,
        #[serde(default)]
        not_match: Vec<String>,
    },
}

impl RuleSpec {
    pub fn rule(&self) -> &str {
        match self {
            RuleSpec::Bare(r) => r,
            RuleSpec::WithExamples { rule, .. } => rule,
        }
    }
}
