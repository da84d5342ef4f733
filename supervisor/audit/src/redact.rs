//! Redaction of secret-looking values before they reach the model or the log.
//!
//! The shapes are data: [`crate::redact_rules::RULES`], one row per shape
//! (id, description, pattern, what it masks, an optional check), covering
//! the token shapes of the widely used secret scanners' default rules, plus
//! the literal values of the host's secret env vars (`secret-env`, at least
//! [`MIN_SECRET_LEN`] chars). All of them compile to ONE multi-pattern regex
//! (regex-automata's meta engine), so a tool output is scanned once by one
//! lazy DFA whatever the number of rules; the literal alternation of host
//! secrets comes first. Each match says which rule found it; only a rule
//! that masks part of its match or checks its groups runs a second,
//! anchored search over the match alone, with that rule's own regex.
//!
//! Each match becomes `[REDACTED:<id>]`. A [`Mask::Group`] rule keeps the
//! rest of its match, so `Authorization: Bearer abc…` reads
//! `Authorization: Bearer [REDACTED:authorization]` and
//! `https://deploy:hunter2@git.example.com` reads
//! `https://deploy:[REDACTED:url-password]@git.example.com`.
//!
//! Not covered (say so rather than pretend): secrets re-encoded (base64,
//! URL-encoding, split across lines or JSON escapes), shapes that need a
//! keyword nearby unless the generic `secret-assignment` rule sees it, and
//! shapes not in the table.

use std::borrow::Cow;
use std::fmt;

use std::sync::LazyLock;

use regex_automata::meta::Regex;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, Match};

use crate::redact_rules::{Check, Mask, RULES, Rule, SECRET_ENV};

/// Host secret values shorter than this are not redacted (too many false hits).
pub const MIN_SECRET_LEN: usize = 8;

/// What a text reads as when the redactor could not be built (fail closed).
pub(crate) const UNAVAILABLE: &[u8] = b"[REDACTED:redactor-unavailable]";

/// Redacts host secret values and well-known secret shapes.
///
/// `Debug` prints only how many literal secrets it holds, never them.
#[derive(Clone)]
pub struct Redactor {
    /// `Err` only if the combined regex could not be built (the rules are
    /// unit-tested, so in practice never): then every text is redacted whole
    /// (fail closed).
    re: Result<Regex, String>,
    /// How many literal secrets; pattern 0 is their alternation when > 0.
    secrets: usize,
    /// The longest literal secret, in bytes (the stream's hold must cover it).
    longest_secret: usize,
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

/// What one match turns into.
enum Verdict {
    /// Leave the text as it is (a check said it is not a secret).
    Keep,
    /// Replace the whole match.
    Whole(&'static str),
    /// Replace `start..end` (absolute offsets) inside the match.
    Part(&'static str, usize, usize),
    /// The rule's groups could not be found: replace the whole match
    /// (fail closed) under this rule's id.
    Unsure(&'static Rule),
}

/// One match of a scan: where it is, and what of it is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hit {
    /// The match: a stream never cuts inside it.
    pub start: usize,
    pub end: usize,
    /// `(id, start, end)` of what becomes `[REDACTED:<id>]`; `None` when a
    /// check said the match is not a secret.
    pub mask: Option<(&'static str, usize, usize)>,
}

/// The regex syntax of every rule: bytes, not characters. Classes and `\s`
/// are ASCII and a negated class matches any other byte, so a text that is
/// not UTF-8 (Latin-1, binary around a key) is scanned like any other.
fn byte_syntax() -> syntax::Config {
    syntax::Config::new().unicode(false).utf8(false)
}

/// A literal secret as a byte-mode pattern: ASCII escaped, other bytes
/// as `\xHH` (a non-ASCII character is not allowed in byte mode).
fn literal_pattern(secret: &[u8]) -> String {
    let mut p = String::with_capacity(secret.len());
    for &b in secret {
        if b.is_ascii() {
            p.push_str(&regex::escape(&char::from(b).to_string()));
        } else {
            p.push_str(&format!("\\x{b:02x}"));
        }
    }
    p
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
        let mut patterns: Vec<String> = Vec::with_capacity(RULES.len() + 1);
        if !lits.is_empty() {
            let escaped: Vec<String> = lits.iter().map(|l| literal_pattern(l.as_bytes())).collect();
            patterns.push(escaped.join("|"));
        }
        patterns.extend(RULES.iter().map(|r| r.pattern.to_string()));
        let re = Regex::builder()
            .syntax(byte_syntax())
            .configure(
                Regex::config()
                    .nfa_size_limit(Some(256 << 20))
                    .hybrid_cache_capacity(64 << 20),
            )
            .build_many(&patterns)
            .map_err(|e| e.to_string());
        if let Err(e) = &re {
            tracing::error!(error = %e, "redaction regex failed to build; redacting every text whole");
        }
        Redactor {
            re,
            secrets: lits.len(),
            longest_secret: lits.first().map_or(0, String::len),
        }
    }

    /// How many literal secrets are redacted.
    pub fn secret_count(&self) -> usize {
        self.secrets
    }

    /// The longest literal secret, in bytes.
    pub(crate) fn longest_secret(&self) -> usize {
        self.longest_secret
    }

    /// The text with every secret-looking value replaced.
    pub fn redact(&self, text: &str) -> String {
        self.redact_cow(text).into_owned()
    }

    /// Like [`Redactor::redact`], without copying when nothing matched.
    pub fn redact_cow<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Every mask starts and ends on an ASCII byte or a whole
            // literal, so this is UTF-8; lossy only as a safety net.
            Cow::Owned(v) => Cow::Owned(
                String::from_utf8(v)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
        }
    }

    /// Any bytes with every secret-looking value replaced: text that is not
    /// UTF-8 (Latin-1, binary) is scanned byte for byte, so a key next to
    /// a byte that is not UTF-8 is still masked. Borrowed when nothing
    /// matched.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(hits) = self.hits(Input::new(bytes)) else {
            return if bytes.is_empty() {
                Cow::Borrowed(bytes)
            } else {
                Cow::Owned(UNAVAILABLE.to_vec())
            };
        };
        if hits.iter().all(|h| h.mask.is_none()) {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        apply(bytes, 0..bytes.len(), &hits, &mut out);
        Cow::Owned(out)
    }

