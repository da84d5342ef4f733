//! The real world behind the policy engine's fact traits: the filesystem
//! (lstat and readlink, never following a final symlink), DNS (the system
//! resolver, or `--resolve HOST=IP` pins) and the host's own addresses (read
//! and kept fresh by [`crate::host_addrs`]).
//!
//! The engine resolves paths itself, one component at a time, through
//! [`RealFs`]; it never calls `canonicalize`, which fails on dangling links
//! and not-yet-created files. Any resolver error is an `Err`, so a name that
//! does not resolve is never fetched (fail closed).

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_policy::{
    FileFacts, FileKind, FsFacts, HostAddrs, HostAddrsError, ResolveError, Resolver,
};

use crate::host_addrs::Snapshot;

/// The host filesystem, as the supervisor sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl FsFacts for RealFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        let m = std::fs::symlink_metadata(path).ok()?;
        let ft = m.file_type();
        let kind = if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Dir
        } else if ft.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        };
        Some(FileFacts {
            kind,
            size: m.len(),
            nlink: m.nlink(),
        })
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }
}

/// The system resolver, with optional pins (`supervisorctl policy test
/// --resolve HOST=IP`), and the host's own addresses (issue 19). Pinned
/// names never reach the system resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemResolver {
    /// Lower-case host names without a trailing dot.
    pub pins: HashMap<String, Vec<IpAddr>>,
    /// The host's own addresses: the supervisor's [`HostAddrWatch`]
    /// snapshot, or a one-off read.
    ///
    /// [`HostAddrWatch`]: crate::host_addrs::HostAddrWatch
    pub host: Snapshot,
}

/// Without pins, and without the host's addresses: a fetch judged with it
/// is refused (fail closed) until [`SystemResolver::with_host`] gives them.
impl Default for SystemResolver {
    fn default() -> SystemResolver {
        SystemResolver {
            pins: HashMap::new(),
            host: Arc::new(Err(HostAddrsError(
                "this resolver was built without them".to_string(),
            ))),
        }
    }
}

impl SystemResolver {
    /// This resolver, judging against these host addresses.
    pub fn with_host(mut self, host: Snapshot) -> SystemResolver {
        self.host = host;
        self
    }

    /// A resolver with these pins (names are normalised).
    pub fn with_pins(pins: impl IntoIterator<Item = (String, IpAddr)>) -> SystemResolver {
        let mut r = SystemResolver::default();
        for (host, ip) in pins {
            r.pin(&host, ip);
        }
        r
    }

    /// Adds an address for `host` (several pins for one name accumulate).
    pub fn pin(&mut self, host: &str, ip: IpAddr) {
        let ips = self.pins.entry(normalise(host)).or_default();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }

    /// Parses a `HOST=IP` pin as given on the command line.
    pub fn parse_pin(spec: &str) -> Result<(String, IpAddr), String> {
        let (host, ip) = spec
            .split_once('=')
            .ok_or_else(|| format!("pin {spec:?} is not HOST=IP"))?;
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("pin {spec:?} has an empty host"));
        }
        let ip = ip
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .map_err(|e| format!("pin {spec:?}: {e}"))?;
        Ok((host.to_string(), ip))
    }
}

fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl Resolver for SystemResolver {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        self.host.as_ref().as_ref().map_err(Clone::clone)
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(ips) = self.pins.get(&normalise(host)) {
            return Ok(ips.clone());
        }
        if host.is_empty() || host.contains('\0') {
            return Err(ResolveError::NotFound(host.escape_debug().to_string()));
        }
        let addrs = (host, 0u16)
            .to_socket_addrs()
            .map_err(|e| ResolveError::Failed(host.escape_debug().to_string(), e.to_string()))?;
        let mut ips: Vec<IpAddr> = Vec::new();
        for a in addrs {
            if !ips.contains(&a.ip()) {
                ips.push(a.ip());
            }
        }
        if ips.is_empty() {
            return Err(ResolveError::NotFound(host.escape_debug().to_string()));
        }
        Ok(ips)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tollgate_policy::{Context, Engine, Mode, PolicyConfig, ToolCall, Verdict};

    use super::*;

    #[test]
    fn real_fs_reports_kinds_sizes_links_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("f"), b"hello").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("l")).unwrap();
        std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
        std::fs::hard_link(d.join("f"), d.join("f2")).unwrap();
        let ok = std::process::Command::new("mkfifo")
            .arg(d.join("p"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo failed");

        let f = RealFs.symlink_metadata(&d.join("f")).unwrap();
        assert_eq!((f.kind, f.size, f.nlink), (FileKind::File, 5, 2));
        assert_eq!(
            RealFs.symlink_metadata(&d.join("sub")).unwrap().kind,
            FileKind::Dir
        );
        assert_eq!(
            RealFs.symlink_metadata(&d.join("l")).unwrap().kind,
            FileKind::Symlink
        );
        assert_eq!(
            RealFs.symlink_metadata(&d.join("dangling")).unwrap().kind,
            FileKind::Symlink
        );
        assert_eq!(
            RealFs.symlink_metadata(&d.join("p")).unwrap().kind,
            FileKind::Other
        );
        assert_eq!(RealFs.symlink_metadata(&d.join("missing")), None);
        assert_eq!(
            RealFs.read_link(&d.join("l")),
            Some(PathBuf::from("/etc/passwd"))
        );
        assert_eq!(RealFs.read_link(&d.join("f")), None);
    }

    #[test]
    fn the_engine_judges_real_symlinks_through_real_fs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::write(ws.join("README.md"), "x".repeat(214)).unwrap();
        std::os::unix::fs::symlink("/tmp/created-by-agent", ws.join("new.txt")).unwrap();
        let engine = Engine::new(&PolicyConfig::default()).unwrap();
        let ctx = Context {
            workspace: ws.clone(),
            mode: Mode::AcceptEdits,
            tools: None,
            home: None,
            protected: vec![],
            read_files: BTreeSet::new(),
            repo: Vec::new(),
        };
        let call = |tool: &str, args: serde_json::Value| ToolCall {
            tool: tool.into(),
            args,
        };
        let dns = SystemResolver::default();
        let d = engine.decide(
            &call(
                "write_file",
                serde_json::json!({"path": "new.txt", "content": "x"}),
            ),
            &ctx,
            &RealFs,
            &dns,
        );
        assert_eq!(
            (d.verdict, d.rule.as_deref()),
            (Verdict::Deny, Some("floor:path-scope"))
        );
        let d = engine.decide(
            &call("read_file", serde_json::json!({"path": "README.md"})),
            &ctx,
            &RealFs,
            &dns,
        );
        assert_eq!(d.verdict, Verdict::Allow);
        assert_eq!(d.path, Some(ws.join("README.md")));
        let d = engine.decide(
            &call(
                "write_file",
                serde_json::json!({"path": "README.md", "content": ""}),
            ),
            &ctx,
            &RealFs,
            &dns,
        );
        assert_eq!(
            d.consequence,
            "write empty content over README.md (214 bytes; same as deleting it)"
        );
        assert!(d.destructive);
    }

    #[test]
    fn pins_come_first_and_are_normalised() {
        let r = SystemResolver::with_pins([
            ("Example.COM.".to_string(), "93.184.216.34".parse().unwrap()),
            (
                "example.com".to_string(),
                "2606:2800:220:1::1".parse().unwrap(),
            ),
        ]);
        assert_eq!(
            r.resolve("example.com").unwrap(),
            vec![
                "93.184.216.34".parse::<IpAddr>().unwrap(),
                "2606:2800:220:1::1".parse::<IpAddr>().unwrap()
            ]
        );
        assert_eq!(r.resolve("EXAMPLE.com.").unwrap().len(), 2);
    }

    #[test]
    fn parse_pin_accepts_host_equals_ip() {
        assert_eq!(
            SystemResolver::parse_pin("docs.rs=18.1.2.3").unwrap(),
            ("docs.rs".to_string(), "18.1.2.3".parse().unwrap())
        );
        assert_eq!(
            SystemResolver::parse_pin("v6.example=[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert!(SystemResolver::parse_pin("docs.rs").is_err());
        assert!(SystemResolver::parse_pin("=1.2.3.4").is_err());
        assert!(SystemResolver::parse_pin("x=999.1.1.1").is_err());
    }

    #[test]
    fn the_system_resolver_answers_and_fails_closed() {
        let r = SystemResolver::default();
        // /etc/hosts names localhost on every Debian system.
        let ips = r.resolve("localhost").unwrap();
        assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}");
        assert_eq!(
            r.resolve("127.0.0.1").unwrap(),
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        // RFC 6761: .invalid never resolves.
        assert!(r.resolve("no-such-host.invalid").is_err());
        assert!(r.resolve("a\0b").is_err());
        assert!(r.resolve("").is_err());
    }
}
