//! Path arguments: from the absolute path the policy resolved to a relative
//! path beneath the workspace (compared by components, never as strings), and
//! how paths are shown (escaped, so a file name cannot inject a log line or
//! spoof what a person reads).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::ToolError;

/// Linux PATH_MAX counts the terminating NUL: a path of 4096 bytes or more
/// can never be opened.
pub(crate) const PATH_MAX: usize = 4096;

/// How many chars of a path an error message shows.
const DISPLAY_MAX_CHARS: usize = 200;

/// Maps an absolute path to the path relative to `root`. Anything that does
/// not lie beneath `root` by components, holds a NUL byte, is 4096 bytes or
/// longer, or contains `..` is an error: the caller never opens it.
/// The empty path is the workspace root itself.
pub(crate) fn relative_to_root(root: &Path, path: &Path) -> Result<PathBuf, ToolError> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(ToolError::InvalidPath {
            path: "\"\"".into(),
            reason: "the path is empty".into(),
        });
    }
    if bytes.contains(&0) {
        return Err(ToolError::InvalidPath {
            path: display_path(path),
            reason: "it contains a NUL byte".into(),
        });
    }
    if bytes.len() >= PATH_MAX {
        return Err(ToolError::InvalidPath {
            path: display_path(path),
            reason: format!(
                "it is {} bytes long; paths must be shorter than {PATH_MAX} bytes",
                bytes.len()
            ),
        });
    }
    if !path.is_absolute() {
        return Err(ToolError::InvalidPath {
            path: display_path(path),
            reason: "it is not absolute (file tools take the path the policy resolved)".into(),
        });
    }
    let rest = path
        .strip_prefix(root)
        .map_err(|_| ToolError::OutsideWorkspace {
            path: display_path(path),
            root: display_path(root),
        })?;
    let mut rel = PathBuf::new();
    for component in rest.components() {
        match component {
            Component::Normal(name) => rel.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(ToolError::InvalidPath {
                    path: display_path(path),
                    reason: "it contains '..' (file tools take the path the policy resolved)"
                        .into(),
                });
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(ToolError::OutsideWorkspace {
                    path: display_path(path),
                    root: display_path(root),
                });
            }
        }
    }
    Ok(rel)
}

/// A relative path as the model sees it: `.` for the root, else the path.
pub(crate) fn show_rel(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".to_string()
    } else {
        display_path(rel)
    }
}

/// Splits a relative path into its parent (possibly empty) and final name.
pub(crate) fn split_parent(rel: &Path) -> Option<(&Path, &OsStr)> {
    let name = rel.file_name()?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    Some((parent, name))
}

/// Shows a path for a person or the model: control characters, bidi and
/// zero-width format characters are escaped (`\n`, `\u{202e}`), bytes that
/// are not UTF-8 become `\xNN`, and very long paths are shortened with `…`.
pub fn display_path(path: &Path) -> String {
    escape_bytes(path.as_os_str().as_bytes(), DISPLAY_MAX_CHARS)
}

/// Escapes text for one line of output, keeping at most `max_chars` chars.
pub(crate) fn escape_bytes(bytes: &[u8], max_chars: usize) -> String {
    let mut out = String::with_capacity(bytes.len().min(max_chars * 4));
    let mut chars = 0usize;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if chars >= max_chars {
                out.push('…');
                return out;
            }
            chars += 1;
            push_escaped(&mut out, c);
        }
        for b in chunk.invalid() {
            if chars >= max_chars {
                out.push('…');
                return out;
            }
            chars += 1;
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() || is_format_char(c) => {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
        c => out.push(c),
    }
}

/// Invisible characters that reorder or hide text: bidi controls, zero-width
/// characters, the BOM.
fn is_format_char(c: char) -> bool {
    matches!(c as u32,
        0x061C | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2069 | 0xFEFF)
}

/// Workspace secret files (docs/THREAT_MODEL.md, 3), as the policy defines them (`.env*`,
/// keys, `id_*`, `.netrc`, `credentials*`, ...). grep does not search them
/// (reading one needs an approval through read_file, and grep would leak it
/// without one).
pub(crate) fn is_secret_name(name: &OsStr) -> bool {
    tollgate_policy::is_secret_file_name(&name.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    fn rel(root: &str, p: &str) -> Result<PathBuf, ToolError> {
        relative_to_root(Path::new(root), Path::new(p))
    }

    #[test]
    fn paths_beneath_the_root_map_to_relative_paths() {
        assert_eq!(
            rel("/w", "/w/src/main.rs").unwrap(),
            Path::new("src/main.rs")
        );
        assert_eq!(
            rel("/w", "/w/./src/./main.rs").unwrap(),
            Path::new("src/main.rs")
        );
        assert_eq!(rel("/w", "/w").unwrap(), Path::new(""));
        assert_eq!(rel("/w", "/w/").unwrap(), Path::new(""));
    }

    #[test]
    fn prefix_siblings_and_outside_paths_are_refused() {
        for p in [
            "/w-evil/secret.txt",
            "/etc/passwd",
            "//etc/passwd",
            "/",
            "/ww/x",
        ] {
            assert!(
                matches!(rel("/w", p), Err(ToolError::OutsideWorkspace { .. })),
                "{p} was not refused as outside"
            );
        }
    }

    #[test]
    fn dotdot_relative_empty_nul_and_long_paths_are_invalid() {
        for p in ["/w/../etc", "/w/a/../../x", "src/main.rs", ""] {
            assert!(
                matches!(rel("/w", p), Err(ToolError::InvalidPath { .. })),
                "{p:?} was not refused as invalid"
            );
        }
        let nul = PathBuf::from(OsString::from_vec(b"/w/src/main.rs\0.txt".to_vec()));
        assert!(matches!(
            relative_to_root(Path::new("/w"), &nul),
            Err(ToolError::InvalidPath { .. })
        ));
        let long = format!("/w/{}", "a/".repeat(2047));
        assert!(long.len() >= PATH_MAX);
        let err = rel("/w", &long).unwrap_err();
        assert!(err.to_string().contains("bytes long"), "{err}");
        // Just under the limit is mapped (the kernel judges the rest).
        let ok = format!("/w/{}", "a".repeat(PATH_MAX - 4));
        assert_eq!(ok.len(), PATH_MAX - 1);
        assert!(rel("/w", &ok).is_ok());
    }

    #[test]
    fn display_escapes_controls_bidi_and_bad_bytes() {
        assert_eq!(
            display_path(Path::new("notes\nINFO approved")),
            "notes\\nINFO approved"
        );
        assert_eq!(
            display_path(Path::new("\u{202e}txt.exe")),
            "\\u{202e}txt.exe"
        );
        assert_eq!(display_path(Path::new("café.txt")), "café.txt");
        assert_eq!(display_path(Path::new("a\x1b[31m")), "a\\u{1b}[31m");
        let bad = PathBuf::from(OsString::from_vec(b"x\xffy".to_vec()));
        assert_eq!(display_path(&bad), "x\\xffy");
        let long = "a".repeat(500);
        assert_eq!(
            display_path(Path::new(&long)),
            format!("{}…", "a".repeat(DISPLAY_MAX_CHARS))
        );
    }

    #[test]
    fn secret_names_match_the_brief() {
        for s in [
            ".env",
            ".env.production",
            "key.PEM",
            "id_ed25519",
            ".netrc",
            "credentials.json",
        ] {
            assert!(is_secret_name(OsStr::new(s)), "{s}");
        }
        for s in ["main.rs", "env.rs", "README.md", "identity.rs"] {
            assert!(!is_secret_name(OsStr::new(s)), "{s}");
        }
    }
}
