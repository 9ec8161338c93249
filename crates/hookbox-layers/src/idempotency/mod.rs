//! Idempotency keys for any HTTP tower service, after the IETF
//! `Idempotency-Key` header draft.
//!
//! The layer buffers the request body — bounded in size (over the limit is a 413)
//! and in time (a body that has not fully arrived after [`BODY_READ_TIMEOUT`], or
//! what [`IdempotencyLayer::body_timeout`] sets, is a 408) — asks its
//! [`IdempotencyStore`] who the request is, and then:
//!
//! | the store says | the answer |
//! |---|---|
//! | no key | the inner service, untouched |
//! | a new key | the inner service; its response is handed back to the store |
//! | the same key and fingerprint, finished | the stored response, replayed, with `Idempotent-Replayed: true` |
//! | the same key, still in flight | 409, code `idempotency_key_in_flight` |
//! | the same key, another fingerprint | 422, code `idempotency_key_reused` |
//!
//! The store decides what a key and a fingerprint are, so the same layer serves a
//! generic API ([`MemoryStore`]: the `Idempotency-Key` header, a hash of method, path
//! and body, responses kept for a published expiry) and hookbox's intake, whose store
//! is the events table with a cache of recently committed keys in front (a
//! duplicate gets the event's *current* status).
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::post, body::Body};
//! use hookbox_layers::idempotency::{IdempotencyLayer, MemoryStore};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = MemoryStore::new(Duration::from_secs(24 * 3600));
//! let app = Router::new()
//!     .route("/charges", post(|| async { (http::StatusCode::CREATED, "charged") }))
//!     .route_layer(IdempotencyLayer::new(store, 64 * 1024));
//! let req = || {
//!     http::Request::post("/charges")
//!         .header("idempotency-key", "k1")
//!         .body(Body::from("{\"amount\":5}"))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(req()).await.unwrap();
//! let again = app.oneshot(req()).await.unwrap();
//! assert_eq!(first.status(), 201);
//! assert_eq!(again.status(), 201);
//! assert_eq!(again.headers()["idempotent-replayed"], "true");
//! # }
//! ```

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, request::Parts};
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use tower::{BoxError, Layer, Service};

pub use memory::MemoryStore;

use crate::ResponseBody;
use crate::rejection::Rejection;

/// A boxed, sendable future, as the store's methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Who a request is, as far as idempotency goes.
#[derive(Debug)]
pub enum Identity {
    /// No key: pass it through.
    Anonymous,
    /// A key and a fingerprint of what the request asks for.
    Keyed {
        /// The idempotency key.
        key: String,
        /// Two requests with one key must have equal fingerprints.
        fingerprint: String,
    },
    /// The request is malformed in a way the store already knows: answer this.
    Reject(Rejection),
}

/// What the store knows of a key.
#[derive(Debug)]
pub enum Begin {
    /// First time (the store may have reserved the key): call the inner service.
    Proceed,
    /// Another request with this key is being processed.
    InFlight,
    /// The key was used for a different request.
    Mismatch,
    /// Already answered: send this again.
    Replay(CachedResponse),
}

/// A response as stored for replay.
#[derive(Debug, Clone)]
pub struct CachedResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers worth replaying (content type, location, …).
    pub headers: HeaderMap,
    /// The full body.
    pub body: Bytes,
}

impl CachedResponse {
    fn into_response(self) -> Response<Full<Bytes>> {
        let mut res = Response::new(Full::new(self.body));
        *res.status_mut() = self.status;
        // A stored Content-Type replaces this one; a body without one is bytes.
        res.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        res.headers_mut().extend(self.headers);
        res.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        res
    }
}

