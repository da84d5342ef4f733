//! webfetch end to end: a "public" web server on a
//! documentation-free public-looking address, reachable only through a veth
//! pair into a network namespace this test creates. The supervisor vets the
//! address, connects to it only, returns status, content type and text, and
//! re-vets every redirect hop (a redirect to loopback or metadata is refused).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_proto::v1 as pb;

/// The public address the test host answers on (a real global address; the
/// route to it exists only inside this test's veth pair).
const PUBLIC_IP: &str = "93.184.216.34";

/// One test web host at a time: they share PUBLIC_IP's route.
static NET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct NetHost {
    ns: String,
    host_if: String,
    server: std::process::Child,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl NetHost {
    fn start(tag: &str, docroot: &std::path::Path) -> NetHost {
        let ns = format!("tg-{tag}-{}", std::process::id());
        let host_if = format!("tgh{}", std::process::id() % 100000);
        let peer_if = format!("tgp{}", std::process::id() % 100000);
        // A namespace left by an earlier run with this pid, if any (usually
        // none, so its "cannot remove" is not news).
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &ns]);
        ip(&["addr", "add", "10.213.0.1/30", "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", &ns, "addr", "add", "10.213.0.2/30", "dev", &peer_if]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{PUBLIC_IP}/32"),
            "dev",
            &peer_if,
        ]);
        ip(&["-n", &ns, "link", "set", &peer_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["-n", &ns, "route", "add", "default", "via", "10.213.0.1"]);
        ip(&[
            "route",
            "add",
            &format!("{PUBLIC_IP}/32"),
            "via",
            "10.213.0.2",
        ]);
        let server = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", SERVER])
            .current_dir(docroot)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("web server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(
            &format!("{PUBLIC_IP}:80").parse().unwrap(),
            Duration::from_millis(200),
        )
        .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the test web server did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        NetHost {
            ns,
            host_if,
            server,
        }
    }
}

impl Drop for NetHost {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["route", "del", &format!("{PUBLIC_IP}/32")])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// A tiny server: files from the cwd, plus /redirect?to=URL.
const SERVER: &str = r#"
import http.server, urllib.parse
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path == '/redirect':
            to = urllib.parse.parse_qs(u.query)['to'][0]
            self.send_response(302); self.send_header('Location', to); self.end_headers(); return
        return super().do_GET()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('0.0.0.0', 80), H).serve_forever()
"#;

async fn fetch(sup: &Supervisor, token: &str, url: &str) -> pb::CallToolResponse {
    sup.call_tool(token, "webfetch", serde_json::json!({ "url": url }))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_a_public_page_and_refuses_redirects_inward() {
    if !root_or_skip("fetches_a_public_page_and_refuses_redirects_inward") {
        return;
    }
    let docroot = tempfile::tempdir().unwrap();
    std::fs::write(
        docroot.path().join("page.html"),
        "<html><head><title>T</title><script>evil()</script></head><body><h1>Hello</h1><p>from the <b>public</b> web</p></body></html>",
    )
    .unwrap();
    std::fs::write(docroot.path().join("big.txt"), "x".repeat(300_000)).unwrap();
    let _net = NET.lock().await;
    let _host = NetHost::start("web", docroot.path());
    let sup = Supervisor::builder()
        .config("[session]\nfetch_max_bytes = 100000\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = sup.open_skip_session(&ws).await;

    let r = fetch(&sup, &s.token, &format!("http://{PUBLIC_IP}/page.html")).await;
    assert!(r.ok, "{r:?}");
    eprintln!("webfetch result:\n{}", r.output);
    assert!(
        r.output.contains("200"),
        "status in the result: {}",
        r.output
    );
    assert!(
        r.output.contains("text/html"),
        "content type in the result: {}",
        r.output
    );
    assert!(
        r.output.contains("Hello") && r.output.contains("public"),
        "{}",
        r.output
    );
    assert!(
        !r.output.contains("<h1>") && !r.output.contains("evil()"),
        "HTML turned into text: {}",
        r.output
    );

    // A redirect hop to loopback, to metadata, and to a name that does not resolve: refused.
    for to in [
        "http://127.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://no-such-host.invalid/",
    ] {
        let url = format!(
            "http://{PUBLIC_IP}/redirect?to={}",
            to.replace(':', "%3A").replace('/', "%2F")
        );
        let r = fetch(&sup, &s.token, &url).await;
        assert!(!r.ok, "redirect to {to} followed: {r:?}");
        let said = format!("{} {:?}", r.error, r.denied);
        assert!(
            said.contains("redirect") || said.contains("hop"),
            "redirect to {to}: {said}"
        );
    }
    // A redirect to another public page is followed.
    let r = fetch(
        &sup,
        &s.token,
        &format!("http://{PUBLIC_IP}/redirect?to=%2Fpage.html"),
    )
    .await;
    assert!(r.ok && r.output.contains("Hello"), "{r:?}");

    // Max bytes.
    let r = fetch(&sup, &s.token, &format!("http://{PUBLIC_IP}/big.txt")).await;
    assert!(r.ok, "{r:?}");
    assert!(r.output.len() < 150_000, "{} bytes", r.output.len());

    // The decision recorded the vetted address.
    let events = sup.session_records(&s.session_id);
    let checks: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "permission_check")
        .collect();
    assert!(
        checks[0]["consequence"]
            .as_str()
            .unwrap()
            .contains(PUBLIC_IP),
        "{}",
        checks[0]
    );
}

/// The redaction finding on the webfetch path: a Latin-1 page (bytes that
/// are not UTF-8) holding an AWS and a Stripe key reaches the model with
/// both masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webfetch_masks_secrets_in_a_latin1_body() {
    if !root_or_skip("webfetch_masks_secrets_in_a_latin1_body") {
        return;
    }
    let docroot = tempfile::tempdir().unwrap();
    let (file, _) = super::sandbox_exec::latin1_settings();
    std::fs::write(docroot.path().join("settings.txt"), &file).unwrap();
    let _net = NET.lock().await;
    let _host = NetHost::start("webl1", docroot.path());
    let sup = Supervisor::builder()
        .config("[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = sup.open_skip_session(&ws).await;
    let r = fetch(&sup, &s.token, &format!("http://{PUBLIC_IP}/settings.txt")).await;
    assert!(r.ok, "{r:?}");
    let stripe = format!("sk_{}_", "live");
    assert!(
        r.output.contains("[REDACTED:aws-access-key]")
            && r.output.contains("[REDACTED:stripe-key]")
            && r.output.contains(" fin"),
        "{}",
        r.output
    );
    assert!(
        !r.output.contains("AKIAIOSFODNN7EXAMPLE") && !r.output.contains(&stripe),
        "{}",
        r.output
    );
}
