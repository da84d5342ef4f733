//! glob_files and grep: ripgrep's walker (`ignore`) and searcher.
//!
//! Walk rules (the same for both):
//! - `.gitignore`, `.ignore` and `.git/info/exclude` are respected, also in a
//!   workspace that is not a git repository; the supervisor's own global git
//!   excludes and ignore files above the workspace are not read;
//! - hidden files are included (`.github/`, `.cargo/config.toml` matter to a
//!   coding agent), but `.git/` itself is never walked;
//! - symlinks are never followed and no other filesystem is entered;
//! - the walk always starts at the workspace root (so ignore files between
//!   the root and a subdirectory apply) and only descends towards `path`.
//!
//! The walker works with path names, not directory handles, so every result
//! is checked again beneath the workspace handle before it is shown (glob),
//! and every file is opened beneath it before it is searched (grep): a
//! directory swapped for a symlink during the walk shows nothing from outside.
//!
//! Glob patterns: without a `/` a pattern matches file names at any depth
//! (`*.rs`, like `rg -g`); with a `/` it matches the path relative to the
//! search directory, `*` stays within one directory and `**` crosses them
//! (`src/**/*.rs`). Results are sorted by path.
//!
//! grep skips workspace secret files (as `tollgate_policy::is_secret_file_name`
//! defines them: `.env*`, keys, `id_*`, `.netrc`, `credentials*`, ...): reading those needs an approval through read_file, and
//! grep would otherwise show their content without one. It says how many it
//! skipped.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use ignore::WalkBuilder;

use crate::fsops::open_regular_read;
use crate::paths::{display_path, escape_bytes, is_secret_name, show_rel};
use crate::{ToolError, ToolOutput, cap_text};

/// The walk stops after this many entries (with a notice).
const MAX_WALK_ENTRIES: usize = 200_000;
/// grep does not search files larger than this.
const MAX_GREP_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A matching line is shown up to this many chars.
const MAX_GREP_LINE_CHARS: usize = 500;
const MAX_PATTERN_BYTES: usize = 4096;

/// A compiled glob with the matching rule described in the module docs.
pub(crate) struct PathGlob {
    matcher: GlobMatcher,
    basename_only: bool,
}

impl PathGlob {
    pub(crate) fn new(pattern: &str, what: &'static str) -> Result<PathGlob, ToolError> {
        let invalid = |reason: &str| ToolError::InvalidPattern {
            what,
            pattern: pattern.to_string(),
            reason: reason.to_string(),
        };
        let p = pattern.strip_prefix("./").unwrap_or(pattern);
        if p.is_empty() {
            return Err(invalid("it is empty"));
        }
        if p.len() > MAX_PATTERN_BYTES {
            return Err(invalid("it is too long"));
        }
        if p.contains('\0') {
            return Err(invalid("it contains a NUL byte"));
        }
        if p.starts_with('/') {
            return Err(invalid(
                "it must be relative to the search directory (pass the directory as path)",
            ));
        }
        if p.split('/').any(|c| c == "..") {
            return Err(invalid("it may not contain '..'"));
        }
        let glob = GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| invalid(&e.kind().to_string()))?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            basename_only: !p.contains('/'),
        })
    }

    fn is_match(&self, rel_to_base: &Path) -> bool {
        if self.basename_only {
            rel_to_base
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(rel_to_base)
        }
    }
}

/// The walker over the workspace, descending only towards `target`.
fn walker(root: &Path, target: &Path, max_filesize: Option<u64>) -> ignore::Walk {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .same_file_system(true)
        .max_filesize(max_filesize)
        .sort_by_file_name(|a, b| a.cmp(b));
    let target = target.to_path_buf();
    builder.filter_entry(move |entry| {
        if entry.file_name() == ".git" && entry.file_type().is_some_and(|t| t.is_dir()) {
            return false;
        }
        let p = entry.path();
        p.starts_with(&target) || target.starts_with(p)
    });
    // Serial on purpose: a parallel walk would run on threads that do not
    // carry the session owner's credentials.
    builder.build()
}

/// Checks that the search base exists beneath the root and is a directory
/// (or, for grep, a regular file). Returns true for a directory.
fn base_is_dir(dir: &Dir, base_rel: &Path, shown: &str) -> Result<bool, ToolError> {
    if base_rel.as_os_str().is_empty() {
        return Ok(true);
    }
    let md = dir
        .metadata(base_rel)
        .map_err(|e| ToolError::from_io("list", shown, e))?;
    Ok(md.is_dir())
}

