//! What a workspace's git will obey, read on the host before a sandbox
//! starts: the git directory a `.git` file points to, the common directory
//! a `commondir` file names, config files pulled in by `include.path` and
//! `includeIf`, the hooks directory `core.hooksPath` names, and the
//! submodules (gitlinks in the index) whose own `.git` a top-level
//! `git status` enters.
//!
//! Everything here reads files an earlier sandbox may have written, as the
//! supervisor (root): a file is opened without following a final symlink
//! and without blocking (a FIFO cannot hang us), must be a regular file,
//! and is read up to a cap. A path git would follow through a symlink that
//! lies inside the workspace is refused: the sandbox could repoint the
//! symlink, and a mount cannot pin one.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Largest config or gitfile read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest index read (a monorepo's index runs to tens of MiB).
const MAX_INDEX_BYTES: u64 = 1 << 30;
/// Nested includes followed (git's own limit is 10).
const MAX_INCLUDE_DEPTH: usize = 10;
/// Submodules within submodules followed.
const MAX_SUBMODULE_DEPTH: usize = 8;
/// Symlinks followed in one path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// The paths inside the workspace that git runs or reads as instructions,
/// beyond the fixed names. All workspace-relative.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitPaths {
    /// `.git` entries below the top (a submodule's, a repository one level
    /// down) and git directories not named `.git`, that exist: read-only.
    pub git: Vec<PathBuf>,
    /// A submodule's `.git` that does not exist yet: reserved, or a
    /// sandbox could create one that the host's `git status` enters.
    pub missing_git: Vec<PathBuf>,
    /// Config files git includes (existing or not).
    pub configs: Vec<PathBuf>,
    /// Hooks directories named by `core.hooksPath` (existing or not).
    pub hooks: Vec<PathBuf>,
    /// Working trees of the submodules a top-level `git status` enters: a
    /// gitlink in an index whose `.git` exists (recursively).
    pub submodules: Vec<PathBuf>,
}

impl GitPaths {
    /// The submodules `self` names that `start` did not: each a gitlink a
    /// command added to an index after `start` was read, whose repository
    /// (and its config) the host's `git status` now enters
    /// (docs/THREAT_MODEL.md, "Open hole").
    pub fn new_submodules(&self, start: &GitPaths) -> Vec<PathBuf> {
        self.submodules
            .iter()
            .filter(|p| {
                !start.submodules.contains(p) && !start.missing_git.contains(&p.join(".git"))
            })
            .cloned()
            .collect()
    }
}

/// Why the workspace's git layout cannot be made safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe(pub String);

/// What to read beyond the repositories' own directories and configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Also every index, for submodules (and theirs): what a sandbox needs.
    WithSubmodules,
    /// Configs only, no index (a submodule's `.git` is named `.git`, which
    /// the policy refuses by name anyway): what the file tools need, cheap
    /// enough for every session.
    ConfigsOnly,
}

/// Reads the layout of the repository at the top of `workspace` (canonical),
/// of every repository one directory down, and (`WithSubmodules`) of their
/// submodules. `home` is the session owner's home (for `~` and the global
/// config).
pub fn scan(workspace: &Path, home: Option<&Path>, depth: Depth) -> Result<GitPaths, Unsafe> {
    if looks_like_git_dir(workspace) {
        return Err(Unsafe(format!(
            "{} is itself a git directory (HEAD, objects/ and refs/): the host's git would obey              a config a sandboxed command writes there; open a session on a working tree instead",
            workspace.display()
        )));
    }
    let mut s = Scan {
        ws: workspace,
        home,
        depth,
        out: GitPaths::default(),
    };
    s.repo(Path::new(""), 0, false)?;
    // Editors (VS Code by default) look for repositories one level down
    // and run `git status` in each.
    if let Ok(rd) = std::fs::read_dir(workspace) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                let rel = PathBuf::from(e.file_name());
                if std::fs::symlink_metadata(workspace.join(&rel).join(".git")).is_ok() {
                    s.repo(&rel, 1, false)?;
                }
            }
        }
    }
    let out = &mut s.out;
    for v in [
        &mut out.git,
        &mut out.missing_git,
        &mut out.configs,
        &mut out.hooks,
        &mut out.submodules,
    ] {
        v.sort();
        v.dedup();
    }
    Ok(s.out)
}

/// What git's `is_git_directory` checks, without reading HEAD.
fn looks_like_git_dir(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        std::fs::symlink_metadata(dir.join(name))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { !m.is_dir() })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true)
}

