//! The shell policy's lists: denied binaries (with the hint each category
//! gives the model), shells, interpreters, dangerous variables, build
//! directories and git settings that run commands.

/// Why a binary is denied; each category tells the model what to do instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeniedKind {
    Network,
    Privilege,
    Permissions,
    System,
    Containers,
    Tracing,
    /// Added by the supervisor's config (`extra_denied_binaries`).
    Config,
}

const NETWORK: &[&str] = &[
    "curl", "wget", "nc", "ncat", "netcat", "socat", "telnet", "ssh", "scp", "sftp", "ftp", "tftp",
    "lftp", "aria2c", "axel", "rsh", "rlogin", "rcp", "nmap", "http", "https", "xh", "httpie",
    "dig", "nslookup", "host", "whois",
];
const PRIVILEGE: &[&str] = &[
    "sudo", "su", "doas", "pkexec", "runuser", "setpriv", "chroot", "unshare", "nsenter", "capsh",
    "setcap", "newgrp", "sg",
];
const PERMISSIONS: &[&str] = &["chmod", "chown", "chgrp", "chattr", "setfacl"];
const SYSTEM: &[&str] = &[
    "mount",
    "umount",
    "swapon",
    "swapoff",
    "mkswap",
    "fdisk",
    "sfdisk",
    "cfdisk",
    "parted",
    "wipefs",
    "mke2fs",
    "losetup",
    "dmsetup",
    "cryptsetup",
    "debugfs",
    "insmod",
    "rmmod",
    "modprobe",
    "sysctl",
    "iptables",
    "ip6tables",
    "nft",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "init",
    "telinit",
    "systemctl",
    "service",
    "crontab",
    "at",
    "batch",
    "passwd",
    "chpasswd",
    "useradd",
    "userdel",
    "usermod",
    "groupadd",
    "groupdel",
    "visudo",
    "killall5",
];
const CONTAINERS: &[&str] = &[
    "docker", "podman", "kubectl", "nerdctl", "ctr", "crictl", "lxc", "virsh", "helm",
];
const TRACING: &[&str] = &["strace", "ltrace"];

/// FNV-1a: program names are short and the tables are fixed (lookups never
/// insert, so a chosen name cannot slow them), where SipHash's setup would
/// cost more than the hashing.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A fixed table keyed by program name.
pub(crate) type NameMap<V> =
    std::collections::HashMap<&'static str, V, std::hash::BuildHasherDefault<Fnv>>;

/// Program names from the config (`extra_denied_binaries`): built once,
/// looked up for every command.
pub(crate) type NameSet = std::collections::HashSet<String, std::hash::BuildHasherDefault<Fnv>>;

/// The built-in category of a denied binary name (a basename). One hash
/// lookup: a script names a command hundreds of times.
pub(crate) fn builtin_denied(name: &str) -> Option<DeniedKind> {
    static BY_NAME: std::sync::LazyLock<NameMap<DeniedKind>> = std::sync::LazyLock::new(|| {
        let lists = [
            (NETWORK, DeniedKind::Network),
            (PRIVILEGE, DeniedKind::Privilege),
            (PERMISSIONS, DeniedKind::Permissions),
            (SYSTEM, DeniedKind::System),
            (CONTAINERS, DeniedKind::Containers),
            (TRACING, DeniedKind::Tracing),
        ];
        let mut m = NameMap::default();
        // Reversed, so a name on two lists keeps the first list's kind.
        for (names, kind) in lists.into_iter().rev() {
            for n in names {
                m.insert(*n, kind);
            }
        }
        m
    });
    if let Some(kind) = BY_NAME.get(name) {
        return Some(*kind);
    }
    is_mkfs(name).then_some(DeniedKind::System)
}

/// `mkfs` and `mkfs.*`: on the denylist, and the `mkfs` dangerous pattern.
pub(crate) fn is_mkfs(name: &str) -> bool {
    name.starts_with("mkfs")
}

/// Whether a name is on the built-in denylist (what `allow_binaries` may lift).
pub(crate) fn is_builtin_denied(name: &str) -> bool {
    builtin_denied(name).is_some()
}

/// The reason given for a denied binary: what is refused, why, what instead.
pub(crate) fn denied_reason(name: &str, kind: DeniedKind) -> String {
    match kind {
        DeniedKind::Network => format!(
            "`{name}` is on the denied-binaries list: this supervisor has no [network] section, so the sandbox reaches no host. Use the webfetch tool for http(s) URLs, or ask the user to allow the hosts you need in the supervisor's [network] allow list."
        ),
        DeniedKind::Privilege => format!(
            "`{name}` is on the denied-binaries list; commands in the sandbox cannot change privileges or namespaces. Run the command itself, without `{name}`."
        ),
        DeniedKind::Permissions => format!(
            "`{name}` is on the denied-binaries list; the agent does not change file permissions or ownership. To run a script, call its interpreter (for example `sh script.sh`)."
        ),
        DeniedKind::System => format!(
            "`{name}` is on the denied-binaries list; it administers the host (disks, mounts, services, users or scheduled jobs) and has no place in a sandboxed task. Ask the user to do it."
        ),
        DeniedKind::Containers => format!(
            "`{name}` is on the denied-binaries list; container and cluster tools control the host. Ask the user to run it."
        ),
        DeniedKind::Tracing => format!(
            "`{name}` is on the denied-binaries list; tracing processes is not allowed in the sandbox."
        ),
        DeniedKind::Config => format!(
            "`{name}` is on this supervisor's denied-binaries list. Do the task without it, or ask the user."
        ),
    }
}

