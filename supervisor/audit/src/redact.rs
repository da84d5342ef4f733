//! Redaction of secret-looking values before they reach the model or the log.
//!
//! One combined regex (so a 32 KiB tool output is scanned once, by the regex
//! crate's DFA; the literal alternation of host secrets becomes an
//! Aho-Corasick/Teddy prefilter) finds, in this order of preference:
//!
//! | kind                | what                                                        |
//! |---------------------|-------------------------------------------------------------|
//! | `secret-env`        | the literal value of a host secret env var (≥ 8 chars)      |
//! | `private-key`       | a PEM/PGP private-key block (to the END line, or to the end of the text when cut) |
//! | `aws-access-key`    | `AKIA…` / `ASIA…` + 16 upper-case alphanumerics              |
//! | `github-token`      | `ghp_…`, `gho_…`, `ghu_…`, `ghs_…`, `ghr_…`, `github_pat_…`  |
//! | `api-key`           | `sk-…` (OpenAI `sk-proj-…`, Anthropic `sk-ant-…`), ≥ 20 chars after `sk-`, with at least one digit and one upper-case letter unless it starts `sk-ant-`, `sk-proj-`, `sk-svcacct-` or `sk-admin-` (so `sk-spinner-double-bounce-container` in CSS is left alone) |
//! | `slack-token`       | `xoxb-…`, `xoxa-…`, `xoxp-…` (and `xoxo/xoxr/xoxs`)          |
//! | `tollgate-token`    | tollgate's own session tokens: 12 id chars, `.`, (`sbx.`,) 43 url-safe chars |
//! | `authorization`     | the value (≥ 8 chars) after `authorization:` / `Authorization=` (its `Basic`/`Bearer` word kept) |
//! | `bearer`            | the token (≥ 8 chars) after `Bearer `                       |
//! | `secret-assignment` | the value in `NAME=value` / `name: value` / `"name": "value"` when NAME contains secret, password, passwd, token, api_key, apikey, private_key, access_key or credential, and the value (≥ 8 chars, no spaces, quotes, `;` `,` or brackets) is not all digits and is either quoted, or assigned to an UPPER_CASE name (env files), or mixes letters and digits (`aws_secret_access_key = wJalr…`). Code such as `token = parse_token(input)` or `api_key = config.api_key` is left alone. |
//!
//! Each match becomes `[REDACTED:<kind>]`; for the last three the name and
//! separator stay, so `Authorization: Bearer abc…` reads
//! `Authorization: Bearer [REDACTED:authorization]`.
//!
//! Not covered (say so rather than pretend): secrets re-encoded (base64,
//! URL-encoding, split across lines or JSON escapes) and secret shapes not
//! listed above.

use std::borrow::Cow;
use std::fmt;

use regex::{Captures, Regex, RegexBuilder};

/// Host secret values shorter than this are not redacted (too many false hits).
pub const MIN_SECRET_LEN: usize = 8;

const PATTERNS: &str = concat!(
    r"(?P<pem>-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----",
    r"(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*))",
    r"|(?P<aws>(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b))",
    r"|(?P<github>(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}))",
    r"|(?P<openai>(?-u:\b)sk-[A-Za-z0-9_\-]{20,})",
    r"|(?P<slack>(?-u:\b)xox[abposr]-[A-Za-z0-9\-]{10,})",
    r"|(?P<tollgate>[A-Za-z0-9_\-]{12}\.(?:sbx\.)?[A-Za-z0-9_\-]{43})",
    r#"|(?P<authp>(?-u:\b)(?i-u:authorization)["']?[ \t]*[:=][ \t]*["']?(?:(?i-u:basic|bearer|token|digest)[ \t]+)?)(?P<auth>[^\s"',;(){}\[\]<>]{8,})"#,
    r"|(?P<bearerp>(?-u:\b)(?i-u:bearer)[ \t]+)(?P<bearer>[A-Za-z0-9._~+/\-]{8,}=*)",
    r#"|(?P<assignp>(?-u:\b)(?P<name>[A-Za-z0-9_]*(?i-u:secret|password|passwd|token|api_?key|private_?key|access_?key|credential)[A-Za-z0-9_]*)["']?[ \t]*[:=][ \t]*(?P<quote>["']?))(?P<assign>[^\s"',;(){}\[\]<>]{8,})"#,
);