    /// Whether `text` holds anything that would be redacted.
    pub fn contains_secret(&self, text: &str) -> bool {
        self.contains_secret_bytes(text.as_bytes())
    }

    /// Whether `bytes` hold anything that would be redacted.
    pub fn contains_secret_bytes(&self, bytes: &[u8]) -> bool {
        match self.hits(Input::new(bytes)) {
            Some(hits) => hits.iter().any(|h| h.mask.is_some()),
            None => !bytes.is_empty(),
        }
    }

    /// Every match in `input`'s span, in order, with its verdict; `None`
    /// when the redactor is unavailable. Look-around (`\b`) sees the
    /// haystack outside the span.
    pub(crate) fn hits(&self, input: Input<'_>) -> Option<Vec<Hit>> {
        let re = self.re.as_ref().ok()?;
        let text = input.haystack();
        let hits = re
            .find_iter(input)
            .map(|m| {
                let mask = match self.judge(text, m) {
                    Verdict::Keep => None,
                    Verdict::Whole(id) => Some((id, m.start(), m.end())),
                    Verdict::Part(id, start, end) => Some((id, start, end)),
                    Verdict::Unsure(rule) => Some((rule.id, m.start(), m.end())),
                };
                Hit {
                    start: m.start(),
                    end: m.end(),
                    mask,
                }
            })
            .collect();
        Some(hits)
    }