pub(crate) fn glob_files(
    dir: &Dir,
    root: &Path,
    pattern: &str,
    base_rel: &Path,
    cap: usize,
) -> Result<ToolOutput, ToolError> {
    let shown_base = show_rel(base_rel);
    let glob = PathGlob::new(pattern, "glob pattern")?;
    if !base_is_dir(dir, base_rel, &shown_base)? {
        return Err(ToolError::NotADirectory { path: shown_base });
    }
    let target = root.join(base_rel);
    let mut matches: Vec<PathBuf> = Vec::new();
    let mut visited = 0usize;
    let mut walk_capped = false;
    for entry in walker(root, &target, None) {
        let Ok(entry) = entry else { continue };
        visited += 1;
        if visited > MAX_WALK_ENTRIES {
            walk_capped = true;
            break;
        }
        if entry.file_type().is_none_or(|t| t.is_dir()) {
            continue;
        }
        let (Ok(rel_base), Ok(rel)) = (
            entry.path().strip_prefix(&target),
            entry.path().strip_prefix(root),
        ) else {
            continue;
        };
        if !glob.is_match(rel_base) {
            continue;
        }
        // Still there, beneath the workspace handle?
        if dir.symlink_metadata(rel).is_err() {
            continue;
        }
        matches.push(rel.to_path_buf());
    }
    if matches.is_empty() {
        return Ok(ToolOutput {
            text: format!(
                "no files match {} in {shown_base}",
                escape_bytes(pattern.as_bytes(), 200)
            ),
            truncated: walk_capped,
        });
    }
    let mut text = String::new();
    for m in &matches {
        text.push_str(&display_path(m));
        text.push('\n');
    }
    if walk_capped {
        text.push_str(&format!(
            "[walk stopped after {MAX_WALK_ENTRIES} entries; pass a subdirectory as path]\n"
        ));
    }
    let mut out = cap_text(
        &text,
        cap,
        "narrow the pattern or pass a subdirectory as path",
    );
    out.truncated |= walk_capped;
    Ok(out)
}

pub(crate) struct GrepArgs<'a> {
    pub(crate) pattern: &'a str,
    pub(crate) base_rel: &'a Path,
    pub(crate) glob: Option<&'a str>,
    pub(crate) ignore_case: bool,
    pub(crate) cap: usize,
}

pub(crate) fn grep(dir: &Dir, root: &Path, args: GrepArgs<'_>) -> Result<ToolOutput, ToolError> {
    let GrepArgs {
        pattern,
        base_rel,
        glob,
        ignore_case,
        cap,
    } = args;
    let shown_base = show_rel(base_rel);
    let matcher = grep_matcher(pattern, ignore_case)?;
    let glob = glob.map(|g| PathGlob::new(g, "glob")).transpose()?;
    let mut run = GrepRun {
        dir,
        matcher,
        searcher: SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(0))
            .build(),
        cap,
        out: String::new(),
        full: false,
        secret_skipped: 0,
        unreadable: 0,
        walk_capped: false,
    };
    if base_is_dir(dir, base_rel, &shown_base)? {
        run.walk(root, base_rel, glob.as_ref());
    } else if !run.search(base_rel) {
        // A single file named as path: searched whatever the glob says.
        run.full = true;
    }
    Ok(run.report(pattern, &shown_base))
}

/// The pattern as a line-oriented regex (refused when empty or too long).
fn grep_matcher(pattern: &str, ignore_case: bool) -> Result<RegexMatcher, ToolError> {
    let invalid = |reason: String| ToolError::InvalidPattern {
        what: "regex",
        pattern: pattern.to_string(),
        reason,
    };
    if pattern.is_empty() {
        return Err(invalid("it is empty".into()));
    }
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(invalid("it is too long".into()));
    }
    RegexMatcherBuilder::new()
        .case_insensitive(ignore_case)
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| invalid(e.to_string()))
}

/// One grep as it runs: the matches so far and what was skipped.
struct GrepRun<'d> {
    dir: &'d Dir,
    matcher: RegexMatcher,
    searcher: Searcher,
    cap: usize,
    out: String,
    /// The output reached `cap`.
    full: bool,
    secret_skipped: usize,
    unreadable: usize,
    /// The walk stopped at [`MAX_WALK_ENTRIES`].
    walk_capped: bool,
}

