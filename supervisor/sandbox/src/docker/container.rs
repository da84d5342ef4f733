//! The container a session gets: every setting of docs/OPERATIONS.md "The Docker
//! sandbox", built as
//! one `ContainerCreateBody` (pure, so it is unit-tested field by field).
//!
//! Its pid 1 is the resident exec agent, bind-mounted read-only from the
//! host at [`CONTAINER_BINARY`] (the image's own files never run as pid 1),
//! with the supervisor's one-connection socket bind-mounted read-only at
//! [`CONTAINER_SOCKET`].

use std::collections::HashMap;
use std::path::Path;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};

use super::agent::{CONTAINER_BINARY, CONTAINER_SOCKET};
use super::verify::PlannedMount;
use crate::{SandboxError, SandboxSpec};

/// Every session container carries this label with the session id.
pub const LABEL_SESSION: &str = "tollgate.session";
/// ... and this one, set to "1".
pub const LABEL_MANAGED: &str = "tollgate.managed";
/// ... and the state dir of the supervisor that made it, so `reap_orphans`
/// touches only its own leftovers when several supervisors share one engine.
pub const LABEL_OWNER: &str = "tollgate.state-dir";

/// The host files behind the resident exec agent: its executable and the
/// socket it connects to (both mounted read-only), and the split git
/// directories it keeps links and special files out of
/// (`tollgate_exec_agent::links`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFiles {
    pub binary: std::path::PathBuf,
    pub socket: std::path::PathBuf,
    pub no_links_beneath: Vec<std::path::PathBuf>,
    /// The git identity file, bind-mounted read-only at `~/.gitconfig` of
    /// the private home (`git_identity`); `None`: no identity.
    pub gitconfig: Option<std::path::PathBuf>,
}

/// pid 1 of every container: the resident exec agent, told where its socket
/// is and which git directories to guard.
pub fn agent_cmd(agent: &AgentFiles) -> Result<Vec<String>, SandboxError> {
    let mut v = vec![
        CONTAINER_BINARY.to_string(),
        "--socket".to_string(),
        CONTAINER_SOCKET.to_string(),
    ];
    for g in &agent.no_links_beneath {
        v.push(tollgate_exec_agent::links::ARG.to_string());
        v.push(utf8(g)?.to_string());
    }
    Ok(v)
}

const MIB: i64 = 1024 * 1024;

/// The container name for a session.
pub fn container_name(session_id: &str) -> String {
    format!("tollgate-{session_id}")
}

/// Session ids name containers: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn check_session_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "session id {id:?} cannot name a container (1-64 of A-Z a-z 0-9 - _)"
        )))
    }
}

fn to_i64(v: u64, what: &str) -> Result<i64, SandboxError> {
    i64::try_from(v).map_err(|_| SandboxError::Refused(format!("{what} {v} is too large")))
}

fn utf8(p: &Path) -> Result<&str, SandboxError> {
    p.to_str().ok_or_else(|| {
        SandboxError::Refused(format!(
            "{} is not valid UTF-8 (docker cannot mount it)",
            p.display()
        ))
    })
}

