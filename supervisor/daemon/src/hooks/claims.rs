//! Which uid a client session id belongs to, kept on disk so a supervisor
//! restart forgets nothing: after one, the first event of a resumed
//! conversation could otherwise come from any local user (the id is on the
//! command line of `claude --resume`), who would take the id and lock its
//! owner out.
//!
//! One file per client session id under `<state_dir>/client-sessions/`,
//! named `<client>.<id>` (the id is letters, digits, `-`, `_` and `.`, never
//! `..`), holding the uid. The first claim writes it whole to a fresh file and
//! links it into place (so a parallel claim never reads it half written),
//! then `fsync`s the directory, before the session opens; a later
//! claim reads it (`O_NOFOLLOW`) and must come from that uid. A file that
//! cannot be read or makes no sense refuses the claim: fail closed.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_policy::clients::Client;
use tonic::Status;

/// The directory, under the state directory.
pub const CLAIMS_DIR: &str = "client-sessions";

/// The durable table.
#[derive(Debug)]
pub struct Claims {
    dir: PathBuf,
}

impl Claims {
    /// Opens (creating, mode 0700) `<state_dir>/client-sessions`.
    pub fn open(state_dir: &Path) -> std::io::Result<Claims> {
        let dir = state_dir.join(CLAIMS_DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let md = std::fs::symlink_metadata(&dir)?;
        if !md.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory; remove it so the supervisor can keep client sessions there",
                dir.display()
            )));
        }
        Ok(Claims { dir })
    }

    /// Claims `session_id` of `client` for `uid`: the first claim wins, for
    /// good; a claim by another uid is refused.
    pub fn claim(&self, client: Client, session_id: &str, uid: u32) -> Result<(), Status> {
        let path = self.dir.join(format!("{}.{session_id}", client.as_str()));
        let unavailable = |what: &str, e: std::io::Error| {
            Status::unavailable(format!(
                "cannot {what} the owner of {client} session {session_id} in {} ({e}); the call is refused, hint: check the supervisor's state directory",
                self.dir.display()
            ))
        };
        match self.publish(&path, uid) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let owner = read_owner(&path).map_err(|e| unavailable("read", e))?;
                if owner == uid {
                    return Ok(());
                }
                Err(Status::permission_denied(format!(
                    "{client} session {session_id} belongs to uid {owner}; the caller is uid {uid}. Each user's client runs its own sessions"
                )))
            }
            Err(e) => Err(unavailable("record", e)),
        }
    }

    /// Writes `uid` to a fresh file beside `path`, makes it durable, then
    /// links it to `path`, which fails with `AlreadyExists` when another
    /// claim got there first: a reader never sees a claim half written (two
    /// parallel hooks of one session both open it).
    fn publish(&self, path: &Path, uid: u32) -> std::io::Result<()> {
        let tmp = self.fresh_name();
        // A leftover of an earlier supervisor with the same pid.
        let _ = std::fs::remove_file(&tmp);
        let written = write_new(&tmp, uid).and_then(|_| std::fs::hard_link(&tmp, path));
        let removed = std::fs::remove_file(&tmp);
        written?;
        removed?;
        File::open(&self.dir)?.sync_all()
    }

    /// A name in the directory no other claim uses (`.` first: never a
    /// client's, whose names start with the client).
    fn fresh_name(&self) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!(".claim-{}-{n}", std::process::id()))
    }
}

fn write_new(path: &Path, uid: u32) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)?;
    f.write_all(format!("{uid}\n").as_bytes())?;
    f.sync_all()
}

fn read_owner(path: &Path) -> std::io::Result<u32> {
    let mut text = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .take(32)
        .read_to_string(&mut text)?;
    text.trim()
        .parse()
        .map_err(|_| std::io::Error::other(format!("{} holds no uid", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_uid_keeps_the_id_across_a_reopen() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::open(d.path()).unwrap();
        c.claim(Client::ClaudeCode, "s-1", 1000).unwrap();
        c.claim(Client::ClaudeCode, "s-1", 1000).unwrap();
        // Another client's id of the same text is another session.
        c.claim(Client::Codex, "s-1", 2000).unwrap();
        // As after a restart.
        let again = Claims::open(d.path()).unwrap();
        let e = again.claim(Client::ClaudeCode, "s-1", 2000).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            "claude-code session s-1 belongs to uid 1000; the caller is uid 2000. Each user's client runs its own sessions"
        );
    }

    #[test]
    fn parallel_claims_of_one_id_never_read_it_half_written() {
        let t = tempfile::tempdir().unwrap();
        let c = std::sync::Arc::new(Claims::open(t.path()).unwrap());
        for round in 0..50 {
            let id = format!("par-{round}");
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (c, id) = (std::sync::Arc::clone(&c), id.clone());
                    std::thread::spawn(move || c.claim(Client::ClaudeCode, &id, 1000))
                })
                .collect();
            for th in threads {
                th.join().unwrap().unwrap();
            }
        }
        let left: Vec<_> = std::fs::read_dir(t.path().join(CLAIMS_DIR))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    #[test]
    fn a_file_that_makes_no_sense_or_a_planted_link_refuses_the_claim() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::open(d.path()).unwrap();
        let dir = d.path().join(CLAIMS_DIR);
        std::fs::write(dir.join("codex.garbled"), "nobody\n").unwrap();
        let e = c.claim(Client::Codex, "garbled", 1).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(e.message().contains("holds no uid"), "{}", e.message());
        std::os::unix::fs::symlink("/etc/passwd", dir.join("codex.linked")).unwrap();
        assert_eq!(
            c.claim(Client::Codex, "linked", 0).unwrap_err().code(),
            tonic::Code::Unavailable
        );
    }
}
