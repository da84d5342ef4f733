//! Placeholders: empty directories that hold a host-executed name's place
//! while a sandbox runs, so the sandbox cannot create the real thing.
//!
//! Created on the host before the sandbox starts, owned by the session
//! owner (so the user can always remove one), and removed when the sandbox
//! is gone: only if it is still the directory we made (device and inode)
//! and still empty (whatever the user put there meanwhile is theirs).
//!
//! Two sandboxes of one workspace share a placeholder: a process-wide table
//! counts holders, and the last one removes it (removing it while another
//! sandbox still has it attached would detach that sandbox's mount).
//! `state_dir/reserved/<session>.json` lists what a sandbox holds, written
//! before anything is created, so a supervisor that crashed leaves a record
//! the next start reaps ([`reap`]).
//!
//! Every step goes through a directory fd of the workspace and `openat2`
//! with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: the workspace's content is
//! hostile, and nothing here may create or remove anything outside it.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard};

use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, Mode, SFlag};
use serde::{Deserialize, Serialize};

use super::Placeholder;
use crate::BackendKind;
use crate::native::sys;
use crate::{Reaped, SandboxError, WorkspaceId};

const RESOLVE_NO_SYMLINKS: u64 = 0x04;
/// The most a file placeholder holds (`.` and a newline, for `commondir`).
const MAX_PLACEHOLDER_BYTES: i64 = 2;
const RESOLVE_BENEATH: u64 = 0x08;

/// Which directory a placeholder is: device, inode and, where the
/// filesystem keeps one, birth time (inode numbers are reused at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Ident {
    dev: u64,
    ino: u64,
    born: Option<(i64, u32)>,
}

impl Ident {
    fn of(dir: &Parent<'_>, name: &CString, st: &FileStat) -> Ident {
        Ident {
            dev: st.st_dev,
            ino: st.st_ino,
            born: sys::birth_time_at(dir.as_fd(), name.as_c_str()),
        }
    }

    /// Unknown (a crash between the record and the creation): any empty
    /// directory at the path is taken for ours.
    fn unknown(self) -> bool {
        self == Ident::default()
    }
}

/// One placeholder a sandbox holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    rel: PathBuf,
    /// Default until created.
    #[serde(default)]
    id: Ident,
}

/// `state_dir/reserved/<session>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    workspace: PathBuf,
    held: Vec<Held>,
    /// The backend whose sandbox holds them: only that backend reaps them,
    /// once its own sandboxes are dead. Absent in records written before it
    /// was kept: either backend reaps those.
    #[serde(default)]
    backend: Option<BackendKind>,
}

/// Who holds a reservation: the session, the backend of its sandbox, and
/// the state directory its record goes under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder<'a> {
    pub state_dir: &'a Path,
    pub session: &'a str,
    pub backend: BackendKind,
}

/// A placeholder's holders in this process.
#[derive(Debug)]
struct Slot {
    count: usize,
    id: Ident,
}

/// Placeholders held in this process, by absolute path; and the records of
/// live reservations (never reaped while they live).
#[derive(Default)]
struct Table {
    slots: HashMap<PathBuf, Slot>,
    live: HashSet<PathBuf>,
}

fn table() -> MutexGuard<'static, Table> {
    static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| Mutex::new(Table::default()));
    // A panic while holding the lock leaves the table as it was: usable.
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `abs` is a placeholder some sandbox of this process holds.
pub(crate) fn is_held(abs: &Path) -> bool {
    table().slots.contains_key(abs)
}

/// The placeholders one sandbox holds; released when dropped. Drop it only
/// once the sandbox is gone: removing a placeholder detaches the sandbox's
/// mount on it.
#[derive(Debug)]
pub(crate) struct Reservation {
    workspace: PathBuf,
    held: Vec<(PathBuf, Ident)>,
    record: Option<PathBuf>,
    /// The daemon's lease for this sandbox ([`crate::Lease`]): released
    /// with the placeholders.
    lease: crate::Lease,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io {
        context: what,
        source,
    }
}

fn cstr(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Refused(format!("{} contains a NUL byte", p.display())))
}

