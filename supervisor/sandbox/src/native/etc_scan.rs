//! /etc entry by entry, as it is now: what a command's own Landlock domain
//! may grant read-only (`per_call.rs`), what it withholds, and the stamps
//! of every directory read, which say when a scan is out of date.
//!
//! Landlock has no deny rule, so a secret in /etc is hidden by granting
//! everything else: each entry (and each entry of a [`NESTED`] directory)
//! gets a rule of its own, and a name never granted stays unreadable even
//! when it is created later. A rule holds the inode the entry had when it
//! was read, so a file the host replaces by a rename (`useradd` rewriting
//! /etc/passwd) needs a new scan: the stamps (`mtime`, `ctime` and inode
//! of /etc and of each directory read beneath it) change with every entry
//! created, removed or renamed in them (docs/THREAT_MODEL.md, "run_bash").

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Top-level /etc entries never readable.
pub(crate) const ETC_DENIED: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "sudo_logsrvd.conf",
    "tollgate",
    "letsencrypt",
    "openvpn",
    "wireguard",
    "ipsec.secrets",
    "ipsec.d",
    "krb5.keytab",
    "NetworkManager",
    "ppp",
    "credstore",
    "credstore.encrypted",
    "libvirt",
    "mysql",
    "docker",
    "containerd",
    "kubernetes",
    "rancher",
    "ceph",
    "samba",
    "exim4",
    "postfix",
    "nslcd.conf",
    "ldap.secret",
    "pam_ldap.secret",
    "cups",
    "opasswd",
];

/// Besides [`ETC_DENIED`]: any name holding `shadow`, `sudoers`, `secret`
/// or `.keytab`, or ending in `.key` or holding `.key.`, because the tools
/// that rewrite such files write the new one under another name first and
/// rename it into place (`shadow+` and `gshadow+` of shadow-utils,
/// `.#shadowXXXXXX` of systemd, `sudoers.tmp` of visudo, `x.key.tmp`): a
/// scan that met it under that name would otherwise grant the inode that
/// then becomes /etc/shadow.
pub(crate) fn denied_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ETC_DENIED.contains(&name)
        || lower.contains("shadow")
        || lower.contains("sudoers")
        || lower.contains("secret")
        || lower.ends_with(".key")
        || lower.contains(".key.")
        || lower.contains(".keytab")
        || lower.ends_with(".p12")
        || lower.ends_with(".pfx")
}

/// /etc subdirectories granted entry by entry, and what is left out of them.
fn nested_denied(dir: &str, name: &str) -> bool {
    match dir {
        "ssh" => name.starts_with("ssh_host_") && !name.ends_with(".pub"),
        "ssl" | "pki" => name == "private",
        "security" => name == "opasswd",
        _ => false,
    }
}
pub(crate) const NESTED: &[&str] = &["ssh", "ssl", "security", "pki"];

/// How long after a directory's last change its stamp is not trusted: a
/// change within the same tick of the file system's clock leaves the
/// stamp as it was (the racy case of git's index), so a scan of a
/// directory changed this recently is done again at the next command.
const SETTLE: Duration = Duration::from_secs(2);

