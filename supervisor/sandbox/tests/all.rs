//! The sandbox crate's integration tests as one test binary: both backends
//! against real namespaces, Landlock, seccomp and a real Docker engine.
//! `common/` holds the shared setup; each file of `suite/` is one area
//! (`cargo test -p tollgate-sandbox --test all -- AREA::` runs one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod suite {
    mod docker;
    mod docker_agent;
    mod docker_bench;
    mod docker_engine;
    mod docker_escape;
    mod etc_live;
    mod git;
    mod host_exec;
    mod interactive;
    mod refusals;
    mod sandbox;
}
