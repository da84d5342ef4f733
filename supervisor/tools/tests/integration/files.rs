//! read_file, write_file, edit_file and the previews on real files.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::PathBuf;
use std::time::Duration;

use tollgate_tools::{ToolError, ToolOutput};

use crate::common::{CAP, Fixture};

/// A guard against a hang (a FIFO read): fails the test instead of blocking
/// the run forever. Not a performance assertion.
async fn no_hang<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("the tool call hung")
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_numbers_lines_like_cat_n() {
    let f = Fixture::new();
    let p = f.file("src/a.txt", "alpha\nbeta\n\ngamma");
    let out = f.ws.read_file(&p, None, None, CAP).await.unwrap();
    assert_eq!(
        out,
        ToolOutput {
            text: "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma\n".into(),
            truncated: false
        }
    );
}

#[tokio::test]
async fn read_file_offset_and_limit_pick_a_window_and_say_where_to_go_on() {
    let f = Fixture::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let p = f.file("ten.txt", &text);
    let out = f.ws.read_file(&p, Some(3), Some(2), CAP).await.unwrap();
    // Lines 1-4 are 7 bytes each; lines 5-9 7 bytes, line 10 8 bytes.
    assert_eq!(
        out,
        ToolOutput {
            text: "     3\tline 3\n     4\tline 4\n[showing lines 3-4: 43 more bytes of ten.txt after line 4 not shown; use offset=5 to read more]".into(),
            truncated: true
        }
    );
    // The last window has no notice.
    let out = f.ws.read_file(&p, Some(9), Some(5), CAP).await.unwrap();
    assert_eq!(out.text, "     9\tline 9\n    10\tline 10\n");
    assert!(!out.truncated);
    // Offset 0 is read as 1.
    let out = f.ws.read_file(&p, Some(0), Some(1), CAP).await.unwrap();
    assert!(out.text.starts_with("     1\tline 1\n[showing lines 1-1:"));
}

#[tokio::test]
async fn read_file_offset_past_the_end_and_empty_files_say_so() {
    let f = Fixture::new();
    let p = f.file("three.txt", "a\nb\nc\n");
    let out = f.ws.read_file(&p, Some(7), None, CAP).await.unwrap();
    assert_eq!(
        out.text,
        "(no lines to show: three.txt has 3 lines and offset was 7)"
    );
    let e = f.file("empty.txt", "");
    let out = f.ws.read_file(&e, None, None, CAP).await.unwrap();
    assert_eq!(out.text, "(empty file: empty.txt has 0 bytes)");
    let err = f.ws.read_file(&p, None, Some(0), CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArgument(_)), "{err}");
}

#[tokio::test]
async fn read_file_defaults_to_2000_lines() {
    let f = Fixture::new();
    let text: String = (1..=2500).map(|i| format!("{i}\n")).collect();
    let p = f.file("long.txt", &text);
    let out = f.ws.read_file(&p, None, None, 1 << 20).await.unwrap();
    assert!(out.truncated);
    assert!(out.text.contains("  2000\t2000\n[showing lines 1-2000:"));
    assert!(!out.text.contains("\t2001\n"));
    assert!(out.text.ends_with("use offset=2001 to read more]"));
}

#[tokio::test]
async fn read_file_cuts_long_lines_and_caps_the_output_on_a_line() {
    let f = Fixture::new();
    let long = "é".repeat(2500); // 5000 bytes, 2500 chars
    let p = f.file("wide.txt", format!("{long}\nshort\n"));
    let out = f.ws.read_file(&p, None, None, CAP).await.unwrap();
    let first = out.text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "     1\t{} … [line truncated: 1000 more bytes]",
            "é".repeat(2000)
        )
    );
    assert!(out.text.ends_with("     2\tshort\n"));

    let text: String = (1..=100).map(|i| format!("row {i:03}\n")).collect();
    let p = f.file("rows.txt", &text);
    let out = f.ws.read_file(&p, None, None, 60).await.unwrap();
    // 15 bytes a formatted line: 4 fit in 60.
    assert_eq!(
        out,
        ToolOutput {
            text: "     1\trow 001\n     2\trow 002\n     3\trow 003\n     4\trow 004\n[output truncated at 60 bytes: 768 more bytes of rows.txt after line 4 not shown; use offset=5 to read more]".into(),
            truncated: true
        }
    );
}

