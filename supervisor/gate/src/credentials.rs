//! Session ids and bearer tokens (docs/ARCHITECTURE.md "Sessions and
//! credentials").
//!
//! A session id is 12 random url-safe characters. A token is
//! `<session id>.<43 url-safe chars>` (32 random bytes): the id part lets the
//! supervisor find the session without a secret-dependent lookup, and the
//! secret part is compared in constant time against a stored SHA-256. Tokens
//! are never stored, logged or printed: [`Token`]'s `Debug` shows only the
//! session id.

use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const ID_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Random bytes from the OS. Failing to get them is fatal for a credential.
fn random<const N: usize>() -> Result<[u8; N], CredentialError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| CredentialError::Random(e.to_string()))?;
    Ok(buf)
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("no randomness from the OS: {0}")]
    Random(String),
}

/// 12 random url-safe characters, the first alphanumeric (an id starting
/// with `-` would read as a flag on a command line: `supervisorctl revoke -x…`).
pub fn new_session_id() -> Result<String, CredentialError> {
    let bytes: [u8; 12] = random()?;
    Ok(bytes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let n = if i == 0 { b % 62 } else { b & 63 };
            ID_ALPHABET[n as usize] as char
        })
        .collect())
}

/// `N` random bytes as url-safe characters (4 per 3 bytes), the first
/// alphanumeric: an identifier nobody can guess (routed commands' ids).
pub fn random_id<const N: usize>() -> Result<String, CredentialError> {
    let bytes: [u8; N] = random()?;
    let mut s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    if let Some(first) = s.as_bytes().first().copied()
        && !first.is_ascii_alphanumeric()
    {
        s.replace_range(0..1, "A");
    }
    Ok(s)
}

/// A freshly minted token: the only time the secret exists in our memory.
pub struct Token {
    session_id: String,
    text: String,
}

impl Token {
    /// The full bearer token, to hand to the client once.
    pub fn reveal(&self) -> &str {
        &self.text
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash::of_secret(secret_part(&self.text).unwrap_or_default())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}.<redacted>)", self.session_id)
    }
}

/// Mints a token for `session_id`. `kind` separates the control-API token from
/// the sandbox-scoped one (`"sbx"`), which the control API rejects.
pub fn mint(session_id: &str, sandbox_scoped: bool) -> Result<Token, CredentialError> {
    let bytes: [u8; 32] = random()?;
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let text = if sandbox_scoped {
        format!("{session_id}.sbx.{secret}")
    } else {
        format!("{session_id}.{secret}")
    };
    Ok(Token {
        session_id: session_id.to_string(),
        text,
    })
}

/// SHA-256 of a token's secret part. Only this is stored.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    fn of_secret(secret: &str) -> TokenHash {
        TokenHash(Sha256::digest(secret.as_bytes()).into())
    }

    /// Constant-time comparison of a presented secret against this hash.
    pub fn matches(&self, presented_secret: &str) -> bool {
        let h = TokenHash::of_secret(presented_secret);
        bool::from(self.0.ct_eq(&h.0))
    }
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenHash(<redacted>)")
    }
}

/// What a presented bearer token claims to be.
#[derive(PartialEq, Eq)]
pub enum Presented<'a> {
    Control {
        session_id: &'a str,
        secret: &'a str,
    },
    Sandbox {
        session_id: &'a str,
        secret: &'a str,
    },
}

impl std::fmt::Debug for Presented<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Presented::Control { session_id, .. } => write!(f, "Control({session_id})"),
            Presented::Sandbox { session_id, .. } => write!(f, "Sandbox({session_id})"),
        }
    }
}

/// Splits a bearer token into its parts; `None` when malformed.
pub fn parse(token: &str) -> Option<Presented<'_>> {
    let (session_id, rest) = token.split_once('.')?;
    if session_id.len() != 12 || !session_id.bytes().all(|b| ID_ALPHABET.contains(&b)) {
        return None;
    }
    match rest.split_once('.') {
        Some(("sbx", secret)) if valid_secret(secret) => {
            Some(Presented::Sandbox { session_id, secret })
        }
        None if valid_secret(rest) => Some(Presented::Control {
            session_id,
            secret: rest,
        }),
        _ => None,
    }
}

fn valid_secret(s: &str) -> bool {
    s.len() == 43 && s.bytes().all(|b| ID_ALPHABET.contains(&b))
}

fn secret_part(token: &str) -> Option<&str> {
    match parse(token)? {
        Presented::Control { secret, .. } | Presented::Sandbox { secret, .. } => Some(secret),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_start_like_a_flag() {
        for _ in 0..2000 {
            let id = new_session_id().unwrap();
            assert!(id.as_bytes()[0].is_ascii_alphanumeric(), "{id}");
        }
    }

    #[test]
    fn ids_are_12_url_safe_chars() {
        let id = new_session_id().unwrap();
        assert_eq!(id.len(), 12);
        assert!(id.bytes().all(|b| ID_ALPHABET.contains(&b)));
        assert_ne!(id, new_session_id().unwrap());
    }

    #[test]
    fn token_round_trip_and_hash() {
        let id = new_session_id().unwrap();
        let t = mint(&id, false).unwrap();
        let Some(Presented::Control { session_id, secret }) = parse(t.reveal()) else {
            panic!("control token did not parse");
        };
        assert_eq!(session_id, id);
        assert!(t.hash().matches(secret));
        let other = mint(&id, false).unwrap();
        assert!(!other.hash().matches(secret));
    }

    #[test]
    fn sandbox_tokens_are_distinguished() {
        let id = new_session_id().unwrap();
        let t = mint(&id, true).unwrap();
        assert!(matches!(parse(t.reveal()), Some(Presented::Sandbox { .. })));
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        for bad in [
            "",
            "abc",
            "short.x",
            "aaaaaaaaaaaa.",
            "aaaaaaaaaaaa.sbx.x",
            "aaaaaaaa aaa.bbbb",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let id = new_session_id().unwrap();
        let t = mint(&id, false).unwrap();
        let secret = t.reveal().split_once('.').unwrap().1.to_string();
        let shown = format!("{t:?} {:?} {:?}", t.hash(), parse(t.reveal()));
        assert!(!shown.contains(&secret), "{shown}");
    }
}
