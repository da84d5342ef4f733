//! Names the host runs by itself: the one table (docs/THREAT_MODEL.md
//! "What the host runs by itself").
//!
//! A file written inside the workspace is only data, until a program on the
//! host reads it as instructions without anyone asking it to: git reads
//! `.git/config` and runs `.git/hooks` on the next `git status` (editors run
//! one when a folder opens), direnv runs `.envrc` when a shell enters the
//! directory, VS Code runs tasks from `.vscode/`, Claude Code starts the
//! servers `.mcp.json` names. [`HOST_EXEC`] lists those names, what kind of
//! entry each is and, in words, what runs it.
//!
//! Everything that guards them uses this table and no copy of it: the
//! policy (a write through the file tools to any of them, at any depth and
//! in any letter case, is refused for `.git` and otherwise needs the user's
//! typed confirmation, in every mode), both sandboxes (the daemon passes the
//! names in `SandboxSpec`; the sandbox makes each read-only, reserving the
//! ones that do not exist yet) and the docs (docs/THREAT_MODEL.md holds
//! [`markdown_table`]'s output, checked by a test).
//!
//! A git directory is split rather than frozen: [`GIT_DIR_READ_ONLY`]
//! names what the host's git obeys inside one (config, hooks, info,
//! commondir, ...), which both sandboxes keep read-only while the rest
//! (objects, refs, the index) stays writable for git's ordinary work; the
//! file tools still refuse every write into `.git` (git is the way to
//! change a repository), and docs/THREAT_MODEL.md holds
//! [`git_dir_markdown`]'s output.
//!
//! Besides the fixed names, a repository's own configuration can make more
//! paths host-executed (`core.hooksPath`, an `include.path` into the
//! workspace, a worktree's git directory elsewhere in the workspace): the
//! daemon finds those on the host and hands them in as [`RepoPath`]s.

use std::path::{Component, Path, PathBuf};

/// What kind of entry a name is when it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostExecKind {
    /// A directory: the name and everything beneath it.
    Dir,
    /// A file.
    File,
}

impl HostExecKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HostExecKind::Dir => "directory",
            HostExecKind::File => "file",
        }
    }
}

/// What the file tools do with a write to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRule {
    /// Never written by the agent, in any mode (the hard floor).
    Refuse,
    /// Needs the user's typed confirmation (destructive) in every mode;
    /// refused where nobody can confirm.
    Confirm,
}

/// One name the host runs by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExecName {
    /// One path component, spelled as the program that reads it spells it;
    /// matched in any letter case.
    pub name: &'static str,
    pub kind: HostExecKind,
    pub write: WriteRule,
    /// What runs it, as the end of a sentence: "git runs this on every commit".
    pub runs: &'static str,
}

const fn entry(
    name: &'static str,
    kind: HostExecKind,
    write: WriteRule,
    runs: &'static str,
) -> HostExecName {
    HostExecName {
        name,
        kind,
        write,
        runs,
    }
}

use HostExecKind::{Dir, File};
use WriteRule::{Confirm, Refuse};

const SHELL_RC: &str = "a shell runs this at start-up when this directory is its home";