    /// Which rule found `m`, and what of it to replace.
    fn judge(&self, text: &[u8], m: Match) -> Verdict {
        let pid = m.pattern().as_usize();
        let (i, rule): (usize, &'static Rule) = match (self.secrets > 0, pid.checked_sub(1)) {
            (true, None) => return Verdict::Whole(SECRET_ENV),
            (true, Some(i)) => (i, &RULES[i]),
            (false, _) => (pid, &RULES[pid]),
        };
        let matched = &text[m.range()];
        if !needs_groups(rule) {
            return match rule.check {
                Check::None => Verdict::Whole(rule.id),
                Check::RandomLooking if random_looking(matched) => Verdict::Whole(rule.id),
                Check::RandomLooking => Verdict::Keep,
                Check::SecretAssignment => Verdict::Unsure(rule),
            };
        }
        // The groups: the rule's own regex, anchored, over the match alone
        // (look-around still sees the text around it).
        let Some(own) = GROUPS.get(i).and_then(Option::as_ref) else {
            return Verdict::Unsure(rule);
        };
        let mut caps = own.create_captures();
        let input = Input::new(text).span(m.range()).anchored(Anchored::Yes);
        own.search_captures(&input, &mut caps);
        if !caps.is_match() {
            return Verdict::Unsure(rule);
        }
        let group = |name: &str| caps.get_group_by_name(name).map(|s| s.range());
        let secret = match rule.check {
            Check::None => true,
            Check::RandomLooking => random_looking(matched),
            Check::SecretAssignment => match (group("name"), group("s")) {
                (Some(name), Some(value)) => {
                    let quoted = group("quote").is_some_and(|q| !q.is_empty());
                    assignment_is_secret(&text[name], quoted, &text[value])
                }
                _ => return Verdict::Unsure(rule),
            },
        };
        if !secret {
            return Verdict::Keep;
        }
        match (rule.mask, group("s")) {
            (Mask::Group, Some(s)) => Verdict::Part(rule.id, s.start, s.end),
            (Mask::Group, None) => Verdict::Unsure(rule),
            (Mask::Whole, _) => Verdict::Whole(rule.id),
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
                for (k, value) in map.iter_mut() {
                    if BASE64_FIELDS.contains(&k.as_str()) {
                        self.redact_base64(value);
                    }
                }
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

    /// A base64 string (an MCP resource's `blob`, an image's or audio's
    /// `data`) is decoded and its bytes redacted: a secret inside is masked
    /// and the result encoded again (docs/THREAT_MODEL.md, "Redaction").
    /// What is not base64, or holds no secret, is left as it is.
    fn redact_base64(&self, v: &mut serde_json::Value) {
        use base64::Engine as _;
        let serde_json::Value::String(s) = v else {
            return;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s.as_bytes()) else {
            return;
        };
        if let Cow::Owned(masked) = self.redact_bytes(&bytes) {
            *s = base64::engine::general_purpose::STANDARD.encode(masked);
        }
    }
}

/// JSON fields whose strings carry bytes as base64 (MCP's content shapes).
const BASE64_FIELDS: &[&str] = &["blob", "data"];

/// Writes `text[range]` to `out` with the masks of `hits` that lie in it
/// (each replaced by `[REDACTED:<id>]`).
pub(crate) fn apply(text: &[u8], range: std::ops::Range<usize>, hits: &[Hit], out: &mut Vec<u8>) {
    let mut copied = range.start;
    for (id, start, end) in hits.iter().filter_map(|h| h.mask) {
        if start < range.start || end > range.end {
            continue;
        }
        out.extend_from_slice(&text[copied..start]);
        push_mask(out, id);
        copied = end;
    }
    out.extend_from_slice(&text[copied..range.end]);
}

/// Appends `[REDACTED:<id>]`.
pub(crate) fn push_mask(out: &mut Vec<u8>, id: &str) {
    out.extend_from_slice(b"[REDACTED:");
    out.extend_from_slice(id.as_bytes());
    out.push(b']');
}

/// Whether a rule's verdict needs its groups (a second, anchored search).
fn needs_groups(rule: &Rule) -> bool {
    rule.mask == Mask::Group || rule.check == Check::SecretAssignment
}

/// Each rule's own regex, for the rules that need their groups, built once
/// per process. The anchored search over one match runs on this small regex:
/// the same search through the combined one would size its capture engines
/// by every rule together (a tenfold cost per match in benchmarks). `None`
/// for the other rules, and for one that would not build (its matches are
/// then masked whole: fail closed).
static GROUPS: LazyLock<Vec<Option<Regex>>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|r| {
            needs_groups(r)
                .then(|| Regex::builder().syntax(byte_syntax()).build(r.pattern).ok())
                .flatten()
        })
        .collect()
});

fn has_digit(s: &[u8]) -> bool {
    s.iter().any(u8::is_ascii_digit)
}