/// Where keys and their outcomes live. Implement it for your database; hookbox uses
/// its events table, [`MemoryStore`] keeps them in memory.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Reads the request's key and fingerprint. It may parse the body and leave what
    /// it parsed in `parts.extensions` for the handler, so nothing is parsed twice.
    fn identify(&self, parts: &mut Parts, body: &Bytes) -> Identity;

    /// Looks the key up (and reserves it, if the store tracks requests in flight).
    /// `parts` is the request as [`IdempotencyStore::identify`] left it (with what
    /// it put in the extensions), for a store whose answer depends on more than the
    /// key: hookbox's intake answers a known key from memory only when the request
    /// would pass the checks its handler makes before the table.
    fn begin<'a>(
        &'a self,
        parts: &'a Parts,
        key: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<Begin, BoxError>>;

    /// Records the inner service's answer for a key that [`Begin::Proceed`]ed, or
    /// releases the key (`None`) when the answer must not be replayed (5xx, errors).
    fn finish(
        &self,
        key: String,
        fingerprint: String,
        response: Option<CachedResponse>,
    ) -> BoxFuture<'_, ()>;

    /// Whether [`IdempotencyStore::finish`] keeps the responses it is handed (the
    /// default). A store whose record of a key lives elsewhere — hookbox's intake,
    /// where the event row is the record — answers `false`: the layer then calls
    /// `finish` with `None` and sends the inner service's response as it is,
    /// without buffering and copying every one.
    fn keeps_responses(&self) -> bool {
        true
    }
}

/// How long the layer waits, by default, for a request's whole body (counted from
/// when its headers arrived) before answering 408: a client that sends headers and
/// then trickles or stalls its body holds a connection and a buffer only this long.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Wraps services in [`Idempotency`].
pub struct IdempotencyLayer<St> {
    store: Arc<St>,
    max_body_bytes: usize,
    body_timeout: Duration,
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
        }
    }
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// Uses `store`; request bodies over `max_body_bytes` get 413.
    pub fn new(store: St, max_body_bytes: usize) -> Self {
        Self::shared(Arc::new(store), max_body_bytes)
    }

    /// Like [`IdempotencyLayer::new`] with a store that is shared elsewhere too.
    pub fn shared(store: Arc<St>, max_body_bytes: usize) -> Self {
        Self {
            store,
            max_body_bytes,
            body_timeout: BODY_READ_TIMEOUT,
        }
    }

    /// Answers 408 when a body has not fully arrived `timeout` after its request's
    /// headers (default [`BODY_READ_TIMEOUT`]).
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }
}

impl<S, St> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            store: self.store.clone(),
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
        }
    }
}

/// The service that [`IdempotencyLayer`] makes.
pub struct Idempotency<S, St> {
    inner: S,
    store: Arc<St>,
    max_body_bytes: usize,
    body_timeout: Duration,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            store: self.store.clone(),
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
        }
    }
}

/// Largest response body kept for replay; larger answers are not replayable.
const MAX_CACHED_RESPONSE: usize = 1 << 20;

/// The response of [`Idempotency`]: the inner service's, or the layer's own.
type Answer<ResB> = Response<ResponseBody<ResB>>;

impl<S, St, ReqB, ResB> Service<Request<ReqB>> for Idempotency<S, St>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    St: IdempotencyStore,
    ReqB: http_body::Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Answer<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Answer<ResB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // Use the service that was driven to readiness; leave a fresh clone behind.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let store = self.store.clone();
        let (limit, timeout) = (self.max_body_bytes, self.body_timeout);
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let bytes = match buffer(&parts.headers, body, limit, timeout).await {
                Ok(bytes) => bytes,
                Err(rejection) => {
                    let mut res = own(rejection.into_response());
                    if res.status() == StatusCode::REQUEST_TIMEOUT {
                        // The rest of the body may still come: the connection is done.
                        res.headers_mut()
                            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    return Ok(res);
                }
            };
            match store.identify(&mut parts, &bytes) {
                Identity::Anonymous => Ok(call(inner, parts, bytes).await?.map(Either::Left)),
                Identity::Reject(rejection) => Ok(own(rejection.into_response())),
                Identity::Keyed { key, fingerprint } => {
                    keyed(inner, &*store, parts, bytes, key, fingerprint).await
                }
            }
        })
    }
}

/// A response the layer makes itself.
fn own<ResB>(res: Response<Full<Bytes>>) -> Answer<ResB> {
    res.map(Either::Right)
}

