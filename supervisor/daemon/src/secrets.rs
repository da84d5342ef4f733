//! The sandbox's environment allowlist (docs/THREAT_MODEL.md, "The walls,
//! by layer", 8). The host
//! environment scan and the system prompt audit live in `tollgate_audit::secrets`.

/// The only variables a sandbox sees (docs/THREAT_MODEL.md).
pub const SANDBOX_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "USER",
    "LANG",
    "LC_ALL",
    "TERM",
    "AGENT_SESSION_ID",
    "AGENT_SESSION_TOKEN",
];

/// Builds a sandbox's complete environment. Nothing from the supervisor's
/// environment passes except LANG / LC_ALL values that look like locales.
/// `sandbox_token` is `None` for `sandbox exec`, which has no session.
pub fn sandbox_env(
    session_id: &str,
    sandbox_token: Option<&str>,
    user: &str,
    host_lang: Option<&str>,
    host_lc_all: Option<&str>,
) -> Vec<(String, String)> {
    let locale_ok = |v: &str| {
        !v.is_empty()
            && v.len() < 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
    };
    let mut env = vec![
        (
            "PATH".to_string(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
        ("HOME".to_string(), "/tmp".to_string()),
        ("USER".to_string(), user.to_string()),
        (
            "LANG".to_string(),
            host_lang
                .filter(|v| locale_ok(v))
                .unwrap_or("C.UTF-8")
                .to_string(),
        ),
        ("TERM".to_string(), "dumb".to_string()),
        ("AGENT_SESSION_ID".to_string(), session_id.to_string()),
    ];
    if let Some(token) = sandbox_token {
        env.push(("AGENT_SESSION_TOKEN".to_string(), token.to_string()));
    }
    if let Some(lc) = host_lc_all.filter(|v| locale_ok(v)) {
        env.push(("LC_ALL".to_string(), lc.to_string()));
    }
    debug_assert!(
        env.iter()
            .all(|(k, _)| SANDBOX_ENV_ALLOWLIST.contains(&k.as_str()))
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_env_is_the_allowlist() {
        let env = sandbox_env(
            "S",
            Some("S.sbx.t"),
            "dev",
            Some("en_US.UTF-8"),
            Some("$(evil)"),
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "PATH",
                "HOME",
                "USER",
                "LANG",
                "TERM",
                "AGENT_SESSION_ID",
                "AGENT_SESSION_TOKEN"
            ]
        );
        let bare = sandbox_env("S", None, "dev", None, None);
        assert!(bare.iter().all(|(k, _)| k != "AGENT_SESSION_TOKEN"));
    }
}
