//! Path scope: every path argument is resolved against the workspace and
//! refused if it escapes (docs/THREAT_MODEL.md, "The walls, by layer", 3).
//!
//! Resolution walks the path one component at a time through [`FsFacts`]
//! (lstat and readlink), the way the kernel would, so a dangling symlink or a
//! file that does not exist yet is judged by where `O_CREAT` would really put
//! it, not by a lexical guess. Components are compared, never string
//! prefixes. The executor opens the result again beneath a workspace handle
//! (openat2 RESOLVE_BENEATH), so a link swapped in after this check cannot win.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::credentials::{HOME_CREDENTIALS, SYSTEM_CREDENTIALS};
use crate::display::shorten;
use crate::engine::Context;
use crate::facts::{FileFacts, FileKind, FsFacts};
use crate::host_exec::{self, HostExecHit, WriteRule};
use crate::registry::MAX_PATH_BYTES;

/// Symlinks followed before a path is refused as a loop (the kernel's limit).
const MAX_LINKS: usize = 40;
/// Longest single path component (NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// What the call wants to do with the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read a regular file.
    Read,
    /// Create or replace a regular file.
    Write,
    /// Search a directory or a file (glob_files, grep).
    Search,
}

/// A path that passed the floor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// Absolute, every symlink resolved.
    pub abs: PathBuf,
    /// Relative to the workspace ("." for the workspace itself).
    pub rel: String,
    /// lstat of `abs`; `None` when it does not exist (yet).
    pub facts: Option<FileFacts>,
    /// A workspace secret file (`.env`, `*.pem`, `id_*`, ...).
    pub secret: bool,
    /// For a write: the host runs this path by itself (a `Confirm` entry;
    /// a `Refuse` one never resolves).
    pub host_exec: Option<HostExecHit>,
}

/// Why a path is refused: the floor rule and a sentence for the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub rule: &'static str,
    pub reason: String,
}

fn refuse(rule: &'static str, reason: String) -> Refusal {
    Refusal { rule, reason }
}

/// Shows an untrusted path in a reason: escaped and shortened.
pub(crate) fn show(p: &str) -> String {
    shorten(p, 160)
}

fn show_path(p: &Path) -> String {
    show(&p.to_string_lossy())
}

/// Resolves `raw` (relative to the workspace, or absolute) and applies the
/// floor: scope, credentials, protected paths, special files, hard links,
/// git internals. Marks workspace secret files and, for writes, the names
/// the host runs by itself ([`host_exec`]).
pub(crate) fn resolve(
    raw: &str,
    access: Access,
    ctx: &Context,
    fs: &dyn FsFacts,
) -> Result<Resolved, Refusal> {
    precheck(raw)?;
    let abs = walk(raw, ctx, fs)?;
    let lexical = lexical_join(&ctx.workspace, raw);
    refuse_protected(raw, [&abs.path, &lexical], ctx)?;
    if let Some(what) = credential_kind(&abs.path, ctx.home.as_deref()) {
        return Err(refuse(
            "floor:credential-path",
            format!(
                "`{}` is {what}; credential paths are never readable by the agent. Ask the user if the task really needs it.",
                show(raw)
            ),
        ));
    }
    let rest = within_workspace(raw, &abs.path, ctx)?;
    let rel = if rest.as_os_str().is_empty() {
        ".".to_string()
    } else {
        rest.to_string_lossy().into_owned()
    };
    refuse_kind(raw, access, &rel, abs.facts)?;
    let host_exec = if access == Access::Write {
        // The name it was given differs from where it lands only through a
        // symlink: then both are judged.
        let named = if lexical.as_os_str() == abs.path.as_os_str() {
            None
        } else {
            rest_within(&lexical, &ctx.workspace)
        };
        host_exec_of(rest, named, ctx)
    } else {
        None
    };
    if let Some(hit) = &host_exec
        && hit.write == WriteRule::Refuse
    {
        return Err(refuse(
            "floor:git-internals",
            format!(
                "`{}` is git's own directory (`{}`): {}. Git's config and hooks run commands on the host, so they are never written by the agent. Use git commands in run_bash instead.",
                show(raw),
                show_path(&hit.at),
                hit.runs
            ),
        ));
    }
    let secret = rest
        .file_name()
        .is_some_and(|n| is_secret_file_name(&n.to_string_lossy()))
        || Path::new(raw)
            .file_name()
            .is_some_and(|n| is_secret_file_name(&n.to_string_lossy()));
    Ok(Resolved {
        rel,
        abs: abs.path,
        facts: abs.facts,
        secret,
        host_exec,
    })
}

/// The supervisor's own files, reached by either path (where it lands, or
/// the name as given), are never touched.
fn refuse_protected(raw: &str, paths: [&Path; 2], ctx: &Context) -> Result<(), Refusal> {
    for p in paths {
        if let Some(hit) = ctx
            .protected
            .iter()
            .find(|prot| rest_within(p, prot).is_some())
        {
            return Err(refuse(
                "floor:protected",
                format!(
                    "`{}` is one of the supervisor's own files ({}); the agent can never read or write it.",
                    show(raw),
                    show_path(hit)
                ),
            ));
        }
    }
    Ok(())
}