impl GrepRun<'_> {
    /// Searches the files beneath `base_rel` that match the glob.
    fn walk(&mut self, root: &Path, base_rel: &Path, glob: Option<&PathGlob>) {
        let target = root.join(base_rel);
        let mut visited = 0usize;
        for entry in walker(root, &target, Some(MAX_GREP_FILE_BYTES)) {
            let Ok(entry) = entry else { continue };
            visited += 1;
            if visited > MAX_WALK_ENTRIES {
                self.walk_capped = true;
                break;
            }
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let (Ok(rel_base), Ok(rel)) = (
                entry.path().strip_prefix(&target),
                entry.path().strip_prefix(root),
            ) else {
                continue;
            };
            if glob.is_some_and(|g| !g.is_match(rel_base)) {
                continue;
            }
            if !self.search(rel) {
                self.full = true;
                break;
            }
        }
    }

    /// Searches one file (secret names skipped); false when the output is
    /// full.
    fn search(&mut self, rel: &Path) -> bool {
        if rel.file_name().is_some_and(is_secret_name) {
            self.secret_skipped += 1;
            return true;
        }
        let shown = display_path(rel);
        let Ok((file, _)) = open_regular_read(self.dir, rel, &shown) else {
            self.unreadable += 1;
            return true;
        };
        let mut keep_going = true;
        let (out, cap) = (&mut self.out, self.cap);
        let sink = Lossy(|lnum, line| {
            let line = line.trim_end_matches(['\n', '\r']);
            let shown_line = match line.char_indices().nth(MAX_GREP_LINE_CHARS) {
                Some((at, _)) => format!("{} …", &line[..at]),
                None => line.to_string(),
            };
            let entry = format!("{shown}:{lnum}:{shown_line}\n");
            if out.len() + entry.len() > cap {
                keep_going = false;
                return Ok(false);
            }
            out.push_str(&entry);
            Ok(true)
        });
        if self
            .searcher
            .search_file(&self.matcher, &file, sink)
            .is_err()
        {
            self.unreadable += 1;
        }
        keep_going
    }

    /// The matches, or a line saying there were none, then a note for each
    /// limit reached and each file skipped.
    fn report(self, pattern: &str, shown_base: &str) -> ToolOutput {
        let cap = self.cap;
        let mut text = self.out;
        if text.is_empty() {
            text = format!(
                "no matches for {} in {shown_base}\n",
                escape_bytes(pattern.as_bytes(), 200)
            );
        }
        if self.full {
            text.push_str(&format!(
                "[output truncated at {cap} bytes; narrow the pattern, path or glob]\n"
            ));
        }
        if self.walk_capped {
            text.push_str(&format!(
                "[walk stopped after {MAX_WALK_ENTRIES} entries; pass a subdirectory as path]\n"
            ));
        }
        if self.secret_skipped > 0 {
            text.push_str(&format!(
                "[{} secret file(s) (.env, keys, credentials, ...) not searched; read them with read_file, which asks for approval]\n",
                self.secret_skipped
            ));
        }
        if self.unreadable > 0 {
            text.push_str(&format!(
                "[{} file(s) could not be opened as the session owner and were skipped]\n",
                self.unreadable
            ));
        }
        ToolOutput {
            text,
            truncated: self.full || self.walk_capped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_without_slash_matches_names_at_any_depth() {
        let g = PathGlob::new("*.rs", "glob").unwrap();
        assert!(g.is_match(Path::new("main.rs")));
        assert!(g.is_match(Path::new("src/deep/lib.rs")));
        assert!(!g.is_match(Path::new("src/lib.rsx")));
    }

    #[test]
    fn a_pattern_with_slash_matches_the_relative_path() {
        let g = PathGlob::new("src/*.rs", "glob").unwrap();
        assert!(g.is_match(Path::new("src/main.rs")));
        assert!(!g.is_match(Path::new("src/a/main.rs")));
        let g = PathGlob::new("src/**/*.rs", "glob").unwrap();
        assert!(g.is_match(Path::new("src/a/b/main.rs")));
        assert!(g.is_match(Path::new("src/main.rs")));
        let g = PathGlob::new("./**/*.md", "glob").unwrap();
        assert!(g.is_match(Path::new("README.md")));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for p in ["", "/etc/*", "../*", "a/../../b", "[", "a\0b"] {
            assert!(
                matches!(
                    PathGlob::new(p, "glob"),
                    Err(ToolError::InvalidPattern { .. })
                ),
                "{p:?}"
            );
        }
    }
}
