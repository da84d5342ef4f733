//! The LLM provider's API key (docs/OPERATIONS.md "The LLM key"): from
//! `[llm] api_key_env`, a root-only `api_key_file`, or a systemd credential
//! (`LoadCredential=`, read from `$CREDENTIALS_DIRECTORY`). The key stays in
//! the supervisor and is redacted from every record.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tollgate_config::LlmSection;

/// The key, or `None` when none is configured (or the variable is empty).
/// A file that is missing, empty, not the supervisor's own or readable by
/// others is an error naming it.
pub fn read(llm: &LlmSection, own_uid: u32) -> Result<Option<String>, String> {
    if !llm.api_key_env.is_empty() {
        return Ok(std::env::var(&llm.api_key_env)
            .ok()
            .filter(|k| !k.is_empty()));
    }
    let path = match (&llm.api_key_file, llm.api_key_credential.as_str()) {
        (Some(p), _) => p.clone(),
        (None, "") => return Ok(None),
        (None, name) => credential_path(name)?,
    };
    read_file(&path, own_uid, "[llm] api key").map(Some)
}

fn credential_path(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
        format!("[llm] api_key_credential {name:?}: $CREDENTIALS_DIRECTORY is not set (add LoadCredential={name}:FILE to the unit)")
    })?;
    Ok(Path::new(&dir).join(name))
}

/// A root-only file's one-line content; `what` names it in each error
/// (`[llm] api key`, `[[secrets]] "forge"`).
pub(crate) fn read_file(path: &Path, own_uid: u32, what: &str) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{what} {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{what} {shown} is not a regular file"));
    }
    if meta.uid() != own_uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{what} {shown} must be owned by uid {own_uid} and readable by no one else (chown {own_uid} and chmod 0600 it); it is uid {} mode {:04o}",
            meta.uid(),
            meta.permissions().mode() & 0o7777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{what} {shown}: {e}"))?;
    let key = text.trim().to_string();
    if key.is_empty() {
        return Err(format!("{what} {shown} is empty"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    #[test]
    fn a_private_file_gives_the_key_and_a_shared_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("key");
        std::fs::write(&p, "sk-test-123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let llm = LlmSection {
            api_key_file: Some(p.clone()),
            ..Default::default()
        };
        assert_eq!(read(&llm, own()), Ok(Some("sk-test-123".to_string())));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(
            read(&llm, own())
                .unwrap_err()
                .contains("readable by no one else")
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read(&llm, own() + 1).unwrap_err().contains("owned by uid"));
        std::fs::write(&p, "\n").unwrap();
        assert!(read(&llm, own()).unwrap_err().contains("empty"));
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let llm = LlmSection {
            api_key_file: Some(link),
            ..Default::default()
        };
        assert!(
            read(&llm, own())
                .unwrap_err()
                .contains("not a regular file")
        );
    }

    #[test]
    fn nothing_configured_is_no_key() {
        assert_eq!(read(&LlmSection::default(), own()), Ok(None));
    }
}