/// Where `abs` lies beneath the workspace; refused outside it.
fn within_workspace<'a>(raw: &str, abs: &'a Path, ctx: &Context) -> Result<&'a Path, Refusal> {
    let Some(rest) = rest_within(abs, &ctx.workspace) else {
        let shown = show_path(abs);
        let via = if shown == show(raw) {
            String::new()
        } else {
            format!(" resolves to {shown}, which")
        };
        return Err(refuse(
            "floor:path-scope",
            format!(
                "`{}`{via} is outside the workspace; file tools only reach files inside the workspace. Use a path relative to the workspace.",
                show(raw)
            ),
        ));
    };
    Ok(rest)
}

/// File tools open regular files only (not the workspace, a directory or
/// a special file), and never write one with other hard links.
fn refuse_kind(
    raw: &str,
    access: Access,
    rel: &str,
    facts: Option<FileFacts>,
) -> Result<(), Refusal> {
    let kind = facts.map(|f| f.kind);
    match (access, kind) {
        (Access::Read | Access::Write, _) if rel == "." => Err(refuse(
            "floor:not-a-file",
            format!(
                "`{}` is the workspace directory itself, not a file.",
                show(raw)
            ),
        )),
        (Access::Read | Access::Write, Some(FileKind::Dir)) => Err(refuse(
            "floor:not-a-file",
            format!(
                "`{}` is a directory, not a file. Use glob_files to list a directory.",
                show(raw)
            ),
        )),
        (_, Some(FileKind::Other)) => Err(refuse(
            "floor:special-file",
            format!(
                "`{}` is not a regular file (a FIFO, socket or device); file tools only open regular files.",
                show(raw)
            ),
        )),
        (Access::Write, Some(FileKind::File)) => {
            if let Some(f) = facts
                && f.nlink > 1
            {
                return Err(refuse(
                    "floor:hardlink",
                    format!(
                        "`{}` has {} hard links, so writing it may change a file outside the workspace. Write a new file instead.",
                        show(raw),
                        f.nlink
                    ),
                ));
            }
            Ok(())
        }
        (Access::Read | Access::Write | Access::Search, _) => Ok(()),
    }
}

/// A write target's place in the host-executed table, judged on where the
/// write really lands (`rest`, symlinks resolved) and on the name it was
/// given (`named`, workspace-relative, when it differs): the stricter.
fn host_exec_of(rest: &Path, named: Option<&Path>, ctx: &Context) -> Option<HostExecHit> {
    let real = host_exec::check(rest, &ctx.repo);
    let named = named.and_then(|l| host_exec::check(l, &ctx.repo));
    match (real, named) {
        (Some(r), Some(n)) if n.write == WriteRule::Refuse && r.write != WriteRule::Refuse => {
            Some(n)
        }
        (Some(r), _) => Some(r),
        (None, n) => n,
    }
}

/// Checks that need no filesystem: empty, NUL, length, `~`, shell variables.
fn precheck(raw: &str) -> Result<(), Refusal> {
    if raw.is_empty() {
        return Err(refuse(
            "floor:path-scope",
            "the path is empty; give a file path relative to the workspace.".to_string(),
        ));
    }
    if raw.contains('\0') {
        return Err(refuse(
            "floor:path-scope",
            format!(
                "`{}` contains a NUL byte, which no file name can hold.",
                show(raw)
            ),
        ));
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(refuse(
            "floor:path-scope",
            format!(
                "the path is {} bytes long; the limit is {MAX_PATH_BYTES}.",
                raw.len()
            ),
        ));
    }
    if raw.split('/').any(|c| c.len() > MAX_NAME_BYTES) {
        return Err(refuse(
            "floor:path-scope",
            format!(
                "a component of `{}` is longer than {MAX_NAME_BYTES} bytes.",
                show(raw)
            ),
        ));
    }
    if raw.starts_with('~') {
        return Err(refuse(
            "floor:path-scope",
            format!(
                "`{}` starts with `~`, which file tools do not expand; home directories are outside the workspace. Use a path relative to the workspace.",
                show(raw)
            ),
        ));
    }
    if raw.contains("${") || raw.contains("$(") || raw.split('/').any(|c| c.starts_with('$')) {
        return Err(refuse(
            "floor:path-scope",
            format!(
                "`{}` looks like a shell variable; file tools take literal paths and expand nothing. Use the real path relative to the workspace.",
                show(raw)
            ),
        ));
    }
    Ok(())
}

struct Walked {
    path: PathBuf,
    facts: Option<FileFacts>,
}

const DIR: FileFacts = FileFacts {
    kind: FileKind::Dir,
    size: 0,
    nlink: 1,
};

/// Why a walk stopped.
enum WalkError {
    NotADir(PathBuf),
    Magic(PathBuf),
    Loop,
    Unreadable(PathBuf),
}

