//! `/health`, `/ready` and `/metrics`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::warn;

use crate::api::auth;
use crate::api::problem::Problem;
use crate::inbox::Inbox;
use crate::state::{Lifecycle, MetricsExport, OpenApiDocument};
use crate::store::Store;
use crate::telemetry::names;

/// `GET /health`: 200 while the process runs.
#[utoipa::path(
    get,
    path = "/health",
    tag = "probes",
    responses((status = 200, description = "`{\"status\": \"ok\"}` while the process runs", body = serde_json::Value))
)]
pub(crate) async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /ready`: 200 once recovery is done and the database answers, until shutdown.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "probes",
    responses(
        (status = 200, description = "`{\"status\": \"ready\"}`", body = serde_json::Value),
        (status = 503, description = "`{\"status\": \"unavailable\", \"reason\": …}`: starting, \
                                      shutting down, or the database is away", body = serde_json::Value),
    )
)]
pub(crate) async fn ready(
    State(lifecycle): State<Arc<Lifecycle>>,
    State(store): State<Arc<dyn Store>>,
) -> Response {
    let not_ready = |why: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "reason": why})),
        )
            .into_response()
    };
    if lifecycle.is_draining() {
        return not_ready("shutting down");
    }
    if !lifecycle.is_ready() {
        return not_ready("starting: scheduling unfinished work");
    }
    // A database that is away must read "not ready" within a probe's timeout, not
    // hang it while the pool waits for a connection.
    match tokio::time::timeout(PING_TIMEOUT, store.ping()).await {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        Ok(Err(e)) => not_ready(&format!("database: {e}")),
        Err(_) => not_ready(&format!(
            "database: no answer within {} ms",
            PING_TIMEOUT.as_millis()
        )),
    }
}

/// How long `/ready` waits for the database's answer.
pub(crate) const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(800);

/// `GET /metrics`: Prometheus text (behind the admin token unless `METRICS_PUBLIC`).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    description = "Prometheus text format (docs/api.md, \"Probes and metrics\"). Open unless \
                   `METRICS_PUBLIC=false`, then it needs the admin token.",
    responses(
        (status = 200, description = "The metrics", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 401, description = "`unauthorized` (`METRICS_PUBLIC=false`)", content_type = "application/problem+json", body = Problem),
        (status = 403, description = "`forbidden` (`METRICS_PUBLIC=false`)", content_type = "application/problem+json", body = Problem),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn metrics(
    State(export): State<MetricsExport>,
    State(app): State<crate::state::AppState>,
    State(inbox): State<Inbox>,
    State(store): State<Arc<dyn Store>>,
    client: Option<axum::Extension<crate::guard::ClientAddr>>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    if !export.public {
        // A wrong token counts against the client's address (SPEC §2).
        auth::checked(&app, client.map(|c| c.0.0), &headers)?;
    }
    let Some(handle) = &export.prometheus else {
        return Err(Problem::not_found("metrics recorder"));
    };
    update_gauges(&inbox, &*store).await;
    let mut res = handle.render().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(res)
}

/// Sets the gauges of `/metrics` (docs/api.md, "Probes and metrics") when it is
/// scraped. The store's
/// counts are computed at most once a second however often it is scraped
/// ([`crate::store::STATS_MAX_AGE`]); the queue's are read as they are.
async fn update_gauges(inbox: &Inbox, store: &dyn Store) {
    metrics::gauge!(names::QUEUE_CAPACITY).set(inbox.capacity() as f64);
    metrics::gauge!(names::QUEUE_DEPTH).set(inbox.depth() as f64);
    match store.stats().await {
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

/// `GET /openapi.json`: the API's OpenAPI document ([`super::openapi`]).
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "probes",
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json"))
)]
pub(crate) async fn openapi(State(OpenApiDocument(document)): State<OpenApiDocument>) -> Response {
    let mut res = document.to_string().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}
