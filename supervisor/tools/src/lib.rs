//! tollgate-tools: the tools that run on the supervisor's side of the wall.
//!
//! File tools (read_file, write_file, edit_file, glob_files, grep) run as the
//! session owner, beneath the workspace, with the kernel enforcing "beneath"
//! (openat2 RESOLVE_BENEATH through cap-std), so a symlink swapped in after the
//! policy check cannot escape. webfetch connects only to addresses the policy
//! vetted and re-vets every redirect hop.
//!
//! It makes no policy decisions: the daemon's `pep.rs` decides, then calls here.
#![forbid(unsafe_code)]