/// Redacts host secret values and well-known secret shapes.
///
/// `Debug` prints only how many literal secrets it holds, never them.
#[derive(Clone)]
pub struct Redactor {
    /// `Err` only if the combined regex could not be built (it is unit-tested,
    /// so in practice never): then every text is redacted whole (fail closed).
    re: Result<Regex, String>,
    secrets: usize,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets)
            .field("ok", &self.re.is_ok())
            .finish()
    }
}

impl Default for Redactor {
    fn default() -> Redactor {
        Redactor::new(Vec::new())
    }
}

impl Redactor {
    /// `secrets`: literal values to redact (host secret env values). Values
    /// shorter than [`MIN_SECRET_LEN`] chars are ignored.
    pub fn new(secrets: Vec<String>) -> Redactor {
        let mut lits: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a secret that contains another is redacted whole.
        lits.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        lits.dedup();
        let mut pattern = String::new();
        if !lits.is_empty() {
            pattern.push_str("(?P<secret>");
            for (i, l) in lits.iter().enumerate() {
                if i > 0 {
                    pattern.push('|');
                }
                pattern.push_str(&regex::escape(l));
            }
            pattern.push_str(")|");
        }
        pattern.push_str(PATTERNS);
        let re = RegexBuilder::new(&pattern)
            .size_limit(256 << 20)
            .dfa_size_limit(64 << 20)
            .build()
            .map_err(|e| e.to_string());
        if let Err(e) = &re {
            tracing::error!(error = %e, "redaction regex failed to build; redacting every text whole");
        }
        Redactor {
            re,
            secrets: lits.len(),
        }
    }

    /// How many literal secrets are redacted.
    pub fn secret_count(&self) -> usize {
        self.secrets
    }

    /// The text with every secret-looking value replaced.
    pub fn redact(&self, text: &str) -> String {
        self.redact_cow(text).into_owned()
    }

    /// Like [`Redactor::redact`], without copying when nothing matched.
    pub fn redact_cow<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.re {
            Ok(re) => re.replace_all(text, |c: &Captures<'_>| replacement(c)),
            Err(_) => {
                if text.is_empty() {
                    Cow::Borrowed(text)
                } else {
                    Cow::Borrowed("[REDACTED:redactor-unavailable]")
                }
            }
        }
    }

    /// Whether `text` holds anything that would be redacted.
    pub fn contains_secret(&self, text: &str) -> bool {
        match &self.re {
            Ok(re) => re.captures_iter(text).any(|c| replacement(&c) != c[0]),
            Err(_) => !text.is_empty(),
        }
    }