/// The table. Every name is a single path component.
pub const HOST_EXEC: &[HostExecName] = &[
    entry(
        ".git",
        Dir,
        Refuse,
        "git reads its config and runs its hooks from here on every git command, including the `git status` an editor runs when the folder opens",
    ),
    entry(
        "HEAD",
        File,
        Confirm,
        "git takes a directory holding HEAD, objects/ and refs/ for a repository when it runs there, and obeys the config file beside them",
    ),
    entry(
        ".gitmodules",
        File,
        Confirm,
        "git clones and checks out the repositories this file names when submodules are updated",
    ),
    entry(
        ".husky",
        Dir,
        Confirm,
        "git runs the hooks in here (husky) on every commit",
    ),
    entry(
        ".pre-commit-config.yaml",
        File,
        Confirm,
        "pre-commit runs the hooks this file names on every commit",
    ),
    entry(
        "lefthook.yml",
        File,
        Confirm,
        "lefthook runs the commands this file names on every commit",
    ),
    entry(
        ".lefthook.yml",
        File,
        Confirm,
        "lefthook runs the commands this file names on every commit",
    ),
    entry(
        ".vscode",
        Dir,
        Confirm,
        "VS Code runs tasks from this directory and applies its settings when the folder opens",
    ),
    entry(
        ".idea",
        Dir,
        Confirm,
        "JetBrains IDEs run the run configurations and startup tasks kept here when the project opens",
    ),
    entry(
        ".devcontainer",
        Dir,
        Confirm,
        "VS Code and the devcontainer CLI run the commands in here when they build the container",
    ),
    entry(
        ".devcontainer.json",
        File,
        Confirm,
        "VS Code and the devcontainer CLI run the commands in this file when they build the container",
    ),
    entry(
        ".envrc",
        File,
        Confirm,
        "direnv runs this when a shell enters the directory",
    ),
    entry(
        ".mcp.json",
        File,
        Confirm,
        "Claude Code starts the MCP servers this file names",
    ),
    entry(
        ".claude",
        Dir,
        Confirm,
        "Claude Code runs the hooks and starts the MCP servers configured in here",
    ),
    entry(
        ".codex",
        Dir,
        Confirm,
        "Codex runs the commands and starts the MCP servers configured in here",
    ),
    entry(
        ".agents",
        Dir,
        Confirm,
        "coding agents load the skills and commands in here and run them",
    ),
    entry(
        ".cursor",
        Dir,
        Confirm,
        "Cursor runs the hooks and starts the MCP servers configured in here",
    ),
    entry(
        ".gemini",
        Dir,
        Confirm,
        "Gemini CLI starts the MCP servers configured in here",
    ),
    entry(
        ".cargo",
        Dir,
        Confirm,
        "cargo runs the programs its config.toml here names (runners, linkers, rustc wrappers) on every build",
    ),
    entry(".bashrc", File, Confirm, SHELL_RC),
    entry(".bash_profile", File, Confirm, SHELL_RC),
    entry(".bash_login", File, Confirm, SHELL_RC),
    entry(".bash_logout", File, Confirm, SHELL_RC),
    entry(".profile", File, Confirm, SHELL_RC),
    entry(".zshrc", File, Confirm, SHELL_RC),
    entry(".zshenv", File, Confirm, SHELL_RC),
    entry(".zprofile", File, Confirm, SHELL_RC),
    entry(".zlogin", File, Confirm, SHELL_RC),
    entry(".zlogout", File, Confirm, SHELL_RC),
];

/// How a sandbox attaches a workspace's git directories (`[sandbox]
/// git_dir`, docs/INTERFACES.md). The split is opt-in: it leaves a hole
/// the all-read-only default does not have (docs/THREAT_MODEL.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GitDirMode {
    /// The whole git directory read-only: git can read inside, not commit.
    #[default]
    ReadOnly,
    /// Only [`GIT_DIR_READ_ONLY`] read-only, the rest writable: ordinary
    /// git works inside.
    Split,
}

impl GitDirMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GitDirMode::ReadOnly => "read-only",
            GitDirMode::Split => "split",
        }
    }

    pub fn parse(s: &str) -> Result<GitDirMode, String> {
        match s {
            "read-only" => Ok(GitDirMode::ReadOnly),
            "split" => Ok(GitDirMode::Split),
            other => Err(format!(
                "[sandbox] git_dir: unknown value {other:?} (expected \"read-only\" or \"split\")"
            )),
        }
    }
}

/// What stands in for a protected path inside a git directory that does
/// not exist when a sandbox starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// An empty read-only directory.
    EmptyDir,
    /// A read-only file holding these bytes (what git reads as "nothing":
    /// `.` for `commondir`, an empty config or alternates list).
    File(&'static str),
    /// Nothing: git reads this path only where it already exists.
    Nothing,
}