impl WalkError {
    fn refusal(self, raw: &str) -> Refusal {
        match self {
            WalkError::NotADir(at) => refuse(
                "floor:path-scope",
                format!(
                    "`{}` continues after {}, which is not a directory.",
                    show(raw),
                    show_path(&at)
                ),
            ),
            WalkError::Magic(at) => refuse(
                "floor:path-scope",
                format!(
                    "`{}` goes through {}, whose magic links lead outside the workspace.",
                    show(raw),
                    show_path(&at)
                ),
            ),
            WalkError::Loop => refuse(
                "floor:path-scope",
                format!(
                    "`{}` goes through more than {MAX_LINKS} symlinks (a symlink loop).",
                    show(raw)
                ),
            ),
            WalkError::Unreadable(at) => refuse(
                "floor:path-scope",
                format!("the symlink {} cannot be read.", show_path(&at)),
            ),
        }
    }
}

fn walk(raw: &str, ctx: &Context, fs: &dyn FsFacts) -> Result<Walked, Refusal> {
    // The workspace is canonical (the daemon checked it at OpenSession), so a
    // relative path starts there without re-walking it.
    let out = starting_point(&ctx.workspace, raw);
    walk_path(out, Path::new(raw), &ctx.workspace, fs).map_err(|e| e.refusal(raw))
}

/// Where `raw` starts: `/` when it is absolute, else `base`; with room for
/// the whole of `raw` up front (pushing onto an exact-size copy of `base`
/// would grow it once per component).
fn starting_point(base: &Path, raw: &str) -> PathBuf {
    let start = if raw.starts_with('/') {
        Path::new("/")
    } else {
        base
    };
    let mut out = PathBuf::with_capacity(start.as_os_str().len() + raw.len() + 1);
    out.push(start);
    out
}

/// Resolves every symlink of an absolute path, as far as it exists.
/// `None` for a loop, an unreadable link, a walk through /proc or past a file.
pub(crate) fn follow(abs: &Path, workspace: &Path, fs: &dyn FsFacts) -> Option<PathBuf> {
    walk_path(PathBuf::from("/"), abs, workspace, fs)
        .ok()
        .map(|w| w.path)
}

/// Like [`follow`] for a path inside the (canonical) workspace, given
/// relative to it: the workspace itself is not walked again.
pub(crate) fn follow_inside(workspace: &Path, rel: &Path, fs: &dyn FsFacts) -> Option<PathBuf> {
    walk_path(workspace.to_path_buf(), rel, workspace, fs)
        .ok()
        .map(|w| w.path)
}

/// Resolves like the kernel's path walk: lstat each component, follow
/// symlinks (relative ones from the link's directory), `..` from the real
/// parent. Components under a missing directory are missing too.
fn walk_path(
    mut out: PathBuf,
    rel: &Path,
    workspace: &Path,
    fs: &dyn FsFacts,
) -> Result<Walked, WalkError> {
    // A stack of components still to walk, the next one last: borrowed from
    // `rel`, owned when a symlink's target put them there.
    let mut stack: Vec<Cow<'_, OsStr>> = Vec::with_capacity(8);
    push_components(&mut stack, rel, Cow::Borrowed);
    let mut facts = Some(DIR);
    let mut links = 0usize;

    while let Some(c) = stack.pop() {
        if let Some(f) = facts
            && matches!(f.kind, FileKind::File | FileKind::Other)
        {
            return Err(WalkError::NotADir(out));
        }
        if *c == *OsStr::new("..") {
            out.pop();
            // The parent of an existing directory is a directory; out of a
            // missing one we may be back where things exist.
            facts = if facts.is_some() {
                Some(DIR)
            } else {
                fs.symlink_metadata(&out)
            };
            continue;
        }
        out.push(&*c);
        if is_magic(&out) && !out.starts_with(workspace) {
            return Err(WalkError::Magic(out));
        }
        if facts.is_none() {
            continue;
        }
        match fs.symlink_metadata(&out) {
            None => facts = None,
            Some(f) if f.kind == FileKind::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(WalkError::Loop);
                }
                let Some(target) = fs.read_link(&out) else {
                    return Err(WalkError::Unreadable(out));
                };
                out.pop();
                if target.has_root() {
                    out = PathBuf::from("/");
                }
                push_components(&mut stack, &target, |c| Cow::Owned(c.to_os_string()));
                facts = Some(DIR);
            }
            Some(f) => facts = Some(f),
        }
    }
    Ok(Walked { path: out, facts })
}

