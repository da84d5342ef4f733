//! Permission modes (the table in docs/ARCHITECTURE.md "Reference: modes,
//! tools, budgets").

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

/// The config's cap on the modes a session may ask for (`[session]`
/// `max_mode` and `allow_dangerously_skip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeCap {
    /// The most permissive mode a session may use.
    pub max: Mode,
    /// Whether dangerouslySkipPermissions may be used at all.
    pub allow_dangerously_skip: bool,
}

impl ModeCap {
    /// No cap: every mode is permitted.
    pub const NONE: ModeCap = ModeCap {
        max: Mode::DangerouslySkipPermissions,
        allow_dangerously_skip: true,
    };

    /// Refuses a mode above the cap. Never lowers it silently: a session
    /// that asked for more than it may have is told so.
    pub fn check(&self, requested: Mode) -> Result<Mode, PolicyError> {
        if requested == Mode::DangerouslySkipPermissions && !self.allow_dangerously_skip {
            return Err(PolicyError::ModeNotPermitted {
                mode: requested,
                reason: "this supervisor forbids dangerouslySkipPermissions".to_string(),
            });
        }
        if requested > self.max {
            return Err(PolicyError::ModeNotPermitted {
                mode: requested,
                reason: format!(
                    "the most permissive mode this supervisor allows is {}",
                    self.max
                ),
            });
        }
        Ok(requested)
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
    fn caps_refuse_rather_than_lower() {
        let cap = ModeCap {
            max: Mode::AcceptEdits,
            allow_dangerously_skip: false,
        };
        assert_eq!(cap.check(Mode::Default).unwrap(), Mode::Default);
        assert_eq!(cap.check(Mode::AcceptEdits).unwrap(), Mode::AcceptEdits);
        assert_eq!(cap.check(Mode::Plan).unwrap(), Mode::Plan);
        let e = cap.check(Mode::DangerouslySkipPermissions).unwrap_err();
        assert!(
            e.to_string().contains("forbids dangerouslySkipPermissions"),
            "{e}"
        );
        let cap = ModeCap {
            max: Mode::DontAsk,
            allow_dangerously_skip: true,
        };
        let e = cap.check(Mode::Default).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mode default is not permitted: the most permissive mode this supervisor allows is dontAsk"
        );
        assert!(
            ModeCap::NONE
                .check(Mode::DangerouslySkipPermissions)
                .is_ok()
        );
    }

    #[test]
    fn skip_is_the_most_permissive() {
        assert!(Mode::Plan < Mode::Default);
        assert!(Mode::AcceptEdits < Mode::DangerouslySkipPermissions);
    }
}
