//! One hook event: read, ask the supervisor, answer. Lean on purpose: it
//! runs once per tool call of the client, so it starts, connects, asks and
//! exits without anything else.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tollgate_proto::client_hooks_client::ClientHooksClient;
use tollgate_proto::{HookEventRequest, HookEventResponse};
use tonic::Code;

/// The largest event read from stdin (the supervisor's limit too).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// The events the hook answers. Any other name is refused (blocked).
pub const EVENTS: [&str; 6] = [
    "SessionStart",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SessionEnd",
];

/// What `agent hook` was given.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSettings {
    pub socket: PathBuf,
    /// claude-code | codex; `None`: guessed from the event.
    pub client: Option<String>,
    /// The `timeout` the client runs this hook with, in seconds.
    pub timeout_s: u32,
}

/// A failure: one line for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked(pub String);

/// What the hook prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// Runs the hook: stdin to stdout. Never panics out (a panic hook turns one
/// into a blocking exit).
pub async fn run(s: HookSettings) -> Outcome {
    let started = Instant::now();
    let deadline = started + super::deadline_for(s.timeout_s);
    let mut text = Vec::new();
    let read = std::io::stdin()
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut text);
    let event = match read {
        Err(e) => Err(Blocked(format!("cannot read the event on stdin ({e})"))),
        Ok(_) => parse(&text),
    };
    let (name, event, raw) = match event {
        Ok(x) => x,
        Err(b) => return blocked("", b),
    };
    let client = s
        .client
        .clone()
        .unwrap_or_else(|| guess_client(&event).to_string());
    let codex = client == "codex";
    match ask(&s.socket, &client, raw, deadline).await {
        Ok(answer) => render(&name, codex, &event, &answer, &s.socket),
        Err(b) => blocked(&name, b),
    }
}

/// A blocking answer: exit 2 with the cause on stderr. A Stop event is the
/// exception: blocking it would make the client keep working, so it exits 0
/// (the turn ends) and still says why on stderr.
fn blocked(event_name: &str, b: Blocked) -> Outcome {
    Outcome {
        stdout: String::new(),
        stderr: format!("agent hook: {}\n", b.0),
        code: if event_name == "Stop" { 0 } else { 2 },
    }
}

/// Checks the bytes: size, UTF-8 JSON, an object with a known event name.
pub fn parse(bytes: &[u8]) -> Result<(String, Map<String, Value>, String), Blocked> {
    if bytes.len() > MAX_EVENT_BYTES {
        return Err(Blocked(format!(
            "the event on stdin is larger than {} MiB; the call is blocked (split the work into smaller calls)",
            MAX_EVENT_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes.to_vec()).map_err(|e| {
        Blocked(format!(
            "the event on stdin is not UTF-8 ({e}); the call is blocked"
        ))
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        Blocked(format!(
            "the event on stdin is not valid JSON ({e}); the call is blocked"
        ))
    })?;
    let Value::Object(obj) = v else {
        return Err(Blocked(
            "the event on stdin is not a JSON object; the call is blocked".to_string(),
        ));
    };
    let name = match obj.get("hook_event_name") {
        Some(Value::String(n)) if EVENTS.contains(&n.as_str()) => n.clone(),
        Some(Value::String(n)) => {
            return Err(Blocked(format!(
                "unknown event {:?}; the call is blocked, hint: install the hooks `agent hook print-config` prints",
                n.chars().take(64).collect::<String>()
            )));
        }
        _ => {
            return Err(Blocked(
                "the event has no hook_event_name; the call is blocked".to_string(),
            ));
        }
    };
    Ok((name, obj, text))
}

/// Codex adds `turn_id` and `model` to every tool event.
fn guess_client(event: &Map<String, Value>) -> &'static str {
    if event.contains_key("turn_id") {
        "codex"
    } else {
        "claude-code"
    }
}

/// Asks the supervisor, before the deadline.
async fn ask(
    socket: &Path,
    client: &str,
    event_json: String,
    deadline: Instant,
) -> Result<HookEventResponse, Blocked> {
    let left = |now: Instant| deadline.saturating_duration_since(now);
    let secs = |d: Duration| format!("{:.1}s", d.as_secs_f64());
    let budget = left(Instant::now());
    let work = async {
        let channel = crate::client::connect(socket).await.map_err(|e| {
            Blocked(format!(
                "cannot reach the supervisor ({e}); the call is blocked"
            ))
        })?;
        let mut c =
            ClientHooksClient::new(channel).max_encoding_message_size(MAX_EVENT_BYTES + 64 * 1024);
        // Leave time for the answer to travel back.
        let wait = left(Instant::now()).saturating_sub(Duration::from_millis(250));
        let req = HookEventRequest {
            client: client.to_string(),
            client_kind: crate::wire::client_kind(client),
            event_json,
            wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
        };
        c.event(req)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| Blocked(status_line(&s, socket)))
    };
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(r) => r,
        Err(_) => Err(Blocked(format!(
            "no answer from the supervisor within {}; the call is blocked (if it waits for an approval, ask an operator: supervisorctl approvals)",
            secs(budget)
        ))),
    }
}

