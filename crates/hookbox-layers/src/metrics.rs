//! HTTP request metrics for any tower service: `<prefix>http_requests_total{method,
//! route,status}` and `<prefix>http_request_duration_seconds{method,route}`, where the
//! prefix is [`DEFAULT_PREFIX`] (`hookbox_`) unless [`HttpMetricsLayer::prefix`] sets
//! another.
//!
//! The `route` label is the *matched route template* (`/webhooks/{id}`), never the raw
//! path, so an attacker cannot grow the label set. With the `axum` feature (on by
//! default) the layer reads axum's `MatchedPath`: put it on the router with
//! `Router::layer`, where axum has already stored it. Other routers pass their own
//! reader to [`HttpMetricsLayer::route_with`]. Requests without a route count as
//! `route="unmatched"`.
//!
//! ```
//! use axum::{Router, routing::get};
//! use hookbox_layers::metrics::HttpMetricsLayer;
//!
//! let app: Router = Router::new()
//!     .route("/items/{id}", get(|| async { "item" }))
//!     .layer(HttpMetricsLayer::new().prefix("shop_"));
//! ```
//!
//! The layer only records through the [`metrics`] facade: the binary installs a
//! recorder (Prometheus, say); a library user installs whichever they like.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Extensions, Method, Request, Response};
use metrics::SharedString;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The metric names' default prefix.
pub const DEFAULT_PREFIX: &str = "hookbox_";
/// The counter's name after the prefix.
pub const REQUESTS: &str = "http_requests_total";
/// The histogram's name after the prefix.
pub const REQUEST_DURATION: &str = "http_request_duration_seconds";

/// Reads the route template a request matched, from its extensions.
pub type RouteLabel = for<'a> fn(&'a Extensions) -> Option<&'a str>;

/// The two metric names, under one prefix.
#[derive(Debug, Clone)]
struct Names {
    requests: SharedString,
    duration: SharedString,
}

impl Names {
    /// The default names are static strings: recording them allocates nothing.
    const DEFAULT: Self = Self {
        requests: SharedString::const_str("hookbox_http_requests_total"),
        duration: SharedString::const_str("hookbox_http_request_duration_seconds"),
    };

    fn prefixed(prefix: &str) -> Self {
        if prefix == DEFAULT_PREFIX {
            return Self::DEFAULT;
        }
        let shared =
            |name: &str| SharedString::from(std::sync::Arc::<str>::from(format!("{prefix}{name}")));
        Self {
            requests: shared(REQUESTS),
            duration: shared(REQUEST_DURATION),
        }
    }
}

/// axum's `MatchedPath`, with the `axum` feature; nothing without it.
fn default_route(extensions: &Extensions) -> Option<&str> {
    #[cfg(feature = "axum")]
    {
        extensions
            .get::<axum::extract::MatchedPath>()
            .map(axum::extract::MatchedPath::as_str)
    }
    #[cfg(not(feature = "axum"))]
    {
        let _ = extensions;
        None
    }
}

/// Wraps services in [`HttpMetrics`].
#[derive(Debug, Clone)]
pub struct HttpMetricsLayer {
    names: Names,
    route: RouteLabel,
}

impl Default for HttpMetricsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpMetricsLayer {
    /// A layer with the [`DEFAULT_PREFIX`] and axum's matched route as the label.
    pub const fn new() -> Self {
        Self {
            names: Names::DEFAULT,
            route: default_route,
        }
    }

    /// Names the metrics `<prefix>http_requests_total` and
    /// `<prefix>http_request_duration_seconds`.
    ///
    /// ```
    /// use hookbox_layers::metrics::HttpMetricsLayer;
    /// let layer = HttpMetricsLayer::new().prefix("shop_");
    /// ```
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.names = Names::prefixed(prefix);
        self
    }

    /// Reads the `route` label with `route` instead (for routers other than axum's).
    /// It must return a template, never the raw path.
    pub fn route_with(mut self, route: RouteLabel) -> Self {
        self.route = route;
        self
    }
}

impl<S> Layer<S> for HttpMetricsLayer {
    type Service = HttpMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpMetrics {
            inner,
            names: self.names.clone(),
            route: self.route,
        }
    }
}

/// Counts and times every request by method, matched route and status.
#[derive(Debug, Clone)]
pub struct HttpMetrics<S> {
    inner: S,
    names: Names,
    route: RouteLabel,
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
        let route = (self.route)(req.extensions())
            .unwrap_or("unmatched")
            .to_owned();
        let method = method_label(req.method());
        ResponseFuture {
            fut: self.inner.call(req),
            start: Instant::now(),
            method,
            route,
            names: self.names.clone(),
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
        names: Names,
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
        let names = &*this.names;
        metrics::histogram!(names.duration.clone(), "method" => *this.method, "route" => route.clone())
            .record(this.start.elapsed().as_secs_f64());
        metrics::counter!(names.requests.clone(), "method" => *this.method, "route" => route, "status" => status)
            .increment(1);
        Poll::Ready(out)
    }
}