/// [`Check::RandomLooking`] on an `sk-…` match.
fn random_looking(m: &[u8]) -> bool {
    let rest = m.get(3..).unwrap_or(b"");
    let vendor_prefix = [&b"ant-"[..], b"proj-", b"svcacct-", b"admin-"]
        .iter()
        .any(|p| rest.starts_with(p));
    let mixed = has_digit(rest) && rest.iter().any(u8::is_ascii_uppercase);
    let hex = rest.len() >= 32
        && rest.iter().all(u8::is_ascii_hexdigit)
        && has_digit(rest)
        && rest.iter().any(u8::is_ascii_alphabetic);
    vendor_prefix || mixed || hex
}

/// [`Check::SecretAssignment`]: tells `DB_PASSWORD=hunter22` and
/// `"api_key": "…"` (secrets) from `max_tokens=100000000` and
/// `token = parse_token(input)` (not).
fn assignment_is_secret(name: &[u8], quoted: bool, value: &[u8]) -> bool {
    if value.iter().all(u8::is_ascii_digit) {
        return false; // a number
    }
    let env_style = name
        .iter()
        .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    quoted || env_style || (has_digit(value) && value.iter().any(u8::is_ascii_alphabetic))
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

    /// An MCP resource's `blob` and an image's `data` carry bytes as base64:
    /// a secret inside is masked and the field stays base64; other strings
    /// that merely look like base64 are judged as text.
    #[test]
    fn secrets_inside_base64_blobs_are_masked() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let latin1 = b"name=caf\xe9\naws=AKIAIOSFODNN7EXAMPLE\n".to_vec();
        let mut v = serde_json::json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///s.ini", "blob": b64.encode(&latin1)}},
            {"type": "image", "data": b64.encode(b"pw n0nce-CANARY-1234 end")},
            {"type": "image", "data": b64.encode(b"just pixels")},
            {"type": "text", "text": "no secret"},
        ]});
        r().redact_json(&mut v);
        let blob = b64
            .decode(v["content"][0]["resource"]["blob"].as_str().unwrap())
            .unwrap();
        assert!(!String::from_utf8_lossy(&blob).contains("AKIAIOSFODNN7EXAMPLE"));
        assert!(blob.starts_with(b"name=caf\xe9\naws=[REDACTED"), "{blob:?}");
        let data = b64
            .decode(v["content"][1]["data"].as_str().unwrap())
            .unwrap();
        assert_eq!(data, b"pw [REDACTED:secret-env] end");
        assert_eq!(
            v["content"][2]["data"].as_str().unwrap(),
            b64.encode(b"just pixels")
        );
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

    /// A Latin-1 `settings.ini` (bytes that are not UTF-8) holding an AWS
    /// and a Stripe key: both masked, every other byte unchanged.
    #[test]
    fn latin1_bytes_do_not_hide_a_secret() {
        let red = Redactor::default();
        let stripe = format!("sk_live_{}", "a1B2c3D4e5".repeat(3));
        let mut ini = b"[caf\xe9]\nname=Andr\xe9\naws=AKIAIOSFODNN7EXAMPLE\xa0\nstripe=".to_vec();
        ini.extend_from_slice(stripe.as_bytes());
        ini.extend_from_slice(b"\n\xff\xfe end");
        let out = red.redact_bytes(&ini);
        assert_eq!(
            out.as_ref(),
            &b"[caf\xe9]\nname=Andr\xe9\naws=[REDACTED:aws-access-key]\xa0\nstripe=[REDACTED:stripe-key]\n\xff\xfe end"[..]
        );
        assert!(red.contains_secret_bytes(&ini));
        let clean = b"caf\xe9 \xff\x00 plain";
        assert!(matches!(red.redact_bytes(clean), Cow::Borrowed(_)));
    }

    #[test]
    fn a_literal_secret_with_non_ascii_characters_is_masked() {
        let red = Redactor::new(vec!["p\u{e4}ssw\u{f6}rd-\u{2713}-long".to_string()]);
        assert_eq!(
            red.redact("x=p\u{e4}ssw\u{f6}rd-\u{2713}-long;"),
            "x=[REDACTED:secret-env];"
        );
        assert_eq!(red.redact("p\u{e4}ssw\u{f6}rd"), "p\u{e4}ssw\u{f6}rd");
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
