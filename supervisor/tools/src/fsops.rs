//! Opening and replacing files beneath the workspace directory handle.
//!
//! Every open goes through cap-std relative to the workspace `Dir`, which on
//! Linux is openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: the kernel
//! refuses any resolution that leaves the directory, whatever symlink was
//! swapped in after the policy looked. On top of that:
//! - only regular files are read or written: the type is checked before the
//!   open (so a FIFO or device is never opened), the open is O_NONBLOCK (so a
//!   FIFO swapped in between cannot hang it) and the type is checked again on
//!   the opened handle;
//! - writes never go through a symlink or a hard-linked file (nlink > 1), and
//!   are atomic: a temp file (O_EXCL, random name) in the same directory,
//!   written, fsynced, then renamed over the target. rename(2) replaces the
//!   directory entry, never the contents of whatever the old entry pointed at.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, FileTypeExt, OpenOptions, OpenOptionsExt};
use nix::libc;

use crate::ToolError;

/// The largest file edit_file and the previews will load.
pub(crate) const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// What kind of thing a file type is, in words.
pub(crate) fn kind_name(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_file() {
        "regular file"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

fn cap_kind_name(ft: &cap_std::fs::FileType) -> &'static str {
    if ft.is_file() {
        "regular file"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

fn require_regular_cap(ft: &cap_std::fs::FileType, shown: &str) -> Result<(), ToolError> {
    if ft.is_file() {
        Ok(())
    } else if ft.is_dir() {
        Err(ToolError::IsDirectory {
            path: shown.to_string(),
        })
    } else {
        Err(ToolError::NotRegularFile {
            path: shown.to_string(),
            kind: cap_kind_name(ft),
        })
    }
}

fn require_regular_std(md: &std::fs::Metadata, shown: &str) -> Result<(), ToolError> {
    let ft = md.file_type();
    if ft.is_file() {
        Ok(())
    } else if ft.is_dir() {
        Err(ToolError::IsDirectory {
            path: shown.to_string(),
        })
    } else {
        Err(ToolError::NotRegularFile {
            path: shown.to_string(),
            kind: kind_name(&ft),
        })
    }
}

/// Opens a regular file beneath `dir` for reading, following symlinks only
/// while they stay beneath.
pub(crate) fn open_regular_read(
    dir: &Dir,
    rel: &Path,
    shown: &str,
) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
    if rel.as_os_str().is_empty() {
        return Err(ToolError::IsDirectory {
            path: shown.to_string(),
        });
    }
    let md = dir
        .metadata(rel)
        .map_err(|e| ToolError::from_io("read", shown, e))?;
    require_regular_cap(&md.file_type(), shown)?;
    let mut opts = OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = dir
        .open_with(rel, &opts)
        .map_err(|e| ToolError::from_io("read", shown, e))?
        .into_std();
    let md = file
        .metadata()
        .map_err(|e| ToolError::from_io("read", shown, e))?;
    require_regular_std(&md, shown)?;
    Ok((file, md))
}

/// Opens the parent directory of a file to write, creating missing
/// directories (mode 0755, owned by the session owner) when `create`.
pub(crate) fn open_parent(
    root: &Dir,
    parent: &Path,
    shown: &str,
    create: bool,
) -> Result<Dir, ToolError> {
    if parent.as_os_str().is_empty() {
        return root
            .try_clone()
            .map_err(|e| ToolError::from_io("open", ".", e));
    }
    match root.open_dir(parent) {
        Ok(dir) => Ok(dir),
        Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
            let mut builder = DirBuilder::new();
            builder.recursive(true).mode(0o755);
            root.create_dir_with(parent, &builder)
                .map_err(|e| ToolError::from_io("create directory", shown, e))?;
            root.open_dir(parent)
                .map_err(|e| ToolError::from_io("write", shown, e))
        }
        Err(e) => Err(ToolError::from_io("write", shown, e)),
    }
}

/// An existing file about to be replaced: its handle (opened O_NOFOLLOW, for
/// writing, so the owner's write permission was checked), size and mode.
pub(crate) struct Existing {
    pub(crate) file: std::fs::File,
    pub(crate) len: u64,
    pub(crate) mode: u32,
}

impl Existing {
    /// Reads the whole file (up to [`MAX_EDIT_BYTES`]).
    pub(crate) fn read_all(&mut self, shown: &str) -> Result<Vec<u8>, ToolError> {
        if self.len > MAX_EDIT_BYTES {
            return Err(ToolError::TooLarge {
                path: shown.to_string(),
                size: self.len,
                limit: MAX_EDIT_BYTES,
            });
        }
        let mut buf = Vec::with_capacity(self.len as usize);
        (&self.file)
            .take(MAX_EDIT_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| ToolError::from_io("read", shown, e))?;
        if buf.len() as u64 > MAX_EDIT_BYTES {
            return Err(ToolError::TooLarge {
                path: shown.to_string(),
                size: buf.len() as u64,
                limit: MAX_EDIT_BYTES,
            });
        }
        Ok(buf)
    }
}

/// Looks at `name` in `pdir` without following it. `Ok(None)`: nothing there.
/// A symlink, directory, FIFO, socket or device, or a regular file with more
/// than one hard link, is an error. With `read`, the handle is also readable.
pub(crate) fn open_existing_for_write(
    pdir: &Dir,
    name: &OsStr,
    shown: &str,
    read: bool,
) -> Result<Option<Existing>, ToolError> {
    match pdir.symlink_metadata(name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ToolError::from_io("write", shown, e)),
        Ok(md) if md.file_type().is_symlink() => {
            return Err(ToolError::Symlink {
                path: shown.to_string(),
            });
        }
        Ok(md) => require_regular_cap(&md.file_type(), shown)?,
    }
    let mut opts = OpenOptions::new();
    opts.read(read)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = match pdir.open_with(name, &opts) {
        Ok(f) => f.into_std(),
        // Gone since the lstat: like nothing there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW met a symlink swapped in since the lstat.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ToolError::Symlink {
                path: shown.to_string(),
            });
        }
        Err(e) => return Err(ToolError::from_io("write", shown, e)),
    };
    let md = file
        .metadata()
        .map_err(|e| ToolError::from_io("write", shown, e))?;
    require_regular_std(&md, shown)?;
    if md.nlink() > 1 {
        return Err(ToolError::HardLinked {
            path: shown.to_string(),
            nlink: md.nlink(),
        });
    }
    Ok(Some(Existing {
        file,
        len: md.len(),
        mode: md.mode() & 0o777,
    }))
}

