//! The dangerous patterns of the shell floor (docs/INTERFACES.md,
//! `[policy] lift_patterns`): shapes of a command that are refused by
//! default, recognised by structure (never by substrings). Each one a host
//! may lift with a configured rule that says why; lifting one removes only
//! its own refusal: the path floor, the denied-binaries list and the
//! always-confirm tier still judge the command.
//!
//! The other `floor:dangerous-pattern` refusals of the analysis (a delete
//! whose target is only known at run time, `kill -1`, git's command-running
//! keys, loader variables such as `LD_PRELOAD`) are not on this list and
//! are never lifted.

use std::fmt;

/// One dangerous pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `rm -r` (or `find -delete`) of `/`, the home directory, the
    /// workspace itself or a directory holding it.
    RmBroad,
    /// A function that starts copies of itself in a pipeline or in the
    /// background; background jobs started in an endless loop.
    ForkBomb,
    /// `mkfs` and `mkfs.*`.
    Mkfs,
    /// `dd` with `if=` or `of=`: raw block copies.
    Dd,
    /// A redirect or a write into `/etc` or onto a block device.
    SystemWrite,
    /// `history -c`.
    HistoryClear,
    /// Setting `PATH` (`export PATH=…`, `PATH=… cmd`).
    PathChange,
}

impl Pattern {
    pub const ALL: [Pattern; 7] = [
        Pattern::RmBroad,
        Pattern::ForkBomb,
        Pattern::Mkfs,
        Pattern::Dd,
        Pattern::SystemWrite,
        Pattern::HistoryClear,
        Pattern::PathChange,
    ];

    /// The name a `lift_patterns` rule uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::RmBroad => "rm-broad",
            Pattern::ForkBomb => "fork-bomb",
            Pattern::Mkfs => "mkfs",
            Pattern::Dd => "dd",
            Pattern::SystemWrite => "system-write",
            Pattern::HistoryClear => "history-clear",
            Pattern::PathChange => "path-change",
        }
    }

    pub fn parse(s: &str) -> Option<Pattern> {
        Pattern::ALL.into_iter().find(|p| p.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of patterns (the ones a host lifted, the lifted ones a command
/// matched).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PatternSet(u8);

impl PatternSet {
    pub fn insert(&mut self, p: Pattern) {
        self.0 |= p.bit();
    }

    pub fn contains(self, p: Pattern) -> bool {
        self.0 & p.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Pattern> {
        Pattern::ALL.into_iter().filter(move |p| self.contains(*p))
    }
}

/// The sentence a refusal by `p` ends with: how a host lifts it.
pub(crate) fn lift_hint(p: Pattern) -> String {
    format!(
        "(dangerous pattern `{p}`; a host that needs it lifts it with a `[[policy.lift_patterns]]` rule giving its reason)"
    )
}

/// Block devices: a write onto one is a write onto a disk.
pub(crate) fn is_block_device(path: &std::path::Path) -> bool {
    let Ok(rest) = path.strip_prefix("/dev") else {
        return false;
    };
    let s = rest.to_string_lossy();
    const DISKS: &[&str] = &[
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "loop", "dm-", "md", "sr", "nbd", "zram",
    ];
    DISKS.iter().any(|d| s.starts_with(d))
        || s.starts_with("mapper/")
        || s.starts_with("disk/")
        || s.starts_with("block/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sets_hold_what_was_put_in() {
        let mut set = PatternSet::default();
        assert!(set.is_empty());
        for p in Pattern::ALL {
            assert_eq!(Pattern::parse(p.as_str()), Some(p));
        }
        set.insert(Pattern::Dd);
        set.insert(Pattern::PathChange);
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            vec![Pattern::Dd, Pattern::PathChange]
        );
        assert!(!set.contains(Pattern::Mkfs));
        assert_eq!(Pattern::parse("rm"), None);
    }

    #[test]
    fn block_devices_are_told_from_other_device_files() {
        for d in [
            "/dev/sda",
            "/dev/nvme0n1p2",
            "/dev/mapper/root",
            "/dev/loop3",
        ] {
            assert!(is_block_device(std::path::Path::new(d)), "{d}");
        }
        for d in ["/dev/null", "/dev/tty", "/dev/shm/x", "/tmp/sda"] {
            assert!(!is_block_device(std::path::Path::new(d)), "{d}");
        }
    }
}
