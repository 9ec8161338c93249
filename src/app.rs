//! Wiring: the store, registry, queue, workers and router, started in the order that
//! keeps the invariants (SPEC §3):
//!
//! 1. open the store and apply migrations;
//! 2. read the handler manifests;
//! 3. bind and serve HTTP — `/health` answers at once, `/ready` says 503;
//! 4. load every unfinished delivery into the queue (recovery, unbounded);
//! 5. start the workers and the periodic tasks; `/ready` turns 200.
//!
//! On shutdown `/ready` and intake answer 503, workers get `SHUTDOWN_GRACE` to
//! finish what they hold, and whatever did not finish is recovered on next start.

use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, Secret};
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError};
use crate::telemetry::names;
use crate::worker::{self, Job};

/// Why the service could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The database could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `DATABASE_URL` names a database this build does not support.
    #[error("DATABASE_URL: unsupported database {0:?} (this build supports sqlite://PATH)")]
    UnsupportedDatabase(String),
    /// The HTTP server failed.
    #[error("http server: {0}")]
    Serve(std::io::Error),
}

/// Readiness and shutdown flags shared by the API and the background tasks.
#[derive(Debug, Default)]
pub struct Lifecycle {
    ready: AtomicBool,
    draining: AtomicBool,
}

impl Lifecycle {
    /// True once startup recovery is complete.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// True once shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

/// Everything the request handlers share.
pub struct Shared {
    /// The database.
    pub store: Arc<dyn Store>,
    /// The in-memory work queue.
    pub queue: Arc<Queue<Job>>,
    /// The routing table.
    pub registry: Arc<Registry>,
    /// `REQUIRE_IDEMPOTENCY_KEY`.
    pub require_idempotency_key: bool,
    /// `MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
    /// `ADMIN_TOKEN`.
    pub admin_token: Option<Secret>,
    /// `METRICS_PUBLIC`.
    pub metrics_public: bool,
    /// Renders `/metrics`; `None` when no Prometheus recorder is installed.
    pub prometheus: Option<PrometheusHandle>,
    /// Ready / draining.
    pub lifecycle: Lifecycle,
}

/// Cheap-to-clone handle on [`Shared`], the axum state.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Opens the store a configuration names (and applies its migrations).
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, AppError> {
    match config.sqlite_path() {
        Some(path) => Ok(Arc::new(
            SqliteStore::open(&path, config.sqlite_synchronous).await?,
        )),
        None => Err(AppError::UnsupportedDatabase(
            config
                .database_url
                .as_deref()
                .and_then(|u| u.split(':').next())
                .unwrap_or_default()
                .to_owned(),
        )),
    }
}

/// Runs the service until `shutdown` resolves, then drains and returns.
pub async fn serve(
    config: Config,
    registry: Registry,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let store = open_store(&config).await?;
    let queue = Queue::new(config.queue_maxsize);
    let state = AppState(Arc::new(Shared {
        store: store.clone(),
        queue: queue.clone(),
        registry: Arc::new(registry),
        require_idempotency_key: config.require_idempotency_key,
        max_body_bytes: config.max_body_bytes,
        admin_token: config.admin_token.clone(),
        metrics_public: config.metrics_public,
        prometheus,
        lifecycle: Lifecycle::default(),
    }));
    let listener = TcpListener::bind(config.bind_addr)
        .await
        .map_err(|source| AppError::Bind {
            addr: config.bind_addr,
            source,
        })?;
    let local = listener.local_addr().map_err(AppError::Serve)?;
    info!("listening on http://{local}");

    let stop_http = CancellationToken::new();
    let http = {
        let stop = stop_http.clone();
        let app = crate::api::router(state.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        })
    };

    recover(&*store, &queue).await?;
    let mut workers = JoinSet::new();
    for _ in 0..config.worker_count {
        workers.spawn(worker::run(queue.clone(), store.clone()));
    }
    let gauges = tokio::spawn(report_queue(queue.clone()));
    state.0.lifecycle.ready.store(true, Ordering::Release);
    info!(workers = config.worker_count, "ready");

    shutdown.await;
    info!("shutting down: refusing new events, draining workers");
    state.0.lifecycle.draining.store(true, Ordering::Release);
    queue.close();
    if tokio::time::timeout(config.shutdown_grace, workers.join_all())
        .await
        .is_err()
    {
        warn!(grace = ?config.shutdown_grace, "workers still busy after the grace period; recovery will redo their jobs");
    }
    gauges.abort();
    stop_http.cancel();
    match tokio::time::timeout(Duration::from_secs(5), http).await {
        Ok(Ok(Err(e))) => Err(AppError::Serve(e)),
        _ => Ok(()),
    }
}

/// Pushes every unfinished delivery and unsettled event (SPEC §3 recovery).
async fn recover(store: &dyn Store, queue: &Queue<Job>) -> Result<(), StoreError> {
    let left = store.unfinished().await?;
    let (deliveries, unsettled) = (left.deliveries.len(), left.unsettled.len());
    queue.extend(
        left.deliveries
            .into_iter()
            .map(|(delivery, event)| Job::Deliver { delivery, event })
            .chain(left.unsettled.into_iter().map(Job::Settle)),
    );
    if deliveries + unsettled > 0 {
        info!(deliveries, unsettled, "recovered unfinished work");
    }
    Ok(())
}

async fn report_queue(queue: Arc<Queue<Job>>) {
    metrics::gauge!(names::QUEUE_CAPACITY).set(queue.capacity() as f64);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        metrics::gauge!(names::QUEUE_DEPTH).set(queue.depth() as f64);
    }
}
