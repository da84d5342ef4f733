//! The last line for a value reflected back (docs/THREAT_MODEL.md
//! "Secrets"): each secret's value in the bytes a terminated connection
//! returns is overwritten with as many `*`, so lengths and chunk sizes stay
//! true. A value split across reads is caught: the bytes that could begin
//! one are held until the next read shows whether they do (or the stream
//! ends, or goes quiet; the caller flushes then). Not covered: a value the
//! server encodes (compressed, base64, escaped) before sending it.

/// One direction's masker.
pub(crate) struct Masker {
    values: Vec<Vec<u8>>,
    held: Vec<u8>,
}

impl Masker {
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Masker {
        Masker {
            values: values.into_iter().filter(|v| !v.is_empty()).collect(),
            held: Vec::new(),
        }
    }

    /// Bytes held back, waiting to see whether a value begins in them.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// What may be sent of `chunk` (and of what was held) now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        for v in &self.values {
            mask_all(&mut buf, v);
        }
        let keep = self.partial_tail(&buf);
        self.held = buf.split_off(buf.len() - keep);
        buf
    }

    /// Everything held: the stream ended or went quiet.
    pub(crate) fn flush(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// The longest tail of `buf` that is a proper prefix of some value.
    fn partial_tail(&self, buf: &[u8]) -> usize {
        let mut best = 0;
        for v in &self.values {
            let most = (v.len() - 1).min(buf.len());
            for n in (best + 1..=most).rev() {
                if buf[buf.len() - n..] == v[..n] {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

fn mask_all(buf: &mut [u8], v: &[u8]) {
    if buf.len() < v.len() {
        return;
    }
    let mut i = 0;
    while i + v.len() <= buf.len() {
        if buf[i] == v[0] && buf[i..i + v.len()] == *v {
            buf[i..i + v.len()].fill(b'*');
            i += v.len();
        } else {
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(m: &mut Masker, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend(m.push(c));
        }
        out.extend(m.flush());
        out
    }

    #[test]
    fn a_value_is_masked_whole_or_split_and_lengths_stay() {
        let mut m = Masker::new(vec![b"s3cr3t-v4lue".to_vec()]);
        let out = run(&mut m, &[b"a s3cr3t-v4lue b"]);
        assert_eq!(out, b"a ************ b");
        let out = run(&mut m, &[b"x s3cr", b"3t-v4", b"lue y"]);
        assert_eq!(out, b"x ************ y");
        let out = run(&mut m, &[b"s3cr3t-v4lu", b"X"]);
        assert_eq!(out, b"s3cr3t-v4luX", "a prefix that does not go on is sent");
    }

    #[test]
    fn only_a_possible_beginning_is_held() {
        let mut m = Masker::new(vec![b"token".to_vec()]);
        assert_eq!(m.push(b"abc tok"), b"abc ");
        assert_eq!(m.held(), 3);
        assert_eq!(m.push(b"en!"), b"*****!");
        assert_eq!(m.held(), 0);
        assert_eq!(m.push(b"plain"), b"plain");
    }
}
