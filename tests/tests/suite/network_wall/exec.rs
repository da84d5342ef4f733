//! `supervisorctl sandbox exec` behind the wall (docs/INTERFACES.md
//! "[network]"): an operator's probe gets the same namespace with no route
//! out as a session's sandbox, the proxies, the DNS stub and the
//! transparent capture. An allowed name is reached through the proxy and
//! directly (`curl --noproxy '*'`, a raw socket); an unlisted one is
//! refused either way, stderr ending with its `network: refused` line
//! (which names supervisor.toml: an exec has no session for `net allow`);
//! each connection is recorded in the supervisor's log, attributed to the
//! exec (its id as `call_id`, its command line).

use std::process::Output;

use serde_json::Value;
use tollgate_e2e::harness::{Supervisor, root_or_skip};

use super::{Extra, World, workspace};

/// `sandbox exec` of `sh -c SCRIPT` in `ws` on `backend`: (stdout, stderr).
fn exec(sup: &Supervisor, ws: &std::path::Path, backend: &str, script: &str) -> (String, String) {
    let ws = ws.display().to_string();
    let out: Output = sup.ctl(&[
        "sandbox",
        "exec",
        "--workspace",
        &ws,
        "--backend",
        backend,
        "--",
        "sh",
        "-c",
        script,
    ]);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The supervisor log's `net_connection` records of execs running `needle`.
fn exec_records(sup: &Supervisor, needle: &str) -> Vec<Value> {
    sup.audit_files("supervisor-")
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .filter(|r| {
            r["event"] == "net_connection"
                && r["session"].as_str().is_some_and(|s| s.starts_with('x'))
                && r["call_id"] == r["session"]
                && r["command"].as_str().is_some_and(|c| c.contains(needle))
        })
        .collect()
}

/// Proxy-aware and direct clients: curl natively; Python (urllib through
/// the proxy, a raw socket past it) where the image has no curl.
fn clients(has_curl: bool, url: &str, host: &str, port: u16) -> [String; 2] {
    if has_curl {
        [
            format!("curl -fsS --max-time 20 {url}"),
            format!("curl -fsS --max-time 20 --noproxy '*' {url}"),
        ]
    } else {
        [
            format!(
                "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\", timeout=20).read().decode())'"
            ),
            format!(
                "python3 -c 'import socket; s = socket.create_connection((\"{host}\", {port}), timeout=20); s.sendall(b\"GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n\"); print(s.recv(4096).decode())'"
            ),
        ]
    }
}

fn allowed_and_unlisted(w: &World, backend: &str, uid: u32, has_curl: bool) {
    let ws = workspace(&w.sup, &format!("exec-{uid}"), uid);
    let (web, evil) = (&w.web, &w.evil);
    for (i, cmd) in clients(has_curl, &format!("http://{web}/u{uid}"), web, 80)
        .iter()
        .enumerate()
    {
        let (out, err) = exec(&w.sup, &ws, backend, cmd);
        assert!(
            out.contains(&format!("WALL-PAGE-OK host={web}")),
            "{backend} uid {uid} client {i}: {out}\n{err}"
        );
        assert!(!err.contains("network: refused"), "{err}");
    }
    let line = format!(
        "network: refused {evil}:80 (not in [network] allow; an operator can add {evil} to [network] allow in supervisor.toml)"
    );
    for (i, cmd) in clients(has_curl, &format!("http://{evil}/x{uid}"), evil, 80)
        .iter()
        .enumerate()
    {
        // Twice: one line for the host, deduplicated.
        let (out, err) = exec(&w.sup, &ws, backend, &format!("{cmd}; {cmd}"));
        assert!(!out.contains("WALL-PAGE-OK"), "client {i}: {out}");
        assert!(err.trim_end().ends_with(&line), "client {i}: {err}");
        assert_eq!(err.matches("network: refused").count(), 1, "{err}");
    }
    let (out, _) = exec(
        &w.sup,
        &ws,
        backend,
        "env | grep -c _proxy=; cat /etc/resolv.conf",
    );
    assert!(
        out.starts_with("4\n") && out.contains("nameserver 127.0.0.1"),
        "{out}"
    );
}

/// Each connection recorded, attributed to the exec.
fn recorded(w: &World, has_curl: bool) {
    let needle = if has_curl { "curl" } else { "python3" };
    // A close is recorded once the relay ends, within the wall's grace
    // (two seconds) of the exec's end: on a loaded machine, a little later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let recs = loop {
        let recs = exec_records(&w.sup, needle);
        let phase = |p: &str| recs.iter().filter(|r| r["phase"] == p).count();
        if phase("open") == phase("close") || std::time::Instant::now() > deadline {
            break recs;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let opened: Vec<&Value> = recs.iter().filter(|r| r["phase"] == "open").collect();
    assert!(
        opened.iter().any(|r| r["host"] == w.web.as_str()
            && r["address"] == format!("{}:80", w.public()).as_str()
            && r["via"] == "http"),
        "{recs:#?}"
    );
    assert!(
        opened
            .iter()
            .any(|r| r["host"] == w.web.as_str() && r["via"] == "transparent"),
        "{recs:#?}"
    );
    let closed = recs.iter().filter(|r| r["phase"] == "close").count();
    assert_eq!(closed, opened.len(), "{recs:#?}");
    for via in ["http", "transparent"] {
        assert!(
            recs.iter().any(|r| r["phase"] == "refused"
                && r["host"] == w.evil.as_str()
                && r["via"] == via
                && r["rule"] == "network:unlisted"),
            "{via}: {recs:#?}"
        );
    }
    // `audit report` counts the exec's connections in its hosts table.
    let logs: Vec<String> = w
        .sup
        .audit_files("supervisor-")
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["audit", "report", "--json"];
    args.extend(logs.iter().map(String::as_str));
    let out = w.sup.ctl(&args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let hosts = report["hosts"].as_array().cloned().unwrap_or_default();
    let count = |host: &str, key: &str| {
        hosts
            .iter()
            .filter(|h| h["host"] == host && h["port"] == 80)
            .map(|h| h[key].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert!(count(&w.web, "opened") >= opened.len() as u64, "{report:#}");
    assert!(count(&w.evil, "refused") >= 2, "{report:#}");
    // The names were learnt from the DNS stub: the test resolver saw the
    // allowed one only.
    let asked = w.log("dns.log");
    assert!(!asked.contains(&w.evil), "the resolver saw: {asked}");
}

#[test]
fn native_sandbox_exec_is_behind_the_wall() {
    if !root_or_skip("native_sandbox_exec_is_behind_the_wall") {
        return;
    }
    let w = World::start_with(66, "native", &Extra::default());
    for uid in [0, 65534] {
        allowed_and_unlisted(&w, "native", uid, true);
    }
    recorded(&w, true);
}

#[test]
fn docker_sandbox_exec_is_behind_the_wall() {
    let Some(image) = super::super::mcp_gateway_net::full_image_or_skip("docker_sandbox_exec_wall")
    else {
        return;
    };
    let config = format!("[sandbox]\nimage = \"{image}\"\n");
    let e = Extra {
        config: &config,
        ..Extra::default()
    };
    let w = World::start_with(67, "docker", &e);
    allowed_and_unlisted(&w, "docker", 0, false);
    recorded(&w, false);
}
