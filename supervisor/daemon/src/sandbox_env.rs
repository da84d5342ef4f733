//! The host's facts behind the sandbox's environment (docs/THREAT_MODEL.md,
//! "The sandbox's environment"): which of the owner's toolchain
//! directories exist, the owner's login PATH, their git identity. What is
//! made of them is tollgate-policy's `sandbox_env` (one truth, also for the
//! shell policy); this module only looks.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tollgate_config::CacheMode;
use tollgate_policy::sandbox_env::{self, SandboxView};

use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// The owner's home when it is a real directory on the host (lstat: not a
/// symlink); the sandbox's private home stands at its path.
pub fn owner_home(home: Option<&Path>) -> Option<&Path> {
    home.filter(|h| std::fs::symlink_metadata(h).is_ok_and(|m| m.is_dir()))
}

/// The configured toolchain directories that exist under the owner's home
/// as directories (lstat: a symlink is never followed, nor shown).
pub fn shown_toolchains(configured: &[String], home: Option<&Path>) -> Vec<PathBuf> {
    sandbox_env::toolchain_dirs(owner_home(home), configured, |p| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
    })
}

/// The view the policy judges a session's commands in; `None` when its
/// shell runs on the host (a client's, with `[clients] route_shell =
/// false`).
pub fn view(sup: &Supervisor, session: &Session) -> Option<SandboxView> {
    if !session.client_session_id.is_empty() && !sup.config.clients.route_shell {
        return None;
    }
    let home = owner_home(session.home.as_deref());
    let view = SandboxView::of(
        home,
        shown_toolchains(&sup.config.sandbox.toolchain_dirs, home),
    );
    // The package cache is attached where the sandbox has a private home
    // (backends' private_home) and `[sandbox] cache` is not "off". Should
    // it fail to be made, its variables are unset and what a command
    // writes through them lands beneath `/`, which the sandbox keeps
    // read-only (docs/THREAT_MODEL.md "Package caches").
    let cache = home
        .filter(|h| view.home == *h && sup.config.sandbox.cache != CacheMode::Off)
        .map(|h| h.join(tollgate_sandbox::CACHE_AT));
    Some(view.with_cache(cache))
}

/// HOME, TMPDIR and PATH as the sandbox sets them: HOME the private home
/// (or /tmp), PATH the login PATH reduced to what the sandbox shows.
pub fn set_env(
    env: &mut Vec<(String, String)>,
    home: Option<&tollgate_sandbox::PrivateHome>,
    login_path: Option<&str>,
) {
    let home_dir = sandbox_env::home(home.map(|h| h.path.as_path()));
    let shown = home.map(|h| h.toolchains.as_slice()).unwrap_or_default();
    let path = sandbox_env::path(login_path, &home_dir, shown);
    env.retain(|(k, _)| !matches!(k.as_str(), "HOME" | "PATH" | "TMPDIR"));
    env.insert(0, ("PATH".to_string(), path));
    env.insert(
        1,
        ("HOME".to_string(), home_dir.to_string_lossy().into_owned()),
    );
    env.insert(2, ("TMPDIR".to_string(), sandbox_env::TMPDIR.to_string()));
}

/// PATH of the process that opened the session (the owner's login
/// environment), when it still runs as the owner: read from
/// `/proc/PID/environ`. Only a hint: PATH inside keeps just the directories
/// the sandbox shows.
pub fn login_path(pid: u32, uid: u32) -> Option<String> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let owner = std::fs::metadata(&proc).ok()?.uid();
    if pid == 0 || owner != uid {
        return None;
    }
    let mut env = Vec::new();
    std::fs::File::open(proc.join("environ"))
        .ok()?
        .take(256 << 10)
        .read_to_end(&mut env)
        .ok()?;
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"PATH="))
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_string)
}

/// The owner's git identity (`user.name`, `user.email`; nothing else of
/// their config), from `~/.gitconfig` then `~/.config/git/config`: each
/// opened without following a symlink, a regular file owned by the owner,
/// at most 64 KiB, parsed here (git is not run, no include is followed).
pub fn git_identity(home: &Path, uid: u32) -> Option<(String, String)> {
    let mut name = None;
    let mut email = None;
    for rel in [".config/git/config", ".gitconfig"] {
        let Some(text) = read_owned(&home.join(rel), uid) else {
            continue;
        };
        let (n, e) = parse_user(&text);
        // ~/.gitconfig is read last: git lets it win.
        name = n.or(name);
        email = e.or(email);
    }
    Some((name?, email?))
}

fn read_owned(p: &Path, uid: u32) -> Option<String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.uid() != uid {
        return None;
    }
    let mut text = String::new();
    f.take(64 << 10).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `name` and `email` of the `[user]` section (the last of each wins).
fn parse_user(text: &str) -> (Option<String>, Option<String>) {
    let (mut in_user, mut name, mut email) = (false, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_user = line.trim_start_matches('[').trim_end_matches(']').trim() == "user";
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if !in_user {
            continue;
        }
        let v = clean_value(v);
        match k.trim().to_ascii_lowercase().as_str() {
            "name" => name = v.or(name),
            "email" => email = v.or(email),
            _ => {}
        }
    }
    (name, email)
}

/// A value without comments and quotes; `None` when empty, long, or holding
/// control characters.
fn clean_value(v: &str) -> Option<String> {
    let v = v.trim();
    let v = match v.strip_prefix('"').and_then(|r| r.split_once('"')) {
        Some((inner, _)) => inner,
        None => v.split(['#', ';']).next().unwrap_or("").trim(),
    };
    (!v.is_empty() && v.len() <= 256 && !v.chars().any(|c| c.is_control() || c == '\\'))
        .then(|| v.to_string())
}

/// The `~/.gitconfig` the sandbox's private home holds: the identity only.
pub fn gitconfig(identity: Option<&(String, String)>) -> String {
    match identity {
        Some((name, email)) => format!(
            "[user]\n\tname = \"{}\"\n\temail = \"{}\"\n",
            name.replace('"', "'"),
            email.replace('"', "'")
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_user_name_and_email_are_taken() {
        let text = "[core]\n\thooksPath = /x\n[user]\n\tname = \"Ada L\" # me\n\temail = ada@example.invalid ; c\n\tsigningkey = K\n[include]\n\tpath = /etc/shadow\n[user]\n\tname = Ada Lovelace\n";
        assert_eq!(
            parse_user(text),
            (
                Some("Ada Lovelace".to_string()),
                Some("ada@example.invalid".to_string())
            )
        );
        assert_eq!(parse_user("[user]\nname = a\u{7}b\n"), (None, None));
        let g = gitconfig(Some(&("A \"x\"".to_string(), "a@b".to_string())));
        assert_eq!(g, "[user]\n\tname = \"A 'x'\"\n\temail = \"a@b\"\n");
    }

    #[test]
    fn a_symlinked_or_foreign_config_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        std::fs::write(d.path().join("real"), "[user]\nname=a\nemail=b\n").unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join(".gitconfig")).unwrap();
        assert_eq!(git_identity(d.path(), me), None);
        std::fs::remove_file(d.path().join(".gitconfig")).unwrap();
        std::fs::rename(d.path().join("real"), d.path().join(".gitconfig")).unwrap();
        assert_eq!(
            git_identity(d.path(), me),
            Some(("a".to_string(), "b".to_string()))
        );
        assert_eq!(git_identity(d.path(), me + 1), None);
    }
}
