//! The real Claude Code and Codex calling tollgate's tools through
//! `agent mcp` (docs/MCP.md): each client runs offline in a network namespace
//! with only loopback, against a mock model server there that scripts
//! `mcp__tollgate__run_bash` calls; the client starts `agent mcp` as its
//! MCP server from its own configuration (`--mcp-config` for Claude Code,
//! `[mcp_servers.tollgate]` for Codex), and `agent mcp` reaches the real
//! supervisor by its socket path. For both clients:
//!
//! - an allowed command runs in tollgate's sandbox (no network, no
//!   /etc/shadow, seccomp on, the workspace writable) and its output is in
//!   the model's next request;
//! - a denied command does not run, and tollgate's sentence is in the
//!   model's next request;
//! - the audit records both decisions with `mcp-` call ids and
//!   `supervisorctl audit verify` passes.
//!
//! Without the clients (or root) a test says `skipped: …`, except under
//! TOLLGATE_REQUIRE_CLIENTS=1, where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::mcp_support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use agent_support::verify_audit;
use serde_json::{Value, json};
use tollgate_e2e::clients::{
    NetNs, Which, client_env, client_or_skip, codex_config, var_tmp_dir, write_codex_config,
};
use tollgate_e2e::harness::Supervisor;
use tollgate_e2e::model_mock::{ModelMock, Turn};

const CONFIG: &str = "[session]\nallow_dangerously_skip = true\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\n";

/// A scratch dir outside /tmp (Codex's home may not be under /tmp).
fn scratch() -> tempfile::TempDir {
    var_tmp_dir("tollgate-e2e-mcp-client-")
}

/// The MCP server a client is configured with: its name and the `agent`
/// arguments that start it.
struct Server {
    name: &'static str,
    args: Vec<String>,
    /// The tools the client may call without asking (Claude Code's
    /// `--allowedTools`).
    allowed: &'static str,
}

/// `agent mcp`, as both clients are configured with it.
fn agent_mcp() -> Server {
    Server {
        name: "tollgate",
        args: ["mcp", "--mode", "dangerouslySkipPermissions"]
            .map(String::from)
            .to_vec(),
        allowed: "mcp__tollgate__run_bash",
    }
}

/// `agent mcp-gateway` around the shell server of mcp_support.
fn gateway() -> Server {
    Server {
        name: "shell",
        args: [
            "mcp-gateway",
            "--name",
            "shell",
            "--",
            "python3",
            ".shell_server.py",
        ]
        .map(String::from)
        .to_vec(),
        allowed: "mcp__shell__run_shell,mcp__shell__write_file",
    }
}

