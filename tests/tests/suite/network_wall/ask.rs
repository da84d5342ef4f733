//! `[network] unlisted = "ask"` end to end (docs/INTERFACES.md "[network]"):
//! a sandboxed command's connection to an unlisted test host waits, pending
//! in `supervisorctl approvals` with host, port and the command; approved
//! once, the same connection goes on; denied, or not decided before
//! `[session] approval_timeout_s`, it is closed and the command's result
//! ends with the `network: refused` line giving the reason. Each decision
//! is recorded (`approval_decided`, `net_connection`).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::harness::{Supervisor, root_or_skip};

use super::{Extra, Sess, World, workspace};

/// Short, so the timeout case is quick; long enough for a loaded machine
/// to approve in.
const WAIT_S: u64 = 10;

/// run_bash in the background (it waits on the approval): (output, exit code).
fn bash_in_background(s: &Sess<'_>, command: &str) -> JoinHandle<(String, i64)> {
    let (socket, client) = (
        s.sup.agent_socket.clone(),
        s.sup.dirs.staged_bin("e2e-client"),
    );
    let (uid, token) = (s.uid, s.token.clone());
    let args = json!({ "command": command, "timeout_s": 120 }).to_string();
    std::thread::spawn(move || {
        let out = Command::new(client)
            .arg(&socket)
            .arg(&token)
            .args(["call", "run_bash", &args])
            .uid(uid)
            .gid(uid)
            .output()
            .expect("run e2e-client");
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let v: Value = serde_json::from_str(
            line.strip_prefix("OK ")
                .unwrap_or_else(|| panic!("run_bash: {line}")),
        )
        .unwrap();
        let text = v["output"].as_str().unwrap_or_default().to_string();
        (text, v["exit_code"].as_i64().unwrap_or(-1))
    })
}

/// The pending network approval for `target`, once it shows.
fn pending_for(sup: &Supervisor, target: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = sup.ctl(&["approvals", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let found = v.as_array().and_then(|all| {
            all.iter()
                .find(|a| {
                    a["tool"] == "network"
                        && a["consequence"]
                            .as_str()
                            .is_some_and(|c| c.contains(target))
                })
                .cloned()
        });
        if let Some(a) = found {
            return a;
        }
        assert!(Instant::now() < deadline, "no approval for {target}: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A plain-HTTP fetch through the proxy, printing the page or the error.
fn fetch(host: &str, path: &str) -> String {
    format!(
        "python3 -c 'import urllib.request\ntry: print(urllib.request.urlopen(\"http://{host}/{path}\", timeout=100).read().decode())\nexcept Exception as e: print(\"REFUSED\", e)'"
    )
}

/// The pending approval shows host, port and the command, in the JSON and
/// in the people's table.
fn shows_host_port_and_command(sup: &Supervisor, a: &Value, target: &str, marker: &str) {
    let consequence = a["consequence"].as_str().unwrap();
    assert!(
        consequence.starts_with(&format!("connect to {target}, opened by `python3 -c"))
            && consequence.contains(marker),
        "{a}"
    );
    let table = String::from_utf8(sup.ctl(&["approvals"]).stdout).unwrap();
    assert!(
        table.contains(a["id"].as_str().unwrap())
            && table.contains(&format!("connect to {target}")),
        "{table}"
    );
}

/// The approval's decision record, and the connection's.
fn decided<'r>(recs: &'r [Value], approval: &Value) -> &'r Value {
    recs.iter()
        .find(|r| r["event"] == "approval_decided" && r["approval_id"] == approval["id"])
        .unwrap_or_else(|| panic!("no approval_decided for {approval}: {recs:#?}"))
}

fn net_record<'r>(recs: &'r [Value], phase: &str, host: &str) -> &'r Value {
    recs.iter()
        .find(|r| r["event"] == "net_connection" && r["phase"] == phase && r["host"] == host)
        .unwrap_or_else(|| panic!("no {phase} record for {host}: {recs:#?}"))
}

