//! The engine: the PEP pipeline from tool allowlist to mode (BRIEF section 4).

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::{Code, Decision, FsFacts, Mode, PolicyConfig, PolicyError, Resolver};

/// A tool call as the model proposed it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool: String,
    pub args: serde_json::Value,
}

/// What the engine knows about the session making the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// Canonical absolute workspace path.
    pub workspace: PathBuf,
    pub mode: Mode,
    /// The session's own tool allowlist (`--tools`); `None` means all tools.
    pub tools: Option<BTreeSet<String>>,
    /// The session owner's home directory, for `~` and credential paths.
    pub home: Option<PathBuf>,
    /// Paths that are never readable or writable whatever the workspace:
    /// the supervisor's state dir, audit dir, sockets, config file.
    pub protected: Vec<PathBuf>,
    /// Files (absolute) this session has read: overwriting one it has not
    /// read is destructive.
    pub read_files: BTreeSet<PathBuf>,
}

/// The compiled policy.
#[derive(Debug)]
pub struct Engine {
    _config: PolicyConfig,
}

impl Engine {
    pub fn new(config: &PolicyConfig) -> Result<Engine, PolicyError> {
        Ok(Engine {
            _config: config.clone(),
        })
    }

    /// Decides one call. Never panics, whatever the bytes in `call`.
    pub fn decide(
        &self,
        _call: &ToolCall,
        _ctx: &Context,
        _fs: &dyn FsFacts,
        _dns: &dyn Resolver,
    ) -> Decision {
        Decision::deny(Code::PolicyDenied, "policy engine not built yet", None)
    }
}