#[tokio::test]
async fn read_file_reports_binary_files_instead_of_dumping_them() {
    let f = Fixture::new();
    let p = f.file("blob.bin", b"\x7fELF\x02\x01\x00\x00garbage".as_slice());
    let out = f.ws.read_file(&p, None, None, CAP).await.unwrap();
    assert_eq!(out.text, "binary file (15 bytes, not shown)");
    let p = f.file("latin1.txt", b"caf\xe9 au lait\n".as_slice());
    let out = f.ws.read_file(&p, None, None, CAP).await.unwrap();
    assert_eq!(
        out.text,
        "binary file (13 bytes, not shown): line 1 is not valid UTF-8"
    );
}

#[tokio::test]
async fn read_file_refuses_a_fifo_without_hanging() {
    let f = Fixture::new();
    let fifo = f.p("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    std::os::unix::fs::chown(&fifo, Some(f.uid), Some(f.gid)).unwrap();
    let err = no_hang(f.ws.read_file(&fifo, None, None, CAP))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::NotRegularFile { kind: "FIFO", .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "pipe is a FIFO, not a regular file; refused"
    );
    let err = no_hang(f.ws.write_file(&fifo, "x")).await.unwrap_err();
    assert!(matches!(err, ToolError::NotRegularFile { .. }), "{err}");
    let err = no_hang(f.ws.edit_file(&fifo, "a", "b", false))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::NotRegularFile { .. }), "{err}");
    // A symlink to the FIFO is refused the same way.
    symlink("pipe", f.p("pipe_link")).unwrap();
    let err = no_hang(f.ws.read_file(&f.p("pipe_link"), None, None, CAP))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::NotRegularFile { .. }), "{err}");
}

#[tokio::test]
async fn read_file_refuses_sockets_and_device_nodes() {
    let f = Fixture::new();
    let sock = f.p("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let err = no_hang(f.ws.read_file(&sock, None, None, CAP))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::NotRegularFile { kind: "socket", .. }),
        "{err}"
    );
    // A symlink to a device outside is an escape before it is a device.
    symlink("/dev/zero", f.p("zero")).unwrap();
    let err = no_hang(f.ws.read_file(&f.p("zero"), None, None, CAP))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Escape { .. }), "{err}");
}

#[tokio::test]
async fn directories_are_refused_for_read_and_write() {
    let f = Fixture::new();
    f.mkdirs(&f.p("dir"));
    for p in [f.p("dir"), f.root.clone()] {
        let err = f.ws.read_file(&p, None, None, CAP).await.unwrap_err();
        assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
        let err = f.ws.write_file(&p, "x").await.unwrap_err();
        assert!(matches!(err, ToolError::IsDirectory { .. }), "{err}");
    }
    assert!(f.p("dir").is_dir());
}

#[tokio::test]
async fn missing_files_are_reported() {
    let f = Fixture::new();
    let err =
        f.ws.read_file(&f.p("nope.txt"), None, None, CAP)
            .await
            .unwrap_err();
    assert_eq!(err.to_string(), "nope.txt does not exist");
    let err =
        f.ws.edit_file(&f.p("nope/x.txt"), "a", "b", false)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::NotFound { .. }), "{err}");
}

// ------------------------------------------------------------ bad path input

