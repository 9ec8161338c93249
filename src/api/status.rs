//! Reading events: by id, by idempotency key, their attempt history, and the admin
//! listing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use uuid::Uuid;

use crate::api::auth;
use crate::api::problem::Problem;
use crate::guard::ClientAddr;
use crate::model::{Attempt, EventView, Status};
use crate::state::AppState;
use crate::store::{ListQuery, Page, Store};

/// Largest `limit` of a listing.
pub(crate) const MAX_PAGE: u32 = 500;
/// `limit` when none is given.
pub(crate) const DEFAULT_PAGE: u32 = 50;

fn invalid_query(detail: impl Into<String>) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid_query").detail(detail)
}

/// Parses a path or cursor id; 400 when it is not a UUID.
pub(crate) fn parse_id(text: &str) -> Result<Uuid, Problem> {
    Uuid::parse_str(text).map_err(|_| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid_id").detail("the id is not a UUID")
    })
}

/// `GET /webhooks/{id}`.
#[utoipa::path(
    get,
    path = "/webhooks/{id}",
    tag = "events",
    params(("id" = String, Path, description = "The event's id (a UUID)")),
    responses(
        (status = 200, description = "The event with its deliveries", body = EventView),
        (status = 400, description = "`invalid_id`: not a UUID", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such event", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn by_id(
    State(store): State<Arc<dyn Store>>,
    State(app): State<AppState>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let content = auth::sees_content(&app, client.map(|c| c.0.0), &headers)?;
    match store.event(id).await {
        Ok(Some(event)) => Ok(Json(shown(event, content)).into_response()),
        Ok(None) => Err(Problem::not_found("event")),
        Err(e) => Err(e.into()),
    }
}

/// The answer of `GET /webhooks/{id}/attempts`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Attempts {
    /// Every attempt of every delivery of the event, oldest first.
    pub items: Vec<Attempt>,
}

/// `GET /webhooks/{id}/attempts`: the attempt history, oldest first; 404 for an
/// unknown event (an event nothing was tried on yet has none).
#[utoipa::path(
    get,
    path = "/webhooks/{id}/attempts",
    tag = "events",
    params(("id" = String, Path, description = "The event's id (a UUID)")),
    responses(
        (status = 200, description = "Every attempt of every delivery, oldest first", body = Attempts),
        (status = 400, description = "`invalid_id`: not a UUID", content_type = "application/problem+json", body = Problem),
        (status = 401, description = "`unauthorized`: an admin token is set and not given", content_type = "application/problem+json", body = Problem),
        (status = 403, description = "`forbidden`: another token", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such event", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn attempts(
    State(store): State<Arc<dyn Store>>,
    State(app): State<AppState>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    // The attempts hold receivers' answers: content, not status. A wrong token
    // counts against the client's address, as on an admin route.
    auth::checked(&app, client.map(|c| c.0.0), &headers)?;
    let id = parse_id(&id)?;
    let items = store.list_attempts(id).await?;
    // No attempts: an event not tried yet, or no event at all.
    if items.is_empty() && store.event(id).await?.is_none() {
        return Err(Problem::not_found("event"));
    }
    Ok(Json(Attempts { items }).into_response())
}

/// What `GET /webhooks` answers: the event holding a key, or a page of the listing.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum Lookup {
    /// With `idempotency_key`: the event holding it.
    Event(Box<EventView>),
    /// Without: a page of the admin listing, newest first.
    Page(Page<EventView>),
}

/// `GET /webhooks?idempotency_key=K` (open) or the listing (admin).
#[utoipa::path(
    get,
    path = "/webhooks",
    tag = "events",
    description = "With `idempotency_key`: the event holding that key (open). Without it: \
                   the listing, newest first, which needs the admin token when one is set.",
    params(
        ("idempotency_key" = Option<String>, Query, description = "The key to look up"),
        ("status" = Option<Status>, Query, description = "Listing: only events with this status"),
        ("event_type" = Option<String>, Query, description = "Listing: only events of this type"),
        ("limit" = Option<u32>, Query, description = "Listing: page size, 1 to 500 (default 50)"),
        ("cursor" = Option<String>, Query, description = "Listing: the previous page's `next_cursor`"),
    ),
    responses(
        (status = 200, description = "The event, or a page of events", body = Lookup),
        (status = 400, description = "`invalid_query`", content_type = "application/problem+json", body = Problem),
        (status = 401, description = "`unauthorized` (listing without the admin token)", content_type = "application/problem+json", body = Problem),
        (status = 403, description = "`forbidden` (listing with another token)", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no event holds that key", content_type = "application/problem+json", body = Problem),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn lookup_or_list(
    State(store): State<Arc<dyn Store>>,
    State(app): State<AppState>,
    State(sources): State<Arc<crate::sources::live::Sources>>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, Problem> {
    let client = client.map(|c| c.0.0);
    let params = given(params);
    if let Some(key) = params.get("idempotency_key") {
        let content = auth::sees_content(&app, client, &headers)?;
        // A source's keys (`{name}:{delivery id}`) are guessable (`ledger:1`,
        // `ledger:2`, …): without the token they are not looked up.
        let in_source = key
            .split_once(':')
            .is_some_and(|(name, _)| sources.get(name).is_some());
        if in_source && !content {
            return Err(Problem::not_found("event"));
        }
        return match store.event_by_key(key).await {
            Ok(Some(event)) => {
                let event = shown(event, content);
                Ok(Json(Lookup::Event(Box::new(event))).into_response())
            }
            Ok(None) => Err(Problem::not_found("event")),
            Err(e) => Err(e.into()),
        };
    }
    // The listing is an admin route: the guard's host and origin checks too.
    auth::admitted(&app, client, &headers)?;
    let query = list_query(&params)?;
    let page = store.list_events(&query).await?;
    Ok(Json(Lookup::Page(page)).into_response())
}

/// An event as an open read shows it: all of it when the request may see content
/// ([`auth::sees_content`]); else its status, not its content — no `last_error`,
/// its own or its deliveries' (receivers' answers, a program's stderr).
fn shown(mut event: EventView, content: bool) -> EventView {
    if !content {
        event.last_error = None;
        for d in &mut event.deliveries {
            d.last_error = None;
        }
    }
    event
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

/// The query's parameters that have a value: `?status=&limit=` is the same as
/// leaving both out (as a form with empty fields sends them).
pub(crate) fn given(mut params: HashMap<String, String>) -> HashMap<String, String> {
    params.retain(|_, v| !v.is_empty());
    params
}

/// Reads `limit` (1..=500, default 50).
pub(crate) fn page_limit(params: &HashMap<String, String>) -> Result<u32, Problem> {
    match params.get("limit") {
        None => Ok(DEFAULT_PAGE),
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| invalid_query(format!("limit must be 1 to {MAX_PAGE}"))),
    }
}
