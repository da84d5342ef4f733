//! Redaction of a stream of bytes (a command's output as it comes): the
//! same rules and literal secrets as [`Redactor::redact_bytes`], over
//! chunks cut anywhere, with a bounded hold (docs/THREAT_MODEL.md,
//! "Redaction").
//!
//! The stream holds the last [`StreamRedactor::window`] bytes it was given
//! (at least [`WINDOW`], and at least the longest literal secret): every
//! secret shape in the table is recognised within that many bytes of its
//! start, so a secret split across chunks, or across the hold itself, is
//! still seen whole. A match that reaches into the hold keeps the whole
//! match held, so a partial secret is never released. Bytes come out in
//! steps of up to one window; what is left comes out at
//! [`StreamRedactor::finish`].
//!
//! The hold is bounded by [`MAX_HOLD`]: a single match still growing past
//! it (a private-key block with no END line, a secret-shaped run of that
//! length) is masked, and so is the rest of the stream (fail closed, as a
//! cut private-key block is masked to the end of the text).

use std::sync::Arc;

use regex_automata::Input;

use crate::redact::{Hit, Redactor, UNAVAILABLE, apply, push_mask};

/// The least hold, in bytes: longer than every bounded shape of the rule
/// table (the longest is under 300 bytes) and than the usual unbounded ones
/// (a JWT's header and payload, a URL's password) before they can be told.
pub const WINDOW: usize = 4 << 10;

/// The most a single match may hold back, in bytes, before it is masked
/// with the rest of the stream.
pub const MAX_HOLD: usize = 256 << 10;

/// A streaming redactor: [`StreamRedactor::push`] each chunk, write what it
/// returns, and [`StreamRedactor::finish`] at the end of the stream.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    /// Bytes not yet released; `buf[..ctx]` is the last released byte, kept
    /// so a `\b` at the hold's start sees what came before it.
    buf: Vec<u8>,
    ctx: usize,
    window: usize,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// A match outgrew [`MAX_HOLD`]: the rest of the stream is masked.
    Swallowing,
    /// The redactor could not be built: its one notice was sent.
    Unavailable,
}

impl From<Redactor> for StreamRedactor {
    fn from(r: Redactor) -> StreamRedactor {
        StreamRedactor::new(Arc::new(r))
    }
}

impl From<Arc<Redactor>> for StreamRedactor {
    fn from(r: Arc<Redactor>) -> StreamRedactor {
        StreamRedactor::new(r)
    }
}

impl StreamRedactor {
    pub fn new(redactor: Arc<Redactor>) -> StreamRedactor {
        let window = WINDOW.max(redactor.longest_secret() + 1);
        StreamRedactor {
            redactor,
            buf: Vec::new(),
            ctx: 0,
            window,
            state: State::Open,
        }
    }

    /// How many bytes the stream holds back at least.
    pub fn window(&self) -> usize {
        self.window
    }

    /// How many bytes are held now.
    pub fn held(&self) -> usize {
        self.buf.len() - self.ctx
    }

