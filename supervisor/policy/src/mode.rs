//! Permission modes (BRIEF section 4.7).

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// How much a session may do without asking.
///
/// Ordered by permissiveness, so a config's `max_mode` caps a request with `<=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Read and plan only: writes and actions are denied.
    #[serde(rename = "plan")]
    Plan,
    /// Unattended: what the rules allow runs, everything else is denied.
    #[serde(rename = "dontAsk")]
    DontAsk,
    /// Reads run; writes, commands and fetches ask.
    #[serde(rename = "default")]
    Default,
    /// Reads and writes inside the workspace run; commands and fetches ask.
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    /// Everything the hard floor allows runs; destructive calls are refused.
    #[serde(rename = "dangerouslySkipPermissions")]
    DangerouslySkipPermissions,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Default,
        Mode::AcceptEdits,
        Mode::Plan,
        Mode::DontAsk,
        Mode::DangerouslySkipPermissions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::DontAsk => "dontAsk",
            Mode::Default => "default",
            Mode::AcceptEdits => "acceptEdits",
            Mode::DangerouslySkipPermissions => "dangerouslySkipPermissions",
        }
    }

    pub fn parse(s: &str) -> Result<Mode, PolicyError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownMode(s.to_string()))
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.as_str()).unwrap(), m);
        }
        assert!(Mode::parse("yolo").is_err());
    }

    #[test]
    fn skip_is_the_most_permissive() {
        assert!(Mode::Plan < Mode::Default);
        assert!(Mode::AcceptEdits < Mode::DangerouslySkipPermissions);
    }
}