/// Runs `client` in `ns` with its MCP configuration naming `server`, in
/// `ws`, until it ends (or three minutes pass).
#[allow(clippy::too_many_arguments)]
fn run_client(
    client: Which,
    exe: &Path,
    sup: &Supervisor,
    server: &Server,
    ns: &NetNs,
    ws: &Path,
    base_url: &str,
    scratch: &Path,
) -> Output {
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // The client may run as another uid: a copy it can reach.
    let agent = sup.dirs.staged_bin("agent").display().to_string();
    let socket = sup.agent_socket.display().to_string();
    let env = client_env(client, &home, base_url);
    let args: Vec<String> = match client {
        Which::Claude => {
            let cfg = scratch.join("mcp.json");
            let servers = json!({"mcpServers": {server.name: {
                "command": agent, "args": server.args,
                "env": {"TOLLGATE_SOCKET": socket}}}});
            std::fs::write(&cfg, servers.to_string()).unwrap();
            vec![
                "-p".into(),
                "do the task".into(),
                "--output-format".into(),
                "json".into(),
                "--mcp-config".into(),
                cfg.display().to_string(),
                "--strict-mcp-config".into(),
                "--allowedTools".into(),
                server.allowed.into(),
            ]
        }
        Which::Codex => {
            let args_toml = server
                .args
                .iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mcp_server = format!(
                "[mcp_servers.{name}]\ncommand = {agent:?}\nargs = [{args_toml}]\n\
                 env = {{ TOLLGATE_SOCKET = {socket:?} }}\ndefault_tools_approval_mode = \"approve\"\n",
                name = server.name,
            );
            write_codex_config(&home, &(codex_config(base_url) + &mcp_server));
            vec![
                "exec".into(),
                "--skip-git-repo-check".into(),
                "-s".into(),
                "workspace-write".into(),
                "do the task".into(),
            ]
        }
    };
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", "180", "nsenter"])
        .arg(format!("--net={}", ns.path().display()))
        .args(["--", "env", "-i"])
        .args(env.iter().map(|(k, v)| format!("{k}={v}")))
        .arg(exe)
        .args(&args)
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.output().expect("run the client")
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A command that says where it runs: the sandbox has no network (the
/// mock's own port, reachable in the client's namespace, is not), no
/// /etc/shadow, seccomp; the workspace is writable.
fn probe(port: u16) -> String {
    format!(
        "echo MARK-$((6*7)); grep '^Seccomp:' /proc/self/status; \
         python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null && echo REACHED-NET || echo NO-NET; \
         python3 -c \"open('/etc/'+'shadow').read()\" 2>/dev/null && echo READ-SHADOW || echo NO-SHADOW; \
         echo via-mcp > made-by-client.txt"
    )
}

/// The session `agent mcp` opened for the client, and its records.
fn only_session(sup: &Supervisor) -> Vec<Value> {
    let files = sup.audit_files("audit-");
    assert_eq!(files.len(), 1, "expected one session file: {files:?}");
    tollgate_e2e::harness::read_records(&files[0])
}

fn client_calls_run_bash_through_agent_mcp(client: Which) {
    let test = format!("{}_calls_run_bash_through_agent_mcp", client.name());
    let Some(exe) = client_or_skip(client, &test) else {
        return;
    };
    let sup = Supervisor::builder()
        .config(CONFIG)
        .sandbox("native")
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let ns = NetNs::new();
    let listener = ns.listen();
    let port = listener.local_addr().unwrap().port();
    let tool = |command: String| Turn::Mcp {
        server: "tollgate".into(),
        tool: "run_bash".into(),
        input: json!({ "command": command }),
    };
    let script = [
        tool(probe(port)),
        tool("curl -s http://169.254.169.254/latest/meta-data; touch RAN-CURL".into()),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _rt = rt.enter();
    let mock = ModelMock::serve(client, listener, &script);
    let dir = scratch();
    let out = run_client(
        client,
        &exe,
        &sup,
        &agent_mcp(),
        &ns,
        &ws,
        &mock.base_url(),
        dir.path(),
    );
    assert!(
        mock.requests().len() >= 3,
        "the client stopped before the script's end:\n{}",
        show(&out)
    );

    let ran = mock
        .result_of(0)
        .unwrap_or_else(|| panic!("the model was never told about call 0:\n{}", show(&out)))
        .text;
    for want in ["MARK-42", "Seccomp:\t2", "NO-NET", "NO-SHADOW"] {
        assert!(
            ran.contains(want),
            "{want} missing from what the model saw: {ran}"
        );
    }
    assert!(
        !ran.contains("REACHED-NET") && !ran.contains("READ-SHADOW"),
        "{ran}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("made-by-client.txt")).unwrap(),
        "via-mcp\n"
    );

    let denied = mock
        .result_of(1)
        .unwrap_or_else(|| panic!("the model was never told about call 1:\n{}", show(&out)));
    let (denied, is_error) = (denied.text, denied.is_error);
    assert!(
        denied.contains("`curl` is on the denied-binaries list"),
        "the model was not told tollgate's reason: {denied}"
    );
    if client == Which::Claude {
        assert!(is_error, "Claude Code did not mark the denial an error");
    }
    assert!(!ws.join("RAN-CURL").exists(), "the denied command ran");

    let records = only_session(&sup);
    let opened = records
        .iter()
        .find(|r| r["event"] == "session_opened")
        .unwrap();
    assert!(opened.to_string().contains("agent mcp"), "{opened}");
    let checks: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "permission_check" && r["tool"] == "run_bash")
        .collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!(checks[0]["decision"], "allow");
    assert_eq!(checks[1]["decision"], "deny");
    for c in &checks {
        assert!(c["call_id"].as_str().unwrap().starts_with("mcp-"), "{c}");
    }
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "tool_result" && r["tool"] == "run_bash" && r["status"] == "ok"),
        "no tool_result for the allowed command"
    );
    verify_audit(&sup);
}

