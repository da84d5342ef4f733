//! The streaming redactor (`tollgate_audit::StreamRedactor`) fuzzed with the
//! rule table's own cases (docs/THREAT_MODEL.md, "Redaction"): each case is
//! set among random bytes that are not UTF-8, the whole is cut into random
//! chunks (one byte, a few, thousands; often right around the hold's edge),
//! and what comes out must be the case's redacted text with the bytes
//! around it unchanged, never a byte of the secret. A seeded generator, so a
//! failure names its seed and repeats.

use tollgate_audit::redact_stream::WINDOW;
use tollgate_audit::{Redactor, StreamRedactor};

use crate::redaction_rules::{Case, cases};

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Bytes that are not UTF-8 on their own (0x80..=0xFF).
    fn high_bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| 0x80 | (self.next() as u8)).collect()
    }
    /// A length that often puts the case right at a release's edge.
    fn pad_len(&mut self) -> usize {
        match self.below(4) {
            0 => self.below(16),
            1 => (WINDOW - 300) + self.below(600),
            2 => (2 * WINDOW - 300) + self.below(600),
            _ => self.below(3 * WINDOW),
        }
    }
    /// Random chunk sizes: single bytes, small pieces, large blocks.
    fn chunks<'a>(&mut self, bytes: &'a [u8]) -> Vec<&'a [u8]> {
        let most = [1, 7, 64, 5000][self.below(4)];
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let n = (1 + self.below(most)).min(bytes.len() - at);
            out.push(&bytes[at..at + n]);
            at += n;
        }
        out
    }
}

/// The secret of a case: its text less what its redacted form keeps
/// before and after the mask.
fn secret_of(c: &Case) -> &str {
    let label = format!("[REDACTED:{}]", c.rule);
    let at = c.want.find(&label).expect("the case's want has its label");
    let (before, after) = (&c.want[..at], &c.want[at + label.len()..]);
    assert!(
        c.text.starts_with(before) && c.text.ends_with(after),
        "{}",
        c.rule
    );
    &c.text[before.len()..c.text.len() - after.len()]
}

/// A private-key block with no END line is masked to the end of the text
/// (the rule says so): what follows it is masked too.
fn masks_to_the_end(c: &Case) -> bool {
    c.rule == "private-key" && !c.text.contains("-----END")
}

fn stream_all(s: &mut StreamRedactor, chunks: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend(s.push(c));
    }
    out.extend(s.finish());
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// One run: `pad` + separator + the case + separator + `pad`, random chunks.
fn one_run(red: &Redactor, c: &Case, rng: &mut Rng) -> Result<(), String> {
    let (n, m) = (rng.pad_len(), rng.pad_len());
    let before = rng.high_bytes(n);
    let after = rng.high_bytes(m);
    let sep: &[u8] = [&b""[..], b"\n", b" "][rng.below(3)];
    let mut input = before.clone();
    input.extend_from_slice(sep);
    input.extend_from_slice(c.text.as_bytes());
    input.extend_from_slice(b"\n");
    input.extend_from_slice(&after);
    let mut want = before;
    want.extend_from_slice(sep);
    want.extend_from_slice(c.want.as_bytes());
    if !masks_to_the_end(c) {
        want.extend_from_slice(b"\n");
        want.extend_from_slice(&after);
    }
    let mut s = StreamRedactor::from(red.clone());
    let chunks = rng.chunks(&input);
    let got = stream_all(&mut s, &chunks);
    let secret = secret_of(c).as_bytes();
    if contains(&got, secret) {
        return Err(format!("{}: the secret came out", c.rule));
    }
    if got != want {
        return Err(format!(
            "{}: {} bytes in {} chunks; output differs at byte {:?}",
            c.rule,
            input.len(),
            chunks.len(),
            got.iter().zip(&want).position(|(a, b)| a != b)
        ));
    }
    if red.redact_bytes(&input).as_ref() != &want[..] {
        return Err(format!("{}: redact_bytes differs from the stream", c.rule));
    }
    Ok(())
}

#[test]
fn every_rule_case_is_masked_in_any_chunking_among_bytes_that_are_not_utf8() {
    let red = Redactor::new(vec!["a-host-secret-value".to_string()]);
    let all = cases();
    let mut failures = Vec::new();
    for seed in 1..=24u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
        for c in &all {
            if let Err(e) = one_run(&red, c, &mut rng) {
                failures.push(format!("seed {seed}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The routed shell's finding: a byte that is not UTF-8 right next to a key
/// (a Latin-1 `é` before it, `\xff` after it) must not hide it.
#[test]
fn a_secret_touching_a_byte_that_is_not_utf8_is_masked() {
    let red = Redactor::default();
    let mut rng = Rng(42);
    let mut failures = Vec::new();
    for c in cases() {
        let secret = secret_of(&c);
        let Some(at) = c.text.find(&format!(" {secret} ")) else {
            continue; // only the cases where spaces stand around the token
        };
        let mut input = c.text.as_bytes()[..at].to_vec();
        input.push(0xE9);
        input.extend_from_slice(secret.as_bytes());
        input.push(0xFF);
        input.extend_from_slice(&c.text.as_bytes()[at + secret.len() + 2..]);
        let mut want = c.want.as_bytes().to_vec();
        let label = format!(" [REDACTED:{}] ", c.rule);
        let l = want
            .windows(label.len())
            .position(|w| w == label.as_bytes())
            .unwrap();
        want[l] = 0xE9;
        want[l + label.len() - 1] = 0xFF;
        let mut s = StreamRedactor::from(red.clone());
        let chunks = rng.chunks(&input);
        let got = stream_all(&mut s, &chunks);
        if got != want || red.redact_bytes(&input).as_ref() != &want[..] {
            failures.push(format!("{}: {:?}", c.rule, String::from_utf8_lossy(&got)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
