//! Commands built against the parser: deep nesting (which used to overflow
//! the stack and abort the supervisor), inputs that make a PEG parser
//! backtrack exponentially (which used to hold a worker for minutes), a
//! here-document the tokenizer never finished (which held a worker and grew
//! its memory without bound), and inputs on which brush-parser 0.4.0
//! panicked. Each gets a decision, on a thread with tokio's default 2 MiB
//! stack.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use brush_parser::word::{TildeExpr, WordPiece};
use serde_json::json;
use tollgate_policy::{
    Context, Decision, Engine, FileFacts, FsFacts, HostAddrs, HostAddrsError, Mode, PolicyConfig,
    ResolveError, Resolver, ToolCall, Verdict,
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
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }

    fn resolve(&self, host: &str) -> Result<Vec<std::net::IpAddr>, ResolveError> {
        Err(ResolveError::NotFound(host.to_string()))
    }
}

/// The decision for `command` in default mode, made on a thread with a
/// 2 MiB stack (what a tokio worker has). A stack overflow would abort this
/// test binary.
fn decide(command: String) -> Decision {
    decide_in(command, Mode::Default)
}

fn decide_in(command: String, mode: Mode) -> Decision {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let engine = Engine::new(&PolicyConfig::default()).unwrap();
            let cx = Context {
                workspace: PathBuf::from("/w/proj"),
                mode,
                tools: None,
                home: Some(PathBuf::from("/home/u")),
                protected: vec![],
                read_files: BTreeSet::new(),
                repo: Vec::new(),
                sandbox: None,
            };
            let call = ToolCall {
                tool: "run_bash".to_string(),
                args: json!({ "command": command }),
            };
            engine.decide(&call, &cx, &NoFiles, &NoDns)
        })
        .unwrap()
        .join()
        .unwrap()
}

/// One command per kind of nesting, `n` levels deep.
fn nested(n: usize) -> Vec<(&'static str, String)> {
    let r = |s: &str, k: usize| s.repeat(k);
    vec![
        (
            "brace groups",
            format!("{}echo x; {}", r("{ ", n), r("}; ", n)),
        ),
        ("subshells", format!("{}echo x{}", r("( ", n), r(" )", n))),
        (
            "if",
            format!("{}echo x; {}", r("if true; then ", n), r("fi; ", n)),
        ),
        (
            "else if",
            format!(
                "if a; then b; {}{}",
                r("else if a; then b; ", n),
                r("fi; ", n + 1)
            ),
        ),
        (
            "while",
            format!("{}echo; {}", r("while false; do ", n), r("done; ", n)),
        ),
        (
            "select",
            format!("{}echo; {}", r("select x in a; do ", n), r("done; ", n)),
        ),
        (
            "case",
            format!(
                "{}echo;; {}esac",
                r("case x in x) ", n),
                r("esac;; ", n - 1)
            ),
        ),
        (
            "functions",
            format!("{}echo; {}", r("f() { ", n), r("}; ", n)),
        ),
        (
            "parameters",
            format!("echo {}y{}", r("${x:-", n), r("}", n)),
        ),
        (
            "substitutions",
            format!("echo {}y{}", r("$(echo ", n), r(")", n)),
        ),
        (
            "quoted substitutions",
            format!("echo {}y{}", r("\"$(echo ", n), r(")\"", n)),
        ),
        (
            "arithmetic",
            format!("echo $(( {}1{} ))", r("(", n), r(")", n)),
        ),
        (
            "[[ ( ) ]]",
            format!("[[ {}-f x{} ]]", r("( ", n), r(" )", n)),
        ),
        ("[[ ! ]]", format!("[[ {}-f x ]]", r("! ", n))),
        ("coproc", format!("{}cat", r("coproc ", n))),
        (
            "coproc groups",
            format!("{}cat; {}", r("coproc { ", n), r("}; ", n)),
        ),
        (
            "process substitutions",
            format!("cat {}x{}", r("<(cat ", n), r(")", n)),
        ),
        ("arrays", format!("a=({}y{})", r("$(echo ", n), r(")", n))),
    ]
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    // 300 levels overflowed 2 MiB for most of these; the largest fill the
    // 64 KiB a command may have.
    for n in [300, 3_000, 12_000] {
        for (what, command) in nested(n) {
            // The schema's maxLength for a command.
            if command.len() > 65_536 {
                continue;
            }
            let d = decide(command);
            assert_eq!(d.verdict, Verdict::Deny, "{what} x{n}: {}", d.reason);
            assert_eq!(
                d.rule.as_deref(),
                Some("floor:hidden-command"),
                "{what} x{n}: {}",
                d.reason
            );
            assert!(
                d.reason.contains("levels deep"),
                "{what} x{n}: {}",
                d.reason
            );
        }
    }
}

