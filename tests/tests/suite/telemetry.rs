//! OpenTelemetry export (docs/OPERATIONS.md): a real supervisor with `[telemetry]`
//! pointed at an OTLP/gRPC receiver running inside this test (a tonic
//! server built from the OpenTelemetry protobuf definitions), driven by the
//! real `agent` and `supervisorctl`. Also a receiver that is down and one
//! that accepts connections and never answers: tool calls still complete,
//! and what was lost is counted in `supervisorctl status`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use serde_json::Value;
use tollgate_e2e::harness::{Supervisor, TEST_CONFIG};

use crate::agent_support;
use tonic::{Request, Response, Status};

/// One exported signal, flattened: name, attributes as strings, and for
/// spans the trace id and duration.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    attrs: std::collections::BTreeMap<String, String>,
    trace_id: Vec<u8>,
    duration_ns: u64,
    service: String,
}

impl Got {
    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs.get(k).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Got>,
    logs: Vec<Got>,
    /// Metric data points: (metric name, attributes, value, monotonic sum).
    points: Vec<(
        String,
        std::collections::BTreeMap<String, String>,
        i64,
        bool,
    )>,
}

#[derive(Clone)]
struct Collector {
    got: Arc<Mutex<Received>>,
}

fn flat(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[KeyValue]) -> std::collections::BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), flat(kv.value.as_ref())))
        .collect()
}

