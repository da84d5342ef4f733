//! Codex's `apply_patch` text, read for the files it touches.
//!
//! The format (`*** Begin Patch`, then `*** Add File: P` / `*** Delete File:
//! P` / `*** Update File: P` with an optional `*** Move to: Q`, hunks of `+`,
//! `-` and ` ` lines, `*** End Patch`) names every file it touches on a
//! marker line. This reader is stricter than Codex's own: every line whose
//! text (leading blanks ignored) starts with `*** ` must be a marker it knows,
//! or the whole patch is refused. So a file Codex would touch is always one
//! this reader saw: a line Codex reads as a marker is one here too, and a line
//! read as a marker here that Codex reads as hunk text only adds a file to
//! decide, never hides one.

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// A new file and its content.
    Add { path: String, content: String },
    /// A file removed.
    Delete { path: String },
    /// A file changed in place (the removed and added lines of its hunks),
    /// and moved to `move_to` when the patch says so.
    Update {
        path: String,
        removed: String,
        added: String,
        move_to: Option<String>,
    },
}

/// Why a patch cannot be read: a sentence naming the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError(pub String);

const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const END_OF_FILE: &str = "*** End of File";

/// Reads the file operations of a patch, in order.
pub fn parse(text: &str) -> Result<Vec<FileOp>, PatchError> {
    let mut ops: Vec<FileOp> = Vec::new();
    let mut began = false;
    let mut ended = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_start();
        if !line.starts_with("***") {
            // Hunk text belongs to the file section it is in; outside one
            // (a heredoc's first line, blank lines) it touches nothing.
            if began && !ended {
                push_text(&mut ops, raw);
            }
            continue;
        }
        let marker = line.trim_end();
        if ended {
            return Err(PatchError(format!(
                "line {n}: `{}` comes after `*** End Patch`",
                shown(marker)
            )));
        }
        if marker == BEGIN {
            if began {
                return Err(PatchError(format!("line {n}: a second `*** Begin Patch`")));
            }
            began = true;
            continue;
        }
        if !began {
            return Err(PatchError(format!(
                "line {n}: `{}` before `*** Begin Patch`",
                shown(marker)
            )));
        }
        if marker == END {
            ended = true;
        } else if marker == END_OF_FILE {
            continue;
        } else if let Some(p) = marker.strip_prefix(ADD) {
            ops.push(FileOp::Add {
                path: path_of(p, n)?,
                content: String::new(),
            });
        } else if let Some(p) = marker.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: path_of(p, n)?,
            });
        } else if let Some(p) = marker.strip_prefix(UPDATE) {
            ops.push(FileOp::Update {
                path: path_of(p, n)?,
                removed: String::new(),
                added: String::new(),
                move_to: None,
            });
        } else if let Some(p) = marker.strip_prefix(MOVE) {
            let to = path_of(p, n)?;
            match ops.last_mut() {
                Some(FileOp::Update { move_to, .. }) if move_to.is_none() => *move_to = Some(to),
                _ => {
                    return Err(PatchError(format!(
                        "line {n}: `*** Move to:` must follow an `*** Update File:` line"
                    )));
                }
            }
        } else {
            return Err(PatchError(format!(
                "line {n}: unknown marker `{}` (tollgate reads Add File, Delete File, Update File and Move to)",
                shown(marker)
            )));
        }
    }
    if !began {
        return Err(PatchError("the patch has no `*** Begin Patch` line".into()));
    }
    if !ended {
        return Err(PatchError("the patch has no `*** End Patch` line".into()));
    }
    if ops.is_empty() {
        return Err(PatchError("the patch touches no file".into()));
    }
    Ok(ops)
}

fn path_of(p: &str, n: usize) -> Result<String, PatchError> {
    let p = p.trim();
    if p.is_empty() {
        return Err(PatchError(format!("line {n}: the file name is empty")));
    }
    Ok(p.to_string())
}

/// Adds a hunk line to the current file section.
fn push_text(ops: &mut [FileOp], raw: &str) {
    let Some(op) = ops.last_mut() else { return };
    let push = |buf: &mut String, rest: &str| {
        buf.push_str(rest);
        buf.push('\n');
    };
    match op {
        FileOp::Add { content, .. } => {
            if let Some(rest) = raw.strip_prefix('+') {
                push(content, rest);
            }
        }
        FileOp::Update { removed, added, .. } => {
            if let Some(rest) = raw.strip_prefix('+') {
                push(added, rest);
            } else if let Some(rest) = raw.strip_prefix('-') {
                push(removed, rest);
            }
        }
        FileOp::Delete { .. } => {}
    }
}

fn shown(s: &str) -> String {
    crate::display::shorten(s, 80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_file_operation() {
        let text = "*** Begin Patch\n*** Add File: hello.txt\n+hi there\n+second\n\
                    *** Update File: old.txt\n*** Move to: new.txt\n@@\n a\n-b\n+c\n\
                    *** End of File\n*** Delete File: gone.txt\n*** End Patch\n";
        assert_eq!(
            parse(text).unwrap(),
            vec![
                FileOp::Add {
                    path: "hello.txt".into(),
                    content: "hi there\nsecond\n".into()
                },
                FileOp::Update {
                    path: "old.txt".into(),
                    removed: "b\n".into(),
                    added: "c\n".into(),
                    move_to: Some("new.txt".into()),
                },
                FileOp::Delete {
                    path: "gone.txt".into()
                },
            ]
        );
    }

    #[test]
    fn a_heredoc_around_the_patch_is_read_through() {
        let text =
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nEOF\n";
        assert_eq!(
            parse(text).unwrap(),
            vec![FileOp::Add {
                path: "a".into(),
                content: "x\n".into()
            }]
        );
    }

    #[test]
    fn what_it_cannot_read_is_refused_naming_the_line() {
        for (text, want) in [
            ("*** Add File: a\n+x\n", "line 1: `*** Add File: a` before"),
            ("*** Begin Patch\n*** Add File: a\n", "no `*** End Patch`"),
            ("*** Begin Patch\n*** End Patch\n", "touches no file"),
            (
                "*** Begin Patch\n*** Rename File: a\n*** End Patch\n",
                "line 2: unknown marker",
            ),
            (
                "*** Begin Patch\n   *** Copy File: a\n*** End Patch\n",
                "line 2: unknown marker",
            ),
            (
                "*** Begin Patch\n*** Move to: b\n*** End Patch\n",
                "line 2: `*** Move to:` must follow",
            ),
            (
                "*** Begin Patch\n*** Add File:   \n*** End Patch\n",
                "line 2: the file name is empty",
            ),
            (
                "*** Begin Patch\n*** Add File: a\n*** End Patch\n*** Add File: b\n",
                "comes after",
            ),
            ("no patch at all", "no `*** Begin Patch`"),
        ] {
            let e = parse(text).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn an_indented_marker_inside_a_hunk_is_still_a_file() {
        // Codex may read this line as context; deciding it too only adds a file.
        let text = "*** Begin Patch\n*** Update File: a\n@@\n *** Add File: b\n*** End Patch\n";
        let ops = parse(text).unwrap();
        assert_eq!(ops.len(), 2);
    }
}
