//! `[sandbox] image = "devcontainer"` (docs/OPERATIONS.md, "The Docker
//! sandbox"): the workspace's `.devcontainer/devcontainer.json` may name
//! the session's image. Its bytes are read when the session opens; the
//! image is used only if the file is byte for byte the same when the
//! sandbox is built, and (the backend checks) the engine already has the
//! image: nothing is pulled, and a file changed after the session started
//! (by the session itself, say) names nothing.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file, relative to the workspace.
pub const FILE: &str = ".devcontainer/devcontainer.json";

/// Larger files are not read.
const MAX_BYTES: u64 = 64 << 10;

pub use tollgate_gate::session::Devcontainer as Named;

/// The image the workspace names now, if it names one: `None` when there
/// is no file, it is not a regular file (a link is not followed), it is
/// too large, or it names no well-formed image.
pub fn read(workspace: &Path) -> Option<Named> {
    let bytes = read_file(workspace)?;
    let image = image_of(&bytes)?;
    Some(Named { image, bytes })
}

/// The image `snapshot` named, if the file still holds the same bytes.
pub fn still_named(workspace: &Path, snapshot: &Named) -> Option<String> {
    let now = read_file(workspace)?;
    (now == snapshot.bytes).then(|| snapshot.image.clone())
}

fn read_file(workspace: &Path) -> Option<Vec<u8>> {
    let dir = workspace.join(".devcontainer");
    if !std::fs::symlink_metadata(&dir).ok()?.is_dir() {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(workspace.join(FILE))
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_BYTES).then_some(bytes)
}

/// The `image` member of a devcontainer.json (JSON with comments and
/// trailing commas), if it is a plausible image reference.
fn image_of(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let v: serde_json::Value = serde_json::from_str(&strip_jsonc(text)).ok()?;
    let image = v.get("image")?.as_str()?.trim();
    let ok = !image.is_empty()
        && image.len() <= 255
        && !image.starts_with('-')
        && image
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b));
    ok.then(|| image.to_string())
}

/// JSONC to JSON: `//` and `/* */` comments outside strings removed, and a
/// comma before a closing bracket or brace.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut in_str, mut escaped) = (false, false);
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_str = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            (']' | '}', _) => {
                let keep = out.trim_end().len();
                if out[..keep].ends_with(',') {
                    out.truncate(keep - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_read_from_jsonc() {
        let text = br#"{
            // the dev image
            "name": "x // not a comment",
            /* block */ "image": "tollgate-sandbox:0.1.0-dev",
            "features": {},
        }"#;
        assert_eq!(
            image_of(text).as_deref(),
            Some("tollgate-sandbox:0.1.0-dev")
        );
        for bad in [
            &br#"{"image": "--privileged"}"#[..],
            br#"{"image": "a b"}"#,
            br#"{"image": ""}"#,
            br#"{"build": {"dockerfile": "Dockerfile"}}"#,
            b"not json",
        ] {
            assert_eq!(image_of(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_changed_or_linked_file_names_nothing() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".devcontainer")).unwrap();
        let file = ws.path().join(FILE);
        std::fs::write(&file, r#"{"image": "img:1"}"#).unwrap();
        let named = read(ws.path()).unwrap();
        assert_eq!(still_named(ws.path(), &named).as_deref(), Some("img:1"));
        std::fs::write(&file, r#"{"image": "img:2"}"#).unwrap();
        assert_eq!(still_named(ws.path(), &named), None);
        std::fs::remove_file(&file).unwrap();
        let elsewhere = ws.path().join("other.json");
        std::fs::write(&elsewhere, r#"{"image": "img:1"}"#).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        assert_eq!(read(ws.path()), None);
    }
}
