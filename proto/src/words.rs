//! The words of the sandbox backend, network, hook client and chat role
//! enums, and the rule for reading one (docs/INTERFACES.md "Additions: wire
//! enums"): the enum, and its deprecated string only when the enum is
//! unspecified (a peer of an earlier release, or a value this build does not
//! know). One copy for the supervisor, the agent and supervisorctl.

use crate::v1::{ChatRole, ClientKind, NetSource, NetUnlisted, NetVerdict, SandboxBackend};

/// For each enum: `ALL` (every value but unspecified), `text` (its word,
/// empty for unspecified), `from_text` (`None` for any other word, the empty
/// one included) and `read` (the enum field, else the deprecated word).
macro_rules! words {
    ($enum:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $enum {
            /// Every value but unspecified.
            pub const ALL: [$enum; [$($word),+].len()] = [$($enum::$variant),+];

            /// Its word in the deprecated string field; empty when unspecified.
            pub fn text(self) -> &'static str {
                match self {
                    $enum::Unspecified => "",
                    $($enum::$variant => $word,)+
                }
            }

            /// The value a word names; `None` for any other word.
            pub fn from_text(word: &str) -> Option<$enum> {
                Self::ALL.into_iter().find(|v| v.text() == word)
            }

            /// What a message says: its enum field (`wire`, as prost holds
            /// it), or, when that is unspecified or unknown to this build, the
            /// deprecated `word` beside it; `None` when neither names one.
            pub fn read(wire: i32, word: &str) -> Option<$enum> {
                match $enum::try_from(wire) {
                    Ok(v) if v != $enum::Unspecified => Some(v),
                    _ => Self::from_text(word),
                }
            }
        }
    };
}

words!(SandboxBackend { Native => "native", Docker => "docker" });
words!(NetVerdict { Allow => "allow", Deny => "deny" });
words!(NetSource {
    Supervisor => "supervisor",
    Operator => "operator",
    Approval => "approval",
});
words!(NetUnlisted { Deny => "deny", Ask => "ask" });
words!(ClientKind { ClaudeCode => "claude-code", Codex => "codex" });
words!(ChatRole {
    System => "system",
    User => "user",
    Assistant => "assistant",
    Tool => "tool",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value's word reads back as it, on its own and as the fallback;
    /// unspecified, an unknown value and an unknown word read as none.
    macro_rules! both_ways {
        ($enum:ident, $name:ident) => {
            #[test]
            fn $name() {
                for v in $enum::ALL {
                    assert!(!v.text().is_empty());
                    assert_eq!($enum::from_text(v.text()), Some(v));
                    assert_eq!($enum::read(v as i32, ""), Some(v));
                    assert_eq!($enum::read(0, v.text()), Some(v));
                    // An unknown value (a newer peer's): the word decides.
                    assert_eq!($enum::read(99, v.text()), Some(v));
                }
                let (first, last) = ($enum::ALL[0], $enum::ALL[$enum::ALL.len() - 1]);
                // The enum wins over a word that disagrees.
                assert_eq!($enum::read(first as i32, last.text()), Some(first));
                assert_eq!($enum::Unspecified.text(), "");
                assert_eq!($enum::from_text(""), None);
                assert_eq!($enum::from_text("NATIVE-ish"), None);
                assert_eq!($enum::read(0, ""), None);
                assert_eq!($enum::read(99, "nonsense"), None);
            }
        };
    }

    both_ways!(SandboxBackend, a_backend_and_its_word_agree);
    both_ways!(NetVerdict, a_net_verdict_and_its_word_agree);
    both_ways!(NetSource, a_net_source_and_its_word_agree);
    both_ways!(NetUnlisted, a_net_unlisted_and_its_word_agree);
    both_ways!(ClientKind, a_client_kind_and_its_word_agree);
    both_ways!(ChatRole, a_chat_role_and_its_word_agree);

    #[test]
    fn the_words_are_the_released_ones() {
        assert_eq!(
            SandboxBackend::ALL.map(SandboxBackend::text),
            ["native", "docker"]
        );
        assert_eq!(
            NetSource::ALL.map(NetSource::text),
            ["supervisor", "operator", "approval"]
        );
        assert_eq!(NetVerdict::ALL.map(NetVerdict::text), ["allow", "deny"]);
        assert_eq!(NetUnlisted::ALL.map(NetUnlisted::text), ["deny", "ask"]);
        assert_eq!(
            ClientKind::ALL.map(ClientKind::text),
            ["claude-code", "codex"]
        );
        assert_eq!(
            ChatRole::ALL.map(ChatRole::text),
            ["system", "user", "assistant", "tool"]
        );
    }
}
