//! A session's certificate authority (docs/THREAT_MODEL.md "Secrets"):
//! made when the session opens, its key held only in the supervisor's
//! memory, its certificate given to the sandbox to trust, name-constrained
//! to the hosts the session's secrets are bound to, so even a leaked key
//! could not vouch for any other host. One leaf per server name, made on
//! first use and kept for the session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, GeneralSubtree, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tollgate_policy::network::HostPattern;

use super::provider;

/// How long a session's certificates are valid: a day before now (clock
/// skew) to thirty days after; a session outliving that gets new leaves
/// refused by its clients, never silently unverified ones.
const VALID_BEFORE: Duration = Duration::from_secs(24 * 3600);
const VALID_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

pub(crate) struct SessionCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

fn validity(p: &mut CertificateParams) {
    let now = SystemTime::now();
    p.not_before = (now - VALID_BEFORE).into();
    p.not_after = (now + VALID_FOR).into();
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl SessionCa {
    /// A CA for `session` whose names are constrained to `bound`.
    pub(crate) fn new(session: &str, bound: &[&HostPattern]) -> Result<SessionCa, String> {
        let key = KeyPair::generate().map_err(|e| tls_err("the session CA's key", e))?;
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "tollgate");
        let short: String = session.chars().take(32).collect();
        dn.push(DnType::CommonName, format!("tollgate session {short}"));
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.name_constraints = Some(NameConstraints {
            permitted_subtrees: bound.iter().map(|h| subtree(h)).collect(),
            excluded_subtrees: Vec::new(),
        });
        validity(&mut p);
        let cert = p
            .self_signed(&key)
            .map_err(|e| tls_err("the session CA", e))?;
        Ok(SessionCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(p, key),
            leaves: Mutex::default(),
        })
    }

    /// The CA certificate, PEM (what the sandbox trusts).
    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// The server side of a terminated connection for `name`: a leaf for
    /// it, HTTP/1.1 only (docs/THREAT_MODEL.md "Secrets": HTTP/2 is not
    /// terminated; a client offering both gets HTTP/1.1).
    pub(crate) fn server_config(&self, name: &str) -> Result<Arc<ServerConfig>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = leaves.get(name) {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(self.make_config(name)?);
        leaves.insert(name.to_string(), Arc::clone(&c));
        Ok(c)
    }

    fn make_config(&self, name: &str) -> Result<ServerConfig, String> {
        let key = KeyPair::generate().map_err(|e| tls_err("a leaf key", e))?;
        let mut p = CertificateParams::new(vec![name.to_string()])
            .map_err(|e| tls_err(&format!("a leaf for {name}"), e))?;
        p.distinguished_name = DistinguishedName::new();
        // An address gets no common name: a client checks a CN against the
        // CA's DNS name constraints, and an address is not a name.
        if name.parse::<std::net::IpAddr>().is_ok() {
            p.distinguished_name
                .push(DnType::OrganizationName, "tollgate");
        } else {
            p.distinguished_name.push(DnType::CommonName, name);
        }
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        validity(&mut p);
        let leaf = p
            .signed_by(&key, &self.issuer)
            .map_err(|e| tls_err(&format!("a leaf for {name}"), e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut c = ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err("the TLS versions", e))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.der.clone()], der)
            .map_err(|e| tls_err(&format!("a leaf for {name}"), e))?;
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(c)
    }
}

/// The name constraint one bound host pattern allows: a name covers its
/// subdomains too (RFC 5280 4.2.1.10); an address is a /32 or /128.
fn subtree(h: &HostPattern) -> GeneralSubtree {
    match h {
        HostPattern::Exact(n) | HostPattern::Subdomains(n) => {
            GeneralSubtree::DnsName(n.as_str().to_string())
        }
        HostPattern::Ip(ip) => {
            let bits = if ip.is_ipv4() { 32 } else { 128 };
            GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(*ip, bits))
        }
    }
}
