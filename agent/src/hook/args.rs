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
/// line, or the routed command's `agent hook exec ID [--socket P]`; `None`
/// for anything clap should read.
pub fn fast(args: &[OsString], env_socket: Option<String>) -> Option<Result<Action, UsageError>> {
    if args.get(1).map(|a| a.as_os_str()) != Some("hook".as_ref()) {
        return None;
    }
    if args.get(2).map(|a| a.as_os_str()) == Some("exec".as_ref()) {
        return fast_exec(&args[3..], env_socket);
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

/// `ID [--socket P | --socket=P]`, what follows `agent hook exec` in the
/// command a routed Bash call is rewritten to (run once per call, so its
/// start-up is part of every routed command's cost).
fn fast_exec(rest: &[OsString], env_socket: Option<String>) -> Option<Result<Action, UsageError>> {
    let (id, flags) = rest.split_first()?;
    let id = id.to_str()?;
    if id.is_empty() || id.starts_with('-') {
        return None;
    }
    let socket = match flags {
        [] => None,
        [flag] => Some(flag.to_str()?.strip_prefix("--socket=")?.to_string()),
        [flag, value] if flag.as_os_str() == "--socket" => Some(value.to_str()?.to_string()),
        _ => return None,
    };
    if socket
        .as_deref()
        .is_some_and(|s| s.is_empty() || s.starts_with('-'))
    {
        return None;
    }
    let socket = socket_path(socket.map(PathBuf::from), env_socket);
    Some(hook_action(
        Some(crate::cli::HookCommand::Exec { id: id.to_string() }),
        None,
        super::DEFAULT_TIMEOUT_S,
        socket,
    ))
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
            vec!["hook", "exec", "rX"],
            vec!["hook", "exec", "rX", "--socket", "/s"],
            vec!["hook", "exec", "rX", "--socket=/s"],
            vec!["hook", "exec", "rX", "--socket", "rel/s"],
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
            vec!["hook", "exec"],
            vec!["hook", "exec", "--help"],
            vec!["hook", "exec", "rX", "--socket"],
            vec!["hook", "exec", "rX", "--socket", "--help"],
            vec!["hook", "exec", "rX", "rY"],
            vec!["hook", "exec", "rX", "--client", "codex"],
            vec!["hook", "exec", "rX", "--socket", "/s", "--socket", "/t"],
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
