//! Splitting a wrapped MCP server's stdout into JSON-RPC lines without ever
//! holding more than one line's worth: a line longer than the cap is
//! discarded as it streams in, and said so once.

/// A line a server writes beyond this is discarded (below the agent's gRPC
/// message limit of 4 MiB, with room for the envelope).
pub const MAX_SERVER_LINE: usize = 3 * 1024 * 1024;

/// What one chunk of stdout gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    Line(String),
    /// A line over [`MAX_SERVER_LINE`] ended; it was dropped.
    TooLong(usize),
}

/// Line splitter state.
#[derive(Debug, Default)]
pub struct Lines {
    buf: Vec<u8>,
    /// Bytes of a line being discarded (over the cap).
    skipping: Option<usize>,
}

impl Lines {
    /// Feeds a chunk; returns the complete lines in it.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<Piece> {
        let mut out = Vec::new();
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|b| *b == b'\n');
            let (part, rest, ended) = match nl {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &chunk[chunk.len()..], false),
            };
            chunk = rest;
            if let Some(n) = self.skipping.as_mut() {
                *n += part.len();
            } else if self.buf.len() + part.len() > MAX_SERVER_LINE {
                self.skipping = Some(self.buf.len() + part.len());
                self.buf = Vec::new();
            } else {
                self.buf.extend_from_slice(part);
            }
            if ended {
                match self.skipping.take() {
                    Some(n) => out.push(Piece::TooLong(n)),
                    None => {
                        let line = std::mem::take(&mut self.buf);
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end_matches('\r');
                        if !text.trim().is_empty() {
                            out.push(Piece::Line(text.to_string()));
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_long_ones_are_dropped() {
        let mut l = Lines::default();
        assert_eq!(
            l.feed(b"{\"a\":1}\n{\"b\""),
            vec![Piece::Line("{\"a\":1}".into())]
        );
        assert_eq!(l.feed(b":2}\r\n\n"), vec![Piece::Line("{\"b\":2}".into())]);
        let big = vec![b'x'; MAX_SERVER_LINE];
        assert!(l.feed(&big).is_empty());
        assert!(l.feed(b"yy").is_empty());
        assert_eq!(
            l.feed(b"z\n{}\n"),
            vec![
                Piece::TooLong(MAX_SERVER_LINE + 3),
                Piece::Line("{}".into())
            ]
        );
        assert!(l.buf.capacity() <= MAX_SERVER_LINE, "held more than a line");
    }
}