/// Pushes `p`'s components in reverse (the first one last), each through
/// `keep` (borrowed from `p`, or copied).
fn push_components<'a, 'p>(
    stack: &mut Vec<Cow<'a, OsStr>>,
    p: &'p Path,
    keep: impl Fn(&'p OsStr) -> Cow<'a, OsStr>,
) {
    let start = stack.len();
    for c in p.components() {
        match c {
            Component::Normal(n) => stack.push(keep(n)),
            Component::ParentDir => stack.push(keep(OsStr::new(".."))),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    stack[start..].reverse();
}

/// `/proc/...` and the `/dev` aliases of `/proc/self/fd`.
fn is_magic(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    under(b, b"/proc")
        || (b.starts_with(b"/dev/")
            && [
                &b"/dev/fd"[..],
                b"/dev/stdin",
                b"/dev/stdout",
                b"/dev/stderr",
            ]
            .iter()
            .any(|m| under(b, m)))
}

/// Joins and normalises `.` and `..` without touching the filesystem.
pub(crate) fn lexical_join(base: &Path, p: &str) -> PathBuf {
    let mut out = starting_point(base, p);
    for c in Path::new(p).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `p` is `base` or lies inside it, comparing whole components. Both are
/// normalised absolute paths (no `.`, `..`, `//` or trailing slash), as every
/// path built here is; `base` may be `/`.
pub(crate) fn under(p: &[u8], base: &[u8]) -> bool {
    let base = base.strip_suffix(b"/").unwrap_or(base);
    p.starts_with(base) && (p.len() == base.len() || p[base.len()] == b'/')
}

/// `b` is an absolute path with no `.` or `..` component, no `//` and no
/// trailing `/` (other than `/` itself): the form [`under`] compares.
fn is_clean(b: &[u8]) -> bool {
    b == b"/"
        || (b.first() == Some(&b'/')
            && b.last() != Some(&b'/')
            && b[1..]
                .split(|&c| c == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b".."))
}

/// `Path::strip_prefix` (whole components) for a `p` built by this module,
/// which is always clean: the part of `p` below `base` (empty when `p` is
/// `base`), compared on bytes when `base` is clean too.
fn rest_within<'a>(p: &'a Path, base: &Path) -> Option<&'a Path> {
    use std::os::unix::ffi::OsStrExt;
    let (pb, b) = (p.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    if !is_clean(b) {
        return p.strip_prefix(base).ok();
    }
    if !under(pb, b) {
        return None;
    }
    let rest = pb[b.len()..].strip_prefix(b"/").unwrap_or(&pb[b.len()..]);
    Some(Path::new(std::ffi::OsStr::from_bytes(rest)))
}

/// `p` is `base` or lies inside it (whole components), on bytes when both
/// are clean absolute paths, as every path the policy builds is.
pub(crate) fn path_under(p: &Path, base: &Path) -> bool {
    rest_within(p, base).is_some()
}

/// The part of `p` below `base`, if `p` lies strictly inside it.
fn below<'a>(p: &'a [u8], base: &[u8]) -> Option<&'a [u8]> {
    let base = base.strip_suffix(b"/").unwrap_or(base);
    p.strip_prefix(base)?.strip_prefix(b"/")
}

/// Names a credential path, if `p` is one or lies inside one: the session
/// owner's home, root's, any `/home/<user>`, and the system-wide list.
/// Called for every path argument, so it works on bytes.
pub(crate) fn credential_kind(p: &Path, home: Option<&Path>) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    if b.ends_with(b"/docker.sock") {
        return Some("a Docker socket (root on the host)");
    }
    if b.starts_with(b"/etc/") || b.starts_with(b"/run/") || b.starts_with(b"/var/") {
        if let Some(c) = SYSTEM_CREDENTIALS
            .iter()
            .find(|c| under(b, c.path.as_bytes()))
        {
            return Some(c.what);
        }
        if let Some(rest) = below(b, b"/etc/ssh")
            && rest.starts_with(b"ssh_host_")
        {
            return Some("an SSH host key");
        }
        if !b.starts_with(b"/var/") {
            return None;
        }
    }
    let in_home = |h: &[u8]| -> Option<&'static str> {
        let rest = below(b, h)?;
        HOME_CREDENTIALS
            .iter()
            .find(|c| under(rest, c.path.as_bytes()))
            .map(|c| c.what)
    };
    if let Some(h) = home
        && let Some(what) = in_home(h.as_os_str().as_bytes())
    {
        return Some(what);
    }
    if let Some(what) = in_home(b"/root") {
        return Some(what);
    }
    if let Some(rest) = below(b, b"/home") {
        let user_len = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
        let user_home = &b[..b"/home/".len() + user_len];
        return in_home(user_home);
    }
    None
}

/// Names a credential path strictly inside the tree `root` (what `find ROOT
/// -exec cat {} +` reads besides `root` itself, which [`credential_kind`]
/// judges).
pub(crate) fn tree_holds_credential(root: &Path, home: Option<&Path>) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let r = root.as_os_str().as_bytes();
    let homes = home
        .map(|h| h.as_os_str().as_bytes())
        .into_iter()
        .chain([&b"/root"[..]]);
    for h in homes {
        if under(h, r) {
            return HOME_CREDENTIALS.first().map(|c| c.what);
        }
    }
    // `/home` or `/`: every user's home.
    if under(b"/home", r) {
        return HOME_CREDENTIALS.first().map(|c| c.what);
    }
    if let Some(rest) = below(r, b"/home")
        && !rest.contains(&b'/')
    {
        return HOME_CREDENTIALS.first().map(|c| c.what);
    }
    SYSTEM_CREDENTIALS
        .iter()
        .find(|c| under(c.path.as_bytes(), r))
        .map(|c| c.what)
}

