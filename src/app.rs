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
use crate::ordering::OrderingGate;
use crate::queue::Queue;
use crate::registry::Registry;
use crate::registry::live::LiveRegistry;
use crate::registry::manifest::{self, ManifestError};
use crate::retry::{Backoff, Policy};
use crate::ssrf::TargetGuard;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError};
use crate::telemetry::names;
use crate::timer::Timer;
use crate::worker::{Job, Workers};

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
    /// The delivery client or the subscribers could not be set up.
    #[error("delivery setup: {0}")]
    Http(String),
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
    /// The routing table (manifests + subscribers).
    pub registry: Arc<LiveRegistry>,
    /// Strict per-key ordering.
    pub gate: Arc<OrderingGate>,
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

/// The global retry policy of a configuration.
pub fn policy(config: &Config) -> Policy {
    Policy {
        max_attempts: config.max_attempts,
        backoff: Backoff::Exponential {
            base: config.retry_base_delay,
            max: config.retry_max_delay,
        },
        timeout: config.handler_timeout,
        max_delay: config.retry_max_delay,
    }
}

/// Reads the handler manifests of `dir` with this configuration's policy and SSRF
/// guard; every problem found is returned.
pub fn load_registry(
    config: &Config,
    dir: &std::path::Path,
) -> Result<Registry, Vec<ManifestError>> {
    let guard = Arc::new(TargetGuard::new(config.allowed_targets.clone()));
    let client = crate::registry::kinds::http::client(guard.clone()).map_err(|e| {
        vec![ManifestError {
            file: dir.to_owned(),
            field: "-".into(),
            message: format!("cannot build the HTTP client: {e}"),
        }]
    })?;
    let ctx = manifest::Context {
        policy: policy(config),
        guard,
        client,
        env: Arc::new(|name: &str| std::env::var(name).ok()),
    };
    manifest::load_dir(dir, &ctx)
}

/// A bound, not yet running service: open store, listening socket.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use hookbox::{app::App, config::Config, registry::Registry};
/// let app = App::bind(Config::from_pairs([("BIND_ADDR", "127.0.0.1:0")])?, Registry::default(), None).await?;
/// println!("on {}", app.local_addr());
/// app.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct App {
    config: Config,
    state: AppState,
    listener: TcpListener,
    local: SocketAddr,
}

impl App {
    /// Opens the store (migrating it) and binds the listen address.
    pub async fn bind(
        config: Config,
        registry: Registry,
        prometheus: Option<PrometheusHandle>,
    ) -> Result<Self, AppError> {
        let store = open_store(&config).await?;
        let guard = Arc::new(TargetGuard::new(config.allowed_targets.clone()));
        let client = crate::registry::kinds::http::client(guard.clone())
            .map_err(|e| AppError::Http(e.to_string()))?;
        let live = LiveRegistry::new(registry, client, guard, policy(&config));
        live.reload(&store.subscribers().await?)
            .map_err(|e| AppError::Http(e.to_string()))?;
        let state = AppState(Arc::new(Shared {
            store,
            queue: Queue::new(config.queue_maxsize),
            registry: Arc::new(live),
            gate: Arc::new(OrderingGate::default()),
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
        Ok(Self {
            config,
            state,
            listener,
            local,
        })
    }

    /// The address it listens on (the real port when `BIND_ADDR` said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until `shutdown` resolves, then drains (see the module docs).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        let Self {
            config,
            state,
            listener,
            local,
        } = self;
        info!("listening on http://{local}");
        let (store, queue) = (state.store.clone(), state.queue.clone());
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
        run_workers(&config, &state, http, stop_http, store, queue, shutdown).await
    }
}

/// Runs the service until `shutdown` resolves, then drains and returns.
pub async fn serve(
    config: Config,
    registry: Registry,
    prometheus: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    App::bind(config, registry, prometheus)
        .await?
        .run(shutdown)
        .await
}

/// Recovery, workers, retention; then waits for `shutdown` and drains.
async fn run_workers(
    config: &Config,
    state: &AppState,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_http: CancellationToken,
    store: Arc<dyn Store>,
    queue: Arc<Queue<Job>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let timer = Timer::start(queue.clone());
    recover(&*store, &queue, &state.gate, &timer).await?;
    let crew = Workers {
        queue: queue.clone(),
        store: store.clone(),
        registry: state.registry.clone(),
        gate: state.gate.clone(),
        timer,
        recorders: tokio_util::task::TaskTracker::new(),
    };
    let mut workers = JoinSet::new();
    for _ in 0..config.worker_count {
        workers.spawn(crew.clone().run());
    }
    let retention = tokio::spawn(crate::retention::run(
        store.clone(),
        config.retention_days,
        config.cleanup_interval,
    ));
    state.0.lifecycle.ready.store(true, Ordering::Release);
    info!(workers = config.worker_count, "ready");

    shutdown.await;
    info!("shutting down: refusing new events, draining workers");
    state.0.lifecycle.draining.store(true, Ordering::Release);
    queue.close();
    crew.recorders.close();
    let drained = async {
        workers.join_all().await;
        crew.recorders.wait().await;
    };
    if tokio::time::timeout(config.shutdown_grace, drained)
        .await
        .is_err()
    {
        warn!(grace = ?config.shutdown_grace, "workers still busy after the grace period; recovery will redo their jobs");
    }
    retention.abort();
    stop_http.cancel();
    match tokio::time::timeout(Duration::from_secs(5), http).await {
        Ok(Ok(Err(e))) => Err(AppError::Serve(e)),
        _ => Ok(()),
    }
}

/// Pushes every unfinished delivery and unsettled event (SPEC §3 recovery), whatever
/// the queue's bound; retries that are not due yet wait in the timer.
async fn recover(
    store: &dyn Store,
    queue: &Queue<Job>,
    gate: &OrderingGate,
    timer: &Timer,
) -> Result<(), StoreError> {
    let left = store.unfinished().await?;
    let (deliveries, unsettled) = (left.deliveries.len(), left.unsettled.len());
    let now = crate::model::Timestamp::now();
    let mut due = Vec::with_capacity(deliveries + unsettled);
    for d in left.deliveries {
        if let Some(value) = &d.ordering_value {
            gate.register(&d.handler, value, d.delivery);
        }
        let job = Job::deliver(d.delivery, d.event);
        match d.retry_after.filter(|t| *t > now) {
            Some(at) => timer.at(job, at),
            None => due.push(job),
        }
    }
    due.extend(left.unsettled.into_iter().map(Job::Settle));
    queue.extend(due);
    if deliveries + unsettled > 0 {
        info!(deliveries, unsettled, "recovered unfinished work");
    }
    Ok(())
}

/// Sets the gauges of SPEC §5 (called when `/metrics` is scraped, so they are exact).
pub async fn update_gauges(state: &AppState) {
    metrics::gauge!(names::QUEUE_CAPACITY).set(state.queue.capacity() as f64);
    metrics::gauge!(names::QUEUE_DEPTH).set(state.queue.depth() as f64);
    match state.store.stats().await {
        Ok(stats) => {
            metrics::gauge!(names::EVENTS_PENDING).set(stats.pending_events as f64);
            metrics::gauge!(names::DEAD_LETTERS).set(stats.dead_letters as f64);
            let age = stats.oldest_pending.map_or(0.0, |t| {
                (crate::model::Timestamp::now().millis() - t.millis()).max(0) as f64 / 1000.0
            });
            metrics::gauge!(names::OLDEST_PENDING_AGE).set(age);
        }
        Err(e) => warn!(error = %e, "could not read the store's counts for /metrics"),
    }
}
