//! What a session's sandbox is told about its `[[secrets]]`
//! (docs/INTERFACES.md "[[secrets]]"): each `env` with its placeholder, and
//! the CA bundle (the host's plus the session's CA) that stands in for the
//! sandbox root's, named by every variable clients read a bundle from.

use crate::supervisor::Supervisor;

/// The sandbox root's CA bundle (Debian's path), which the bundle stands in for.
pub(crate) const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Adds the session's placeholders and bundle variables to `env`; returns
/// the session CA (the sandbox adds it to the root's bundle), or `None`
/// when the session gets no secret. A session
/// whose secrets cannot be made gets none (its clients then reach the
/// bound hosts without them, and the host refuses them) and the supervisor
/// says why.
pub(crate) fn session_secrets(
    sup: &Supervisor,
    session: &str,
    user: &str,
    env: &mut Vec<(String, String)>,
) -> Option<String> {
    let trust: Vec<std::path::PathBuf> = sup
        .config
        .network
        .as_ref()
        .map(|n| n.trust_ca.iter().map(Into::into).collect())
        .unwrap_or_default();
    let secrets = match sup.secret_store.session(session, user, &trust) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(session = %session, "[[secrets]] not given to the session: {e}");
            return None;
        }
    };
    env.extend(secrets.env());
    for v in tollgate_policy::sandbox_env::CA_BUNDLE_VARS {
        env.push((v.to_string(), BUNDLE.to_string()));
    }
    Some(secrets.ca_pem().to_string())
}
