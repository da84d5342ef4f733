//! IPv6 through the wall (docs/THREAT_MODEL.md "Network"): an allowed name
//! whose only addresses are IPv6 (public-looking, outside every range the
//! SSRF guard refuses; 2001:db8::/32 is one it refuses) is reached by name
//! through the proxy and through the transparent path, recorded with the
//! IPv6 address it went to; an IPv6 literal the lists do not hold is
//! refused with its line, through the proxy and directly (the transparent
//! path captures IPv6 too).

use serde_json::Value;
use tollgate_e2e::harness::root_or_skip;

use super::{Extra, Sess, World, workspace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_ipv6_name_is_reached_and_an_ipv6_literal_refused() {
    if !root_or_skip("an_allowed_ipv6_name_is_reached_and_an_ipv6_literal_refused") {
        return;
    }
    let e = Extra {
        v6: 1,
        ..Extra::default()
    };
    let w = World::start_with(65, "native", &e);
    let v6 = w.host.addrs.public6[0].clone();
    let ws = workspace(&w.sup, "ws", 0);
    let s = Sess::open(&w.sup, &ws, 0);
    let web6 = &w.web6;
    let page = format!("WALL-PAGE-OK host={web6}");
    for cmd in [
        format!(
            "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://{web6}/by-name\", timeout=20).read().decode())'"
        ),
        format!("curl -fsS --max-time 20 --noproxy '*' http://{web6}/direct"),
    ] {
        let (out, code) = s.bash(&cmd);
        assert!(code == 0 && out.contains(&page), "{cmd}: {out}");
    }
    let recs = s.net_records();
    let to_v6: Vec<&Value> = recs
        .iter()
        .filter(|r| r["phase"] == "open" && r["host"] == web6.as_str())
        .collect();
    assert_eq!(to_v6.len(), 2, "{recs:#?}");
    for r in &to_v6 {
        assert_eq!(r["address"], format!("[{v6}]:80").as_str(), "{r}");
    }
    assert!(to_v6.iter().any(|r| r["via"] == "transparent"), "{recs:#?}");

    // A literal: unlisted, so refused with its line, through the proxy.
    let cmd = format!(
        "python3 -c 'import urllib.request\ntry: urllib.request.urlopen(\"http://[{v6}]/literal\", timeout=20)\nexcept Exception as e: print(\"REFUSED\", e)'"
    );
    let (out, _) = s.bash(&cmd);
    assert!(out.contains("REFUSED HTTP Error 403"), "{out}");
    let line = format!(
        "network: refused [{v6}]:80 (not in [network] allow; an operator can run: supervisorctl net allow {} [{v6}])",
        s.id
    );
    assert!(out.trim_end().ends_with(&line), "{out}");
    // Directly, past the proxy: captured, reset, the same line.
    let raw = format!(
        "python3 -c 'import socket\ntry:\n  c = socket.create_connection((\"{v6}\", 80), timeout=20); c.sendall(b\"GET / HTTP/1.0\\r\\n\\r\\n\"); print(\"GOT\", c.recv(100))\nexcept Exception as e: print(\"NOT CONNECTED\", e)'"
    );
    let (out, _) = s.bash(&raw);
    assert!(
        !out.contains("WALL-PAGE-OK") && !out.contains("GOT b'HTTP"),
        "{out}"
    );
    assert!(out.contains("NOT CONNECTED"), "{out}");
    assert!(
        out.contains(&format!(
            "network: refused [{v6}]:80 (not in [network] allow"
        )),
        "{out}"
    );
    let recs = s.net_records();
    assert!(
        recs.iter()
            .any(|r| r["phase"] == "refused" && r["host"] == format!("[{v6}]").as_str()),
        "{recs:#?}"
    );
    assert!(
        !recs.iter().any(|r| r["phase"] == "open"
            && r["address"].as_str().is_some_and(|a| a.contains(&v6))
            && r["host"] != web6.as_str()),
        "{recs:#?}"
    );
}
