//! Wiring: the store, registry, queue, workers and router, started in the order that
//! keeps the invariants (docs/architecture.md, docs/states.md):
//!
//! 1. open the store and apply migrations;
//! 2. read the handler manifests;
//! 3. bind and serve HTTP — `/health` answers at once, `/ready` says 503;
//! 4. count the pending backlog and fill the window of due work from the table
//!    (SQLite) — or, on PostgreSQL, start claiming; the database is the queue;
//! 5. start the workers and the periodic tasks; `/ready` turns 200.
//!
//! On shutdown `/ready` and intake answer 503, workers get `SHUTDOWN_GRACE` to
//! finish what they hold, and whatever did not finish is recovered on next start
//! (on PostgreSQL: released at once for the other instances).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Config;
use crate::inbox::{Admission, Started, new_inbox};
use crate::processing::worker::Workers;
use crate::registry::Registry;
use crate::registry::live::LiveRegistry;
use crate::registry::manifest::{self, ManifestError};
use crate::retry::{Backoff, Policy};
use crate::sources::Source;
use crate::sources::live::Sources;
use crate::ssrf::TargetGuard;
use crate::state::{AdminToken, AppState, Lifecycle, MetricsExport, Shared};
use crate::store::pull::PullStore;
use crate::store::rejected::RejectedStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError, WorkStore};

/// Why the service could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The database could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listen address could not be bound (the cause follows in the error's
    /// chain).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `DATABASE_URL` names a database this build does not support.
    #[error("DATABASE_URL: unsupported database {0:?} (this build supports {SUPPORTED})")]
    UnsupportedDatabase(String),
    /// The HTTP server failed.
    #[error("http server: {0}")]
    Serve(std::io::Error),
    /// The HTTP client that delivers could not be built.
    #[error("delivery setup: the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The stored subscribers do not make a routing table.
    #[error("delivery setup: the stored subscribers: {0}")]
    Subscribers(#[source] crate::registry::RegistryError),
    /// `hookbox rotate-key` without `ENCRYPTION_KEY`.
    #[error(
        "rotate-key needs ENCRYPTION_KEY (or ENCRYPTION_KEY_FILE): the key to seal every secret under"
    )]
    NoEncryptionKey,
    /// The OTLP exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`) could not be built.
    #[error("{0}")]
    Tracing(String),
}

/// The `DATABASE_URL` forms this build accepts.
#[cfg(feature = "postgres")]
const SUPPORTED: &str = "sqlite://PATH and postgres://…";
#[cfg(not(feature = "postgres"))]
const SUPPORTED: &str = "sqlite://PATH; build with the postgres feature for postgres://…";

/// An opened database.
pub struct Backend {
    /// Everything hookbox persists.
    pub store: Arc<dyn Store>,
    /// How the database is the queue: due work read by one instance (SQLite), or
    /// claims shared by several (PostgreSQL).
    pub work: WorkStore,
    /// Where pull sources keep their cursors.
    pub pull: Arc<dyn PullStore>,
    /// Where sources keep the requests they refused.
    pub rejected: Arc<dyn RejectedStore>,
}

/// Opens the database a configuration names (and applies its migrations).
pub async fn open_backend(config: &Config) -> Result<Backend, AppError> {
    if let Some(path) = config.sqlite_path() {
        let store = Arc::new(
            SqliteStore::open(&path, config.sqlite_synchronous)
                .await?
                .with_keys(config.encryption.clone()),
        );
        return Ok(Backend {
            store: store.clone(),
            work: WorkStore::Due(store.clone()),
            pull: store.clone(),
            rejected: store,
        });
    }
    let url = config.database_url.as_deref().unwrap_or_default();
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let pg = Arc::new(
            crate::store::postgres::PgStore::open_as(
                url,
                config.database_max_connections,
                &config.instance_id,
            )
            .await?
            .with_keys(config.encryption.clone()),
        );
        return Ok(Backend {
            store: pg.clone(),
            work: WorkStore::Claims(pg.clone()),
            pull: pg.clone(),
            rejected: pg,
        });
    }
    Err(AppError::UnsupportedDatabase(
        url.split(':').next().unwrap_or_default().to_owned(),
    ))
}

