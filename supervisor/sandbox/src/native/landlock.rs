//! Step 8: Landlock, with `HardRequirement`, checked `FullyEnforced`.
//!
//! Handled (so denied unless a rule below grants it): every filesystem right
//! of ABI 6, abstract unix sockets and signals outside the sandbox (scopes).
//! Granted:
//!
//! | where | rights |
//! |---|---|
//! | /usr, /bin, /sbin, /lib*, /opt | read, list, execute |
//! | /etc, entry by entry, without secrets ([`ETC_DENIED`], `*secret*`, `*.key`, host keys, ssl/private, ...) | read (+ list for dirs) |
//! | /proc (the sandbox's own), /sys/devices/system/cpu | read, list (pid 1's own domain: + write, for a command's child to set its loginuid before it takes its own domain; init.rs) |
//! | /dev | list |
//! | /dev/{null,zero,full,random,urandom,tty} | read, write, ioctl (null, zero and full have none, random's that change the pool need CAP_SYS_ADMIN: `isatty()` on /dev/null is no refusal to report) |
//! | /dev/pts | read, write, list, ioctl |
//! | the workspace, /tmp, /dev/shm, the private home (its toolchains read-only mounts) | everything except making char/block devices |
//! //!
//! TCP bind and connect are not handled: the sandbox's own network
//! namespace is the wall (docs/THREAT_MODEL.md "Network"). Its only device
//! is `lo`, on which the session's own servers and the supervisor's
//! listeners (forwarded egress, the network wall's proxies) are all there
//! is; the host's loopback and other sessions' are in other namespaces, out
//! of reach. With `[network]`, every connect to another address is captured
//! by the rules the supervisor loaded there (`crate::wall`).
//!
//! Landlock does not cover chmod/chown/utime/setxattr, UDP, or connect() to
//! pathname sockets below ABI 9; the mount namespace (what is not mounted is
//! not there, what is mounted is read-only) and the network namespace do.
//!
//! A root-owned session runs as uid 0 without capabilities: file permissions
//! do not stop it reading /etc/shadow (root owns it); only this ruleset does.

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::SetupError;

/// The Landlock ABI whose features we use (scopes need 6). The kernel may be newer.
pub(crate) const TARGET_ABI: ABI = ABI::V6;
pub(crate) const MIN_ABI: i64 = 6;

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

fn denied_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ETC_DENIED.contains(&name)
        || lower.contains("secret")
        || lower.ends_with(".key")
        || lower.ends_with(".keytab")
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
const NESTED: &[&str] = &["ssh", "ssl", "security", "pki"];

fn ro_exec() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute
}
fn ro_dir() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}
fn ro_file() -> BitFlags<AccessFs> {
    AccessFs::ReadFile.into()
}
fn dev_rw() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate
}
fn rw_all() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> SetupError {
    SetupError {
        step: "landlock",
        detail: format!("{what}: {e}"),
    }
}

/// What the rules grant, for the setup report.
pub(crate) struct Prepared {
    pub ruleset: RulesetCreated,
    /// The same file-system and network rules without the scopes, for the
    /// domain each command gets of its own (init.rs), so the kernel's audit
    /// records name the command's domain (docs/THREAT_MODEL.md, "Refusals,
    /// attributed"). Scopes stay with the sandbox's domain: commands may
    /// signal and connect to each other as before.
    pub per_call: Option<OwnedFd>,
    pub etc_granted: usize,
    pub etc_withheld: Vec<String>,
}

struct Builder {
    ruleset: Option<RulesetCreated>,
    per_call: Option<RulesetCreated>,
    /// Canonical paths nothing may grant, nor an ancestor of.
    denied: Vec<PathBuf>,
}

impl Builder {
    /// Adds a rule for an /etc entry (following symlinks) unless its target
    /// is, is inside, or contains a denied path (a symlink to /etc/shadow or
    /// to / must not grant it). Missing paths are skipped.
    fn grant_checked(
        &mut self,
        path: &Path,
        dir_access: BitFlags<AccessFs>,
        file_access: BitFlags<AccessFs>,
    ) -> Result<bool, SetupError> {
        let canon = match fs::canonicalize(path) {
            Ok(c) => c,
            Err(_) => return Ok(false),
        };
        if self
            .denied
            .iter()
            .any(|d| canon.starts_with(d) || d.starts_with(&canon))
        {
            return Ok(false);
        }
        self.grant(&canon, dir_access, file_access)
    }

