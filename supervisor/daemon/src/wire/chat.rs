//! A chat's messages on the wire: each role read from `chat_role`, and the
//! deprecated `role` only when it is unspecified; both filled going out
//! (docs/INTERFACES.md "Additions: wire enums"). The providers behind the
//! proxy read the word, so a message leaves here with both agreeing.

use tollgate_proto::v1 as pb;

/// A message with its role in both fields, as the enum (else the word)
/// names it; one naming none keeps its word, which the provider refuses as
/// it did before the enum.
fn agreed(mut m: pb::ChatMessage) -> pb::ChatMessage {
    if let Some(role) = pb::ChatRole::read(m.chat_role, &m.role) {
        m.role = role.text().to_string();
        m.chat_role = role as i32;
    }
    m
}

/// The agent's request, its roles read enum first.
pub fn chat_request(mut req: pb::ChatRequest) -> pb::ChatRequest {
    req.messages = req.messages.into_iter().map(agreed).collect();
    req
}

/// The answer, its message's role in both fields.
pub fn chat_response(mut resp: pb::ChatResponse) -> pb::ChatResponse {
    resp.message = resp.message.map(agreed);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(chat_role: i32, role: &str) -> pb::ChatMessage {
        pb::ChatMessage {
            chat_role,
            role: role.to_string(),
            ..Default::default()
        }
    }

    fn roles(req: &pb::ChatRequest) -> Vec<(&str, i32)> {
        req.messages
            .iter()
            .map(|m| (m.role.as_str(), m.chat_role))
            .collect()
    }

    #[test]
    fn a_request_is_read_enum_first_then_the_deprecated_role() {
        let (user, tool) = (pb::ChatRole::User as i32, pb::ChatRole::Tool as i32);
        let req = chat_request(pb::ChatRequest {
            messages: vec![
                message(user, ""),
                message(0, "tool"),
                // The enum wins over a word that disagrees.
                message(user, "system"),
                message(0, ""),
                message(0, "narrator"),
                message(99, "assistant"),
            ],
            ..Default::default()
        });
        assert_eq!(
            roles(&req),
            [
                ("user", user),
                ("tool", tool),
                ("user", user),
                ("", 0),
                ("narrator", 0),
                ("assistant", pb::ChatRole::Assistant as i32),
            ]
        );
    }

    #[test]
    fn an_answer_carries_its_role_in_both_fields() {
        for role in pb::ChatRole::ALL {
            let out = chat_response(pb::ChatResponse {
                message: Some(message(0, role.text())),
                ..Default::default()
            });
            let m = out.message.unwrap();
            assert_eq!((m.role.as_str(), m.chat_role()), (role.text(), role));
        }
        assert_eq!(chat_response(pb::ChatResponse::default()).message, None);
    }
}
