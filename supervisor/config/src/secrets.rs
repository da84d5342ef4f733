//! `[[secrets]]` (docs/INTERFACES.md "[[secrets]]"): secrets a sandbox can
//! use but never read. Checked here for shape; the daemon reads each value
//! at start and refuses to start when one cannot be read.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Deserialize;
use tollgate_policy::secrets::{MAX_SECRETS, SecretBinding, check_env_name};

/// One `[[secrets]]` entry as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SecretConfig {
    pub name: String,
    /// The supervisor's environment variable holding the value.
    #[serde(default)]
    pub from_env: Option<String>,
    /// A file holding it: owned by the supervisor's uid, readable by no
    /// one else (checked at start).
    #[serde(default)]
    pub from_file: Option<PathBuf>,
    /// A systemd credential (`LoadCredential=NAME:…`), read from
    /// `$CREDENTIALS_DIRECTORY/NAME`.
    #[serde(default)]
    pub from_credential: Option<String>,
    /// Where it may be sent: `[network] allow`'s grammar.
    pub hosts: Vec<String>,
    /// The variable the sandbox sees, holding a placeholder.
    #[serde(default)]
    pub env: Option<String>,
    /// The header the proxy sets on every request to a bound host.
    #[serde(default)]
    pub header: Option<String>,
    /// `"Bearer {}"`, `"basic"`, `"basic:USER"`; needs `header`.
    #[serde(default)]
    pub format: Option<String>,
    /// The users whose sessions get it; empty: every session's.
    #[serde(default)]
    pub owners: Vec<String>,
}

/// Where a secret's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource<'a> {
    Env(&'a str),
    File(&'a std::path::Path),
    Credential(&'a str),
}

impl std::fmt::Display for SecretSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env(v) => write!(f, "from_env {v:?}"),
            SecretSource::File(p) => write!(f, "from_file {}", p.display()),
            SecretSource::Credential(c) => write!(f, "from_credential {c:?}"),
        }
    }
}

impl SecretConfig {
    /// Its one source (checked by [`check`]).
    pub fn source(&self) -> Result<SecretSource<'_>, String> {
        match (&self.from_env, &self.from_file, &self.from_credential) {
            (Some(v), None, None) => Ok(SecretSource::Env(v)),
            (None, Some(p), None) => Ok(SecretSource::File(p)),
            (None, None, Some(c)) => Ok(SecretSource::Credential(c)),
            _ => Err("set exactly one of from_env, from_file and from_credential".into()),
        }
    }

    /// Where it may go and how, parsed.
    pub fn binding(&self) -> Result<SecretBinding, String> {
        SecretBinding::parse(
            &self.name,
            &self.hosts,
            self.header.as_deref(),
            self.format.as_deref(),
        )
    }

    /// Whether `user`'s sessions get it.
    pub fn is_for(&self, user: &str) -> bool {
        self.owners.is_empty() || self.owners.iter().any(|o| o == user)
    }

    fn check_one(&self) -> Result<(), String> {
        self.binding()?;
        match self.source()? {
            SecretSource::Env(v) => check_env_name(v).map_err(|e| format!("from_{e}"))?,
            SecretSource::File(p) if !p.is_absolute() => {
                return Err(format!(
                    "from_file {} must be an absolute path",
                    p.display()
                ));
            }
            SecretSource::Credential(c) if c.is_empty() || c.contains('/') => {
                return Err(format!("from_credential {c:?} must be a bare name"));
            }
            _ => {}
        }
        if let Some(e) = &self.env {
            check_env_name(e)?;
            if let Some(who) = tollgate_policy::sandbox_env::set_by(e) {
                return Err(format!(
                    "env {e:?} is one the sandbox's environment sets itself ({who} sets it)"
                ));
            }
        }
        if self.owners.iter().any(|o| o.is_empty()) {
            return Err("owners holds an empty name".into());
        }
        Ok(())
    }
}

