//! The Chat proxy's providers (docs/ARCHITECTURE.md "The LLM
//! proxy"). The supervisor holds the API
//! key; the agent only ever talks to the supervisor.

mod openai;
mod script;

use std::time::Duration;

use tollgate_proto::v1 as pb;

pub use openai::OpenAi;
pub use script::Script;

/// One completion from a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub message: pb::ChatMessage,
    /// (prompt, completion) tokens, when the provider reported them.
    pub usage: Option<(u64, u64)>,
    pub finish_reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("llm timed out after {}s", .0.as_secs())]
    Timeout(Duration),
    #[error("llm call failed: cannot reach {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("llm call failed: provider answered HTTP {status}: {body}")]
    Status {
        status: u16,
        body: String,
        /// The response's `Retry-After`, as sent.
        retry_after: Option<String>,
    },
    #[error("llm call failed: malformed provider response: {reason}")]
    Malformed {
        reason: String,
        /// The start of the body the provider sent (lossy UTF-8), for the
        /// audit record: what the model sent stays on record even when it
        /// cannot be used.
        body: Option<String>,
    },
    #[error("llm call failed: provider response exceeds {0} bytes")]
    TooLarge(usize),
    #[error("llm call failed: {0}")]
    Other(String),
}

/// How much of a malformed response body an error keeps.
pub const MALFORMED_BODY_KEPT: usize = 16 * 1024;

impl LlmError {
    /// A response that cannot be used, for `reason`.
    pub fn malformed(reason: impl Into<String>) -> LlmError {
        LlmError::Malformed {
            reason: reason.into(),
            body: None,
        }
    }
}

/// Whether a provider's HTTP status is worth another try: too many
/// requests, or the server's own failure.
pub fn retryable(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// How long a `Retry-After` asks to wait (delay-seconds or an HTTP date),
/// from `now`; `None` when it is neither.
pub fn retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A model backend.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// `turn` is the session's count of earlier Chat calls (the script
    /// provider replays by it).
    async fn complete(
        &self,
        req: &pb::ChatRequest,
        model: &str,
        timeout: Duration,
        turn: u32,
    ) -> Result<Completion, LlmError>;

    fn name(&self) -> &'static str;
}

/// Cost in USD of one call.
pub fn cost(usage: Option<(u64, u64)>, price_in_per_1k: f64, price_out_per_1k: f64) -> f64 {
    match usage {
        Some((p, c)) => p as f64 / 1000.0 * price_in_per_1k + c as f64 / 1000.0 * price_out_per_1k,
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("Sun, 09 Sep 2001 01:46:50 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after("Sat, 01 Jan 2000 00:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon", now), None);
        assert!(retryable(429) && retryable(503) && !retryable(400) && !retryable(200));
    }

    #[test]
    fn cost_uses_per_thousand_prices() {
        let c = cost(Some((2000, 500)), 0.5, 2.0);
        assert!((c - 2.0).abs() < 1e-9, "{c}");
        assert_eq!(cost(None, 1.0, 1.0), 0.0);
    }
}
