//! The development image (sandbox-image/build.sh --dev, docs in
//! sandbox-image/README.md): through the whole path on the Docker backend,
//! its compilers, make, python3 with pip and venv, node and npm, git, curl,
//! jq, ripgrep and pkg-config work in the workspace (curl and ssh are
//! there, refused by the shell floor without `[network]`); it has no setuid
//! or setgid file and no su, sudo or pkexec; the walls hold (no network).
//! A missing image fails under TOLLGATE_REQUIRE_DOCKER_DEV=1, which CI
//! sets: CI builds the dev image (`.ci/run`, from the full image's rootfs);
//! elsewhere it skips, saying so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tollgate_e2e::harness::{Supervisor, TEST_CONFIG, docker, docker_or_skip, root_or_skip};

pub(crate) fn dev_image() -> String {
    format!("tollgate-sandbox:{}-dev", env!("CARGO_PKG_VERSION"))
}

pub(crate) fn dev_image_or_skip(test: &str) -> bool {
    if !root_or_skip(test) || !docker_or_skip(test) {
        return false;
    }
    if docker(&["image", "inspect", "--format", "{{.Id}}", &dev_image()]).is_some() {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_DOCKER_DEV").as_deref() == Ok("1") {
        panic!(
            "{test}: {} is missing (sandbox-image/build.sh --dev)",
            dev_image()
        );
    }
    eprintln!(
        "{test}: skipped: {} is missing (sandbox-image/build.sh --dev)",
        dev_image()
    );
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_image_builds_and_runs_what_developers_use_inside_the_walls() {
    let test = "the_dev_image_builds_and_runs_what_developers_use_inside_the_walls";
    if !dev_image_or_skip(test) {
        return;
    }
    let config = format!(
        "{TEST_CONFIG}\n[sandbox]\nimage = \"{}\"\nmemory_mb = 1024\n",
        dev_image()
    );
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = sup.open_skip_session(&ws).await;
    let run = |command: &'static str| {
        let sup = &sup;
        let token = s.token.clone();
        async move {
            let r = sup
                .call_tool(
                    &token,
                    "run_bash",
                    json!({"command": command, "timeout_s": 120}),
                )
                .await;
            assert!(r.denied.is_none(), "{command}: {r:?}");
            r
        }
    };
    let tools = run(
        "cc --version && c++ --version && make --version && pkg-config --version && \
         git --version && jq --version && rg --version && \
         node --version && npm --version && python3 -m pip --version && \
         test -x /usr/bin/curl && test -x /usr/bin/ssh && echo TOOLS-OK",
    )
    .await;
    assert!(tools.output.contains("TOOLS-OK"), "{}", tools.output);
    let build = run(
        "printf '#include <stdio.h>\\nint main(void){puts(\"built-and-ran\");return 0;}\\n' > t.c \
         && printf 't: t.c\\n\\tcc -O2 -o t t.c\\n' > Makefile && make -s && ./t",
    )
    .await;
    assert!(build.output.contains("built-and-ran"), "{}", build.output);
    let venv = run(
        "python3 -m venv .venv && .venv/bin/python -c 'import sys; print(\"venv\", sys.prefix != sys.base_prefix)' \
         && echo 'console.log(41+1)' > hi.js \
         && printf '{\"name\":\"t\",\"version\":\"1.0.0\",\"scripts\":{\"hi\":\"node hi.js\"}}' > package.json \
         && npm run hi 2>&1",
    )
    .await;
    assert!(
        venv.output.contains("venv True") && venv.output.contains("\n42\n"),
        "{venv:?}"
    );
    let setid = run(
        "find / -xdev \\( -perm -4000 -o -perm -2000 \\) -type f 2>/dev/null | wc -l; \
         for p in su sudo pkexec; do test -e /usr/bin/$p || test -e /bin/$p || echo no-$p; done",
    )
    .await;
    let lines: Vec<&str> = setid.output.lines().collect();
    assert_eq!(
        lines.first().map(|l| l.trim()),
        Some("0"),
        "{}",
        setid.output
    );
    for p in ["no-su", "no-sudo", "no-pkexec"] {
        assert!(setid.output.contains(p), "{}", setid.output);
    }
    let net = run(
        "python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 80), 5)' 2>/dev/null \
         && echo REACHED || echo NO-NET",
    )
    .await;
    assert!(net.output.contains("NO-NET"), "{}", net.output);
}

/// `[sandbox] image = "devcontainer"`: the workspace's
/// `.devcontainer/devcontainer.json` names the image, used only when the
/// engine has it and the file is unchanged since the session opened;
/// otherwise the configured default (the full image) runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devcontainer_image_is_used_only_when_present_and_unchanged() {
    let test = "a_devcontainer_image_is_used_only_when_present_and_unchanged";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let full = format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"));
    if docker(&["image", "inspect", "--format", "{{.Id}}", &full]).is_none() {
        assert!(
            std::env::var("TOLLGATE_REQUIRE_DOCKER_FULL").as_deref() != Ok("1"),
            "{full} is missing (sandbox-image/build.sh)"
        );
        eprintln!("{test}: skipped: {full} is missing");
        return;
    }
    let named = format!("tollgate-e2e/devcontainer:{}", std::process::id());
    assert!(docker(&["tag", &tollgate_e2e::harness::minimal_image(), &named]).is_some());
    let config = format!("{TEST_CONFIG}\n[sandbox]\nimage = \"devcontainer\"\n");
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .start();
    let flavor = |name: &'static str, image: String, change: bool| {
        let sup = &sup;
        async move {
            let ws = sup.dirs.workspace(name, 0);
            std::fs::create_dir(ws.join(".devcontainer")).unwrap();
            let file = ws.join(".devcontainer/devcontainer.json");
            std::fs::write(
                &file,
                format!("{{\n  // named\n  \"image\": \"{image}\",\n}}\n"),
            )
            .unwrap();
            let s = sup.open_skip_session(&ws).await;
            if change {
                std::fs::write(&file, format!("{{\"image\": \"{image}\"}}")).unwrap();
            }
            let r = sup
                .call_tool(
                    &s.token,
                    "run_bash",
                    json!({"command": "cat /etc/tollgate-sandbox"}),
                )
                .await;
            assert!(r.ok, "{r:?}");
            r.output
        }
    };
    let used = flavor("named", named.clone(), false).await;
    let changed = flavor("changed", named.clone(), true).await;
    let absent = flavor("absent", "tollgate-e2e/never-built:1".to_string(), false).await;
    docker(&["rmi", &named]);
    assert!(
        used.contains("flavor=minimal"),
        "the named image was not used: {used}"
    );
    assert!(
        changed.contains("flavor=full"),
        "a changed file still named the image: {changed}"
    );
    assert!(absent.contains("flavor=full"), "{absent}");
    assert!(
        docker(&["image", "inspect", "tollgate-e2e/never-built:1"]).is_none(),
        "an image was pulled"
    );
}
