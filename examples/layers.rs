//! hookbox's tower layers around a service that is not hookbox: a tiny "payments"
//! API gets idempotency keys, 429 load shedding, request ids, tracing and Prometheus
//! metrics without knowing anything about webhooks.
//!
//! Run with `cargo run --example layers`, then:
//!
//! ```text
//! curl -si -XPOST localhost:3000/charges -H 'Idempotency-Key: k1' -d '{"amount":5}'
//! curl -si -XPOST localhost:3000/charges -H 'Idempotency-Key: k1' -d '{"amount":5}'   # replayed
//! curl -si -XPOST localhost:3000/charges -H 'Idempotency-Key: k1' -d '{"amount":9}'   # 422
//! curl -s localhost:3000/metrics
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use hookbox::layers::backpressure::{BackpressureLayer, LoadSignal};
use hookbox::layers::idempotency::{IdempotencyLayer, MemoryStore};
use hookbox::layers::metrics::HttpMetricsLayer;
use hookbox::layers::trace::request_tracing;

/// Sheds when more than `limit` charges are being processed at once.
struct InFlight {
    now: AtomicUsize,
    limit: usize,
}

impl LoadSignal for InFlight {
    fn overloaded(&self) -> Option<Duration> {
        (self.now.load(Ordering::Relaxed) >= self.limit).then_some(Duration::from_secs(1))
    }
}

async fn charge(State(load): State<Arc<InFlight>>, body: String) -> (http::StatusCode, String) {
    load.now.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await; // the "payment provider"
    load.now.fetch_sub(1, Ordering::Relaxed);
    (http::StatusCode::CREATED, format!("charged {body}\n"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    hookbox::telemetry::init_tracing("info", hookbox::config::LogFormat::Pretty);
    let prometheus = hookbox::telemetry::install_prometheus()?;
    let load = Arc::new(InFlight {
        now: AtomicUsize::new(0),
        limit: 100,
    });
    // Per route, outermost last: shed first, then buffer + deduplicate.
    let charges = post(charge)
        .route_layer(IdempotencyLayer::new(
            MemoryStore::new(Duration::from_secs(24 * 3600)),
            64 * 1024,
        ))
        .route_layer(BackpressureLayer::new(load.clone()));
    let app = Router::new()
        .route("/charges", charges)
        .route(
            "/metrics",
            get(move || std::future::ready(prometheus.render())),
        )
        // Whole router: metrics see the matched route; tracing wraps everything.
        .layer(HttpMetricsLayer::new())
        .layer(request_tracing())
        .with_state(load);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
