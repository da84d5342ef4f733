//! Host secrets: the startup scan of environment variables and the audit of a
//! session's system prompt.
//!
//! The scan finds variables *named* like a secret; their values feed the
//! [`Redactor`] and their count goes in the audit `config` event. Neither a
//! value nor `Debug` output of an [`EnvScan`] ever shows a value.

use std::fmt;

use regex::Regex;

use crate::Redactor;

/// Name fragments (matched case-insensitively) that make an env var a secret.
pub const SECRET_NAME_PARTS: [&str; 9] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "APIKEY",
    "API_KEY",
    "AUTH",
];

/// Whether an environment variable name looks like it holds a secret.
pub fn is_secret_env_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|p| upper.contains(p))
}

/// The secret-named variables of an environment.
#[derive(Clone, Default)]
pub struct EnvScan {
    names: Vec<String>,
    /// Parallel to `names` (may hold empty values).
    raw: Vec<String>,
    /// The non-empty values, for the redactor.
    values: Vec<String>,
}

impl fmt::Debug for EnvScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvScan")
            .field("count", &self.names.len())
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl EnvScan {
    /// How many variables are named like a secret (what the `config` event records).
    pub fn count(&self) -> usize {
        self.names.len()
    }

    /// Their names, sorted. (Names are not secret; the audit records only the count.)
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Their values, for the redactor. Never log these.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// A redactor for these values (plus the built-in shapes).
    pub fn redactor(&self) -> Redactor {
        Redactor::new(self.values.clone())
    }
}

/// Scans the current process environment.
pub fn scan_env() -> EnvScan {
    scan_vars(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

/// Scans the given `(name, value)` pairs.
pub fn scan_vars<I>(vars: I) -> EnvScan
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut pairs: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| is_secret_env_name(k))
        .collect();
    pairs.sort();
    let (names, raw): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
    let values = raw.iter().filter(|v| !v.is_empty()).cloned().collect();
    EnvScan { names, raw, values }
}

/// The names of the secret-named variables in the current environment.
pub fn secret_env_names() -> Vec<String> {
    scan_env().names
}

/// Why a system prompt refuses its session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    #[error(
        "system prompt reads the host environment ({pattern}); a prompt must not interpolate environment variables"
    )]
    EnvironmentAccess { pattern: String },
    #[error(
        "system prompt names host secret variable {name}; remove it (the supervisor never passes host secrets to a session)"
    )]
    SecretName { name: String },
    #[error("system prompt contains the value of host secret variable {name}; remove it")]
    SecretValue { name: String },
}

const ENV_ACCESS: &str = concat!(
    r"os\.environ|os\.getenv|(?-u:\b)getenv[ \t]*\(|process\.env(?-u:\b)|System\.getenv",
    r"|std::env::var|env::var[ \t]*\(|\$ENV\{|(?-u:\b)ENV\[|\$env:|%[A-Za-z_][A-Za-z0-9_]{2,}%",
    r"|\$\{?[A-Za-z0-9_]*(?i-u:key|secret|token|password|passwd|credential|auth)[A-Za-z0-9_]*\}?",
);

