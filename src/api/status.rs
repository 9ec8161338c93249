//! Reading events: by id, by idempotency key, and the admin listing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use uuid::Uuid;

use crate::api::auth;
use crate::api::problem::Problem;
use crate::model::Status;
use crate::state::AdminToken;
use crate::store::{ListQuery, Store};

/// Largest `limit` of a listing.
pub const MAX_PAGE: u32 = 500;
/// `limit` when none is given.
pub const DEFAULT_PAGE: u32 = 50;

fn invalid_query(detail: impl Into<String>) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid_query").detail(detail)
}

/// Parses a path or cursor id; 400 when it is not a UUID.
pub fn parse_id(text: &str) -> Result<Uuid, Problem> {
    Uuid::parse_str(text).map_err(|_| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid_id").detail("the id is not a UUID")
    })
}

/// `GET /webhooks/{id}`.
pub async fn by_id(
    State(store): State<Arc<dyn Store>>,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    match store.event(id).await {
        Ok(Some(event)) => Ok(Json(event).into_response()),
        Ok(None) => Err(Problem::not_found("event")),
        Err(e) => Err(Problem::unavailable(e.to_string())),
    }
}

/// `GET /webhooks?idempotency_key=K` (open) or the listing (admin).
pub async fn lookup_or_list(
    State(store): State<Arc<dyn Store>>,
    State(admin): State<AdminToken>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, Problem> {
    if let Some(key) = params.get("idempotency_key") {
        return match store.event_by_key(key).await {
            Ok(Some(event)) => Ok(Json(event).into_response()),
            Ok(None) => Err(Problem::not_found("event")),
            Err(e) => Err(Problem::unavailable(e.to_string())),
        };
    }
    auth::require_admin(&admin, &headers)?;
    let query = list_query(&params)?;
    let page = store
        .list_events(&query)
        .await
        .map_err(|e| Problem::unavailable(e.to_string()))?;
    Ok(Json(page).into_response())
}

/// Reads `status`, `event_type`, `limit` and `cursor`.
fn list_query(params: &HashMap<String, String>) -> Result<ListQuery, Problem> {
    let status = params
        .get("status")
        .map(|s| Status::parse(s).ok_or_else(|| invalid_query(format!("unknown status {s:?}"))))
        .transpose()?;
    Ok(ListQuery {
        status,
        event_type: params.get("event_type").cloned(),
        source: None,
        limit: page_limit(params)?,
        before: params
            .get("cursor")
            .map(|c| parse_id(c).map_err(|_| invalid_query("cursor is not one this API gave")))
            .transpose()?,
    })
}

/// Reads `limit` (1..=500, default 50).
pub fn page_limit(params: &HashMap<String, String>) -> Result<u32, Problem> {
    match params.get("limit") {
        None => Ok(DEFAULT_PAGE),
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| invalid_query(format!("limit must be 1 to {MAX_PAGE}"))),
    }
}