fn service_of(kvs: &[KeyValue]) -> String {
    attrs(kvs).get("service.name").cloned().unwrap_or_default()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut got = self.got.lock().unwrap();
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .map(|r| service_of(&r.attributes))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.spans.push(Got {
                        name: s.name.clone(),
                        attrs: attrs(&s.attributes),
                        trace_id: s.trace_id.clone(),
                        duration_ns: s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano),
                        service: service.clone(),
                    });
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Collector {
    async fn export(
        &self,
        req: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let mut got = self.got.lock().unwrap();
        for rl in req.into_inner().resource_logs {
            let service = rl
                .resource
                .as_ref()
                .map(|r| service_of(&r.attributes))
                .unwrap_or_default();
            for sl in rl.scope_logs {
                for l in sl.log_records {
                    got.logs.push(Got {
                        name: l.event_name.clone(),
                        attrs: attrs(&l.attributes),
                        trace_id: l.trace_id.clone(),
                        duration_ns: 0,
                        service: service.clone(),
                    });
                }
            }
        }
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        req: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let mut got = self.got.lock().unwrap();
        for rm in req.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                for m in sm.metrics {
                    let (points, monotonic) = match m.data {
                        Some(metric::Data::Sum(s)) => (s.data_points, s.is_monotonic),
                        Some(metric::Data::Gauge(g)) => (g.data_points, false),
                        _ => (Vec::new(), false),
                    };
                    for p in points {
                        let v = match p.value {
                            Some(number_data_point::Value::AsInt(i)) => i,
                            _ => -1,
                        };
                        got.points
                            .push((m.name.clone(), attrs(&p.attributes), v, monotonic));
                    }
                }
            }
        }
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on 127.0.0.1, on its own runtime.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Received>>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = Arc::new(Mutex::new(Received::default()));
        let collector = Collector {
            got: Arc::clone(&got),
        };
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(collector.clone()))
                .add_service(LogsServiceServer::new(collector.clone()))
                .add_service(MetricsServiceServer::new(collector))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Receiver { addr, got, _rt: rt }
    }

    /// Waits (up to 30 s) until `pred` holds for what arrived.
    fn wait_for(&self, what: &str, pred: impl Fn(&Received) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pred(&self.got.lock().unwrap()) {
                return;
            }
            if Instant::now() > deadline {
                let got = self.got.lock().unwrap();
                panic!(
                    "{what}: not received within 30 s; spans: {:#?}\nlogs: {:#?}",
                    got.spans, got.logs
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn config(endpoint: &str, extra: &str) -> String {
    format!("{TEST_CONFIG}\n[telemetry]\nendpoint = \"{endpoint}\"\n{extra}\n")
}

/// `agent call TOOL ARGS --workspace WS`; returns its JSON answer.
fn agent_call(sup: &Supervisor, ws: &std::path::Path, tool: &str, args: &str) -> Value {
    let out = sup
        .agent_cmd()
        .args(["call", tool, args, "--workspace"])
        .arg(ws)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "agent call {tool}: {e}; stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn status(sup: &Supervisor) -> Value {
    let out = sup.ctl(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn session_of(sup: &Supervisor) -> String {
    let out = sup.ctl(&["sessions", "--all", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = v.as_array().cloned().unwrap_or_default();
    list.last().unwrap()["id"].as_str().unwrap().to_string()
}

#[test]
fn decisions_and_tool_runs_arrive_as_logs_and_spans_without_arguments() {
    let rx = Receiver::start();
    let sup = Supervisor::builder()
        .config(&config(&format!("http://{}", rx.addr), ""))
        .start();
    let uid = nix::unistd::getuid().as_raw();
    let ws = sup.dirs.workspace("ws", uid);
    std::fs::write(ws.join("notes.txt"), "read me\n").unwrap();

    let ok = agent_call(&sup, &ws, "read_file", r#"{"path":"notes.txt"}"#);
    assert_eq!(ok["ok"], true, "{ok}");
    let session = session_of(&sup);
    let denied = agent_call(
        &sup,
        &ws,
        "read_file",
        r#"{"path":"../../etc/shadow-ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"}"#,
    );
    assert_eq!(denied["ok"], false, "{denied}");

    rx.wait_for("2 decisions and a tool result", |r| {
        r.logs
            .iter()
            .filter(|l| l.name == "tollgate.tool_decision")
            .count()
            >= 2
            && r.spans.iter().any(|s| s.name == "tollgate.tool_result")
    });
    let got = rx.got.lock().unwrap();
    // The allowed read: a decision log record with session, tool, verdict,
    // source and client.
    let allow = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.tool_decision" && l.attr("decision") == Some("allow"))
        .expect("the allow decision");
    assert_eq!(allow.attr("session.id"), Some(session.as_str()));
    assert_eq!(allow.attr("tool_name"), Some("read_file"));
    assert_eq!(allow.attr("source"), Some("allowed"));
    assert_eq!(allow.attr("client.uid"), Some(uid.to_string().as_str()));
    assert_eq!(allow.attr("client.name"), Some("agent call"));
    assert_eq!(allow.service, "tollgate");
    // The refusal: verdict, code and rule, and nothing of the path.
    let deny = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.tool_decision" && l.attr("decision") == Some("deny"))
        .expect("the deny decision");
    assert_eq!(deny.attr("tool_name"), Some("read_file"));
    assert!(deny.attr("code").is_some_and(|c| !c.is_empty()), "{deny:?}");
    assert!(deny.attr("rule").is_some_and(|c| !c.is_empty()), "{deny:?}");
    for l in got.logs.iter().chain(got.spans.iter()) {
        for k in ["tool_parameters", "target", "consequence", "output"] {
            assert!(
                l.attr(k).is_none(),
                "{k} exported without log_tool_details: {l:?}"
            );
        }
        let all = format!("{l:?}");
        assert!(
            !all.contains("shadow") && !all.contains("notes.txt"),
            "{all}"
        );
    }
    // The tool run: a span with the run's duration, in the session's trace.
    let run = got
        .spans
        .iter()
        .find(|s| s.name == "tollgate.tool_result")
        .unwrap();
    assert_eq!(run.attr("tool_name"), Some("read_file"));
    assert_eq!(run.attr("success"), Some("true"));
    let ms: u64 = run.attr("duration_ms").unwrap().parse().unwrap();
    assert_eq!(
        run.duration_ns,
        ms * 1_000_000,
        "the span lasts the run: {run:?}"
    );
    let decision_span = got
        .spans
        .iter()
        .find(|s| s.name == "tollgate.tool_decision" && s.attr("session.id") == Some(&session))
        .unwrap();
    assert_eq!(
        run.trace_id, decision_span.trace_id,
        "one trace per session"
    );
    assert_eq!(run.trace_id, allow.trace_id, "logs carry the span's trace");
    drop(got);

    // The receiver has the batch before the supervisor has its answer and
    // counts the batch as exported: wait for the count.
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let st = status(&sup);
        if st["telemetry"]["exported"].as_u64().unwrap() >= 3 {
            break st;
        }
        assert!(Instant::now() < deadline, "exports not counted: {st}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = &st["telemetry"];
    assert_eq!(t["enabled"], true, "{st}");
    assert_eq!(t["endpoint"], format!("http://{}", rx.addr));
    assert_eq!(t["dropped"], 0, "{st}");
    assert_eq!(t["failed"], 0, "{st}");
    let text = sup.ctl(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("telemetry:") && l.contains("exported")),
        "{text}"
    );
}

#[test]
fn a_revoked_session_is_exported_with_its_reason() {
    let rx = Receiver::start();
    let sup = Supervisor::builder()
        .config(&config(&format!("http://{}", rx.addr), ""))
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let mut c = sup.agent_client().await;
        c.open_session(tollgate_proto::v1::OpenSessionRequest {
            workspace: ws.display().to_string(),
            client: "e2e".to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id
    });
    let out = sup.ctl(&["revoke", &id, "--reason", "runaway"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rx.wait_for("the revocation", |r| {
        r.logs.iter().any(|l| l.name == "tollgate.session_revoked")
    });
    let got = rx.got.lock().unwrap();
    let rev = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.session_revoked")
        .unwrap();
    assert_eq!(rev.attr("session.id"), Some(id.as_str()));
    assert_eq!(rev.attr("state"), Some("revoked"));
    assert_eq!(rev.attr("client.name"), Some("e2e"));
    assert!(rev.attr("reason").unwrap().contains("runaway"), "{rev:?}");
}

#[test]
fn tool_details_are_exported_redacted_when_asked() {
    let rx = Receiver::start();
    let sup = Supervisor::builder()
        .config(&config(
            &format!("http://{}", rx.addr),
            "log_tool_details = true",
        ))
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
    let out = agent_call(
        &sup,
        &ws,
        "read_file",
        &format!(r#"{{"path":"missing-{secret}.txt"}}"#),
    );
    assert_eq!(out["ok"], false, "{out}");
    rx.wait_for("a decision with its parameters", |r| {
        r.logs
            .iter()
            .any(|l| l.name == "tollgate.tool_decision" && l.attr("tool_parameters").is_some())
    });
    let got = rx.got.lock().unwrap();
    let d = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.tool_decision")
        .unwrap();
    let params = d.attr("tool_parameters").unwrap();
    assert!(params.contains("missing-"), "{params}");
    assert!(params.contains("REDACTED"), "{params}");
    for l in got.logs.iter().chain(got.spans.iter()) {
        assert!(!format!("{l:?}").contains(secret), "secret exported: {l:?}");
    }
    assert!(
        status(&sup)["telemetry"]["log_tool_details"]
            .as_bool()
            .unwrap()
    );
}

#[test]
fn a_collector_that_is_down_costs_counted_failures_not_tool_calls() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sup = Supervisor::builder()
        .config(&config(&format!("http://127.0.0.1:{port}"), ""))
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    for _ in 0..3 {
        let out = agent_call(&sup, &ws, "read_file", r#"{"path":"a.txt"}"#);
        assert_eq!(out["ok"], true, "{out}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let t = loop {
        let t = status(&sup)["telemetry"].clone();
        if t["failed"].as_u64().unwrap() + t["dropped"].as_u64().unwrap() >= 6 {
            break t;
        }
        assert!(Instant::now() < deadline, "losses not counted: {t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(t["exported"], 0, "{t}");
    assert!(!t["last_error"].as_str().unwrap().is_empty(), "{t}");
}

#[test]
fn a_collector_that_never_answers_fills_the_queue_and_drops_are_counted() {
    // Accepts TCP connections (the kernel completes them into the backlog)
    // and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let sup = Supervisor::builder()
        .config(&config(
            &format!("http://{addr}"),
            "queue_size = 4\nbatch_size = 1\nexport_timeout_ms = 60000",
        ))
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    // Each call is four events (opened, decision, result, closed); the
    // worker is stuck on the first export for a minute.
    for _ in 0..5 {
        let out = agent_call(&sup, &ws, "read_file", r#"{"path":"a.txt"}"#);
        assert_eq!(out["ok"], true, "{out}");
    }
    let t = status(&sup)["telemetry"].clone();
    assert!(t["dropped"].as_u64().unwrap() >= 10, "{t}");
    assert_eq!(t["exported"], 0, "{t}");
    assert!(t["queued"].as_u64().unwrap() <= 4, "{t}");
    drop(silent);
}

#[test]
fn a_garbage_endpoint_stops_the_start_naming_the_key() {
    let dirs = tollgate_e2e::harness::Dirs::new();
    let config_path = dirs.root.path().join("supervisor.toml");
    std::fs::write(&config_path, config("collector:4317", "")).unwrap();
    let out = std::process::Command::new(tollgate_e2e::harness::bin("supervisor"))
        .arg("--config")
        .arg(&config_path)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[telemetry] endpoint \"collector:4317\" has scheme \"collector\""),
        "{err}"
    );
}

#[test]
fn an_approval_and_an_llm_call_arrive_with_their_verdicts() {
    let rx = Receiver::start();
    let dirs = tollgate_e2e::harness::Dirs::new();
    let script = agent_support::write_script(
        &dirs,
        "turns.json",
        &serde_json::json!([{"content": "nothing to do"}]),
    );
    let sup = Supervisor::builder()
        .dirs(dirs)
        .config(&format!(
            "[session]\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\nscript = {}\n[telemetry]\nendpoint = \"http://{}\"\n",
            agent_support::toml_str(&script.to_string_lossy()),
            rx.addr
        ))
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());

    // An LLM call: one scripted turn with no tool call.
    let run = agent_support::run_agent(&sup, &ws, &["-p", "say hi", "--output", "json"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    rx.wait_for("the llm call", |r| {
        r.logs.iter().any(|l| l.name == "tollgate.api_request")
            && r.spans.iter().any(|s| s.name == "tollgate.api_request")
    });

    // An approval: write_file asks; with no terminal the agent waits for an
    // operator, who approves.
    let child = agent_support::spawn_agent(
        &sup,
        &ws,
        &[
            "call",
            "write_file",
            r#"{"path":"notes.md","content":"hello\n"}"#,
        ],
    );
    let pending = agent_support::wait_for_approval(&sup);
    let id = pending["id"].as_str().unwrap().to_string();
    let out = sup.ctl(&["approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = agent_support::wait_output(child, Duration::from_secs(60));
    assert_eq!(done.code, 0, "{}", done.stderr);
    rx.wait_for("the approval", |r| {
        r.logs
            .iter()
            .any(|l| l.name == "tollgate.approval_decision")
    });

    let got = rx.got.lock().unwrap();
    let llm = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.api_request")
        .unwrap();
    assert_eq!(llm.attr("provider"), Some("script"), "{llm:?}");
    assert!(
        llm.attr("duration_ms").unwrap().parse::<u64>().is_ok(),
        "{llm:?}"
    );
    assert!(!llm.attr("session.id").unwrap_or("").is_empty(), "{llm:?}");
    let approval = got
        .logs
        .iter()
        .find(|l| l.name == "tollgate.approval_decision")
        .unwrap();
    assert_eq!(approval.attr("decision"), Some("approved"), "{approval:?}");
    assert_eq!(
        approval.attr("tool_name"),
        Some("write_file"),
        "{approval:?}"
    );
    assert_eq!(
        approval.attr("approval.id"),
        Some(id.as_str()),
        "{approval:?}"
    );
    assert!(
        !approval.attr("source").unwrap_or("").is_empty(),
        "{approval:?}"
    );
    // Details are off: no target (the path) leaves the host.
    assert_eq!(approval.attr("target"), None, "{approval:?}");
    assert!(
        got.logs
            .iter()
            .chain(got.spans.iter())
            .all(|g| g.attrs.values().all(|v| !v.contains("notes.md"))),
        "the path leaked: {:#?}",
        got.logs
    );
}

/// The counters `status` shows arrive as OTLP metrics every
/// `metrics_interval_s`: decisions by verdict as a monotonic sum, sessions
/// and approvals pending as gauges, with the values `status` reports.
#[test]
fn the_status_counters_arrive_as_otlp_metrics() {
    let rx = Receiver::start();
    let sup = Supervisor::builder()
        .config(&config(
            &format!("http://{}", rx.addr),
            "metrics_interval_s = 1",
        ))
        .start();
    let uid = nix::unistd::getuid().as_raw();
    let ws = sup.dirs.workspace("ws", uid);
    std::fs::write(ws.join("a.txt"), "x\n").unwrap();
    let r = agent_call(&sup, &ws, "read_file", r#"{"path":"a.txt"}"#);
    assert_eq!(r["ok"], true, "{r}");
    let allowed = status(&sup)["records"]["decisions"]["allow"]
        .as_u64()
        .unwrap();
    assert!(allowed >= 1);
    rx.wait_for("decisions as a metric", |got| {
        got.points.iter().any(|(name, a, v, mono)| {
            name == "tollgate_decisions"
                && a.get("verdict").map(String::as_str) == Some("allow")
                && *v as u64 >= allowed
                && *mono
        })
    });
    rx.wait_for("the gauges", |got| {
        [
            "tollgate_sessions_active",
            "tollgate_approvals_pending",
            "tollgate_audit_refusals",
        ]
        .iter()
        .all(|n| got.points.iter().any(|(name, _, _, _)| name == n))
    });
}
