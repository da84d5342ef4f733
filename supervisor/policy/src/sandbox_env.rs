//! The sandbox's environment, one truth for everything that needs it
//! (docs/THREAT_MODEL.md, "The sandbox's environment"): where HOME and
//! TMPDIR are inside, which of the owner's toolchain directories are shown
//! (read-only), and PATH. The daemon builds the sandbox's environment from
//! these functions, the sandbox mounts what they name, and the shell policy
//! judges `~`, `$HOME`, `$TMPDIR` and `$PWD` with the same values.
//!
//! Pure: the daemon gives the owner's home and which entries exist.

use std::path::{Component, Path, PathBuf};

use crate::{credentials, host_exec};

/// TMPDIR inside: the sandbox's private tmpfs.
pub const TMPDIR: &str = "/tmp";

/// The system part of PATH inside (directories every sandbox shows).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `[sandbox] toolchain_dirs`' default: where rustup, pipx/pip --user,
/// pyenv, nvm, volta, bun, Go, deno and SDKMAN install, relative to the
/// owner's home.
pub const DEFAULT_TOOLCHAIN_DIRS: &[&str] = &[
    ".cargo/bin",
    ".rustup",
    ".local/bin",
    ".local/lib",
    ".pyenv",
    ".nvm",
    ".volta",
    ".bun",
    "go/bin",
    ".deno",
    ".sdkman",
];

/// Directories below a shown toolchain directory that hold its programs,
/// added to PATH when the owner's login PATH is not known (a path relative
/// to the home; only those under a shown toolchain directory count).
const TOOLCHAIN_BINS: &[&str] = &[
    ".cargo/bin",
    ".local/bin",
    ".pyenv/shims",
    ".pyenv/bin",
    ".volta/bin",
    ".bun/bin",
    "go/bin",
    ".deno/bin",
];

/// HOME inside the sandbox: the owner's home directory at its own path, as
/// a private, empty, writable tmpfs holding only the shown toolchain
/// directories (read-only) and a git identity; `/tmp` when the owner has
/// no usable home (unknown to /etc/passwd, `/`, `/nonexistent`).
pub fn home(owner_home: Option<&Path>) -> PathBuf {
    match owner_home {
        Some(h) if usable_home(h) => h.to_path_buf(),
        _ => PathBuf::from(TMPDIR),
    }
}

/// A home the sandbox can stand a private directory in for: absolute,
/// normal, not `/`, `/nonexistent`, `/tmp` or a system directory.
fn usable_home(h: &Path) -> bool {
    let normal = h.is_absolute()
        && h.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let depth = h.components().count();
    normal
        && depth >= 2
        && ![
            "/nonexistent",
            "/tmp",
            "/proc",
            "/sys",
            "/dev",
            "/etc",
            "/usr",
            "/bin",
        ]
        .iter()
        .any(|p| h.starts_with(p))
}

/// Why a configured toolchain entry is never shown; `None` when it may be.
/// It must be a relative path of normal components, and neither be nor lie
/// in (nor hold) a credential path of the table, nor name a path the host
/// runs by itself ([`host_exec::HOST_EXEC`], a shell's rc file, `.git`).
pub fn toolchain_refusal(rel: &str) -> Option<String> {
    let p = Path::new(rel);
    if rel.is_empty()
        || p.is_absolute()
        || rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some(format!(
            "`{rel}` is not a path relative to the home made of plain names"
        ));
    }
    if let Some(c) = credentials::named_in(p) {
        return Some(format!("`{rel}` is or lies in {} (`~/{}`)", c.what, c.path));
    }
    // A directory holding a credential entry (`.cargo` holds
    // `.cargo/credentials.toml`) is shown with the entry masked: every
    // credential path is hidden in the sandbox.
    // Shown read-only, so nothing in it can be changed for the host to
    // run; but a directory the table names itself (`.cargo`, whose
    // config.toml cargo obeys; `.vscode`) or any git directory is not
    // shown: only the programs' own directories (`.cargo/bin`) are.
    let last = p
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let git = p.components().find_map(|c| {
        host_exec::lookup_name(&c.as_os_str().to_string_lossy()).filter(|e| e.name == ".git")
    });
    if let Some(e) = host_exec::lookup_name(&last).or(git) {
        return Some(format!(
            "`{rel}` names `{}`, which the host runs by itself ({})",
            e.name, e.runs
        ));
    }
    None
}