/// Every entry; the error names the entry (`[[secrets]] #N "name"`).
pub fn check(secrets: &[SecretConfig]) -> Result<(), String> {
    if secrets.len() > MAX_SECRETS {
        return Err(format!(
            "[[secrets]] holds {} entries; at most {MAX_SECRETS}",
            secrets.len()
        ));
    }
    let mut names = HashSet::new();
    let mut envs = HashSet::new();
    for (i, s) in secrets.iter().enumerate() {
        let at = format!("[[secrets]] #{} {:?}", i + 1, s.name);
        s.check_one().map_err(|e| format!("{at}: {e}"))?;
        if !names.insert(s.name.as_str()) {
            return Err(format!("{at}: a second secret of that name"));
        }
        if let Some(e) = &s.env
            && !envs.insert(e.as_str())
        {
            return Err(format!("{at}: env {e:?} is another secret's too"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(toml_text: &str) -> Result<(), String> {
        #[derive(Deserialize)]
        struct W {
            secrets: Vec<SecretConfig>,
        }
        let w: W = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        check(&w.secrets)
    }

    #[test]
    fn a_secret_needs_one_source_a_host_and_a_free_variable() {
        let ok = "[[secrets]]\nname = \"forge\"\nfrom_env = \"FORGE_TOKEN\"\nhosts = [\"git.example.org\"]\nenv = \"FORGE_TOKEN\"\nheader = \"Authorization\"\nformat = \"Bearer {}\"\nowners = [\"alice\"]\n";
        one(ok).unwrap();
        for (bad, want) in [
            ("name = \"a\"\nhosts = [\"x.example\"]", "exactly one of"),
            (
                "name = \"a\"\nfrom_env = \"A\"\nfrom_file = \"/f\"\nhosts = [\"x.example\"]",
                "exactly one of",
            ),
            (
                "name = \"a\"\nfrom_file = \"rel\"\nhosts = [\"x.example\"]",
                "absolute",
            ),
            (
                "name = \"a\"\nfrom_credential = \"a/b\"\nhosts = [\"x.example\"]",
                "bare name",
            ),
            (
                "name = \"a\"\nfrom_env = \"A\"\nhosts = []",
                "hosts is empty",
            ),
            (
                "name = \"a\"\nfrom_env = \"A\"\nhosts = [\"*.org\"]",
                "hosts[0]",
            ),
            (
                "name = \"a\"\nfrom_env = \"A\"\nhosts = [\"x.example\"]\nenv = \"PATH\"",
                "sets itself",
            ),
            (
                "name = \"a\"\nfrom_env = \"A\"\nhosts = [\"x.example\"]\nformat = \"basic\"",
                "without header",
            ),
            (
                "name = \"a\"\nfrom_env = \"A\"\nhosts = [\"x.example\"]\nvalue = \"x\"",
                "unknown field",
            ),
        ] {
            let e = one(&format!("[[secrets]]\n{bad}\n")).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        for (var, who) in [
            ("HTTPS_PROXY", "the network wall"),
            ("https_proxy", "the network wall"),
            ("GIT_SSH_COMMAND", "the network wall"),
            ("ALL_PROXY", "the network wall"),
            ("no_proxy", "the network wall"),
            ("SSL_CERT_FILE", "the session's CA bundle"),
            ("CARGO_HOME", "the package caches"),
            ("AGENT_SESSION_ID", "the sandbox"),
        ] {
            let e = one(&format!(
                "[[secrets]]\nname = \"a\"\nfrom_env = \"A\"\nhosts = [\"x.example\"]\nenv = \"{var}\"\n"
            ))
            .unwrap_err();
            assert_eq!(
                e,
                format!(
                    "[[secrets]] #1 \"a\": env \"{var}\" is one the sandbox's environment sets itself ({who} sets it)"
                )
            );
        }
        let two = "[[secrets]]\nname = \"a\"\nfrom_env = \"A\"\nhosts = [\"x.example\"]\n[[secrets]]\nname = \"a\"\nfrom_env = \"B\"\nhosts = [\"x.example\"]\n";
        assert!(one(two).unwrap_err().contains("#2 \"a\": a second secret"));
    }
}
