//! Credential paths: the one table (docs/THREAT_MODEL.md, "Credential paths").
//!
//! [`HOME_CREDENTIALS`] lists the credential files and directories beneath a
//! home directory (`.ssh`, `.aws`, `.git-credentials`, ...);
//! [`SYSTEM_CREDENTIALS`] the host-wide secrets and the sockets and state of
//! container engines, which are root on the host.
//!
//! Everything that keeps credentials from the agent uses this table and no
//! copy of it: the policy's path floor (a path argument at or inside one is
//! refused, `floor:credential-path`), the daemon's workspace check (a
//! workspace at, inside or holding one is refused), both sandboxes (the
//! daemon resolves the table against every home in /etc/passwd and root's,
//! read once, and hands the concrete paths to the backend in
//! `SandboxSpec::hidden`: the native sandbox masks those it would otherwise
//! show, and Docker refuses a bind mount that overlaps one), `supervisorctl
//! doctor`, and docs/THREAT_MODEL.md (which holds [`markdown_table`]'s
//! output, checked by a test).
//!
//! Pure data and pure functions: reading /etc/passwd is the daemon's job.

use std::path::{Component, Path, PathBuf};

/// What a credential path is when it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// A directory: the name and everything beneath it.
    Dir,
    /// A file.
    File,
    /// A unix socket.
    Socket,
}

impl CredentialKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Dir => "directory",
            CredentialKind::File => "file",
            CredentialKind::Socket => "socket",
        }
    }
}

/// One credential path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialPath {
    /// Relative to a home directory ([`HOME_CREDENTIALS`]) or absolute
    /// ([`SYSTEM_CREDENTIALS`]); `/`-separated normal components.
    pub path: &'static str,
    pub kind: CredentialKind,
    /// What it is, as a noun phrase: "an SSH key directory".
    pub what: &'static str,
}

const fn entry(path: &'static str, kind: CredentialKind, what: &'static str) -> CredentialPath {
    CredentialPath { path, kind, what }
}

use CredentialKind::{Dir, File, Socket};

/// Credential directories and files beneath a home directory.
pub const HOME_CREDENTIALS: &[CredentialPath] = &[
    entry(".ssh", Dir, "an SSH key directory"),
    entry(".aws", Dir, "AWS credentials"),
    entry(".config/gcloud", Dir, "Google Cloud credentials"),
    entry(".azure", Dir, "Azure credentials"),
    entry(".docker", Dir, "Docker credentials"),
    entry(".kube", Dir, "Kubernetes credentials"),
    entry(".gnupg", Dir, "a GnuPG keyring"),
    entry(".netrc", File, "a .netrc password file"),
    entry(".git-credentials", File, "stored git credentials"),
    entry(".config/gh", Dir, "GitHub CLI credentials"),
    entry(".pgpass", File, "a PostgreSQL password file"),
    entry(".password-store", Dir, "a password store"),
    entry(".vault-token", File, "a Vault token"),
    entry(".cargo/credentials", File, "crate registry credentials"),
    entry(
        ".cargo/credentials.toml",
        File,
        "crate registry credentials",
    ),
];

/// Host-wide secrets, and the sockets and state of container engines (root
/// on the host).
pub const SYSTEM_CREDENTIALS: &[CredentialPath] = &[
    entry("/etc/shadow", File, "the system password file"),
    entry("/etc/gshadow", File, "the system group password file"),
    entry("/etc/sudoers", File, "the sudo configuration"),
    entry("/etc/sudoers.d", Dir, "the sudo configuration"),
    entry(
        "/var/run/docker.sock",
        Socket,
        "the Docker socket (root on the host)",
    ),
    entry(
        "/run/docker.sock",
        Socket,
        "the Docker socket (root on the host)",
    ),
    entry("/run/docker", Dir, "the Docker engine's runtime state"),
    entry("/var/lib/docker", Dir, "the Docker engine's state"),
    entry(
        "/run/containerd",
        Dir,
        "the containerd socket (root on the host)",
    ),
    entry(
        "/var/run/containerd",
        Dir,
        "the containerd socket (root on the host)",
    ),
    entry("/var/lib/containerd", Dir, "containerd's state"),
    entry("/run/podman", Dir, "the Podman socket"),
];

/// Every credential path on a host with these home directories: each
/// home's [`HOME_CREDENTIALS`] (root's `/root` always among them; a home
/// that is `/`, `/nonexistent` or not absolute has none), then
/// [`SYSTEM_CREDENTIALS`]. Homes in order, each once.
pub fn resolve<'a>(homes: impl IntoIterator<Item = &'a Path>) -> Vec<PathBuf> {
    let mut homes: Vec<&Path> = homes
        .into_iter()
        .chain([Path::new("/root")])
        .filter(|h| h.is_absolute() && *h != Path::new("/") && *h != Path::new("/nonexistent"))
        .collect();
    homes.sort();
    homes.dedup();
    let mut out =
        Vec::with_capacity(homes.len() * HOME_CREDENTIALS.len() + SYSTEM_CREDENTIALS.len());
    for h in homes {
        out.extend(HOME_CREDENTIALS.iter().map(|c| h.join(c.path)));
    }
    out.extend(SYSTEM_CREDENTIALS.iter().map(|c| PathBuf::from(c.path)));
    out
}

