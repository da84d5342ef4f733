//! The one place supervisorctl reads and writes the sandbox backend,
//! network and cache enums (docs/INTERFACES.md "Additions: wire enums"):
//! it reads the enum, and the deprecated word beside it only when the enum
//! is unspecified (a supervisor of an earlier release); it sends both.

use tollgate_config::BackendChoice;
use tollgate_proto::v1 as pb;

/// The enum's word, else the deprecated word as the supervisor wrote it.
fn shown<'a>(wire: &'static str, deprecated: &'a str) -> &'a str {
    if wire.is_empty() { deprecated } else { wire }
}

/// The supervisor's backend, as `status` names it.
pub fn status_sandbox(s: &pb::StatusResponse) -> &str {
    shown(s.sandbox_backend().text(), &s.sandbox)
}

/// The supervisor's backend, if this supervisorctl knows it.
pub fn status_backend(s: &pb::StatusResponse) -> Option<BackendChoice> {
    match pb::SandboxBackend::read(s.sandbox_backend, &s.sandbox)? {
        pb::SandboxBackend::Native => Some(BackendChoice::Native),
        pb::SandboxBackend::Docker => Some(BackendChoice::Docker),
        pb::SandboxBackend::Unspecified => None,
    }
}

/// A session's backend.
pub fn session_sandbox(s: &pb::SessionInfo) -> &str {
    shown(s.sandbox_backend().text(), &s.sandbox)
}

/// `sandbox exec --backend`: both fields (unspecified and empty: the
/// supervisor's own).
pub fn exec_backend(b: Option<BackendChoice>) -> (pb::SandboxBackend, String) {
    let wire = match b {
        None => pb::SandboxBackend::Unspecified,
        Some(BackendChoice::Native) => pb::SandboxBackend::Native,
        Some(BackendChoice::Docker) => pb::SandboxBackend::Docker,
    };
    (wire, wire.text().to_string())
}

/// `net allow|deny`'s request, its verb in both fields.
pub fn net_change(session_id: String, verb: pb::NetVerdict, entry: String) -> pb::NetChangeRequest {
    pb::NetChangeRequest {
        session_id,
        verb: verb.text().to_string(),
        net_verb: verb as i32,
        entry,
    }
}

pub fn entry_verdict(e: &pb::NetEntry) -> &str {
    shown(e.net_verdict().text(), &e.verdict)
}

pub fn entry_source(e: &pb::NetEntry) -> &str {
    shown(e.net_source().text(), &e.source)
}

pub fn unlisted(l: &pb::NetListResponse) -> &str {
    shown(l.net_unlisted().text(), &l.unlisted)
}

/// The configured `[sandbox] cache`, as `cache list` names it.
pub fn cache_mode(l: &pb::ListCachesResponse) -> &str {
    shown(l.cache_mode().text(), &l.mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(sandbox_backend: i32, sandbox: &str) -> pb::StatusResponse {
        pb::StatusResponse {
            sandbox_backend,
            sandbox: sandbox.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn the_backend_is_read_enum_first_then_the_deprecated_word() {
        let docker = pb::SandboxBackend::Docker as i32;
        assert_eq!(status_sandbox(&status(docker, "")), "docker");
        assert_eq!(status_sandbox(&status(docker, "native")), "docker");
        assert_eq!(status_sandbox(&status(0, "native")), "native");
        // A value this build does not know: the word, as written.
        assert_eq!(status_sandbox(&status(99, "firecracker")), "firecracker");
        assert_eq!(
            status_backend(&status(docker, "")),
            Some(BackendChoice::Docker)
        );
        assert_eq!(
            status_backend(&status(0, "native")),
            Some(BackendChoice::Native)
        );
        assert_eq!(status_backend(&status(0, "firecracker")), None);
        assert_eq!(status_backend(&status(0, "")), None);
        let s = pb::SessionInfo {
            sandbox_backend: pb::SandboxBackend::Native as i32,
            ..Default::default()
        };
        assert_eq!(session_sandbox(&s), "native");
        let old = pb::SessionInfo {
            sandbox: "docker".to_string(),
            ..Default::default()
        };
        assert_eq!(session_sandbox(&old), "docker");
    }

    #[test]
    fn an_exec_sends_the_backend_in_both_fields() {
        assert_eq!(
            exec_backend(Some(BackendChoice::Docker)),
            (pb::SandboxBackend::Docker, "docker".to_string())
        );
        assert_eq!(
            exec_backend(Some(BackendChoice::Native)),
            (pb::SandboxBackend::Native, "native".to_string())
        );
        assert_eq!(
            exec_backend(None),
            (pb::SandboxBackend::Unspecified, String::new())
        );
    }

    #[test]
    fn net_fields_are_read_enum_first_then_the_deprecated_words() {
        let r = net_change("s".into(), pb::NetVerdict::Deny, "a.example".into());
        assert_eq!(
            (r.verb.as_str(), r.net_verb()),
            ("deny", pb::NetVerdict::Deny)
        );
        let new = pb::NetEntry {
            net_verdict: pb::NetVerdict::Allow as i32,
            net_source: pb::NetSource::Approval as i32,
            ..Default::default()
        };
        assert_eq!(
            (entry_verdict(&new), entry_source(&new)),
            ("allow", "approval")
        );
        let old = pb::NetEntry {
            verdict: "deny".into(),
            source: "operator".into(),
            ..Default::default()
        };
        assert_eq!(
            (entry_verdict(&old), entry_source(&old)),
            ("deny", "operator")
        );
        let list = |net_unlisted: i32, word: &str| pb::NetListResponse {
            net_unlisted,
            unlisted: word.to_string(),
            ..Default::default()
        };
        assert_eq!(unlisted(&list(pb::NetUnlisted::Ask as i32, "deny")), "ask");
        assert_eq!(unlisted(&list(0, "deny")), "deny");
        assert_eq!(unlisted(&list(0, "")), "");
    }

    #[test]
    fn the_cache_mode_is_read_enum_first_then_the_deprecated_word() {
        let caches = |cache_mode: i32, mode: &str| pb::ListCachesResponse {
            cache_mode,
            mode: mode.to_string(),
            ..Default::default()
        };
        let ws = pb::CacheMode::Workspace as i32;
        assert_eq!(cache_mode(&caches(ws, "")), "workspace");
        assert_eq!(cache_mode(&caches(ws, "owner")), "workspace");
        // A supervisor of an earlier release: only the word.
        assert_eq!(cache_mode(&caches(0, "off")), "off");
        // A value this build does not know: the word, as written.
        assert_eq!(cache_mode(&caches(99, "shared")), "shared");
        assert_eq!(cache_mode(&caches(0, "")), "");
    }
}
