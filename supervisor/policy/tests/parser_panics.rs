//! Inputs on which brush-parser 0.4.0 panicked (an `unwrap` on a number that
//! overflows, or on a character that is not there). The engine caught those
//! panics and refused the command, but each one printed a panic message on
//! the supervisor's stderr, with a backtrace captured when RUST_BACKTRACE is
//! set (half a second of CPU each), and an agent could send them in a loop.
//! The vendored parser now answers each with a parse or an error
//! (vendor/brush-parser/TOLLGATE.md, patch 11). These tests call the parser
//! directly, outside the engine's `catch_unwind`, so a panic fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use brush_parser::word::{TildeExpr, WordPiece};
use serde_json::json;
use tollgate_policy::{
    Context, Decision, Engine, FileFacts, FsFacts, Mode, PolicyConfig, ResolveError, Resolver,
    ToolCall, Verdict,
};

struct NoFiles;

impl FsFacts for NoFiles {
    fn symlink_metadata(&self, _: &Path) -> Option<FileFacts> {
        None
    }
    fn read_link(&self, _: &Path) -> Option<PathBuf> {
        None
    }
}

struct NoDns;

impl Resolver for NoDns {
    fn resolve(&self, host: &str) -> Result<Vec<std::net::IpAddr>, ResolveError> {
        Err(ResolveError::NotFound(host.to_string()))
    }
}

fn decide(command: &str, mode: Mode) -> Decision {
    let engine = Engine::new(&PolicyConfig::default()).unwrap();
    let cx = Context {
        workspace: PathBuf::from("/home/dev/proj"),
        mode,
        tools: None,
        home: Some(PathBuf::from("/home/dev")),
        protected: vec![],
        read_files: BTreeSet::new(),
    };
    let call = ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": command }),
    };
    engine.decide(&call, &cx, &NoFiles, &NoDns)
}

fn parse_program(text: &str) -> Result<brush_parser::ast::Program, brush_parser::ParseError> {
    let opts = brush_parser::ParserOptions::default();
    brush_parser::Parser::new(text.as_bytes(), &opts).parse_program()
}

#[test]
fn a_redirect_number_that_overflows_an_int_is_a_word_as_in_bash() {
    // bash reads digits before `>` as a file descriptor only when they fit
    // an int; otherwise they are an ordinary argument and `>` redirects
    // standard output.
    let program = parse_program("echo 99999999999>out").unwrap();
    let shown = format!("{program:?}");
    assert!(shown.contains("\"99999999999\""), "{shown}");
    assert!(!shown.contains("Some(99999999999)"), "{shown}");
    // ...so the redirect target is still checked like any write.
    let d = decide(
        "echo 99999999999>/etc/passwd",
        Mode::DangerouslySkipPermissions,
    );
    assert_eq!(d.verdict, Verdict::Deny, "{}", d.reason);
    assert!(d.reason.contains("/etc/passwd"), "{}", d.reason);
    // A descriptor that fits is still one.
    let program = parse_program("echo hi 2>err").unwrap();
    assert!(format!("{program:?}").contains("Some(2)"));
}

#[test]
fn a_directory_stack_index_that_overflows_stays_a_stack_lookup() {
    let opts = brush_parser::ParserOptions::default();
    for (word, want_bottom) in [
        ("~99999999999999999999999", false),
        ("~+99999999999999999999999/x", false),
        ("~-99999999999999999999999", true),
    ] {
        let pieces = brush_parser::word::parse(word, &opts).unwrap();
        let tilde = pieces.iter().find_map(|p| match &p.piece {
            WordPiece::TildeExpansion(t) => Some(t),
            _ => None,
        });
        match tilde {
            Some(TildeExpr::NthDirFromTopOfDirStack { n, .. }) if !want_bottom => {
                assert_eq!(*n, usize::MAX, "{word}")
            }
            Some(TildeExpr::NthDirFromBottomOfDirStack { n }) if want_bottom => {
                assert_eq!(*n, usize::MAX, "{word}")
            }
            other => panic!("{word}: {other:?}"),
        }
    }
    // Its value is only known when the command runs: not a literal path, and
    // not a command name the gate could check.
    let d = decide(
        "~99999999999999999999999 -rf x",
        Mode::DangerouslySkipPermissions,
    );
    assert_eq!(d.verdict, Verdict::Deny, "{}", d.reason);
    assert!(
        d.reason.contains("only known when the command runs"),
        "{}",
        d.reason
    );
}

#[test]
fn an_arithmetic_expansion_cut_by_a_here_document_is_an_error() {
    for text in [
        "cat <<E $[$[ ]\nE",
        "cat <<E $[$[ ]\nE\n",
        "cat <<E $(($(( ))\nE",
        "cat <<E ${x:-${y}\nE",
    ] {
        let err = parse_program(text).unwrap_err();
        assert!(err.to_string().contains("unterminated"), "{text:?}: {err}");
        let d = decide(text, Mode::Default);
        assert_eq!(d.verdict, Verdict::Deny, "{text:?}: {}", d.reason);
        assert_eq!(d.rule.as_deref(), Some("floor:unparseable"), "{}", d.reason);
    }
}
