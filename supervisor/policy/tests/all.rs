//! The policy crate's integration tests as one test binary: the engine's
//! decisions, the adversarial corpus, parser attacks and random inputs
//! (`cargo test -p tollgate-policy --test all -- AREA::` runs one area).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite {
    mod corpus;
    mod engine;
    mod parser_attacks;
    mod random;
}
