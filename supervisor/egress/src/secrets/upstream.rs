//! The proxy's own TLS client toward a bound host: the host's trust store
//! plus `[network] trust_ca` (docs/INTERFACES.md "[[secrets]]"), HTTP/1.1,
//! the name decided for the connection as the name verified.

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use super::provider;

/// A client config trusting the host's store and the PEM files `extra`.
/// A file that cannot be read or holds no certificate is an error naming
/// it; a host store with no certificate at all is one too, unless `extra`
/// gives some.
pub(crate) fn client_config(extra: &[impl AsRef<Path>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (_, unparsed) = roots.add_parsable_certificates(native.certs);
    let _ = unparsed; // the host's bundle may hold certificates rustls cannot use
    for path in extra {
        let path = path.as_ref();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("[network] trust_ca {}: {e}", path.display()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("[network] trust_ca {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "[network] trust_ca {}: holds no PEM certificate",
                path.display()
            ));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("[network] trust_ca {}: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err("the host's trust store holds no certificate and [network] trust_ca names none: no bound host could be verified".into());
    }
    let mut c = ClientConfig::builder_with_provider(Arc::new(provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}