async fn call<S, ResB>(mut inner: S, parts: Parts, bytes: Bytes) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>>,
{
    inner
        .call(Request::from_parts(parts, Full::new(bytes)))
        .await
}

async fn keyed<S, St, ResB>(
    inner: S,
    store: &St,
    parts: Parts,
    bytes: Bytes,
    key: String,
    fingerprint: String,
) -> Result<Answer<ResB>, S::Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>>,
    St: IdempotencyStore,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    match store.begin(&parts, &key, &fingerprint).await {
        Err(e) => Ok(own(
            unavailable(format!("idempotency store: {e}")).into_response()
        )),
        Ok(Begin::Replay(cached)) => Ok(own(cached.into_response())),
        Ok(Begin::InFlight) => Ok(own(Rejection::new(
            StatusCode::CONFLICT,
            "idempotency_key_in_flight",
        )
        .detail("a request with this Idempotency-Key is still being processed; retry later")
        .retry_after(1)
        .into_response())),
        Ok(Begin::Mismatch) => Ok(own(reused().into_response())),
        Ok(Begin::Proceed) => {
            let res = match call(inner, parts, bytes).await {
                Ok(res) => res,
                Err(e) => {
                    store.finish(key, fingerprint, None).await;
                    return Err(e);
                }
            };
            if !store.keeps_responses() {
                store.finish(key, fingerprint, None).await;
                return Ok(res.map(Either::Left));
            }
            let (res, cached) = snapshot(res).await;
            store.finish(key, fingerprint, cached).await;
            Ok(res)
        }
    }
}

/// The 422 for a key used with another request.
pub fn reused() -> Rejection {
    Rejection::new(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
        .detail("this idempotency key was already used with a different request")
}

/// The 503 for a store that could not answer: nothing was done; retry in a second.
fn unavailable(detail: String) -> Rejection {
    Rejection::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        .detail(detail)
        .retry_after(1)
}

/// Buffers a request body up to `limit` bytes within `timeout`: over the limit is a
/// 413 `payload_too_large`, too slow a 408 `request_timeout`, a body that fails to
/// arrive a 400 `invalid_body`, one that did not fit in the
/// [budget](crate::body_budget) a 503 `unavailable` with `Retry-After: 1`.
pub async fn buffer<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Rejection>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        Rejection::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            .detail(format!("the request body is larger than {limit} bytes"))
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = Limited::new(body, limit).collect();
    let Ok(read) = tokio::time::timeout(timeout, read).await else {
        return Err(
            Rejection::new(StatusCode::REQUEST_TIMEOUT, "request_timeout").detail(format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            )),
        );
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large()),
        Err(e) if crate::body_budget::exceeded(&*e) => {
            Err(unavailable(crate::body_budget::BudgetExceeded.to_string()))
        }
        Err(e) => Err(Rejection::new(StatusCode::BAD_REQUEST, "invalid_body")
            .detail(format!("could not read the request body: {e}"))),
    }
}

/// Buffers a response so it can be both sent and stored. 5xx answers and oversized
/// bodies are not stored.
async fn snapshot<ResB>(res: Response<ResB>) -> (Answer<ResB>, Option<CachedResponse>)
where
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    if res.status().is_server_error() {
        return (res.map(Either::Left), None);
    }
    let (parts, body) = res.into_parts();
    match Limited::new(body, MAX_CACHED_RESPONSE).collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            let mut headers = HeaderMap::new();
            for name in [http::header::CONTENT_TYPE, http::header::LOCATION] {
                if let Some(v) = parts.headers.get(&name) {
                    headers.insert(name, v.clone());
                }
            }
            let cached = CachedResponse {
                status: parts.status,
                headers,
                body: bytes.clone(),
            };
            let full = Either::Right(Full::new(bytes));
            (Response::from_parts(parts, full), Some(cached))
        }
        Err(_) => (
            own(
                Rejection::new(StatusCode::INTERNAL_SERVER_ERROR, "internal")
                    .detail("the response was too large to keep for idempotent replay")
                    .into_response(),
            ),
            None,
        ),
    }
}
