//! The layers around a service that is not hookbox: a tiny "payments" API gets
//! idempotency keys, 429 load shedding, request ids, tracing and Prometheus metrics
//! (under its own `payments_` prefix) without knowing anything about webhooks.
//!
//! Run with `cargo run -p hookbox-layers --example layers`, then:
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
use hookbox_layers::backpressure::{BackpressureLayer, LoadSignal};
use hookbox_layers::idempotency::{IdempotencyLayer, MemoryStore};
use hookbox_layers::metrics::HttpMetricsLayer;
use hookbox_layers::trace::request_tracing;

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
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
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
        .layer(HttpMetricsLayer::new().prefix("payments_"))
        .layer(request_tracing())
        .with_state(load);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
