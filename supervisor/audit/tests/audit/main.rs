//! Integration tests of tollgate-audit: real files, real fsyncs, a real
//! tmpfs for the full-disk case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chain;
mod common;
mod concurrency;
mod disk_full;
mod fixture;
mod missing;
mod permissions;
mod redaction_rules;
mod redaction_stream;
mod report;
mod schema;
mod tail;
mod tamper;
