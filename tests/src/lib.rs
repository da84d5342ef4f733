//! tollgate-e2e: support for the end-to-end tests in `tests/tests/`. They start
//! the real `supervisor` on a temporary state dir and drive it with the real
//! `supervisorctl` and `agent` binaries and a tonic client, over real sockets.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod clients;
pub mod escape;
pub mod harness;
pub mod mock_anthropic;
pub mod mock_http;
pub mod mock_openai;
pub mod mock_responses;
pub mod model_mock;
pub mod net_host;
pub mod sandbox_exec;
