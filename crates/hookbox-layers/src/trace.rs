//! Request ids and tracing spans, from tower-http.
//!
//! [`request_tracing`] stacks, outermost first: [`DropInvalidRequestIdLayer`] (drops
//! a caller's `X-Request-ID` unless it is 1–200 visible ASCII characters, so it
//! cannot flood or forge log lines), `SetRequestId` (keeps the caller's id, else
//! makes a UUID), `TraceLayer` (one span per request carrying `request_id`, so every
//! log line of that request names it, in JSON logs too), and `PropagateRequestId`
//! (echoes the id on the response).
//!
//! ```
//! use axum::{Router, routing::get, body::Body};
//! use hookbox_layers::trace::request_tracing;
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

use std::task::{Context, Poll};

use http::{HeaderValue, Request};
use tower::layer::util::{Identity, Stack};
use tower::{Layer, Service, ServiceBuilder};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, MakeSpan, TraceLayer};
use tracing::{Level, Span};

/// The header that carries the request id both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// [`REQUEST_ID_HEADER`] as a header name, so that looking it up on every request
/// does not parse the name again.
static REQUEST_ID: http::HeaderName = http::HeaderName::from_static(REQUEST_ID_HEADER);
/// The longest caller request id that is kept.
pub const MAX_REQUEST_ID_LEN: usize = 200;

/// True for a request id worth keeping: 1 to [`MAX_REQUEST_ID_LEN`] visible ASCII
/// characters (`!` to `~`).
///
/// ```
/// use hookbox_layers::trace::is_valid_request_id;
/// assert!(is_valid_request_id(b"req-42"));
/// assert!(!is_valid_request_id(b""));
/// assert!(!is_valid_request_id(b"two words"));
/// assert!(!is_valid_request_id(&[b'x'; 201]));
/// ```
pub fn is_valid_request_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len()) && id.iter().all(|b| b.is_ascii_graphic())
}

/// Removes an `X-Request-ID` that [`is_valid_request_id`] refuses (every one, if
/// several are sent and one is bad), so the next layer makes a new id instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct DropInvalidRequestIdLayer;

impl<S> Layer<S> for DropInvalidRequestIdLayer {
    type Service = DropInvalidRequestId<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DropInvalidRequestId { inner }
    }
}

/// The service of [`DropInvalidRequestIdLayer`].
#[derive(Debug, Clone)]
pub struct DropInvalidRequestId<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for DropInvalidRequestId<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let headers = req.headers_mut();
        if headers
            .get_all(&REQUEST_ID)
            .iter()
            .any(|v| !is_valid_request_id(HeaderValue::as_bytes(v)))
        {
            headers.remove(&REQUEST_ID);
        }
        self.inner.call(req)
    }
}

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
            Stack<SetRequestIdLayer<MakeRequestUuid>, Stack<DropInvalidRequestIdLayer, Identity>>,
        >,
    >,
>;

/// Request id + tracing for any HTTP service (see the module docs).
pub fn request_tracing() -> RequestTracing {
    ServiceBuilder::new()
        .layer(DropInvalidRequestIdLayer)
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(RequestSpan)
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
}