/// A fresh random temp-file name: `.tollgate-<16 hex>.tmp`.
fn temp_name() -> Result<String, ToolError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ToolError::Internal(format!("no randomness for a temp file name: {e}")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(".tollgate-{hex}.tmp"))
}

/// Atomically replaces (or creates) `name` in `pdir` with `content`, mode
/// `mode`: temp file, write, fchmod, fsync, rename beneath, fsync the
/// directory. On any error the temp file is removed and the target is as it
/// was.
pub(crate) fn atomic_replace(
    pdir: &Dir,
    name: &OsStr,
    content: &[u8],
    mode: u32,
    shown: &str,
) -> Result<(), ToolError> {
    let mut tmp = temp_name()?;
    let mut opts = OpenOptions::new();
    opts.write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY);
    let mut attempts = 0;
    let file = loop {
        match pdir.open_with(&tmp, &opts) {
            Ok(f) => break f.into_std(),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 3 => {
                attempts += 1;
                tmp = temp_name()?;
            }
            Err(e) => return Err(ToolError::from_io("write", shown, e)),
        }
    };
    let result = write_and_rename(pdir, file, &tmp, name, content, mode, shown);
    if result.is_err() {
        // Best effort: the temp file may already be gone.
        let _ = pdir.remove_file(&tmp);
    }
    result?;
    // The rename is durable once the directory is synced. A failure here
    // leaves a complete file either way, so it is not an error.
    let mut opts = OpenOptions::new();
    opts.read(true).custom_flags(libc::O_DIRECTORY);
    match pdir.open_with(".", &opts) {
        Ok(d) => {
            if let Err(e) = d.sync_all() {
                tracing::debug!(path = shown, error = %e, "fsync of the directory failed");
            }
        }
        Err(e) => tracing::debug!(path = shown, error = %e, "cannot open the directory to fsync"),
    }
    Ok(())
}

fn write_and_rename(
    pdir: &Dir,
    mut file: std::fs::File,
    tmp: &str,
    name: &OsStr,
    content: &[u8],
    mode: u32,
    shown: &str,
) -> Result<(), ToolError> {
    let io = |e| ToolError::from_io("write", shown, e);
    file.write_all(content).map_err(io)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    pdir.rename(tmp, pdir, name)
        .map_err(|e| ToolError::from_io("rename", shown, e))
}