/// What identifies one state of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn stamp_of(path: &Path) -> Option<Stamp> {
    let st = nix::sys::stat::stat(path).ok()?;
    Some(Stamp {
        dev: st.st_dev,
        ino: st.st_ino,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// Whether `s` changed within [`SETTLE`] of now (or in the future: a
/// clock set back).
fn changed_lately(s: &Stamp) -> bool {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let ctime = Duration::new(
        u64::try_from(s.ctime.0).unwrap_or(0),
        u32::try_from(s.ctime.1).unwrap_or(0),
    );
    now.checked_sub(ctime).is_none_or(|age| age < SETTLE)
}

/// The directories one scan read, each as it was just before.
#[derive(Debug, Default)]
pub(crate) struct Stamps {
    dirs: Vec<(PathBuf, Option<Stamp>)>,
    /// Some directory had changed within [`SETTLE`] of its scan.
    racy: bool,
}

impl Stamps {
    /// Records `path` before it is read.
    fn record(&mut self, path: &Path) {
        let stamp = stamp_of(path);
        self.racy |= stamp.is_some_and(|s| changed_lately(&s));
        self.dirs.push((path.to_path_buf(), stamp));
    }

    /// Whether a scan now would read what the recorded one read: every
    /// directory unchanged, and none was changing when it was read.
    pub(crate) fn current(&self) -> bool {
        !self.racy && self.dirs.iter().all(|(p, s)| stamp_of(p) == *s)
    }
}

/// /etc entry by entry: what is withheld (said in the posture), and what
/// may be granted read-only, as readdir saw it.
#[derive(Default)]
pub(crate) struct EtcScan {
    pub withheld: Vec<String>,
    pub candidates: Vec<(PathBuf, Option<fs::FileType>)>,
    pub stamps: Stamps,
}

/// Scans /etc, leaving out everything at or beneath a `hidden` path (it is
/// masked, `mounts.rs`: no rule for what covers it).
pub(crate) fn scan(hidden: &[PathBuf]) -> Result<EtcScan, String> {
    let mut scan = EtcScan::default();
    let etc = Path::new("/etc");
    scan.stamps.record(etc);
    let entries = fs::read_dir(etc).map_err(|e| format!("read /etc: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("read /etc: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if denied_name(&name) {
            scan.withheld.push(format!("/etc/{name}"));
        } else if NESTED.contains(&name.as_str()) && path.is_dir() {
            scan.nested(&name, &path);
        } else {
            scan.candidates.push((path, entry.file_type().ok()));
        }
    }
    scan.candidates
        .retain(|(c, _)| !hidden.iter().any(|h| c.starts_with(h)));
    scan.withheld.sort();
    Ok(scan)
}

impl EtcScan {
    /// A [`NESTED`] directory of /etc, entry by entry (and /etc/pki one
    /// level further). One that cannot be read grants nothing.
    fn nested(&mut self, name: &str, path: &Path) {
        self.stamps.record(path);
        let Ok(entries) = fs::read_dir(path) else {
            self.withheld.push(path.display().to_string());
            return;
        };
        for sub in entries.flatten() {
            let sub_name = sub.file_name().to_string_lossy().into_owned();
            let sub_path = sub.path();
            if nested_denied(name, &sub_name) || denied_name(&sub_name) {
                self.withheld.push(format!("/etc/{name}/{sub_name}"));
            } else if name == "pki" && sub_path.is_dir() {
                self.pki_leaves(&sub_path);
            } else {
                self.candidates.push((sub_path, sub.file_type().ok()));
            }
        }
    }

    /// One directory of /etc/pki, entry by entry.
    fn pki_leaves(&mut self, dir: &Path) {
        self.stamps.record(dir);
        let Ok(entries) = fs::read_dir(dir) else {
            self.withheld.push(dir.display().to_string());
            return;
        };
        for leaf in entries.flatten() {
            let leaf_name = leaf.file_name().to_string_lossy().into_owned();
            if leaf_name == "private" || denied_name(&leaf_name) {
                self.withheld.push(leaf.path().display().to_string());
            } else {
                self.candidates.push((leaf.path(), leaf.file_type().ok()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_a_rewrite_passes_through_are_denied() {
        for name in [
            "shadow",
            "shadow+",
            "gshadow+",
            ".#shadowa1B2c3",
            "shadow.lock",
            "sudoers.tmp",
            "ipsec.secrets",
            "server.key",
            "krb5.keytab",
            "krb5.keytab.Xa1b2",
            "server.key.new",
        ] {
            assert!(denied_name(name), "{name}");
        }
        for name in ["passwd", "passwd+", "group", "hosts", "ssl", "sudo.conf"] {
            assert!(!denied_name(name), "{name}");
        }
    }

    #[test]
    fn a_directory_changed_since_its_stamp_is_out_of_date() {
        let dir = std::env::temp_dir().join(format!("tollgate-stamps-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let mut s = Stamps::default();
        s.record(&dir);
        // Just created: racy, so not current however unchanged it looks.
        assert!(!s.current());
        s.racy = false;
        assert!(s.current());
        // Past the file system clock's tick, then a rename into it.
        std::thread::sleep(Duration::from_millis(50));
        fs::write(dir.join("a"), "x").unwrap();
        fs::rename(dir.join("a"), dir.join("b")).unwrap();
        assert!(!s.current(), "a rename into the directory is a change");
        let mut again = Stamps::default();
        again.record(&dir);
        fs::remove_dir_all(&dir).unwrap();
        again.racy = false;
        assert!(!again.current(), "a removed directory is a change");
    }
}
