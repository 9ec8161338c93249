//! Load shedding by a shared signal: when the work queue is full, answer
//! `429 Too Many Requests` with `Retry-After` and a problem body, without calling the
//! inner service.
//!
//! Unlike `tower::load_shed`, which sheds when the *inner service* is not ready, this
//! layer reads a [`LoadSignal`] that the whole process shares — hookbox's queue depth —
//! and checks it in `call` (axum drives readiness inside `call`, so `poll_ready` would
//! be too early). It works around any HTTP tower service:
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use axum::{Router, routing::post, body::Body};
//! use hookbox_layers::backpressure::{BackpressureLayer, LoadSignal};
//! use tower::ServiceExt;
//!
//! struct Switch(AtomicBool);
//! impl LoadSignal for Switch {
//!     fn overloaded(&self) -> Option<Duration> {
//!         self.0.load(Ordering::Relaxed).then_some(Duration::from_secs(2))
//!     }
//! }
//!
//! # tokio_test();
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn tokio_test() {
//! let switch = Arc::new(Switch(AtomicBool::new(true)));
//! let app = Router::new()
//!     .route("/jobs", post(|| async { "queued" }))
//!     .route_layer(BackpressureLayer::new(switch.clone()));
//! let req = http::Request::post("/jobs").body(Body::empty()).unwrap();
//! let res = app.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 429);
//! assert_eq!(res.headers()["retry-after"], "2");
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Either;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::ResponseBody;
use crate::rejection::Rejection;

/// Something that knows whether the process can take more work.
///
/// Any `Fn() -> Option<Duration>` is one, so the layer can read a closure over
/// whatever the application measures, which then need not know the layer exists:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use hookbox_layers::backpressure::BackpressureLayer;
///
/// let depth = Arc::new(std::sync::atomic::AtomicUsize::new(0));
/// let seen = depth.clone();
/// let layer = BackpressureLayer::new(Arc::new(move || {
///     (seen.load(std::sync::atomic::Ordering::Relaxed) >= 100).then_some(Duration::from_secs(1))
/// }));
/// # drop(layer);
/// ```
pub trait LoadSignal: Send + Sync + 'static {
    /// `Some(retry_after)` when new work must be refused now.
    fn overloaded(&self) -> Option<Duration>;
}

impl<F> LoadSignal for F
where
    F: Fn() -> Option<Duration> + Send + Sync + 'static,
{
    fn overloaded(&self) -> Option<Duration> {
        self()
    }
}

/// Wraps services in [`Backpressure`].
#[derive(Clone)]
pub struct BackpressureLayer {
    signal: Arc<dyn LoadSignal>,
}

impl BackpressureLayer {
    /// Sheds whenever `signal` says so.
    pub fn new(signal: Arc<dyn LoadSignal>) -> Self {
        Self { signal }
    }
}

impl<S> Layer<S> for BackpressureLayer {
    type Service = Backpressure<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Backpressure {
            inner,
            signal: self.signal.clone(),
        }
    }
}

/// Answers 429 instead of calling the inner service while the signal says overloaded.
#[derive(Clone)]
pub struct Backpressure<S> {
    inner: S,
    signal: Arc<dyn LoadSignal>,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Backpressure<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        match self.signal.overloaded() {
            Some(wait) => ResponseFuture::overloaded(wait),
            None => ResponseFuture::Called {
                fut: self.inner.call(req),
            },
        }
    }
}

pin_project! {
    /// Either the inner service's answer or an immediate 429.
    #[allow(missing_docs)]
    #[project = Proj]
    pub enum ResponseFuture<F> {
        /// The inner service was called.
        Called { #[pin] fut: F },
        /// Shed: the 429 answer, taken on first poll.
        Overloaded { res: Option<Rejection> },
    }
}

impl<F> ResponseFuture<F> {
    fn overloaded(wait: Duration) -> Self {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let res = Rejection::new(StatusCode::TOO_MANY_REQUESTS, "overloaded")
            .detail("the work queue is full; nothing was stored — retry later")
            .retry_after(secs);
        Self::Overloaded { res: Some(res) }
    }
}

impl<F, ResB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Proj::Called { fut } => fut.poll(cx).map_ok(|res| res.map(Either::Left)),
            Proj::Overloaded { res } => {
                let rejection = res
                    .take()
                    .unwrap_or_else(|| Rejection::new(StatusCode::TOO_MANY_REQUESTS, "overloaded"));
                Poll::Ready(Ok(rejection.into_response().map(Either::Right)))
            }
        }
    }
}