/// The OpenAPI document of the HTTP API, as pretty-printed JSON (what `hookbox
/// openapi` prints and `GET /openapi.json` serves).
///
/// ```
/// assert!(hookbox::app::openapi_json().contains("/webhooks/{id}/attempts"));
/// ```
pub fn openapi_json() -> String {
    crate::api::openapi::json()
}

/// A new signing secret: `whsec_` and 32 random bytes from the operating system,
/// in base64 (what `hookbox secret` prints).
///
/// ```
/// let secret = hookbox::app::new_signing_secret().expect("os random");
/// assert!(secret.starts_with("whsec_"));
/// assert_ne!(secret, hookbox::app::new_signing_secret().expect("os random"));
/// ```
pub fn new_signing_secret() -> std::io::Result<String> {
    crate::signing::Secret::generate().map_err(std::io::Error::other)
}

/// Opens the store a configuration names (and applies its migrations).
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, AppError> {
    Ok(open_backend(config).await?.store)
}

/// `hookbox rotate-key`: seals every stored subscriber secret again under
/// `ENCRYPTION_KEY` (opening each with it or one of `ENCRYPTION_KEYS_OLD`;
/// secrets kept in the clear are sealed too); how many. A secret no key opens
/// stops it before anything is written.
pub async fn rotate_key(config: &Config) -> Result<usize, AppError> {
    if config.encryption.current_id().is_none() {
        return Err(AppError::NoEncryptionKey);
    }
    // Its own instance id: it must not take over a running instance's claims.
    let mut config = config.clone();
    config.instance_id = format!("rotate-key-{}", std::process::id());
    let store = open_store(&config).await?;
    let subscribers = store.subscribers().await?;
    let mut sealed = 0;
    for subscriber in subscribers.into_iter().filter(|s| s.secret.is_some()) {
        if store.update_subscriber(subscriber).await? {
            sealed += 1;
        }
    }
    Ok(sealed)
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
    /// Opens the store (migrating it) and binds the listen address; no sources.
    pub async fn bind(
        config: Config,
        registry: Registry,
        prometheus: Option<PrometheusHandle>,
    ) -> Result<Self, AppError> {
        Self::bind_with_sources(config, registry, Vec::new(), prometheus).await
    }

    /// [`App::bind`] with push sources (read by
    /// [`sources::manifest::load_dir`](crate::sources::manifest::load_dir)).
    pub async fn bind_with_sources(
        config: Config,
        registry: Registry,
        sources: Vec<Source>,
        prometheus: Option<PrometheusHandle>,
    ) -> Result<Self, AppError> {
        let backend = open_backend(&config).await?;
        let guard = Arc::new(TargetGuard::new(config.allowed_targets.clone()));
        let client =
            crate::registry::kinds::http::client(guard.clone()).map_err(AppError::Client)?;
        let live = LiveRegistry::new(registry, client, guard, policy(&config));
        let (subscribers, version) = backend.store.routing().await?;
        live.reload_at(subscribers, version)
            .map_err(AppError::Subscribers)?;
        let registry = Arc::new(live);
        let lifecycle = Arc::new(Lifecycle::default());
        let admission = Admission {
            sources: sources.iter().map(|s| s.name.clone()).collect(),
            lifecycle: lifecycle.clone(),
        };
        let inbox = new_inbox(
            &config,
            backend.store.clone(),
            backend.work,
            registry.clone(),
            admission,
        );
        let state = AppState::new(Shared {
            store: backend.store,
            inbox,
            registry,
            sources: Arc::new(
                Sources::new(sources)
                    .with_cursors(backend.pull)
                    .with_rejected(backend.rejected),
            ),
            require_idempotency_key: config.require_idempotency_key,
            max_body_bytes: config.max_body_bytes,
            admin_token: AdminToken::new(config.admin_token.clone()),
            metrics: MetricsExport {
                public: config.metrics_public,
                prometheus,
            },
            lifecycle,
            guard: Arc::new(crate::guard::Guard::new(config.allowed_hosts.clone())),
            openapi: crate::state::OpenApiDocument(crate::api::openapi::json().into()),
        });
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

    /// The router [`App::run`] serves (for tests that walk its routes).
    #[cfg(test)]
    pub(crate) fn router(&self) -> axum::Router {
        crate::api::router(self.state.clone())
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
        // A wildcard address is not one a browser opens: show this machine's.
        let shown = if local.ip().is_unspecified() {
            format!("localhost:{}", local.port())
        } else {
            local.to_string()
        };
        info!(
            "listening on http://{local} (the console: http://{shown}/console; events: POST http://{shown}/webhooks)"
        );
        if config.encryption.current_id().is_none() {
            warn!(
                "ENCRYPTION_KEY is not set: subscriber secrets are stored in the clear; set it (base64 of 32 bytes, `openssl rand -base64 32`) and run `hookbox rotate-key` to seal them"
            );
        }
        if state.admin_token.secret().is_none() {
            warn!(
                "ADMIN_TOKEN is not set: the admin routes and the console are open to anyone who can reach {local}; set it (16 characters or more) before hookbox faces a network"
            );
        }
        let exporting = match &config.otlp {
            Some(otlp) => Some(
                crate::trace_export::start(otlp).map_err(|e| AppError::Tracing(e.to_string()))?,
            ),
            None => None,
        };
        let stop_http = CancellationToken::new();
        let http = {
            let stop = stop_http.clone();
            let app =
                crate::api::router(state.clone()).merge(crate::console::router(state.clone()));
            let limits =
                crate::server::Limits::new(config.max_connections as usize, config.max_body_bytes);
            tokio::spawn(async move {
                crate::server::serve(listener, app, limits, stop.cancelled_owned()).await
            })
        };
        let ran = run_workers(&config, &state, http, stop_http, shutdown).await;
        if let Some(exporting) = exporting {
            exporting.finish(Duration::from_secs(5)).await;
        }
        ran
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

/// How long pull sources may take on shutdown to commit what they fetched.
const PULL_STOP_GRACE: Duration = Duration::from_secs(5);

/// Recovery (or claiming), workers, retention, pull sources; then waits for
/// `shutdown`, stops the pull sources and drains.
async fn run_workers(
    config: &Config,
    state: &AppState,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_http: CancellationToken,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let store = state.store.clone();
    let (stop_claiming, stop_leases) = (CancellationToken::new(), CancellationToken::new());
    let shared = state.inbox.is_shared();
    // Destinations paused, failing or disabled before a restart stay so — before
    // the first claim or refill, which would otherwise take a paused
    // destination's work; what changes from now on is kept and announced
    // (operator events).
    crate::operator::restore(&*store, &state.inbox.lanes(), &state.registry).await?;
    let Started {
        queue,
        feed,
        lanes,
        mut tasks,
    } = state.inbox.start(&stop_claiming, &stop_leases).await?;
    let (notices, heard) = tokio::sync::mpsc::unbounded_channel();
    lanes.listen(notices);
    tokio::spawn(crate::operator::run(
        state.inbox.clone(),
        store.clone(),
        heard,
    ));
    if shared {
        tasks.spawn(crate::operator::follow(
            store.clone(),
            lanes.clone(),
            state.registry.clone(),
        ));
    }
    let crew = Workers {
        queue: queue.clone(),
        store: store.clone(),
        registry: state.registry.clone(),
        feed,
        lanes,
        recorders: tokio_util::task::TaskTracker::new(),
    };
    let mut workers = JoinSet::new();
    for _ in 0..config.worker_count {
        workers.spawn(crew.clone().run());
    }
    let retention = tokio::spawn(crate::retention::run(
        store.clone(),
        state.sources.rejected_store().cloned(),
        state
            .sources
            .all()
            .iter()
            .filter_map(|s| Some((s.source.name.clone(), s.source.retention?)))
            .collect(),
        config.retention_days,
        config.cleanup_interval,
    ));
    state.lifecycle.set_ready();
    info!(workers = config.worker_count, "ready");
    let pulls = crate::sources::pull::start(&state.sources, &state.inbox);

    shutdown.await;
    // Pull sources stop reading first and commit what they fetched.
    pulls.stop(PULL_STOP_GRACE).await;
    info!("shutting down: refusing new events, draining workers");
    state.lifecycle.set_draining();
    stop_claiming.cancel();
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
    stop_leases.cancel();
    state.inbox.release().await;
    drop(tasks);
    stop_http.cancel();
    match tokio::time::timeout(Duration::from_secs(5), http).await {
        Ok(Ok(Err(e))) => Err(AppError::Serve(e)),
        _ => Ok(()),
    }
}
