//! The per-session workspace handle and the file tools on it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;

use crate::diff;
use crate::fsops::{atomic_replace, open_existing_for_write, open_parent};
use crate::owner::{Owner, OwnerPool};
use crate::paths::{display_path, relative_to_root, show_rel, split_parent};
use crate::read;
use crate::search::{self, GrepArgs};
use crate::{ToolError, ToolOutput};

/// One per session: the workspace directory handle every file tool resolves
/// beneath, and the session owner whose credentials they run with.
pub struct Workspace {
    inner: Arc<Inner>,
    pool: OwnerPool,
}

struct Inner {
    root: PathBuf,
    dir: Dir,
    /// Device and inode of the directory opened.
    id: (u64, u64),
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.inner.root)
            .field("uid", &self.pool.owner().uid())
            .field("gid", &self.pool.owner().gid())
            .finish()
    }
}

impl Workspace {
    /// Opens the workspace root (absolute, canonical) for a session owned by
    /// uid/gid. When the supervisor is not root, uid must be its own.
    pub fn open(root: &Path, uid: u32, gid: u32) -> Result<Workspace, ToolError> {
        let fail = |reason: String| ToolError::Workspace {
            path: display_path(root),
            reason,
        };
        if !root.is_absolute() {
            return Err(fail("the path is not absolute".into()));
        }
        let canonical = std::fs::canonicalize(root).map_err(|e| fail(e.to_string()))?;
        if canonical != root {
            return Err(fail(format!(
                "the path is not canonical (it resolves to {}); pass the resolved path",
                display_path(&canonical)
            )));
        }
        let owner = Owner::for_session(uid, gid)?;
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .map_err(|e| fail(e.to_string()))?;
        let md = dir.dir_metadata().map_err(|e| fail(e.to_string()))?;
        if !md.is_dir() {
            return Err(fail("it is not a directory".into()));
        }
        let id = {
            use cap_std::fs::MetadataExt;
            (md.dev(), md.ino())
        };
        Ok(Workspace {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                dir,
                id,
            }),
            pool: OwnerPool::new(owner),
        })
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Device and inode of the directory this workspace holds open: every
    /// file tool works beneath it, whatever its path names later.
    pub fn id(&self) -> (u64, u64) {
        self.inner.id
    }

    /// The session owner's uid.
    pub fn uid(&self) -> u32 {
        self.pool.owner().uid()
    }

    /// The session owner's gid.
    pub fn gid(&self) -> u32 {
        self.pool.owner().gid()
    }

    /// Maps a resolved absolute path to the path relative to the root.
    /// Cheap refusals happen here, before any thread is started.
    fn rel(&self, path: &Path) -> Result<PathBuf, ToolError> {
        relative_to_root(&self.inner.root, path)
    }

    async fn run<T, F>(&self, work: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, ToolError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        self.pool.run(move || work(&inner)).await
    }

    /// `cat -n` style lines: `offset` is the first line (1-based, default 1),
    /// `limit` the number of lines (default 2000); lines over 2000 chars are
    /// cut; a binary or non-UTF-8 file is reported, not dumped; the output is
    /// capped at `cap` bytes with a notice naming the offset to go on from.
    pub async fn read_file(
        &self,
        path: &Path,
        offset: Option<u64>,
        limit: Option<u64>,
        cap: usize,
    ) -> Result<ToolOutput, ToolError> {
        let rel = self.rel(path)?;
        self.run(move |ws| read::read_file(&ws.dir, &rel, offset, limit, cap))
            .await
    }

    /// Writes `content` atomically, creating missing parent directories.
    /// Refuses a symlink, a directory or special file, or a file with more
    /// than one hard link at `path`. Keeps an existing file's mode (new
    /// files: 0644). Says "wrote N bytes to PATH (created|overwrote M bytes)".
    pub async fn write_file(&self, path: &Path, content: &str) -> Result<ToolOutput, ToolError> {
        let rel = self.rel(path)?;
        let content = content.to_string();
        self.run(move |ws| write_file(&ws.dir, &rel, &content))
            .await
    }

    /// Replaces `old` by `new`: exactly one match unless `replace_all`, else
    /// an error with the count. Written atomically like write_file.
    pub async fn edit_file(
        &self,
        path: &Path,
        old: &str,
        new: &str,
        replace_all: bool,
    ) -> Result<ToolOutput, ToolError> {
        let rel = self.rel(path)?;
        let (old, new) = (old.to_string(), new.to_string());
        self.run(move |ws| {
            let shown = show_rel(&rel);
            let plan = plan_edit(&ws.dir, &rel, &old, &new, replace_all)?;
            atomic_replace(
                &plan.pdir,
                &plan.name,
                plan.new_text.as_bytes(),
                plan.mode,
                &shown,
            )?;
            Ok(ToolOutput {
                text: format!(
                    "edited {shown}: replaced {} occurrence{} ({} bytes -> {} bytes)",
                    plan.count,
                    if plan.count == 1 { "" } else { "s" },
                    plan.old_text.len(),
                    plan.new_text.len()
                ),
                truncated: false,
            })
        })
        .await
    }

    /// Files matching `pattern` beneath `path` (default: the root), one
    /// workspace-relative path per line, sorted; see the `search` module for
    /// the rules (gitignore, hidden files, pattern semantics).
    pub async fn glob_files(
        &self,
        pattern: &str,
        path: Option<&Path>,
        cap: usize,
    ) -> Result<ToolOutput, ToolError> {
        let base = match path {
            Some(p) => self.rel(p)?,
            None => PathBuf::new(),
        };
        let pattern = pattern.to_string();
        self.run(move |ws| search::glob_files(&ws.dir, &ws.root, &pattern, &base, cap))
            .await
    }

    /// Lines matching the regex `pattern` as `path:line:text`, beneath `path`
    /// (a directory or one file; default: the root), in files whose path
    /// matches `glob`. Workspace secret files are not searched.
    pub async fn grep(
        &self,
        pattern: &str,
        path: Option<&Path>,
        glob: Option<&str>,
        ignore_case: bool,
        cap: usize,
    ) -> Result<ToolOutput, ToolError> {
        let base = match path {
            Some(p) => self.rel(p)?,
            None => PathBuf::new(),
        };
        let pattern = pattern.to_string();
        let glob = glob.map(str::to_string);
        self.run(move |ws| {
            search::grep(
                &ws.dir,
                &ws.root,
                GrepArgs {
                    pattern: &pattern,
                    base_rel: &base,
                    glob: glob.as_deref(),
                    ignore_case,
                    cap,
                },
            )
        })
        .await
    }

    /// For approvals: the unified diff write_file would make, capped at
    /// `cap` bytes. Fails the way write_file would (symlink, hard link, ...).
    pub async fn preview_write(
        &self,
        path: &Path,
        content: &str,
        cap: usize,
    ) -> Result<String, ToolError> {
        let rel = self.rel(path)?;
        let content = content.to_string();
        self.run(move |ws| preview_write(&ws.dir, &rel, &content, cap))
            .await
    }

    /// For approvals: the unified diff edit_file would make. Fails the way
    /// edit_file would (0 or several matches, ...).
    pub async fn preview_edit(
        &self,
        path: &Path,
        old: &str,
        new: &str,
        replace_all: bool,
        cap: usize,
    ) -> Result<String, ToolError> {
        let rel = self.rel(path)?;
        let (old, new) = (old.to_string(), new.to_string());
        self.run(move |ws| {
            let shown = show_rel(&rel);
            let plan = plan_edit(&ws.dir, &rel, &old, &new, replace_all)?;
            Ok(diff::unified(
                Some(&plan.old_text),
                &plan.new_text,
                &shown,
                cap,
            ))
        })
        .await
    }
}