/// The toolchain directories shown, absolute: each configured entry under
/// the owner's home that [`toolchain_refusal`] lets through and `exists`
/// says is a directory there (never followed through a symlink: the
/// daemon answers with lstat).
pub fn toolchain_dirs(
    owner_home: Option<&Path>,
    configured: &[String],
    exists: impl Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let Some(h) = owner_home.filter(|h| usable_home(h)) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = configured
        .iter()
        .filter(|rel| toolchain_refusal(rel).is_none())
        .map(|rel| h.join(rel))
        .filter(|p| exists(p))
        .collect();
    v.sort();
    v.dedup();
    // One inside another is shown by the outer one.
    let outer = v.clone();
    v.retain(|p| !outer.iter().any(|o| o != p && p.starts_with(o)));
    v
}

/// PATH inside: the owner's login PATH reduced to the directories the
/// sandbox shows (the system directories, the shown toolchain
/// directories), in its order, each once; without a login PATH, the system
/// PATH then the shown toolchains' program directories.
pub fn path(login_path: Option<&str>, home: &Path, shown: &[PathBuf]) -> String {
    let in_toolchain = |p: &Path| shown.iter().any(|t| p.starts_with(t));
    let mut dirs: Vec<String> = Vec::new();
    if let Some(lp) = login_path {
        for d in lp.split(':') {
            let p = Path::new(d);
            let normal = p.is_absolute()
                && p.components()
                    .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if normal && (is_system_dir(p) || in_toolchain(p)) {
                push_once(&mut dirs, d);
            }
        }
    }
    if dirs.is_empty() {
        SYSTEM_PATH.split(':').for_each(|d| push_once(&mut dirs, d));
        if login_path.is_none() {
            for rel in TOOLCHAIN_BINS {
                let p = home.join(rel);
                if in_toolchain(&p) {
                    push_once(&mut dirs, &p.to_string_lossy());
                }
            }
        }
    }
    dirs.join(":")
}

fn push_once(dirs: &mut Vec<String>, d: &str) {
    if !dirs.iter().any(|x| x == d) {
        dirs.push(d.to_string());
    }
}

/// The system directories every sandbox shows read-only (the native
/// backend's system view; an image's on Docker).
fn is_system_dir(p: &Path) -> bool {
    ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt"]
        .iter()
        .any(|d| p.starts_with(d))
}

/// Each package tool's cache variable and the directory it names beneath
/// the package cache's path inside (docs/OPERATIONS.md "Package caches").
/// Cargo has no variable for its registry and git checkouts alone:
/// CARGO_HOME moves, and PATH keeps the owner's `~/.cargo/bin` (a
/// toolchain directory, read-only).
pub const CACHE_VARS: &[(&str, &str)] = &[
    ("npm_config_cache", "npm"),
    ("PIP_CACHE_DIR", "pip"),
    ("CARGO_HOME", "cargo"),
    ("GOMODCACHE", "go-mod"),
    ("BUN_INSTALL_CACHE_DIR", "bun"),
    ("YARN_CACHE_FOLDER", "yarn"),
];

/// The cache variables a sandbox whose package cache is at `at` (inside)
/// gets: each of [`CACHE_VARS`] naming its directory beneath `at`.
pub fn cache_env(at: &Path) -> Vec<(String, String)> {
    CACHE_VARS
        .iter()
        .map(|(k, sub)| (k.to_string(), at.join(sub).to_string_lossy().into_owned()))
        .collect()
}

/// What one variable the network wall sets holds (the sandbox crate gives
/// the values: `tollgate_sandbox::wall::proxy_env`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WallVar {
    /// The HTTP proxy's URL.
    HttpProxy,
    /// The SOCKS5 proxy's URL.
    SocksProxy,
    /// The loopback names no proxy is used for.
    NoProxy,
    /// ssh through the SOCKS proxy, for git.
    GitSsh,
}