#[test]
fn ordinary_nesting_is_still_analysed() {
    for (what, command) in nested(6) {
        let d = decide(command);
        assert_ne!(
            d.rule.as_deref(),
            Some("floor:hidden-command"),
            "{what}: {}",
            d.reason
        );
    }
    // Under the estimate's limit of 64 (`coproc {` counts twice), only the walk's own limit of 8
    // nested programs (substitutions) applies.
    for (what, command) in nested(30) {
        let d = decide(command);
        assert!(
            !d.reason.contains("the gate checks"),
            "{what}: {}",
            d.reason
        );
    }
}

#[test]
fn exponential_backtracking_is_cut_short() {
    // `((` then a run of `(`: the grammar tried 2^n ways (26 took 7 s, 40
    // would take hours). It now remembers what it tried, and every parse
    // has a step budget besides (vendor/brush-parser/TOLLGATE.md, patch 9).
    for n in [26, 40, 60] {
        let d = decide(format!("(({}", "(".repeat(n)));
        assert_eq!(d.verdict, Verdict::Deny, "{n}: {}", d.reason);
        assert_eq!(d.rule.as_deref(), Some("floor:unparseable"), "{}", d.reason);
    }
}

#[test]
fn a_here_document_cut_off_at_the_end_ends_in_an_error() {
    // `<<`, a tag of one carriage return, no line after it: the tokenizer
    // moved an empty token to the tag's pending list forever (found by the
    // fuzz target; vendor/brush-parser/TOLLGATE.md, patch 10).
    for command in [
        "x<<\r y ",
        "x <<\r y z ",
        "\u{fffd}<<\r \u{fffd}ush ori-g\0\0\0 ",
    ] {
        let d = decide(command.to_string());
        assert_eq!(d.verdict, Verdict::Deny, "{command:?}: {}", d.reason);
        assert_eq!(d.rule.as_deref(), Some("floor:unparseable"), "{}", d.reason);
        assert!(d.reason.contains("here document"), "{}", d.reason);
    }
}

// Inputs on which brush-parser 0.4.0 panicked (an `unwrap` on a number that
// overflows, or on a character that is not there). The engine caught those
// panics and refused the command, but each one printed a panic message on the
// supervisor's stderr, with a backtrace captured when RUST_BACKTRACE is set
// (half a second of CPU each), and an agent could send them in a loop. The
// vendored parser now answers each with a parse or an error
// (vendor/brush-parser/TOLLGATE.md, patch 11). These tests call the parser
// directly, outside the engine's `catch_unwind`, so a panic fails them.

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
    let d = decide_in(
        "echo 99999999999>/etc/passwd".into(),
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
    let d = decide_in(
        "~99999999999999999999999 -rf x".into(),
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
        let d = decide(text.to_string());
        assert_eq!(d.verdict, Verdict::Deny, "{text:?}: {}", d.reason);
        assert_eq!(d.rule.as_deref(), Some("floor:unparseable"), "{}", d.reason);
    }
}
