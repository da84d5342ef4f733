//! Builds the Docker backend's resident exec agent (`supervisor/exec-agent`)
//! as a statically linked binary, so it runs in any image, the busybox one
//! with no libc included.
//!
//! A workspace build cannot link one crate statically and the rest not, so
//! this runs a second cargo on the agent alone, `--target <this target>` with
//! `-C target-feature=+crt-static` (static glibc; the agent uses no NSS and
//! no dlopen), in a target directory of its own under OUT_DIR. The binary is
//! then copied next to the workspace's binaries (`target/<profile>/`), where
//! the supervisor looks for it, and its path is compiled in as
//! `TOLLGATE_EXEC_AGENT_BUILT` for tests whose executables live elsewhere.
//!
//! When the static build fails (no static glibc: `apt-get install
//! libc6-dev`), the crate still builds: `TOLLGATE_EXEC_AGENT_BUILD_ERROR`
//! carries the reason, and the Docker backend refuses sandboxes with it.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = "tollgate-exec-agent";

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let agent = manifest.join("../exec-agent");
    let workspace = manifest.join("../..");
    for p in ["src", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", agent.join(p).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );
    println!("cargo:rerun-if-env-changed=TOLLGATE_EXEC_AGENT_SKIP_BUILD");

    let (built, error) = if std::env::var_os("TOLLGATE_EXEC_AGENT_SKIP_BUILD").is_some() {
        (
            String::new(),
            "the static exec agent was not built (TOLLGATE_EXEC_AGENT_SKIP_BUILD is set)"
                .to_string(),
        )
    } else {
        match build(&workspace) {
            Ok(p) => (p.display().to_string(), String::new()),
            Err(e) => {
                println!("cargo:warning=the docker backend's exec agent was not built: {e}");
                (String::new(), e)
            }
        }
    };
    println!("cargo:rustc-env=TOLLGATE_EXEC_AGENT_BUILT={built}");
    println!("cargo:rustc-env=TOLLGATE_EXEC_AGENT_BUILD_ERROR={error}");
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

fn build(workspace: &Path) -> Result<PathBuf, String> {
    let out = PathBuf::from(env("OUT_DIR"));
    let target = env("TARGET");
    if !target.contains("linux-gnu") {
        return Err(format!(
            "target {target} is not linux-gnu; build {BIN} statically by hand"
        ));
    }
    let target_dir = out.join("exec-agent");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace)
        .args(["build", "--release", "--offline", "--locked", "--quiet"])
        .args([
            "-p",
            "tollgate-exec-agent",
            "--features",
            "static-bin",
            "--bin",
            BIN,
        ])
        .arg("--target")
        .arg(&target)
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings are not the agent's.
    for k in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false");
    let res = cmd
        .output()
        .map_err(|e| format!("running cargo for {BIN}: {e}"))?;
    if !res.status.success() {
        let stderr = String::from_utf8_lossy(&res.stderr);
        let last: Vec<&str> = stderr.lines().rev().take(6).collect();
        let last: Vec<&str> = last.into_iter().rev().collect();
        return Err(format!(
            "cargo build of {BIN} (static) failed: {}; install static glibc (apt-get install libc6-dev)",
            last.join(" | ")
        ));
    }
    let bin = target_dir.join(&target).join("release").join(BIN);
    if !bin.is_file() {
        return Err(format!("{} is missing after the build", bin.display()));
    }
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out: three levels up
    // is where cargo puts the workspace's binaries.
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return Ok(bin);
    };
    let dest = profile_dir.join(BIN);
    match install(&bin, &dest) {
        Ok(()) => Ok(dest),
        Err(e) => {
            println!(
                "cargo:warning=could not copy {BIN} to {}: {e}; using {}",
                dest.display(),
                bin.display()
            );
            Ok(bin)
        }
    }
}

/// Copies `from` to `to` through a temporary file and a rename, unless `to`
/// already holds the same bytes.
fn install(from: &Path, to: &Path) -> std::io::Result<()> {
    let new = std::fs::read(from)?;
    if std::fs::read(to).is_ok_and(|old| old == new) {
        return Ok(());
    }
    let tmp = to.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &new)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, to)
}
