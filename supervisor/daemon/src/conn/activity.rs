//! What makes a connection busy: a request whose response has not ended.
//!
//! [`ActivityLayer`] wraps every service on a socket. A request counts from
//! the moment it reaches the service until its response body is finished or
//! dropped, so an open stream (the agent's control stream, an approval wait,
//! a long run_bash, `watch`) keeps its connection busy for as long as it is
//! open. When the count falls to zero the connection's idle clock starts and
//! its reader is woken to arm the idle timer ([`super::io`]).
//!
//! It is also where a connection kept only to say why it was refused gets
//! its answer ([`super::refuse`]): the refusal, and no service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tower::{Layer, Service};

use super::ConnInfo;

/// One connection's requests in flight and when it last went quiet.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// The connection's reader, woken when the last request ends.
    pub(super) reader: AtomicWaker,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            reader: AtomicWaker::new(),
        }
    }
}

impl Activity {
    /// Counts a request until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub fn idle_since(&self) -> Instant {
        *self.idle_since.lock()
    }
}

/// A request in flight; its drop may start the idle clock.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        // The clock is set before the count reaches zero, so a reader that
        // sees zero also sees the new start.
        *a.idle_since.lock() = Instant::now();
        if a.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            a.reader.wake();
        }
    }
}

/// Counts each request of a connection as in flight until its response ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivityLayer;

impl<S> Layer<S> for ActivityLayer {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody> Service<Request<ReqBody>> for Tracked<S>
where
    S: Service<Request<ReqBody>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<TrackedBody<Body>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let info = req.extensions().get::<ConnInfo>();
        let guard = info.map(|c| c.activity.begin());
        // A connection kept only to say why it was refused: the answer,
        // and no service.
        if let Some(why) = info.and_then(|c| c.refused.clone()) {
            let resp = why.status().into_http::<Body>();
            return Box::pin(std::future::ready(Ok(resp.map(|inner| TrackedBody {
                inner,
                _guard: guard,
            }))));
        }
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|inner| TrackedBody {
                inner,
                _guard: guard,
            }))
        })
    }
}

/// A response body that keeps its request in flight until it ends.
#[derive(Debug)]
pub struct TrackedBody<B> {
    inner: B,
    _guard: Option<InFlight>,
}

impl<B> http_body::Body for TrackedBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_starts_when_the_last_request_ends() {
        let a = Arc::new(Activity::default());
        let start = a.idle_since();
        let one = a.begin();
        let two = a.begin();
        assert_eq!(a.in_flight(), 2);
        drop(one);
        assert_eq!(a.in_flight(), 1);
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(two);
        assert_eq!(a.in_flight(), 0);
        assert!(a.idle_since() > start);
    }
}
