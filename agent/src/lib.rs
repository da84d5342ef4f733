//! tollgate-agent: the unprivileged LLM loop.
//!
//! The agent holds one session token and nothing else: no API key, no sandbox, no
//! file access of its own. It asks the supervisor for everything over gRPC on a Unix
//! socket (model calls through the Chat proxy, tools through CallTool) and runs only
//! the planning tools and questions itself, which touch no host state. It must never
//! execute a tool, read a workspace file or reach the network directly, and never
//! print model or workspace text to a terminal without escaping it.

#![forbid(unsafe_code)]

pub mod approval;
pub mod call;
pub mod cli;
pub mod client;
pub mod context;
pub mod demo;
pub mod error;
pub mod hook;
pub mod mcp;
pub mod mcp_gateway;
pub mod model_text;
pub mod planning;
pub mod prompt;
pub mod runner;
pub mod session;
pub mod term;
pub mod text;
pub mod wire;
