//! What the agent reports about itself in its `Hello`: read from
//! /proc/self/status, so the supervisor can refuse a container whose pid 1
//! runs with privileges (every command inherits them).

use crate::wire::{Hello, VERSION};

fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Parses the fields of a /proc/<pid>/status text; a field that is missing
/// or unreadable reads as "all bits set" (never as harmless).
pub fn from_status(status: &str, pid: u32) -> Hello {
    let num = |name: &str| -> u32 {
        field(status, name)
            .and_then(|v| v.split_ascii_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX)
    };
    let cap = |name: &str| -> u64 {
        field(status, name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(u64::MAX)
    };
    Hello {
        version: VERSION,
        pid,
        uid: num("Uid"),
        gid: num("Gid"),
        no_new_privs: num("NoNewPrivs"),
        seccomp: num("Seccomp"),
        caps: [
            cap("CapInh"),
            cap("CapPrm"),
            cap("CapEff"),
            cap("CapBnd"),
            cap("CapAmb"),
        ],
    }
}

/// This process's own posture.
pub fn own(pid: u32) -> Hello {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    from_status(&status, pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_and_missing_ones_are_never_harmless() {
        let s = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1001\t1001\t1001\t1001\n\
                 CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
                 CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n\
                 CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
        let h = from_status(s, 1);
        assert_eq!(
            (h.pid, h.uid, h.gid, h.no_new_privs, h.seccomp, h.caps),
            (1, 1000, 1001, 1, 2, [0; 5])
        );
        let h = from_status("Uid:\t0\t0\t0\t0\n", 1);
        assert_eq!(h.uid, 0);
        assert_eq!(
            (h.no_new_privs, h.seccomp, h.caps),
            (u32::MAX, u32::MAX, [u64::MAX; 5])
        );
    }
}