#[tokio::test]
async fn nul_bytes_and_overlong_paths_are_contained_and_reported() {
    let f = Fixture::new();
    let nul = PathBuf::from(OsString::from_vec(
        format!("{}/src/main.rs\0.txt", f.root.display()).into_bytes(),
    ));
    for err in [
        f.ws.read_file(&nul, None, None, CAP).await.unwrap_err(),
        f.ws.write_file(&nul, "x").await.unwrap_err(),
        f.ws.edit_file(&nul, "a", "b", false).await.unwrap_err(),
        f.ws.preview_write(&nul, "x", CAP).await.unwrap_err(),
        f.ws.glob_files("*", Some(&nul), CAP).await.unwrap_err(),
        f.ws.grep("x", Some(&nul), None, false, CAP)
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
        assert!(err.to_string().contains("NUL byte"), "{err}");
        assert!(!err.to_string().contains('\0'));
    }

    // 4096 bytes or more: refused before any syscall.
    let long = f.root.join("a/".repeat(2100));
    assert!(long.as_os_str().len() >= 4096);
    let err = f.ws.write_file(&long, "x").await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
    assert!(err.to_string().contains("bytes long"), "{err}");
    assert!(err.to_string().len() < 600, "the message repeats the path");

    // A name over 255 bytes: the kernel's ENAMETOOLONG, reported.
    let name = f.root.join("n".repeat(300));
    let err = f.ws.write_file(&name, "x").await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
    assert_eq!(f.names(""), Vec::<String>::new());
}

#[tokio::test]
async fn paths_outside_the_workspace_are_never_opened() {
    let f = Fixture::new();
    let canary = f.outside_file("canary.txt", "CANARY");
    let sibling = PathBuf::from(format!("{}-evil/x.txt", f.root.display()));
    for p in [
        canary.clone(),
        sibling,
        PathBuf::from("/etc/passwd"),
        PathBuf::from("//etc/passwd"),
        PathBuf::from("/"),
        f.root.join("../outside/canary.txt"),
    ] {
        let err = f.ws.read_file(&p, None, None, CAP).await.unwrap_err();
        assert!(
            matches!(
                err,
                ToolError::OutsideWorkspace { .. } | ToolError::InvalidPath { .. }
            ),
            "{}: {err}",
            p.display()
        );
        let err = f.ws.write_file(&p, "pwned").await.unwrap_err();
        assert!(
            matches!(
                err,
                ToolError::OutsideWorkspace { .. } | ToolError::InvalidPath { .. }
            ),
            "{err}"
        );
    }
    let err =
        f.ws.read_file(&PathBuf::from("src/main.rs"), None, None, CAP)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::InvalidPath { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "CANARY");
}

// ------------------------------------------------------------------ symlinks

#[tokio::test]
async fn symlinks_that_leave_the_workspace_are_refused_by_the_kernel() {
    let f = Fixture::new();
    let canary = f.outside_file("canary.txt", "CANARY");
    symlink(&canary, f.p("abs_link")).unwrap();
    symlink("../outside/canary.txt", f.p("rel_link")).unwrap();
    symlink("../outside", f.p("out_dir")).unwrap();
    symlink("/proc/self/root", f.p("r")).unwrap();
    for rel in ["abs_link", "rel_link", "out_dir/canary.txt", "r/etc/passwd"] {
        let err =
            f.ws.read_file(&f.p(rel), None, None, CAP)
                .await
                .unwrap_err();
        assert!(matches!(err, ToolError::Escape { .. }), "{rel}: {err}");
    }
    // Writing through a directory symlink that leads out creates nothing there.
    let err =
        f.ws.write_file(&f.p("out_dir/new.txt"), "pwned")
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::Escape { .. }), "{err}");
    let err =
        f.ws.write_file(&f.p("out_dir/sub/new.txt"), "pwned")
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::Escape { .. }), "{err}");
    assert!(!f.outside.join("new.txt").exists());
    assert!(!f.outside.join("sub").exists());
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "CANARY");
}

