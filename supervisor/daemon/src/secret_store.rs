//! `[[secrets]]` read at start (docs/INTERFACES.md "[[secrets]]",
//! docs/THREAT_MODEL.md "Secrets"): every value from its one source, or
//! the start is refused naming the secret. Values stay here and in the
//! egress proxies; sessions get [`SessionSecrets`] with placeholders,
//! `supervisorctl secrets list` gets names, hosts and counts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tollgate_config::{SecretConfig, SecretSource};
use tollgate_egress::{SecretCounters, SessionSecret, SessionSecrets};
use tollgate_policy::secrets::SecretBinding;

struct Entry {
    config: SecretConfig,
    binding: Arc<SecretBinding>,
    value: Arc<str>,
    counters: Arc<SecretCounters>,
}

/// The configured secrets, their values read.
#[derive(Default)]
pub struct SecretStore {
    entries: Vec<Entry>,
    /// Live sessions' secrets: placeholders and CA, made with the first
    /// sandbox's spec, dropped when the session ends.
    sessions: Mutex<HashMap<String, Arc<SessionSecrets>>>,
}

impl std::fmt::Debug for SecretStore {
    /// Names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .entries
            .iter()
            .map(|e| e.config.name.as_str())
            .collect();
        f.debug_struct("SecretStore")
            .field("names", &names)
            .finish()
    }
}

/// One secret as `secrets list` shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub hosts: Vec<String>,
    pub env: String,
    pub header: String,
    pub owners: Vec<String>,
    pub uses: u64,
    pub stripped: u64,
}

impl SecretStore {
    /// Reads every value; the error names the secret and its source.
    pub fn load(configs: &[SecretConfig], own_uid: u32) -> Result<SecretStore, String> {
        let mut entries = Vec::new();
        for c in configs {
            let what = format!("[[secrets]] {:?}", c.name);
            let binding = c.binding().map_err(|e| format!("{what}: {e}"))?;
            let value = read_value(c, own_uid, &what)?;
            entries.push(Entry {
                config: c.clone(),
                binding: Arc::new(binding),
                value: value.into(),
                counters: Arc::default(),
            });
        }
        Ok(SecretStore {
            entries,
            sessions: Mutex::default(),
        })
    }

    /// Every value, for the redactor (tool output, records, telemetry).
    pub fn values(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.value.to_string()).collect()
    }

    /// Session `id`'s secrets, made on first call (when its first sandbox
    /// is specified) and kept until [`SecretStore::end_session`].
    pub fn session(
        &self,
        id: &str,
        user: &str,
        trust_ca: &[PathBuf],
    ) -> Result<Option<Arc<SessionSecrets>>, String> {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(id) {
            return Ok(Some(Arc::clone(s)));
        }
        let Some(made) = self.for_session(id, user, trust_ca)? else {
            return Ok(None);
        };
        let made = Arc::new(made);
        map.insert(id.to_string(), Arc::clone(&made));
        Ok(Some(made))
    }

    /// The secrets session `id` already has (its wall's proxies put them in).
    pub fn of_session(&self, id: &str) -> Option<Arc<SessionSecrets>> {
        let map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id).cloned()
    }

    /// The session ended (revoked, killed, expired): its placeholders are
    /// rotated, so any copy left anywhere is random text, and dropped.
    pub fn end_session(&self, id: &str) {
        let gone = {
            let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            map.remove(id)
        };
        if let Some(s) = gone
            && let Err(e) = s.rotate()
        {
            tracing::warn!(session = %id, "secrets' placeholders not rotated: {e}");
        }
    }

    /// The secrets `user`'s session gets, with their placeholders and the
    /// session's CA; `None` when it gets none.
    fn for_session(
        &self,
        session: &str,
        user: &str,
        trust_ca: &[PathBuf],
    ) -> Result<Option<SessionSecrets>, String> {
        let mine: Vec<SessionSecret> = self
            .entries
            .iter()
            .filter(|e| e.config.is_for(user))
            .map(|e| SessionSecret {
                binding: Arc::clone(&e.binding),
                value: Arc::clone(&e.value),
                env: e.config.env.clone(),
                counters: Arc::clone(&e.counters),
            })
            .collect();
        if mine.is_empty() {
            return Ok(None);
        }
        SessionSecrets::new(session, mine, trust_ca).map(Some)
    }

    /// Names, hosts and counts.
    pub fn list(&self) -> Vec<SecretInfo> {
        self.entries
            .iter()
            .map(|e| SecretInfo {
                name: e.config.name.clone(),
                hosts: e.binding.host_texts(),
                env: e.config.env.clone().unwrap_or_default(),
                header: e.config.header.clone().unwrap_or_default(),
                owners: e.config.owners.clone(),
                uses: e.counters.uses.load(Ordering::Relaxed),
                stripped: e.counters.stripped.load(Ordering::Relaxed),
            })
            .collect()
    }
}

