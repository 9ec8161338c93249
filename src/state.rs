//! What the HTTP handlers may use: [`AppState`], the axum state of the router, and
//! the parts of it a handler takes on its own (axum's [`FromRef`] sub-states).
//!
//! A handler names only what it uses — `State<Arc<dyn Store>>` for a read,
//! `State<Arc<Lifecycle>>` for readiness, [`AdminToken`] for the admin check — and
//! axum takes that part out of the [`AppState`] the router holds. The app builder
//! ([`crate::app`]) fills the state at startup; nothing here imports it, so the
//! routes do not depend on the wiring that builds them.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRef;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::Secret;
use crate::inbox::Inbox;
pub(crate) use crate::lifecycle::Lifecycle;
use crate::registry::live::LiveRegistry;
use crate::sources::live::Sources;
use crate::store::Store;

/// `ADMIN_TOKEN`: what the admin routes require, when set.
#[derive(Clone, Default)]
pub struct AdminToken(Option<Arc<Secret>>);

impl AdminToken {
    /// The token `ADMIN_TOKEN` sets, or none (the admin routes are open).
    pub fn new(token: Option<Secret>) -> Self {
        Self(token.map(Arc::new))
    }

    /// The token, when one is set.
    pub fn secret(&self) -> Option<&Secret> {
        self.0.as_deref()
    }
}

/// What intake reads of the configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntakeSettings {
    /// `REQUIRE_IDEMPOTENCY_KEY`.
    pub require_idempotency_key: bool,
    /// `MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
}

/// What `/metrics` needs besides the counts it reads.
#[derive(Clone)]
pub struct MetricsExport {
    /// `METRICS_PUBLIC`: no admin token needed.
    pub public: bool,
    /// Renders `/metrics`; `None` when no Prometheus recorder is installed.
    pub prometheus: Option<PrometheusHandle>,
}

/// The API's OpenAPI document as `GET /openapi.json` serves it, built once at
/// start-up from the route table (`api::openapi`).
#[derive(Clone)]
pub struct OpenApiDocument(pub Arc<str>);

/// Everything the request handlers share.
pub struct Shared {
    /// The database.
    pub store: Arc<dyn Store>,
    /// The one path in: commits new work and hands it to processing.
    pub inbox: Inbox,
    /// The routing table (manifests + subscribers).
    pub registry: Arc<LiveRegistry>,
    /// The push sources (`POST /ingest/{name}`), with their counters and rejected
    /// logs.
    pub sources: Arc<Sources>,
    /// `REQUIRE_IDEMPOTENCY_KEY`.
    pub require_idempotency_key: bool,
    /// `MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
    /// `ADMIN_TOKEN`.
    pub admin_token: AdminToken,
    /// `METRICS_PUBLIC` and the Prometheus handle.
    pub metrics: MetricsExport,
    /// Ready / draining.
    pub lifecycle: Arc<Lifecycle>,
    /// Origin and host checks, and failed-credential counts (`ALLOWED_HOSTS`).
    pub(crate) guard: Arc<crate::guard::Guard>,
    /// What `GET /openapi.json` serves.
    pub openapi: OpenApiDocument,
}

/// Cheap-to-clone handle on [`Shared`], the axum state.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// Wraps what the handlers share.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl FromRef<AppState> for Arc<dyn Store> {
    fn from_ref(app: &AppState) -> Self {
        app.store.clone()
    }
}

impl FromRef<AppState> for Inbox {
    fn from_ref(app: &AppState) -> Self {
        app.inbox.clone()
    }
}

impl FromRef<AppState> for Arc<LiveRegistry> {
    fn from_ref(app: &AppState) -> Self {
        app.registry.clone()
    }
}

impl FromRef<AppState> for Arc<Sources> {
    fn from_ref(app: &AppState) -> Self {
        app.sources.clone()
    }
}

impl FromRef<AppState> for Arc<Lifecycle> {
    fn from_ref(app: &AppState) -> Self {
        app.lifecycle.clone()
    }
}

impl FromRef<AppState> for AdminToken {
    fn from_ref(app: &AppState) -> Self {
        app.admin_token.clone()
    }
}

impl FromRef<AppState> for IntakeSettings {
    fn from_ref(app: &AppState) -> Self {
        Self {
            require_idempotency_key: app.require_idempotency_key,
            max_body_bytes: app.max_body_bytes,
        }
    }
}

impl FromRef<AppState> for OpenApiDocument {
    fn from_ref(app: &AppState) -> Self {
        app.openapi.clone()
    }
}

impl FromRef<AppState> for MetricsExport {
    fn from_ref(app: &AppState) -> Self {
        app.metrics.clone()
    }
}