/// The result's last line: the refusal of `target` with the reason.
fn ends_with_refusal(out: &str, target: &str, reason: &str) {
    let last = out.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("network: refused {target} ({reason}")),
        "{out}"
    );
    assert_eq!(out.matches("network: refused").count(), 1, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_host_is_asked_for_approved_denied_and_timed_out() {
    if !root_or_skip("an_unlisted_host_is_asked_for_approved_denied_and_timed_out") {
        return;
    }
    let config = format!(
        "[session]\napproval_timeout_s = {WAIT_S}\n[policy]\nallow = [\"run_bash(python3 *)\"]\n"
    );
    let e = Extra {
        config: &config,
        network: "unlisted = \"ask\"",
        v6: 0,
    };
    let w = World::start_with(64, "native", &e);
    let tag = w.host.addrs.tag;
    let (denied, late) = (
        format!("denied-{tag}.example.com"),
        format!("late-{tag}.example.com"),
    );
    w.add_name(&denied, w.public());
    w.add_name(&late, w.public());
    let ws = workspace(&w.sup, "ws", 0);
    let s = Sess::open_in(&w.sup, &ws, 0, "default");

    // Approved once: the same connection goes on.
    let asked = format!("{}:80", w.evil);
    let running = bash_in_background(&s, &fetch(&w.evil, "approved-path"));
    let a = pending_for(&w.sup, &asked);
    shows_host_port_and_command(&w.sup, &a, &asked, "approved-path");
    let out = w
        .sup
        .ctl(&["approve", a["id"].as_str().unwrap(), "--scope", "once"]);
    assert!(out.status.success(), "{out:?}");
    let (out, code) = running.join().unwrap();
    let page = format!("WALL-PAGE-OK host={}", w.evil);
    assert!(code == 0 && out.contains(&page), "{out}");
    assert!(!out.contains("network: refused"), "{out}");
    let recs = w.sup.session_records(&s.id);
    let d = decided(&recs, &a);
    assert_eq!(
        (&d["outcome"], &d["scope"]),
        (&json!("approved"), &json!("once")),
        "{d}"
    );
    let open = net_record(&recs, "open", &w.evil);
    assert_eq!(
        (&open["rule"], &open["port"]),
        (&json!("approved"), &json!(80)),
        "{open}"
    );
    assert!(
        open["command"].as_str().unwrap().contains("approved-path"),
        "{open}"
    );
    assert_eq!(open["address"], format!("{}:80", w.public()).as_str());

    // Denied: closed, the result ends with the reason.
    let target = format!("{denied}:80");
    let running = bash_in_background(&s, &fetch(&denied, "denied-path"));
    let a = pending_for(&w.sup, &target);
    shows_host_port_and_command(&w.sup, &a, &target, "denied-path");
    let out = w.sup.ctl(&[
        "deny",
        a["id"].as_str().unwrap(),
        "--reason",
        "not this one",
    ]);
    assert!(out.status.success(), "{out:?}");
    let (out, _) = running.join().unwrap();
    assert!(
        out.contains("REFUSED HTTP Error 403") && !out.contains("WALL-PAGE-OK"),
        "{out}"
    );
    ends_with_refusal(&out, &target, &format!("user denied: connect to {target}"));
    assert!(out.contains("The user said: not this one"), "{out}");
    let recs = w.sup.session_records(&s.id);
    assert_eq!(decided(&recs, &a)["outcome"], "denied");
    assert!(
        !recs
            .iter()
            .any(|r| r["phase"] == "open" && r["host"] == denied.as_str())
    );
    let refused = net_record(&recs, "refused", &denied);
    assert!(
        refused["reason"].as_str().unwrap().contains("user denied"),
        "{refused}"
    );

    // Not decided in time: the transparent path's connection is reset.
    let target = format!("{late}:80");
    let raw = format!(
        "python3 -c 'import socket\ntry:\n  s = socket.create_connection((\"{late}\", 80), timeout=100); s.sendall(b\"GET /late-path HTTP/1.0\\r\\n\\r\\n\"); print(\"GOT\", s.recv(100))\nexcept Exception as e: print(\"RESET\", e)'"
    );
    let started = Instant::now();
    let running = bash_in_background(&s, &raw);
    let a = pending_for(&w.sup, &target);
    shows_host_port_and_command(&w.sup, &a, &target, "late-path");
    let (out, _) = running.join().unwrap();
    assert!(started.elapsed() >= Duration::from_secs(WAIT_S), "{out}");
    assert!(!out.contains("WALL-PAGE-OK"), "{out}");
    ends_with_refusal(
        &out,
        &target,
        &format!("no one approved in time: connect to {target}"),
    );
    let recs = w.sup.session_records(&s.id);
    assert_eq!(decided(&recs, &a)["outcome"], "timeout");
    let refused = net_record(&recs, "refused", &late);
    assert_eq!(refused["via"], "transparent", "{refused}");
}
