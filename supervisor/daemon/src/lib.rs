//! tollgate-supervisor: the only trusted process.
//!
//! It owns the gRPC services on agent.sock and operator.sock, sessions and
//! their credentials, approvals, the LLM proxy, and the gate
//! (`tollgate_gate`, entered through `pep.rs`): the one place that calls the
//! policy engine, then the audit log, then a sandbox backend or a tool
//! executor. `wire.rs` is the only place the gate's types become protobuf. It must never run a tool whose decision record was not
//! written, never hand a secret to the agent, and never weaken a sandbox.

#![forbid(unsafe_code)]

// The library exports only what the `supervisor` binary calls, so the
// compiler reports dead code in the modules below again.
pub use activation::take_passed;
pub use check::{ConfigFault, EX_CONFIG, check_config, load_config};
pub use doctor::main as doctor;
pub use server::{Options, run};

// The session, its credentials and the approvals table are the gate's.
use tollgate_gate::{approvals, credentials};

mod activation;
mod agent_service;
mod auth;
mod backends;
mod caches;
mod chat;
mod check;
mod conn;
mod counters;
mod devcontainer;
mod disk;
mod doctor;
mod events;
mod hooks;
mod host_addrs;
mod identity;
mod llm;
mod llm_key;
pub mod logging;
mod mcp_gateway;
// The network wall's gate (docs/INTERFACES.md "[network]").
mod network;
mod operator_service;
mod pep;
mod policy_handle;
mod refusals;
mod reload;
mod sandbox_env;
mod secret_env;
mod secret_store;
mod secrets;
mod server;
mod sessions;
mod shared_paths;
mod supervisor;
mod telemetry;
mod wall;
mod wire;
mod workspace;