/// One path inside a git directory that the host's git obeys: read-only in
/// the sandbox and not replaceable, everything else in the git directory
/// stays writable (objects, refs, logs, the index, `HEAD`, `ORIG_HEAD`,
/// `FETCH_HEAD`, `MERGE_*`, `rebase-*`, `sequencer/`, `packed-refs`, lock
/// files), so git's ordinary work succeeds inside (docs/THREAT_MODEL.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitDirEntry {
    /// Relative to the git directory.
    pub rel: &'static str,
    pub kind: HostExecKind,
    pub absent: Absent,
    /// Also protected in a linked worktree's own git directory
    /// (`worktrees/*`; the rest git takes from the common directory).
    pub in_worktree: bool,
    pub runs: &'static str,
}

const fn git_entry(
    rel: &'static str,
    kind: HostExecKind,
    absent: Absent,
    runs: &'static str,
) -> GitDirEntry {
    let in_worktree = matches!(
        rel.as_bytes(),
        b"config.worktree" | b"commondir" | b"gitdir"
    );
    GitDirEntry {
        rel,
        kind,
        absent,
        in_worktree,
        runs,
    }
}

/// The read-only part of every git directory: the repository's, each
/// linked worktree's (`worktrees/*`) and each submodule's (`modules/**`).
pub const GIT_DIR_READ_ONLY: &[GitDirEntry] = &[
    git_entry(
        "config",
        File,
        Absent::File(""),
        "git obeys it on every command: `core.fsmonitor`, `core.pager`, aliases, drivers and helpers name programs it runs",
    ),
    git_entry(
        "config.worktree",
        File,
        Absent::File(""),
        "git reads it as config when `extensions.worktreeConfig` is set",
    ),
    git_entry(
        "hooks",
        Dir,
        Absent::EmptyDir,
        "git runs the hooks in here on commit, checkout, merge, push and more",
    ),
    git_entry(
        "info",
        Dir,
        Absent::EmptyDir,
        "git reads `info/attributes` (filter and diff drivers) and `info/exclude` from here",
    ),
    git_entry(
        "commondir",
        File,
        Absent::File(".\n"),
        "git takes the config, hooks and objects of the directory this file names",
    ),
    git_entry(
        "gitdir",
        File,
        Absent::Nothing,
        "git finds a linked worktree's working tree through it",
    ),
    git_entry(
        "objects/info/alternates",
        File,
        Absent::File(""),
        "git reads objects from the directories this file names",
    ),
    git_entry(
        "objects/info/http-alternates",
        File,
        Absent::File(""),
        "git fetches objects from the addresses this file names",
    ),
];

/// The entry for a path relative to a git directory, when it is one of
/// [`GIT_DIR_READ_ONLY`] or beneath one (any letter case).
pub fn git_dir_read_only(rel: &Path) -> Option<&'static GitDirEntry> {
    GIT_DIR_READ_ONLY
        .iter()
        .find(|e| within_nocase(rel, Path::new(e.rel)))
}

/// The read-only part of a git directory as Markdown, for
/// docs/THREAT_MODEL.md (a test keeps the two equal).
pub fn git_dir_markdown() -> String {
    let mut s = String::from(
        "| path in the git directory | kind | when absent at start | what git does with it |\n",
    );
    s.push_str("|---|---|---|---|\n");
    for e in GIT_DIR_READ_ONLY {
        let absent = match e.absent {
            Absent::EmptyDir => "an empty read-only directory".to_string(),
            Absent::File("") => "an empty read-only file".to_string(),
            Absent::File(t) => format!("a read-only file holding `{}`", t.trim_end()),
            Absent::Nothing => "left absent (git reads it only where it exists)".to_string(),
        };
        s.push_str(&format!(
            "| `{}` | {} | {absent} | {} |\n",
            e.rel,
            e.kind.as_str(),
            e.runs
        ));
    }
    s
}

