//! Parses every file under the given directories with the vendored
//! brush-parser and with the published 0.4.0, with extglob off and on, and
//! compares the two results' Debug text (the whole tree or the error, source
//! positions included). Exits 1 if any differ.
//!
//! cargo run --release --manifest-path scripts/brush-diff/Cargo.toml -- \
//!     supervisor/policy/fuzz/corpus/shell_command

use std::process::ExitCode;

/// `fn $name(script, extglob) -> String`: the Debug text of what crate
/// `$krate` makes of the script ("panic" if it panics). One body for both
/// crates, whose types are distinct.
macro_rules! parse_with {
    ($name:ident, $krate:ident) => {
        fn $name(s: &str, extglob: bool) -> String {
            let o = $krate::ParserOptions {
                enable_extended_globbing: extglob,
                ..Default::default()
            };
            std::panic::catch_unwind(|| {
                format!(
                    "{:?}",
                    $krate::Parser::new(s.as_bytes(), &o).parse_program()
                )
            })
            .unwrap_or_else(|_| "panic".to_string())
        }
    };
}

parse_with!(vendored, brush_parser);
parse_with!(published, brush_parser_published);

fn main() -> ExitCode {
    // brush-parser may panic on odd input; both sides are caught and compared.
    std::panic::set_hook(Box::new(|_| {}));
    let (mut parses, mut errors, mut differ) = (0u64, 0u64, 0u64);
    for dir in std::env::args().skip(1) {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("brush-diff: {dir}: {e}");
                return ExitCode::FAILURE;
            }
        };
        for entry in entries.flatten() {
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes).into_owned();
            for input in [
                text.clone(),
                format!("{text}\n{text}"),
                text.replace('\0', " "),
            ] {
                for extglob in [false, true] {
                    let (v, p) = (vendored(&input, extglob), published(&input, extglob));
                    parses += 1;
                    errors += u64::from(!v.starts_with("Ok"));
                    if v != p {
                        differ += 1;
                        if differ <= 5 {
                            eprintln!(
                                "differs on {input:?} (extglob {extglob}):\n vendored:  {v:.300}\n published: {p:.300}"
                            );
                        }
                    }
                }
            }
        }
    }
    println!("{parses} parses compared ({errors} of them errors), {differ} differ");
    if differ == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
