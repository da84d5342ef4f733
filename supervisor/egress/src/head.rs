//! Reading a request head with a byte and a time bound (slowloris, 64 KiB
//! of headers).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads until the blank line ending an HTTP head. Returns the head (with
/// its blank line) and whatever came after it.
pub(crate) async fn read_head(
    s: &mut (impl AsyncRead + Unpin),
    max: usize,
    wait: Duration,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = find_end(&buf) {
                let rest = buf.split_off(end);
                return Ok((std::mem::take(&mut buf), rest));
            }
            if buf.len() > max {
                return Err(format!("the request head is over {max} bytes"));
            }
            match s.read(&mut chunk).await {
                Ok(0) => return Err("the client closed before the request head ended".into()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("reading the request head failed: {e}")),
            }
        }
    };
    match tokio::time::timeout(wait, read).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "the request head did not arrive within {} s",
            wait.as_secs()
        )),
    }
}

fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}
