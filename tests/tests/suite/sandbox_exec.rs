//! `supervisorctl sandbox exec`: its output goes through the same streaming
//! redaction as every other output path, on any bytes (docs/THREAT_MODEL.md,
//! "Redaction"), on both backends.

use std::path::Path;

use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_e2e::sandbox_exec::sandbox_exec;

/// A Latin-1 `settings.ini` (bytes that are not UTF-8) holding an AWS key
/// and a Stripe key in the rule table's shapes; the Stripe key is built
/// here, so no key-shaped literal sits in the file.
pub fn latin1_settings() -> (Vec<u8>, Vec<u8>) {
    let stripe = format!("sk_{}_{}", "live", "4eC39HqLyjWDarjtT1zdp7dc");
    let mut file =
        b"[caf\xe9]\nuser=Andr\xe9 M\xfcller\naws_key_id=AKIAIOSFODNN7EXAMPLE\xa0\nstripe="
            .to_vec();
    file.extend_from_slice(stripe.as_bytes());
    file.extend_from_slice(b"\n\xff\xfe fin\n");
    let want = b"[caf\xe9]\nuser=Andr\xe9 M\xfcller\naws_key_id=[REDACTED:aws-access-key]\xa0\nstripe=[REDACTED:stripe-key]\n\xff\xfe fin\n".to_vec();
    (file, want)
}

fn docker_required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1")
}

fn exec_cat(sup: &Supervisor, ws: &Path, backend: &str) -> Option<Vec<u8>> {
    let out = sandbox_exec(sup, ws, backend, &["cat", "settings.ini"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if backend == "docker" && !docker_required() && stderr.contains("SANDBOX_UNAVAILABLE") {
        eprintln!("skipped docker: {stderr}");
        return None;
    }
    assert!(
        out.status.success(),
        "sandbox exec --backend {backend}: {stderr}"
    );
    Some(out.stdout)
}

/// The finding: a chunk holding one byte that is not UTF-8 skipped
/// redaction, so a Latin-1 file gave its keys in clear.
#[test]
fn sandbox_exec_masks_secrets_in_latin1_output_on_both_backends() {
    if !root_or_skip("sandbox_exec_masks_secrets_in_latin1_output_on_both_backends") {
        return;
    }
    let sup = Supervisor::builder().sandbox("native").start();
    let ws = sup.dirs.workspace("ws", 0);
    let (file, want) = latin1_settings();
    std::fs::write(ws.join("settings.ini"), &file).unwrap();
    for backend in ["native", "docker"] {
        let Some(got) = exec_cat(&sup, &ws, backend) else {
            continue;
        };
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{backend}"
        );
        assert_eq!(got, want, "{backend}: every other byte unchanged");
    }
}