#[tokio::test]
async fn symlinks_that_stay_inside_are_followed_for_reads() {
    let f = Fixture::new();
    f.file("src/main.rs", "fn main() {}\n");
    symlink("src", f.p("inner")).unwrap();
    symlink("main.rs", f.p("src/alias.rs")).unwrap();
    let out =
        f.ws.read_file(&f.p("inner/main.rs"), None, None, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "     1\tfn main() {}\n");
    let out =
        f.ws.read_file(&f.p("src/alias.rs"), None, None, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "     1\tfn main() {}\n");
    // Writes go through a directory symlink inside, but never through a
    // final-component symlink (that would replace the link itself).
    f.ws.write_file(&f.p("inner/new.rs"), "// new\n")
        .await
        .unwrap();
    assert_eq!(f.read("src/new.rs"), "// new\n");
    let err =
        f.ws.write_file(&f.p("src/alias.rs"), "x")
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::Symlink { .. }), "{err}");
    assert!(
        std::fs::symlink_metadata(f.p("src/alias.rs"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(f.read("src/main.rs"), "fn main() {}\n");
}

#[tokio::test]
async fn symlink_loops_are_reported() {
    let f = Fixture::new();
    symlink("loop2", f.p("loop1")).unwrap();
    symlink("loop1", f.p("loop2")).unwrap();
    let err =
        f.ws.read_file(&f.p("loop1"), None, None, CAP)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::SymlinkLoop { .. }), "{err}");
}

// ------------------------------------------------------------- write_file

#[tokio::test]
async fn write_file_creates_with_parents_and_overwrites_atomically() {
    let f = Fixture::new();
    let p = f.p("new_dir/deeper/new_file.txt");
    let out = f.ws.write_file(&p, "hello\n").await.unwrap();
    assert_eq!(
        out,
        ToolOutput {
            text: "wrote 6 bytes to new_dir/deeper/new_file.txt (created)".into(),
            truncated: false
        }
    );
    assert_eq!(f.read("new_dir/deeper/new_file.txt"), "hello\n");
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!(md.mode() & 0o777, 0o644);
    let dmd = std::fs::metadata(f.p("new_dir/deeper")).unwrap();
    assert_eq!(dmd.mode() & 0o777, 0o755 & !current_umask());

    // Overwrite: a new inode replaces the old one (rename), so a reader that
    // had the old file open still sees the old content whole.
    let mut old_reader = std::fs::File::open(&p).unwrap();
    let old_ino = md.ino();
    let out = f.ws.write_file(&p, "bye\n").await.unwrap();
    assert_eq!(
        out.text,
        "wrote 4 bytes to new_dir/deeper/new_file.txt (overwrote 6 bytes)"
    );
    assert_ne!(std::fs::metadata(&p).unwrap().ino(), old_ino);
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut old_reader, &mut seen).unwrap();
    assert_eq!(seen, "hello\n");
    assert_eq!(f.read("new_dir/deeper/new_file.txt"), "bye\n");
    // No temp file is left behind.
    assert_eq!(f.names("new_dir/deeper"), vec!["new_file.txt"]);
}

fn current_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
}

#[tokio::test]
async fn write_file_keeps_the_mode_of_the_file_it_replaces() {
    let f = Fixture::new();
    let p = f.file("script.sh", "#!/bin/sh\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).unwrap();
    f.ws.write_file(&p, "#!/bin/sh\necho hi\n").await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o750);
    // set-id bits are not carried over.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o4755)).unwrap();
    f.ws.write_file(&p, "x").await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o755);
}

