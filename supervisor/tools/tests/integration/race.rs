//! Symlink race: a thread swaps a symlink while a file tool runs. Over 10,000
//! iterations, nothing escapes: the canary outside the workspace is never
//! read, never written, and nothing is ever created outside.
//!
//! The swapping thread runs as root (the attacker here is the sandboxed
//! agent, which owns the workspace); the canary and the outside directory
//! belong to the session uid, so file permissions would allow every escape
//! and only the beneath-the-workspace resolution stops it.

use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{CWD, RenameFlags, renameat_with};
use tollgate_tools::ToolError;

use crate::common::{CAP, Fixture};

const ITERATIONS: usize = 10_000;
const CANARY: &str = "CANARY-6b1f0e: must never be read or written by a file tool";
const INSIDE: &str = "inside content\n";

/// Runs `flip` in a loop on another thread until the returned guard drops.
struct Flipper {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Flipper {
    fn start(mut flip: impl FnMut(u64) + Send + 'static) -> Flipper {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                flip(n);
                n += 1;
            }
            n
        });
        Flipper {
            stop,
            handle: Some(handle),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

/// Atomically points `link` at `target` (a fresh symlink renamed over it).
fn point(dir: &Path, link: &str, target: &Path, tmp: &str) {
    let tmp = dir.join(tmp);
    let _ = std::fs::remove_file(&tmp);
    symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(link)).unwrap();
}

fn canary_untouched(f: &Fixture, canary: &Path, ino: u64) {
    assert_eq!(std::fs::read_to_string(canary).unwrap(), CANARY);
    let md = std::fs::metadata(canary).unwrap();
    assert_eq!(md.ino(), ino, "the canary was replaced");
    let names: Vec<_> = std::fs::read_dir(&f.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["canary.txt"], "something was created outside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_component_symlink_swap_never_reads_the_canary() {
    let f = Fixture::new();
    let canary = f.outside_file("canary.txt", CANARY);
    let ino = std::fs::metadata(&canary).unwrap().ino();
    f.file("inside.txt", INSIDE);
    point(&f.root, "link", Path::new("inside.txt"), "link.tmp");

    let root = f.root.clone();
    let abs = canary.clone();
    let flipper = Flipper::start(move |n| {
        let target: &Path = match n % 3 {
            0 => Path::new("inside.txt"),
            1 => &abs,
            _ => Path::new("../outside/canary.txt"),
        };
        point(&root, "link", target, "link.tmp");
    });

    let (mut inside, mut refused) = (0usize, 0usize);
    for _ in 0..ITERATIONS {
        match f.ws.read_file(&f.p("link"), None, None, CAP).await {
            Ok(out) => {
                assert!(!out.text.contains("CANARY"), "escaped: {}", out.text);
                assert_eq!(out.text, "     1\tinside content\n");
                inside += 1;
            }
            Err(ToolError::Escape { .. }) => refused += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let flips = flipper.stop();
    eprintln!("read via flipping link: {inside} inside, {refused} refused, {flips} flips");
    assert!(inside > 0 && refused > 0, "the race was not exercised");
    canary_untouched(&f, &canary, ino);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_component_swap_never_writes_the_canary() {
    let f = Fixture::new();
    let canary = f.outside_file("canary.txt", CANARY);
    let ino = std::fs::metadata(&canary).unwrap().ino();
    f.file("target.txt", INSIDE);

    // The name alternates between a regular file and a symlink to the canary
    // (absolute or relative), each swapped in with one atomic rename.
    let root = f.root.clone();
    let abs = canary.clone();
    let (uid, gid) = (f.uid, f.gid);
    let flipper = Flipper::start(move |n| match n % 3 {
        0 => {
            let tmp = root.join("target.tmp");
            std::fs::write(&tmp, INSIDE).unwrap();
            std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).unwrap();
            std::fs::rename(&tmp, root.join("target.txt")).unwrap();
        }
        1 => point(&root, "target.txt", &abs, "target.tmp"),
        _ => point(
            &root,
            "target.txt",
            Path::new("../outside/canary.txt"),
            "target.tmp",
        ),
    });

    let (mut written, mut refused) = (0usize, 0usize);
    for i in 0..ITERATIONS {
        let p = f.p("target.txt");
        let result = if i % 2 == 0 {
            f.ws.write_file(&p, "written by the tool\n").await
        } else {
            f.ws.edit_file(&p, "inside", "edited", false).await
        };
        match result {
            Ok(_) => written += 1,
            Err(ToolError::Symlink { .. } | ToolError::Escape { .. }) => refused += 1,
            // The edit can find the tool's own earlier write instead of a
            // fresh file: no "inside" to replace.
            Err(ToolError::NoMatch { .. }) => {}
            // The name can vanish for an instant between the flipper's steps.
            Err(ToolError::NotFound { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let flips = flipper.stop();
    eprintln!("write via flipping name: {written} written, {refused} refused, {flips} flips");
    assert!(written > 0 && refused > 0, "the race was not exercised");
    canary_untouched(&f, &canary, ino);
    // No temp file is left in the workspace either.
    let leftovers: Vec<_> = f
        .names("")
        .into_iter()
        .filter(|n| n.starts_with(".tollgate-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_swapped_for_an_outside_symlink_never_escapes() {
    let f = Fixture::new();
    let canary = f.outside_file("canary.txt", CANARY);
    let ino = std::fs::metadata(&canary).unwrap().ino();
    // `sub` is a real directory holding canary.txt with inside content;
    // `swap` is a symlink to the outside directory (which holds the real
    // canary). RENAME_EXCHANGE swaps the two names atomically, so `sub/`
    // is at every instant either the real directory or a way out.
    f.file("sub/canary.txt", INSIDE);
    symlink("../outside", f.p("swap")).unwrap();
    let root = f.root.clone();
    let flipper = Flipper::start(move |_| {
        renameat_with(
            CWD,
            root.join("sub"),
            CWD,
            root.join("swap"),
            RenameFlags::EXCHANGE,
        )
        .unwrap();
    });

    let (mut inside, mut refused, mut written) = (0usize, 0usize, 0usize);
    for i in 0..ITERATIONS {
        match f
            .ws
            .read_file(&f.p("sub/canary.txt"), None, None, CAP)
            .await
        {
            Ok(out) => {
                assert!(!out.text.contains("CANARY"), "escaped: {}", out.text);
                inside += 1;
            }
            Err(ToolError::Escape { .. }) => refused += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
        let target = f.p(&format!("sub/new_{i}.txt"));
        match f.ws.write_file(&target, "x").await {
            Ok(_) => written += 1,
            Err(ToolError::Escape { .. }) => refused += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let flips = flipper.stop();
    eprintln!(
        "directory swap: {inside} reads inside, {written} writes inside, {refused} refused, {flips} flips"
    );
    assert!(
        inside > 0 && written > 0 && refused > 0,
        "the race was not exercised"
    );
    canary_untouched(&f, &canary, ino);
}
