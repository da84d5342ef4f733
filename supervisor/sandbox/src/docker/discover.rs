//! Which engine socket, found as the docker CLI finds it (docs/OPERATIONS.md,
//! "The Docker sandbox"): `DOCKER_HOST`; else the context `DOCKER_CONTEXT`
//! names, else the config file's `currentContext` (`$DOCKER_CONFIG/config.json`,
//! by default `~/.docker/config.json`), its endpoint read from
//! `contexts/meta/<sha256 of the name>/meta.json`; else the default socket.
//! Only `unix://` endpoints are driven: anything else is refused, naming it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::DEFAULT_SOCKET;
use crate::SandboxError;

/// The environment the lookup reads (the process's, or a test's).
#[derive(Debug, Clone, Default)]
pub struct DockerEnv {
    pub docker_host: Option<String>,
    pub docker_context: Option<String>,
    pub docker_config: Option<PathBuf>,
    pub home: Option<PathBuf>,
}

impl DockerEnv {
    pub fn from_process() -> DockerEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        DockerEnv {
            docker_host: var("DOCKER_HOST"),
            docker_context: var("DOCKER_CONTEXT"),
            docker_config: var("DOCKER_CONFIG").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
        }
    }

    fn config_dir(&self) -> Option<PathBuf> {
        self.docker_config
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".docker")))
    }
}

fn unusable(what: String) -> SandboxError {
    SandboxError::Unavailable(format!(
        "{what}; set [sandbox] docker_socket to the engine's unix socket"
    ))
}

/// `unix:///path` as a path; any other scheme refused.
fn unix_path(host: &str, from: &str) -> Result<PathBuf, SandboxError> {
    match host.strip_prefix("unix://") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(unusable(format!(
            "{from} is {host:?}: only unix:// engine sockets are supported"
        ))),
    }
}

/// The engine socket for `env`.
pub fn engine_socket(env: &DockerEnv) -> Result<PathBuf, SandboxError> {
    if let Some(h) = &env.docker_host {
        return unix_path(h, "DOCKER_HOST");
    }
    let dir = env.config_dir();
    let context = match &env.docker_context {
        Some(c) => Some((c.clone(), "DOCKER_CONTEXT")),
        None => match &dir {
            Some(d) => current_context(&d.join("config.json"))?.map(|c| (c, "currentContext")),
            None => None,
        },
    };
    match (context, dir) {
        (None, _) => Ok(PathBuf::from(DEFAULT_SOCKET)),
        (Some((c, _)), _) if c == "default" => Ok(PathBuf::from(DEFAULT_SOCKET)),
        (Some((c, from)), Some(d)) => context_socket(&d, &c, from),
        (Some((c, from)), None) => Err(unusable(format!(
            "{from} names context {c:?} but neither DOCKER_CONFIG nor HOME is set"
        ))),
    }
}

/// `currentContext` of the CLI's config file; a missing file is none.
fn current_context(file: &Path) -> Result<Option<String>, SandboxError> {
    let body = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unusable(format!("cannot read {}: {e}", file.display()))),
    };
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| unusable(format!("{} is not JSON: {e}", file.display())))?;
    Ok(v.get("currentContext")
        .and_then(|c| c.as_str())
        .filter(|c| !c.is_empty())
        .map(str::to_string))
}

/// The docker endpoint of context `name` (`contexts/meta/<sha256>/meta.json`).
fn context_socket(dir: &Path, name: &str, from: &str) -> Result<PathBuf, SandboxError> {
    let digest: String = Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let meta = dir.join("contexts/meta").join(digest).join("meta.json");
    let body = std::fs::read(&meta).map_err(|e| {
        unusable(format!(
            "{from} names context {name:?} but {} cannot be read: {e}",
            meta.display()
        ))
    })?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| unusable(format!("{} is not JSON: {e}", meta.display())))?;
    let host = v
        .pointer("/Endpoints/docker/Host")
        .and_then(|h| h.as_str())
        .ok_or_else(|| unusable(format!("{} has no Endpoints.docker.Host", meta.display())))?;
    unix_path(host, &format!("context {name:?}'s endpoint"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_in(dir: &Path) -> DockerEnv {
        DockerEnv {
            home: Some(dir.to_path_buf()),
            ..DockerEnv::default()
        }
    }

    fn write_context(home: &Path, name: &str, host: &str) {
        let digest: String = Sha256::digest(name.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let d = home.join(".docker/contexts/meta").join(digest);
        std::fs::create_dir_all(&d).unwrap();
        let meta = serde_json::json!({"Name": name, "Endpoints": {"docker": {"Host": host}}});
        std::fs::write(d.join("meta.json"), meta.to_string()).unwrap();
    }

    #[test]
    fn docker_socket_honours_docker_host() {
        let home = tempfile::tempdir().unwrap();
        let mut env = env_in(home.path());
        env.docker_host = Some("unix:///run/other/docker.sock".into());
        env.docker_context = Some("ignored".into());
        assert_eq!(
            engine_socket(&env).unwrap(),
            PathBuf::from("/run/other/docker.sock")
        );
        env.docker_host = Some("tcp://10.0.0.1:2375".into());
        let e = engine_socket(&env).unwrap_err().to_string();
        assert!(
            e.contains("DOCKER_HOST") && e.contains("only unix://"),
            "{e}"
        );
    }

    #[test]
    fn docker_socket_honours_the_current_context() {
        let home = tempfile::tempdir().unwrap();
        let env = env_in(home.path());
        // No config file: the default socket.
        assert_eq!(engine_socket(&env).unwrap(), PathBuf::from(DEFAULT_SOCKET));
        std::fs::create_dir_all(home.path().join(".docker")).unwrap();
        std::fs::write(
            home.path().join(".docker/config.json"),
            r#"{"currentContext": "rootless"}"#,
        )
        .unwrap();
        write_context(home.path(), "rootless", "unix:///run/user/1000/docker.sock");
        assert_eq!(
            engine_socket(&env).unwrap(),
            PathBuf::from("/run/user/1000/docker.sock")
        );
        // DOCKER_CONTEXT beats the config file; "default" is the default socket.
        let mut env = env.clone();
        env.docker_context = Some("default".into());
        assert_eq!(engine_socket(&env).unwrap(), PathBuf::from(DEFAULT_SOCKET));
        env.docker_context = Some("missing".into());
        let e = engine_socket(&env).unwrap_err().to_string();
        assert!(
            e.contains("DOCKER_CONTEXT names context \"missing\""),
            "{e}"
        );
    }

    #[test]
    fn docker_socket_honours_docker_config_dir() {
        let cfg = tempfile::tempdir().unwrap();
        std::fs::write(cfg.path().join("config.json"), r#"{"currentContext": "x"}"#).unwrap();
        let digest: String = Sha256::digest(b"x")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let d = cfg.path().join("contexts/meta").join(digest);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("meta.json"),
            r#"{"Endpoints": {"docker": {"Host": "ssh://host"}}}"#,
        )
        .unwrap();
        let env = DockerEnv {
            docker_config: Some(cfg.path().to_path_buf()),
            ..DockerEnv::default()
        };
        let e = engine_socket(&env).unwrap_err().to_string();
        assert!(
            e.contains("context \"x\"'s endpoint") && e.contains("ssh://host"),
            "{e}"
        );
    }
}