/// The variables the network wall sets in every sandbox (docs/INTERFACES.md
/// "[network]", "The wall in every sandbox"): the proxy variables, each in
/// upper and lower case, and `GIT_SSH_COMMAND`.
pub const WALL_ENV: [(&str, WallVar); 9] = [
    ("HTTP_PROXY", WallVar::HttpProxy),
    ("http_proxy", WallVar::HttpProxy),
    ("HTTPS_PROXY", WallVar::HttpProxy),
    ("https_proxy", WallVar::HttpProxy),
    ("ALL_PROXY", WallVar::SocksProxy),
    ("all_proxy", WallVar::SocksProxy),
    ("NO_PROXY", WallVar::NoProxy),
    ("no_proxy", WallVar::NoProxy),
    ("GIT_SSH_COMMAND", WallVar::GitSsh),
];

/// The variables naming the CA bundle a session with `[[secrets]]` gets
/// (docs/INTERFACES.md "[[secrets]]"): OpenSSL (curl, git, pip, Python),
/// Node (npm), requests, cargo, git.
pub const CA_BUNDLE_VARS: [&str; 5] = [
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "GIT_SSL_CAINFO",
];

/// The variables every sandbox's environment sets besides those.
const OWN_VARS: [&str; 8] = [
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "PWD",
];

/// What sets `name` in the sandbox's environment itself, when something
/// does (so no `[[secrets]]` `env` may take it): the sandbox (its own
/// variables and `AGENT_*`), the network wall ([`WALL_ENV`]), the session's
/// CA bundle ([`CA_BUNDLE_VARS`]) or the package caches ([`CACHE_VARS`]).
pub fn set_by(name: &str) -> Option<&'static str> {
    if OWN_VARS.contains(&name) || name.starts_with("AGENT_") {
        Some("the sandbox")
    } else if WALL_ENV.iter().any(|(k, _)| *k == name) {
        Some("the network wall")
    } else if CA_BUNDLE_VARS.contains(&name) {
        Some("the session's CA bundle")
    } else if CACHE_VARS.iter().any(|(k, _)| *k == name) {
        Some("the package caches")
    } else {
        None
    }
}

/// What the policy knows of the sandbox a command runs in: HOME and TMPDIR
/// as the sandbox sets them, and what in HOME is read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxView {
    pub home: PathBuf,
    pub tmpdir: PathBuf,
    /// The shown toolchain directories (read-only inside).
    pub read_only: Vec<PathBuf>,
    /// The package cache's path inside, when the sandbox has one (its
    /// [`CACHE_VARS`] are set from it); `None`: caches are off and the
    /// variables unset.
    pub cache: Option<PathBuf>,
}

impl SandboxView {
    /// The view of a sandbox of an owner with this home and these shown
    /// toolchain directories.
    pub fn of(owner_home: Option<&Path>, shown: Vec<PathBuf>) -> SandboxView {
        SandboxView {
            home: home(owner_home),
            tmpdir: PathBuf::from(TMPDIR),
            read_only: shown,
            cache: None,
        }
    }

    /// This view with the package cache at `cache` inside (`None`: off).
    pub fn with_cache(mut self, cache: Option<PathBuf>) -> SandboxView {
        self.cache = cache;
        self
    }

    /// The cache variables as this sandbox sets them (none when caches
    /// are off).
    pub fn cache_env(&self) -> Vec<(String, String)> {
        self.cache.as_deref().map(cache_env).unwrap_or_default()
    }

