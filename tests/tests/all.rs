//! The end-to-end suite as one test binary (one link, one process): the real
//! supervisor, supervisorctl and agent binaries over real sockets, with real
//! sandboxes. Each file of `suite/` is one area; the support modules beside
//! this file are shared by them. Tests run in parallel in this one process,
//! so anything global a test creates (netns, cgroup, container and user
//! names, /tmp paths, process markers) carries the pid and a name of its own.
//!
//! `cargo test -p tollgate-e2e --test all -- AREA::` runs one area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;
mod mcp_support;

mod suite {
    mod agent_approvals;
    mod agent_mock;
    mod agent_perf;
    mod agent_scripted;
    mod approvals;
    mod audit_secrets;
    mod caches;
    mod client_hooks;
    mod clients;
    mod credentials;
    mod dev_image;
    mod devenv;
    mod disk;
    mod docker_run_bash;
    mod escape;
    mod etc_replaced;
    mod git_exposed;
    mod git_routed;
    mod jobs;
    mod kill_switch;
    mod mcp_agent;
    mod mcp_clients;
    mod mcp_gateway;
    mod mcp_gateway_net;
    mod network_git;
    mod network_ops;
    mod network_packages;
    mod network_routed;
    mod network_wall;
    mod ops;
    mod own_host;
    mod refusals;
    mod robustness;
    mod run_bash;
    mod sandbox_exec;
    mod secrets;
    mod socket_activation;
    mod supervisor;
    mod telemetry;
    mod webfetch;
}