/// No set-user/group-ID file comes out of the file tools (docs/THREAT_MODEL.md,
/// "Set-id files"), for a
/// root-owned session (fsuid 0 keeps CAP_FSETID, so the kernel would keep
/// whatever mode the tool sets) as for an ordinary one. Replacing or editing
/// a set-id file drops the bits; a file made in a set-group-ID directory
/// takes the directory's group, as the kernel gives it, but no set-id bit.
#[tokio::test]
async fn no_set_id_file_comes_out_of_the_file_tools_for_root_or_other_owners() {
    if !crate::common::require_root() {
        return;
    }
    let mode_of = |p: &std::path::Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    for (uid, gid) in [(0, 0), (65534, 65534)] {
        let f = Fixture::for_owner(uid, gid);
        for setid in [0o4755, 0o2755, 0o6755] {
            let p = f.file("bin/tool", "#!/bin/sh\necho a\n");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(setid)).unwrap();
            f.ws.write_file(&p, "#!/bin/sh\necho b\n").await.unwrap();
            assert_eq!(mode_of(&p), 0o755, "uid {uid}: write_file over {setid:o}");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(setid)).unwrap();
            f.ws.edit_file(&p, "echo b", "echo c", false).await.unwrap();
            assert_eq!(mode_of(&p), 0o755, "uid {uid}: edit_file of {setid:o}");
            assert_eq!(f.read("bin/tool"), "#!/bin/sh\necho c\n");
        }
        let shared = f.p("shared");
        f.mkdirs(&shared);
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2775)).unwrap();
        f.ws.write_file(&shared.join("new.txt"), "x").await.unwrap();
        let md = std::fs::metadata(shared.join("new.txt")).unwrap();
        assert_eq!(
            (md.mode() & 0o7777, md.uid(), md.gid()),
            (0o644, uid, gid),
            "uid {uid}: a new file in a set-group-ID directory"
        );
    }
}

#[tokio::test]
async fn write_file_refuses_hard_linked_files() {
    let f = Fixture::new();
    let outside = f.outside_file("profile", "export SAFE=1\n");
    std::fs::hard_link(&outside, f.p("hl")).unwrap();
    let err = f.ws.write_file(&f.p("hl"), "pwned").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "hl has 2 hard links; refusing to write through a hard-linked file (it may alias a file outside the workspace)"
    );
    let err =
        f.ws.edit_file(&f.p("hl"), "SAFE", "PWNED", false)
            .await
            .unwrap_err();
    assert!(
        matches!(err, ToolError::HardLinked { nlink: 2, .. }),
        "{err}"
    );
    let err = f.ws.preview_write(&f.p("hl"), "x", CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::HardLinked { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "export SAFE=1\n"
    );
}

#[tokio::test]
async fn write_file_escapes_control_characters_in_what_it_reports() {
    let f = Fixture::new();
    let p = f.p("notes\nINFO approved path=/etc/shadow.txt");
    let out = f.ws.write_file(&p, "x").await.unwrap();
    assert_eq!(
        out.text,
        "wrote 1 bytes to notes\\nINFO approved path=/etc/shadow.txt (created)"
    );
    let p = f.p("\u{202e}txt.exe");
    let out = f.ws.write_file(&p, "x").await.unwrap();
    assert_eq!(out.text, "wrote 1 bytes to \\u{202e}txt.exe (created)");
}

// -------------------------------------------------------------- edit_file

#[tokio::test]
async fn edit_file_replaces_exactly_one_match() {
    let f = Fixture::new();
    let p = f.file("src/lib.rs", "fn a() {}\nfn b() {}\n");
    let out =
        f.ws.edit_file(&p, "fn b() {}", "fn b() { a() }", false)
            .await
            .unwrap();
    assert_eq!(
        out.text,
        "edited src/lib.rs: replaced 1 occurrence (20 bytes -> 25 bytes)"
    );
    assert_eq!(f.read("src/lib.rs"), "fn a() {}\nfn b() { a() }\n");
    assert_eq!(f.names("src"), vec!["lib.rs"]);
}

