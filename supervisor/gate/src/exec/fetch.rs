//! webfetch: to the address the policy vetted, every redirect re-vetted.

use std::sync::Arc;
use std::time::Duration;

use tollgate_policy::Decision;
use tollgate_tools::{FetchLimits, HopVetter};

use super::{Done, ExecError, tool_err};
use crate::host::{Ctx, Host};

/// Fetches the vetted address, at most `max_bytes` (within the
/// configuration's limit).
pub(super) async fn webfetch(
    cx: &Ctx,
    max_bytes: Option<u64>,
    d: &Decision,
) -> Result<Done, ExecError> {
    let Some(first) = &d.fetch else {
        return Err(ExecError::Tool(
            "webfetch: the policy vetted no address".to_string(),
        ));
    };
    let session = &cx.host.config().session;
    let max = max_bytes
        .map(|m| (m as usize).min(session.fetch_max_bytes))
        .unwrap_or(session.fetch_max_bytes);
    let limits = FetchLimits {
        max_bytes: max,
        timeout: Duration::from_secs(session.fetch_timeout_s),
        max_redirects: 5,
    };
    let vetter = Vetter {
        host: Arc::clone(&cx.host),
    };
    let o = tollgate_tools::webfetch(first, &limits, &vetter)
        .await
        .map_err(tool_err)?;
    let cap = session.output_cap_bytes;
    Ok(tollgate_tools::cap_text(&o.text, cap, "pass a smaller max_bytes").into())
}

/// Re-vets each webfetch redirect hop with the same SSRF guard, and each
/// address right before the fetch connects to it against the host's own
/// addresses read again now (an address may have become the host's since
/// the decision: an approval can take minutes).
struct Vetter {
    host: Arc<dyn Host>,
}

impl HopVetter for Vetter {
    fn vet(&self, url: &str) -> Result<tollgate_policy::VettedFetch, String> {
        self.host
            .engine()
            .vet_url(url, &self.host.resolver())
            .map_err(|d| d.reason)
    }

    fn vet_peer(&self, ip: std::net::IpAddr) -> Result<(), String> {
        self.host
            .engine()
            .vet_address(ip, &self.host.resolver_now())
    }
}
