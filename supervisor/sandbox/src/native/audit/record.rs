//! One kernel audit record, as the audit netlink socket delivers it: the
//! message type, then text `audit(<secs>.<ms>:<serial>): key=value ...`.
//! Only what attribution needs is parsed: Landlock's two record types
//! (docs.kernel.org, admin-guide/LSM/landlock: `LANDLOCK_ACCESS` with
//! `domain`, `blockers`, `path`; `LANDLOCK_DOMAIN` with `status`, and
//! `pid`, `comm` when allocated, `denials` when deallocated), the event's
//! `SYSCALL` (`pid`, `comm`), `PROCTITLE` and its end (`EOE`); the
//! seccomp filter's `SECCOMP` record (`ses`, `pid`, `comm`, `arch`,
//! `syscall`, `sig`: a standalone event, no end record) and a command's
//! `LOGIN` record (its new `ses`).
//!
//! Everything here is untrusted: a sandboxed program chooses its paths,
//! its name and its argv. Strings the kernel logs with
//! `audit_log_untrustedstring` are quoted when plain and hex otherwise;
//! both are decoded to raw bytes. Nothing is assumed to be UTF-8.

pub(crate) const AUDIT_LOGIN: u16 = 1006;
pub(crate) const AUDIT_SYSCALL: u16 = 1300;
pub(crate) const AUDIT_SECCOMP: u16 = 1326;
/// `ses=` of a process whose loginuid was never set.
pub(crate) const NO_SESSION: u32 = u32::MAX;
/// `AUDIT_ARCH_X86_64`, as `arch=` says it.
pub(crate) const ARCH_X86_64: u32 = 0xc000_003e;
pub(crate) const AUDIT_EOE: u16 = 1320;
pub(crate) const AUDIT_PROCTITLE: u16 = 1327;
pub(crate) const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
pub(crate) const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;

/// What one record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Access {
        domain: u64,
        blockers: Vec<String>,
        /// `path=` (or `name=` for a dentry), raw bytes.
        path: Option<Vec<u8>>,
    },
    Allocated {
        domain: u64,
        pid: Option<u32>,
        comm: Vec<u8>,
    },
    Deallocated {
        domain: u64,
        denials: u64,
    },
    Syscall {
        pid: Option<u32>,
        comm: Option<Vec<u8>>,
    },
    /// argv[0] of the process (up to the first NUL of `proctitle=`).
    Proctitle {
        argv0: Vec<u8>,
    },
    Eoe,
    /// A process's loginuid was set: its new audit session.
    Login {
        ses: u32,
    },
    /// The seccomp filter refused (or killed) a call.
    Seccomp {
        ses: u32,
        pid: Option<u32>,
        comm: Option<Vec<u8>>,
        arch: u32,
        syscall: u32,
    },
}

/// A record with the serial number of its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub serial: u64,
    pub record: Record,
}

/// Parses a record of one of the types above; `None` for any other type
/// or a record that does not parse.
pub(crate) fn parse(kind: u16, text: &[u8]) -> Option<Parsed> {
    let (serial, body) = header(text)?;
    let record = match kind {
        AUDIT_LANDLOCK_ACCESS => access(body)?,
        AUDIT_LANDLOCK_DOMAIN => domain(body)?,
        AUDIT_SYSCALL => Record::Syscall {
            pid: field(body, "pid").and_then(number),
            comm: field(body, "comm").and_then(untrusted),
        },
        AUDIT_PROCTITLE => {
            let t = field(body, "proctitle").and_then(untrusted)?;
            let end = t.iter().position(|&b| b == 0).unwrap_or(t.len());
            Record::Proctitle {
                argv0: t[..end].to_vec(),
            }
        }
        AUDIT_EOE => Record::Eoe,
        AUDIT_LOGIN if field(body, "res") == Some(b"1") => Record::Login {
            ses: field(body, "ses").and_then(number)?,
        },
        AUDIT_SECCOMP => Record::Seccomp {
            ses: field(body, "ses").and_then(number).unwrap_or(NO_SESSION),
            pid: field(body, "pid").and_then(number),
            comm: field(body, "comm").and_then(untrusted),
            arch: field(body, "arch")
                .and_then(hex_number)
                .and_then(|a| u32::try_from(a).ok())?,
            syscall: field(body, "syscall").and_then(number)?,
        },
        _ => return None,
    };
    Some(Parsed { serial, record })
}

