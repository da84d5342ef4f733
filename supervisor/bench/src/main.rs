//! `tollgate-bench`: the binary `supervisorctl bench` runs (with the same
//! flags, docs/INTERFACES.md), so supervisorctl links no bench code and the
//! .deb ships none. Also serves `tollgate-bench __grpc-floor SOCKET`, the
//! bare gRPC server the bench starts from its own executable.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use unicode_width::UnicodeWidthStr as _;

/// Measure every figure of docs/PERFORMANCE.md against its baselines
/// (starts its own supervisors on a temporary directory; run as root).
#[derive(Debug, Parser)]
#[command(
    name = "supervisorctl bench",
    bin_name = "supervisorctl bench",
    version
)]
struct Cli {
    #[command(flatten)]
    args: tollgate_bench::Args,
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .get(1)
        .is_some_and(|a| a == tollgate_bench::FLOOR_SUBCOMMAND)
    {
        return tollgate_bench::floor_main(&argv[2..]);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("supervisorctl: bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(tollgate_bench::run(cli.args, PRINTER)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("supervisorctl: {}", escape(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}

/// supervisorctl's layout: the report looks like its other tables.
const PRINTER: tollgate_bench::Printer = tollgate_bench::Printer {
    line,
    table,
    escape,
};

/// One line on stdout; a reader that went away ends the run quietly with
/// 141, as supervisorctl does (docs/INTERFACES.md).
fn line(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let r = o
        .write_fmt(args)
        .and_then(|()| o.write_all(b"\n"))
        .and_then(|()| o.flush());
    match r {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(e) => {
            eprintln!("supervisorctl: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

/// Columns two spaces apart, each as wide as its widest cell on a terminal.
fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut lines: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    lines.extend(rows.iter().map(|r| r.iter().map(|c| escape(c)).collect()));
    let mut widths = vec![0usize; headers.len()];
    for r in &lines {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.width());
        }
    }
    for cells in &lines {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            out.push_str(c);
            if i + 1 < cells.len() {
                let w = widths.get(i).copied().unwrap_or(0);
                out.push_str(&" ".repeat(w.saturating_sub(c.width()) + 2));
            }
        }
        line(format_args!("{}", out.trim_end()));
    }
}

fn escape(s: &str) -> String {
    tollgate_policy::escape_for_display(s)
}
