//! The built-in receiver `deliver` counts deliveries with: each (subscriber,
//! `webhook-id`) once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use hyper::{StatusCode, Uri};

use crate::BoxError;

/// What the built-in receiver has seen.
#[derive(Default)]
pub(crate) struct Tally {
    /// Requests received, duplicates included.
    pub(crate) requests: AtomicU64,
    /// Distinct (subscriber path, `webhook-id`) pairs received.
    pub(crate) unique: AtomicU64,
    pub(crate) inner: std::sync::Mutex<TallyInner>,
}

#[derive(Default)]
pub(crate) struct TallyInner {
    /// `"<path> <webhook-id>"` of every delivery received.
    pub(crate) seen: std::collections::HashSet<String>,
    /// Distinct deliveries per request path (one path per subscriber).
    pub(crate) per_path: BTreeMap<String, u64>,
    /// When the latest new delivery arrived.
    pub(crate) last_new: Option<Instant>,
}

impl Tally {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, TallyInner> {
        // A panic while holding the lock cannot leave the counters inconsistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The receiver's only handler: count, answer 200 with an empty body.
pub(crate) async fn receive(
    axum::extract::State(tally): axum::extract::State<Arc<Tally>>,
    uri: Uri,
    headers: hyper::HeaderMap,
    // Read the body whole so the keep-alive connection can be reused.
    _body: Bytes,
) -> StatusCode {
    tally.requests.fetch_add(1, Ordering::Relaxed);
    let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut inner = tally.lock();
    if inner.seen.insert(format!("{} {id}", uri.path())) {
        *inner.per_path.entry(uri.path().to_owned()).or_default() += 1;
        inner.last_new = Some(Instant::now());
        tally.unique.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

/// Starts the receiver on `127.0.0.1:0` (TCP_NODELAY, HTTP/1.1 keep-alive).
pub(crate) async fn start_receiver(tally: Arc<Tally>) -> Result<SocketAddr, BoxError> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot start the receiver on 127.0.0.1: {e}"))?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|tcp| {
        // Only latency suffers without it.
        let _ = tcp.set_nodelay(true);
    });
    let app = axum::Router::new().fallback(receive).with_state(tally);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("loadgen: the receiver stopped: {err}");
        }
    });
    Ok(addr)
}