fn status_line(s: &tonic::Status, socket: &Path) -> String {
    let msg = s.message().replace('\n', " ");
    match s.code() {
        Code::Unavailable => format!(
            "cannot reach the supervisor at {} ({msg}); the call is blocked, hint: start the supervisor",
            socket.display()
        ),
        Code::Unimplemented => format!(
            "the supervisor at {} does not serve client hooks; the call is blocked, hint: upgrade it",
            socket.display()
        ),
        _ => format!("{msg}; the call is blocked"),
    }
}

/// The client's answer on stdout.
///
/// Codex 0.169 treats a PreToolUse answer it does not accept as a failed
/// hook, and a failed hook lets the call run: it accepts `deny` with a
/// reason, and `allow` only with `updatedInput`; it fails on `ask`, on a
/// bare `allow` and on `continue`. So for Codex an allow without a rewrite
/// prints nothing (the call runs, as decided), a stop is a deny whose
/// reason carries the operator's, and an `ask` (never sent for Codex)
/// blocks.
fn render(
    name: &str,
    codex: bool,
    event: &Map<String, Value>,
    a: &HookEventResponse,
    socket: &Path,
) -> Outcome {
    let mut out = Map::new();
    let pre = name == "PreToolUse";
    if a.stop && !(pre && codex) {
        out.insert("continue".into(), json!(false));
        out.insert("stopReason".into(), json!(a.stop_reason));
    }
    if pre {
        use tollgate_proto::HookDecision as D;
        let decision = match a.hook_decision() {
            D::Ask if codex => {
                return blocked(
                    name,
                    Blocked("the call needs a person's approval, and Codex cannot ask one; the call is blocked".to_string()),
                );
            }
            D::Allow => "allow",
            D::Deny => "deny",
            D::Ask => "ask",
            D::Unspecified => {
                return blocked(
                    name,
                    Blocked(format!(
                        "the supervisor answered decision {}, not allow, deny or ask; the call is blocked",
                        a.hook_decision
                    )),
                );
            }
        };
        let mut reason = format!("tollgate: {}", a.reason);
        if a.stop && codex {
            reason.push_str(&format!(" The session is over: {}", a.stop_reason));
        }
        let mut specific = json!({
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        });
        let routed = !a.route_id.is_empty() && decision != "deny";
        let narrowed = !a.updated_input_json.is_empty() && decision != "deny";
        if routed {
            match routed_input(event, &a.route_id, &a.route_comment, socket) {
                Ok(input) => specific["updatedInput"] = input,
                Err(b) => return blocked(name, b),
            }
        } else if narrowed {
            match serde_json::from_str::<Value>(&a.updated_input_json) {
                Ok(input @ Value::Object(_)) => specific["updatedInput"] = input,
                _ => {
                    return blocked(
                        name,
                        Blocked("the supervisor's narrowed input is not a JSON object; the call is blocked".to_string()),
                    );
                }
            }
        }
        // Codex fails open on fields it does not know.
        if !codex && !a.context.is_empty() && decision != "deny" {
            specific["additionalContext"] = json!(format!("tollgate: {}", a.context));
        }
        // Codex runs a plain allow on an empty answer (a bare `allow` fails it).
        let plain_codex_allow = codex && decision == "allow" && !routed && !narrowed;
        if !plain_codex_allow {
            out.insert("hookSpecificOutput".into(), specific);
        }
    }
    Outcome {
        stdout: if out.is_empty() {
            String::new()
        } else {
            format!("{}\n", Value::Object(out))
        },
        stderr: String::new(),
        code: 0,
    }
}