/// Shells whose `-c` string, heredoc or stdin is a program.
pub(crate) const SHELLS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "ash",
    "rbash",
    "posh",
    "yash",
    "fish",
    "csh",
    "tcsh",
    "busybox-sh",
];

/// Interpreters that read a program from stdin when given no script.
pub(crate) fn is_interpreter(name: &str) -> bool {
    matches!(
        name,
        "python"
            | "python2"
            | "python3"
            | "perl"
            | "ruby"
            | "node"
            | "nodejs"
            | "php"
            | "lua"
            | "tclsh"
            | "deno"
            | "bun"
    ) || (name.starts_with("python3.") && name[8..].bytes().all(|b| b.is_ascii_digit()))
}

/// Dynamic loaders: `ld-linux-x86-64.so.2 /usr/bin/curl` runs curl.
pub(crate) fn is_dynamic_loader(name: &str) -> bool {
    name == "ld.so"
        || ((name.starts_with("ld-") || name.starts_with("ld64")) && name.contains(".so"))
}

/// Variables whose assignment changes what later commands run.
pub(crate) const DANGEROUS_VARS: &[&str] = &[
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];

pub(crate) fn is_dangerous_var(name: &str) -> bool {
    DANGEROUS_VARS.contains(&name)
        || name.starts_with("GIT_CONFIG_KEY_")
        || name.starts_with("GIT_CONFIG_VALUE_")
}

/// Directories a build recreates: a recursive delete of one is routine.
pub(crate) fn is_build_dir(name: &str) -> bool {
    matches!(
        name,
        "target"
            | "build"
            | "dist"
            | "out"
            | "node_modules"
            | "__pycache__"
            | ".pytest_cache"
            | ".mypy_cache"
            | ".ruff_cache"
            | ".tox"
            | ".nox"
            | ".gradle"
            | ".next"
            | ".nuxt"
            | ".turbo"
            | ".parcel-cache"
            | ".cache"
            | "coverage"
            | "htmlcov"
            | "obj"
            | ".eggs"
            | "_build"
            | ".venv"
    ) || name.starts_with("cmake-build-")
        || name.ends_with(".egg-info")
}

/// Git settings whose value is a command (or a path to commands) that git
/// runs: in the sandbox when given with `-c`, on the host later when written
/// with `git config`.
pub(crate) fn git_key_runs_command(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    let exact = [
        "core.sshcommand",
        "core.fsmonitor",
        "core.hookspath",
        "core.pager",
        "core.editor",
        "core.askpass",
        "core.gitproxy",
        "credential.helper",
        "diff.external",
        "sequence.editor",
        "gpg.program",
        "uploadpack.packobjectshook",
        "interactive.difffilter",
        "include.path",
        "init.templatedir",
        "receive.procreceiverefs",
        "protocol.allow",
        "protocol.ext.allow",
    ];
    if exact.contains(&k.as_str()) {
        return true;
    }
    let parts: Vec<&str> = k.split('.').collect();
    let (first, last) = (parts.first().copied(), parts.last().copied());
    matches!(first, Some("alias" | "pager"))
        || (first == Some("includeif") && last == Some("path"))
        || (first == Some("credential") && last == Some("helper"))
        || (first == Some("filter") && matches!(last, Some("clean" | "smudge" | "process")))
        || (first == Some("merge") && last == Some("driver"))
        || (first == Some("diff") && matches!(last, Some("textconv" | "command")))
        || (matches!(first, Some("difftool" | "mergetool")) && last == Some("cmd"))
        || (first == Some("gpg") && last == Some("program"))
        || (first == Some("remote") && matches!(last, Some("uploadpack" | "receivepack" | "proxy")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(builtin_denied("curl"), Some(DeniedKind::Network));
        assert_eq!(builtin_denied("mkfs.ext4"), Some(DeniedKind::System));
        assert_eq!(builtin_denied("sudo"), Some(DeniedKind::Privilege));
        assert_eq!(builtin_denied("chmod"), Some(DeniedKind::Permissions));
        assert_eq!(builtin_denied("docker"), Some(DeniedKind::Containers));
        assert_eq!(builtin_denied("cargo"), None);
        assert_eq!(builtin_denied("curlie-not"), None);
    }

    #[test]
    fn reasons_say_what_to_do_without_a_prefix() {
        let r = denied_reason("curl", DeniedKind::Network);
        assert_eq!(
            r,
            "`curl` is on the denied-binaries list: this supervisor has no [network] section, so the sandbox reaches no host. Use the webfetch tool for http(s) URLs, or ask the user to allow the hosts you need in the supervisor's [network] allow list."
        );
        assert!(!r.to_lowercase().starts_with("permission denied"));
    }

    #[test]
    fn git_command_keys() {
        for k in [
            "core.sshCommand",
            "core.fsmonitor",
            "alias.x",
            "filter.lfs.smudge",
            "diff.foo.textconv",
            "credential.https://x.helper",
            "includeIf.gitdir:/x/.path",
        ] {
            assert!(git_key_runs_command(k), "{k}");
        }
        for k in ["push.default", "user.name", "core.autocrlf", "color.ui"] {
            assert!(!git_key_runs_command(k), "{k}");
        }
    }

    #[test]
    fn loaders_interpreters_build_dirs() {
        assert!(is_dynamic_loader("ld-linux-x86-64.so.2"));
        assert!(is_dynamic_loader("ld.so"));
        assert!(!is_dynamic_loader("ld"));
        assert!(is_interpreter("python3.11"));
        assert!(!is_interpreter("python3.x"));
        assert!(is_build_dir("target"));
        assert!(is_build_dir("foo.egg-info"));
        assert!(!is_build_dir("src"));
    }
}
