//! `[[secrets]]`: where a secret may be sent and how the egress proxy puts
//! it on the wire (docs/INTERFACES.md "[[secrets]]", docs/THREAT_MODEL.md
//! "Secrets"). Pure: the value itself is read by the daemon and used by
//! `tollgate-egress`; this checks the shape of a binding.

use crate::network::{NetHost, NetRule};

/// The most `[[secrets]]` one config holds.
pub const MAX_SECRETS: usize = 64;

/// How the value is written into the header named by `header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretFormat {
    /// A template with one `{}` (`"Bearer {}"`, `"token {}"`, `"{}"`).
    Template { before: String, after: String },
    /// `Basic base64(VALUE)`: the value is `user:password`.
    Basic,
    /// `Basic base64(USER:VALUE)` (`"basic:x-access-token"`, as forges take
    /// a token over git's https).
    BasicUser(String),
}

impl SecretFormat {
    /// `"Bearer {}"`, `"basic"` or `"basic:USER"`.
    pub fn parse(s: &str) -> Result<SecretFormat, String> {
        if s == "basic" {
            return Ok(SecretFormat::Basic);
        }
        if let Some(user) = s.strip_prefix("basic:") {
            if user.is_empty() || user.contains(':') || !is_header_text(user) {
                return Err(format!(
                    "format {s:?}: the user after basic: must be non-empty, printable and hold no ':'"
                ));
            }
            return Ok(SecretFormat::BasicUser(user.to_string()));
        }
        let mut parts = s.split("{}");
        let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "format {s:?} must hold exactly one {{}} (\"Bearer {{}}\"), or be \"basic\" or \"basic:USER\""
            ));
        };
        if !is_header_text(before) || !is_header_text(after) {
            return Err(format!(
                "format {s:?} holds a character a header value cannot"
            ));
        }
        Ok(SecretFormat::Template {
            before: before.to_string(),
            after: after.to_string(),
        })
    }
}

/// Printable ASCII and spaces: what a header value may hold here.
fn is_header_text(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A header name: an RFC 9110 token.
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A secret's name: what records and `supervisorctl secrets list` show.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name {:?} must be 1 to 64 letters, digits, '-' or '_'",
            name.escape_debug().to_string()
        ))
    }
}

/// A variable name the sandbox can be given.
pub fn check_env_name(env: &str) -> Result<(), String> {
    let mut b = env.bytes();
    let first_ok = b
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_');
    if first_ok && b.all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        Ok(())
    } else {
        Err(format!(
            "env {:?} is not a variable name",
            env.escape_debug().to_string()
        ))
    }
}

/// Where one secret may go and how it is put there, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretBinding {
    pub name: String,
    /// Same grammar as `[network] allow` (docs/INTERFACES.md "[network]").
    pub hosts: Vec<NetRule>,
    /// The header the proxy sets on every request to a bound host.
    pub header: Option<String>,
    pub format: SecretFormat,
}

impl SecretBinding {
    /// Checks one entry; the error says which part, the caller names the
    /// entry.
    pub fn parse(
        name: &str,
        hosts: &[String],
        header: Option<&str>,
        format: Option<&str>,
    ) -> Result<SecretBinding, String> {
        check_name(name)?;
        if hosts.is_empty() {
            return Err("hosts is empty: a secret bound to no host could never be sent".into());
        }
        let hosts = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| NetRule::parse(h).map_err(|e| format!("hosts[{i}] {h:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(h) = header
            && !is_header_name(h)
        {
            return Err(format!("header {h:?} is not a header name"));
        }
        if format.is_some() && header.is_none() {
            return Err("format without header: say which header the proxy puts it in".into());
        }
        let format = match format {
            Some(f) => SecretFormat::parse(f)?,
            None => SecretFormat::Template {
                before: String::new(),
                after: String::new(),
            },
        };
        Ok(SecretBinding {
            name: name.to_string(),
            hosts,
            header: header.map(str::to_string),
            format,
        })
    }

    /// Whether `host:port` is one this secret may be sent to.
    pub fn binds(&self, host: &NetHost, port: u16) -> bool {
        self.hosts.iter().any(|r| r.matches(host, port))
    }

    /// The entries as written (what `secrets list` shows).
    pub fn host_texts(&self) -> Vec<String> {
        self.hosts.iter().map(|r| r.text.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> NetHost {
        NetHost::parse(s).unwrap()
    }

    #[test]
    fn formats_parse_or_say_why_not() {
        assert_eq!(
            SecretFormat::parse("Bearer {}").unwrap(),
            SecretFormat::Template {
                before: "Bearer ".into(),
                after: String::new()
            }
        );
        assert_eq!(SecretFormat::parse("basic").unwrap(), SecretFormat::Basic);
        assert_eq!(
            SecretFormat::parse("basic:git").unwrap(),
            SecretFormat::BasicUser("git".into())
        );
        for bad in ["Bearer", "{} {}", "basic:", "basic:a:b", "x\r\n{}"] {
            assert!(SecretFormat::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_binding_uses_the_network_grammar() {
        let b = SecretBinding::parse(
            "forge",
            &["git.example.org".into(), "*.pkg.example.net:8443".into()],
            Some("Authorization"),
            Some("Bearer {}"),
        )
        .unwrap();
        assert!(b.binds(&host("git.example.org"), 443));
        assert!(!b.binds(&host("git.example.org"), 8443));
        assert!(b.binds(&host("a.pkg.example.net"), 8443));
        assert!(!b.binds(&host("pkg.example.net"), 8443));
        assert!(!b.binds(&host("evil.example.org"), 443));
        assert_eq!(b.host_texts()[1], "*.pkg.example.net:8443");
    }

    #[test]
    fn bad_bindings_are_refused_naming_the_part() {
        let h = vec!["a.example".to_string()];
        type Case<'a> = (
            &'a str,
            &'a [String],
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
        );
        let cases: [Case; 6] = [
            ("", &h, None, None, "name"),
            ("a b", &h, None, None, "name"),
            ("x", &[], None, None, "hosts is empty"),
            ("x", &["*.com".to_string()], None, None, "hosts[0]"),
            ("x", &h, Some("Auth orization"), None, "header"),
            ("x", &h, None, Some("Bearer {}"), "format without header"),
        ];
        for (name, hosts, header, format, want) in cases {
            let e = SecretBinding::parse(name, hosts, header, format).unwrap_err();
            assert!(e.contains(want), "{e} should name {want}");
        }
        assert!(check_env_name("FORGE_TOKEN").is_ok());
        assert!(check_env_name("1X").is_err());
        assert!(check_env_name("A-B").is_err());
    }
}