    /// Takes the next chunk; returns what can be released now, redacted.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.state != State::Open || chunk.is_empty() {
            return Vec::new();
        }
        self.buf.extend_from_slice(chunk);
        if self.held() < 2 * self.window {
            return Vec::new();
        }
        self.release(false)
    }

    /// The end of the stream: everything still held, redacted. The stream
    /// can then be used again for another.
    pub fn finish(&mut self) -> Vec<u8> {
        let out = match self.state {
            State::Open => self.release(true),
            State::Swallowing | State::Unavailable => Vec::new(),
        };
        self.buf.clear();
        self.ctx = 0;
        self.state = State::Open;
        out
    }

    /// Releases what is safe: up to the end at the stream's end, else up to
    /// one window before it, moved back to the start of a match that
    /// reaches past that point.
    fn release(&mut self, last: bool) -> Vec<u8> {
        let len = self.buf.len();
        let input = Input::new(&self.buf[..]).span(self.ctx..len);
        let Some(hits) = self.redactor.hits(input) else {
            return self.unavailable();
        };
        let mut cut = if last { len } else { len - self.window };
        let straddling = hits.iter().find(|h| h.start < cut && h.end > cut).copied();
        if let Some(h) = straddling {
            cut = h.start;
        }
        let mut out = Vec::with_capacity(cut.saturating_sub(self.ctx));
        apply(&self.buf, self.ctx..cut, &hits, &mut out);
        match straddling {
            Some(h) if len - cut > MAX_HOLD => self.swallow(h, &mut out),
            _ => self.keep_from(cut),
        }
        out
    }

    /// Drops what was released, keeping its last byte as context.
    fn keep_from(&mut self, cut: usize) {
        if cut > self.ctx {
            self.buf.drain(..cut - 1);
            self.ctx = 1;
        }
    }

    /// A match outgrew [`MAX_HOLD`]: what precedes its mask goes out, then
    /// its mask, and nothing more of this stream.
    fn swallow(&mut self, h: Hit, out: &mut Vec<u8>) {
        let (id, mask_start) = match h.mask {
            Some((id, start, _)) => (id, start),
            None => ("oversized-match", h.start),
        };
        out.extend_from_slice(&self.buf[h.start..mask_start]);
        push_mask(out, id);
        tracing::warn!(
            rule = id,
            held = self.held(),
            "a redaction match outgrew the stream's hold; the rest of this stream is masked"
        );
        self.buf.clear();
        self.ctx = 0;
        self.state = State::Swallowing;
    }

    fn unavailable(&mut self) -> Vec<u8> {
        self.buf.clear();
        self.ctx = 0;
        self.state = State::Unavailable;
        UNAVAILABLE.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(secrets: &[&str]) -> StreamRedactor {
        StreamRedactor::from(Redactor::new(
            secrets.iter().map(|s| s.to_string()).collect(),
        ))
    }

    fn run(s: &mut StreamRedactor, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        out
    }

    const AWS: &[u8] = b"AKIAIOSFODNN7EXAMPLE";

    #[test]
    fn a_key_split_in_two_chunks_is_masked() {
        let mut s = stream(&[]);
        let out = run(&mut s, &[b"key=\xe9AKIAIOSF", b"ODNN7EXAMPLE\xe9 end"]);
        assert_eq!(out, b"key=\xe9[REDACTED:aws-access-key]\xe9 end");
    }

    #[test]
    fn a_key_split_byte_by_byte_across_the_hold_is_masked() {
        let mut s = stream(&["literal-host-secret"]);
        let mut text = vec![b'\xff'; 2 * WINDOW - 7];
        text.extend_from_slice(b" ");
        text.extend_from_slice(AWS);
        text.extend_from_slice(b" and literal-host-secret\n");
        text.extend(std::iter::repeat_n(b'x', 3 * WINDOW));
        let chunks: Vec<&[u8]> = text.chunks(1).collect();
        let out = run(&mut s, &chunks);
        let mut want = vec![b'\xff'; 2 * WINDOW - 7];
        want.extend_from_slice(b" [REDACTED:aws-access-key] and [REDACTED:secret-env]\n");
        want.extend(std::iter::repeat_n(b'x', 3 * WINDOW));
        assert_eq!(out, want);
    }

    #[test]
    fn output_is_released_in_steps_and_the_hold_stays_bounded() {
        let mut s = stream(&[]);
        let mut released = 0;
        for _ in 0..100 {
            released += s.push(&[b'a'; 1000]).len();
            assert!(s.held() < 2 * s.window(), "held {}", s.held());
        }
        assert!(released >= 100_000 - 2 * s.window());
        assert_eq!(released + s.finish().len(), 100_000);
    }

    #[test]
    fn a_match_reaching_into_the_hold_is_held_whole() {
        // A private-key block longer than the window, fed in pieces: none
        // of its lines may come out before its END line is seen.
        let mut s = stream(&[]);
        let mut out = s.push(b"before\n-----BEGIN RSA PRIVATE KEY-----\n");
        for _ in 0..200 {
            out.extend(s.push(b"MIIEpAIBAAKCAQEA1234567890abcdefghijklmnopqrstuvwxyzABCDEF\n"));
        }
        out.extend(s.push(b"-----END RSA PRIVATE KEY-----\nafter"));
        out.extend(s.finish());
        assert_eq!(out, b"before\n[REDACTED:private-key]\nafter");
    }

    #[test]
    fn a_match_outgrowing_the_most_hold_masks_the_rest() {
        let mut s = stream(&[]);
        let mut out = s.push(b"ok\n-----BEGIN PRIVATE KEY-----\n");
        let line = [b'Q'; 1024];
        for _ in 0..(MAX_HOLD / 1024 + 2 * WINDOW / 1024 + 2) {
            out.extend(s.push(&line));
            assert!(s.held() <= MAX_HOLD + 2 * s.window() + 1024);
        }
        out.extend(s.push(b"\n-----END PRIVATE KEY-----\nlater"));
        out.extend(s.finish());
        assert_eq!(out, b"ok\n[REDACTED:private-key]");
        // The stream can be used again.
        assert_eq!(run(&mut s, &[b"fine"]), b"fine");
    }

    #[test]
    fn a_word_boundary_at_the_hold_start_sees_the_byte_before() {
        // `XAKIA…` is no AWS key (no word boundary before it), also when the
        // first release cuts right before `AKIA` (at 2 windows less one).
        let mut s = stream(&[]);
        let w = s.window();
        let mut text = vec![b' '; w - 1];
        text.push(b'X');
        text.extend_from_slice(AWS);
        text.extend(std::iter::repeat_n(b' ', w - AWS.len()));
        let first = s.push(&text);
        assert_eq!(first.len(), w, "the cut falls right before AKIA");
        let mut out = first;
        out.extend(s.finish());
        assert_eq!(out, text);
        assert_eq!(Redactor::default().redact_bytes(&text).as_ref(), &text[..]);
    }

    #[test]
    fn binary_bytes_pass_unchanged() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(5 * WINDOW).collect();
        let mut s = stream(&[]);
        let chunks: Vec<&[u8]> = bytes.chunks(777).collect();
        assert_eq!(run(&mut s, &chunks), bytes);
    }
}