fn read_value(c: &SecretConfig, own_uid: u32, what: &str) -> Result<String, String> {
    let source = c.source().map_err(|e| format!("{what}: {e}"))?;
    let value = match source {
        SecretSource::Env(v) => std::env::var(v)
            .ok()
            .filter(|x| !x.trim().is_empty())
            .map(|x| x.trim().to_string())
            .ok_or_else(|| {
                format!(
                    "{what}: from_env {v:?} is not set (or empty) in the supervisor's environment"
                )
            })?,
        SecretSource::File(p) => crate::llm_key::read_file(p, own_uid, what)?,
        SecretSource::Credential(name) => {
            let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
                format!("{what}: from_credential {name:?}: $CREDENTIALS_DIRECTORY is not set (add LoadCredential={name}:FILE to the unit)")
            })?;
            crate::llm_key::read_file(&Path::new(&dir).join(name), own_uid, what)?
        }
    };
    if value.bytes().any(|b| b.is_ascii_control()) {
        return Err(format!(
            "{what} ({source}): the value holds a control character; a secret is one line of printable text"
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn own() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    fn config(name: &str, file: &Path) -> SecretConfig {
        SecretConfig {
            name: name.into(),
            from_file: Some(file.to_path_buf()),
            hosts: vec!["git.example.org".into()],
            env: Some("FORGE_TOKEN".into()),
            owners: vec!["alice".into()],
            ..SecretConfig::default()
        }
    }

    #[test]
    fn a_missing_or_shared_source_is_refused_naming_the_secret() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("forge");
        let e = SecretStore::load(&[config("forge", &p)], own()).unwrap_err();
        assert!(
            e.starts_with("[[secrets]] \"forge\" ") && e.contains("No such file"),
            "{e}"
        );
        std::fs::write(&p, "tok-123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = SecretStore::load(&[config("forge", &p)], own()).unwrap_err();
        assert!(e.contains("readable by no one else"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = SecretStore::load(&[config("forge", &p)], own()).unwrap();
        assert_eq!(s.values(), vec!["tok-123".to_string()]);
        let env = SecretConfig {
            name: "api".into(),
            from_env: Some("TOLLGATE_TEST_SURELY_UNSET_VAR".into()),
            hosts: vec!["api.example.org".into()],
            ..SecretConfig::default()
        };
        let e = SecretStore::load(&[env], own()).unwrap_err();
        assert!(
            e.contains("\"api\": from_env \"TOLLGATE_TEST_SURELY_UNSET_VAR\" is not set"),
            "{e}"
        );
    }

    #[test]
    fn sessions_get_their_owners_secrets_as_placeholders_and_the_list_no_value() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("forge");
        std::fs::write(&p, "tok-456").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = SecretStore::load(&[config("forge", &p)], own()).unwrap();
        assert!(s.session("s0", "bob", &[]).unwrap().is_none());
        let mine = s.session("s1", "alice", &[]).unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&mine, &s.of_session("s1").unwrap()),
            "one per session"
        );
        let env = mine.env();
        assert_eq!(env[0].0, "FORGE_TOKEN");
        assert!(env[0].1.starts_with("tollgate-secret-forge-") && !env[0].1.contains("tok-456"));
        assert!(mine.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let l = s.list();
        assert_eq!(
            (l[0].name.as_str(), l[0].hosts.clone(), l[0].uses),
            ("forge", vec!["git.example.org".to_string()], 0)
        );
        assert!(!format!("{l:?}{s:?}{mine:?}").contains("tok-456"));
        s.end_session("s1");
        assert!(s.of_session("s1").is_none());
        assert_ne!(
            mine.env()[0].1,
            env[0].1,
            "the ended session's placeholder was rotated"
        );
    }
}
