//! Request ids and tracing spans, from tower-http.
//!
//! [`request_tracing`] stacks, outermost first: `SetRequestId` (keeps the caller's
//! `X-Request-ID`, else makes a UUID), `TraceLayer` (one span per request carrying
//! `request_id`, so every log line of that request names it, in JSON logs too), and
//! `PropagateRequestId` (echoes the id on the response).
//!
//! ```
//! use axum::{Router, routing::get, body::Body};
//! use hookbox::layers::trace::request_tracing;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let app = Router::new()
//!     .route("/", get(|| async { "hi" }))
//!     .layer(request_tracing());
//! let req = http::Request::get("/").header("x-request-id", "abc").body(Body::empty()).unwrap();
//! let res = app.oneshot(req).await.unwrap();
//! assert_eq!(res.headers()["x-request-id"], "abc");
//! # }
//! ```

use http::Request;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, MakeSpan, TraceLayer};
use tracing::{Level, Span};

/// The header that carries the request id both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Opens the `request` span with method, path and request id.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &Request<B>) -> Span {
        let id = req
            .extensions()
            .get::<RequestId>()
            .and_then(|id| id.header_value().to_str().ok())
            .unwrap_or("-");
        tracing::info_span!(
            "request",
            method = %req.method(),
            path = %req.uri().path(),
            request_id = %id,
        )
    }
}

/// The type of [`request_tracing`]'s layer stack.
pub type RequestTracing = ServiceBuilder<
    Stack<
        PropagateRequestIdLayer,
        Stack<
            TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan>,
            Stack<SetRequestIdLayer<MakeRequestUuid>, Identity>,
        >,
    >,
>;

/// Request id + tracing for any HTTP service (see the module docs).
pub fn request_tracing() -> RequestTracing {
    ServiceBuilder::new()
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(RequestSpan)
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
}
