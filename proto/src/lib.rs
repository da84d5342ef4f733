//! tollgate-proto: the wire types of tollgate's gRPC contract, generated from
//! `tollgate.proto`, the supervisor's ready line ([`ready`]) and the names
//! of the numbers `status` holds ([`metrics`]). It owns no behaviour: no
//! validation, no policy, no I/O. Every other crate speaks to
//! the supervisor through these types.

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

pub mod metrics;
pub mod text;
pub mod words;

/// A refusal carried by a gRPC status (docs/INTERFACES.md, "Refusals in a
/// status"): the message keeps its `CODE: reason` text, and the status's
/// details hold the typed [`Denial`], so a client reads the code without
/// parsing the text.
pub mod refusal {
    use prost::Message;

    use crate::v1::{Denial, DenialCode};

    /// The status for `denial`, with gRPC code `grpc`.
    pub fn status(grpc: tonic::Code, denial: &Denial) -> tonic::Status {
        let code = DenialCode::try_from(denial.code).unwrap_or(DenialCode::Unspecified);
        let message = format!("{}: {}", code.as_str_name(), denial.reason);
        tonic::Status::with_details(grpc, message, denial.encode_to_vec().into())
    }

    /// The typed refusal a status carries, if it carries one.
    pub fn of(status: &tonic::Status) -> Option<Denial> {
        let details = status.details();
        if details.is_empty() {
            return None;
        }
        Denial::decode(details).ok()
    }
}

/// The line the supervisor prints on stderr once both sockets accept
/// (docs/INTERFACES.md): `supervisor: ready agent=<path> operator=<path>
/// sandbox=<backend>`. Printed with [`ready::ReadyLine`]'s `Display`, read
/// back with [`ready::ReadyLine::parse`]: one copy of the format for the
/// supervisor, the agent's demo, the bench and the tests.
pub mod ready {
    use std::fmt;
    use std::path::PathBuf;

    /// What every ready line starts with.
    pub const PREFIX: &str = "supervisor: ready ";

    /// The supervisor's ready line.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ReadyLine {
        pub agent: PathBuf,
        pub operator: PathBuf,
        /// The sandbox backend: `native` or `docker`.
        pub sandbox: String,
    }

    impl ReadyLine {
        /// The ready line in `line` (without its newline); `None` for any
        /// other line.
        pub fn parse(line: &str) -> Option<ReadyLine> {
            let rest = line.strip_prefix(PREFIX)?.strip_prefix("agent=")?;
            let (agent, rest) = rest.split_once(" operator=")?;
            let (operator, sandbox) = rest.rsplit_once(" sandbox=")?;
            Some(ReadyLine {
                agent: PathBuf::from(agent),
                operator: PathBuf::from(operator),
                sandbox: sandbox.to_string(),
            })
        }

        /// True for a ready line, whatever its fields.
        pub fn is_ready(line: &str) -> bool {
            line.starts_with(PREFIX)
        }
    }

    impl fmt::Display for ReadyLine {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "{PREFIX}agent={} operator={} sandbox={}",
                self.agent.display(),
                self.operator.display(),
                self.sandbox
            )
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_printed_line_parses_back_to_the_same_fields() {
            let line = ReadyLine {
                agent: PathBuf::from("/run/tollgate/agent.sock"),
                operator: PathBuf::from("/run/tollgate/operator.sock"),
                sandbox: "native".to_string(),
            };
            let text = line.to_string();
            assert_eq!(
                text,
                "supervisor: ready agent=/run/tollgate/agent.sock operator=/run/tollgate/operator.sock sandbox=native"
            );
            assert_eq!(ReadyLine::parse(&text), Some(line));
        }

        #[test]
        fn paths_with_spaces_survive_the_round_trip() {
            let line = ReadyLine {
                agent: PathBuf::from("/tmp/a b/agent.sock"),
                operator: PathBuf::from("/tmp/a b/operator.sock"),
                sandbox: "docker".to_string(),
            };
            assert_eq!(ReadyLine::parse(&line.to_string()), Some(line));
        }

        #[test]
        fn other_lines_are_not_ready_lines() {
            for l in [
                "",
                "supervisor: starting",
                "supervisor: ready",
                "supervisor: ready agent=/a",
                "supervisor: ready agent=/a operator=/b",
                "x supervisor: ready agent=/a operator=/b sandbox=native",
            ] {
                assert_eq!(ReadyLine::parse(l), None, "{l:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_survives_the_status() {
        let d = Denial {
            code: DenialCode::AuditUnavailable as i32,
            reason: "cannot open the session's audit log: EIO".to_string(),
            rule: "floor:audit".to_string(),
            consequence: String::new(),
            destructive: false,
        };
        let s = refusal::status(tonic::Code::Unavailable, &d);
        assert_eq!(
            s.message(),
            "AUDIT_UNAVAILABLE: cannot open the session's audit log: EIO"
        );
        assert_eq!(refusal::of(&s), Some(d));
        assert_eq!(refusal::of(&tonic::Status::unavailable("x")), None);
    }
}
