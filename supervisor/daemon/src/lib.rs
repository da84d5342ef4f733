//! tollgate-supervisor: the only trusted process.
//!
//! It owns the gRPC services on agent.sock and operator.sock, sessions and
//! their credentials, approvals, the LLM proxy, and `pep.rs`: the one place
//! that calls the policy engine, then the audit log, then a sandbox backend or
//! a tool executor. It must never run a tool whose decision record was not
//! written, never hand a secret to the agent, and never weaken a sandbox.

#![forbid(unsafe_code)]

pub mod activation;
pub mod agent_service;
pub mod approvals;
pub mod auth;
pub mod backends;
pub mod chat;
pub mod conn;
pub mod credentials;
pub mod disk;
pub mod events;
pub mod hooks;
pub mod host_addrs;
pub mod llm;
pub mod mcp_gateway;
pub mod operator_service;
pub mod pep;
pub mod refusals;
pub mod secrets;
pub mod server;
pub mod sessions;
pub mod supervisor;
pub mod telemetry;
pub mod workspace;