/// `audit(1729738800.268:30): ` -> (30, the rest).
fn header(text: &[u8]) -> Option<(u64, &[u8])> {
    let text = text.strip_suffix(b"\0").unwrap_or(text);
    let rest = text.strip_prefix(b"audit(")?;
    let close = rest.iter().position(|&b| b == b')')?;
    let stamp = &rest[..close];
    let colon = stamp.iter().position(|&b| b == b':')?;
    let serial = number(&stamp[colon + 1..])?;
    let body = rest[close + 1..]
        .strip_prefix(b":")
        .unwrap_or(&rest[close + 1..]);
    Some((serial, body))
}

fn access(body: &[u8]) -> Option<Record> {
    let domain = field(body, "domain").and_then(hex_number)?;
    let blockers = field(body, "blockers")?;
    let blockers = std::str::from_utf8(blockers).ok()?;
    let path = field(body, "path")
        .or_else(|| field(body, "name"))
        .and_then(untrusted);
    Some(Record::Access {
        domain,
        blockers: blockers.split(',').map(str::to_string).collect(),
        path,
    })
}

fn domain(body: &[u8]) -> Option<Record> {
    let domain = field(body, "domain").and_then(hex_number)?;
    match field(body, "status")? {
        b"allocated" => Some(Record::Allocated {
            domain,
            pid: field(body, "pid").and_then(number),
            comm: field(body, "comm").and_then(untrusted).unwrap_or_default(),
        }),
        b"deallocated" => Some(Record::Deallocated {
            domain,
            denials: field(body, "denials").and_then(number).unwrap_or(0),
        }),
        _ => None,
    }
}

/// The value of `key=` in a record body. Values hold no spaces (the kernel
/// hex-encodes any string with one), so fields split on spaces.
fn field<'a>(body: &'a [u8], key: &str) -> Option<&'a [u8]> {
    body.split(|&b| b == b' ').find_map(|tok| {
        tok.strip_prefix(key.as_bytes())
            .and_then(|r| r.strip_prefix(b"="))
    })
}