/// The first byte (lowercased) of every name in [`HOST_EXEC`].
const FIRST_BYTES: &[u8] = b".lh";

/// The names alone, as a sandbox takes them (`SandboxSpec::host_exec`).
pub fn names() -> Vec<String> {
    HOST_EXEC.iter().map(|e| e.name.to_string()).collect()
}

/// The table entry named `name`, in any letter case.
pub fn lookup_name(name: &str) -> Option<&'static HostExecName> {
    lookup_bytes(name.as_bytes())
}

/// [`lookup_name`] on a file name's bytes (no UTF-8 check: every name in
/// the table is ASCII).
fn lookup_bytes(b: &[u8]) -> Option<&'static HostExecName> {
    // Most components are rejected on their first byte.
    if !b
        .first()
        .is_some_and(|c| FIRST_BYTES.contains(&c.to_ascii_lowercase()))
    {
        return None;
    }
    HOST_EXEC
        .iter()
        .find(|e| e.name.len() == b.len() && e.name.as_bytes().eq_ignore_ascii_case(b))
}

/// Where a workspace-relative path meets the table: the first component
/// (any depth, any letter case) that is a host-executed name, and the path
/// up to and including it.
pub fn find_in(rel: &Path) -> Option<(&'static HostExecName, PathBuf)> {
    // Every write decision passes here: nothing is allocated unless a
    // component matches.
    for (i, c) in rel.components().enumerate() {
        match c {
            Component::Normal(n) => {
                if let Some(e) = lookup_bytes(n.as_encoded_bytes()) {
                    let upto = rel
                        .components()
                        .take(i + 1)
                        .filter(|c| matches!(c, Component::Normal(_)))
                        .collect();
                    return Some((e, upto));
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    None
}

/// A path this workspace's own git configuration makes host-executed, found
/// on the host by the daemon (the policy reads no file itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPath {
    /// Workspace-relative.
    pub rel: PathBuf,
    pub role: RepoRole,
}

impl RepoPath {
    /// The list the policy guards, from what the host's scan of the
    /// repository found ([`crate::host::repo_paths`]): git
    /// directories not named `.git` (those the fixed table covers),
    /// included config files, hooks directories.
    pub fn from_scan(
        git: Vec<PathBuf>,
        configs: Vec<PathBuf>,
        hooks: Vec<PathBuf>,
    ) -> Vec<RepoPath> {
        let named_git = |p: &PathBuf| {
            p.file_name()
                .is_some_and(|n| n.eq_ignore_ascii_case(".git"))
        };
        let with = |role: RepoRole| move |rel: PathBuf| RepoPath { rel, role };
        git.into_iter()
            .filter(|p| !named_git(p))
            .map(with(RepoRole::GitDir))
            .chain(configs.into_iter().map(with(RepoRole::GitConfig)))
            .chain(hooks.into_iter().map(with(RepoRole::HooksDir)))
            .collect()
    }
}

/// Why a [`RepoPath`] is host-executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoRole {
    /// A git directory that is not named `.git` (a worktree's, or the
    /// common directory one points to): refused like `.git`.
    GitDir,
    /// A config file git includes (`include.path`, `includeIf`).
    GitConfig,
    /// The hooks directory `core.hooksPath` names.
    HooksDir,
}

impl RepoRole {
    pub fn write(self) -> WriteRule {
        match self {
            RepoRole::GitDir => WriteRule::Refuse,
            RepoRole::GitConfig | RepoRole::HooksDir => WriteRule::Confirm,
        }
    }

    pub fn runs(self) -> &'static str {
        match self {
            RepoRole::GitDir => {
                "git reads its config and runs its hooks from here on every git command in this repository"
            }
            RepoRole::GitConfig => {
                "git reads this file as part of the repository's config on every git command, and a config can name programs to run"
            }
            RepoRole::HooksDir => {
                "git runs the hooks in here (the repository's core.hooksPath) on every commit, checkout and merge"
            }
        }
    }
}

/// A write target that the host runs by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostExecHit {
    /// The matching part of the path (workspace-relative).
    pub at: PathBuf,
    pub write: WriteRule,
    pub runs: &'static str,
}

