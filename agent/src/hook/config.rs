//! `agent hook print-config claude|codex [--managed]`: exactly what to
//! install so the client runs `agent hook` for every event tollgate needs.
//!
//! - Claude Code: settings JSON (`~/.claude/settings.json`, or managed:
//!   `/etc/claude-code/managed-settings.json`, which fires without a flag and
//!   which no user or project setting turns off; managed also sets
//!   `allowManagedHooksOnly`, so no project hook can rewrite a call after
//!   tollgate's decision).
//! - Codex: hook TOML (`$CODEX_HOME/config.toml`, or managed:
//!   `/etc/codex/requirements.toml`, which also pins `[features] hooks =
//!   true`, since a user's `hooks = false` would otherwise switch every hook
//!   off, sets `allow_managed_hooks_only`, and switches Codex's web search
//!   off: it runs at the model provider and never reaches a hook).
//!
//! The command names the socket explicitly (never `$TOLLGATE_SOCKET`, which
//! the user's environment could point at a socket of their own) and its
//! `--timeout` is the `timeout` the client is given, so the hook's own
//! deadline comes first.

use std::path::Path;

use serde_json::{Value, json};

/// The `timeout` printed for every hook but SessionEnd, in seconds: long
/// enough for an operator to answer an approval.
pub const DEFAULT_TIMEOUT_S: u32 = 120;
/// Codex clamps a SessionEnd hook's timeout to 3 s.
pub const SESSION_END_TIMEOUT_S: u32 = 3;

/// Which client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Claude,
    Codex,
}

impl Target {
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "claude" | "claude-code" => Some(Target::Claude),
            "codex" => Some(Target::Codex),
            _ => None,
        }
    }

    fn client(self) -> &'static str {
        match self {
            Target::Claude => "claude-code",
            Target::Codex => "codex",
        }
    }
}

/// What to print.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSettings {
    pub target: Target,
    pub managed: bool,
    pub agent: std::path::PathBuf,
    pub socket: std::path::PathBuf,
    pub timeout_s: u32,
}

