//! End to end against a mock OpenAI-compatible server: the exact messages the
//! model is sent (tools offered, the denial text, the trimmed context), the API
//! key staying in the supervisor, the cost cap with the provider's usage numbers,
//! and the provider's bad inputs (malformed JSON, non-JSON arguments, a made-up
//! tool, HTTP 500, a hang past the timeout, a huge response).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::io::Write;
use std::time::Duration;

use agent_support::*;
use tollgate_e2e::harness::{Dirs, Supervisor};
use tollgate_e2e::mock_openai::{MockOpenAi, MockReply, RecordedRequest};

const KEY_ENV: &str = "TOLLGATE_E2E_MOCK_KEY";

fn api_key() -> String {
    format!(
        "sk-e2e-{:x}-never-leaves-the-supervisor",
        std::process::id()
    )
}

fn start(dirs: Dirs, mock: &MockOpenAi, llm_extra: &str) -> Supervisor {
    let config = format!(
        "[session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"openai\"\nbase_url = {}\napi_key_env = \"{KEY_ENV}\"\nmodel = \"mock-model\"\n{llm_extra}",
        toml_str(&mock.base_url())
    );
    Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .env(KEY_ENV, &api_key())
        .dirs(dirs)
        .start()
}

/// Runs the blocking agent on a thread, so the mock keeps serving.
async fn agent(sup: &Supervisor, ws: &std::path::Path, args: &[&str], stdin: &str) -> AgentRun {
    let mut child = spawn_agent(sup, ws, args);
    {
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
    }
    tokio::task::spawn_blocking(move || wait_output(child, Duration::from_secs(120)))
        .await
        .unwrap()
}

