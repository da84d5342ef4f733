//! The plain `agent hook [--client C] [--socket P] [--timeout S]` line, read
//! without clap: the hook starts once per tool call, and building clap's
//! parser for every command is most of a start-up. Anything else on the
//! line (a subcommand, `--help`, an unknown flag) goes to clap as usual, so
//! both readers agree: the values are checked by the same
//! [`crate::cli::hook_action`].

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cli::{Action, UsageError, hook_action, socket_path};

/// `Some` when `args` (with the program name first) is a plain `agent hook`
/// line; `None` for anything clap should read.
pub fn fast(args: &[OsString], env_socket: Option<String>) -> Option<Result<Action, UsageError>> {
    if args.get(1).map(|a| a.as_os_str()) != Some("hook".as_ref()) {
        return None;
    }
    let mut client = None;
    let mut socket = None;
    let mut timeout = None;
    let mut rest = args[2..].iter();
    while let Some(arg) = rest.next() {
        let arg = arg.to_str()?;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg, None),
        };
        let slot = match flag {
            "--client" => &mut client,
            "--socket" => &mut socket,
            "--timeout" => &mut timeout,
            // A subcommand, --help, an unknown flag: clap's to read.
            _ => return None,
        };
        if slot.is_some() {
            return None;
        }
        let value = match inline {
            Some(v) => v,
            None => rest.next()?.to_str()?.to_string(),
        };
        *slot = Some(value);
    }
    let timeout = match timeout {
        None => super::DEFAULT_TIMEOUT_S,
        Some(t) => match t.parse::<u32>() {
            Ok(t) => t,
            Err(_) => {
                return Some(Err(UsageError(format!(
                    "--timeout {t:?} is not a number of seconds"
                ))));
            }
        },
    };
    let socket = socket_path(socket.map(PathBuf::from), env_socket);
    Some(hook_action(None, client, timeout, socket))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{DEFAULT_SOCKET, RawCli, validate};
    use clap::Parser;

    fn line(args: &[&str]) -> Vec<OsString> {
        std::iter::once("agent")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// What clap makes of the same line.
    fn clap(args: &[&str]) -> Result<Action, UsageError> {
        let raw = RawCli::try_parse_from(line(args)).map_err(|e| UsageError(e.to_string()))?;
        validate(raw, None)
    }

    #[test]
    fn the_fast_reader_agrees_with_clap() {
        for args in [
            vec!["hook"],
            vec!["hook", "--client", "codex"],
            vec![
                "hook",
                "--socket",
                "/s",
                "--timeout",
                "60",
                "--client",
                "claude-code",
            ],
            vec!["hook", "--socket=/s", "--timeout=5"],
        ] {
            assert_eq!(fast(&line(&args), None), Some(clap(&args)), "{args:?}");
        }
        let Some(Ok(Action::Hook(h))) = fast(&line(&["hook"]), None) else {
            panic!()
        };
        assert_eq!(h.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(h.timeout_s, super::super::DEFAULT_TIMEOUT_S);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        assert!(matches!(
            fast(&line(&["hook", "--timeout", "x"]), None),
            Some(Err(_))
        ));
        assert!(matches!(
            fast(&line(&["hook", "--timeout", "1"]), None),
            Some(Err(_))
        ));
        assert!(matches!(
            fast(&line(&["hook", "--client", "vim"]), None),
            Some(Err(_))
        ));
    }

    #[test]
    fn everything_else_goes_to_clap() {
        for args in [
            vec!["demo"],
            vec!["hook", "exec", "rX"],
            vec!["hook", "print-config", "claude"],
            vec!["hook", "--help"],
            vec!["hook", "--socket"],
            vec!["hook", "--client", "codex", "--client", "codex"],
            vec!["hook", "--mode", "plan"],
            vec!["--mode", "plan", "hook"],
        ] {
            assert_eq!(fast(&line(&args), None), None, "{args:?}");
        }
    }
}
