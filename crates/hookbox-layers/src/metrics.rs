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
//! recorder (Prometheus, say); a library user installs whichever they like. Each
//! label set is registered once, on its first request, and its handles kept, so a
//! request costs two atomic updates, not two registry lookups: install the
//! recorder before the first request (a recorder installed later sees only the
//! label sets that are new by then).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Extensions, Method, Request, Response};
use metrics::{Counter, Histogram, SharedString};
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
    handles: Arc<Handles>,
    route: RouteLabel,
}

impl Default for HttpMetricsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpMetricsLayer {
    /// A layer with the [`DEFAULT_PREFIX`] and axum's matched route as the label.
    pub fn new() -> Self {
        Self {
            handles: Arc::new(Handles::new(Names::DEFAULT)),
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
        self.handles = Arc::new(Handles::new(Names::prefixed(prefix)));
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
            handles: self.handles.clone(),
            route: self.route,
        }
    }
}

/// Counts and times every request by method, matched route and status.
#[derive(Debug, Clone)]
pub struct HttpMetrics<S> {
    inner: S,
    handles: Arc<Handles>,
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
        let route = (self.route)(req.extensions()).unwrap_or("unmatched");
        let route = self.handles.route(route);
        let method = method_index(req.method());
        ResponseFuture {
            fut: self.inner.call(req),
            start: Instant::now(),
            method,
            route,
        }
    }
}

/// The bounded labels for the method: unknown methods are `other`.
const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "other",
];

/// The method's place in [`METHODS`].
fn method_index(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::POST => 1,
        Method::PUT => 2,
        Method::PATCH => 3,
        Method::DELETE => 4,
        Method::HEAD => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}

/// The handles registered so far, per route template; shared by every service the
/// layer made. Routes are templates and methods and statuses few, so it stays small.
#[derive(Debug)]
struct Handles {
    names: Names,
    routes: RwLock<HashMap<String, Arc<RouteHandles>>>,
}

impl Handles {
    fn new(names: Names) -> Self {
        Self {
            names,
            routes: RwLock::new(HashMap::new()),
        }
    }

    /// The handles of `route`, made on its first request.
    fn route(&self, route: &str) -> Arc<RouteHandles> {
        let found = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(route)
            .cloned();
        found.unwrap_or_else(|| {
            let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
            routes
                .entry(route.to_owned())
                .or_insert_with(|| Arc::new(RouteHandles::new(route, &self.names)))
                .clone()
        })
    }
}

/// One route's histogram per method and counter per method and status.
#[derive(Debug)]
struct RouteHandles {
    names: Names,
    route: SharedString,
    durations: [OnceLock<Histogram>; METHODS.len()],
    /// `(method, status)`, where `None` is a service error.
    counts: RwLock<Vec<(usize, Option<u16>, Counter)>>,
}

impl RouteHandles {
    fn new(route: &str, names: &Names) -> Self {
        Self {
            names: names.clone(),
            route: SharedString::from(Arc::<str>::from(route)),
            durations: Default::default(),
            counts: RwLock::new(Vec::new()),
        }
    }

    /// Records one request: its duration and its answer (`None`: a service error).
    fn record(&self, method: usize, status: Option<u16>, seconds: f64) {
        self.durations[method]
            .get_or_init(|| {
                metrics::histogram!(self.names.duration.clone(),
                    "method" => METHODS[method], "route" => self.route.clone())
            })
            .record(seconds);
        let counted = |counts: &[(usize, Option<u16>, Counter)]| match counts
            .iter()
            .find(|(m, s, _)| *m == method && *s == status)
        {
            Some((_, _, counter)) => {
                counter.increment(1);
                true
            }
            None => false,
        };
        if counted(&self.counts.read().unwrap_or_else(|e| e.into_inner())) {
            return;
        }
        let mut counts = self.counts.write().unwrap_or_else(|e| e.into_inner());
        if !counted(&counts) {
            let label = status.map_or_else(|| "error".to_owned(), |s| s.to_string());
            let counter = metrics::counter!(self.names.requests.clone(),
                "method" => METHODS[method], "route" => self.route.clone(), "status" => label);
            counter.increment(1);
            counts.push((method, status, counter));
        }
    }
}

pin_project! {
    /// Records the metrics when the inner future answers.
    pub struct ResponseFuture<F> {
        #[pin]
        fut: F,
        start: Instant,
        method: usize,
        route: Arc<RouteHandles>,
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
        let status = out.as_ref().ok().map(|res| res.status().as_u16());
        this.route
            .record(*this.method, status, this.start.elapsed().as_secs_f64());
        Poll::Ready(out)
    }
}