#[test]
fn claude_code_calls_run_bash_through_agent_mcp() {
    client_calls_run_bash_through_agent_mcp(Which::Claude);
}

#[test]
fn codex_calls_run_bash_through_agent_mcp() {
    client_calls_run_bash_through_agent_mcp(Which::Codex);
}

/// Each client calls a wrapped server that checks nothing (mcp_support's
/// shell server) through `agent mcp-gateway`: its write outside the
/// workspace fails from the sandbox and the model reads that failure; its
/// command inside runs; the denied tool is never offered to the model; the
/// audit records the calls under the server's name and verifies.
fn client_calls_a_wrapped_server_through_the_gateway(client: Which) {
    let test = format!(
        "{}_calls_a_wrapped_server_through_the_gateway",
        client.name()
    );
    let Some(exe) = client_or_skip(client, &test) else {
        return;
    };
    let config = "[policy]\nallow = [\"mcp(shell.*)\"]\ndeny = [\"mcp(shell.danger)\"]\n[llm]\nprovider = \"script\"\n";
    let sup = Supervisor::builder()
        .config(config)
        .sandbox("native")
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join(".shell_server.py"), mcp_support::SHELL_SERVER).unwrap();
    let outside = sup.dirs.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let escaped = outside.join("escaped.txt");
    let ns = NetNs::new();
    let tool = |tool: &str, input: Value| Turn::Mcp {
        server: "shell".into(),
        tool: tool.into(),
        input,
    };
    let script = [
        tool(
            "write_file",
            json!({"path": escaped.to_str().unwrap(), "content": "escaped"}),
        ),
        tool(
            "run_shell",
            json!({"command": "echo via-gateway > gw.txt; echo MARK-$((6*7))"}),
        ),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _rt = rt.enter();
    let mock = ModelMock::serve(client, ns.listen(), &script);
    let dir = scratch();
    let out = run_client(
        client,
        &exe,
        &sup,
        &gateway(),
        &ns,
        &ws,
        &mock.base_url(),
        dir.path(),
    );
    assert!(
        mock.requests().len() >= 3,
        "the client stopped before the script's end:\n{}",
        show(&out)
    );
    let told = mock
        .result_of(0)
        .unwrap_or_else(|| panic!("the model was never told about call 0:\n{}", show(&out)))
        .text;
    assert!(told.contains("[Errno "), "the server's own failure: {told}");
    assert!(
        !escaped.exists(),
        "the wrapped server wrote outside the workspace"
    );
    let ran = mock.result_of(1).unwrap().text;
    assert!(ran.contains("MARK-42"), "{ran}");
    assert_eq!(
        std::fs::read_to_string(ws.join("gw.txt")).unwrap(),
        "via-gateway\n"
    );
    let all: String = mock.requests().iter().map(|r| r.raw_text()).collect();
    // Claude Code names the deferred MCP tools in its prompt (Codex only
    // the namespace): the denied one is not among them.
    if client == Which::Claude {
        assert!(
            all.contains("mcp__shell__run_shell"),
            "the wrapped server's tools never reached the model"
        );
    }
    assert!(
        !all.contains("mcp__shell__danger") && !all.contains("leaves DANGER-RAN"),
        "the denied tool was offered to the model"
    );
    let records = only_session(&sup);
    let checks: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "permission_check" && r["server"] == "shell")
        .collect();
    // Protocol requests (a method with a `/`: the client listing the
    // server's resources or prompts) are refused with no rule naming them,
    // and the client goes on.
    let (requests, tools): (Vec<&Value>, Vec<&Value>) = checks
        .iter()
        .partition(|c| c["mcp_tool"].as_str().is_some_and(|t| t.contains('/')));
    assert_eq!(tools.len(), 2, "{checks:?}");
    assert!(tools.iter().all(|c| c["decision"] == "allow"));
    assert!(
        requests
            .iter()
            .all(|c| c["decision"] == "deny" && c["rule"] == "mcp:method-default"),
        "{requests:?}"
    );
    verify_audit(&sup);
}

#[test]
fn claude_code_calls_a_wrapped_server_through_the_gateway() {
    client_calls_a_wrapped_server_through_the_gateway(Which::Claude);
}

#[test]
fn codex_calls_a_wrapped_server_through_the_gateway() {
    client_calls_a_wrapped_server_through_the_gateway(Which::Codex);
}
