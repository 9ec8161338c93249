//! The built-in receiver `deliver` counts deliveries with: each (subscriber,
//! `webhook-id`) once. `soak` uses it too, answering 500 to a fixed share of the
//! requests ([`Tally::fail_percent`]) so that hookbox retries, and without keeping
//! every id ([`Tally::forget_ids`]: an hour of ids would be the receiver's memory).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use hyper::{StatusCode, Uri};

use crate::BoxError;

/// What the built-in receiver has seen, and how it answers.
#[derive(Default)]
pub(crate) struct Tally {
    /// Requests received, duplicates included.
    pub(crate) requests: AtomicU64,
    /// Distinct (subscriber path, `webhook-id`) pairs received (not counted with
    /// [`Tally::forget_ids`]).
    pub(crate) unique: AtomicU64,
    /// Requests answered 200.
    pub(crate) succeeded: AtomicU64,
    /// Requests answered 500 on purpose ([`Tally::fail_percent`]).
    pub(crate) failed: AtomicU64,
    /// Answer 500 to this many of every 100 requests, spread evenly and the same
    /// on every run ([`fails`]); 0 (the default) answers 200 to all.
    pub(crate) fail_percent: u8,
    /// Count answers only: keep no `webhook-id` (`seen`, `per_path` and `unique`
    /// stay empty).
    pub(crate) forget_ids: bool,
    pub(crate) inner: std::sync::Mutex<TallyInner>,
}

#[derive(Default)]
pub(crate) struct TallyInner {
    /// `"<path> <webhook-id>"` of every delivery received.
    pub(crate) seen: std::collections::HashSet<String>,
    /// Distinct deliveries per request path (one path per subscriber).
    pub(crate) per_path: BTreeMap<String, u64>,
    /// When the first new delivery arrived.
    pub(crate) first_new: Option<Instant>,
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

/// Whether request `n` (0 for the first) is one of the `percent` in every 100
/// that fail: those where `n · percent / 100` steps up, so the failures are spread
/// evenly (every tenth, the 10th, 20th, …, for 10) and exactly `percent` of every
/// 100 consecutive requests fail.
pub(crate) fn fails(n: u64, percent: u8) -> bool {
    let percent = u64::from(percent.min(100));
    (n + 1) * percent / 100 > n * percent / 100
}

/// The receiver's only handler: count, answer 200 with an empty body (or 500, for
/// the requests [`fails`] picks).
pub(crate) async fn receive(
    axum::extract::State(tally): axum::extract::State<Arc<Tally>>,
    uri: Uri,
    headers: hyper::HeaderMap,
    // Read the body whole so the keep-alive connection can be reused.
    _body: Bytes,
) -> StatusCode {
    let n = tally.requests.fetch_add(1, Ordering::Relaxed);
    let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    if fails(n, tally.fail_percent) {
        tally.failed.fetch_add(1, Ordering::Relaxed);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    tally.succeeded.fetch_add(1, Ordering::Relaxed);
    if tally.forget_ids {
        return StatusCode::OK;
    }
    let mut inner = tally.lock();
    if inner.seen.insert(format!("{} {id}", uri.path())) {
        *inner.per_path.entry(uri.path().to_owned()).or_default() += 1;
        let now = Instant::now();
        inner.first_new.get_or_insert(now);
        inner.last_new = Some(now);
        tally.unique.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

/// Starts the receiver on `127.0.0.1:0` (TCP_NODELAY, HTTP/1.1 keep-alive).
pub(crate) async fn start_receiver(tally: Arc<Tally>) -> Result<SocketAddr, BoxError> {
    start_receiver_on(tally, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// Starts the receiver on `addr` (TCP_NODELAY, HTTP/1.1 keep-alive).
pub(crate) async fn start_receiver_on(
    tally: Arc<Tally>,
    addr: SocketAddr,
) -> Result<SocketAddr, BoxError> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot start the receiver on {addr}: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tenth_fails_for_ten_percent() {
        let failing: Vec<u64> = (0..30).filter(|&n| fails(n, 10)).collect();
        assert_eq!(failing, [9, 19, 29]);
    }

    #[test]
    fn exactly_the_percentage_of_every_hundred_fails() {
        for percent in [0, 1, 3, 10, 33, 50, 99, 100] {
            for start in [0, 100, 12_300] {
                let failed = (start..start + 100).filter(|&n| fails(n, percent)).count();
                assert_eq!(failed, usize::from(percent), "{percent} % from {start}");
            }
        }
        assert!((0..1000).all(|n| fails(n, 200)), "over 100 is 100");
    }

    #[tokio::test]
    async fn the_receiver_refuses_every_tenth_request() -> Result<(), BoxError> {
        let tally = Arc::new(Tally {
            fail_percent: 10,
            forget_ids: true,
            ..Tally::default()
        });
        let addr = start_receiver(Arc::clone(&tally)).await?;
        let target = Arc::new(crate::conn::Target::resolve(&format!("http://{addr}")).await?);
        let mut conn = crate::conn::Connection::new(Arc::clone(&target));
        let mut refused = Vec::new();
        for n in 0..20 {
            let request = hyper::Request::post(target.path("/bench-soak"))
                .header(hyper::header::HOST, target.host.clone())
                .header("webhook-id", format!("msg_{n}"))
                .body(http_body_util::Full::new(Bytes::new()))?;
            if conn.send(request).await?.status() == StatusCode::INTERNAL_SERVER_ERROR {
                refused.push(n);
            }
        }
        assert_eq!(refused, [9, 19]);
        assert_eq!(tally.succeeded.load(Ordering::Relaxed), 18);
        assert_eq!(tally.failed.load(Ordering::Relaxed), 2);
        assert!(tally.lock().seen.is_empty(), "no ids kept");
        Ok(())
    }
}
