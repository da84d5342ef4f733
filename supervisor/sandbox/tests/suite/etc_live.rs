//! /etc as it is when each command starts (docs/THREAT_MODEL.md,
//! "run_bash"), for a root and a non-root owner: a name the host creates
//! after the sandbox started, and the same file replaced by a rename, are
//! read anew by the next command; a withheld name created meanwhile stays
//! unreadable. Uses names of its own in the host's /etc (never
//! /etc/passwd, which other tests' processes read), removed at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;

use common::{NOBODY, sh, spec, workspace};
use tollgate_sandbox::Backend;

/// Files this test put in /etc, removed when it ends, passing or not.
struct Planted(Vec<PathBuf>);

impl Planted {
    fn write(&mut self, path: PathBuf, text: &str) -> PathBuf {
        std::fs::write(&path, text).unwrap();
        self.0.push(path.clone());
        path
    }

    /// `path` replaced by a rename, as `useradd` replaces /etc/passwd.
    fn replace(&mut self, path: &PathBuf, text: &str) {
        let tmp = self.write(PathBuf::from(format!("{}+new", path.display())), text);
        std::fs::rename(&tmp, path).unwrap();
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etc_created_and_replaced_after_the_start_is_read_anew_and_withheld_names_stay_hidden() {
    if !common::require_root() {
        return;
    }
    let b = common::native();
    for uid in [0, NOBODY] {
        let ws = workspace(uid, uid);
        let sb = b
            .create(&spec("etclive", ws.path(), uid, uid))
            .await
            .unwrap();
        let warm = sh(sb.as_ref(), "true").await;
        assert_eq!(warm.code(), Some(0), "uid {uid}: {warm:?}");
        let mut planted = Planted(Vec::new());
        let base = format!("/etc/tg-etclive-{}-{uid}", std::process::id());
        let file = planted.write(PathBuf::from(&base), "FIRST-VERSION\n");
        let key = planted.write(PathBuf::from(format!("{base}.key")), "KEY-MATERIAL\n");
        let read = |p: &PathBuf| format!("cat {} 2>&1; true", p.display());
        let r = sh(sb.as_ref(), &read(&file)).await;
        assert!(
            r.stdout.contains("FIRST-VERSION"),
            "uid {uid}, created: {r:?}"
        );
        planted.replace(&file, "SECOND-VERSION\n");
        let r = sh(sb.as_ref(), &read(&file)).await;
        assert!(
            r.stdout.contains("SECOND-VERSION"),
            "uid {uid}, replaced: {r:?}"
        );
        let r = sh(sb.as_ref(), &read(&key)).await;
        assert!(
            !r.stdout.contains("KEY-MATERIAL") && !r.stderr.contains("KEY-MATERIAL"),
            "uid {uid}, a withheld name created after the start: {r:?}"
        );
        assert!(
            r.stdout.contains("Permission denied"),
            "uid {uid}, the withheld read is refused: {r:?}"
        );
        sb.destroy().await.unwrap();
    }
}
