//! tollgate-e2e support
#![forbid(unsafe_code)]
