//! The supervisor's own diagnostics (docs/OPERATIONS.md "Logs"): native
//! journal fields when stderr is the journal's stream, plain text without
//! colour anywhere else unless stderr is a terminal and `NO_COLOR` is unset.
//!
//! Lifecycle events (start, ready, reload, session open/close, revoke) use
//! the [`LIFECYCLE`] target, on at info by default; everything else at warn.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use tollgate_config::LogLevel;

/// The target of lifecycle events.
pub const LIFECYCLE: &str = "tollgate::lifecycle";

/// Where the log lines go, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// The systemd journal's native protocol (`JOURNAL_STREAM` names stderr).
    Journal,
    /// Text on stderr, with or without ANSI colour.
    Text { ansi: bool },
}

/// What the environment says about stderr: `JOURNAL_STREAM` (as
/// `device:inode`), stderr's own device and inode, whether it is a
/// terminal, and `NO_COLOR`.
#[derive(Debug, Clone, Default)]
pub struct Stderr {
    pub journal_stream: Option<String>,
    pub dev_ino: Option<(u64, u64)>,
    pub terminal: bool,
    pub no_color: Option<String>,
}

impl Stderr {
    /// This process's stderr and environment.
    pub fn current() -> Stderr {
        let stderr = std::io::stderr();
        Stderr {
            journal_stream: std::env::var("JOURNAL_STREAM").ok(),
            dev_ino: nix::sys::stat::fstat(&stderr)
                .ok()
                .map(|st| (st.st_dev, st.st_ino)),
            terminal: stderr.is_terminal(),
            no_color: std::env::var("NO_COLOR").ok(),
        }
    }

    /// The sink for this stderr. systemd sets `JOURNAL_STREAM` for the
    /// service's stderr; a child that inherited the variable but writes
    /// elsewhere (a redirect) must not use the journal.
    pub fn sink(&self) -> Sink {
        if self.is_journal() {
            return Sink::Journal;
        }
        let no_color = self.no_color.as_deref().is_some_and(|v| !v.is_empty());
        Sink::Text {
            ansi: self.terminal && !no_color,
        }
    }

    fn is_journal(&self) -> bool {
        let (Some(stream), Some((dev, ino))) = (&self.journal_stream, self.dev_ino) else {
            return false;
        };
        let Some((d, i)) = stream.split_once(':') else {
            return false;
        };
        d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
    }
}

/// The filter: `RUST_LOG` when set, else `[log] level` for everything,
/// else lifecycle at info and the rest at warn.
pub fn filter(level: Option<LogLevel>) -> EnvFilter {
    // An empty RUST_LOG counts as unset.
    if std::env::var("RUST_LOG").is_ok_and(|v| !v.trim().is_empty())
        && let Ok(f) = EnvFilter::try_from_default_env()
    {
        return f;
    }
    match level {
        Some(l) => EnvFilter::new(l.as_str()),
        None => EnvFilter::new(format!("warn,{LIFECYCLE}=info")),
    }
}

/// Installs the global subscriber. A journal that cannot be reached falls
/// back to plain text on stderr (said once, on stderr).
pub fn init(level: Option<LogLevel>) {
    let stderr = Stderr::current();
    let registry = tracing_subscriber::registry().with(filter(level));
    let ansi = match stderr.sink() {
        Sink::Journal => match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer.with_syslog_identifier("tollgate".to_string());
                registry.with(layer).init();
                return;
            }
            Err(e) => {
                eprintln!("supervisor: the journal is unreachable ({e}); logging to stderr");
                false
            }
        },
        Sink::Text { ansi } => ansi,
    };
    registry
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi),
        )
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stderr(journal: Option<&str>, terminal: bool, no_color: Option<&str>) -> Stderr {
        Stderr {
            journal_stream: journal.map(str::to_string),
            dev_ino: Some((8, 1234)),
            terminal,
            no_color: no_color.map(str::to_string),
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert_eq!(stderr(None, false, None).sink(), Sink::Text { ansi: false });
        assert_eq!(stderr(None, true, None).sink(), Sink::Text { ansi: true });
        assert_eq!(
            stderr(None, true, Some("1")).sink(),
            Sink::Text { ansi: false }
        );
        // no-color.org: an empty NO_COLOR does not count.
        assert_eq!(
            stderr(None, true, Some("")).sink(),
            Sink::Text { ansi: true }
        );
    }

    #[test]
    fn the_journal_only_when_journal_stream_names_stderr() {
        assert_eq!(stderr(Some("8:1234"), false, None).sink(), Sink::Journal);
        for other in ["8:1235", "9:1234", "garbage", "8", ""] {
            assert_eq!(
                stderr(Some(other), false, None).sink(),
                Sink::Text { ansi: false },
                "{other}"
            );
        }
        let mut unknown = stderr(Some("8:1234"), false, None);
        unknown.dev_ino = None;
        assert_eq!(unknown.sink(), Sink::Text { ansi: false });
    }

    /// The real stderr of this test process: its own device and inode in
    /// `JOURNAL_STREAM` select the journal; anything else does not.
    #[test]
    fn the_current_stderr_is_matched_by_its_device_and_inode() {
        let mut s = Stderr::current();
        let (dev, ino) = s.dev_ino.expect("fstat(2) on stderr");
        s.journal_stream = Some(format!("{dev}:{ino}"));
        assert_eq!(s.sink(), Sink::Journal);
        s.journal_stream = Some(format!("{dev}:{}", ino + 1));
        assert!(matches!(s.sink(), Sink::Text { .. }));
    }
}