/// Whether a glob (an absolute path pattern, `~` already expanded) can match
/// a credential path or something inside one. Compares component by
/// component; `*` does not match a leading dot, as in bash without dotglob.
pub(crate) fn glob_reaches_credential(pattern: &str, home: Option<&Path>) -> bool {
    let pcs: Vec<&str> = pattern
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let comp_match = |p: &str, c: &str| -> bool {
        if c == "*" {
            // Any user's home directory.
            return true;
        }
        if !p.contains(['*', '?', '[', '{']) {
            return p == c;
        }
        if c.starts_with('.') && !p.starts_with('.') {
            return false;
        }
        match globset::Glob::new(p) {
            Ok(g) => g.compile_matcher().is_match(c),
            Err(_) => true,
        }
    };
    let reaches = |cred: &str| -> bool {
        let cs: Vec<&str> = cred.split('/').filter(|c| !c.is_empty()).collect();
        pcs.len() >= cs.len() && cs.iter().zip(&pcs).all(|(c, p)| comp_match(p, c))
    };
    let home = home.map(|h| h.to_string_lossy().into_owned());
    for h in home.iter().map(String::as_str).chain(["/root", "/home/*"]) {
        for c in HOME_CREDENTIALS {
            if reaches(&format!("{h}/{}", c.path)) {
                return true;
            }
        }
    }
    SYSTEM_CREDENTIALS.iter().any(|c| reaches(c.path))
}

/// True when `rel` (workspace-relative) lies inside a `.git` directory, in
/// any letter case (the workspace may be shared with a case-insensitive host).
pub(crate) fn is_git_internal(rel: &Path) -> bool {
    let mut comps = rel.components().peekable();
    while let Some(c) = comps.next() {
        if let Component::Normal(n) = c
            && n.to_string_lossy().eq_ignore_ascii_case(".git")
            && comps.peek().is_some()
        {
            return true;
        }
    }
    false
}