#[tokio::test]
async fn edit_file_errors_name_the_match_count() {
    let f = Fixture::new();
    let p = f.file("dup.txt", "x = 1\nx = 1\ny = 2\n");
    let err =
        f.ws.edit_file(&p, "z = 3", "z = 4", false)
            .await
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "old_string not found in dup.txt (0 matches)"
    );
    let err =
        f.ws.edit_file(&p, "x = 1", "x = 9", false)
            .await
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "old_string matches 2 times in dup.txt; pass more context to make it unique or set replace_all"
    );
    assert_eq!(f.read("dup.txt"), "x = 1\nx = 1\ny = 2\n");
    let out = f.ws.edit_file(&p, "x = 1", "x = 9", true).await.unwrap();
    assert_eq!(
        out.text,
        "edited dup.txt: replaced 2 occurrences (18 bytes -> 18 bytes)"
    );
    assert_eq!(f.read("dup.txt"), "x = 9\nx = 9\ny = 2\n");

    let err =
        f.ws.edit_file(&p, "y = 2", "y = 2", false)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::NoChange { .. }), "{err}");
    let err = f.ws.edit_file(&p, "", "y", false).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArgument(_)), "{err}");
}

#[tokio::test]
async fn edit_file_refuses_non_utf8_files() {
    let f = Fixture::new();
    let p = f.file("bin.dat", b"ok\xff\xfe".as_slice());
    let err = f.ws.edit_file(&p, "ok", "ko", false).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "bin.dat is not UTF-8 text (invalid UTF-8 at byte 2); edit_file only edits text files"
    );
}

#[tokio::test]
async fn edit_file_keeps_the_mode() {
    let f = Fixture::new();
    let p = f.file("secret.cfg", "key = a\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    f.ws.edit_file(&p, "a", "b", false).await.unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
    assert_eq!(f.read("secret.cfg"), "key = b\n");
}

// --------------------------------------------------------------- previews

#[tokio::test]
async fn preview_write_diffs_against_the_current_file_or_dev_null() {
    let f = Fixture::new();
    let diff =
        f.ws.preview_write(&f.p("docs/new.md"), "# Title\n", CAP)
            .await
            .unwrap();
    assert_eq!(
        diff,
        "--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1 @@\n+# Title\n"
    );
    assert!(!f.p("docs").exists(), "a preview must not create anything");

    let p = f.file("README.md", "one\ntwo\nthree\n");
    let diff =
        f.ws.preview_write(&p, "one\n2\nthree\n", CAP)
            .await
            .unwrap();
    assert_eq!(
        diff,
        "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    );
    assert_eq!(f.read("README.md"), "one\ntwo\nthree\n");

    let p = f.file("logo.png", b"\x89PNG\x00\xff".as_slice());
    let diff = f.ws.preview_write(&p, "text", CAP).await.unwrap();
    assert_eq!(
        diff,
        "binary file logo.png (6 bytes) would be replaced by 4 bytes of text\n"
    );
}

#[tokio::test]
async fn preview_edit_shows_the_edit_and_fails_like_the_edit() {
    let f = Fixture::new();
    let p = f.file("a.txt", "keep\nold\nkeep\nold\n");
    let diff =
        f.ws.preview_edit(&p, "old", "new", true, CAP)
            .await
            .unwrap();
    assert_eq!(
        diff,
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,4 +1,4 @@\n keep\n-old\n+new\n keep\n-old\n+new\n"
    );
    let err =
        f.ws.preview_edit(&p, "old", "new", false, CAP)
            .await
            .unwrap_err();
    assert!(
        matches!(err, ToolError::AmbiguousMatch { count: 2, .. }),
        "{err}"
    );
    assert_eq!(f.read("a.txt"), "keep\nold\nkeep\nold\n");

    // Capped on a line with a notice.
    let big: String = (0..500).map(|i| format!("l{i}\n")).collect();
    let p = f.file("big.txt", &big);
    let diff =
        f.ws.preview_edit(&p, "l0\n", "first\n", false, 10_000)
            .await
            .unwrap();
    assert!(diff.len() < 10_000);
    let diff = f.ws.preview_write(&p, "", 120).await.unwrap();
    let (body, notice) = diff.split_once("… diff truncated (").unwrap();
    assert!(body.len() <= 120 && body.ends_with('\n'));
    assert!(notice.ends_with(" more bytes not shown)\n"));
}
