//! Inputs shared by the criterion benches (`benches/append.rs`) and
//! `supervisorctl bench`, so both measure the same redaction. Not part of
//! the audit log.
//!
//! - [`typical_output`]: what a coding agent's tools return: a cargo test
//!   log, Rust and Python source (with the words `token`, `password`,
//!   `api_key` in code, as real source has them), a JSON API answer, prose
//!   from a fetched page, `git log`. No secrets.
//! - [`dense_output`]: the same text with a secret of a different shape
//!   about every 512 bytes (host secret values, cloud keys, tokens, a JWT,
//!   a password in a URL, a private-key block).
//!
//! The secret-looking values are assembled at run time from a prefix and a
//! generated body, so no token shape sits in the source as a literal.

/// Host secret values the bench redactors are built with (as a supervisor
/// whose environment holds 20 secret variables).
pub fn host_secrets() -> Vec<String> {
    (0..20)
        .map(|i| format!("host-secret-value-{i:04}-xyz"))
        .collect()
}

const TYPICAL: &[&str] = &[
    "   Compiling tollgate-policy v0.1.0 (/home/dev/proj/supervisor/policy)\n",
    "    Finished `test` profile [unoptimized + debuginfo] target(s) in 41.27s\n",
    "     Running unittests src/lib.rs (target/debug/deps/tollgate_policy-3f9c2a1b)\n",
    "test engine::tests::plan_mode_refuses_writes ... ok\n",
    "test ssrf::tests::every_listed_range_is_blocked ... ok\n",
    "test result: ok. 142 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.51s\n",
    "warning: unused variable: `token`\n  --> src/auth.rs:88:9\n   |\n88 |     let token = parse_token(input)?;\n   |         ^^^^^ help: if this is intentional, prefix it with an underscore: `_token`\n",
    "fn refresh(&self, session: &Session) -> Result<Token, AuthError> {\n    let token = self.tokens.get(&session.id).ok_or(AuthError::Missing)?;\n    if token.expired(Instant::now()) {\n        return Err(AuthError::Expired { id: session.id.clone() });\n    }\n    Ok(token.clone())\n}\n",
    "def login(user, password=None):\n    password = password or getpass.getpass()\n    api_key = config.api_key\n    resp = requests.post(URL, json={\"user\": user}, timeout=30)\n    return resp.json()[\"access_token\"]\n",
    "{\"id\": 4182, \"name\": \"tollgate\", \"full_name\": \"dev/tollgate\", \"private\": false, \"stargazers_count\": 17, \"default_branch\": \"main\", \"topics\": [\"sandbox\", \"security\"], \"updated_at\": \"2026-11-30T18:58:00Z\"}\n",
    "The supervisor owns every sandbox, every secret and the audit log. An unprivileged agent process runs the model loop and can only ask the supervisor, over gRPC on a Unix socket, to run a tool on its behalf.\n",
    "commit 75a305b9e1c0d2f4a6b8c0e2f4a6b8c0e2f4a6b8\nAuthor: tollgate-dev <dev@tollgate.invalid>\nDate:   Mon Nov 30 18:58:00 2026 +0000\n\n    PERFORMANCE.md: this stop's six bench runs\n\n",
    "drwxr-xr-x  5 dev dev  4096 Nov 30 18:58 supervisor\n-rw-r--r--  1 dev dev 12034 Nov 30 18:58 Cargo.lock\n",
    "    let max_tokens = 4096; // the model's budget for this turn\n    headers.insert(\"Authorization\", format!(\"Bearer {}\", self.token));\n",
    "2026-11-30T18:58:01.123Z INFO tollgate_supervisor::server: listening on /run/tollgate/agent.sock (mode 0666)\n",
];

/// About `bytes` of secret-free tool output (cut at a char boundary).
pub fn typical_output(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 512);
    let mut i = 0usize;
    while s.len() < bytes {
        s.push_str(TYPICAL[i % TYPICAL.len()]);
        i += 1;
    }
    truncate(s, bytes)
}

/// About `bytes` of tool output with a secret about every 512 bytes.
pub fn dense_output(bytes: usize) -> String {
    let secrets = sample_secrets();
    let mut s = String::with_capacity(bytes + 1024);
    let mut i = 0usize;
    let mut next_secret = 0usize;
    let mut k = 0usize;
    while s.len() < bytes {
        s.push_str(TYPICAL[i % TYPICAL.len()]);
        i += 1;
        if s.len() >= next_secret {
            s.push_str("leaked: ");
            s.push_str(&secrets[k % secrets.len()]);
            s.push('\n');
            k += 1;
            next_secret = s.len() + 512;
        }
    }
    truncate(s, bytes)
}

fn truncate(mut s: String, bytes: usize) -> String {
    let mut cut = bytes.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}

/// A deterministic body of `len` chars from `alphabet`.
fn body(seed: u64, alphabet: &str, len: usize) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chars[(x % chars.len() as u64) as usize]
        })
        .collect()
}

const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &str = "0123456789abcdef";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One value of each of a dozen common shapes.
fn sample_secrets() -> Vec<String> {
    vec![
        "host-secret-value-0007-xyz".to_string(),
        ["AKIA", &body(1, UPPER_DIGITS, 16)].concat(),
        ["ghp_", &body(2, ALNUM, 36)].concat(),
        ["sk_live_", &body(3, ALNUM, 24)].concat(),
        [
            "xoxb-",
            &body(4, "0123456789", 12),
            "-",
            &body(5, ALNUM, 24),
        ]
        .concat(),
        [
            "eyJhbGciOiJIUzI1NiJ9.eyJ",
            &body(6, B64URL, 40),
            ".",
            &body(7, B64URL, 43),
        ]
        .concat(),
        [
            "https://deploy:",
            &body(8, ALNUM, 16),
            "@git.example.com/x.git",
        ]
        .concat(),
        ["AIza", &body(9, B64URL, 35)].concat(),
        ["glpat-", &body(10, ALNUM, 20)].concat(),
        ["npm_", &body(11, ALNUM, 36)].concat(),
        ["hf_", &body(12, ALNUM, 34)].concat(),
        ["Authorization: Bearer ", &body(13, B64URL, 32)].concat(),
        ["DB_PASSWORD=", &body(14, ALNUM, 16)].concat(),
        [
            "-----BEGIN OPENSSH PRIVATE KEY-----\n",
            &body(15, ALNUM, 70),
            "\n-----END OPENSSH PRIVATE KEY-----",
        ]
        .concat(),
        ["SG.", &body(16, B64URL, 22), ".", &body(17, B64URL, 43)].concat(),
        ["dop_v1_", &body(18, HEX, 64)].concat(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_density() {
        let t = typical_output(1 << 20);
        assert_eq!(t.len(), 1 << 20);
        let d = dense_output(1 << 20);
        assert!(d.len() <= 1 << 20 && d.len() > (1 << 20) - 4, "{}", d.len());
        let leaks = d.matches("leaked: ").count();
        assert!(leaks > 1500, "{leaks} secrets in 1 MiB");
        assert!(!t.contains("leaked: "));
    }
}
