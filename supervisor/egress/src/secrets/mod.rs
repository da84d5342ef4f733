//! Secrets the sandbox can use but never read (docs/THREAT_MODEL.md
//! "Secrets", docs/INTERFACES.md "[[secrets]]"). The sandbox holds a
//! placeholder, random per session; the proxy puts the real value in only
//! on the wire, only toward a host the secret is bound to, and only inside
//! TLS it terminates with the session's CA. A placeholder sent anywhere
//! else is stripped and recorded.

mod ca;
mod mask;
pub(crate) mod rewrite;
pub(crate) mod terminate;
mod upstream;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tollgate_policy::network::NetHost;
use tollgate_policy::secrets::SecretBinding;

pub(crate) use mask::Masker;

/// The TLS provider every config here uses (the one the workspace's
/// rustls is built with), never a process-wide default.
pub(crate) fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Uses of one secret, shared by every session holding it.
#[derive(Debug, Default)]
pub struct SecretCounters {
    /// Requests it was put into.
    pub uses: AtomicU64,
    /// Its placeholder, stripped from a request to a host it is not bound to.
    pub stripped: AtomicU64,
}

/// One secret as a session gets it: its binding, its value, the variable
/// the sandbox sees its placeholder in.
pub struct SessionSecret {
    pub binding: Arc<SecretBinding>,
    pub value: Arc<str>,
    pub env: Option<String>,
    pub counters: Arc<SecretCounters>,
}

impl std::fmt::Debug for SessionSecret {
    /// Never the value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSecret")
            .field("name", &self.binding.name)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

struct Held {
    secret: SessionSecret,
    placeholder: RwLock<String>,
}

/// A session's secrets, its CA and the client that connects on.
pub struct SessionSecrets {
    held: Vec<Held>,
    ca: ca::SessionCa,
    upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for SessionSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.held.iter().map(|h| h.name()).collect();
        f.debug_struct("SessionSecrets")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

/// A fresh placeholder: 128 random bits, hex, after the secret's name.
fn placeholder(name: &str) -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("no randomness for a placeholder: {e}"))?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!("tollgate-secret-{name}-{hex}"))
}

impl Held {
    fn name(&self) -> &str {
        &self.secret.binding.name
    }
    fn placeholder(&self) -> String {
        self.placeholder
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl SessionSecrets {
    /// `session`'s secrets, with a new CA constrained to their hosts and
    /// an upstream client trusting the host's store plus `trust_ca`.
    pub fn new(
        session: &str,
        secrets: Vec<SessionSecret>,
        trust_ca: &[PathBuf],
    ) -> Result<SessionSecrets, String> {
        let patterns: Vec<_> = secrets
            .iter()
            .flat_map(|s| s.binding.hosts.iter().map(|r| &r.pattern))
            .collect();
        let ca = ca::SessionCa::new(session, &patterns)?;
        let upstream = upstream::client_config(trust_ca)?;
        let held = secrets
            .into_iter()
            .map(|secret| {
                Ok(Held {
                    placeholder: RwLock::new(placeholder(&secret.binding.name)?),
                    secret,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(SessionSecrets { held, ca, upstream })
    }

    /// What the sandbox's environment gets: each `env` with its placeholder.
    pub fn env(&self) -> Vec<(String, String)> {
        self.held
            .iter()
            .filter_map(|h| Some((h.secret.env.clone()?, h.placeholder())))
            .collect()
    }

    /// The session CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.pem()
    }

    /// New placeholders for every secret (a revoke): the old ones are then
    /// nothing but random text.
    pub fn rotate(&self) -> Result<(), String> {
        for h in &self.held {
            let fresh = placeholder(h.name())?;
            *h.placeholder.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        }
        Ok(())
    }

    /// Whether some secret of the session is bound to `host:port` (its
    /// TLS connections are then terminated).
    pub fn binds(&self, host: &NetHost, port: u16) -> bool {
        self.held.iter().any(|h| h.secret.binding.binds(host, port))
    }

    /// The names of the session's secrets.
    pub fn names(&self) -> Vec<String> {
        self.held.iter().map(|h| h.name().to_string()).collect()
    }

    /// `(placeholder, value)` of every secret, for the response masker.
    fn values(&self) -> Vec<Vec<u8>> {
        self.held
            .iter()
            .map(|h| h.secret.value.as_bytes().to_vec())
            .collect()
    }

    fn count_use(&self, i: usize) {
        self.held[i]
            .secret
            .counters
            .uses
            .fetch_add(1, Ordering::Relaxed);
    }

    fn count_strip(&self, i: usize) {
        self.held[i]
            .secret
            .counters
            .stripped
            .fetch_add(1, Ordering::Relaxed);
    }
}
