//! webfetch against a real HTTP server on 127.0.0.1 started by the test.
//!
//! The policy would block loopback; here VettedFetch values are built by
//! hand to test the fetcher's mechanics: pinning, redirects re-vetted by a
//! test HopVetter, limits, and the output format.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_policy::VettedFetch;
use tollgate_tools::{FetchLimits, HopVetter, ToolError, webfetch};

/// A tiny HTTP/1.1 server with fixed routes. Counts connections.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

async fn start_server(ip: &str, name: &'static str) -> Server {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, name));
        }
    });
    Server { addr, connections }
}

async fn serve(mut stream: TcpStream, name: &'static str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.first() == Some(&0x16) {
            // A TLS ClientHello: answer like a plain HTTP server would.
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            return;
        }
        if head.len() > 16 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let target = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_string();
    let host = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("host: ")
                .or_else(|| l.strip_prefix("Host: "))
        })
        .unwrap_or("")
        .to_string();
    let url = url::Url::parse(&format!("http://x{target}")).unwrap();
    let path = url.path().to_string();

    let (status, ctype, body): (&str, &str, Vec<u8>) = match path.as_str() {
        "/text" => (
            "200 OK",
            "text/plain; charset=utf-8",
            b"hello from the test server\n".to_vec(),
        ),
        "/who" => (
            "200 OK",
            "text/plain",
            format!("server {name}, host {host}\n").into_bytes(),
        ),
        "/html" => (
            "200 OK",
            "text/html; charset=utf-8",
            b"<!doctype html><html><head><title>T</title><style>p { color: red }</style>\
              <script>var secret_script = 1;</script></head><body><h1>Heading</h1>\
              <p>Para with <b>bold</b> and a <a href=\"/next\">link</a>.</p>\
              <ul><li>one</li><li>two</li></ul></body></html>"
                .to_vec(),
        ),
        "/deep" => {
            let depth = 20_000;
            let mut b = "<div>".repeat(depth);
            b.push_str("bottom");
            b.push_str(&"</div>".repeat(depth));
            ("200 OK", "text/html", b.into_bytes())
        }
        "/json" => ("200 OK", "application/json", b"{\"ok\":true}".to_vec()),
        "/png" => (
            "200 OK",
            "image/png",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec(),
        ),
        "/big" => ("200 OK", "text/plain", vec![b'a'; 1 << 20]),
        "/missing" => ("404 Not Found", "text/plain", b"no such page\n".to_vec()),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(120)).await;
            ("200 OK", "text/plain", b"too late\n".to_vec())
        }
        "/slowbody" => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\nconnection: close\r\n\r\npartial";
            let _ = stream.write_all(head.as_bytes()).await;
            tokio::time::sleep(Duration::from_secs(120)).await;
            return;
        }
        "/to" => {
            let location = url
                .query_pairs()
                .find(|(k, _)| k == "url")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            let resp = format!(
                "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            return;
        }
        p if p.starts_with("/redirect/") => {
            let n: u32 = p["/redirect/".len()..].parse().unwrap_or(0);
            if n == 0 {
                ("200 OK", "text/plain", b"arrived\n".to_vec())
            } else {
                // Relative Location: resolved against the current URL.
                let resp = format!(
                    "HTTP/1.1 301 Moved Permanently\r\nlocation: /redirect/{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    n - 1
                );
                let _ = stream.write_all(resp.as_bytes()).await;
                return;
            }
        }
        _ => ("404 Not Found", "text/plain", b"unknown route\n".to_vec()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(resp.as_bytes()).await;
    let _ = stream.write_all(&body).await;
}

/// Vets hosts from a fixed table (name -> address); refuses everything else.
/// Records every URL it was asked about.
/// At the connector, refuses the addresses in `own` (as the daemon refuses
/// its host's own addresses) and records every address it was asked about.
struct TestVetter {
    table: Vec<(String, SocketAddr)>,
    asked: Mutex<Vec<String>>,
    own: Vec<IpAddr>,
    peers: Mutex<Vec<IpAddr>>,
}

impl TestVetter {
    fn new(table: &[(&str, SocketAddr)]) -> TestVetter {
        TestVetter {
            table: table.iter().map(|(h, a)| (h.to_string(), *a)).collect(),
            asked: Mutex::new(Vec::new()),
            own: Vec::new(),
            peers: Mutex::new(Vec::new()),
        }
    }

    fn refusing_at_the_connector(mut self, own: &[&str]) -> TestVetter {
        self.own = own.iter().map(|a| a.parse().unwrap()).collect();
        self
    }

    fn peers(&self) -> Vec<IpAddr> {
        self.peers.lock().unwrap().clone()
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl HopVetter for TestVetter {
    fn vet(&self, url: &str) -> Result<VettedFetch, String> {
        self.asked.lock().unwrap().push(url.to_string());
        let parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
        let host = parsed.host_str().unwrap_or_default().to_string();
        match self.table.iter().find(|(h, _)| *h == host) {
            Some((_, addr)) => Ok(VettedFetch {
                url: url.to_string(),
                host,
                addrs: vec![*addr],
            }),
            None => Err(format!("{host} is not allowed by the test vetter")),
        }
    }

    fn vet_peer(&self, ip: IpAddr) -> Result<(), String> {
        self.peers.lock().unwrap().push(ip);
        if self.own.contains(&ip) {
            Err(format!("{ip} is an address of the test's own host"))
        } else {
            Ok(())
        }
    }
}

fn vetted(url: &str, host: &str, addr: SocketAddr) -> VettedFetch {
    VettedFetch {
        url: url.to_string(),
        host: host.to_string(),
        addrs: vec![addr],
    }
}

fn limits() -> FetchLimits {
    FetchLimits {
        max_bytes: 64 * 1024,
        timeout: Duration::from_secs(20),
        max_redirects: 5,
    }
}

#[tokio::test]
async fn text_has_a_header_with_url_status_type_and_bytes() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/text", s.addr.port());
    let vetter = TestVetter::new(&[]);
    let out = webfetch(&vetted(&url, "127.0.0.1", s.addr), &limits(), &vetter)
        .await
        .unwrap();
    assert_eq!(
        out.text,
        format!(
            "URL: {url}\nStatus: 200 OK\nContent-Type: text/plain; charset=utf-8\nBytes: 27\n\nhello from the test server\n"
        )
    );
    assert!(!out.truncated);
    assert!(vetter.asked().is_empty());
}

#[tokio::test]
async fn an_error_status_is_a_result_not_a_failure() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/missing", s.addr.port());
    let out = webfetch(
        &vetted(&url, "127.0.0.1", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(
        out.text.contains("\nStatus: 404 Not Found\n"),
        "{}",
        out.text
    );
    assert!(out.text.ends_with("\n\nno such page\n"), "{}", out.text);
}

#[tokio::test]
async fn html_is_turned_into_text() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/html", s.addr.port());
    let out = webfetch(
        &vetted(&url, "127.0.0.1", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    let (head, body) = out.text.split_once("\n\n").unwrap();
    assert!(
        head.contains("Content-Type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(body.contains("Heading"), "{body}");
    assert!(body.contains("bold"), "{body}");
    assert!(body.contains("one") && body.contains("two"), "{body}");
    assert!(!body.contains("<p>") && !body.contains("<b>"), "{body}");
    assert!(!body.contains("secret_script"), "{body}");
}

#[tokio::test]
async fn deeply_nested_html_does_not_crash_the_supervisor() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/deep", s.addr.port());
    let mut l = limits();
    l.max_bytes = 1 << 20;
    let out = webfetch(
        &vetted(&url, "127.0.0.1", s.addr),
        &l,
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    // Too deep to render in reasonable time: stripped instead, and said so.
    let start = &out.text[..out.text.len().min(500)];
    assert!(
        out.text
            .contains("\nNote: the HTML is nested too deeply to render; tags were stripped\n\n"),
        "{start}"
    );
    assert!(out.text.ends_with("\n\nbottom\n"), "{start}");
}

#[tokio::test]
async fn json_is_text_and_binary_is_summarised() {
    let s = start_server("127.0.0.1", "one").await;
    let base = format!("http://127.0.0.1:{}", s.addr.port());
    let out = webfetch(
        &vetted(&format!("{base}/json"), "127.0.0.1", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(out.text.ends_with("\n\n{\"ok\":true}"), "{}", out.text);
    let out = webfetch(
        &vetted(&format!("{base}/png"), "127.0.0.1", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(
        out.text
            .ends_with("\n\nbinary content (16 bytes of image/png, not shown)\n"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn the_body_stops_at_max_bytes_and_says_so() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/big", s.addr.port());
    let mut l = limits();
    l.max_bytes = 1000;
    let out = webfetch(
        &vetted(&url, "127.0.0.1", s.addr),
        &l,
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(out.truncated);
    assert!(
        out.text
            .contains("\nBytes: 1000 (stopped at max_bytes; the rest was not fetched)\n"),
        "{}",
        out.text
    );
    let body = out.text.split_once("\n\n").unwrap().1;
    assert_eq!(body, "a".repeat(1000));
}

#[tokio::test]
async fn a_stalled_server_hits_the_timeout() {
    let s = start_server("127.0.0.1", "one").await;
    let mut l = limits();
    l.timeout = Duration::from_millis(300);
    for route in ["slow", "slowbody"] {
        let url = format!("http://127.0.0.1:{}/{route}", s.addr.port());
        let err = webfetch(
            &vetted(&url, "127.0.0.1", s.addr),
            &l,
            &TestVetter::new(&[]),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ToolError::FetchTimeout { .. }),
            "{route}: {err}"
        );
        assert_eq!(
            err.to_string(),
            format!("fetching {url} timed out after 300ms")
        );
    }
}

#[tokio::test]
async fn a_pinned_name_connects_to_the_vetted_address_without_dns() {
    // pinned.test does not resolve anywhere: a connection proves the pin.
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://pinned.test:{}/who", s.addr.port());
    let out = webfetch(
        &vetted(&url, "pinned.test", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(
        out.text
            .ends_with(&format!("server one, host pinned.test:{}\n", s.addr.port())),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn the_pin_wins_over_what_the_name_resolves_to() {
    // localhost resolves to 127.0.0.1 (server one); the policy vetted
    // 127.0.0.2 (server two) on the same port: the fetch must reach two.
    let one = start_server("127.0.0.1", "one").await;
    let two = start_server_on("127.0.0.2", one.addr.port(), "two").await;
    let url = format!("http://localhost:{}/who", one.addr.port());
    let out = webfetch(
        &vetted(&url, "localhost", two.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap();
    assert!(out.text.contains("server two"), "{}", out.text);
    assert_eq!(one.connections.load(Ordering::SeqCst), 0);
}

async fn start_server_on(ip: &str, port: u16, name: &'static str) -> Server {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, name));
        }
    });
    Server { addr, connections }
}

#[tokio::test]
async fn a_literal_ip_that_was_not_vetted_is_never_contacted() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/text", s.addr.port());
    let other: SocketAddr = format!("127.0.0.3:{}", s.addr.port()).parse().unwrap();
    let err = webfetch(
        &vetted(&url, "127.0.0.1", other),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::InvalidUrl { .. }), "{err}");
    assert!(
        err.to_string().contains("not one the policy vetted"),
        "{err}"
    );
    // A vetted record for another host than the URL's is refused too.
    let err = webfetch(
        &vetted(&url, "example.test", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::InvalidUrl { .. }), "{err}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_vetted_address_with_nothing_listening_fails_cleanly() {
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://pinned.test:{}/who", s.addr.port());
    let nowhere: SocketAddr = format!("127.0.0.4:{}", s.addr.port()).parse().unwrap();
    let err = webfetch(
        &vetted(&url, "pinned.test", nowhere),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::Fetch { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot connect to 127.0.0.4"),
        "{err}"
    );
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn redirects_are_revetted_and_followed_up_to_five() {
    let s = start_server("127.0.0.1", "one").await;
    let port = s.addr.port();
    let vetter = TestVetter::new(&[("127.0.0.1", s.addr)]);
    let url = format!("http://127.0.0.1:{port}/redirect/5");
    let out = webfetch(&vetted(&url, "127.0.0.1", s.addr), &limits(), &vetter)
        .await
        .unwrap();
    assert!(out.text.ends_with("\n\narrived\n"), "{}", out.text);
    assert!(
        out.text
            .contains(&format!("URL: http://127.0.0.1:{port}/redirect/0\n")),
        "{}",
        out.text
    );
    assert!(out.text.contains("\nRedirects: 5 (301 "), "{}", out.text);
    let asked: Vec<String> = (0..5)
        .rev()
        .map(|n| format!("http://127.0.0.1:{port}/redirect/{n}"))
        .collect();
    assert_eq!(vetter.asked(), asked);
}

#[tokio::test]
async fn a_sixth_redirect_fails() {
    let s = start_server("127.0.0.1", "one").await;
    let port = s.addr.port();
    let vetter = TestVetter::new(&[("127.0.0.1", s.addr)]);
    let url = format!("http://127.0.0.1:{port}/redirect/6");
    let err = webfetch(&vetted(&url, "127.0.0.1", s.addr), &limits(), &vetter)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::TooManyRedirects { max: 5, .. }),
        "{err}"
    );
    assert_eq!(
        vetter.asked().len(),
        5,
        "the 6th hop must not even be vetted"
    );
    assert_eq!(s.connections.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn a_redirect_to_a_refused_url_fails() {
    let s = start_server("127.0.0.1", "one").await;
    let port = s.addr.port();
    let vetter = TestVetter::new(&[("127.0.0.1", s.addr)]);
    let url = format!(
        "http://127.0.0.1:{port}/to?url=http%3A%2F%2F169.254.169.254%2Flatest%2Fmeta-data%2F"
    );
    let err = webfetch(&vetted(&url, "127.0.0.1", s.addr), &limits(), &vetter)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "redirect to http://169.254.169.254/latest/meta-data/ refused: 169.254.169.254 is not allowed by the test vetter"
    );
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_another_pinned_name_uses_that_names_pin() {
    let s = start_server("127.0.0.1", "one").await;
    let port = s.addr.port();
    let vetter = TestVetter::new(&[("second.test", s.addr)]);
    let url = format!("http://first.test:{port}/to?url=http%3A%2F%2Fsecond.test%3A{port}%2Fwho");
    let out = webfetch(&vetted(&url, "first.test", s.addr), &limits(), &vetter)
        .await
        .unwrap();
    assert!(
        out.text
            .ends_with(&format!("server one, host second.test:{port}\n")),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("\nRedirects: 1 (302 http://first.test"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn a_vetter_answer_for_another_host_is_refused() {
    // A vetter bug (vetting one host, returning another's record) must not
    // lead to a connection: the hop's URL and vetted host must agree.
    struct Confused(SocketAddr);
    impl HopVetter for Confused {
        fn vet(&self, url: &str) -> Result<VettedFetch, String> {
            Ok(VettedFetch {
                url: url.to_string(),
                host: "innocent.test".into(),
                addrs: vec![self.0],
            })
        }
        fn vet_peer(&self, _: IpAddr) -> Result<(), String> {
            Ok(())
        }
    }
    let s = start_server("127.0.0.1", "one").await;
    let port = s.addr.port();
    let url = format!("http://127.0.0.1:{port}/to?url=http%3A%2F%2Fevil.test%3A{port}%2Fwho");
    let err = webfetch(
        &vetted(&url, "127.0.0.1", s.addr),
        &limits(),
        &Confused(s.addr),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::InvalidUrl { .. }), "{err}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn non_http_schemes_are_refused_before_connecting() {
    let s = start_server("127.0.0.1", "one").await;
    for url in [
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
        "ftp://127.0.0.1/",
    ] {
        let err = webfetch(
            &vetted(url, "127.0.0.1", s.addr),
            &limits(),
            &TestVetter::new(&[]),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::InvalidUrl { .. }), "{url}: {err}");
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn https_is_spoken_to_the_pinned_address() {
    // The plain-HTTP test server cannot complete a TLS handshake: the fetch
    // must reach it (pinned) and fail in TLS, not for lack of https support.
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("https://pinned.test:{}/text", s.addr.port());
    let err = webfetch(
        &vetted(&url, "pinned.test", s.addr),
        &limits(),
        &TestVetter::new(&[]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::Fetch { .. }), "{err}");
    assert!(!err.to_string().contains("scheme"), "{err}");
    // rustls read an HTTP answer where a TLS record belongs.
    assert!(err.to_string().contains("corrupt message"), "{err}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 1, "{err}");
}

#[tokio::test]
async fn an_address_refused_at_the_connector_is_never_connected_to() {
    // The address was fine when the policy judged it, and is the
    // host's own by the time the fetch connects.
    let s = start_server("127.0.0.1", "one").await;
    let url = format!("http://127.0.0.1:{}/text", s.addr.port());
    let vetter = TestVetter::new(&[]).refusing_at_the_connector(&["127.0.0.1"]);
    let err = webfetch(&vetted(&url, "127.0.0.1", s.addr), &limits(), &vetter)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "not connecting to {} for {url}: 127.0.0.1 is an address of the test's own host",
            s.addr
        )
    );
    assert_eq!(err.kind(), "peer_refused");
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
    assert_eq!(vetter.peers(), ["127.0.0.1".parse::<IpAddr>().unwrap()]);
}

#[tokio::test]
async fn every_redirect_hop_goes_through_the_connector_check() {
    // Hop 1 on 127.0.0.1 is fine; hop 2 is vetted (by name) to 127.0.0.2,
    // which the connector check refuses: server two is never connected to.
    let one = start_server("127.0.0.1", "one").await;
    let two = start_server_on("127.0.0.2", one.addr.port(), "two").await;
    let port = one.addr.port();
    let vetter =
        TestVetter::new(&[("second.test", two.addr)]).refusing_at_the_connector(&["127.0.0.2"]);
    let url = format!("http://127.0.0.1:{port}/to?url=http%3A%2F%2Fsecond.test%3A{port}%2Fwho");
    let err = webfetch(&vetted(&url, "127.0.0.1", one.addr), &limits(), &vetter)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::PeerRefused { addr, .. } if *addr == two.addr.to_string()),
        "{err}"
    );
    assert_eq!(one.connections.load(Ordering::SeqCst), 1);
    assert_eq!(two.connections.load(Ordering::SeqCst), 0);
    assert_eq!(
        vetter.peers(),
        [
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "127.0.0.2".parse().unwrap()
        ]
    );
}
