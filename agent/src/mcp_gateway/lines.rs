//! The client's messages on stdin, one per line (docs/MCP.md), split by a
//! tokio-util [`Decoder`] under [`FramedRead`](tokio_util::codec::FramedRead).
//! Not `LinesCodec`: a line is passed on as the bytes it is (invalid UTF-8
//! is replaced later, not refused), and a line over the cap is discarded as
//! it streams in and reported with its whole length, after which the next
//! line is read as usual.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// One line from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, its `\n` removed (a `\r` before it kept).
    Text(BytesMut),
    /// A line over the cap, dropped: its length in bytes, the `\n` counted.
    TooLong(usize),
}

/// Lines of at most `max` bytes (the `\n` not counted); longer ones are
/// never buffered past `max` and what a read brings.
#[derive(Debug)]
pub struct CappedLines {
    max: usize,
    /// How far the buffer was searched for `\n` already.
    searched: usize,
    /// Bytes of an over-long line dropped so far.
    dropping: Option<usize>,
}

impl CappedLines {
    pub fn new(max: usize) -> CappedLines {
        CappedLines {
            max,
            searched: 0,
            dropping: None,
        }
    }
}

impl Decoder for CappedLines {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        let newline = buf[self.searched..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| i + self.searched);
        let Some(i) = newline else {
            let dropped = self
                .dropping
                .or((buf.len() > self.max).then_some(0))
                .map(|d| d + buf.len());
            if dropped.is_some() {
                self.dropping = dropped;
                buf.clear();
            }
            self.searched = buf.len();
            return Ok(None);
        };
        self.searched = 0;
        if let Some(dropped) = self.dropping.take() {
            buf.advance(i + 1);
            return Ok(Some(Line::TooLong(dropped + i + 1)));
        }
        if i > self.max {
            buf.advance(i + 1);
            return Ok(Some(Line::TooLong(i + 1)));
        }
        let mut line = buf.split_to(i + 1);
        line.truncate(i);
        Ok(Some(Line::Text(line)))
    }

    /// The last line, when the client closed stdin without a `\n`.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Line>> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        self.searched = 0;
        if let Some(dropped) = self.dropping.take() {
            return Ok(Some(Line::TooLong(dropped)));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        Ok(Some(Line::Text(buf.split())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    use tokio_util::codec::FramedRead;

    /// Every line of `input` written in pieces of `piece` bytes, as the
    /// gateway reads them (a cap of 8).
    async fn lines(input: &[u8], piece: usize) -> Vec<Line> {
        let (mut tx, rx) = tokio::io::duplex(16);
        let input = input.to_vec();
        let writer = tokio::spawn(async move {
            for chunk in input.chunks(piece) {
                tx.write_all(chunk).await.unwrap();
            }
        });
        let got: Vec<Line> = FramedRead::with_capacity(rx, CappedLines::new(8), 4)
            .map(|l| l.unwrap())
            .collect()
            .await;
        writer.await.unwrap();
        got
    }

    fn text(s: &[u8]) -> Line {
        Line::Text(BytesMut::from(s))
    }

    #[tokio::test]
    async fn lines_up_to_the_cap_pass_as_sent() {
        for piece in [1, 3, 64] {
            assert_eq!(
                lines(b"a\n12345678\n\nb\r\nlast", piece).await,
                vec![
                    text(b"a"),
                    text(b"12345678"),
                    text(b""),
                    text(b"b\r"),
                    text(b"last")
                ],
                "pieces of {piece}"
            );
        }
    }

    #[tokio::test]
    async fn bytes_that_are_not_utf8_are_kept() {
        assert_eq!(
            lines(b"\xff\xfe{}\n\x1b[2J\n", 2).await,
            vec![text(b"\xff\xfe{}"), text(b"\x1b[2J")]
        );
    }

    #[tokio::test]
    async fn an_over_long_line_is_dropped_with_its_length_and_the_next_is_read() {
        let mut input = vec![b'x'; 100];
        input.extend_from_slice(b"\nok\n123456789\nend");
        for piece in [1, 5, 200] {
            assert_eq!(
                lines(&input, piece).await,
                vec![
                    Line::TooLong(101),
                    text(b"ok"),
                    Line::TooLong(10),
                    text(b"end")
                ],
                "pieces of {piece}"
            );
        }
    }

    #[tokio::test]
    async fn an_over_long_last_line_without_a_newline_is_dropped() {
        assert_eq!(
            lines(b"ok\n123456789", 2).await,
            vec![text(b"ok"), Line::TooLong(9)]
        );
        assert_eq!(lines(b"", 2).await, vec![]);
    }

    #[test]
    fn an_over_long_line_is_never_buffered() {
        let mut c = CappedLines::new(8);
        let mut buf = BytesMut::from(&[b'x'; 20][..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty());
        buf.extend_from_slice(&[b'y'; 20]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty());
        buf.extend_from_slice(b"yy\nnext\n");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(Line::TooLong(43)));
        assert_eq!(c.decode(&mut buf).unwrap(), Some(text(b"next")));
    }
}
