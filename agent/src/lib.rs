//! tollgate-agent
#![forbid(unsafe_code)]
