//! Tower layers for HTTP services: load shedding from a shared signal, idempotency
//! keys, request metrics, request ids and tracing. They were written for hookbox (a
//! webhook inbox) and know nothing of it: each wraps any
//! `Service<http::Request<B>, Response = http::Response<B2>>`, and a layer that
//! refuses a request answers with its own `application/problem+json` response (a
//! [`rejection::Rejection`]) rather than an error, so no `HandleErrorLayer` is needed.
//!
//! - [`backpressure`]: 429 + `Retry-After` while a [`backpressure::LoadSignal`] you
//!   pass in says the process is full;
//! - [`idempotency`]: `Idempotency-Key` handling over a pluggable
//!   [`idempotency::IdempotencyStore`] (413 and 408 for bodies too large or too slow);
//! - [`metrics`]: request counts and durations by method, matched route and status,
//!   through the [`metrics`](https://docs.rs/metrics) facade, names under a prefix;
//! - [`trace`]: request ids and tracing spans (tower-http underneath).
//!
//! # Stacking them
//!
//! Order matters. Outermost first: request id → trace → metrics → (per route)
//! backpressure → idempotency → handler. Tracing outside metrics gives every log line
//! the request id; metrics outside backpressure counts shed requests too; and
//! backpressure outside idempotency sheds a request before its body is even read.
//! With axum, per-route layers go on with `route_layer` (the last one added is the
//! outermost) and the rest on the whole router with `layer`, where axum has already
//! matched the route:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use axum::{Router, body::Body, routing::post};
//! use hookbox_layers::backpressure::{BackpressureLayer, LoadSignal};
//! use hookbox_layers::idempotency::{IdempotencyLayer, MemoryStore};
//! use hookbox_layers::metrics::HttpMetricsLayer;
//! use hookbox_layers::trace::request_tracing;
//! use tower::ServiceExt;
//!
//! /// Never full, in this example.
//! struct Idle;
//! impl LoadSignal for Idle {
//!     fn overloaded(&self) -> Option<Duration> {
//!         None
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let charges = post(|| async { (http::StatusCode::CREATED, "charged") })
//!     .route_layer(IdempotencyLayer::new(MemoryStore::new(Duration::from_secs(3600)), 64 * 1024))
//!     .route_layer(BackpressureLayer::new(Arc::new(Idle)));
//! let app = Router::new()
//!     .route("/charges", charges)
//!     .layer(HttpMetricsLayer::new())
//!     .layer(request_tracing());
//! let req = http::Request::post("/charges")
//!     .header("idempotency-key", "k1")
//!     .body(Body::from("{}"))
//!     .unwrap();
//! let res = app.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 201);
//! assert!(res.headers().contains_key("x-request-id"));
//! # }
//! ```
//!
//! `examples/layers.rs` serves a small payments API with all of them and Prometheus
//! metrics: `cargo run -p hookbox-layers --example layers`.
//!
//! # Features
//!
//! - `axum` (default): [`metrics`] labels requests with axum's matched route template.
//!   Without it, pass your own with [`metrics::HttpMetricsLayer::route_with`].

pub mod backpressure;
pub mod body_budget;
pub mod idempotency;
pub mod metrics;
pub mod rejection;
pub mod trace;

/// The response body of a layer that may answer by itself: the inner service's body,
/// or the layer's own (a rejection, a replayed response).
pub type ResponseBody<B> = http_body_util::Either<B, http_body_util::Full<bytes::Bytes>>;