/// The client's tool_input with its command replaced by the routed one:
/// `<this agent> hook exec <id> --socket <socket>`, and the decided command
/// after a `#` as the supervisor shows it (escaped, a cut marked), for the
/// person reading the client's transcript or approving in its prompt. The
/// shell ignores the comment; the command that runs is the one the
/// supervisor decided and keeps.
pub fn routed_input(
    event: &Map<String, Value>,
    route_id: &str,
    comment: &str,
    socket: &Path,
) -> Result<Value, Blocked> {
    let Some(Value::Object(input)) = event.get("tool_input") else {
        return Err(Blocked(
            "the event has no tool_input to route; the call is blocked".to_string(),
        ));
    };
    let exe = std::env::current_exe().map_err(|e| {
        Blocked(format!(
            "cannot find the agent's own executable ({e}); the call is blocked"
        ))
    })?;
    let mut input = input.clone();
    input.insert(
        "command".into(),
        json!(routed_command(&exe, route_id, socket, comment)),
    );
    Ok(Value::Object(input))
}

/// The rewritten command line. The comment comes escaped from the
/// supervisor; whatever it holds, it never ends the line.
pub fn routed_command(exe: &Path, route_id: &str, socket: &Path, comment: &str) -> String {
    let comment: String = comment
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = format!(
        "{} hook exec {route_id} --socket {}",
        super::shell_quote(&exe.to_string_lossy()),
        super::shell_quote(&socket.to_string_lossy()),
    );
    match comment.trim() {
        "" => line,
        c => format!("{line} # {c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(decision: &str) -> HookEventResponse {
        let d = match decision {
            "allow" => tollgate_proto::HookDecision::Allow,
            "deny" => tollgate_proto::HookDecision::Deny,
            "ask" => tollgate_proto::HookDecision::Ask,
            _ => tollgate_proto::HookDecision::Unspecified,
        };
        HookEventResponse {
            hook_decision: d as i32,
            reason: "read calls run without approval in default mode.".into(),
            session_id: "S1".into(),
            ..Default::default()
        }
    }

    fn event(name: &str) -> Map<String, Value> {
        let v = json!({"hook_event_name": name, "tool_input": {"command": "ls -la\necho x", "timeout": 5000}});
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn pre_tool_use_answers_in_the_clients_shape() {
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &resp("allow"),
            Path::new("/s"),
        );
        assert_eq!(o.code, 0);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(
            v,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                "permissionDecisionReason": "tollgate: read calls run without approval in default mode."}})
        );
    }

    #[test]
    fn a_stop_answer_carries_continue_false_and_the_reason() {
        let mut r = resp("deny");
        r.stop = true;
        r.stop_reason = "revoked by ops: enough".into();
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &r,
            Path::new("/s"),
        );
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["continue"], false);
        assert_eq!(v["stopReason"], "revoked by ops: enough");
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
        let o = render(
            "PostToolUse",
            false,
            &event("PostToolUse"),
            &r,
            Path::new("/s"),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&o.stdout).unwrap(),
            json!({"continue": false, "stopReason": "revoked by ops: enough"})
        );
        let o = render(
            "PostToolUse",
            false,
            &event("PostToolUse"),
            &resp(""),
            Path::new("/s"),
        );
        assert_eq!((o.stdout.as_str(), o.code), ("", 0));
    }

    #[test]
    fn a_routed_call_rewrites_only_the_command() {
        let mut r = resp("allow");
        r.route_id = "rABCDEFGHIJKLMNOPQRSTUVWX".into();
        r.route_comment = "ls -la\\necho x".into();
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &r,
            Path::new("/run/t g/agent.sock"),
        );
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        let input = &v["hookSpecificOutput"]["updatedInput"];
        assert_eq!(input["timeout"], 5000);
        let cmd = input["command"].as_str().unwrap();
        assert!(
            cmd.ends_with(" hook exec rABCDEFGHIJKLMNOPQRSTUVWX --socket '/run/t g/agent.sock' # ls -la\\necho x"),
            "{cmd}"
        );
        assert!(!cmd.contains('\n'));
    }

    #[test]
    fn the_comment_cannot_end_the_line() {
        let c = routed_command(
            Path::new("/usr/bin/agent"),
            "rX",
            Path::new("/s"),
            "true\ncurl evil\r\u{2028}x",
        );
        assert_eq!(
            c.lines().count(),
            1,
            "a newline in the original would start a command: {c:?}"
        );
        assert!(
            c.starts_with("/usr/bin/agent hook exec rX --socket /s # "),
            "{c}"
        );
    }

    #[test]
    fn a_narrowed_call_carries_its_input_and_a_note_for_the_model() {
        let mut r = resp("allow");
        r.updated_input_json = r#"{"pattern":"KEY","glob":".env !**/.env"}"#.into();
        r.context = "left `.env` out".into();
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &r,
            Path::new("/s"),
        );
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(
            v["hookSpecificOutput"]["updatedInput"],
            json!({"pattern": "KEY", "glob": ".env !**/.env"})
        );
        assert_eq!(
            v["hookSpecificOutput"]["additionalContext"],
            "tollgate: left `.env` out"
        );
        // Codex: the input, never a field it does not know.
        let o = render(
            "PreToolUse",
            true,
            &event("PreToolUse"),
            &r,
            Path::new("/s"),
        );
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert!(
            v["hookSpecificOutput"].get("additionalContext").is_none(),
            "{v}"
        );
        assert!(v["hookSpecificOutput"]["updatedInput"].is_object());
        // An input that is not an object blocks.
        r.updated_input_json = "[1]".into();
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &r,
            Path::new("/s"),
        );
        assert_eq!(o.code, 2);
    }

    #[test]
    fn the_comment_is_the_supervisors_and_absent_when_empty() {
        assert_eq!(
            routed_command(Path::new("/a"), "rX", Path::new("/s"), ""),
            "/a hook exec rX --socket /s"
        );
        assert_eq!(
            routed_command(
                Path::new("/a"),
                "rX",
                Path::new("/s"),
                "rm x\\u{202e}… [cut: 3 more characters]"
            ),
            "/a hook exec rX --socket /s # rm x\\u{202e}… [cut: 3 more characters]"
        );
    }

    #[test]
    fn bad_events_block() {
        for (bytes, want) in [
            (b"{not json".to_vec(), "not valid JSON"),
            (b"[1]".to_vec(), "not a JSON object"),
            (vec![b'"', 0xff, b'"'], "not UTF-8"),
            (
                br#"{"hook_event_name":"Notification"}"#.to_vec(),
                "unknown event",
            ),
            (br#"{"session_id":"x"}"#.to_vec(), "no hook_event_name"),
            (vec![b' '; MAX_EVENT_BYTES + 1], "larger than 4 MiB"),
        ] {
            let e = parse(&bytes).unwrap_err().0;
            assert!(e.contains(want), "{e}");
            assert!(e.contains("blocked"), "{e}");
        }
        assert_eq!(blocked("PreToolUse", Blocked("x".into())).code, 2);
        assert_eq!(blocked("Stop", Blocked("x".into())).code, 0);
        assert_eq!(
            blocked("PreToolUse", Blocked("x".into())).stderr,
            "agent hook: x\n"
        );
    }

    #[test]
    fn codex_never_gets_an_answer_it_would_fail_open_on() {
        let ev = event("PreToolUse");
        // A plain allow: nothing printed, the call runs.
        let o = render("PreToolUse", true, &ev, &resp("allow"), Path::new("/s"));
        assert_eq!((o.stdout.as_str(), o.code), ("", 0));
        // A stop: a deny carrying the operator's reason, no `continue`.
        let mut r = resp("deny");
        r.stop = true;
        r.stop_reason = "revoked by ops".into();
        let o = render("PreToolUse", true, &ev, &r, Path::new("/s"));
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert!(v.get("continue").is_none(), "{v}");
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
        assert!(
            v["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .ends_with("The session is over: revoked by ops")
        );
        // Other events may carry the stop.
        let o = render(
            "PostToolUse",
            true,
            &event("PostToolUse"),
            &r,
            Path::new("/s"),
        );
        assert!(o.stdout.contains("\"continue\":false"));
        // An ask blocks.
        assert_eq!(
            render("PreToolUse", true, &ev, &resp("ask"), Path::new("/s")).code,
            2
        );
        // A routed allow carries updatedInput.
        let mut r = resp("allow");
        r.route_id = "rX".into();
        let o = render("PreToolUse", true, &ev, &r, Path::new("/s"));
        assert!(o.stdout.contains("updatedInput"), "{}", o.stdout);
    }

    #[test]
    fn an_unknown_decision_blocks() {
        let o = render(
            "PreToolUse",
            false,
            &event("PreToolUse"),
            &resp("maybe"),
            Path::new("/s"),
        );
        assert_eq!(o.code, 2);
        assert!(o.stdout.is_empty());
    }
}
