//! Redacts 1 MiB of `tollgate_audit::bench_input` text K times: a fixed
//! workload for instruction counts, which a loaded machine does not move
//! (docs/PERFORMANCE.md):
//!
//! ```text
//! cargo build --release -p tollgate-audit --example redact_mib
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/redact_mib typical 3     # and … typical 1
//! ```
//!
//! (count(3) − count(1)) ÷ 2 is one MiB, without building the redactor.

fn main() {
    let mut args = std::env::args().skip(1);
    let text = match args.next().as_deref() {
        Some("typical") => tollgate_audit::bench_input::typical_output(1 << 20),
        Some("dense") => tollgate_audit::bench_input::dense_output(1 << 20),
        _ => {
            eprintln!("usage: redact_mib typical|dense TIMES");
            std::process::exit(2);
        }
    };
    let Some(times) = args.next().and_then(|k| k.parse::<usize>().ok()) else {
        eprintln!("usage: redact_mib typical|dense TIMES");
        std::process::exit(2);
    };
    let redactor = tollgate_audit::Redactor::new(tollgate_audit::bench_input::host_secrets());
    let mut bytes = 0;
    for _ in 0..times {
        bytes += redactor.redact_cow(std::hint::black_box(&text)).len();
    }
    println!("{bytes} bytes out");
}