/// Audits a session's system prompt before the session opens: refuses a prompt
/// that reads the environment (`os.environ`, `getenv(`, `process.env`,
/// `${…TOKEN…}` and similar), names one of this host's secret variables, or
/// contains one of their values. The error names the pattern or variable,
/// never a value.
pub fn audit_system_prompt(prompt: &str, env: &EnvScan) -> Result<(), PromptError> {
    // Built once per process: OpenSession runs this on every session.
    static ENV_ACCESS_RE: std::sync::LazyLock<Option<Regex>> =
        std::sync::LazyLock::new(|| Regex::new(ENV_ACCESS).ok());
    if let Some(re) = ENV_ACCESS_RE.as_ref() {
        if let Some(m) = re.find(prompt) {
            return Err(PromptError::EnvironmentAccess {
                pattern: m.as_str().chars().take(64).collect(),
            });
        }
    } else {
        // The pattern is unit-tested; if it ever failed to build, refuse.
        return Err(PromptError::EnvironmentAccess {
            pattern: "(pattern unavailable)".to_string(),
        });
    }
    for name in &env.names {
        // A whole-word match needs the name somewhere first (and an empty
        // prompt, the common case, compiles nothing).
        if !prompt.contains(name.as_str()) {
            continue;
        }
        let word = format!(r"(?-u:\b){}(?-u:\b)", regex::escape(name));
        match Regex::new(&word) {
            Ok(re) if re.is_match(prompt) => {
                return Err(PromptError::SecretName { name: name.clone() });
            }
            Ok(_) => {}
            // No pattern: the plain containment above decides.
            Err(_) => return Err(PromptError::SecretName { name: name.clone() }),
        }
    }
    for (name, value) in env.names.iter().zip(&env.raw) {
        if value.chars().count() >= crate::redact::MIN_SECRET_LEN && prompt.contains(value.as_str())
        {
            return Err(PromptError::SecretValue { name: name.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> EnvScan {
        scan_vars(
            [
                ("PATH", "/usr/bin:/bin"),
                ("GITHUB_TOKEN", "ghp_notreallyatoken1234567890"),
                ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENG"),
                ("my_api_key", "abcdefgh1234"),
                ("HOME", "/root"),
                ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
                ("EMPTY_PASSWORD", ""),
            ]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string())),
        )
    }

    #[test]
    fn scan_counts_secret_names_only() {
        let e = env();
        assert_eq!(e.count(), 5);
        assert_eq!(
            e.names(),
            [
                "AWS_SECRET_ACCESS_KEY",
                "EMPTY_PASSWORD",
                "GITHUB_TOKEN",
                "SSH_AUTH_SOCK",
                "my_api_key"
            ]
        );
        assert_eq!(e.values().len(), 4);
        assert!(!is_secret_env_name("PATH"));
        assert!(is_secret_env_name("OpenAI_ApiKey"));
    }

    #[test]
    fn debug_shows_no_values() {
        let dbg = format!("{:?}", env());
        assert!(!dbg.contains("wJalr"), "{dbg}");
        assert!(!dbg.contains("ghp_"), "{dbg}");
        assert!(dbg.contains("count: 5"), "{dbg}");
    }

    #[test]
    fn redactor_from_scan_redacts_values() {
        let r = env().redactor();
        assert_eq!(
            r.redact("x wJalrXUtnFEMIK7MDENG y"),
            "x [REDACTED:secret-env] y"
        );
    }

    #[test]
    fn prompt_audit_refuses_environment_interpolation() {
        let e = env();
        for p in [
            "Use os.environ['X'] to configure",
            "call getenv(\"HOME\")",
            "read process.env.SOMETHING",
            "token is ${OPENAI_API_KEY}",
            "echo $MY_SECRET",
            "System.getenv(\"X\")",
        ] {
            assert!(
                matches!(
                    audit_system_prompt(p, &e),
                    Err(PromptError::EnvironmentAccess { .. })
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn prompt_audit_refuses_host_secret_names_and_values() {
        let e = env();
        assert_eq!(
            audit_system_prompt("Please print GITHUB_TOKEN for me", &e),
            Err(PromptError::SecretName {
                name: "GITHUB_TOKEN".to_string()
            })
        );
        let err = audit_system_prompt("the key is wJalrXUtnFEMIK7MDENG ok", &e).unwrap_err();
        assert_eq!(
            err,
            PromptError::SecretValue {
                name: "AWS_SECRET_ACCESS_KEY".to_string()
            }
        );
        assert!(!err.to_string().contains("wJalr"));
    }

    #[test]
    fn prompt_audit_allows_ordinary_prompts() {
        let e = env();
        for p in [
            "You are a careful coding assistant. Run the tests before committing.",
            "Explain what a token bucket rate limiter is.",
            "Costs 50% less",
            "",
        ] {
            assert_eq!(audit_system_prompt(p, &e), Ok(()), "{p}");
        }
    }
}
