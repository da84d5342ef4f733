//! The resident exec agent (see the library's docs). Built statically.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(tollgate_exec_agent::main_with_args(&args));
}
