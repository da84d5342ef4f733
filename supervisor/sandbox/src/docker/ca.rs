//! The session's CA inside a Docker sandbox (docs/THREAT_MODEL.md
//! "Secrets"), as the native sandbox has it: the image's
//! `/etc/ssl/certs/ca-certificates.crt` is stood in for, read-only, by the
//! host's bundle plus the session's CA, so the clients the bundle variables
//! point at (`SSL_CERT_FILE`, `GIT_SSL_CAINFO`, ...) trust the egress
//! proxy's certificates for the hosts a secret is bound to.
//!
//! The file is written beneath the supervisor's state directory (root's,
//! never mounted into a sandbox itself), bound into the container when it
//! starts and removed right after: the mount keeps its content, nothing of
//! it stays on the host.

use std::io::Write;
use std::path::{Path, PathBuf};

use bollard::models::ContainerCreateBody;

use super::container::file_bind;
use crate::SandboxError;

/// The root's bundle, in the container and on the host (Debian's path).
pub const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The host's bundle with `pem` after it.
pub fn bundle_text(host: &str, pem: &str) -> String {
    let mut text = host.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(pem);
    text
}

/// A session's bundle on the host; removed on drop.
#[derive(Debug)]
pub struct SessionBundle {
    path: PathBuf,
}

impl SessionBundle {
    /// Writes `<state_dir>/session-ca/<session>.pem`: the bundle at
    /// `host_bundle` plus `pem`, readable by the container's user.
    pub fn write(
        state_dir: &Path,
        session: &str,
        host_bundle: &Path,
        pem: &str,
    ) -> Result<SessionBundle, SandboxError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let io = |what: String| {
            move |source| SandboxError::Io {
                context: what,
                source,
            }
        };
        let host = std::fs::read_to_string(host_bundle)
            .map_err(io(format!("read the CA bundle {}", host_bundle.display())))?;
        let dir = state_dir.join("session-ca");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(io(format!("create {}", dir.display())))?;
        let path = dir.join(format!("{session}.pem"));
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("remove stale {}", path.display()))(e)),
        }
        let bundle = SessionBundle { path };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&bundle.path)
            .map_err(io(format!("create {}", bundle.path.display())))?;
        // The mode asked for is narrowed by the umask; the container's user
        // must read it.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .and_then(|()| f.write_all(bundle_text(&host, pem).as_bytes()))
            .map_err(io(format!("write {}", bundle.path.display())))?;
        Ok(bundle)
    }

    /// Adds the read-only bind of the bundle over the image's to `body`.
    pub fn attach(&self, body: &mut ContainerCreateBody) -> Result<(), SandboxError> {
        let mount = file_bind(&self.path, BUNDLE)?;
        body.host_config
            .get_or_insert_with(Default::default)
            .mounts
            .get_or_insert_with(Vec::new)
            .push(mount);
        Ok(())
    }
}

impl Drop for SessionBundle {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::MountType;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nSESSION\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_session_ca_follows_the_hosts_bundle_on_its_own_line() {
        assert_eq!(bundle_text("HOST", PEM), format!("HOST\n{PEM}"));
        assert_eq!(bundle_text("HOST\n", PEM), format!("HOST\n{PEM}"));
        assert_eq!(bundle_text("", PEM), PEM);
    }

    #[test]
    fn the_bundle_is_written_readable_bound_read_only_over_the_images_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host.crt");
        std::fs::write(&host, "HOST\n").unwrap();
        let b = SessionBundle::write(dir.path(), "s1", &host, PEM).unwrap();
        let path = dir.path().join("session-ca/s1.pem");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("HOST\n{PEM}")
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        let mut body = ContainerCreateBody::default();
        b.attach(&mut body).unwrap();
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].target.as_deref(), Some(BUNDLE));
        assert_eq!(mounts[0].source.as_deref(), path.to_str());
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        drop(b);
        assert!(!path.exists());
    }

    #[test]
    fn a_missing_host_bundle_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = SessionBundle::write(dir.path(), "s1", &dir.path().join("none.crt"), PEM)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("read the CA bundle") && e.contains("none.crt"),
            "{e}"
        );
    }
}