fn tool_messages(req: &RecordedRequest) -> Vec<(String, String)> {
    req.messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_sent_exactly_this_and_the_key_stays_in_the_supervisor() {
    if !ready("mock_messages") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    mock.push(
        MockReply::tool_calls(
            Some("reading first"),
            &[("call_r", "read_file", r#"{"path":"README.md"}"#)],
        )
        .with_usage(120, 15),
    );
    mock.push(
        MockReply::tool_calls(
            None,
            &[(
                "call_w",
                "write_file",
                r##"{"path":"README.md","content":"# new\n"}"##,
            )],
        )
        .with_usage(200, 20),
    );
    mock.push(
        MockReply::text("I could not change the readme; the user declined.").with_usage(260, 12),
    );
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("README.md"), "# old readme\n").unwrap();
    let sup = start(dirs, &mock, "");
    let run = agent(
        &sup,
        &ws,
        &[
            "--tools",
            "read_file,write_file,todo_list",
            "-p",
            "update the readme",
            "--output",
            "json",
        ],
        "",
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let v = run.json();
    assert_eq!(
        v["final_text"],
        "I could not change the readme; the user declined."
    );
    assert_eq!(v["usage"]["prompt_tokens"], 580);
    assert_eq!(v["usage"]["completion_tokens"], 47);

    let reqs = mock.chat_requests();
    assert_eq!(reqs.len(), 3);
    // The tools offered are exactly the session's --tools, as OpenAI functions.
    let mut offered = reqs[0].tool_names();
    offered.sort();
    assert_eq!(offered, vec!["read_file", "todo_list", "write_file"]);
    let first = reqs[0].messages();
    assert_eq!(first[0]["role"], "system");
    let system = first[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are a coding agent"), "{system}");
    assert!(system.contains("A denial is final"), "{system}");
    assert!(!system.contains(ws.to_str().unwrap()));
    assert_eq!(first[1]["role"], "user");
    assert_eq!(first[1]["content"], "update the readme");
    assert_eq!(first.len(), 2);
    // The second request carries the assistant's call and the file content.
    let second = reqs[1].messages();
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_r");
    let tm = tool_messages(&reqs[1]);
    assert_eq!(tm.len(), 1);
    assert_eq!(tm[0].0, "call_r");
    assert!(tm[0].1.contains("# old readme"), "{}", tm[0].1);
    // The third carries the denial, worded for the model, and no is_error field.
    let tm = tool_messages(&reqs[2]);
    assert_eq!(tm.len(), 2);
    assert_eq!(tm[1].0, "call_w");
    assert_eq!(
        tm[1].1,
        "user denied: overwrite README.md (existing 13 bytes will be lost). Do not retry this call; ask the user or change approach."
    );
    let denial_msg = reqs[2]
        .messages()
        .into_iter()
        .find(|m| m["tool_call_id"] == "call_w")
        .unwrap();
    assert!(denial_msg.get("is_error").is_none());

    // The key: in the supervisor's Authorization header, nowhere else.
    let key = api_key();
    for r in &reqs {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
        assert!(
            !String::from_utf8_lossy(&r.body).contains(&key),
            "key in a request body"
        );
    }
    assert!(!run.stdout.contains(&key) && !run.stderr.contains(&key));
    for f in sup.audit_files("") {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains(&key), "key in the audit log {}", f.display());
    }
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trimmed_context_is_what_the_model_gets() {
    if !ready("mock_trim") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    for i in 0..8 {
        let id = format!("call_{i}");
        mock.push(MockReply::tool_calls(
            None,
            &[(id.as_str(), "read_file", r#"{"path":"big.txt"}"#)],
        ));
    }
    mock.push(MockReply::text("read it all"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("big.txt"), "lorem ipsum ".repeat(100)).unwrap();
    let sup = start(dirs, &mock, "");
    let run = agent(
        &sup,
        &ws,
        &[
            "--max-context-tokens",
            "1500",
            "-p",
            "read big.txt many times",
        ],
        "",
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("agent: context trimmed:"),
        "{}",
        run.stderr
    );
    let reqs = mock.chat_requests();
    let trimmed = reqs
        .iter()
        .find(|r| {
            r.messages()
                .get(1)
                .and_then(|m| m["content"].as_str().map(str::to_string))
                .is_some_and(|c| c.starts_with("[Context trimmed by the agent:"))
        })
        .expect("a request with the trimmed context");
    let msgs = trimmed.messages();
    assert_eq!(msgs[0]["role"], "system");
    assert_ne!(msgs[2]["role"], "tool", "a result was split from its call");
    assert!(msgs.len() <= 11);
    // The same trim is in the audit log, with the same fingerprint.
    let id = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("Agent started in "))
        .and_then(|l| l.rsplit("session ").next())
        .and_then(|s| s.strip_suffix(')'))
        .unwrap()
        .to_string();
    let records = sup.session_records(&id);
    let trim = records
        .iter()
        .find(|r| r["event"] == "context_trim")
        .expect("context_trim audited");
    let fp = trim["summary_sha256_16"].as_str().unwrap();
    assert!(
        msgs[1]["content"]
            .as_str()
            .unwrap()
            .contains(&format!("sha256:{fp}"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_cap_stops_the_session_with_the_providers_usage() {
    if !ready("mock_cost_cap") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    // 20,000 prompt tokens at $1 per 1k = $20, over the $0.05 cap.
    mock.push(MockReply::tool_calls(None, &[("c1", "todo_list", "{}")]).with_usage(20_000, 100));
    mock.push(MockReply::text("should never be asked for"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sup = start(
        dirs,
        &mock,
        "max_cost_usd = 0.05\nprice_in_per_1k = 1.0\nprice_out_per_1k = 2.0\n",
    );
    let run = agent(&sup, &ws, &["-p", "spend", "--output", "json"], "").await;
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("agent: cost limit reached: "),
        "{}",
        run.stderr
    );
    let v = run.json();
    assert_eq!(v["stop_reason"], "cost_cap");
    assert_eq!(v["usage"]["prompt_tokens"], 20_000);
    assert_eq!(v["usage"]["completion_tokens"], 100);
    let cost = v["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 20.2).abs() < 1e-9, "{cost}");
    // No second provider call was made.
    assert_eq!(mock.chat_requests().len(), 1);
    assert_eq!(mock.pending(), 1);
    let id = v["session"].as_str().unwrap().to_string();
    let records = sup.session_records(&id);
    let ev = events(&records);
    assert!(ev.iter().any(|e| e == "cost_limit_hit"), "{ev:?}");
    let resp = records
        .iter()
        .find(|r| r["event"] == "llm_response")
        .unwrap();
    assert_eq!(resp["usage"]["prompt_tokens"], 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_bad_inputs_give_clear_messages_and_the_session_goes_on() {
    if !ready("mock_bad_inputs") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    mock.push(MockReply::malformed_json());
    // Not retried ([llm] retries = 0 below): this test is about the message.
    mock.push(MockReply::http_error(500, "the mock is having a bad day"));
    mock.push(MockReply::Hang);
    mock.push(MockReply::huge(9 * 1024 * 1024));
    mock.push(MockReply::tool_calls(
        None,
        &[
            ("c_bad", "read_file", "{\"path\": README.md"),
            ("c_made_up", "launch_missiles", "{}"),
        ],
    ));
    mock.push(MockReply::text("recovered"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sup = start(dirs, &mock, "timeout_s = 30\nretries = 0\n");
    // One user message per bad reply; the REPL must carry on after each.
    let run = agent(
        &sup,
        &ws,
        &["--llm-timeout", "2", "--tools", "read_file,todo_list"],
        "one\ntwo\nthree\nfour\nfive\n",
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let err = &run.stderr;
    assert!(
        err.contains("agent: llm call failed: malformed provider response"),
        "{err}"
    );
    assert!(
        err.contains("agent: llm call failed: provider answered HTTP 500"),
        "{err}"
    );
    assert!(err.contains("agent: llm timed out after 2s"), "{err}");
    assert!(
        err.contains("agent: llm call failed: provider response exceeds"),
        "{err}"
    );
    assert!(run.stdout.contains("recovered"));
    let reqs = mock.chat_requests();
    let last = reqs.last().unwrap();
    let tm = tool_messages(last);
    assert_eq!(tm.len(), 2);
    assert_eq!(tm[0].0, "c_bad");
    assert!(
        tm[0]
            .1
            .starts_with("Error: invalid arguments: not valid JSON: "),
        "{}",
        tm[0].1
    );
    assert_eq!(
        tm[1],
        (
            "c_made_up".to_string(),
            "Error: unknown tool 'launch_missiles'. Available tools: read_file, todo_list"
                .to_string()
        )
    );
    let id = session_id(&run);
    let records = sup.session_records(&id);
    let kinds: Vec<&str> = records
        .iter()
        .filter(|r| r["event"] == "llm_call_error")
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        vec!["malformed", "http_status", "timeout", "too_large"]
    );
    assert_eq!(
        events(&records).last().map(String::as_str),
        Some("session_closed")
    );
}

/// A tool call the agent refuses by itself (a made-up tool name,
/// arguments that are not JSON) never reaches the supervisor's PEP, so the
/// only record of it is the model's output as the supervisor saw it in the
/// Chat proxy: each call's name and raw argument text, redacted and capped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_the_agent_refuses_are_on_record_as_the_models_output() {
    if !ready("mock_refused_calls_on_record") {
        return;
    }
    let secret = format!("ghp_{}", "A1b2C3d4".repeat(5));
    let mock = MockOpenAi::start().await.unwrap();
    let made_up_args = format!(r#"{{"target":"the moon","note":"{secret}"}}"#);
    mock.push(MockReply::tool_calls(
        Some("launching"),
        &[("c_made_up", "launch_missiles", &made_up_args)],
    ));
    let not_json = format!("{{\"path\": README.md {}", "x".repeat(5000));
    mock.push(MockReply::tool_calls(
        None,
        &[("c_not_json", "read_file", &not_json)],
    ));
    mock.push(MockReply::text("done"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sup = start(dirs, &mock, "");
    let run = agent(
        &sup,
        &ws,
        &["--tools", "read_file", "-p", "go", "--output", "json"],
        "",
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    // The agent refused both itself, as before.
    let tm = tool_messages(mock.chat_requests().last().unwrap());
    assert_eq!(tm.len(), 2, "{tm:?}");
    assert!(
        tm[0].1.starts_with("Error: unknown tool 'launch_missiles'"),
        "{}",
        tm[0].1
    );
    assert!(
        tm[1]
            .1
            .starts_with("Error: invalid arguments: not valid JSON"),
        "{}",
        tm[1].1
    );

    let records = sup.session_records(&session_id(&run));
    // Neither call reached the PEP ...
    for r in &records {
        let id = r["call_id"].as_str().unwrap_or("");
        assert!(
            !id.starts_with("c_made_up") && !id.starts_with("c_not_json"),
            "{r}"
        );
    }
    // ... and both are on record as the model's output.
    let calls: Vec<serde_json::Value> = records
        .iter()
        .filter(|r| r["event"] == "llm_response")
        .flat_map(|r| r["calls"].as_array().cloned().unwrap_or_default())
        .collect();
    let made_up = calls
        .iter()
        .find(|c| c["id"] == "c_made_up")
        .unwrap_or_else(|| panic!("no made-up call on record: {records:?}"));
    assert_eq!(made_up["name"], "launch_missiles");
    assert_eq!(made_up["offered"], false);
    assert_eq!(made_up["json_object"], true);
    let args = made_up["arguments"].as_str().unwrap();
    assert!(args.contains("the moon"), "{args}");
    assert!(args.contains("[REDACTED:github-token]"), "{args}");
    let not_json_call = calls
        .iter()
        .find(|c| c["id"] == "c_not_json")
        .unwrap_or_else(|| panic!("no non-JSON call on record: {records:?}"));
    assert_eq!(not_json_call["name"], "read_file");
    assert_eq!(not_json_call["offered"], true);
    assert_eq!(not_json_call["json_object"], false);
    let args = not_json_call["arguments"].as_str().unwrap();
    assert!(args.starts_with("{\"path\": README.md xxx"), "{args}");
    assert!(
        args.len() < 2200 && args.ends_with("chars)"),
        "capped: {} bytes",
        args.len()
    );
    // The secret is nowhere in the audit log.
    for f in sup.audit_files("") {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains(&secret), "secret in {}", f.display());
    }
    verify_audit(&sup);
}

/// The provider's side: a response the supervisor cannot use (a
/// tool call with no name) is refused before the agent sees it; the body the
/// model sent is on record with the error, redacted and capped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_supervisor_cannot_use_is_on_record_too() {
    if !ready("mock_unusable_response_on_record") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    let secret = format!("ghp_{}", "Z9y8X7w6".repeat(5));
    mock.push(MockReply::Json {
        status: 200,
        body: serde_json::json!({
            "choices": [{
                "message": {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "c_nameless", "type": "function",
                    "function": {"arguments": format!("{{\"why\":\"no name\",\"note\":\"{secret}\"}}")}
                }]},
                "finish_reason": "tool_calls"
            }]
        }),
    });
    mock.push(MockReply::text("recovered"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sup = start(dirs, &mock, "");
    let run = agent(&sup, &ws, &["--tools", "read_file"], "one\ntwo\n").await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("malformed provider response: tool_calls[0] has no name"),
        "{}",
        run.stderr
    );
    let records = sup.session_records(&session_id(&run));
    let err = records
        .iter()
        .find(|r| r["event"] == "llm_call_error")
        .unwrap_or_else(|| panic!("no llm_call_error: {records:?}"));
    assert_eq!(err["kind"], "malformed");
    let response = err["response"].as_str().unwrap_or_default();
    assert!(
        response.contains("c_nameless") && response.contains("no name"),
        "{err}"
    );
    assert!(response.contains("[REDACTED:github-token]"), "{err}");
    for f in sup.audit_files("") {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains(&secret), "secret in {}", f.display());
    }
    verify_audit(&sup);
}

/// 429 and 5xx are tried again, at most `[llm] retries` times, after the
/// provider's `Retry-After` (seconds here) or 1 s, 2 s without one; each
/// retry is an `llm_retry` record before the wait, and the turn then
/// succeeds. Past the bound the provider's answer is the error; a
/// `Retry-After` over `max_retry_wait_s` is not waited for; a 400 is never
/// retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_providers_are_retried_within_bounds_and_each_retry_is_recorded() {
    if !ready("mock_retries") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    let busy = |status: u16, after: Option<&str>| MockReply::Busy {
        status,
        retry_after: after.map(str::to_string),
    };
    // Turn 1: a 429 asking for 1 s, a 503 without Retry-After, then an answer.
    mock.push(busy(429, Some("1")));
    mock.push(busy(503, None));
    mock.push(MockReply::text("after two retries"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sup = start(dirs, &mock, "retries = 2\nmax_retry_wait_s = 5\n");
    let run = agent(&sup, &ws, &["-p", "hello", "--output", "json"], "").await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("after two retries"), "{}", run.stdout);
    assert_eq!(mock.chat_requests().len(), 3);
    let id = run.json()["session"].as_str().unwrap().to_string();
    let records = sup.session_records(&id);
    let retries: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["event"] == "llm_retry")
        .collect();
    assert_eq!(retries.len(), 2, "{records:?}");
    assert_eq!(retries[0]["status"], 429);
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["wait_ms"], 1000);
    assert_eq!(retries[0]["retry_after"], "1");
    assert_eq!(retries[1]["status"], 503);
    assert_eq!(retries[1]["attempt"], 2);
    assert_eq!(retries[1]["wait_ms"], 2000);
    assert!(retries[1].get("retry_after").is_none());
    assert!(retries[0]["reason"].as_str().unwrap().contains("busy"));
    // The waits were kept: each retry came after the wait it recorded.
    let reqs = mock.chat_requests();
    for (i, want) in [(1, 1000u128), (2, 2000)] {
        let gap = reqs[i].received_at - reqs[i - 1].replied_at.unwrap();
        assert!(gap.as_millis() >= want, "retry {i} after {gap:?}");
    }
    let ev = events(&records);
    assert!(!ev.iter().any(|e| e == "llm_call_error"), "{ev:?}");

    // Past the bound: three 500s, two retries, then the error.
    for _ in 0..3 {
        mock.push(busy(500, Some("0")));
    }
    // A Retry-After over max_retry_wait_s: not waited for.
    mock.push(busy(429, Some("3600")));
    // A 400: never retried.
    mock.push(MockReply::http_error(400, "bad request"));
    for prompt in ["bound", "too long", "client error"] {
        let run = agent(&sup, &ws, &["-p", prompt, "--output", "json"], "").await;
        assert_ne!(run.code, 0, "{prompt}: {}", run.stdout);
        let id = session_id(&run);
        let records = sup.session_records(&id);
        let retried = records.iter().filter(|r| r["event"] == "llm_retry").count();
        let want = if prompt == "bound" { 2 } else { 0 };
        assert_eq!(retried, want, "{prompt}: {records:?}");
        let err = records
            .iter()
            .find(|r| r["event"] == "llm_call_error")
            .unwrap_or_else(|| panic!("{prompt}: {records:?}"));
        assert_eq!(err["kind"], "http_status", "{prompt}");
    }
    assert_eq!(mock.chat_requests().len(), 3 + 3 + 1 + 1);
}

/// `[llm] proxy`: the provider is reached through that proxy and no other
/// (the request arrives in absolute form, naming the provider's own host,
/// which does not resolve: only the proxy could have delivered it); the
/// environment's proxy variables are never used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_llm_proxy_is_the_one_configured() {
    if !ready("mock_proxy") {
        return;
    }
    let proxy = MockOpenAi::start().await.unwrap();
    proxy.push(MockReply::text("through the proxy"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let config = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"http://llm.invalid/v1\"\napi_key_env = \"{KEY_ENV}\"\nmodel = \"mock-model\"\nproxy = \"http://{}\"\n",
        proxy.addr()
    );
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .env(KEY_ENV, &api_key())
        // Never used: only [llm] proxy is.
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("http_proxy", "http://127.0.0.1:9")
        .dirs(dirs)
        .start();
    let run = agent(&sup, &ws, &["-p", "hello", "--output", "json"], "").await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("through the proxy"), "{}", run.stdout);
    let reqs = proxy.chat_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "http://llm.invalid/v1/chat/completions");
    // A proxy that is not a URL stops the start (exit 78 via --check-config).
    let bad = std::process::Command::new(tollgate_e2e::harness::bin("supervisor"))
        .arg("--check-config")
        .arg("--config")
        .arg({
            let p = sup.dirs.root.path().join("bad.toml");
            std::fs::write(&p, "[llm]\nproxy = \"socks9://x\"\n").unwrap();
            p
        })
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[llm] proxy"));
}