    /// An /etc entry as readdir saw it: a plain file or directory is opened
    /// as is (O_NOFOLLOW, no lookup beyond /etc); a symlink goes through
    /// [`Builder::grant_checked`].
    fn grant_entry(
        &mut self,
        path: &Path,
        ft: Option<fs::FileType>,
        dir_access: BitFlags<AccessFs>,
        file_access: BitFlags<AccessFs>,
    ) -> Result<bool, SetupError> {
        let Some(ft) = ft.filter(|t| !t.is_symlink()) else {
            return self.grant_checked(path, dir_access, file_access);
        };
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
            return Ok(false);
        };
        let Ok(fd) = super::sys::openat2_path(libc::AT_FDCWD, &c, libc::O_NOFOLLOW, 0) else {
            return Ok(false);
        };
        let access = if ft.is_dir() { dir_access } else { file_access };
        self.add(path, fd.as_fd(), access)?;
        Ok(true)
    }

    /// Adds one rule to the sandbox's ruleset and to the per-call one.
    fn add(
        &mut self,
        path: &Path,
        fd: BorrowedFd<'_>,
        access: BitFlags<AccessFs>,
    ) -> Result<(), SetupError> {
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| err("ruleset", "lost after an earlier error"))?;
        let rule_err = |e| err(format!("rule for {}", path.display()), e);
        self.ruleset = Some(
            ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(rule_err)?,
        );
        if let Some(per_call) = self.per_call.take() {
            self.per_call = Some(
                per_call
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(rule_err)?,
            );
        }
        Ok(())
    }

    /// Adds `access` beneath `path` to the sandbox's ruleset only, not to
    /// the per-call one: a command's child may use it after fork and before
    /// it takes its own domain (init.rs writes its /proc/self/loginuid
    /// there), the command and everything it starts may not.
    fn grant_base_only(
        &mut self,
        path: &Path,
        access: BitFlags<AccessFs>,
    ) -> Result<(), SetupError> {
        let fd = PathFd::new(path).map_err(|e| err(path.display(), e))?;
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| err("ruleset", "lost after an earlier error"))?;
        self.ruleset = Some(
            ruleset
                .add_rule(PathBeneath::new(fd.as_fd(), access))
                .map_err(|e| err(format!("rule for {}", path.display()), e))?,
        );
        Ok(())
    }

    /// Adds a rule for `path` (following symlinks). Missing paths are skipped.
    fn grant(
        &mut self,
        path: &Path,
        dir_access: BitFlags<AccessFs>,
        file_access: BitFlags<AccessFs>,
    ) -> Result<bool, SetupError> {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(_) => return Ok(false),
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| err(path.display(), e))?;
        let access = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            dir_access
        } else {
            file_access
        };
        self.add(path, fd.as_fd(), access)?;
        Ok(true)
    }
}

/// Builds the ruleset in the sandbox's own view (call after pivot_root,
/// before dropping privileges: listing /etc needs no rights afterwards).
/// `home`: the private home, writable like /tmp. `per_call`: also build
/// [`Prepared::per_call`].
pub(crate) fn prepare(
    workspace: &Path,
    home: Option<&Path>,
    hidden: &[PathBuf],
    per_call: bool,
) -> Result<Prepared, SetupError> {
    let ruleset = new_ruleset(true)?;
    let per_call = if per_call {
        Some(new_ruleset(false)?)
    } else {
        None
    };

    let mut etc = scan_etc()?;
    for h in hidden {
        etc.denied.insert(h.clone());
    }
    // A hidden path is masked (mounts.rs): no rule for what covers it.
    etc.candidates
        .retain(|(c, _)| !hidden.iter().any(|h| c.starts_with(h)));
    let mut denied_canon: Vec<PathBuf> = Vec::new();
    for d in &etc.denied {
        denied_canon.push(d.clone());
        if let Ok(c) = fs::canonicalize(d) {
            denied_canon.push(c);
        }
    }
    let mut b = Builder {
        ruleset: Some(ruleset),
        per_call,
        denied: denied_canon,
    };

    let mut etc_granted = 0;
    for (c, ft) in &etc.candidates {
        if b.grant_entry(c, *ft, ro_dir(), ro_file())? {
            etc_granted += 1;
        }
    }
    grant_system(&mut b)?;
    if b.per_call.is_some() {
        b.grant_base_only(Path::new("/proc"), AccessFs::WriteFile.into())?;
    }
    // The private home: its toolchains are read-only mounts, its masked
    // credential paths mode-000 files no rule reaches.
    let writable = [Path::new("/tmp"), Path::new("/dev/shm"), workspace];
    for p in writable.into_iter().chain(home) {
        if !b.grant(p, rw_all(), rw_all() & AccessFs::from_file(TARGET_ABI))? {
            return Err(err(p.display(), "missing in the sandbox view"));
        }
    }
    let mut withheld = etc.withheld;
    withheld.sort();
    let ruleset = b
        .ruleset
        .take()
        .ok_or_else(|| err("ruleset", "lost after an earlier error"))?;
    let per_call = b.per_call.take().and_then(Option::<OwnedFd>::from);
    Ok(Prepared {
        ruleset,
        per_call,
        etc_granted,
        etc_withheld: withheld,
    })
}