    /// A path a command may write inside this sandbox besides the
    /// workspace: beneath TMPDIR, the private home or the package cache,
    /// outside the read-only toolchain directories.
    pub fn writable(&self, p: &Path) -> bool {
        let under = |base: &Path| p.starts_with(base) && p != base;
        (under(&self.tmpdir) || under(&self.home) || self.cache.as_deref().is_some_and(under))
            && !self.read_only.iter().any(|r| p.starts_with(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_the_owners_or_tmp() {
        assert_eq!(home(Some(Path::new("/home/al"))), PathBuf::from("/home/al"));
        for bad in [
            "/",
            "/nonexistent",
            "relative",
            "/home/../etc",
            "/tmp/x",
            "/etc/x",
        ] {
            assert_eq!(home(Some(Path::new(bad))), PathBuf::from("/tmp"), "{bad}");
        }
        assert_eq!(home(None), PathBuf::from("/tmp"));
    }

    #[test]
    fn toolchain_entries_never_name_a_credential_or_host_exec_path() {
        for ok in DEFAULT_TOOLCHAIN_DIRS {
            assert_eq!(toolchain_refusal(ok), None, "{ok}");
        }
        // A directory holding a credential entry is shown, the entry masked.
        assert_eq!(toolchain_refusal(".config"), None);
        assert!(toolchain_refusal(".cargo").is_some());
        for bad in [
            ".ssh",
            ".ssh/keys",
            ".config/gcloud",
            ".cargo/credentials.toml",
            ".bashrc",
            ".local/.git",
            "../etc",
            "/usr",
            "",
            "a/./b",
        ] {
            assert!(toolchain_refusal(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn shown_toolchains_exist_are_deduplicated_and_nested_ones_folded() {
        let h = Path::new("/home/al");
        let configured: Vec<String> = [".local/bin", ".local", ".ssh", ".nvm", ".rustup"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let v = toolchain_dirs(Some(h), &configured, |p| !p.ends_with(".nvm"));
        assert_eq!(v, vec![h.join(".local"), h.join(".rustup")]);
        assert!(toolchain_dirs(None, &configured, |_| true).is_empty());
    }

    #[test]
    fn path_is_the_login_path_reduced_to_what_the_sandbox_shows() {
        let h = Path::new("/home/al");
        let shown = vec![h.join(".cargo/bin"), h.join(".nvm")];
        let login = "/home/al/.cargo/bin:/home/al/bin:.:/tmp/evil:/usr/bin:/home/al/.nvm/versions/node/v20/bin:/bin:/usr/bin:/home/al/proj/node_modules/.bin";
        assert_eq!(
            path(Some(login), h, &shown),
            "/home/al/.cargo/bin:/usr/bin:/home/al/.nvm/versions/node/v20/bin:/bin"
        );
        assert_eq!(
            path(None, h, &shown),
            format!("{SYSTEM_PATH}:/home/al/.cargo/bin")
        );
        assert_eq!(path(Some("/tmp/x"), h, &shown), SYSTEM_PATH);
    }

    #[test]
    fn writable_places_are_tmp_and_the_home_outside_toolchains() {
        let v = SandboxView::of(
            Some(Path::new("/home/al")),
            vec![PathBuf::from("/home/al/.rustup")],
        );
        assert!(v.writable(Path::new("/tmp/x")));
        assert!(v.writable(Path::new("/home/al/.gitconfig")));
        assert!(!v.writable(Path::new("/home/al/.rustup/settings.toml")));
        assert!(!v.writable(Path::new("/home/al")));
        assert!(!v.writable(Path::new("/etc/passwd")));
    }

    #[test]
    fn the_cache_variables_name_their_directories_beneath_the_cache() {
        let at = Path::new("/home/al/.tollgate-cache");
        let env = cache_env(at);
        assert_eq!(env.len(), CACHE_VARS.len());
        assert!(env.contains(&(
            "npm_config_cache".to_string(),
            "/home/al/.tollgate-cache/npm".to_string()
        )));
        assert!(env.contains(&(
            "CARGO_HOME".to_string(),
            "/home/al/.tollgate-cache/cargo".to_string()
        )));
        let v = SandboxView::of(Some(Path::new("/home/al")), Vec::new());
        assert!(v.cache_env().is_empty());
        let v = v.with_cache(Some(at.to_path_buf()));
        assert_eq!(v.cache_env(), env);
        assert!(v.writable(Path::new("/home/al/.tollgate-cache/pip/x")));
    }
}
