//! The host filesystem behind [`FsFacts`]: lstat and readlink, never
//! following a final symlink.
//!
//! The engine resolves paths itself, one component at a time, through
//! [`RealFs`]; it never calls `canonicalize`, which fails on dangling links
//! and not-yet-created files.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::{FileFacts, FileKind, FsFacts};

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::{Context, Engine, Mode, PolicyConfig, ToolCall, Verdict};

    use super::*;
    use crate::host::SystemResolver;

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
            sandbox: None,
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
}