/// Whether `a` equals `b` or lies beneath it, comparing components in any
/// letter case.
fn within_nocase(a: &Path, b: &Path) -> bool {
    let mut ac = a.components();
    for bc in b.components() {
        match ac.next() {
            Some(x) if x.as_os_str().eq_ignore_ascii_case(bc.as_os_str()) => {}
            _ => return false,
        }
    }
    true
}

/// Checks a workspace-relative write target against the table and the
/// repository's own paths. A refusal wins over a confirmation.
pub fn check(rel: &Path, repo: &[RepoPath]) -> Option<HostExecHit> {
    let named = find_in(rel).map(|(e, at)| HostExecHit {
        at,
        write: e.write,
        runs: e.runs,
    });
    if matches!(
        named,
        Some(HostExecHit {
            write: WriteRule::Refuse,
            ..
        })
    ) {
        return named;
    }
    if repo.is_empty() {
        return named;
    }
    let from_repo = repo
        .iter()
        .filter(|r| within_nocase(rel, &r.rel))
        .min_by_key(|r| match r.role.write() {
            WriteRule::Refuse => 0,
            WriteRule::Confirm => 1,
        })
        .map(|r| HostExecHit {
            at: r.rel.clone(),
            write: r.role.write(),
            runs: r.role.runs(),
        });
    match (named, from_repo) {
        (_, Some(r)) if r.write == WriteRule::Refuse => Some(r),
        (Some(n), _) => Some(n),
        (None, r) => r,
    }
}