fn write_file(dir: &Dir, rel: &Path, content: &str) -> Result<ToolOutput, ToolError> {
    let shown = show_rel(rel);
    let (parent, name) = split_parent(rel).ok_or_else(|| ToolError::IsDirectory {
        path: shown.clone(),
    })?;
    let pdir = open_parent(dir, parent, &shown, true)?;
    let existing = open_existing_for_write(&pdir, name, &shown, false)?;
    let (mode, old_len) = match &existing {
        Some(e) => (e.mode, Some(e.len)),
        None => (0o644, None),
    };
    drop(existing);
    atomic_replace(&pdir, name, content.as_bytes(), mode, &shown)?;
    let what = match old_len {
        None => "created".to_string(),
        Some(m) => format!("overwrote {m} bytes"),
    };
    Ok(ToolOutput {
        text: format!("wrote {} bytes to {shown} ({what})", content.len()),
        truncated: false,
    })
}

fn preview_write(dir: &Dir, rel: &Path, content: &str, cap: usize) -> Result<String, ToolError> {
    let shown = show_rel(rel);
    let (parent, name) = split_parent(rel).ok_or_else(|| ToolError::IsDirectory {
        path: shown.clone(),
    })?;
    // A missing parent directory is fine: write_file creates it.
    let pdir = match open_parent(dir, parent, &shown, false) {
        Ok(d) => Some(d),
        Err(ToolError::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let existing = match &pdir {
        Some(pdir) => open_existing_for_write(pdir, name, &shown, true)?,
        None => None,
    };
    let Some(mut existing) = existing else {
        return Ok(diff::unified(None, content, &shown, cap));
    };
    let old = existing.read_all(&shown)?;
    match String::from_utf8(old) {
        Ok(old) => Ok(diff::unified(Some(&old), content, &shown, cap)),
        Err(_) => Ok(diff::cap_diff(
            format!(
                "binary file {shown} ({} bytes) would be replaced by {} bytes of text\n",
                existing.len,
                content.len()
            ),
            cap,
        )),
    }
}

/// What an edit would do, with the directory handle to do it in.
struct EditPlan {
    pdir: Dir,
    name: OsString,
    mode: u32,
    old_text: String,
    new_text: String,
    count: usize,
}

fn plan_edit(
    dir: &Dir,
    rel: &Path,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<EditPlan, ToolError> {
    let shown = show_rel(rel);
    if old.is_empty() {
        return Err(ToolError::InvalidArgument(
            "old_string is empty; use write_file to create or replace a whole file".into(),
        ));
    }
    if old == new {
        return Err(ToolError::NoChange { path: shown });
    }
    let (parent, name) = split_parent(rel).ok_or_else(|| ToolError::IsDirectory {
        path: shown.clone(),
    })?;
    let pdir = open_parent(dir, parent, &shown, false)?;
    let mut existing =
        open_existing_for_write(&pdir, name, &shown, true)?.ok_or_else(|| ToolError::NotFound {
            path: shown.clone(),
        })?;
    let bytes = existing.read_all(&shown)?;
    let old_text = String::from_utf8(bytes).map_err(|e| ToolError::NotText {
        path: shown.clone(),
        reason: format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
    })?;
    let count = old_text.matches(old).count();
    if count == 0 {
        return Err(ToolError::NoMatch { path: shown });
    }
    if count > 1 && !replace_all {
        return Err(ToolError::AmbiguousMatch { path: shown, count });
    }
    let new_text = if replace_all {
        old_text.replace(old, new)
    } else {
        old_text.replacen(old, new, 1)
    };
    Ok(EditPlan {
        pdir,
        name: name.to_os_string(),
        mode: existing.mode,
        old_text,
        new_text,
        count,
    })
}
