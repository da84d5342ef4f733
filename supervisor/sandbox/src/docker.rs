//! The Docker backend: one hardened container per session, through bollard.
//! (Being built; see issue 8.)
