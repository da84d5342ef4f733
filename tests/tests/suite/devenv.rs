//! A development environment inside the walls (docs/INTERFACES.md,
//! run_bash; docs/THREAT_MODEL.md, "The sandbox's environment"): command
//! lines run in bash where the sandbox has it (both backends), `sh` only
//! where it has not, and the tool's description says which; a command
//! killed at its timeout is `ok: false` with code TIMEOUT and its partial
//! output; a timeout above the cap is refused naming the cap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::harness::{Supervisor, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

const CONFIG: &str = r#"
[sandbox]
run_timeout_s = 20
max_run_timeout_s = 30

[llm]
provider = "script"
"#;

/// The full (Debian) image: it has bash.
fn full_image() -> String {
    format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"))
}

fn docker_config(image: &str) -> String {
    CONFIG.replace("[sandbox]\n", &format!("[sandbox]\nimage = \"{image}\"\n"))
}

async fn open(sup: &Supervisor, name: &str) -> pb::OpenSessionResponse {
    let ws = sup.dirs.workspace(name, 0);
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: "dangerouslySkipPermissions".to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

async fn bash(
    sup: &Supervisor,
    token: &str,
    command: &str,
    t: Option<u64>,
) -> pb::CallToolResponse {
    let mut args = serde_json::json!({ "command": command });
    if let Some(t) = t {
        args["timeout_s"] = t.into();
    }
    sup.call_tool(token, "run_bash", args).await
}

async fn run_bash_description(sup: &Supervisor, token: &str) -> String {
    let mut c = sup.agent_client().await;
    let tools = c
        .list_tools(tollgate_e2e::harness::authed(
            pb::ListToolsRequest {},
            token,
        ))
        .await
        .unwrap()
        .into_inner()
        .tools;
    tools
        .into_iter()
        .find(|t| t.name == "run_bash")
        .expect("run_bash listed")
        .description
}

/// What bash has and dash has not: `[[ ]]`, arrays, process substitution,
/// pipefail, `source`.
const BASH_FEATURES: &str = r#"[[ -d . && abc == a* ]] && echo dbl-bracket
arr=(one two three); echo "array=${#arr[@]} ${arr[1]}"
cat <(echo procsub)
set -o pipefail; false | true; echo "pipefail=$?"
echo 'sourced=yes' > /tmp/lib.sh; source /tmp/lib.sh; echo "sourced=$sourced"
echo "shell=${BASH_VERSION:+bash}""#;

fn assert_bash_features(r: &pb::CallToolResponse, what: &str) {
    assert!(r.ok, "{what}: {r:?}");
    for want in [
        "dbl-bracket\n",
        "array=3 two\n",
        "procsub\n",
        "pipefail=1\n",
        "sourced=yes\n",
        "shell=bash\n",
    ] {
        assert!(
            r.output.contains(want),
            "{what}: no {want:?} in:\n{}",
            r.output
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_bash_runs_bash_natively_and_says_so() {
    if !root_or_skip("run_bash_runs_bash_natively_and_says_so") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, BASH_FEATURES, None).await;
    assert_bash_features(&r, "native");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(d.contains("with bash (`bash -c`)"), "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_bash_runs_bash_in_an_image_with_bash_and_sh_in_one_without() {
    let test = "run_bash_runs_bash_in_an_image_with_bash_and_sh_in_one_without";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(&docker_config(&full_image()))
        .sandbox("docker")
        .start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, BASH_FEATURES, None).await;
    assert_bash_features(&r, "docker, full image");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(d.contains("with bash (`bash -c`)"), "{d}");
    drop(sup);

    // The minimal image is busybox: no bash, so `sh -c`, and the
    // description says so once the backend has seen the image.
    let sup = Supervisor::builder()
        .config(&docker_config(&tollgate_e2e::harness::minimal_image()))
        .sandbox("docker")
        .start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, "echo \"shell=${BASH_VERSION:-none}\"", None).await;
    assert!(r.ok && r.output == "shell=none\n", "{r:?}");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(
        d.contains("with sh (`sh -c`; this sandbox has no bash"),
        "{d}"
    );
}

async fn timeouts_are_honest(sup: &Supervisor, what: &str) {
    let s = open(sup, "ws").await;
    let r = bash(sup, &s.token, "echo started; sleep 30; echo never", Some(1)).await;
    assert!(!r.ok, "{what}: a timed-out command is not ok: {r:?}");
    assert_eq!(r.code, "TIMEOUT", "{what}: {r:?}");
    assert!(
        r.output.starts_with("started\n"),
        "{what}: partial output kept: {r:?}"
    );
    assert!(!r.output.contains("never"), "{what}: {r:?}");
    assert!(r.error.contains("timed out after 1s"), "{what}: {r:?}");
    // Above the cap: refused, naming the cap; nothing ran.
    let r = bash(sup, &s.token, "touch ran-anyway", Some(3600)).await;
    assert!(!r.ok && r.code.is_empty(), "{what}: {r:?}");
    assert!(
        r.error
            .contains("timeout_s 3600 is above this host's cap of 30s"),
        "{what}: {r:?}"
    );
    let r = bash(sup, &s.token, "ls ran-anyway 2>&1 || echo absent", None).await;
    assert!(r.output.contains("absent"), "{what}: {r:?}");
    // Within the cap, an ordinary command is ok with its exit code.
    let r = bash(sup, &s.token, "exit 3", Some(30)).await;
    assert!(
        r.ok && r.exit_code == Some(3) && r.code.is_empty(),
        "{what}: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_command_is_not_ok_and_a_timeout_above_the_cap_is_refused() {
    if !root_or_skip("a_timed_out_command_is_not_ok_and_a_timeout_above_the_cap_is_refused") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    timeouts_are_honest(&sup, "native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_timeouts_are_honest_too() {
    let test = "docker_timeouts_are_honest_too";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(&docker_config(&full_image()))
        .sandbox("docker")
        .start();
    timeouts_are_honest(&sup, "docker").await;
}
