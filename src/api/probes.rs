//! `/health`, `/ready` and `/metrics`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::api::auth;
use crate::api::problem::Problem;
use crate::app::AppState;

/// `GET /health`: 200 while the process runs.
pub async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /ready`: 200 once recovery is done and the database answers, until shutdown.
pub async fn ready(State(app): State<AppState>) -> Response {
    let not_ready = |why: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "reason": why})),
        )
            .into_response()
    };
    if app.lifecycle.is_draining() {
        return not_ready("shutting down");
    }
    if !app.lifecycle.is_ready() {
        return not_ready("starting: loading unfinished work");
    }
    match app.store.ping().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(e) => not_ready(&format!("database: {e}")),
    }
}

/// `GET /metrics`: Prometheus text (behind the admin token unless `METRICS_PUBLIC`).
pub async fn metrics(State(app): State<AppState>, headers: HeaderMap) -> Result<Response, Problem> {
    if !app.metrics_public {
        auth::require_admin(&app, &headers)?;
    }
    let Some(handle) = &app.prometheus else {
        return Err(Problem::not_found("metrics recorder"));
    };
    crate::app::update_gauges(&app).await;
    let mut res = handle.render().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(res)
}
