//! The private home's own directories above a mount point beneath it
//! (docs/THREAT_MODEL.md, "The sandbox's environment"): `~/.cargo` above a
//! read-only `~/.cargo/bin`, `~/.local` above `~/.local/bin`. Both
//! backends make them the session's, mode [`MODE`], so the owner can add
//! beside what is shown (`~/.local/share` next to `~/.local/bin`): the
//! native one makes them in the home's tmpfs, the Docker one mounts a
//! tmpfs of the session's at each (the engine would make them root's).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The mode of each directory [`above`] names.
pub(crate) const MODE: u32 = 0o755;

/// The directories strictly between `home` and each of `targets` beneath
/// it, each once, every parent before its children (`~/.cargo` for
/// `~/.cargo/bin`; none for `~/.rustup`, nor for a target outside `home`),
/// short of any target: a directory that is a target or inside one (the
/// workspace under the home, a hidden entry inside the workspace) is that
/// mount's, and making it the home's would cover it.
pub(crate) fn above<'a>(
    home: &Path,
    targets: impl IntoIterator<Item = &'a Path>,
) -> BTreeSet<PathBuf> {
    let targets: Vec<&Path> = targets.into_iter().collect();
    let mut dirs = BTreeSet::new();
    for target in &targets {
        let Ok(rel) = target.strip_prefix(home) else {
            continue;
        };
        let mut at = home.to_path_buf();
        let parts: Vec<_> = rel.components().collect();
        for c in parts.iter().take(parts.len().saturating_sub(1)) {
            at.push(c);
            if targets.iter().any(|t| at.starts_with(t)) {
                break;
            }
            dirs.insert(at.clone());
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_directories_between_the_home_and_a_target_parents_first() {
        let home = Path::new("/home/u");
        let targets = [
            "/home/u/.cargo/bin",
            "/home/u/.rustup",
            "/home/u/a/b/c",
            "/home/u/.local/bin",
            "/home/u/.local/lib",
            "/home/userx/.cargo/bin",
            "/home/u/w",
            "/home/u/w/proj/.ssh",
        ];
        let got: Vec<PathBuf> = above(home, targets.iter().map(Path::new))
            .into_iter()
            .collect();
        let want: Vec<PathBuf> = [
            "/home/u/.cargo",
            "/home/u/.local",
            "/home/u/a",
            "/home/u/a/b",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }
}