/// The home credential `p` names by its own components, wherever it is
/// (`/srv/bob/.config/gcloud/x` names `.config/gcloud`, whoever's home
/// `/srv/bob` is): for a workspace, which must not lie in one.
pub fn named_in(p: &Path) -> Option<&'static CredentialPath> {
    let comps: Vec<&std::ffi::OsStr> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            Component::RootDir
            | Component::CurDir
            | Component::ParentDir
            | Component::Prefix(_) => None,
        })
        .collect();
    (0..comps.len()).find_map(|i| {
        HOME_CREDENTIALS.iter().find(|c| {
            let want: Vec<&str> = c.path.split('/').collect();
            comps.len() - i >= want.len() && want.iter().zip(&comps[i..]).all(|(w, c)| *c == *w)
        })
    })
}

/// The table as Markdown, for docs/THREAT_MODEL.md (a test keeps the two
/// equal).
pub fn markdown_table() -> String {
    let mut s = String::from("| path | kind | what |\n|---|---|---|\n");
    for c in HOME_CREDENTIALS {
        s.push_str(&format!(
            "| `~/{}` | {} | {} |\n",
            c.path,
            c.kind.as_str(),
            c.what
        ));
    }
    for c in SYSTEM_CREDENTIALS {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.path,
            c.kind.as_str(),
            c.what
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_clean_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for c in HOME_CREDENTIALS {
            assert!(
                !c.path.starts_with('/') && !c.path.ends_with('/'),
                "{}",
                c.path
            );
            assert!(
                c.path
                    .split('/')
                    .all(|p| !p.is_empty() && p != "." && p != ".."),
                "{}",
                c.path
            );
            assert!(seen.insert(c.path), "{} twice", c.path);
        }
        for c in SYSTEM_CREDENTIALS {
            assert!(
                c.path.starts_with('/') && !c.path.ends_with('/'),
                "{}",
                c.path
            );
            assert_eq!(
                PathBuf::from(c.path),
                Path::new(c.path).components().collect::<PathBuf>()
            );
            assert!(seen.insert(c.path), "{} twice", c.path);
        }
    }

    /// The one table is the union of the three tables that had drifted apart.
    #[test]
    fn the_table_holds_every_entry_the_old_copies_had() {
        let home: Vec<&str> = HOME_CREDENTIALS.iter().map(|c| c.path).collect();
        for old in [
            ".ssh",
            ".aws",
            ".config/gcloud",
            ".docker",
            ".netrc",
            ".kube",
            ".gnupg",
            ".azure",
            ".git-credentials",
            ".config/gh",
            ".pgpass",
            ".password-store",
            ".vault-token",
            ".cargo/credentials",
            ".cargo/credentials.toml",
        ] {
            assert!(home.contains(&old), "{old}");
        }
        let system: Vec<&str> = SYSTEM_CREDENTIALS.iter().map(|c| c.path).collect();
        for old in [
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/sudoers",
            "/etc/sudoers.d",
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/run/docker",
            "/var/lib/docker",
            "/run/containerd",
            "/var/run/containerd",
            "/var/lib/containerd",
            "/run/podman",
        ] {
            assert!(system.contains(&old), "{old}");
        }
    }

    #[test]
    fn resolve_joins_every_home_once_then_the_system_paths() {
        let got = resolve([
            Path::new("/home/u"),
            Path::new("/"),
            Path::new("relative"),
            Path::new("/nonexistent"),
            Path::new("/home/u"),
        ]);
        let mut want: Vec<PathBuf> = Vec::new();
        for h in ["/home/u", "/root"] {
            want.extend(HOME_CREDENTIALS.iter().map(|c| Path::new(h).join(c.path)));
        }
        want.extend(SYSTEM_CREDENTIALS.iter().map(|c| PathBuf::from(c.path)));
        assert_eq!(got, want);
    }

    #[test]
    fn named_in_matches_whole_components_anywhere() {
        let named = |p: &str| named_in(Path::new(p)).map(|c| c.path);
        assert_eq!(named("/srv/bob/.ssh"), Some(".ssh"));
        assert_eq!(named("/srv/bob/.config/gcloud/x"), Some(".config/gcloud"));
        assert_eq!(named("/w/.cargo/credentials/x"), Some(".cargo/credentials"));
        assert_eq!(named("/w/.config/ghx"), None);
        assert_eq!(named("/w/.sshx/y"), None);
        assert_eq!(named("/w/.config"), None);
        assert_eq!(named("/w/.cargo"), None);
        assert_eq!(named("/home/u/proj"), None);
        for c in HOME_CREDENTIALS {
            assert_eq!(named(&format!("/any/{}/proj", c.path)), Some(c.path));
        }
    }

    /// docs/THREAT_MODEL.md lists exactly this table.
    #[test]
    fn the_threat_model_lists_the_table_as_it_is() {
        let doc = include_str!("../../../docs/THREAT_MODEL.md");
        let start =
            "<!-- credential table: generated from credentials.rs; a test keeps it equal -->\n";
        let end = "<!-- end of credential table -->";
        let from = doc.find(start).expect("the table's start marker") + start.len();
        let to = from + doc[from..].find(end).expect("the table's end marker");
        assert_eq!(
            &doc[from..to],
            markdown_table(),
            "docs/THREAT_MODEL.md: paste credentials::markdown_table()'s output between the markers"
        );
    }
}