/// The events, whether they take a tool matcher, and their timeout.
fn events(timeout: u32) -> [(&'static str, bool, u32); 6] {
    [
        ("SessionStart", false, timeout),
        ("PreToolUse", true, timeout),
        ("PostToolUse", true, timeout),
        ("PostToolUseFailure", true, timeout),
        ("Stop", false, timeout),
        ("SessionEnd", false, SESSION_END_TIMEOUT_S.min(timeout)),
    ]
}

/// The hook's command line for one timeout.
pub fn command(s: &ConfigSettings, timeout: u32) -> String {
    format!(
        "{} hook --client {} --socket {} --timeout {timeout}",
        super::shell_quote(&s.agent.to_string_lossy()),
        s.target.client(),
        super::shell_quote(&s.socket.to_string_lossy())
    )
}

/// The text to install.
pub fn render(s: &ConfigSettings) -> String {
    match s.target {
        Target::Claude => claude(s),
        Target::Codex => codex(s),
    }
}

fn claude(s: &ConfigSettings) -> String {
    let mut hooks = serde_json::Map::new();
    for (event, matcher, timeout) in events(s.timeout_s) {
        let mut group = json!({
            "hooks": [{ "type": "command", "command": command(s, timeout), "timeout": timeout }]
        });
        if matcher {
            group["matcher"] = json!("*");
        }
        hooks.insert(event.to_string(), json!([group]));
    }
    let mut root = json!({ "hooks": Value::Object(hooks) });
    if s.managed {
        root["allowManagedHooksOnly"] = json!(true);
    }
    let mut text = serde_json::to_string_pretty(&root).unwrap_or_default();
    text.push('\n');
    text
}

fn codex(s: &ConfigSettings) -> String {
    let q = |v: &str| serde_json::to_string(v).unwrap_or_default();
    let mut t = String::new();
    if s.managed {
        t.push_str("# /etc/codex/requirements.toml: tollgate decides every tool call of Codex.\n");
        t.push_str("allow_managed_hooks_only = true\n\n");
        t.push_str("# Codex's web search runs at the model provider and never reaches a hook.\n");
        t.push_str("allowed_web_search_modes = [\"disabled\"]\n\n");
        t.push_str("# A user's `[features] hooks = false` would switch every hook off.\n");
        t.push_str("[features]\nhooks = true\n\n");
    } else {
        t.push_str("# Add to $CODEX_HOME/config.toml (then trust the hooks once: codex asks).\n");
        t.push_str("# Keep `[features] hooks` on. With tollgate's routed shell, let Codex's own\n");
        t.push_str("# sandbox reach tollgate's socket (the command itself runs in tollgate's\n");
        t.push_str("# sandbox, without network):\n");
        t.push_str("#   [sandbox_workspace_write]\n#   network_access = true\n\n");
    }
    for (event, matcher, timeout) in events(s.timeout_s) {
        t.push_str(&format!("[[hooks.{event}]]\n"));
        if matcher {
            t.push_str("matcher = \"*\"\n");
        }
        t.push_str(&format!(
            "[[hooks.{event}.hooks]]\ntype = \"command\"\ncommand = {}\ntimeout = {timeout}\n\n",
            q(&command(s, timeout))
        ));
    }
    t
}

/// Notes for stderr: what would let a user (or an agent) undo the install.
pub fn warnings(s: &ConfigSettings) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut w = Vec::new();
    if !s.managed {
        return w;
    }
    let mut p: Option<&Path> = Some(&s.agent);
    while let Some(path) = p {
        if let Ok(m) = std::fs::metadata(path)
            && (m.uid() != 0 || m.mode() & 0o022 != 0)
        {
            w.push(format!(
                "{} is not root's alone (owner uid {}, mode {:o}): whoever can replace it decides every call; install the agent binary root-owned (e.g. /usr/local/bin/agent) and pass --agent",
                path.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
            break;
        }
        p = path.parent();
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(target: Target, managed: bool) -> ConfigSettings {
        ConfigSettings {
            target,
            managed,
            agent: "/usr/local/bin/agent".into(),
            socket: "/run/tollgate/agent.sock".into(),
            timeout_s: 120,
        }
    }

    #[test]
    fn claude_settings_hook_every_event_with_the_socket_and_timeout() {
        let v: Value = serde_json::from_str(&render(&settings(Target::Claude, true))).unwrap();
        assert_eq!(v["allowManagedHooksOnly"], true);
        let pre = &v["hooks"]["PreToolUse"][0];
        assert_eq!(pre["matcher"], "*");
        assert_eq!(
            pre["hooks"][0],
            json!({
                "type": "command",
                "command": "/usr/local/bin/agent hook --client claude-code --socket /run/tollgate/agent.sock --timeout 120",
                "timeout": 120,
            })
        );
        for e in [
            "SessionStart",
            "PostToolUse",
            "PostToolUseFailure",
            "Stop",
            "SessionEnd",
        ] {
            assert!(v["hooks"][e].is_array(), "{e}");
        }
        assert_eq!(v["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 3);
        let user: Value = serde_json::from_str(&render(&settings(Target::Claude, false))).unwrap();
        assert!(user.get("allowManagedHooksOnly").is_none());
    }

    #[test]
    fn codex_requirements_pin_hooks_on() {
        let t = render(&settings(Target::Codex, true));
        assert!(t.starts_with("# /etc/codex/requirements.toml"), "{t}");
        assert!(t.contains("allow_managed_hooks_only = true\n"));
        assert!(t.contains("allowed_web_search_modes = [\"disabled\"]\n"));
        assert!(t.contains("[features]\nhooks = true\n"));
        assert!(t.contains(
            "[[hooks.PreToolUse]]\nmatcher = \"*\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"/usr/local/bin/agent hook --client codex --socket /run/tollgate/agent.sock --timeout 120\"\ntimeout = 120\n"
        ), "{t}");
        assert!(t.contains("[[hooks.SessionEnd.hooks]]\ntype = \"command\"\ncommand = \"/usr/local/bin/agent hook --client codex --socket /run/tollgate/agent.sock --timeout 3\"\ntimeout = 3\n"));
        let user = render(&settings(Target::Codex, false));
        assert!(!user.contains("allow_managed_hooks_only"));
    }

    #[test]
    fn odd_paths_are_quoted_for_the_shell() {
        let mut s = settings(Target::Claude, false);
        s.agent = "/opt/my tools/agent".into();
        assert!(command(&s, 5).starts_with("'/opt/my tools/agent' hook"));
    }
}