/// The workspace, opened without following any symlink, checked against
/// the session's directory when its identity is known.
fn open_workspace(ws: &Path, id: Option<WorkspaceId>) -> Result<OwnedFd, SandboxError> {
    let fd = sys::openat2_path(
        libc::AT_FDCWD,
        &cstr(ws)?,
        libc::O_DIRECTORY,
        RESOLVE_NO_SYMLINKS,
    )
    .map_err(io_err(format!("open workspace {}", ws.display())))?;
    if let Some(want) = id {
        let st = nix::sys::stat::fstat(&fd)
            .map_err(|e| io_err(format!("stat workspace {}", ws.display()))(e.into()))?;
        if WorkspaceId::from_pair((st.st_dev, st.st_ino)) != want {
            return Err(SandboxError::Refused(crate::replaced(ws)));
        }
    }
    Ok(fd)
}

/// The directory holding a placeholder: the workspace itself (most are at
/// its top: no lookup), or one beneath it.
enum Parent<'a> {
    Workspace(&'a OwnedFd),
    Beneath(OwnedFd),
}

impl AsFd for Parent<'_> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Parent::Workspace(fd) => fd.as_fd(),
            Parent::Beneath(fd) => fd.as_fd(),
        }
    }
}

/// The directory holding `rel`, beneath the workspace, and `rel`'s name.
fn parent_of<'a>(ws_fd: &'a OwnedFd, rel: &Path) -> std::io::Result<(Parent<'a>, CString)> {
    let name = rel
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok((Parent::Workspace(ws_fd), name));
    };
    let parent = CString::new(parent.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let fd = sys::openat2_path(
        ws_fd.as_raw_fd(),
        &parent,
        libc::O_DIRECTORY,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )?;
    Ok((Parent::Beneath(fd), name))
}