/// A string the kernel logged as untrusted: `"plain"` or hex bytes.
fn untrusted(v: &[u8]) -> Option<Vec<u8>> {
    if let Some(q) = v.strip_prefix(b"\"") {
        return Some(q.strip_suffix(b"\"").unwrap_or(q).to_vec());
    }
    if v == b"(null)" || !v.len().is_multiple_of(2) {
        return None;
    }
    v.chunks(2)
        .map(|p| {
            let s = std::str::from_utf8(p).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}

fn number<T: std::str::FromStr>(v: &[u8]) -> Option<T> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn hex_number(v: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(v).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landlock_access_record() {
        let p = parse(
            AUDIT_LANDLOCK_ACCESS,
            b"audit(1729738800.221:34): domain=1a6fdc679 blockers=fs.write_file path=\"/etc/passwd\" dev=\"vda2\" ino=143821",
        )
        .unwrap();
        assert_eq!(p.serial, 34);
        assert_eq!(
            p.record,
            Record::Access {
                domain: 0x1a6fdc679,
                blockers: vec!["fs.write_file".into()],
                path: Some(b"/etc/passwd".to_vec()),
            }
        );
    }

    #[test]
    fn several_blockers_and_a_hex_path_with_escapes_and_invalid_utf8() {
        let raw: &[u8] = b"/tmp/a b\x1b[31m\xff";
        let hex: String = raw.iter().map(|b| format!("{b:02X}")).collect();
        let text = format!(
            "audit(1.2:7): domain=ff blockers=fs.make_reg,fs.refer path={hex} dev=\"vda2\" ino=1"
        );
        let p = parse(AUDIT_LANDLOCK_ACCESS, text.as_bytes()).unwrap();
        let Record::Access { blockers, path, .. } = p.record else {
            panic!("{p:?}")
        };
        assert_eq!(blockers, ["fs.make_reg", "fs.refer"]);
        assert_eq!(path.as_deref(), Some(raw));
    }

    #[test]
    fn domain_records() {
        let a = parse(
            AUDIT_LANDLOCK_DOMAIN,
            b"audit(1.2:33): domain=1a6fdc679 status=allocated mode=enforcing pid=289 uid=0 exe=\"/root/sandboxer\" comm=\"tgabc\"",
        )
        .unwrap();
        assert_eq!(
            a.record,
            Record::Allocated {
                domain: 0x1a6fdc679,
                pid: Some(289),
                comm: b"tgabc".to_vec()
            }
        );
        let d = parse(
            AUDIT_LANDLOCK_DOMAIN,
            b"audit(1.3:35): domain=1a6fdc679 status=deallocated denials=2",
        )
        .unwrap();
        assert_eq!(
            d.record,
            Record::Deallocated {
                domain: 0x1a6fdc679,
                denials: 2
            }
        );
    }

    #[test]
    fn syscall_proctitle_and_eoe() {
        let s = parse(
            AUDIT_SYSCALL,
            b"audit(1.2:34): arch=c000003e syscall=257 success=no exit=-13 ppid=272 pid=289 auid=0 uid=0 comm=\"sh\" exe=\"/bin/sh\"",
        )
        .unwrap();
        assert_eq!(
            s.record,
            Record::Syscall {
                pid: Some(289),
                comm: Some(b"sh".to_vec())
            }
        );
        let t = parse(
            AUDIT_PROCTITLE,
            b"audit(1.2:34): proctitle=7368002D63006563686F",
        )
        .unwrap();
        assert_eq!(
            t.record,
            Record::Proctitle {
                argv0: b"sh".to_vec()
            }
        );
        assert_eq!(
            parse(AUDIT_EOE, b"audit(1.2:34): \0").unwrap().record,
            Record::Eoe
        );
    }

    #[test]
    fn seccomp_and_login_records() {
        let s = parse(
            AUDIT_SECCOMP,
            b"audit(1.2:9): auid=0 uid=0 gid=0 ses=12 pid=23702 comm=\"unshare\" exe=\"/usr/bin/unshare\" sig=0 arch=c000003e syscall=272 compat=0 ip=0x7fbcfed68829 code=0x50000",
        )
        .unwrap();
        assert_eq!(
            s.record,
            Record::Seccomp {
                ses: 12,
                pid: Some(23702),
                comm: Some(b"unshare".to_vec()),
                arch: ARCH_X86_64,
                syscall: 272
            }
        );
        let l = parse(
            AUDIT_LOGIN,
            b"audit(1.2:8): pid=23702 uid=0 old-auid=4294967295 auid=0 tty=(none) old-ses=4294967295 ses=1 res=1",
        )
        .unwrap();
        assert_eq!(l.record, Record::Login { ses: 1 });
        assert_eq!(
            parse(AUDIT_LOGIN, b"audit(1.2:8): pid=1 old-ses=4 ses=5 res=0"),
            None
        );
        assert_eq!(parse(AUDIT_SECCOMP, b"audit(1.2:9): ses=1 pid=2"), None);
    }

    #[test]
    fn garbage_does_not_parse() {
        for bad in [
            &b""[..],
            b"audit(",
            b"audit(1.2:x): domain=1 blockers=fs.read_file",
            b"audit(1.2:3): blockers=fs.read_file",
            b"audit(1.2:3): domain=zz blockers=fs.read_file",
        ] {
            assert_eq!(parse(AUDIT_LANDLOCK_ACCESS, bad), None, "{bad:?}");
        }
        assert_eq!(parse(1100, b"audit(1.2:3): x=1"), None);
        // An odd-length hex path is not a path.
        let p = parse(
            AUDIT_LANDLOCK_ACCESS,
            b"audit(1.2:3): domain=1 blockers=fs.read_file path=ABC",
        )
        .unwrap();
        assert!(matches!(p.record, Record::Access { path: None, .. }));
    }
}
