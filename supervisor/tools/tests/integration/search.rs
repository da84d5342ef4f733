//! glob_files and grep on a real tree.

use std::os::unix::fs::symlink;

use tollgate_tools::{ToolError, ToolOutput};

use crate::common::{CAP, Fixture};

/// A small project: sources, an ignored build dir, hidden files, a .git dir,
/// a secret, a binary, and a symlink that leads out.
fn project() -> Fixture {
    let f = Fixture::new();
    f.file(".gitignore", "target/\n*.log\n");
    f.file("Cargo.toml", "[package]\nname = \"demo\"\n");
    f.file("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
    f.file("src/net/client.rs", "// TODO: retry\npub fn get() {}\n");
    f.file("src/net/.ignore", "generated.rs\n");
    f.file("src/net/generated.rs", "// TODO: generated\n");
    f.file("target/debug/build.rs", "// TODO: ignored build output\n");
    f.file("debug.log", "TODO in a log\n");
    f.file(".github/workflows/ci.yml", "# TODO: cache\n");
    f.file(".git/config", "[core]\n# TODO git internals\n");
    f.file(".env", "API_TOKEN=hunter2 # TODO rotate\n");
    f.file("config/credentials.json", "{\"TODO\": \"secret\"}\n");
    f.file("assets/logo.bin", b"TODO\x00\x01\x02binary".as_slice());
    f.file("docs/README.md", "# Docs\ntodo: lowercase\n");
    f.outside_file("leak.rs", "// TODO: outside the workspace\n");
    symlink("../outside", f.p("escape")).unwrap();
    f
}

#[tokio::test]
async fn glob_lists_matching_files_sorted_and_respects_gitignore() {
    let f = project();
    let out = f.ws.glob_files("*.rs", None, CAP).await.unwrap();
    assert_eq!(
        out,
        ToolOutput {
            text: "src/main.rs\nsrc/net/client.rs\n".into(),
            truncated: false
        }
    );
}

#[tokio::test]
async fn glob_includes_hidden_files_but_never_dot_git() {
    let f = project();
    let out = f.ws.glob_files("**/*", None, CAP).await.unwrap();
    let listed: Vec<&str> = out.text.lines().collect();
    assert_eq!(
        listed,
        vec![
            ".env",
            ".github/workflows/ci.yml",
            ".gitignore",
            "Cargo.toml",
            "assets/logo.bin",
            "config/credentials.json",
            "docs/README.md",
            "escape",
            "src/main.rs",
            "src/net/.ignore",
            "src/net/client.rs",
        ]
    );
}

#[tokio::test]
async fn glob_with_a_slash_and_a_subdirectory() {
    let f = project();
    let out = f.ws.glob_files("src/*.rs", None, CAP).await.unwrap();
    assert_eq!(out.text, "src/main.rs\n");
    // Relative to `path`, output still relative to the workspace root.
    let out =
        f.ws.glob_files("*.rs", Some(&f.p("src/net")), CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "src/net/client.rs\n");
    let out =
        f.ws.glob_files("net/**/*.rs", Some(&f.p("src")), CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "src/net/client.rs\n");
    let out = f.ws.glob_files("*.py", None, CAP).await.unwrap();
    assert_eq!(out.text, "no files match *.py in .");
}

#[tokio::test]
async fn glob_never_follows_a_symlink_out() {
    let f = project();
    let out = f.ws.glob_files("*.rs", None, CAP).await.unwrap();
    assert!(!out.text.contains("leak"), "{}", out.text);
    let err =
        f.ws.glob_files("*", Some(&f.p("escape")), CAP)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::Escape { .. }), "{err}");
}

