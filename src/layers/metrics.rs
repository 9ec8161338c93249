//! HTTP request metrics for any tower service: `hookbox_http_requests_total{method,
//! route,status}` and `hookbox_http_request_duration_seconds{method,route}`.
//!
//! The `route` label is the *matched route template* (`/webhooks/{id}`), never the raw
//! path, so an attacker cannot grow the label set. Inside axum put the layer on the
//! router with `Router::layer`, where axum has already stored [`MatchedPath`];
//! requests that matched no route count as `route="unmatched"`.
//!
//! ```
//! use axum::{Router, routing::get};
//! use hookbox::layers::metrics::HttpMetricsLayer;
//!
//! let app: Router = Router::new()
//!     .route("/items/{id}", get(|| async { "item" }))
//!     .layer(HttpMetricsLayer::new());
//! ```
//!
//! The layer only records through the [`metrics`] facade: the binary installs the
//! Prometheus recorder; a library user installs whichever they like.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::MatchedPath;
use http::{Method, Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::telemetry::names;

/// Wraps services in [`HttpMetrics`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpMetricsLayer {
    _p: (),
}

impl HttpMetricsLayer {
    /// A new layer.
    pub const fn new() -> Self {
        Self { _p: () }
    }
}

impl<S> Layer<S> for HttpMetricsLayer {
    type Service = HttpMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpMetrics { inner }
    }
}

/// Counts and times every request by method, matched route and status.
#[derive(Debug, Clone)]
pub struct HttpMetrics<S> {
    inner: S,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for HttpMetrics<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
        let method = method_label(req.method());
        ResponseFuture {
            fut: self.inner.call(req),
            start: Instant::now(),
            method,
            route,
        }
    }
}

/// A bounded label for the method: unknown methods are `other`.
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pin_project! {
    /// Records the metrics when the inner future answers.
    pub struct ResponseFuture<F> {
        #[pin]
        fut: F,
        start: Instant,
        method: &'static str,
        route: String,
    }
}

impl<F, ResB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.fut.poll(cx));
        let status = match &out {
            Ok(res) => res.status().as_u16().to_string(),
            Err(_) => "error".to_owned(),
        };
        let route = std::mem::take(this.route);
        metrics::histogram!(names::HTTP_REQUEST_DURATION, "method" => *this.method, "route" => route.clone())
            .record(this.start.elapsed().as_secs_f64());
        metrics::counter!(names::HTTP_REQUESTS, "method" => *this.method, "route" => route, "status" => status)
            .increment(1);
        Poll::Ready(out)
    }
}