/// A read-only bind of a single host file at `target`.
pub(super) fn file_bind(source: &Path, target: &str) -> Result<Mount, SandboxError> {
    Ok(Mount {
        target: Some(target.to_string()),
        source: Some(utf8(source)?.to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            non_recursive: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The create body for one session. `mounts[0]` is the checked, canonical
/// workspace (also the working directory), the rest are read-only binds
/// beneath it; each is mounted at its own path. `agent`: the resident exec
/// agent's host files. `seccomp` is the compacted profile JSON.
pub fn create_body(
    spec: &SandboxSpec,
    mounts: &[PlannedMount],
    agent: &AgentFiles,
    image: &str,
    owner: &Path,
    seccomp: &str,
) -> Result<ContainerCreateBody, SandboxError> {
    let ws = utf8(
        &mounts
            .first()
            .ok_or_else(|| SandboxError::Refused("no workspace to mount".to_string()))?
            .path,
    )?;
    let mut binds = bind_mounts(mounts, agent)?;
    if let (Some(file), Some(home)) = (&agent.gitconfig, &spec.private_home) {
        binds.push(file_bind(file, utf8(&home.path.join(".gitconfig"))?)?);
    }
    let owner = owner.to_string_lossy().into_owned();
    let env = container_env(spec)?;
    let host_config = host_config(spec, binds, seccomp)?;
    let labels = HashMap::from([
        (LABEL_SESSION.to_string(), spec.session_id.clone()),
        (LABEL_MANAGED.to_string(), "1".to_string()),
        (LABEL_OWNER.to_string(), owner),
    ]);
    Ok(ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(Vec::new()),
        entrypoint: Some(agent_cmd(agent)?),
        user: Some(format!("{}:{}", spec.uid, spec.gid)),
        working_dir: Some(ws.to_string()),
        env: Some(env),
        labels: Some(labels),
        hostname: Some("sandbox".to_string()),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        open_stdin: Some(false),
        tty: Some(false),
        stop_signal: Some("SIGKILL".to_string()),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// The planned mounts, each at its own path, then the exec agent's binary
/// and socket.
fn bind_mounts(mounts: &[PlannedMount], agent: &AgentFiles) -> Result<Vec<Mount>, SandboxError> {
    let mut binds = Vec::with_capacity(mounts.len());
    for m in mounts {
        binds.push(Mount {
            target: Some(utf8(&m.path)?.to_string()),
            source: Some(utf8(&m.source)?.to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                // Only the source's own filesystem: a mount someone placed
                // beneath it shows up as an empty directory, not its content.
                non_recursive: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    binds.push(file_bind(&agent.binary, CONTAINER_BINARY)?);
    binds.push(file_bind(&agent.socket, CONTAINER_SOCKET)?);
    Ok(binds)
}

/// The spec's environment as `K=V`, refusing what Docker cannot carry.
fn container_env(spec: &SandboxSpec) -> Result<Vec<String>, SandboxError> {
    let mut env = Vec::with_capacity(spec.env.len());
    for (k, v) in &spec.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SandboxError::Refused(format!(
                "environment variable {k:?} cannot be passed to a container"
            )));
        }
        env.push(format!("{k}={v}"));
    }
    Ok(env)
}

/// /tmp, the private home, and the directories between the home and a
/// bind beneath it: every tmpfs of the container, path to options.
fn tmpfs_mounts(
    spec: &SandboxSpec,
    binds: &[Mount],
) -> Result<HashMap<String, String>, SandboxError> {
    let l = &spec.limits;
    // /tmp: private, sized, counted against the memory limit. Not noexec: the
    // workspace is writable and executable anyway, and build tools and test
    // runners execute from /tmp.
    let mut tmpfs = HashMap::from([(
        "/tmp".to_string(),
        format!("rw,nosuid,nodev,size={}m,mode=1777", l.tmp_mb),
    )]);
    // The private home (docs/THREAT_MODEL.md, "The sandbox's environment"):
    // empty, the session's, sized like /tmp; its toolchains are read-only
    // binds beneath it (docker.rs), which the engine mounts after it.
    if let Some(h) = &spec.private_home {
        tmpfs.insert(
            utf8(&h.path)?.to_string(),
            format!(
                "rw,nosuid,nodev,size={}m,mode=0700,uid={},gid={}",
                l.tmp_mb, spec.uid, spec.gid
            ),
        );
        // The engine makes a missing mount point's parents as root: each
        // directory between the home and a bind beneath it is a tmpfs of
        // the session's instead (as natively: the home's own directories
        // are the owner's), so `~/.cargo` stays writable around a
        // read-only `~/.cargo/bin`.
        let targets = binds.iter().filter_map(|m| m.target.as_deref());
        for dir in crate::home_dirs::above(&h.path, targets.map(Path::new)) {
            tmpfs.insert(
                utf8(&dir)?.to_string(),
                format!(
                    "rw,nosuid,nodev,size={}m,mode={:04o},uid={},gid={}",
                    l.tmp_mb,
                    crate::home_dirs::MODE,
                    spec.uid,
                    spec.gid
                ),
            );
        }
    }
    Ok(tmpfs)
}

/// The walls: no network, read-only rootfs, a private /tmp, every
/// capability dropped, no-new-privileges and the seccomp profile, the
/// limits (all of which must be set), the mounts.
fn host_config(
    spec: &SandboxSpec,
    binds: Vec<Mount>,
    seccomp: &str,
) -> Result<HostConfig, SandboxError> {
    let l = &spec.limits;
    if l.memory_mb == 0 || l.pids == 0 || l.cpus_millis == 0 || l.tmp_mb == 0 {
        return Err(SandboxError::Refused(format!(
            "sandbox limits must all be set (memory_mb {}, pids {}, cpus_millis {}, tmp_mb {})",
            l.memory_mb, l.pids, l.cpus_millis, l.tmp_mb
        )));
    }
    let memory = to_i64(l.memory_mb, "memory_mb")?.saturating_mul(MIB);
    let fsize = to_i64(l.fsize_mb, "fsize_mb")?.saturating_mul(MIB);
    let nofile = to_i64(l.nofile, "nofile")?;
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(v),
        hard: Some(v),
    };
    let tmpfs = tmpfs_mounts(spec, &binds)?;
    Ok(HostConfig {
        network_mode: Some("none".to_string()),
        // Forwarded egress: the allowed names point at the listeners the
        // supervisor opens in the container's own namespace (egress.rs).
        extra_hosts: spec.egress.as_ref().map(|e| {
            e.hosts
                .iter()
                .map(|(name, ip)| format!("{name}:{ip}"))
                .collect()
        }),
        // The network wall: the DNS stub the supervisor serves in the
        // container's own namespace (wall.rs).
        dns: spec
            .wall
            .then(|| vec![crate::wall::DNS_STUB.ip().to_string()]),
        readonly_rootfs: Some(true),
        tmpfs: Some(tmpfs),
        cap_drop: Some(vec!["ALL".to_string()]),
        cap_add: None,
        privileged: Some(false),
        security_opt: Some(vec![
            "no-new-privileges:true".to_string(),
            format!("seccomp={seccomp}"),
        ]),
        memory: Some(memory),
        // memory + swap = memory: no swap.
        memory_swap: Some(memory),
        pids_limit: Some(to_i64(l.pids, "pids")?),
        nano_cpus: Some(to_i64(l.cpus_millis, "cpus_millis")?.saturating_mul(1_000_000)),
        ulimits: Some(vec![
            ulimit("nofile", nofile),
            ulimit("fsize", fsize),
            ulimit("core", 0),
        ]),
        mounts: Some(binds),
        binds: None,
        volumes_from: None,
        devices: None,
        // The agent is pid 1 itself: it reaps, and a pid namespace's init
        // cannot be killed from inside (a command's `kill -9 -1` spares it).
        init: Some(false),
        ipc_mode: Some("private".to_string()),
        pid_mode: None,
        userns_mode: None,
        uts_mode: None,
        shm_size: Some(64 * MIB),
        // The sandbox is killed before the supervisor when memory runs out.
        oom_score_adj: Some(500),
        auto_remove: Some(false),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".to_string()),
            config: None,
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;
    use std::path::PathBuf;

    fn ws_mounts() -> Vec<PlannedMount> {
        vec![
            PlannedMount {
                path: PathBuf::from("/srv/w"),
                source: PathBuf::from("/srv/w"),
                read_only: false,
                dev: 1,
                ino: 2,
            },
            PlannedMount {
                path: PathBuf::from("/srv/w/.git/hooks"),
                source: PathBuf::from("/srv/w/.git/hooks"),
                read_only: true,
                dev: 1,
                ino: 3,
            },
        ]
    }

    fn agent() -> AgentFiles {
        AgentFiles {
            binary: PathBuf::from("/opt/tollgate/tollgate-exec-agent"),
            socket: PathBuf::from("/st/exec-agent/abc.sock"),
            no_links_beneath: Vec::new(),
            gitconfig: None,
        }
    }

    fn spec() -> SandboxSpec {
        SandboxSpec {
            session_id: "abcDEF012-_x".to_string(),
            workspace: PathBuf::from("/srv/w"),
            workspace_id: None,
            uid: 1000,
            gid: 1001,
            env: vec![
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("AGENT_SESSION_ID".to_string(), "abcDEF012-_x".to_string()),
            ],
            limits: Limits {
                memory_mb: 512,
                pids: 64,
                cpus_millis: 1500,
                nofile: 256,
                fsize_mb: 100,
                tmp_mb: 32,
            },
            hidden: vec![],
            host_exec: Vec::new(),
            git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
            home: None,
            egress: None,
            private_home: None,
            lease: Default::default(),
            wall: false,
            image: None,
            extra_ca: None,
        }
    }

    #[test]
    fn every_brief_setting_is_in_the_body() {
        let b = create_body(
            &spec(),
            &ws_mounts(),
            &agent(),
            "img:1",
            Path::new("/st"),
            "{}",
        )
        .unwrap();
        assert_eq!(b.image.as_deref(), Some("img:1"));
        assert_eq!(b.user.as_deref(), Some("1000:1001"));
        assert_eq!(b.working_dir.as_deref(), Some("/srv/w"));
        assert_eq!(
            b.env,
            Some(vec![
                "PATH=/usr/bin:/bin".to_string(),
                "AGENT_SESSION_ID=abcDEF012-_x".to_string()
            ])
        );
        assert_eq!(
            b.labels,
            Some(HashMap::from([
                ("tollgate.session".to_string(), "abcDEF012-_x".to_string()),
                ("tollgate.managed".to_string(), "1".to_string()),
                ("tollgate.state-dir".to_string(), "/st".to_string()),
            ]))
        );
        // pid 1 is the agent, from the host, never from the image.
        assert_eq!(b.cmd, Some(vec![]));
        assert_eq!(
            b.entrypoint,
            Some(vec![
                "/.tollgate/exec-agent".to_string(),
                "--socket".to_string(),
                "/.tollgate/agent.sock".to_string()
            ])
        );
        let h = b.host_config.unwrap();
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.cap_add, None);
        assert_eq!(h.privileged, Some(false));
        assert_eq!(
            h.security_opt,
            Some(vec![
                "no-new-privileges:true".to_string(),
                "seccomp={}".to_string()
            ])
        );
        assert_eq!(h.memory, Some(512 * MIB));
        assert_eq!(h.memory_swap, Some(512 * MIB));
        assert_eq!(h.pids_limit, Some(64));
        assert_eq!(h.nano_cpus, Some(1_500_000_000));
        assert_eq!(h.init, Some(false));
        assert_eq!(
            h.tmpfs,
            Some(HashMap::from([(
                "/tmp".to_string(),
                "rw,nosuid,nodev,size=32m,mode=1777".to_string()
            )]))
        );
        let ul: Vec<(String, i64, i64)> = h
            .ulimits
            .unwrap()
            .into_iter()
            .map(|u| (u.name.unwrap(), u.soft.unwrap(), u.hard.unwrap()))
            .collect();
        assert_eq!(
            ul,
            vec![
                ("nofile".to_string(), 256, 256),
                ("fsize".to_string(), 100 * MIB, 100 * MIB),
                ("core".to_string(), 0, 0)
            ]
        );
        let mounts: Vec<(String, String, MountType, bool)> = h
            .mounts
            .unwrap()
            .into_iter()
            .map(|m| {
                (
                    m.source.unwrap(),
                    m.target.unwrap(),
                    m.typ.unwrap(),
                    m.read_only.unwrap(),
                )
            })
            .collect();
        assert_eq!(
            mounts,
            vec![
                ("/srv/w".into(), "/srv/w".into(), MountType::BIND, false),
                (
                    "/srv/w/.git/hooks".into(),
                    "/srv/w/.git/hooks".into(),
                    MountType::BIND,
                    true
                ),
                (
                    "/opt/tollgate/tollgate-exec-agent".into(),
                    "/.tollgate/exec-agent".into(),
                    MountType::BIND,
                    true
                ),
                (
                    "/st/exec-agent/abc.sock".into(),
                    "/.tollgate/agent.sock".into(),
                    MountType::BIND,
                    true
                ),
            ]
        );
        assert_eq!(h.binds, None);
        assert_eq!(h.devices, None);
    }

    #[test]
    fn bad_session_ids_and_env_are_refused() {
        assert!(check_session_id("abc-DEF_123").is_ok());
        for bad in ["", "a/b", "a b", "../x", "é", &"x".repeat(65)] {
            assert!(check_session_id(bad).is_err(), "{bad:?}");
        }
        let mut s = spec();
        s.env.push(("A=B".to_string(), "x".to_string()));
        assert!(create_body(&s, &ws_mounts(), &agent(), "i", Path::new("/st"), "{}").is_err());
        let mut s = spec();
        s.limits.pids = 0;
        let e = create_body(&s, &ws_mounts(), &agent(), "i", Path::new("/st"), "{}").unwrap_err();
        assert!(e.to_string().contains("pids 0"), "{e}");
    }

    /// The directories the engine would make above a mount point in the
    /// private home are tmpfs of the session's own; the home's direct
    /// children and mounts elsewhere get none.
    #[test]
    fn the_homes_directories_above_a_bind_are_the_sessions() {
        let mut s = spec();
        s.private_home = Some(crate::PrivateHome {
            path: PathBuf::from("/home/u"),
            ..Default::default()
        });
        let mut mounts = ws_mounts();
        for (p, ro) in [
            ("/home/u/.cargo/bin", true),
            ("/home/u/.rustup", true),
            ("/home/u/.local/bin", true),
            ("/home/u/.local/lib", true),
            ("/home/u/a/b/c", true),
            ("/home/u/.tollgate-cache", false),
            ("/home/userx/.cargo/bin", true),
            // The workspace under the home, an entry hidden inside it.
            ("/home/u/w/proj", false),
            ("/home/u/w/proj/.ssh/id", true),
        ] {
            mounts.push(PlannedMount {
                path: PathBuf::from(p),
                source: PathBuf::from(p),
                read_only: ro,
                dev: 1,
                ino: 9,
            });
        }
        let b = create_body(&s, &mounts, &agent(), "i", Path::new("/st"), "{}").unwrap();
        let t = b.host_config.unwrap().tmpfs.unwrap();
        let mut got: Vec<(&str, &str)> = t.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        got.sort();
        let sub = "rw,nosuid,nodev,size=32m,mode=0755,uid=1000,gid=1001";
        assert_eq!(
            got,
            vec![
                (
                    "/home/u",
                    "rw,nosuid,nodev,size=32m,mode=0700,uid=1000,gid=1001"
                ),
                ("/home/u/.cargo", sub),
                ("/home/u/.local", sub),
                ("/home/u/a", sub),
                ("/home/u/a/b", sub),
                ("/home/u/w", sub),
                ("/tmp", "rw,nosuid,nodev,size=32m,mode=1777"),
            ]
        );
    }
}