    /// Redacts every string in a JSON value, object keys included.
    pub fn redact_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::String(s) => {
                if let Cow::Owned(r) = self.redact_cow(s) {
                    *s = r;
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.redact_json(item);
                }
            }
            Value::Object(map) => {
                let keys_clean = map
                    .keys()
                    .all(|k| matches!(self.redact_cow(k), Cow::Borrowed(_)));
                if keys_clean {
                    for value in map.values_mut() {
                        self.redact_json(value);
                    }
                } else {
                    let old = std::mem::take(map);
                    for (k, mut value) in old {
                        self.redact_json(&mut value);
                        // Two keys may redact to the same text: keep both.
                        let base = self.redact(&k);
                        let mut key = base.clone();
                        let mut n = 1;
                        while map.contains_key(&key) {
                            n += 1;
                            key = format!("{base}#{n}");
                        }
                        map.insert(key, value);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

fn replacement(c: &Captures<'_>) -> String {
    const WHOLE: [(&str, &str); 6] = [
        ("secret", "secret-env"),
        ("pem", "private-key"),
        ("aws", "aws-access-key"),
        ("github", "github-token"),
        ("slack", "slack-token"),
        ("tollgate", "tollgate-token"),
    ];
    for (group, kind) in WHOLE {
        if c.name(group).is_some() {
            return format!("[REDACTED:{kind}]");
        }
    }
    if let Some(m) = c.name("openai") {
        let rest = &m.as_str()[3..];
        let vendor_prefix = ["ant-", "proj-", "svcacct-", "admin-"]
            .iter()
            .any(|p| rest.starts_with(p));
        let random = has_digit(rest) && rest.bytes().any(|b| b.is_ascii_uppercase());
        return if vendor_prefix || random {
            "[REDACTED:api-key]".to_string()
        } else {
            c[0].to_string()
        };
    }
    const KEEP_PREFIX: [(&str, &str, &str); 3] = [
        ("authp", "auth", "authorization"),
        ("bearerp", "bearer", "bearer"),
        ("assignp", "assign", "secret-assignment"),
    ];
    for (prefix, value, kind) in KEEP_PREFIX {
        if let (Some(p), Some(v)) = (c.name(prefix), c.name(value)) {
            if kind == "secret-assignment" && !assignment_is_secret(c, v.as_str()) {
                return c[0].to_string();
            }
            return format!("{}[REDACTED:{kind}]", p.as_str());
        }
    }
    c[0].to_string()
}

fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Tells `DB_PASSWORD=hunter22` and `"api_key": "…"` (secrets) from
/// `max_tokens=100000000` and `token = parse_token(input)` (not).
fn assignment_is_secret(c: &Captures<'_>, value: &str) -> bool {
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return false; // a number
    }
    let quoted = c.name("quote").is_some_and(|q| !q.as_str().is_empty());
    let env_style = c.name("name").is_some_and(|n| {
        n.as_str()
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    });
    quoted || env_style || (has_digit(value) && value.bytes().any(|b| b.is_ascii_alphabetic()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::new(vec![
            "hunter2-but-longer".to_string(),
            "short".to_string(),
            "n0nce-CANARY-1234".to_string(),
        ])
    }

    #[test]
    fn patterns_compile() {
        assert!(r().re.is_ok());
        assert!(Redactor::default().re.is_ok());
        assert_eq!(r().secret_count(), 2);
    }

    #[test]
    fn host_secret_values_are_redacted_anywhere() {
        assert_eq!(
            r().redact("pw=xhunter2-but-longerx and n0nce-CANARY-1234."),
            "pw=x[REDACTED:secret-env]x and [REDACTED:secret-env]."
        );
        // Too short to be redacted.
        assert_eq!(r().redact("a short story"), "a short story");
    }

    #[test]
    fn secret_values_with_regex_metacharacters_are_literal() {
        let red = Redactor::new(vec!["a.b*c(d)+[e]$".to_string()]);
        assert_eq!(red.redact("x a.b*c(d)+[e]$ y"), "x [REDACTED:secret-env] y");
        assert_eq!(red.redact("x aXbbbc(d)+[e]$ y"), "x aXbbbc(d)+[e]$ y");
    }

    #[test]
    fn longer_secret_wins_over_its_prefix() {
        let red = Redactor::new(vec!["abcdefgh".to_string(), "abcdefghijkl".to_string()]);
        assert_eq!(red.redact("abcdefghijkl"), "[REDACTED:secret-env]");
    }

    #[test]
    fn known_shapes_are_redacted() {
        let red = Redactor::default();
        let cases = [
            (
                "key AKIAIOSFODNN7EXAMPLE end",
                "key [REDACTED:aws-access-key] end",
            ),
            (
                "t=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "t=[REDACTED:github-token]",
            ),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
                "[REDACTED:github-token]",
            ),
            (
                "OPENAI sk-proj-abcDEF1234567890xyzXYZ",
                "OPENAI [REDACTED:api-key]",
            ),
            (
                "sk-ant-api03-abcdefghijklmnop_qrstuvwx-yz",
                "[REDACTED:api-key]",
            ),
            (
                "slack xoxb-1234567890-abcdefghij",
                "slack [REDACTED:slack-token]",
            ),
            (
                "curl -H 'Authorization: Bearer eyJhbGciOi.abc.def'",
                "curl -H 'Authorization: Bearer [REDACTED:authorization]'",
            ),
            (
                "authorization=Basic dXNlcjpwYXNzd29yZA==",
                "authorization=Basic [REDACTED:authorization]",
            ),
            (
                "{\"Authorization\": \"token abcdef123\"}",
                "{\"Authorization\": \"token [REDACTED:authorization]\"}",
            ),
            (
                "use Bearer abcdefgh12345678",
                "use Bearer [REDACTED:bearer]",
            ),
            (
                "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "AWS_SECRET_ACCESS_KEY=[REDACTED:secret-assignment]",
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMIK7MDENG",
                "aws_secret_access_key = [REDACTED:secret-assignment]",
            ),
            (
                "{\"api_key\": \"0123abcd4567efgh\"}",
                "{\"api_key\": \"[REDACTED:secret-assignment]\"}",
            ),
            (
                "DB_PASSWORD=correcthorse",
                "DB_PASSWORD=[REDACTED:secret-assignment]",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(red.redact(input), want, "input: {input}");
        }
    }

    #[test]
    fn pem_blocks_are_redacted_whole_even_when_cut() {
        let red = Redactor::default();
        let pem = "before\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAA\n-----END OPENSSH PRIVATE KEY-----\nafter";
        assert_eq!(red.redact(pem), "before\n[REDACTED:private-key]\nafter");
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----";
        assert_eq!(red.redact(rsa), "[REDACTED:private-key]");
        let pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nxx\n-----END PGP PRIVATE KEY BLOCK-----!";
        assert_eq!(red.redact(pgp), "[REDACTED:private-key]!");
        let cut = "head\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n[output truncated]";
        assert_eq!(red.redact(cut), "head\n[REDACTED:private-key]");
        // A public key or certificate is not a secret.
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        assert_eq!(red.redact(cert), cert);
    }

    #[test]
    fn benign_text_is_left_alone() {
        let red = Redactor::default();
        for text in [
            "cargo test --release",
            "the bearer of bad news",
            "max_tokens=100000000",
            "tokens: 12",
            "sk-learn is a typo of scikit-learn",
            "AKIA is a prefix",
            "ghp_short",
            "password prompt shown",
            "héllo wörld ✓ AKIAIOSFODNN7EXAMPLEX",
            // Source code a coding agent reads and later edits.
            "let token = parse_token(input);",
            "api_key = config.api_key",
            "    password = getpass.getpass()",
            "self.access_token = response.json()['access_token']",
            "def authorization(request): ...",
            "authorization: str = Header(...)",
            "headers = {'Authorization': f'Bearer {self.token}'}",
            "<div class=\"sk-spinner-double-bounce-container\">",
            "const secretKeyLength = computeLength(bits);",
        ] {
            assert_eq!(red.redact(text), text);
            assert!(!red.contains_secret(text), "{text}");
        }
    }

    #[test]
    fn non_ascii_neighbours_do_not_hide_a_secret() {
        let red = Redactor::default();
        assert_eq!(
            red.redact("é AKIAIOSFODNN7EXAMPLE é"),
            "é [REDACTED:aws-access-key] é"
        );
    }

    #[test]
    fn json_strings_and_keys_are_redacted() {
        let red = r();
        let mut v = serde_json::json!({
            "output": "token hunter2-but-longer",
            "nested": [{"n0nce-CANARY-1234": 1, "ok": "fine"}],
            "n": 5,
            "b": true,
        });
        red.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "output": "token [REDACTED:secret-env]",
                "nested": [{"[REDACTED:secret-env]": 1, "ok": "fine"}],
                "n": 5,
                "b": true,
            })
        );
    }

    #[test]
    fn keys_that_redact_alike_are_both_kept() {
        let red = Redactor::new(vec![
            "first-secret-1".to_string(),
            "second-secret-2".to_string(),
        ]);
        let mut v = serde_json::json!({"first-secret-1": 1, "second-secret-2": 2});
        red.redact_json(&mut v);
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 2);
        let mut values: Vec<i64> = obj.values().map(|x| x.as_i64().unwrap()).collect();
        values.sort();
        assert_eq!(values, [1, 2]);
        assert!(obj.keys().all(|k| k.starts_with("[REDACTED:secret-env]")));
    }

    #[test]
    fn debug_never_prints_a_secret() {
        let red = r();
        let dbg = format!("{red:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert!(!dbg.contains("CANARY"), "{dbg}");
        assert_eq!(dbg, "Redactor { secrets: 2, ok: true }");
    }

    #[test]
    fn tollgate_tokens_are_redacted() {
        let r = Redactor::default();
        let token = format!("AbCdEf012345.{}", "x".repeat(43));
        let sbx = format!("AbCdEf012345.sbx.{}", "Y_-".repeat(14) + "z");
        let text = format!("my token is {token} and {sbx}.");
        let out = r.redact(&text);
        assert_eq!(
            out,
            "my token is [REDACTED:tollgate-token] and [REDACTED:tollgate-token]."
        );
    }
}
