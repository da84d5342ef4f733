//! Each client tool in tollgate's terms, decided by what the client's own
//! execution of it reads or writes (docs/CLIENTS.md, "What a client's own
//! tool reaches").

use std::path::Path;

use serde_json::{Map, Value};
use tollgate_toolcall::{self as tool, Tool};

use super::fields::{file_field, opt_bool, opt_string, opt_u64, string};
use super::search::ClientSearch;
use super::{FileOp, Mapped, ShellCall, gated, parse_patch};

/// Refused because tollgate cannot bound what the client does with it.
pub const RULE_WEB_SEARCH: &str = "clients:web-search";
pub const RULE_AGENT_ISOLATION: &str = "clients:agent-isolation";

pub(super) fn shell(obj: &Map<String, Value>) -> Result<Mapped, String> {
    let command = string(obj, "command")?;
    if command.trim().is_empty() {
        return Err("`command` is empty".to_string());
    }
    // Claude Code's `timeout` is in milliseconds.
    let timeout_s = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let ms = v
                .as_u64()
                .ok_or_else(|| "`timeout` is not a number of milliseconds".to_string())?;
            Some(ms.div_ceil(1000).max(1))
        }
    };
    // Claude Code's `run_in_background`: the routed command is a background
    // job of the session (docs/CLIENTS.md, "Background commands").
    let background = opt_bool(obj, "run_in_background")?.unwrap_or(false);
    let call = Tool::RunBash(tool::RunBash {
        command: command.to_string(),
        timeout_s,
        background: background.then_some(true),
    });
    Ok(Mapped::Gated {
        tool: call.name().as_str(),
        calls: vec![call],
        shell: Some(ShellCall {
            command: command.to_string(),
            timeout_s,
            background,
        }),
        search: None,
    })
}

/// Read (a file, an image, a PDF, a notebook: the one file it names; a
/// directory is refused by the floor) and Codex's `view_image`.
pub(super) fn read(obj: &Map<String, Value>, key: &str) -> Result<Mapped, String> {
    Ok(gated(Tool::ReadFile(tool::ReadFile {
        path: file_field(obj, key)?.to_string(),
        offset: opt_u64(obj, "offset")?,
        limit: opt_u64(obj, "limit")?,
    })))
}

pub(super) fn write(obj: &Map<String, Value>) -> Result<Mapped, String> {
    Ok(gated(Tool::WriteFile(tool::WriteFile {
        path: file_field(obj, "file_path")?.to_string(),
        content: string(obj, "content")?.to_string(),
    })))
}

pub(super) fn edit(obj: &Map<String, Value>) -> Result<Mapped, String> {
    Ok(gated(Tool::EditFile(tool::EditFile {
        path: file_field(obj, "file_path")?.to_string(),
        old_string: string(obj, "old_string")?.to_string(),
        new_string: string(obj, "new_string")?.to_string(),
        replace_all: opt_bool(obj, "replace_all")?,
    })))
}

/// NotebookEdit rewrites the notebook it names (a cell replaced, inserted
/// or deleted): an edit of that file.
pub(super) fn notebook_edit(obj: &Map<String, Value>) -> Result<Mapped, String> {
    let mode = opt_string(obj, "edit_mode")?;
    if let Some(m) = mode.as_deref()
        && !matches!(m, "replace" | "insert" | "delete")
    {
        return Err(format!(
            "`edit_mode` is `{}`, not replace, insert or delete",
            crate::display::shorten(m, 32)
        ));
    }
    let source = match mode.as_deref() {
        Some("delete") => opt_string(obj, "new_source")?.unwrap_or_default(),
        _ => string(obj, "new_source")?.to_string(),
    };
    let call = Tool::EditFile(tool::EditFile {
        path: file_field(obj, "notebook_path")?.to_string(),
        old_string: String::new(),
        new_string: source,
        replace_all: None,
    });
    Ok(Mapped::Gated {
        tool: "edit_file",
        calls: vec![call],
        shell: None,
        search: None,
    })
}

/// The search path of Glob, Grep and LS: the event's cwd when none is given.
fn search_path(obj: &Map<String, Value>, cwd: &Path) -> Result<String, String> {
    match obj.get("path") {
        None | Some(Value::Null) => Ok(cwd.to_string_lossy().into_owned()),
        Some(_) => Ok(file_field(obj, "path")?.to_string()),
    }
}

/// Glob lists names (no content) under its search path, not following
/// links: decided on the path and the pattern (an absolute pattern, which
/// Claude Code would search from its own directory, is refused by the
/// floor).
pub(super) fn glob(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    Ok(gated(Tool::GlobFiles(tool::GlobFiles {
        pattern: string(obj, "pattern")?.to_string(),
        path: Some(search_path(obj, cwd)?),
    })))
}

/// LS (older Claude Code) lists one directory's names.
pub(super) fn list(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    Ok(gated(Tool::GlobFiles(tool::GlobFiles {
        pattern: "*".to_string(),
        path: Some(search_path(obj, cwd)?),
    })))
}