#[tokio::test]
async fn glob_errors_and_caps() {
    let f = project();
    let err = f.ws.glob_files("/etc/*", None, CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidPattern { .. }), "{err}");
    let err =
        f.ws.glob_files("*", Some(&f.p("Cargo.toml")), CAP)
            .await
            .unwrap_err();
    assert!(matches!(err, ToolError::NotADirectory { .. }), "{err}");
    let out = f.ws.glob_files("**/*", None, 30).await.unwrap();
    assert!(out.truncated);
    assert!(out.text.starts_with(".env\n.github/workflows/ci.yml"));
    assert!(
        out.text
            .ends_with("more bytes not shown; narrow the pattern or pass a subdirectory as path]"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn glob_escapes_control_characters_in_names() {
    let f = Fixture::new();
    f.file("evil\nname.txt", "x");
    let out = f.ws.glob_files("*.txt", None, CAP).await.unwrap();
    assert_eq!(out.text, "evil\\nname.txt\n");
}

#[tokio::test]
async fn grep_prints_path_line_text_and_respects_ignore_files() {
    let f = project();
    let out = f.ws.grep("TODO", None, None, false, CAP).await.unwrap();
    assert_eq!(
        out.text,
        ".github/workflows/ci.yml:1:# TODO: cache\n\
         src/net/client.rs:1:// TODO: retry\n\
         [2 secret file(s) (.env, keys, credentials, ...) not searched; read them with read_file, which asks for approval]\n"
    );
    assert!(!out.truncated);
}

#[tokio::test]
async fn grep_ignore_case_glob_and_single_file() {
    let f = project();
    let out =
        f.ws.grep("todo", Some(&f.p("docs")), None, true, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "docs/README.md:2:todo: lowercase\n");
    let out =
        f.ws.grep("todo", Some(&f.p("docs")), None, false, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "docs/README.md:2:todo: lowercase\n");
    let out =
        f.ws.grep("TODO", Some(&f.p("docs")), None, false, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "no matches for TODO in docs\n");
    let out =
        f.ws.grep("fn \\w+", None, Some("*.rs"), false, CAP)
            .await
            .unwrap();
    assert_eq!(
        out.text,
        "src/main.rs:1:fn main() {\nsrc/net/client.rs:2:pub fn get() {}\n"
    );
    let out =
        f.ws.grep("println", Some(&f.p("src/main.rs")), None, false, CAP)
            .await
            .unwrap();
    assert_eq!(out.text, "src/main.rs:2:    println!(\"Hello\");\n");
}

#[tokio::test]
async fn grep_skips_binaries_symlinks_out_and_secret_files() {
    let f = project();
    let out =
        f.ws.grep("binary|outside|hunter2", None, None, false, CAP)
            .await
            .unwrap();
    assert_eq!(
        out.text,
        "no matches for binary|outside|hunter2 in .\n\
         [2 secret file(s) (.env, keys, credentials, ...) not searched; read them with read_file, which asks for approval]\n"
    );
    // Named explicitly, a secret file is still not searched.
    let out =
        f.ws.grep("hunter2", Some(&f.p(".env")), None, false, CAP)
            .await
            .unwrap();
    assert!(!out.text.contains("API_TOKEN"), "{}", out.text);
    assert!(out.text.contains("\n[1 secret file(s)"), "{}", out.text);
}

#[tokio::test]
async fn grep_caps_its_output_and_rejects_bad_regexes() {
    let f = Fixture::new();
    let text: String = (0..200).map(|i| format!("match {i}\n")).collect();
    f.file("many.txt", &text);
    let out = f.ws.grep("match", None, None, false, 100).await.unwrap();
    assert!(out.truncated);
    assert_eq!(
        out.text,
        "many.txt:1:match 0\nmany.txt:2:match 1\nmany.txt:3:match 2\nmany.txt:4:match 3\nmany.txt:5:match 4\n[output truncated at 100 bytes; narrow the pattern, path or glob]\n"
    );
    let err =
        f.ws.grep("(unclosed", None, None, false, CAP)
            .await
            .unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidPattern { what: "regex", .. }),
        "{err}"
    );
    let err = f.ws.grep("", None, None, false, CAP).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidPattern { .. }), "{err}");
}
