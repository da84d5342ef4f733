//! Routed shell commands: the exact command a PreToolUse decided, kept here
//! under a single-use random id bound to the session's uid until the
//! rewritten command (`agent hook exec <id>`) claims it.
//!
//! The id is not a secret: it is on a command line other users can read.
//! It is only good for the uid it was made for, once, for a short while; and
//! the command it runs is the one decided, whatever the client's shell is
//! given after the decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tonic::Status;

use crate::sessions::Session;

/// How long a decided command waits for its rewritten command to claim it.
pub const ROUTE_TTL: Duration = Duration::from_secs(600);

/// A decided command waiting to run.
pub struct Route {
    pub session: Arc<Session>,
    pub uid: u32,
    pub command: String,
    pub timeout_s: Option<u64>,
    /// Run in the background (Claude Code's `run_in_background`): a
    /// background job of the session.
    pub background: bool,
    /// The client's tool_use_id, for the records.
    pub call_id: String,
    pub target: String,
    created: Instant,
}

impl Route {
    pub fn new(
        session: Arc<Session>,
        uid: u32,
        shell: (String, Option<u64>, bool),
        call_id: String,
        target: String,
    ) -> Route {
        let (command, timeout_s, background) = shell;
        Route {
            session,
            uid,
            command,
            timeout_s,
            background,
            call_id,
            target,
            created: Instant::now(),
        }
    }
}

#[derive(Default)]
pub struct Routes {
    map: Mutex<HashMap<String, Route>>,
}

/// A route id: `r` and 24 url-safe characters (18 random bytes).
pub fn valid_id(id: &str) -> bool {
    id.len() == 25
        && id.starts_with('r')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Routes {
    /// Keeps a decided command; returns its id.
    pub fn insert(&self, route: Route) -> Result<String, crate::credentials::CredentialError> {
        let id = format!("r{}", crate::credentials::random_id::<18>()?);
        let mut map = self.map.lock();
        map.retain(|_, r| r.created.elapsed() < ROUTE_TTL);
        map.insert(id.clone(), route);
        Ok(id)
    }

    /// Claims a route for `uid`: once. Another uid's claim fails and leaves
    /// it in place (a user who reads the id from a process list cannot burn
    /// it).
    pub fn take(&self, id: &str, uid: u32) -> Result<Route, Status> {
        if !valid_id(id) {
            return Err(Status::invalid_argument(
                "this is not a routed command's id; run the command the hook wrote, unchanged",
            ));
        }
        let mut map = self.map.lock();
        let Some(r) = map.get(id) else {
            return Err(Status::not_found(format!(
                "routed command {id} is unknown, already run or expired (after {}s); ask again",
                ROUTE_TTL.as_secs()
            )));
        };
        if r.uid != uid {
            return Err(Status::permission_denied(format!(
                "routed command {id} belongs to uid {}; the caller is uid {uid}",
                r.uid
            )));
        }
        if r.created.elapsed() >= ROUTE_TTL {
            map.remove(id);
            return Err(Status::not_found(format!(
                "routed command {id} expired ({}s after it was decided); ask again",
                ROUTE_TTL.as_secs()
            )));
        }
        map.remove(id)
            .ok_or_else(|| Status::not_found("routed command gone"))
    }
}
