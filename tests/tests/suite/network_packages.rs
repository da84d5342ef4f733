//! Package managers from inside a sandbox (docs/OPERATIONS.md "Network:
//! allowing your registries"): `npm install` and `pip install --target` run
//! through run_bash in a native sandbox whose `[network] allow` holds the
//! registry hosts this machine's clients are configured for, each read at
//! run time from the client itself (`npm config get registry`; pip's
//! `global.index-url`, else the index and file hosts pip reports as its
//! defaults). No registry's name is written here. The clients inside find
//! the wall through the proxy variables alone; what the host's clients are
//! configured with that the sandbox cannot see (the registry URL, a CA
//! file) is passed on the command line, read from the host's clients.
//!
//! A registry name that resolves to an address the SSRF guard refuses (a
//! mirror on a private or documentation range) gets exactly those
//! addresses in `allow_private`, as an operator would, said on stderr.
//!
//! Docker: the full sandbox image has neither npm nor pip (python3 without
//! its pip module); the development image (sandbox-image/build.sh --dev)
//! has both, and both install through the wall inside it. The host's CA
//! files are not in the container: copies go into the workspace and the
//! clients are pointed at them. A missing dev image skips, or fails under
//! TOLLGATE_REQUIRE_DOCKER_DEV=1 (suite::dev_image).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::ToSocketAddrs;

use serde_json::Value;
use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{NetworkConfig, NetworkPolicy};

use super::network_wall::Sess;

fn output(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    authority.split(':').next().unwrap().to_ascii_lowercase()
}

/// A client setting read from the host's client, `None` when unset.
fn set(v: String) -> Option<String> {
    (!v.is_empty() && v != "null" && v != "undefined").then_some(v)
}

/// npm's registry URL and CA file, as the host's npm reports them.
fn npm_config() -> (String, Option<String>) {
    let registry = output("npm", &["config", "get", "registry"]);
    assert!(registry.contains("://"), "npm's registry: {registry:?}");
    (registry, set(output("npm", &["config", "get", "cafile"])))
}

/// The value of `key` in pip's configuration, whatever its scope (a file's
/// `global.`, or `:env:.` from a `PIP_` variable): `pip config list`.
fn pip_setting(key: &str) -> Option<String> {
    let list = output("pip", &["config", "list"]);
    let v = list.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.rsplit('.').next() == Some(key)).then(|| v.trim_matches(['\'', '"']).to_string())
    });
    v.and_then(set)
}

/// pip's index URL (configured, else pip's default), the host its default
/// index serves files from, and its configured CA bundle.
fn pip_config() -> (String, Vec<String>, Option<String>) {
    let configured = pip_setting("index-url").unwrap_or_default();
    let script = "from pip._internal.models.index import PyPI; print(PyPI.simple_url); print(PyPI.file_storage_domain)";
    let defaults = output("python3", &["-c", script]);
    let mut lines = defaults.lines();
    let default_index = lines.next().unwrap_or_default().to_string();
    let index = if configured.contains("://") {
        configured
    } else {
        default_index
    };
    let mut hosts = vec![host_of(&index)];
    if let Some(files) = lines.next().map(host_of)
        && !hosts.contains(&files)
    {
        hosts.push(files);
    }
    (index, hosts, pip_setting("cert"))
}