/// The table as Markdown, for docs/THREAT_MODEL.md (a test keeps the two
/// equal).
pub fn markdown_table() -> String {
    let mut s = String::from("| name | kind | a write through the file tools | what runs it |\n");
    s.push_str("|---|---|---|---|\n");
    for e in HOST_EXEC {
        let write = match e.write {
            WriteRule::Refuse => "refused (floor)",
            WriteRule::Confirm => "typed confirmation",
        };
        s.push_str(&format!(
            "| `{}` | {} | {write} | {} |\n",
            e.name,
            e.kind.as_str(),
            e.runs
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_components_unique_in_any_case() {
        let mut seen = std::collections::BTreeSet::new();
        for e in HOST_EXEC {
            assert!(!e.name.is_empty() && !e.name.contains('/'), "{}", e.name);
            assert!(![".", ".."].contains(&e.name), "{}", e.name);
            assert!(seen.insert(e.name.to_ascii_lowercase()), "{} twice", e.name);
            assert!(!e.runs.is_empty() && !e.runs.ends_with('.'), "{}", e.name);
            // The fast rejection in lookup_name must not hide an entry.
            assert!(FIRST_BYTES.contains(&e.name.as_bytes()[0].to_ascii_lowercase()));
            assert_eq!(lookup_name(e.name), Some(e));
            assert_eq!(lookup_name(&e.name.to_ascii_uppercase()), Some(e));
            assert_eq!(lookup_name(&e.name.to_ascii_lowercase()), Some(e));
        }
    }

    #[test]
    fn found_at_any_depth_in_any_case() {
        for (rel, at) in [
            (".envrc", ".envrc"),
            ("sub/.envrc", "sub/.envrc"),
            (".VSCode/tasks.json", ".VSCode"),
            ("a/b/.Cargo/config.toml", "a/b/.Cargo"),
            (".GIT/config", ".GIT"),
            ("./.husky/pre-commit", ".husky"),
            ("Lefthook.YML", "Lefthook.YML"),
            ("sub/head", "sub/head"),
        ] {
            let (_, got) = find_in(Path::new(rel)).unwrap_or_else(|| panic!("{rel}"));
            assert_eq!(got, PathBuf::from(at), "{rel}");
        }
        for rel in [
            "src/main.rs",
            ".gitattributes",
            ".github/workflows/ci.yml",
            "envrc",
            ".envrc.example",
            "my.vscode",
            "../.envrc",
            "src/header.h",
        ] {
            assert_eq!(find_in(Path::new(rel)), None, "{rel}");
        }
    }

    #[test]
    fn repo_paths_match_beneath_and_refusal_wins() {
        let repo = vec![
            RepoPath {
                rel: "tools/hooks".into(),
                role: RepoRole::HooksDir,
            },
            RepoPath {
                rel: ".bare".into(),
                role: RepoRole::GitDir,
            },
        ];
        let h = check(Path::new("Tools/Hooks/pre-commit"), &repo).unwrap();
        assert_eq!((h.at, h.write), (PathBuf::from("tools/hooks"), Confirm));
        let h = check(Path::new(".bare/config"), &repo).unwrap();
        assert_eq!(h.write, Refuse);
        // A Confirm name inside a git directory: the refusal wins.
        let h = check(Path::new(".bare/.vscode/x"), &repo).unwrap();
        assert_eq!(h.write, Refuse);
        assert_eq!(check(Path::new("tools/hooksx"), &repo), None);
        assert_eq!(check(Path::new("tools"), &repo), None);
    }

    /// docs/THREAT_MODEL.md lists exactly this table.
    #[test]
    fn the_threat_model_lists_the_table_as_it_is() {
        let doc = include_str!("../../../docs/THREAT_MODEL.md");
        let start = "<!-- host-exec table: generated from HOST_EXEC; a test keeps it equal -->\n";
        let end = "<!-- end of host-exec table -->";
        let from = doc.find(start).expect("the table's start marker") + start.len();
        let to = from + doc[from..].find(end).expect("the table's end marker");
        assert_eq!(
            &doc[from..to],
            markdown_table(),
            "docs/THREAT_MODEL.md: paste host_exec::markdown_table()'s output between the markers"
        );
    }

    #[test]
    fn git_dir_split_matches_beneath_in_any_case() {
        for (rel, want) in [
            ("config", Some("config")),
            ("HOOKS/pre-commit", Some("hooks")),
            ("info/attributes", Some("info")),
            ("objects/info/alternates", Some("objects/info/alternates")),
            ("objects/ab/cdef", None),
            ("objects/info/packs", None),
            ("refs/heads/main", None),
            ("index.lock", None),
            ("HEAD", None),
            ("configx", None),
        ] {
            assert_eq!(
                git_dir_read_only(Path::new(rel)).map(|e| e.rel),
                want,
                "{rel}"
            );
        }
    }

    /// docs/THREAT_MODEL.md lists exactly the git directory's split.
    #[test]
    fn the_threat_model_lists_the_git_dir_split_as_it_is() {
        let doc = include_str!("../../../docs/THREAT_MODEL.md");
        let start =
            "<!-- git-dir table: generated from GIT_DIR_READ_ONLY; a test keeps it equal -->\n";
        let end = "<!-- end of git-dir table -->";
        let from = doc.find(start).expect("the table's start marker") + start.len();
        let to = from + doc[from..].find(end).expect("the table's end marker");
        assert_eq!(
            &doc[from..to],
            git_dir_markdown(),
            "docs/THREAT_MODEL.md: paste host_exec::git_dir_markdown()'s output between the markers"
        );
    }

    #[test]
    fn markdown_lists_every_entry() {
        let md = markdown_table();
        for e in HOST_EXEC {
            assert!(md.contains(&format!("| `{}` |", e.name)), "{}", e.name);
        }
        assert_eq!(md.lines().count(), HOST_EXEC.len() + 2);
    }
}
