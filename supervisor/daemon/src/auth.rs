//! Authentication: the one place that checks who is calling.
//!
//! [`AgentAuth`] wraps AgentService on agent.sock: every method except
//! OpenSession needs `authorization: Bearer <token>` for an active session
//! whose uid matches the peer's SO_PEERCRED uid; the token's secret is
//! compared in constant time. [`OperatorAuth`] wraps OperatorService on
//! operator.sock: the peer must be root, the supervisor's own uid, or a
//! member of the operator group (the socket's mode already says the same;
//! this is the second wall). Health and reflection pass through on both, and
//! so does ClientHooks on agent.sock with only [`Peer`] set: a client's hook
//! has no token; `hooks/` binds its events to the peer's uid.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tonic::transport::server::UdsConnectInfo;

use crate::conn::ConnInfo;
use crate::credentials::{self, Presented};
use crate::sessions::{Session, TokenCheck};
use crate::supervisor::{Peer, Supervisor};

/// The authenticated session, put in the request's extensions.
#[derive(Clone)]
pub struct Authed(pub Arc<Session>);

const AGENT_PREFIX: &str = "/tollgate.v1.AgentService/";
const OPEN_SESSION: &str = "/tollgate.v1.AgentService/OpenSession";
const OPERATOR_PREFIX: &str = "/tollgate.v1.OperatorService/";

fn peer_of<B>(req: &Request<B>) -> Result<Peer, Status> {
    let ext = req.extensions();
    let cred = ext
        .get::<ConnInfo>()
        .map(|c| &c.uds)
        .or_else(|| ext.get::<UdsConnectInfo>())
        .and_then(|i| i.peer_cred)
        .ok_or_else(|| Status::permission_denied("cannot identify the caller (no SO_PEERCRED)"))?;
    Ok(Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid().and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
    })
}

/// Checks an AgentService request; on success the request carries [`Peer`]
/// and, past OpenSession, [`Authed`].
pub fn authenticate_agent<B>(sup: &Supervisor, req: &mut Request<B>) -> Result<(), Status> {
    let peer = peer_of(req)?;
    req.extensions_mut().insert(peer);
    let path = req.uri().path();
    if !path.starts_with(AGENT_PREFIX) || path == OPEN_SESSION {
        return Ok(());
    }
    let header = req
        .headers()
        .get("authorization")
        .ok_or_else(|| {
            Status::unauthenticated(
                "missing bearer token: call OpenSession first, then send `authorization: Bearer <token>`",
            )
        })?
        .to_str()
        .map_err(|_| Status::unauthenticated("malformed authorization header"))?;
    let token = header
        .strip_prefix("Bearer ")
        .ok_or_else(|| Status::unauthenticated("authorization header is not `Bearer <token>`"))?;
    let presented = credentials::parse(token.trim())
        .ok_or_else(|| Status::unauthenticated("malformed bearer token"))?;
    let session_id = match &presented {
        Presented::Control { session_id, .. } | Presented::Sandbox { session_id, .. } => {
            *session_id
        }
    };
    let Some(session) = sup.sessions.get(session_id) else {
        return Err(match sup.sessions.find_ended(session_id) {
            Some(info) => Status::unauthenticated(format!(
                "token rejected: session {session_id} is {} ({})",
                info.state, info.end_reason
            )),
            None => Status::unauthenticated("token rejected: no such session"),
        });
    };
    match session.check_token(&presented) {
        TokenCheck::Good => {}
        TokenCheck::Wrong => {
            return Err(Status::unauthenticated(format!(
                "token rejected: wrong or rotated token for session {session_id}"
            )));
        }
        TokenCheck::Expired => {
            return Err(Status::unauthenticated(format!(
                "token rejected: the token for session {session_id} expired; refresh before expiry or open a new session"
            )));
        }
        TokenCheck::SandboxScoped => {
            return Err(Status::permission_denied(
                "the sandbox-scoped token cannot call the control API",
            ));
        }
    }
    if session.uid != peer.uid {
        return Err(Status::permission_denied(format!(
            "session {session_id} belongs to uid {}; the caller is uid {}",
            session.uid, peer.uid
        )));
    }
    if !session.is_active() {
        return Err(Status::unauthenticated(format!(
            "token rejected: session {session_id} is {} ({})",
            session.state().as_str(),
            session.end_reason()
        )));
    }
    req.extensions_mut().insert(Authed(session));
    Ok(())
}

/// Checks an OperatorService request.
pub fn authenticate_operator<B>(sup: &Supervisor, req: &mut Request<B>) -> Result<(), Status> {
    let peer = peer_of(req)?;
    req.extensions_mut().insert(peer);
    if !req.uri().path().starts_with(OPERATOR_PREFIX) {
        return Ok(());
    }
    if is_operator(sup, peer) {
        Ok(())
    } else {
        Err(Status::permission_denied(format!(
            "uid {} is not an operator (root{} only)",
            peer.uid,
            sup.config
                .supervisor
                .operator_group
                .as_deref()
                .map(|g| format!(" or members of group {g}"))
                .unwrap_or_default()
        )))
    }
}

/// Root, the supervisor's own uid, or a member of the operator group.
pub fn is_operator(sup: &Supervisor, peer: Peer) -> bool {
    if peer.uid == 0 || peer.uid == sup.own_uid {
        return true;
    }
    let Some(gid) = sup.operator_gid else {
        return false;
    };
    // Through the name service: LDAP/SSSD members count (identity.rs).
    crate::identity::in_group(peer.uid, peer.gid, gid)
}

/// Looks a group up by name through the name service.
pub fn group_gid(name: &str) -> Option<u32> {
    crate::identity::group_gid(name)
}

/// Which check a wrapper applies.
#[derive(Clone, Copy)]
enum Kind {
    Agent,
    Operator,
}

/// A tower wrapper that runs one of the checks before the service.
#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    sup: Arc<Supervisor>,
    kind: Kind,
}

impl<S> Guard<S> {
    pub fn agent(inner: S, sup: Arc<Supervisor>) -> Guard<S> {
        Guard {
            inner,
            sup,
            kind: Kind::Agent,
        }
    }

    pub fn operator(inner: S, sup: Arc<Supervisor>) -> Guard<S> {
        Guard {
            inner,
            sup,
            kind: Kind::Operator,
        }
    }
}

impl<S: NamedService> NamedService for Guard<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<Body>> for Guard<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let checked = match self.kind {
            Kind::Agent => authenticate_agent(&self.sup, &mut req),
            Kind::Operator => authenticate_operator(&self.sup, &mut req),
        };
        match checked {
            Ok(()) => {
                // The service that was polled ready is the one that must be called.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(inner.call(req))
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}
