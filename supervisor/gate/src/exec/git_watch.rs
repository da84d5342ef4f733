//! Under `[sandbox] git_dir = "split"`, the one thing a command can leave
//! that the host's git obeys and the sandbox cannot stop: a new submodule,
//! a gitlink added to an index whose repository the session made, so its
//! config was written from inside (docs/THREAT_MODEL.md, "Open hole").
//! The workspace's git layout is read on the host when the sandbox is
//! built and again after each command; each new submodule is told once
//! per session, in the command's `sandbox: ` block and as a `git_exposed`
//! record. Telling is all this does: it cannot undo what the command wrote.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tollgate_audit::event::{self as audit, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_policy::host::git::{self, Depth, GitPaths};
use tollgate_policy::host_exec::GitDirMode;

use super::notes::{WallNotes, shown_bytes};
use crate::host::Ctx;

/// The layout read when the sandbox was built, and what was told since.
#[derive(Debug, Default)]
pub struct GitWatch {
    start: GitPaths,
    told: BTreeSet<PathBuf>,
    /// Why the layout could not be read after a command, once told.
    unreadable: Option<String>,
}

/// Reads the layout a new sandbox starts from (split git directories only).
pub(crate) fn start(cx: &Ctx) {
    if cx.host.config().sandbox.git_dir != GitDirMode::Split {
        return;
    }
    let s = &cx.session;
    // A layout the sandbox refused never gets here; one unreadable now
    // starts empty, so every submodule read later is told.
    let start =
        git::scan(&s.workspace, s.home.as_deref(), Depth::WithSubmodules).unwrap_or_default();
    *s.git_watch.lock() = Some(GitWatch {
        start,
        ..GitWatch::default()
    });
}

/// After a command: what it exposed to the host's git, as lines of its
/// `sandbox: ` block and `git_exposed` records.
pub(crate) fn after_command(cx: &Ctx, call_id: &str, notes: &mut WallNotes) {
    let s = &cx.session;
    let mut guard = s.git_watch.lock();
    let Some(watch) = guard.as_mut() else {
        return;
    };
    let found = match git::scan(&s.workspace, s.home.as_deref(), Depth::WithSubmodules) {
        Ok(now) => exposed(watch, &now),
        Err(e) => unreadable(watch, e.0),
    };
    drop(guard);
    for (path, why) in found {
        notes.push(&why);
        let _ = cx.write(
            Event::GitExposed(audit::GitExposed {
                call_id: call_id.to_string(),
                path,
                why,
            }),
            Durable::Later,
            Priority::Ordinary,
        );
    }
}

/// The new submodules of `now` not told yet: (path shown, sentence).
fn exposed(watch: &mut GitWatch, now: &GitPaths) -> Vec<(String, String)> {
    now.new_submodules(&watch.start)
        .into_iter()
        .filter(|p| watch.told.insert(p.clone()))
        .map(|p| {
            let shown = shown_bytes(p.as_os_str().as_encoded_bytes());
            let why = format!(
                "{shown} is now a submodule of the repository, and its repository was made in this session: git on the host enters it on `git status` and `git diff` at the top and obeys {shown}/.git/config (a program it names runs as you); check that file and {shown}/.git/hooks before running git there, or set diff.ignoreSubmodules = all and fetch.recurseSubmodules = false in your global git config"
            );
            (shown, why)
        })
        .collect()
}

/// The layout could not be read after a command (a symlink made where git
/// follows one, an unreadable index): told once.
fn unreadable(watch: &mut GitWatch, why: String) -> Vec<(String, String)> {
    if watch.unreadable.as_ref() == Some(&why) {
        return Vec::new();
    }
    watch.unreadable = Some(why.clone());
    vec![(
        String::new(),
        format!(
            "the workspace's git layout can no longer be checked for what the host's git will obey: {why}"
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(submodules: &[&str]) -> GitPaths {
        GitPaths {
            submodules: submodules.iter().map(PathBuf::from).collect(),
            ..GitPaths::default()
        }
    }

    #[test]
    fn each_new_submodule_is_told_once_and_old_ones_never() {
        let mut w = GitWatch {
            start: paths(&["old"]),
            ..GitWatch::default()
        };
        let told = exposed(&mut w, &paths(&["new", "old"]));
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, "new");
        assert!(told[0].1.contains("new/.git/config"), "{}", told[0].1);
        assert!(exposed(&mut w, &paths(&["new", "old"])).is_empty());
        let again = exposed(&mut w, &paths(&["new", "old", "n2"]));
        assert_eq!(
            again.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
            ["n2"]
        );
    }

    #[test]
    fn an_unreadable_layout_is_told_once_per_reason() {
        let mut w = GitWatch::default();
        assert_eq!(unreadable(&mut w, "a".into()).len(), 1);
        assert!(unreadable(&mut w, "a".into()).is_empty());
        assert_eq!(unreadable(&mut w, "b".into()).len(), 1);
    }
}