fn stat_at(dir: &Parent<'_>, name: &CString) -> nix::Result<FileStat> {
    nix::sys::stat::fstatat(dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// Creates the placeholders `rel` (parents first) in `ws` for `holder`'s
/// session, owned by `uid:gid`; records them under its state directory first.
pub(crate) fn acquire(
    ws: &Path,
    id: Option<WorkspaceId>,
    rels: &[Placeholder],
    owner: (u32, u32),
    holder: Holder<'_>,
) -> Result<Reservation, SandboxError> {
    let mut r = Reservation {
        workspace: ws.to_path_buf(),
        held: Vec::new(),
        record: None,
        lease: crate::Lease::default(),
    };
    if rels.is_empty() {
        return Ok(r);
    }
    let ws_fd = open_workspace(ws, id)?;
    let mut t = table();
    let record = record_path(holder.state_dir, holder.session);
    write_record(
        &record,
        &Record {
            workspace: ws.to_path_buf(),
            held: rels
                .iter()
                .map(|p| Held {
                    rel: p.rel.clone(),
                    id: Ident::default(),
                })
                .collect(),
            backend: Some(holder.backend),
        },
    )?;
    t.live.insert(record.clone());
    r.record = Some(record.clone());
    for p in rels {
        let rel = &p.rel;
        let abs = ws.join(rel);
        if let Some(slot) = t.slots.get_mut(&abs) {
            slot.count += 1;
            r.held.push((rel.clone(), slot.id));
            continue;
        }
        let (dir, name) =
            parent_of(&ws_fd, rel).map_err(io_err(format!("placeholder {}", abs.display())))?;
        match create(&dir, &name, p.file) {
            Ok(()) => {}
            // Made since the plan was drawn (by the user): not ours; the
            // sandbox attaches it as it is, or refuses a symlink.
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(e) => {
                return Err(io_err(format!("create placeholder {}", abs.display()))(
                    e.into(),
                ));
            }
        }
        let st = stat_at(&dir, &name)
            .map_err(|e| io_err(format!("stat placeholder {}", abs.display()))(e.into()))?;
        let id = Ident::of(&dir, &name, &st);
        t.slots.insert(abs.clone(), Slot { count: 1, id });
        r.held.push((rel.clone(), id));
        nix::unistd::fchownat(
            &dir,
            name.as_c_str(),
            Some(owner.0.into()),
            Some(owner.1.into()),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err(format!("chown placeholder {}", abs.display()))(e.into()))?;
    }
    write_record(
        &record,
        &Record {
            workspace: ws.to_path_buf(),
            held: r
                .held
                .iter()
                .map(|(rel, id)| Held {
                    rel: rel.clone(),
                    id: *id,
                })
                .collect(),
            backend: Some(holder.backend),
        },
    )?;
    drop(t);
    Ok(r)
}

/// Creates one placeholder: an empty directory, or a file holding `file`
/// (never through a symlink, never over an existing entry).
fn create(dir: &Parent<'_>, name: &CString, file: Option<&str>) -> nix::Result<()> {
    let Some(text) = file else {
        return nix::sys::stat::mkdirat(dir, name.as_c_str(), Mode::from_bits_truncate(0o755));
    };
    let fd = nix::fcntl::openat(
        dir,
        name.as_c_str(),
        nix::fcntl::OFlag::O_CREAT
            | nix::fcntl::OFlag::O_EXCL
            | nix::fcntl::OFlag::O_WRONLY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, text.as_bytes())
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

impl Reservation {
    /// A reservation of no placeholders (tests of what holds one).
    #[cfg(test)]
    pub(crate) fn empty_for_tests() -> Reservation {
        Reservation {
            workspace: PathBuf::from("/nonexistent"),
            held: Vec::new(),
            record: None,
            lease: crate::Lease::default(),
        }
    }

    /// Keeps `lease` until the placeholders are released.
    pub(crate) fn hold(&mut self, lease: crate::Lease) {
        self.lease = lease;
    }

    /// The lease, taken out: released on its own (when the backend gives
    /// up on the sandbox while its placeholders wait for the reaper).
    pub(crate) fn take_lease(&mut self) -> crate::Lease {
        std::mem::take(&mut self.lease)
    }

    fn release(&mut self) {
        let mut t = table();
        let ws_fd = open_workspace(&self.workspace, None).ok();
        for (rel, id) in self.held.drain(..).rev() {
            let abs = self.workspace.join(&rel);
            let last = match t.slots.get_mut(&abs) {
                Some(slot) => {
                    slot.count = slot.count.saturating_sub(1);
                    slot.count == 0
                }
                None => true,
            };
            if !last {
                continue;
            }
            t.slots.remove(&abs);
            if let Some(fd) = &ws_fd {
                let _ = remove(fd, &rel, id);
            }
        }
        if let Some(rec) = self.record.take() {
            t.live.remove(&rec);
            let _ = std::fs::remove_file(rec);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

/// What removing one placeholder did.
#[derive(Debug, PartialEq, Eq)]
enum Removed {
    Yes,
    /// Gone already, or no longer the directory we made.
    NotOurs,
    /// The user put something in it: theirs now.
    NotEmpty,
}

fn remove(ws_fd: &OwnedFd, rel: &Path, id: Ident) -> std::io::Result<Removed> {
    let (dir, name) = parent_of(ws_fd, rel)?;
    let st = match stat_at(&dir, &name) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(Removed::NotOurs),
        Err(e) => return Err(e.into()),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let same = id.unknown() || Ident::of(&dir, &name, &st) == id;
    // A file placeholder is ours only when known for certain, and still
    // holds no more than a placeholder's few bytes (docs/THREAT_MODEL.md).
    if kind == SFlag::S_IFREG && !id.unknown() && same {
        if st.st_size > MAX_PLACEHOLDER_BYTES {
            return Ok(Removed::NotEmpty);
        }
        return match nix::unistd::unlinkat(
            &dir,
            name.as_c_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) => Ok(Removed::Yes),
            Err(nix::errno::Errno::ENOENT) => Ok(Removed::NotOurs),
            Err(e) => Err(e.into()),
        };
    }
    if kind != SFlag::S_IFDIR || !same {
        return Ok(Removed::NotOurs);
    }
    match nix::unistd::unlinkat(&dir, name.as_c_str(), nix::unistd::UnlinkatFlags::RemoveDir) {
        Ok(()) => Ok(Removed::Yes),
        Err(nix::errno::Errno::ENOTEMPTY | nix::errno::Errno::EEXIST) => Ok(Removed::NotEmpty),
        Err(nix::errno::Errno::ENOENT) => Ok(Removed::NotOurs),
        Err(e) => Err(e.into()),
    }
}

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("reserved")
}

fn record_path(state_dir: &Path, session: &str) -> PathBuf {
    dir(state_dir).join(format!("{session}.json"))
}

fn write_record(path: &Path, rec: &Record) -> Result<(), SandboxError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(format!("create {}", parent.display())))?;
    let tmp = path.with_extension("json.tmp");
    let body = serde_json::to_vec_pretty(rec).map_err(|e| SandboxError::Encode {
        what: "placeholder record".to_string(),
        error: e.to_string(),
    })?;
    std::fs::write(&tmp, body).map_err(io_err(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("write {}", path.display())))
}

/// At supervisor start: removes the placeholders that `backend`'s sandboxes
/// of a crashed supervisor (this state dir's) left, one line per session.
/// Reservations alive in this process, and another backend's, are left alone.
pub(crate) fn reap(state_dir: &Path, backend: BackendKind) -> Vec<Reaped> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir(state_dir)) else {
        return out;
    };
    let live = table().live.clone();
    for e in entries.flatten() {
        let path = e.path();
        if live.contains(&path) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(session) = name.strip_suffix(".json").map(str::to_string) else {
            // A temp file of a write that never finished.
            let _ = std::fs::remove_file(&path);
            continue;
        };
        let rec = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok());
        let detail = match rec {
            Some(Record {
                backend: Some(b), ..
            }) if b != backend => continue,
            None => "unreadable placeholder record removed".to_string(),
            Some(rec) => reap_one(&rec),
        };
        let _ = std::fs::remove_file(&path);
        out.push(Reaped {
            session_id: session,
            detail,
        });
    }
    out
}