struct Scan<'a> {
    ws: &'a Path,
    home: Option<&'a Path>,
    depth: Depth,
    out: GitPaths,
}

impl Scan<'_> {
    /// The repository whose working tree is `wt` (workspace-relative).
    /// `gitlink`: the index of a parent names it, so a missing `.git` must
    /// be reserved.
    fn repo(&mut self, wt: &Path, depth: usize, gitlink: bool) -> Result<(), Unsafe> {
        if depth > MAX_SUBMODULE_DEPTH {
            return Ok(());
        }
        let wt_abs = self.ws.join(wt);
        self.no_symlink_between(wt)?;
        let dotgit_rel = wt.join(".git");
        let dotgit = self.ws.join(&dotgit_rel);
        let meta = match std::fs::symlink_metadata(&dotgit) {
            Ok(m) => m,
            Err(_) => {
                if gitlink {
                    self.out.missing_git.push(dotgit_rel);
                }
                return Ok(());
            }
        };
        let gitdir = if meta.file_type().is_symlink() {
            return Err(symlink_refusal(&dotgit));
        } else if meta.is_dir() {
            dotgit.clone()
        } else if meta.is_file() {
            let text = read_small(&dotgit).map_err(|e| {
                Unsafe(format!("cannot read the gitfile {}: {e}", dotgit.display()))
            })?;
            let Some(target) = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("gitdir:"))
                .map(str::trim)
                .filter(|t| !t.is_empty())
            else {
                // Not a gitfile git accepts: it ignores it and walks up.
                if depth > 0 {
                    self.out.git.push(dotgit_rel);
                }
                return Ok(());
            };
            self.resolve(&wt_abs.join(target))?
        } else {
            return Err(Unsafe(format!(
                "{} is neither a directory nor a file; refusing the workspace",
                dotgit.display()
            )));
        };
        if depth > 0 {
            self.out.git.push(dotgit_rel);
        }
        if gitlink {
            self.out.submodules.push(wt.to_path_buf());
        }
        // A `.git` directory is listed already (or, at the top, one of the
        // table's names); a gitfile's target is another place.
        if gitdir != dotgit {
            self.note_git_dir(&gitdir)?;
        }
        // A linked worktree's git directory names the repository's common one.
        let common = match read_small(&gitdir.join("commondir")) {
            Ok(t) => {
                let c = self.resolve(&gitdir.join(t.trim()))?;
                self.note_git_dir(&c)?;
                c
            }
            Err(_) => gitdir.clone(),
        };
        for p in [
            gitdir.join("hooks"),
            gitdir.join("config"),
            gitdir.join("config.worktree"),
            common.join("hooks"),
            common.join("config"),
        ] {
            self.resolve(&p)?;
        }
        let mut facts = ConfigFacts::default();
        let mut configs = vec![common.join("config"), gitdir.join("config.worktree")];
        configs.push(PathBuf::from("/etc/gitconfig"));
        if let Some(h) = self.home {
            configs.push(h.join(".gitconfig"));
            configs.push(h.join(".config/git/config"));
        }
        for c in configs {
            self.config(&c, 0, &mut facts)?;
        }
        for h in &facts.hooks_paths {
            let p = self.expand(h, &wt_abs);
            let real = self.resolve(&p)?;
            if let Some(rel) = self.inside(&real) {
                self.out.hooks.push(rel);
            }
        }
        if self.depth == Depth::WithSubmodules {
            let hash_len = if facts.sha256 { 32 } else { 20 };
            for sub in gitlinks_of(&gitdir, hash_len)? {
                self.repo(&wt.join(sub), depth + 1, true)?;
            }
        }
        Ok(())
    }

    /// A git directory inside the workspace is read-only as a whole; one
    /// that is the workspace itself, or holds it, cannot be.
    fn note_git_dir(&mut self, dir: &Path) -> Result<(), Unsafe> {
        if self.ws.starts_with(dir) {
            return Err(Unsafe(format!(
                "the git directory {} is the workspace or holds it, so the sandbox would write                  git's own config and hooks; open a session on the working tree instead",
                dir.display()
            )));
        }
        if let Some(rel) = self.inside(dir) {
            self.out.git.push(rel);
        }
        Ok(())
    }

    /// Reads one config file (and what it includes) for the facts we need.
    fn config(&mut self, file: &Path, depth: usize, facts: &mut ConfigFacts) -> Result<(), Unsafe> {
        if depth > MAX_INCLUDE_DEPTH {
            return Ok(());
        }
        let real = self.resolve(file)?;
        if depth > 0
            && let Some(rel) = self.inside(&real)
        {
            self.out.configs.push(rel);
        }
        let Ok(text) = read_small(&real) else {
            return Ok(());
        };
        // git resolves a relative include from the file as it opened it;
        // through a symlink that differs from where the file really is:
        // follow both.
        let mut bases: Vec<PathBuf> = [file.parent(), real.parent()]
            .into_iter()
            .flatten()
            .map(Path::to_path_buf)
            .collect();
        bases.dedup();
        for (section, key, value) in parse_config(&text) {
            match (section.as_str(), key.as_str()) {
                ("core", "hookspath") => facts.hooks_paths.push(value),
                ("extensions", "objectformat") => {
                    facts.sha256 = value.eq_ignore_ascii_case("sha256");
                }
                (s, "path") if s == "include" || s.starts_with("includeif.") => {
                    for base in &bases {
                        let inc = self.expand(&value, base);
                        self.config(&inc, depth + 1, facts)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `~/x` in the owner's home; a relative path from `base`.
    fn expand(&self, value: &str, base: &Path) -> PathBuf {
        if let Some(rest) = value.strip_prefix("~/")
            && let Some(h) = self.home
        {
            return h.join(rest);
        }
        base.join(value)
    }

    fn inside(&self, p: &Path) -> Option<PathBuf> {
        p.strip_prefix(self.ws)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .map(Path::to_path_buf)
    }

    /// Refuses a working tree reached through a symlink inside the workspace.
    fn no_symlink_between(&self, wt: &Path) -> Result<(), Unsafe> {
        let mut cur = self.ws.to_path_buf();
        for c in wt.components() {
            cur.push(c);
            if std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(symlink_refusal(&cur));
            }
        }
        Ok(())
    }

    /// Where `p` really is, resolving symlinks as the kernel would, refusing
    /// one that lies inside the workspace. Missing components stay as named.
    fn resolve(&self, p: &Path) -> Result<PathBuf, Unsafe> {
        resolve_refusing(self.ws, p)
    }
}

/// The facts a config contributes.
#[derive(Debug, Default)]
struct ConfigFacts {
    hooks_paths: Vec<String>,
    sha256: bool,
}

fn symlink_refusal(p: &Path) -> Unsafe {
    Unsafe(format!(
        "{} is a symlink inside the workspace on a path git follows; a sandboxed command could \
         repoint it at files it controls, and a symlink cannot be made read-only. Replace it \
         with what it points to, or remove it (for hooks kept in the repository, set \
         core.hooksPath to their directory instead: that directory is protected)",
        p.display()
    ))
}

/// Resolves `p` (absolute, or made absolute by the caller) component by
/// component. A symlink located inside `ws` is refused.
pub(crate) fn resolve_refusing(ws: &Path, p: &Path) -> Result<PathBuf, Unsafe> {
    let mut out = PathBuf::from("/");
    let mut stack: Vec<std::ffi::OsString> = Vec::new();
    push_rev(&mut stack, p);
    let mut links = 0;
    let mut missing = false;
    while let Some(c) = stack.pop() {
        if c == ".." {
            out.pop();
            // Out of a missing directory we may be back where things exist.
            missing = missing && std::fs::symlink_metadata(&out).is_err();
            continue;
        }
        out.push(&c);
        if missing {
            continue;
        }
        match std::fs::symlink_metadata(&out) {
            Err(_) => missing = true,
            Ok(m) if m.file_type().is_symlink() => {
                if out.starts_with(ws) {
                    return Err(symlink_refusal(&out));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(Unsafe(format!(
                        "{} goes through more than {MAX_LINKS} symlinks",
                        p.display()
                    )));
                }
                let target = std::fs::read_link(&out).map_err(|e| {
                    Unsafe(format!("cannot read the symlink {}: {e}", out.display()))
                })?;
                out.pop();
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_rev(&mut stack, &target);
            }
            Ok(_) => {}
        }
    }
    Ok(out)
}

fn push_rev(stack: &mut Vec<std::ffi::OsString>, p: &Path) {
    let start = stack.len();
    for c in p.components() {
        match c {
            Component::Normal(n) => stack.push(n.to_os_string()),
            Component::ParentDir => stack.push("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    stack[start..].reverse();
}

/// Reads a small regular file without following a final symlink and without
/// blocking on a FIFO.
pub(crate) fn read_small(p: &Path) -> std::io::Result<String> {
    let bytes = read_capped(p, MAX_CONFIG_BYTES)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn read_capped(p: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(p)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if m.len() > cap {
        return Err(std::io::Error::other(format!(
            "{} bytes, more than the {cap} read",
            m.len()
        )));
    }
    let mut v = Vec::with_capacity(m.len() as usize);
    f.take(cap).read_to_end(&mut v)?;
    Ok(v)
}

/// `(section, key, value)` of every variable in a git config file. Section
/// and key are lowercase; a subsection follows the section after a dot
/// (`includeif.gitdir:~/x/`). Values are unquoted and unescaped.
pub(crate) fn parse_config(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.to_string();
        // A value continues on the next line after a backslash at its end
        // (outside quotes; close enough for the keys we read).
        while line.ends_with('\\') && !line.ends_with("\\\\") {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next),
                None => break,
            }
        }
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let rest = if let Some(h) = t.strip_prefix('[') {
            let Some(end) = header_end(h) else { continue };
            section = section_name(&h[..end]);
            h[end + 1..].trim_start()
        } else {
            t
        };
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let (key, value) = match rest.find('=') {
            Some(i) => (rest[..i].trim(), unquote(&rest[i + 1..])),
            None => (rest.trim(), "true".to_string()),
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        out.push((section.clone(), key.to_ascii_lowercase(), value));
    }
    out
}

/// Where a `[...]` header ends (the `]` outside quotes).
fn header_end(h: &str) -> Option<usize> {
    let mut quoted = false;
    let mut esc = false;
    for (i, c) in h.char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// `core` -> `core`; `includeIf "gitdir:x"` -> `includeif.gitdir:x`;
/// `Core.Sub` -> `core.sub`.
fn section_name(h: &str) -> String {
    let h = h.trim();
    match h.find(char::is_whitespace) {
        Some(i) => {
            let sub = h[i..].trim().trim_matches('"').replace("\\\"", "\"");
            format!("{}.{sub}", h[..i].to_ascii_lowercase())
        }
        None => h.to_ascii_lowercase(),
    }
}

/// A config value: comments dropped, quotes removed, escapes applied.
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// The gitlinks (submodule paths) in `gitdir`'s index, and in its shared
/// index when the index is split.
fn gitlinks_of(gitdir: &Path, hash_len: usize) -> Result<Vec<PathBuf>, Unsafe> {
    let index = gitdir.join("index");
    let bytes = match read_capped(&index, MAX_INDEX_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Unsafe(format!("cannot read {}: {e}", index.display()))),
    };
    let bad = |why: String| {
        Unsafe(format!(
            "cannot read the git index {}: {why}",
            index.display()
        ))
    };
    let parsed = parse_index(&bytes, hash_len).map_err(bad)?;
    let mut links = parsed.gitlinks;
    if let Some(shared) = parsed.shared {
        let p = gitdir.join(format!("sharedindex.{shared}"));
        let b = read_capped(&p, MAX_INDEX_BYTES)
            .map_err(|e| Unsafe(format!("cannot read {}: {e}", p.display())))?;
        let s = parse_index(&b, hash_len)
            .map_err(|why| Unsafe(format!("cannot read the git index {}: {why}", p.display())))?;
        links.extend(s.gitlinks);
    }
    Ok(links
        .into_iter()
        .map(|b| PathBuf::from(OsStr::from_bytes(&b)))
        .filter(|p| {
            p.components()
                .all(|c| matches!(c, Component::Normal(n) if n != ".git"))
        })
        .collect())
}

/// What an index holds that matters here.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ParsedIndex {
    pub gitlinks: Vec<Vec<u8>>,
    /// The shared index's hash (hex), for a split index.
    pub shared: Option<String>,
}

const GITLINK: u32 = 0o160000;

/// Parses an index file (versions 2, 3 and 4) for its gitlink entries.
pub(crate) fn parse_index(b: &[u8], hash_len: usize) -> Result<ParsedIndex, String> {
    let u32_at = |i: usize| -> Result<u32, String> {
        b.get(i..i + 4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
            .ok_or_else(|| "truncated".to_string())
    };
    if b.get(..4) != Some(b"DIRC") {
        return Err("no DIRC signature".to_string());
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version} is not one git writes"));
    }
    let count = u32_at(8)? as usize;
    let mut out = ParsedIndex::default();
    let mut pos = 12;
    let mut prev: Vec<u8> = Vec::new();
    let fixed = 40 + hash_len + 2;
    for _ in 0..count {
        let start = pos;
        let mode = u32_at(start + 24)?;
        let flags = b
            .get(start + 40 + hash_len..start + fixed)
            .map(|s| u16::from_be_bytes([s[0], s[1]]))
            .ok_or("truncated")?;
        let mut head = fixed;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err("extended flags in a version 2 index".to_string());
            }
            head += 2;
        }
        pos = start + head;
        let name = if version == 4 {
            let (strip, used) = varint(b.get(pos..).ok_or("truncated")?)?;
            pos += used;
            let end = b[pos..]
                .iter()
                .position(|&c| c == 0)
                .ok_or("unterminated name")?;
            let keep = prev
                .len()
                .checked_sub(strip)
                .ok_or("a name strips more than the previous one has")?;
            let mut n = prev[..keep].to_vec();
            n.extend_from_slice(&b[pos..pos + end]);
            pos += end + 1;
            n
        } else {
            let end = b
                .get(pos..)
                .and_then(|r| r.iter().position(|&c| c == 0))
                .ok_or("unterminated name")?;
            let n = b[pos..pos + end].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of 8.
            pos = start + ((head + end + 8) & !7);
            n
        };
        if mode & 0o170000 == GITLINK {
            if name.is_empty() {
                return Err(
                    "a split index replaces an entry with a submodule; run `git update-index --no-split-index`"
                        .to_string(),
                );
            }
            out.gitlinks.push(name.clone());
        }
        prev = name;
    }
    // Extensions, up to the trailing checksum.
    let end = b.len().checked_sub(hash_len).ok_or("truncated")?;
    while pos + 8 <= end {
        let sig = &b[pos..pos + 4];
        let size = u32_at(pos + 4)? as usize;
        let data = b
            .get(pos + 8..pos + 8 + size)
            .ok_or("truncated extension")?;
        if sig == b"link" {
            let h = data.get(..hash_len).ok_or("truncated link extension")?;
            if h.iter().any(|&c| c != 0) {
                out.shared = Some(h.iter().map(|c| format!("{c:02x}")).collect());
            }
        }
        pos += 8 + size;
    }
    Ok(out)
}

/// git's offset varint (`decode_varint`): the bytes used and the value.
fn varint(b: &[u8]) -> Result<(usize, usize), String> {
    let mut i = 0;
    let mut c = *b.first().ok_or("truncated")?;
    let mut val = usize::from(c & 127);
    while c & 128 != 0 {
        i += 1;
        c = *b.get(i).ok_or("truncated")?;
        val = val
            .checked_add(1)
            .and_then(|v| v.checked_mul(128))
            .and_then(|v| v.checked_add(usize::from(c & 127)))
            .ok_or("varint overflow")?;
    }
    Ok((val, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_sections_and_includes() {
        let text = "[core]\n\thooksPath = \"tools/hooks\" # comment\n\tbare\n\
                    [include]\n\tpath = ../shared.gitconfig\n\
                    [includeIf \"gitdir:~/work/\"]\n\tpath = ~/w.inc\n\
                    [Extensions] objectFormat = sha256\n\
                    [alias]\n\tx = \"!echo a; b\" ; trailing\n\
                    [core]\n\tfsmonitor = a\\\n  b\n";
        let got = parse_config(text);
        let want: Vec<(String, String, String)> = [
            ("core", "hookspath", "tools/hooks"),
            ("core", "bare", "true"),
            ("include", "path", "../shared.gitconfig"),
            ("includeif.gitdir:~/work/", "path", "~/w.inc"),
            ("extensions", "objectformat", "sha256"),
            ("alias", "x", "!echo a; b"),
            ("core", "fsmonitor", "a  b"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    fn entry(v: u32, mode: u32, name: &[u8], prev: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e.extend_from_slice(&mode.to_be_bytes());
        e.extend_from_slice(&[0u8; 12]);
        e.extend_from_slice(&[0u8; 20]);
        e.extend_from_slice(&(name.len().min(0xfff) as u16).to_be_bytes());
        if v == 4 {
            let common = prev.iter().zip(name).take_while(|(a, b)| a == b).count();
            e.push((prev.len() - common) as u8);
            e.extend_from_slice(&name[common..]);
            e.push(0);
        } else {
            e.extend_from_slice(name);
            let len = e.len();
            e.resize((len + 8) & !7, 0);
        }
        e
    }

    fn index(v: u32, entries: &[(u32, &[u8])]) -> Vec<u8> {
        let mut b = b"DIRC".to_vec();
        b.extend_from_slice(&v.to_be_bytes());
        b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        let mut prev: &[u8] = b"";
        for (mode, name) in entries {
            b.extend(entry(v, *mode, name, prev));
            prev = name;
        }
        b.extend_from_slice(&[0u8; 20]);
        b
    }

    #[test]
    fn gitlinks_in_every_index_version() {
        let entries: &[(u32, &[u8])] = &[
            (0o100644, b"README.md"),
            (GITLINK, b"lib/sub"),
            (0o100755, b"lib/sub-tool.sh"),
            (GITLINK, b"vendor/other"),
        ];
        for v in [2, 3, 4] {
            let p = parse_index(&index(v, entries), 20).unwrap();
            assert_eq!(
                p.gitlinks,
                vec![b"lib/sub".to_vec(), b"vendor/other".to_vec()],
                "version {v}"
            );
            assert_eq!(p.shared, None);
        }
        assert!(parse_index(b"DIRX", 20).is_err());
        let mut cut = index(2, entries);
        cut.truncate(60);
        assert!(parse_index(&cut, 20).is_err());
    }

    #[test]
    fn a_real_index_from_git_lists_its_submodules() {
        let Ok(out) = std::process::Command::new("git").arg("--version").output() else {
            return;
        };
        assert!(out.status.success());
        let d = tempfile::tempdir().unwrap();
        let run = |args: &[&str], dir: &Path| {
            let st = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", d.path())
                .output()
                .unwrap();
            assert!(st.status.success(), "{args:?}: {st:?}");
        };
        let top = d.path().join("top");
        let sub = top.join("deps/sub");
        std::fs::create_dir_all(&sub).unwrap();
        run(&["init", "-q"], &top);
        run(&["init", "-q"], &sub);
        std::fs::write(sub.join("f"), "x").unwrap();
        run(&["add", "f"], &sub);
        run(
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "x",
            ],
            &sub,
        );
        std::fs::write(top.join("a"), "x").unwrap();
        run(&["add", "a"], &top);
        let before = scan(&top, None, Depth::WithSubmodules).unwrap();
        assert!(before.submodules.is_empty(), "{before:?}");
        run(&["add", "deps/sub"], &top);
        for v in ["2", "3", "4"] {
            run(&["update-index", "--index-version", v], &top);
            let b = std::fs::read(top.join(".git/index")).unwrap();
            let p = parse_index(&b, 20).unwrap();
            assert_eq!(p.gitlinks, vec![b"deps/sub".to_vec()], "version {v}");
        }
        let found = scan(&top, None, Depth::WithSubmodules).unwrap();
        assert_eq!(found.git, vec![PathBuf::from("deps/sub/.git")]);
        assert_eq!(found.submodules, vec![PathBuf::from("deps/sub")]);
        // Added after `before` was read: new; against itself: not.
        assert_eq!(
            found.new_submodules(&before),
            vec![PathBuf::from("deps/sub")]
        );
        assert!(found.new_submodules(&found).is_empty());
        assert_eq!(
            scan(&top, None, Depth::ConfigsOnly).unwrap(),
            GitPaths::default()
        );
        std::fs::remove_dir_all(sub.join(".git")).unwrap();
        let found = scan(&top, None, Depth::WithSubmodules).unwrap();
        assert_eq!(found.missing_git, vec![PathBuf::from("deps/sub/.git")]);
        // Reserved at start (its `.git` missing), so not a new one.
        let mut later = found.clone();
        later.submodules.push(PathBuf::from("deps/sub"));
        assert!(later.new_submodules(&found).is_empty());
    }

    #[test]
    fn symlinks_inside_the_workspace_are_refused_outside_followed() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap().join("ws");
        let outside = ws.parent().unwrap().join("outside");
        std::fs::create_dir_all(ws.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink("real", ws.join("link")).unwrap();
        let e = resolve_refusing(&ws, &ws.join("link/x")).unwrap_err();
        assert!(
            e.0.contains("link is a symlink inside the workspace"),
            "{e:?}"
        );
        std::os::unix::fs::symlink(&ws, outside.join("to-ws")).unwrap();
        assert_eq!(
            resolve_refusing(&ws, &outside.join("to-ws/real/y")).unwrap(),
            ws.join("real/y")
        );
        assert_eq!(
            resolve_refusing(&ws, &ws.join("missing/../real")).unwrap(),
            ws.join("real")
        );
    }
}
