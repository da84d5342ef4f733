//! The promise, tested in-process: for every channel, the exact sequence of
//! records a call leaves, and that nothing runs unless its decision was
//! recorded first (docs/ARCHITECTURE.md "The PEP pipeline"). A recording
//! sandbox backend runs nothing; the audit log is a real one in a
//! temporary directory. Nothing here needs root.

mod fixture;
mod network;
mod promise;