/// The addresses `hosts` resolve to that the SSRF guard refuses.
fn private_addresses(hosts: &[String]) -> Vec<String> {
    let probe = NetworkPolicy::from_config(&NetworkConfig::default()).unwrap();
    let mut out = Vec::new();
    for h in hosts {
        for a in format!("{h}:443").to_socket_addrs().unwrap() {
            if let Err(why) = probe.vet_address(a.ip(), HostAddrs::none(), h) {
                eprintln!("allow_private gets {} ({why})", a.ip());
                out.push(a.ip().to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

fn start(hosts: &[String]) -> Supervisor {
    start_on(hosts, "native", "")
}

/// A supervisor on `backend` whose `[network]` allows `hosts`; `extra`
/// goes before it (a `[sandbox]` section).
fn start_on(hosts: &[String], backend: &str, extra: &str) -> Supervisor {
    let config = format!(
        "{extra}\n[network]\nallow = {}\nallow_private = {}\n\n[llm]\nprovider = \"script\"\n",
        toml_list(hosts),
        toml_list(&private_addresses(hosts))
    );
    Supervisor::builder()
        .config(&config)
        .sandbox(backend)
        .start()
}

/// The `open` records of `s` to `host`:443.
fn opened(s: &Sess<'_>, host: &str) -> Vec<Value> {
    s.net_records()
        .into_iter()
        .filter(|r| r["phase"] == "open" && r["host"] == host && r["port"] == 443)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_installs_a_real_package_inside_a_native_sandbox_through_the_wall() {
    if !root_or_skip("npm_installs_a_real_package_inside_a_native_sandbox_through_the_wall") {
        return;
    }
    let (registry, cafile) = npm_config();
    let host = host_of(&registry);
    let sup = start(std::slice::from_ref(&host));
    let ws = sup.dirs.workspace("npm", 0);
    let s = Sess::open(&sup, &ws, 0);
    let ca = cafile.map(|f| format!(" --cafile {f}")).unwrap_or_default();
    let cmd = format!(
        "npm install --registry {registry}{ca} --no-audit --no-fund --no-package-lock --fetch-retries 0 --update-notifier false --cache ./.npm-cache is-number@7.0.0 && cat node_modules/is-number/package.json | grep '\"version\"'"
    );
    let (out, code) = s.bash_for(&cmd, 600);
    assert_eq!(code, 0, "npm install in the sandbox: {out}");
    assert!(out.contains("\"version\": \"7.0.0\""), "{out}");
    assert!(ws.join("node_modules/is-number/package.json").exists());
    let recs = opened(&s, &host);
    assert!(!recs.is_empty(), "no connection to the registry recorded");
    assert!(
        recs.iter().all(|r| r["command"]
            .as_str()
            .unwrap_or_default()
            .contains("npm install")),
        "{recs:#?}"
    );
    // A registry host that is not allowed: refused with the line.
    let (out, code) = s.bash_for(
        "npm install --registry https://unlisted-mirror.example/ --no-audit --no-fund --fetch-retries 0 --cache ./.npm-cache is-odd@3.0.1",
        600,
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("network: refused unlisted-mirror.example:443 (not in [network] allow"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_a_real_package_inside_a_native_sandbox_from_its_index_and_file_hosts() {
    if !root_or_skip(
        "pip_installs_a_real_package_inside_a_native_sandbox_from_its_index_and_file_hosts",
    ) {
        return;
    }
    let (index, hosts, cert) = pip_config();
    let sup = start(&hosts);
    let ws = sup.dirs.workspace("pip", 0);
    let s = Sess::open(&sup, &ws, 0);
    let cert = cert.map(|f| format!(" --cert {f}")).unwrap_or_default();
    // --isolated: pip inside reads no configuration (no local wheels), only
    // what is given here and the proxy variables.
    let cmd = format!(
        "pip --isolated install --no-deps --no-cache-dir --retries 0 --disable-pip-version-check --index-url {index}{cert} --target ./pylib six==1.16.0 && PYTHONPATH=./pylib python3 -c 'import six; print(\"six\", six.__version__)'"
    );
    let (out, code) = s.bash_for(&cmd, 600);
    assert_eq!(code, 0, "pip install in the sandbox: {out}");
    assert!(out.contains("six 1.16.0"), "{out}");
    for h in &hosts {
        assert!(!opened(&s, h).is_empty(), "no connection to {h} recorded");
    }
}

/// ` --FLAG ./NAME` for a copy of the host's CA file `file` put in the
/// workspace `ws` (the container sees the workspace, not the host's /etc).
/// Not `*.pem`: the shell floor takes that for a key file.
fn ca_in(ws: &std::path::Path, file: Option<String>, flag: &str, name: &str) -> String {
    let Some(file) = file else {
        return String::new();
    };
    std::fs::copy(&file, ws.join(name)).unwrap_or_else(|e| panic!("copy {file}: {e}"));
    format!(" --{flag} ./{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_and_pip_install_real_packages_inside_a_docker_sandbox_through_the_wall() {
    let test = "npm_and_pip_install_real_packages_inside_a_docker_sandbox_through_the_wall";
    if !super::dev_image::dev_image_or_skip(test) {
        return;
    }
    let (registry, cafile) = npm_config();
    let (index, pip_hosts, cert) = pip_config();
    let npm_host = host_of(&registry);
    let mut hosts = vec![npm_host.clone()];
    hosts.extend(pip_hosts.iter().filter(|h| **h != npm_host).cloned());
    let extra = format!(
        "[sandbox]\nimage = \"{}\"\nmemory_mb = 1024\n",
        super::dev_image::dev_image()
    );
    let sup = start_on(&hosts, "docker", &extra);
    let ws = sup.dirs.workspace("docker-pkgs", 0);
    let s = Sess::open(&sup, &ws, 0);
    let ca = ca_in(&ws, cafile, "cafile", "npm-ca-bundle.crt");
    let cmd = format!(
        "npm install --registry {registry}{ca} --no-audit --no-fund --no-package-lock --fetch-retries 0 --update-notifier false --cache ./.npm-cache is-number@7.0.0 && grep '\"version\"' node_modules/is-number/package.json"
    );
    let (out, code) = s.bash_for(&cmd, 600);
    assert_eq!(code, 0, "npm install in the Docker sandbox: {out}");
    assert!(out.contains("\"version\": \"7.0.0\""), "{out}");
    assert!(ws.join("node_modules/is-number/package.json").exists());
    assert!(
        !opened(&s, &npm_host).is_empty(),
        "no connection to the registry recorded"
    );
    let cert = ca_in(&ws, cert, "cert", "pip-ca-bundle.crt");
    let cmd = format!(
        "pip --isolated install --no-deps --no-cache-dir --retries 0 --disable-pip-version-check --index-url {index}{cert} --target ./pylib six==1.16.0 && PYTHONPATH=./pylib python3 -c 'import six; print(\"six\", six.__version__)'"
    );
    let (out, code) = s.bash_for(&cmd, 600);
    assert_eq!(code, 0, "pip install in the Docker sandbox: {out}");
    assert!(out.contains("six 1.16.0"), "{out}");
    for h in &pip_hosts {
        assert!(!opened(&s, h).is_empty(), "no connection to {h} recorded");
    }
    // An index that is not allowed: refused, with the line.
    let (out, code) = s.bash_for(
        "pip --isolated install --no-deps --no-cache-dir --retries 0 --disable-pip-version-check --index-url https://unlisted-index.example/simple --target ./pylib2 six",
        600,
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("network: refused unlisted-index.example:443 (not in [network] allow"),
        "{out}"
    );
}
