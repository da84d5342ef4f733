//! tollgate-supervisor: the only trusted process.
#![forbid(unsafe_code)]
