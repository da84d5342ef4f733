//! The helper binary the native backend's tests re-execute:
//! `sandbox_init __sandbox-init --control-fd N`. The real supervisor does the
//! same from its own `main`, as its first statement.

fn main() -> std::process::ExitCode {
    tollgate_sandbox::native::init_main()
}
