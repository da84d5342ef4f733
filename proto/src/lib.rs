//! tollgate-proto: the wire types of tollgate's gRPC contract, generated from
//! `tollgate.proto`. It owns no behaviour: no validation, no policy, no I/O.
//! Every other crate speaks to the supervisor through these types.

#![forbid(unsafe_code)]
#![allow(clippy::all, clippy::unwrap_used, clippy::expect_used)]

/// Version 1 of the contract.
pub mod v1 {
    tonic::include_proto!("tollgate.v1");

    /// Encoded file descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("tollgate_descriptor");
}

pub use v1::*;
