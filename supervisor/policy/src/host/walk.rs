//! A client's own search behind [`SearchFacts`]: ripgrep's walker (the
//! `ignore` crate ripgrep is built on) set up as Claude Code runs ripgrep
//! for its Grep tool (`--hidden --no-follow`, `--glob` in order, ignore
//! files as ripgrep reads them by default).
//!
//! It never reads the user's global git excludes (`core.excludesFile`):
//! the supervisor cannot know the client's, and leaving an ignore source
//! out only adds files, so the files reported are never fewer than the
//! client reads. It runs as the supervisor, which may read directories the
//! user cannot: more files again, never fewer.

use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use crate::{SearchFacts, SearchWalk, Walked};

/// The host filesystem, walked as a client's ripgrep walks it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealWalk;

impl SearchFacts for RealWalk {
    fn search_walk(&self, walk: &SearchWalk) -> Walked {
        let overrides = match overrides(&walk.root, &walk.globs) {
            Ok(o) => o,
            Err(e) => return Walked::Failed(e),
        };
        let mut builder = WalkBuilder::new(&walk.root);
        builder
            .hidden(false)
            .follow_links(false)
            .parents(true)
            .ignore(true)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .require_git(true)
            .add_custom_ignore_filename(".rgignore")
            .overrides(overrides);
        let mut files = Vec::new();
        let mut seen = 0usize;
        // Serial: one decision, one thread.
        for entry in builder.build() {
            seen += 1;
            if seen > walk.max_entries {
                return Walked::TooMany;
            }
            let Ok(entry) = entry else { continue };
            if entry.file_type().is_some_and(|t| t.is_file()) {
                files.push(entry.into_path());
            }
        }
        Walked::Files(files)
    }
}

/// ripgrep's `--glob` list: rooted where ripgrep runs (the client starts it
/// in the search directory).
fn overrides(root: &Path, globs: &[String]) -> Result<ignore::overrides::Override, String> {
    let mut b = OverrideBuilder::new(root);
    for g in globs {
        b.add(g).map_err(|e| {
            format!(
                "the glob `{}` is not one ripgrep takes ({e})",
                crate::escape_for_display(g)
            )
        })?;
    }
    b.build()
        .map_err(|e| format!("the globs cannot be compiled ({e})"))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn walk(root: &Path, globs: &[&str]) -> Vec<String> {
        let w = SearchWalk {
            root: root.to_path_buf(),
            globs: globs.iter().map(|s| s.to_string()).collect(),
            max_entries: 1000,
        };
        match RealWalk.search_walk(&w) {
            Walked::Files(f) => {
                let mut v: Vec<String> = f
                    .iter()
                    .map(|p| p.strip_prefix(root).unwrap().display().to_string())
                    .collect();
                v.sort();
                v
            }
            other => panic!("{other:?}"),
        }
    }

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in files {
            let p: PathBuf = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x").unwrap();
        }
        d
    }

    #[test]
    fn outside_a_git_repository_gitignore_is_not_read_and_hidden_files_are() {
        let d = tree(&[".gitignore", ".env", "src/a.rs", ".github/ci.yml"]);
        std::fs::write(d.path().join(".gitignore"), ".env\n").unwrap();
        assert_eq!(
            walk(d.path(), &[]),
            vec![".env", ".github/ci.yml", ".gitignore", "src/a.rs"]
        );
    }

    #[test]
    fn inside_a_git_repository_gitignore_is_read_but_a_glob_overrides_it() {
        let d = tree(&[".gitignore", ".env", "src/a.rs", ".git/config"]);
        std::fs::write(d.path().join(".gitignore"), ".env\n").unwrap();
        assert_eq!(walk(d.path(), &["!.git"]), vec![".gitignore", "src/a.rs"]);
        assert_eq!(walk(d.path(), &["!.git", ".env"]), vec![".env"]);
        // The last glob that matches decides.
        assert!(walk(d.path(), &["!.git", ".env", "!**/.env"]).is_empty());
    }

    #[test]
    fn symlinks_are_not_followed_and_ignore_files_apply_everywhere() {
        let d = tree(&["a.txt", ".rgignore", "skip/s.txt"]);
        std::fs::write(d.path().join(".rgignore"), "skip/\n").unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("etc")).unwrap();
        assert_eq!(walk(d.path(), &[]), vec![".rgignore", "a.txt"]);
    }

    #[test]
    fn too_many_entries_and_bad_globs_are_said() {
        let d = tree(&["a", "b", "c"]);
        let w = SearchWalk {
            root: d.path().to_path_buf(),
            globs: vec![],
            max_entries: 2,
        };
        assert_eq!(RealWalk.search_walk(&w), Walked::TooMany);
        let w = SearchWalk {
            root: d.path().to_path_buf(),
            globs: vec!["a{".to_string()],
            max_entries: 10,
        };
        assert!(matches!(RealWalk.search_walk(&w), Walked::Failed(_)));
    }
}