/// A ruleset handling every right of [`TARGET_ABI`]; `scoped`: and its scopes.
fn new_ruleset(scoped: bool) -> Result<RulesetCreated, SetupError> {
    let r = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(TARGET_ABI));
    let r = if scoped {
        r.and_then(|r| r.scope(Scope::from_all(TARGET_ABI)))
    } else {
        r
    };
    r.and_then(|r| r.create())
        .map_err(|e| err("create ruleset", e))
}

/// The restrict_self flags of a command's own domain: its denials are
/// logged after it execs (and before, as by default); needs ABI 7.
pub(crate) const PER_CALL_LOG_FLAGS: u32 = 1 << 1; // LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON

/// Gives the calling process a domain of its own from `ruleset` (the
/// per-call rules), with logging on ([`PER_CALL_LOG_FLAGS`]). Call after
/// fork, before exec; no_new_privs is already set.
pub(crate) fn restrict_per_call(ruleset: BorrowedFd<'_>) -> Result<(), std::io::Error> {
    use std::os::fd::AsRawFd;
    // SAFETY: landlock_restrict_self takes an fd and flags; no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            ruleset.as_raw_fd(),
            PER_CALL_LOG_FLAGS,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// /etc entry by entry: what is denied (and said to be withheld), and what
/// may be granted read-only.
#[derive(Default)]
struct EtcScan {
    withheld: Vec<String>,
    denied: BTreeSet<PathBuf>,
    candidates: Vec<(PathBuf, Option<fs::FileType>)>,
}

fn scan_etc() -> Result<EtcScan, SetupError> {
    let mut scan = EtcScan::default();
    let entries = fs::read_dir(Path::new("/etc")).map_err(|e| err("read /etc", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| err("read /etc", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if denied_name(&name) {
            scan.denied.insert(path);
            scan.withheld.push(format!("/etc/{name}"));
        } else if NESTED.contains(&name.as_str()) && path.is_dir() {
            scan.nested(&name, &path)?;
        } else {
            scan.candidates.push((path, entry.file_type().ok()));
        }
    }
    Ok(scan)
}

impl EtcScan {
    /// A [`NESTED`] directory of /etc, entry by entry (and /etc/pki one
    /// level further).
    fn nested(&mut self, name: &str, path: &Path) -> Result<(), SetupError> {
        for sub in fs::read_dir(path).map_err(|e| err(path.display(), e))? {
            let sub = sub.map_err(|e| err(path.display(), e))?;
            let sub_name = sub.file_name().to_string_lossy().into_owned();
            let sub_path = sub.path();
            if nested_denied(name, &sub_name) || denied_name(&sub_name) {
                self.denied.insert(sub_path);
                self.withheld.push(format!("/etc/{name}/{sub_name}"));
            } else if name == "pki" && sub_path.is_dir() {
                for leaf in fs::read_dir(&sub_path).map_err(|e| err(sub_path.display(), e))? {
                    let leaf = leaf.map_err(|e| err(sub_path.display(), e))?;
                    let leaf_name = leaf.file_name().to_string_lossy().into_owned();
                    if leaf_name == "private" || denied_name(&leaf_name) {
                        self.denied.insert(leaf.path());
                        self.withheld.push(leaf.path().display().to_string());
                    } else {
                        self.candidates.push((leaf.path(), leaf.file_type().ok()));
                    }
                }
            } else {
                self.candidates.push((sub_path, sub.file_type().ok()));
            }
        }
        Ok(())
    }
}

/// The system directories (read and execute), /proc and the CPU counts
/// (read), and /dev: its listing, the device nodes and a private devpts.
fn grant_system(b: &mut Builder) -> Result<(), SetupError> {
    for name in super::mounts::SYSTEM_DIRS {
        if *name != "etc" {
            b.grant(
                &Path::new("/").join(name),
                ro_exec(),
                ro_exec() & !AccessFs::ReadDir,
            )?;
        }
    }
    b.grant(Path::new("/proc"), ro_dir(), ro_file())?;
    b.grant(Path::new("/sys/devices/system/cpu"), ro_dir(), ro_file())?;
    b.grant(Path::new("/dev"), AccessFs::ReadDir.into(), BitFlags::EMPTY)?;
    for node in super::mounts::DEV_NODES {
        let file = dev_rw() | AccessFs::IoctlDev;
        b.grant(&Path::new("/dev").join(node), file, file)?;
    }
    b.grant(
        Path::new("/dev/pts"),
        dev_rw() | AccessFs::ReadDir | AccessFs::IoctlDev,
        dev_rw() | AccessFs::IoctlDev,
    )?;
    Ok(())
}

/// Restricts the calling thread (and every later child) for good.
pub(crate) fn enforce(ruleset: RulesetCreated) -> Result<(), SetupError> {
    let status = ruleset
        .restrict_self()
        .map_err(|e| err("restrict_self", e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(err(
            "ruleset",
            format!(
                "not fully enforced ({:?}); refusing to run a weaker sandbox",
                status.ruleset
            ),
        ));
    }
    if !status.no_new_privs {
        return Err(err("no_new_privs", "not set"));
    }
    Ok(())
}
