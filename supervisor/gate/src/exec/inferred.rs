//! Refusals no kernel record names, inferred from a command's own error
//! messages (docs/THREAT_MODEL.md, "Refusals, attributed"): a write to the
//! sandbox's read-only root fails with `EROFS` before Landlock is asked, so
//! the only trace is the program's `Read-only file system` message. Each
//! such message that names a path gives one `sandbox: ` line, marked as
//! read from the output (a program may print the words for another
//! reason; the line then says so).

use tollgate_sandbox::refusal::Rule;

use super::notes::{WallNotes, shown_bytes};

/// strerror(EROFS), as every libc prints it.
const EROFS: &str = ": Read-only file system";
/// Messages looked at, at most (the output is already capped).
const MAX_SCANNED: usize = 64;

/// Adds a line to `notes` for each distinct path `output` says was refused
/// with `EROFS`.
pub(crate) fn read_only_root(output: &str, notes: &mut WallNotes) {
    for line in output
        .lines()
        .filter(|l| l.contains(EROFS))
        .take(MAX_SCANNED)
    {
        let Some(path) = erofs_path(line) else {
            continue;
        };
        notes.push(&format!(
            "denied write {} ({}; from the command's error message)",
            shown_bytes(path.as_bytes()),
            Rule::ReadOnlyRoot.words()
        ));
    }
}

/// The path of one `EROFS` message: the last quoted name before it
/// (coreutils: `touch: cannot touch '/usr/x': Read-only file system`), or
/// the last `: `-separated field (bash: `bash: /etc/x: Read-only file
/// system`; dash: `sh: 1: cannot create /etc/x: Read-only file system`).
fn erofs_path(line: &str) -> Option<&str> {
    let head = &line[..line.rfind(EROFS)?];
    let quoted = [('\'', '\''), ('‘', '’'), ('"', '"'), ('`', '\'')]
        .iter()
        .find_map(|(open, close)| {
            let end = head.strip_suffix(*close)?;
            let start = end.rfind(*open)?;
            Some(&end[start + open.len_utf8()..])
        });
    let path = quoted.unwrap_or_else(|| {
        let field = head.rsplit(": ").next().unwrap_or(head);
        field.strip_prefix("cannot create ").unwrap_or(field)
    });
    path.starts_with('/').then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_messages_name_their_path() {
        for (line, path) in [
            (
                "touch: cannot touch '/usr/x': Read-only file system",
                "/usr/x",
            ),
            (
                "mkdir: cannot create directory ‘/etc/d’: Read-only file system",
                "/etc/d",
            ),
            ("bash: /etc/hosts: Read-only file system", "/etc/hosts"),
            ("bash: line 1: /etc/x1: Read-only file system", "/etc/x1"),
            (
                "sh: 1: cannot create /usr/lib/y: Read-only file system",
                "/usr/lib/y",
            ),
        ] {
            assert_eq!(erofs_path(line), Some(path), "{line}");
        }
        assert_eq!(erofs_path("mount: Read-only file system"), None);
        assert_eq!(erofs_path("no such words"), None);
    }

    #[test]
    fn lines_are_deduplicated_escaped_and_capped() {
        let mut out = String::new();
        for i in 0..30 {
            out.push_str(&format!("bash: /etc/x{}: Read-only file system\n", i % 12));
        }
        out.push_str("bash: /etc/\u{1b}[31mred: Read-only file system\n");
        let mut notes = WallNotes::default();
        read_only_root(&out, &mut notes);
        let text = notes.render();
        assert_eq!(text.lines().count(), 11, "{text}");
        assert!(text.starts_with("sandbox: denied write /etc/x0 (the sandbox root is read-only; write inside the workspace; from the command's error message)\n"), "{text}");
        assert!(text.ends_with("sandbox: … and 3 more\n"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }
}