/// Workspace secret files: reading them needs an approval, and their content
/// is redacted in the audit log. The tools crate can use this to skip them
/// when listing or searching.
pub fn is_secret_file_name(name: &str) -> bool {
    // Lowercased only when it has capitals: most names are already lowercase.
    let n: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
        name.to_ascii_lowercase().into()
    } else {
        name.into()
    };
    let env_template = [".example", ".sample", ".template", ".dist", ".defaults"]
        .iter()
        .any(|s| n.ends_with(s));
    if n == ".env"
        || (n.starts_with(".env.") && !env_template)
        || (n.ends_with(".env") && n.len() > 4)
    {
        return true;
    }
    if [
        ".pem",
        ".key",
        ".p12",
        ".pfx",
        ".jks",
        ".keystore",
        ".kdbx",
        ".ppk",
    ]
    .iter()
    .any(|ext| n.ends_with(ext))
    {
        return true;
    }
    if matches!(
        n.as_ref(),
        ".netrc"
            | "_netrc"
            | ".git-credentials"
            | ".npmrc"
            | ".pypirc"
            | ".pgpass"
            | ".htpasswd"
            | ".vault-token"
            | ".envrc"
    ) {
        return true;
    }
    if n.starts_with("credentials") || n.starts_with("secrets.") {
        return true;
    }
    // SSH-style private keys: id_rsa, id_ed25519, ... but not id_rsa.pub or id_utils.rs.
    n.starts_with("id_") && n.len() > 3 && !n.contains('.')
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::mode::Mode;

    /// An in-memory filesystem: files, dirs, symlinks, FIFOs.
    #[derive(Default)]
    struct MemFs {
        nodes: HashMap<PathBuf, (FileFacts, Option<PathBuf>)>,
    }

    impl MemFs {
        fn dir(mut self, p: &str) -> Self {
            self.nodes.insert(p.into(), (DIR, None));
            self
        }
        fn file(mut self, p: &str, size: u64, nlink: u64) -> Self {
            let f = FileFacts {
                kind: FileKind::File,
                size,
                nlink,
            };
            self.nodes.insert(p.into(), (f, None));
            self
        }
        fn fifo(mut self, p: &str) -> Self {
            let f = FileFacts {
                kind: FileKind::Other,
                size: 0,
                nlink: 1,
            };
            self.nodes.insert(p.into(), (f, None));
            self
        }
        fn link(mut self, p: &str, target: &str) -> Self {
            let f = FileFacts {
                kind: FileKind::Symlink,
                size: 0,
                nlink: 1,
            };
            self.nodes.insert(p.into(), (f, Some(target.into())));
            self
        }
    }

    impl FsFacts for MemFs {
        fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
            if path == Path::new("/") {
                return Some(DIR);
            }
            self.nodes.get(path).map(|n| n.0)
        }
        fn read_link(&self, path: &Path) -> Option<PathBuf> {
            self.nodes.get(path).and_then(|n| n.1.clone())
        }
    }

    fn ctx() -> Context {
        Context {
            workspace: "/w/proj".into(),
            mode: Mode::Default,
            tools: None,
            home: Some("/home/u".into()),
            protected: vec!["/var/lib/tollgate".into(), "/w/proj/.tollgate-audit".into()],
            read_files: BTreeSet::new(),
            repo: Vec::new(),
            sandbox: None,
        }
    }

    fn fs() -> MemFs {
        MemFs::default()
            .dir("/w")
            .dir("/w/proj")
            .dir("/w/proj/src")
            .file("/w/proj/src/main.rs", 13, 1)
            .file("/w/proj/README.md", 214, 1)
            .dir("/etc")
            .file("/etc/passwd", 1000, 1)
            .dir("/home/u")
            .file("/home/u/.bashrc", 10, 1)
            .dir("/home/u/.ssh")
            .file("/home/u/.ssh/id_rsa", 10, 1)
            .dir("/tmp")
    }

    fn ok(raw: &str, access: Access, fs: &MemFs) -> Resolved {
        resolve(raw, access, &ctx(), fs).unwrap_or_else(|e| panic!("{raw:?}: {e:?}"))
    }

    fn rule(raw: &str, access: Access, fs: &MemFs) -> &'static str {
        match resolve(raw, access, &ctx(), fs) {
            Ok(r) => panic!("{raw:?} was allowed as {r:?}"),
            Err(e) => e.rule,
        }
    }

    #[test]
    fn ordinary_paths_resolve_inside() {
        let fs = fs();
        let r = ok("src/main.rs", Access::Read, &fs);
        assert_eq!(r.abs, PathBuf::from("/w/proj/src/main.rs"));
        assert_eq!(r.rel, "src/main.rs");
        assert_eq!(r.facts.unwrap().size, 13);
        assert_eq!(
            ok("./src/././main.rs", Access::Read, &fs).rel,
            "src/main.rs"
        );
        assert_eq!(
            ok("/w/proj/src/main.rs", Access::Read, &fs).rel,
            "src/main.rs"
        );
        assert_eq!(
            ok("../proj/src/main.rs", Access::Read, &fs).rel,
            "src/main.rs"
        );
        let n = ok("new_dir/new_file.txt", Access::Write, &fs);
        assert_eq!((n.rel.as_str(), n.facts), ("new_dir/new_file.txt", None));
        assert_eq!(ok("a/../b", Access::Write, &fs).rel, "b");
        assert_eq!(ok(".", Access::Search, &fs).rel, ".");
    }

    #[test]
    fn escapes_are_refused_by_component_not_prefix() {
        let fs = fs().dir("/w/proj-evil");
        for raw in [
            "../outside.txt",
            "a/../../x",
            "/etc/passwd",
            "/",
            "//etc/passwd",
            "/w/proj-evil/secret.txt",
            "/w/proj/../etc",
            "/tmp/agent-scratch.txt",
        ] {
            assert_eq!(rule(raw, Access::Read, &fs), "floor:path-scope", "{raw}");
        }
    }

    #[test]
    fn continuing_after_a_file_is_refused() {
        assert_eq!(
            rule("src/main.rs/../../../etc/passwd", Access::Read, &fs()),
            "floor:path-scope"
        );
        assert_eq!(
            rule("README.md/x", Access::Write, &fs()),
            "floor:path-scope"
        );
    }

    #[test]
    fn symlinks_are_followed_component_by_component() {
        let fs = fs()
            .link("/w/proj/up", "..")
            .link("/w/proj/inner", "src")
            .link("/w/proj/link", "../../../../../../etc")
            .link("/w/proj/out.txt", "/home/u/.bashrc")
            .link("/w/proj/new.txt", "/tmp/created-by-agent")
            .link("/w/proj/dir", "/tmp")
            .link("/w/proj/loop1", "loop2")
            .link("/w/proj/loop2", "loop1")
            .link("/w/proj/r", "/proc/self/root")
            .link("/w/proj/sneaky.txt", ".env")
            .file("/w/proj/.env", 5, 1);
        assert_eq!(ok("inner/main.rs", Access::Read, &fs).rel, "src/main.rs");
        assert_eq!(
            ok("up/proj/src/main.rs", Access::Read, &fs).rel,
            "src/main.rs"
        );
        assert_eq!(rule("link/passwd", Access::Read, &fs), "floor:path-scope");
        assert_eq!(rule("out.txt", Access::Write, &fs), "floor:path-scope");
        assert_eq!(rule("new.txt", Access::Write, &fs), "floor:path-scope");
        assert_eq!(rule("dir/newfile", Access::Write, &fs), "floor:path-scope");
        let e = resolve("loop1", Access::Read, &ctx(), &fs).unwrap_err();
        assert!(e.reason.contains("symlink loop"), "{e:?}");
        assert_eq!(rule("r/etc/passwd", Access::Read, &fs), "floor:path-scope");
        assert!(ok("sneaky.txt", Access::Read, &fs).secret);
    }

    #[test]
    fn magic_and_proc_paths_are_refused() {
        for raw in [
            "/proc/self/root/etc/passwd",
            "/proc/thread-self/root/etc/passwd",
            "/proc/self/environ",
            "/proc/1/environ",
            "/proc/self/fd/0",
            "/dev/fd/3",
        ] {
            let e = resolve(raw, Access::Read, &ctx(), &fs()).unwrap_err();
            assert_eq!(e.rule, "floor:path-scope", "{raw}");
        }
    }

    #[test]
    fn malformed_paths_are_refused() {
        let long = "a/".repeat(2100);
        let long_name = "n".repeat(300);
        for raw in [
            "",
            "src/main.rs\0.txt",
            "src/\0/../../etc/passwd",
            "~root/.bashrc",
            "~/x",
            "$HOME/.aws/credentials",
            "${HOME}/x",
            "a/$(id)",
            long.as_str(),
            long_name.as_str(),
        ] {
            assert_eq!(
                rule(raw, Access::Read, &fs()),
                "floor:path-scope",
                "{raw:?}"
            );
        }
    }

    #[test]
    fn literal_oddities_stay_inside() {
        let fs = fs();
        for raw in [
            "file:///etc/passwd",
            "..%2f..%2fetc%2fpasswd",
            "．．/．．/etc/passwd",
            "café.txt",
            "\u{202E}txt.exe",
            "notes\nINFO approved path=/etc/shadow.txt",
            "Foo$Bar.class",
        ] {
            let r = ok(raw, Access::Write, &fs);
            assert!(r.abs.starts_with("/w/proj"), "{raw:?}");
        }
    }

    #[test]
    fn the_workspace_itself_and_directories_are_not_files() {
        assert_eq!(rule(".", Access::Write, &fs()), "floor:not-a-file");
        assert_eq!(rule("", Access::Read, &fs()), "floor:path-scope");
        assert_eq!(rule("src", Access::Read, &fs()), "floor:not-a-file");
        assert_eq!(ok("src", Access::Search, &fs()).rel, "src");
    }

    #[test]
    fn credentials_protected_and_special_files() {
        let fs = fs()
            .fifo("/w/proj/pipe")
            .file("/w/proj/hl", 5, 2)
            .dir("/w/proj/.tollgate-audit");
        assert_eq!(
            rule("/home/u/.ssh/id_rsa", Access::Read, &fs),
            "floor:credential-path"
        );
        assert_eq!(
            rule("/root/.aws/credentials", Access::Read, &fs),
            "floor:credential-path"
        );
        assert_eq!(
            rule("/home/other/.kube/config", Access::Read, &fs),
            "floor:credential-path"
        );
        assert_eq!(
            rule("/var/run/docker.sock", Access::Write, &fs),
            "floor:credential-path"
        );
        assert_eq!(
            rule("/etc/shadow", Access::Read, &fs),
            "floor:credential-path"
        );
        assert_eq!(
            rule("/var/lib/tollgate/policy.toml", Access::Write, &fs),
            "floor:protected"
        );
        assert_eq!(
            rule(".tollgate-audit/a.jsonl", Access::Read, &fs),
            "floor:protected"
        );
        assert_eq!(rule("pipe", Access::Read, &fs), "floor:special-file");
        assert_eq!(rule("hl", Access::Write, &fs), "floor:hardlink");
        assert_eq!(ok("hl", Access::Read, &fs).rel, "hl");
    }

    #[test]
    fn git_internals_are_read_only() {
        let fs = fs().dir("/w/proj/.git").file("/w/proj/.git/HEAD", 20, 1);
        assert_eq!(ok(".git/HEAD", Access::Read, &fs).rel, ".git/HEAD");
        for raw in [
            ".git/config",
            ".git/hooks/post-checkout",
            ".GIT/config",
            "sub/.git/config",
        ] {
            assert_eq!(
                rule(raw, Access::Write, &fs),
                "floor:git-internals",
                "{raw}"
            );
        }
        assert_eq!(
            ok(".gitattributes", Access::Write, &fs).rel,
            ".gitattributes"
        );
        // A `.git` *file* (a gitfile naming a git directory the agent
        // controls) is refused too, at any depth, where none exists yet.
        let bare = self::fs();
        for raw in [".git", "sub/.git", "src/.Git"] {
            assert_eq!(
                rule(raw, Access::Write, &bare),
                "floor:git-internals",
                "{raw}"
            );
        }
    }

    #[test]
    fn byte_prefixes_agree_with_path_components() {
        let paths = [
            "/",
            "/w",
            "/w/proj",
            "/w/proj/a",
            "/w/proj-evil",
            "/w/projx/a",
            "/x",
        ];
        let bases = [
            "/",
            "/w",
            "/w/proj",
            "/w/proj/",
            "/w//proj",
            "/w/./proj",
            "/w/x/../proj",
            "/w/proj/a",
        ];
        for p in paths {
            for b in bases {
                let (p, b) = (Path::new(p), Path::new(b));
                assert_eq!(
                    rest_within(p, b).is_some(),
                    p.starts_with(b),
                    "{p:?} within {b:?}"
                );
                assert_eq!(
                    rest_within(p, b),
                    p.strip_prefix(b).ok(),
                    "{p:?} below {b:?}"
                );
            }
        }
        assert!(is_clean(b"/") && is_clean(b"/w/proj"));
        for unclean in ["", "w", "/w/", "//w", "/w/.", "/w/..", "/w/./x", "/w//x"] {
            assert!(!is_clean(unclean.as_bytes()), "{unclean:?}");
        }
    }

    #[test]
    fn component_prefixes_on_bytes() {
        assert!(under(b"/w/proj", b"/w/proj"));
        assert!(under(b"/w/proj/a", b"/w/proj"));
        assert!(!under(b"/w/proj-evil", b"/w/proj"));
        assert!(under(b"/anything", b"/"));
        assert!(under(b"/home/u/.ssh/id_rsa", b"/home/u/.ssh"));
        assert_eq!(below(b"/home/u/x", b"/home/u"), Some(&b"x"[..]));
        assert_eq!(below(b"/home/u", b"/home/u"), None);
        assert_eq!(
            credential_kind(Path::new("/home/bob/.ssh"), None),
            Some("an SSH key directory")
        );
        assert_eq!(credential_kind(Path::new("/home/bob"), None), None);
        assert_eq!(
            credential_kind(Path::new("/home/u/.sshx"), Some(Path::new("/home/u"))),
            None
        );
        assert_eq!(
            credential_kind(Path::new("/srv/u/.aws/x"), Some(Path::new("/srv/u"))),
            Some("AWS credentials")
        );
        assert_eq!(
            credential_kind(Path::new("/etc/ssh/ssh_host_ed25519_key"), None),
            Some("an SSH host key")
        );
        assert_eq!(
            credential_kind(Path::new("/etc/ssh/ssh_config"), None),
            None
        );
        assert_eq!(
            credential_kind(Path::new("/x/docker.sock"), None),
            Some("a Docker socket (root on the host)")
        );
    }

    /// Every entry of the one table (docs/THREAT_MODEL.md, "Credential
    /// paths") is a credential path to the
    /// floor, beneath the owner's home, root's and any /home/<user>, and
    /// at any depth inside it.
    #[test]
    fn every_table_entry_is_a_credential_path() {
        let home = Some(Path::new("/srv/u"));
        for c in HOME_CREDENTIALS {
            for h in ["/srv/u", "/root", "/home/other"] {
                for p in [format!("{h}/{}", c.path), format!("{h}/{}/x/y", c.path)] {
                    assert_eq!(credential_kind(Path::new(&p), home), Some(c.what), "{p}");
                }
            }
        }
        for c in SYSTEM_CREDENTIALS {
            for p in [c.path.to_string(), format!("{}/x", c.path)] {
                // Any `…/docker.sock` is named before the table is looked at.
                assert!(credential_kind(Path::new(&p), home).is_some(), "{p}");
            }
        }
        assert_eq!(
            credential_kind(
                Path::new("/var/lib/postgresql/.pgpass"),
                Some(Path::new("/var/lib/postgresql"))
            ),
            Some("a PostgreSQL password file")
        );
        assert_eq!(credential_kind(Path::new("/var/lib/dockerx"), home), None);
        assert_eq!(credential_kind(Path::new("/var/log/syslog"), home), None);
    }

    #[test]
    fn trees_that_hold_credentials() {
        let home = Some(Path::new("/home/u"));
        let holds = |p: &str| tree_holds_credential(Path::new(p), home).is_some();
        for p in [
            "/",
            "/home",
            "/home/u",
            "/home/other",
            "/root",
            "/etc",
            "/run",
            "/var/run",
        ] {
            assert!(holds(p), "{p}");
        }
        for p in ["/home/u/proj", "/tmp", "/usr", "/etc/apt", "/home/u/.cache"] {
            assert!(!holds(p), "{p}");
        }
    }

    #[test]
    fn globs_that_can_reach_credentials() {
        let home = Some(Path::new("/home/u"));
        for g in [
            "/home/u/.s*/id_rsa",
            "/home/*/.ssh/id_rsa",
            "/root/.aws/*",
            "/etc/sha*",
            "/home/u/.{ssh,aws}",
            "/home/u/.[s]sh/x",
        ] {
            assert!(glob_reaches_credential(g, home), "{g}");
        }
        for g in [
            "/*",
            "/home/u/*",
            "/home/*",
            "/w/proj/*.rs",
            "/etc/*.conf",
            "/home/u/src/*",
        ] {
            assert!(!glob_reaches_credential(g, home), "{g}");
        }
    }

    #[test]
    fn secret_file_names() {
        for s in [
            ".env",
            ".env.production",
            "prod.env",
            "server.pem",
            "tls.key",
            "id_rsa",
            "id_ed25519",
            ".netrc",
            "credentials",
            "credentials.json",
            ".git-credentials",
            ".envrc",
        ] {
            assert!(is_secret_file_name(s), "{s}");
        }
        for s in [
            ".env.example",
            ".envrc.d",
            ".venv",
            "id_rsa.pub",
            "id_utils.rs",
            "main.rs",
            "environment.md",
            "keys.rs",
        ] {
            assert!(!is_secret_file_name(s), "{s}");
        }
    }
}
