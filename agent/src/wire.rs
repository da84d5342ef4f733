//! The one place the agent reads and writes its session's sandbox backend,
//! the hook's client kind and a chat message's role on the wire
//! (docs/INTERFACES.md "Additions: wire enums"): it reads the enum, and the
//! deprecated word beside it only when the enum is unspecified (a
//! supervisor of an earlier release); it sends both.

use tollgate_proto::{ChatMessage, ChatRole, ClientKind, OpenSessionResponse, SandboxBackend};

/// The session's backend as the open answer names it (`native`, `docker`;
/// the deprecated word as written when the enum is unspecified).
pub fn sandbox_of(resp: &OpenSessionResponse) -> String {
    match resp.sandbox_backend() {
        SandboxBackend::Unspecified => resp.sandbox.clone(),
        b => b.text().to_string(),
    }
}

/// The enum for the hook's client word (`claude-code`, `codex`);
/// unspecified for any other, which the supervisor refuses by the word.
pub fn client_kind(word: &str) -> i32 {
    ClientKind::from_text(word).unwrap_or(ClientKind::Unspecified) as i32
}

/// A message's role: its enum, else its word; `None` when neither names one.
pub fn role_of(m: &ChatMessage) -> Option<ChatRole> {
    ChatRole::read(m.chat_role, &m.role)
}

/// Whether `m` is a tool's answer.
pub fn is_tool(m: &ChatMessage) -> bool {
    role_of(m) == Some(ChatRole::Tool)
}

/// Sets `m`'s role in both fields.
pub fn set_role(m: &mut ChatMessage, role: ChatRole) {
    m.role = role.text().to_string();
    m.chat_role = role as i32;
}

/// An empty message from `role`, its role in both fields.
pub fn message_from(role: ChatRole) -> ChatMessage {
    let mut m = ChatMessage::default();
    set_role(&mut m, role);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_answer_names_the_backend_enum_first() {
        let answer = |sandbox_backend: i32, sandbox: &str| OpenSessionResponse {
            sandbox_backend,
            sandbox: sandbox.to_string(),
            ..Default::default()
        };
        let docker = SandboxBackend::Docker as i32;
        assert_eq!(sandbox_of(&answer(docker, "")), "docker");
        assert_eq!(sandbox_of(&answer(docker, "native")), "docker");
        assert_eq!(sandbox_of(&answer(0, "native")), "native");
        assert_eq!(sandbox_of(&answer(99, "firecracker")), "firecracker");
        assert_eq!(sandbox_of(&answer(0, "")), "");
    }

    #[test]
    fn a_client_word_goes_out_as_its_enum() {
        assert_eq!(client_kind("claude-code"), ClientKind::ClaudeCode as i32);
        assert_eq!(client_kind("codex"), ClientKind::Codex as i32);
        assert_eq!(client_kind("cursor"), ClientKind::Unspecified as i32);
        assert_eq!(client_kind(""), ClientKind::Unspecified as i32);
    }

    #[test]
    fn a_role_is_set_in_both_fields_and_read_enum_first() {
        for role in ChatRole::ALL {
            let m = message_from(role);
            assert_eq!((m.role.as_str(), m.chat_role()), (role.text(), role));
            assert_eq!(role_of(&m), Some(role));
        }
        let old = ChatMessage {
            role: "tool".into(),
            ..Default::default()
        };
        assert!(is_tool(&old));
        let disagree = ChatMessage {
            role: "tool".into(),
            chat_role: ChatRole::User as i32,
            ..Default::default()
        };
        assert_eq!(role_of(&disagree), Some(ChatRole::User));
        assert!(!is_tool(&disagree));
        assert_eq!(role_of(&ChatMessage::default()), None);
        let unknown = ChatMessage {
            chat_role: 99,
            role: "narrator".into(),
            ..Default::default()
        };
        assert_eq!(role_of(&unknown), None);
    }
}
