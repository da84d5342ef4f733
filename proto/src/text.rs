//! The words of the deprecated string fields beside the wire enums
//! (docs/INTERFACES.md "Additions: wire enums"): one copy for the supervisor
//! that still fills them and for the clients that print them.

use crate::v1::{
    ApprovalScope, ApprovalStatus, CacheMode, JobState, PermissionMode, SessionState, ToolClass,
};

impl ApprovalStatus {
    /// pending | approved | denied | timeout | withdrawn; empty when unspecified.
    pub fn text(self) -> &'static str {
        match self {
            ApprovalStatus::Unspecified => "",
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Timeout => "timeout",
            ApprovalStatus::Withdrawn => "withdrawn",
        }
    }
}

impl ApprovalScope {
    /// once | session; empty when unspecified.
    pub fn text(self) -> &'static str {
        match self {
            ApprovalScope::Unspecified => "",
            ApprovalScope::Once => "once",
            ApprovalScope::Session => "session",
        }
    }
}

impl SessionState {
    /// active | revoked | killed | closed | expired; empty when unspecified.
    pub fn text(self) -> &'static str {
        match self {
            SessionState::Unspecified => "",
            SessionState::Active => "active",
            SessionState::Revoked => "revoked",
            SessionState::Killed => "killed",
            SessionState::Closed => "closed",
            SessionState::Expired => "expired",
        }
    }
}

impl PermissionMode {
    /// default | acceptEdits | plan | dontAsk | dangerouslySkipPermissions;
    /// empty when unspecified.
    pub fn text(self) -> &'static str {
        match self {
            PermissionMode::Unspecified => "",
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::DangerouslySkipPermissions => "dangerouslySkipPermissions",
        }
    }
}

impl PermissionMode {
    /// The enum for a mode's word (as [`PermissionMode::text`] writes it);
    /// `None` for any other word, the empty one included.
    pub fn from_text(word: &str) -> Option<PermissionMode> {
        ALL_MODES.into_iter().find(|m| m.text() == word)
    }
}

/// Every mode a session can have.
const ALL_MODES: [PermissionMode; 5] = [
    PermissionMode::Default,
    PermissionMode::AcceptEdits,
    PermissionMode::Plan,
    PermissionMode::DontAsk,
    PermissionMode::DangerouslySkipPermissions,
];

impl JobState {
    /// running | exited | killed | session_ended | failed; empty when
    /// unspecified.
    pub fn text(self) -> &'static str {
        match self {
            JobState::Unspecified => "",
            JobState::Running => "running",
            JobState::Exited => "exited",
            JobState::Killed => "killed",
            JobState::SessionEnded => "session_ended",
            JobState::Failed => "failed",
        }
    }
}

impl CacheMode {
    /// owner | workspace | off; empty when unspecified.
    pub fn text(self) -> &'static str {
        match self {
            CacheMode::Unspecified => "",
            CacheMode::Owner => "owner",
            CacheMode::Workspace => "workspace",
            CacheMode::Off => "off",
        }
    }
}

impl ToolClass {
    /// The enum for a tool class's word (read | write | action | planning |
    /// interaction, as the registry names them); unspecified for any other.
    pub fn from_text(word: &str) -> ToolClass {
        match word {
            "read" => ToolClass::Read,
            "write" => ToolClass::Write,
            "action" => ToolClass::Action,
            "planning" => ToolClass::Planning,
            "interaction" => ToolClass::Interaction,
            _ => ToolClass::Unspecified,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_word_reads_back_as_its_enum() {
        for m in ALL_MODES {
            assert_eq!(PermissionMode::from_text(m.text()), Some(m));
        }
        assert_eq!(PermissionMode::from_text(""), None);
        assert_eq!(PermissionMode::from_text("Default"), None);
    }
}
