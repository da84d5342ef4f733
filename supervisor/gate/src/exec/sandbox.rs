//! The session's sandbox: built on first use (or ahead of it), destroyed
//! again when the session ended while it was being built.

use std::sync::Arc;

use tollgate_sandbox::Sandbox;

use super::ExecError;
use crate::host::Ctx;

/// The session's sandbox, created on first use, or why there is none (for
/// `agent mcp-gateway`, which runs its server in it).
pub async fn session_sandbox(cx: &Ctx) -> Result<Arc<dyn Sandbox>, String> {
    sandbox_of(cx).await.map_err(|e| match e {
        ExecError::Tool(m) | ExecError::Sandbox(m) | ExecError::DiskFloor(m) => m,
        ExecError::Cancelled => "the session ended".to_string(),
    })
}

/// Builds a session's sandbox ahead of its first command, in the
/// background: a client session whose shell is routed gets it while the
/// client waits for its model, not on its first Bash call. A failure here
/// is only logged: the first command builds again and reports its own.
pub fn warm_sandbox(cx: &Ctx) {
    let cx = cx.clone();
    tokio::spawn(async move {
        let Some(_work) = cx.session.begin() else {
            return;
        };
        if let Err(ExecError::Sandbox(e) | ExecError::Tool(e) | ExecError::DiskFloor(e)) =
            sandbox_of(&cx).await
        {
            tracing::debug!(session = %cx.session.id, "the sandbox built ahead of use failed: {e}");
        }
    });
}

/// The session's sandbox, created on first use.
pub(crate) async fn sandbox_of(cx: &Ctx) -> Result<Arc<dyn Sandbox>, ExecError> {
    let session = &cx.session;
    let sb = session
        .sandbox
        .get_or_create(|| async {
            let token = session.sandbox_token_text.lock().clone();
            let spec = cx.host.sandbox_spec(session, token.as_deref());
            let sb = session.backend.create(&spec).await?;
            if let Err(why) = Arc::clone(&cx.host).sandbox_built(session, sb.as_ref()) {
                let _ = sb.destroy().await;
                return Err(tollgate_sandbox::SandboxError::Refused(why));
            }
            super::git_watch::start(cx);
            Ok(sb)
        })
        .await
        .map_err(|e| ExecError::Sandbox(format!("{e}. The command did not run.")))?;
    // The session ended while its sandbox was being built: end_session
    // found none to destroy, so destroy it here.
    if !session.is_active()
        && let Some(sb) = session.sandbox.take()
    {
        let _ = sb.destroy().await;
        return Err(ExecError::Cancelled);
    }
    Ok(sb)
}