fn reap_one(rec: &Record) -> String {
    let Ok(fd) = open_workspace(&rec.workspace, None) else {
        return format!(
            "workspace {} is gone; no placeholders to remove",
            rec.workspace.display()
        );
    };
    let (mut removed, mut kept) = (0, 0);
    for h in rec.held.iter().rev() {
        match remove(&fd, &h.rel, h.id) {
            Ok(Removed::Yes) => removed += 1,
            Ok(Removed::NotEmpty) => kept += 1,
            Ok(Removed::NotOurs) | Err(_) => {}
        }
    }
    let mut s = format!(
        "removed {removed} placeholder(s) from {}",
        rec.workspace.display()
    );
    if kept > 0 {
        s.push_str(&format!("; left {kept} the user has put files in since"));
    }
    s
}

/// Appends the placeholder reaping to the rows another reaper made for the
/// same sessions; new rows for the rest.
pub(crate) fn merge(rows: &mut Vec<Reaped>, placeholders: Vec<Reaped>) {
    for p in placeholders {
        match rows.iter_mut().find(|r| r.session_id == p.session_id) {
            Some(r) => {
                r.detail.push_str("; ");
                r.detail.push_str(&p.detail);
            }
            None => rows.push(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native<'a>(state_dir: &'a Path, session: &'a str) -> Holder<'a> {
        Holder {
            state_dir,
            session,
            backend: BackendKind::Native,
        }
    }

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        (d, ws)
    }

    #[test]
    fn placeholders_are_made_shared_and_removed_by_the_last_holder() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        let rels: Vec<Placeholder> = [".vscode", "tools", "tools/hooks"]
            .iter()
            .map(|r| Placeholder::dir(PathBuf::from(r)))
            .collect();
        let a = acquire(&ws, None, &rels, (0, 0), native(&state, "a")).unwrap();
        for r in &rels {
            assert!(ws.join(&r.rel).is_dir(), "{}", r.rel.display());
        }
        assert!(state.join("reserved/a.json").exists());
        let b = acquire(&ws, None, &rels, (0, 0), native(&state, "b")).unwrap();
        drop(a);
        assert!(ws.join("tools/hooks").is_dir(), "b still holds it");
        assert!(!state.join("reserved/a.json").exists());
        drop(b);
        assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_dir(state.join("reserved")).unwrap().count(),
            0
        );
    }

    #[test]
    fn a_placeholder_the_user_filled_is_left_and_a_replaced_one_untouched() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        let rels = vec![
            Placeholder::dir(PathBuf::from(".idea")),
            Placeholder::dir(PathBuf::from(".envrc")),
        ];
        let r = acquire(&ws, None, &rels, (0, 0), native(&state, "s")).unwrap();
        std::fs::write(ws.join(".idea/workspace.xml"), "x").unwrap();
        std::fs::remove_dir(ws.join(".envrc")).unwrap();
        std::fs::create_dir(ws.join(".envrc")).unwrap();
        drop(r);
        assert!(ws.join(".idea/workspace.xml").exists());
        assert!(ws.join(".envrc").is_dir(), "not the directory we made");
    }

    #[test]
    fn a_crashed_supervisors_placeholders_are_reaped_but_live_ones_kept() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        let live = acquire(
            &ws,
            None,
            &[Placeholder::dir(PathBuf::from(".cargo"))],
            (0, 0),
            native(&state, "live"),
        )
        .unwrap();
        let crashed = acquire(
            &ws,
            None,
            &[Placeholder::dir(PathBuf::from(".husky"))],
            (0, 0),
            native(&state, "crashed"),
        )
        .unwrap();
        // A crash runs no destructors, and the next start is another process.
        let rec = crashed.record.clone().unwrap();
        std::mem::forget(crashed);
        table().live.remove(&rec);
        let reaped = reap(&state, BackendKind::Native);
        assert_eq!(reaped.len(), 1, "{reaped:?}");
        assert_eq!(reaped[0].session_id, "crashed");
        assert!(
            reaped[0].detail.contains("removed 1 placeholder"),
            "{reaped:?}"
        );
        assert!(!ws.join(".husky").exists());
        assert!(ws.join(".cargo").is_dir());
        drop(live);
        assert!(!ws.join(".cargo").exists());
    }

    #[test]
    fn file_placeholders_hold_their_bytes_and_are_removed_unless_changed() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        std::fs::create_dir(ws.join("g")).unwrap();
        let rels = vec![
            Placeholder {
                rel: PathBuf::from("g/commondir"),
                file: Some(".\n"),
            },
            Placeholder {
                rel: PathBuf::from("g/config.worktree"),
                file: Some(""),
            },
        ];
        let r = acquire(&ws, None, &rels, (0, 0), native(&state, "f")).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("g/commondir")).unwrap(),
            ".\n"
        );
        assert_eq!(
            std::fs::read(ws.join("g/config.worktree")).unwrap().len(),
            0
        );
        // The user wrote into one meanwhile: theirs now.
        std::fs::write(ws.join("g/config.worktree"), "[user]\n\tname = me\n").unwrap();
        drop(r);
        assert!(!ws.join("g/commondir").exists());
        assert!(ws.join("g/config.worktree").exists());
    }

    #[test]
    fn nothing_is_created_through_a_symlink() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("tools")).unwrap();
        let e = acquire(
            &ws,
            None,
            &[Placeholder::dir(PathBuf::from("tools/hooks"))],
            (0, 0),
            native(&state, "x"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("placeholder"), "{e}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_backend_reaps_only_its_own_placeholders() {
        let (d, ws) = ws();
        let state = d.path().join("state");
        let docker = Holder {
            state_dir: &state,
            session: "in-docker",
            backend: BackendKind::Docker,
        };
        let held = acquire(
            &ws,
            None,
            &[Placeholder::dir(PathBuf::from(".husky"))],
            (0, 0),
            docker,
        )
        .unwrap();
        let rec = held.record.clone().unwrap();
        std::mem::forget(held);
        table().live.remove(&rec);
        assert!(reap(&state, BackendKind::Native).is_empty());
        assert!(ws.join(".husky").is_dir(), "the native reaper left it");
        let reaped = reap(&state, BackendKind::Docker);
        assert_eq!(reaped.len(), 1, "{reaped:?}");
        assert!(!ws.join(".husky").exists());
    }
}