/// Grep: decided as tollgate's grep of its search path, and walked as the
/// client's ripgrep will walk it before the answer ([`super::search`]).
pub(super) fn grep(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    let pattern = string(obj, "pattern")?.to_string();
    let glob = opt_string(obj, "glob")?;
    // Checked, not walked: a type or multiline search reads no file more.
    opt_string(obj, "type")?;
    opt_bool(obj, "multiline")?;
    let path = search_path(obj, cwd)?;
    let call = Tool::Grep(tool::Grep {
        pattern,
        path: Some(path.clone()),
        glob,
        ignore_case: (obj.get("-i").and_then(Value::as_bool) == Some(true)).then_some(true),
    });
    Ok(Mapped::Gated {
        tool: call.name().as_str(),
        calls: vec![call],
        shell: None,
        search: Some(ClientSearch {
            path,
            input: obj.clone(),
        }),
    })
}

pub(super) fn web_fetch(obj: &Map<String, Value>) -> Result<Mapped, String> {
    Ok(gated(Tool::Webfetch(tool::Webfetch {
        url: string(obj, "url")?.to_string(),
        max_bytes: None,
    })))
}

/// WebSearch runs at the model provider: which pages it reads, and where
/// the query goes, tollgate cannot see or vet.
pub(super) fn web_search(obj: &Map<String, Value>) -> Result<Mapped, String> {
    string(obj, "query")?;
    Ok(Mapped::Refused {
        rule: RULE_WEB_SEARCH,
        reason: "WebSearch runs on the model provider's servers: tollgate cannot see or vet which pages it reads or where the query goes (no SSRF guard, no record of what was fetched), so it is refused. Fetch a page you know with WebFetch, which tollgate checks.".to_string(),
    })
}

/// A subagent (Agent, Task) calls its tools through this same hook, so by
/// default it is the client's bookkeeping. With `isolation` it is not:
/// `worktree` makes Claude Code run git on the host (the repository's hooks
/// and config with it) to check out a copy; `remote` runs the subagent in
/// a cloud environment whose calls never reach this hook.
pub(super) fn agent(obj: &Map<String, Value>) -> Result<Mapped, String> {
    match opt_string(obj, "isolation")?.as_deref() {
        None => Ok(Mapped::Harmless),
        Some("worktree") => Ok(Mapped::Refused {
            rule: RULE_AGENT_ISOLATION,
            reason: "a subagent with `isolation: \"worktree\"` makes Claude Code run git on the host, as the user and outside tollgate's sandbox (the repository's hooks and config run with it), to check out a new worktree; tollgate refuses it. Start the subagent without `isolation`.".to_string(),
        }),
        Some("remote") => Ok(Mapped::Refused {
            rule: RULE_AGENT_ISOLATION,
            reason: "a subagent with `isolation: \"remote\"` runs in a remote environment with a copy of the workspace, and none of its tool calls reach tollgate; it is refused. Start the subagent without `isolation`.".to_string(),
        }),
        Some(other) => Err(format!(
            "`isolation` is `{}`, which tollgate does not know",
            crate::display::shorten(other, 32)
        )),
    }
}

/// Codex's apply_patch: one engine call per file it touches.
pub(super) fn patch(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    let text = match obj.get("command").or_else(|| obj.get("input")) {
        Some(Value::String(s)) => s,
        _ => return Err("the patch text (`command`) is missing".to_string()),
    };
    let ops = parse_patch(text).map_err(|e| format!("tollgate cannot read the patch ({})", e.0))?;
    let abs = |p: &str| cwd.join(p).to_string_lossy().into_owned();
    let write = |path: &str, content: String| {
        Tool::WriteFile(tool::WriteFile {
            path: abs(path),
            content,
        })
    };
    let mut calls = Vec::new();
    for op in ops {
        match op {
            FileOp::Add { path, content } => calls.push(write(&path, content)),
            // Deleting is writing nothing over the file: destructive when
            // the file has content.
            FileOp::Delete { path } => calls.push(write(&path, String::new())),
            FileOp::Update {
                path,
                removed,
                added,
                move_to,
            } => {
                if let Some(to) = move_to {
                    calls.push(write(&to, added.clone()));
                }
                calls.push(Tool::EditFile(tool::EditFile {
                    path: abs(&path),
                    old_string: removed,
                    new_string: added,
                    replace_all: None,
                }));
            }
        }
    }
    Ok(Mapped::Gated {
        tool: "apply_patch",
        calls,
        shell: None,
        search: None,
    })
}

/// `write_stdin` that types nothing is a poll.
pub(super) fn stdin(obj: &Map<String, Value>) -> Result<Mapped, String> {
    match obj.get("chars").and_then(Value::as_str) {
        None | Some("") => Ok(Mapped::Harmless),
        Some(_) => Err(
            "it types into a running process, which tollgate cannot judge; run a new command instead"
                .to_string(),
        ),
    }
}
