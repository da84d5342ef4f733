//! A test host on a public-looking address for the network rows
//! (docs/PERFORMANCE.md, "The network rows"): a network namespace the
//! bench creates, reached through a veth pair, with servers it starts
//! inside. The same scheme as the end-to-end tests' host (tests/src/
//! net_host.rs), with errors instead of panics, so a host that cannot be
//! made is a FAILED row with `ip`'s own words; everything is undone on
//! drop, a failed start included. No traffic leaves the machine.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A running test host; undone on drop.
pub struct TestHost {
    /// The public-looking address the host answers on.
    pub public: String,
    ns: String,
    host_if: String,
    route: Option<String>,
    server: Option<Child>,
}

/// Runs `ip ARGS`; a failure carries ip's stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run ip (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(())
}

/// This run's numbers: the public-looking address, and the veth /30.
fn plan() -> (u32, String, String, String) {
    let k = std::process::id() % 60_000;
    let (x, z) = (20 + k % 200, 10 + k / 200 % 200);
    let (c, d) = (k / 64 % 250, k % 64 * 4);
    (
        k,
        format!("93.184.{x}.{z}"),
        format!("10.219.{c}.{}", d + 1),
        format!("10.219.{c}.{}", d + 2),
    )
}

/// The address [`TestHost::start`] will give the host (certificates name it).
pub fn public_address() -> String {
    plan().1
}

impl TestHost {
    /// Creates the namespace and its veth pair, gives it a public-looking
    /// address, routes it there, runs `python3 -c SCRIPT ARGS` inside with
    /// `cwd` as working directory, and waits until `ready_port` accepts.
    pub fn start(script: &str, args: &[&str], cwd: &Path, ready_port: u16) -> anyhow::Result<Self> {
        let (k, public, host_side, peer_side) = plan();
        let mut host = TestHost {
            public,
            ns: format!("tg-bench-{k}"),
            host_if: format!("tgbh{k}"),
            route: None,
            server: None,
        };
        let (ns, host_if, peer_if) = (host.ns.clone(), host.host_if.clone(), format!("tgbp{k}"));
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &ns])?;
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ])?;
        ip(&["link", "set", &peer_if, "netns", &ns])?;
        ip(&["addr", "add", &format!("{host_side}/30"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{peer_side}/30"),
            "dev",
            &peer_if,
        ])?;
        let public = format!("{}/32", host.public);
        ip(&["-n", &ns, "addr", "add", &public, "dev", &peer_if])?;
        ip(&["-n", &ns, "link", "set", &peer_if, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "route", "add", "default", "via", &host_side])?;
        ip(&["route", "add", &public, "via", &peer_side])?;
        host.route = Some(public);
        host.server = Some(
            Command::new("ip")
                .args(["netns", "exec", &ns, "python3", "-c", script])
                .args(args)
                .current_dir(cwd)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot start the test host's servers (python3)")?,
        );
        host.wait_ready(ready_port)?;
        Ok(host)
    }

    /// Generous: Python starts slowly on a loaded 2-core machine.
    fn wait_ready(&mut self, port: u16) -> anyhow::Result<()> {
        let addr = format!("{}:{port}", self.public).parse()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
            if let Some(s) = self.server.as_mut()
                && let Ok(Some(status)) = s.try_wait()
            {
                bail!("the test host's servers exited ({status})");
            }
            if Instant::now() > deadline {
                bail!("the test host did not accept on {addr} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(server) = &mut self.server {
            let _ = server.kill();
            let _ = server.wait();
        }
        if let Some(r) = &self.route {
            let _ = Command::new("ip").args(["route", "del", r]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
    }
}
