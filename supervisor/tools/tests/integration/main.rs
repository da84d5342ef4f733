//! tollgate-tools integration tests: real files in temp dirs, real
//! credentials (as root the tools run as uid 65534), a real symlink race and
//! a real HTTP server on 127.0.0.1. One binary, a module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod corpus;
mod fetch;
mod files;
mod owner;
mod race;
mod search;
