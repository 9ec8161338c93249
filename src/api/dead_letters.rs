//! Dead letters: listing, and replay of one event or in bulk (docs/api.md, "Dead
//! letters and replay").
//!
//! Replay resets failed deliveries to `pending` with their attempts and last error
//! kept (the history stays), so each replay grants one more attempt before the
//! policy dead-letters again. Replaying what is not failed changes nothing:
//! a single replay answers 409, a bulk replay `{"replayed": 0}`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use crate::api::problem::Problem;
use crate::api::status::{page_limit, parse_id};
use crate::inbox::Inbox;
use crate::model::Timestamp;
use crate::store::{PendingDelivery, ReplayFilter, Store};

/// `GET /dead-letters?limit=&cursor=`.
pub async fn list(
    State(store): State<Arc<dyn Store>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, Problem> {
    let limit = page_limit(&params)?;
    let before = params
        .get("cursor")
        .map(|c| {
            parse_id(c).map_err(|_| {
                Problem::new(StatusCode::BAD_REQUEST, "invalid_query")
                    .detail("cursor is not one this API gave")
            })
        })
        .transpose()?;
    let page = store
        .dead_letters(limit, before)
        .await
        .map_err(|e| Problem::unavailable(e.to_string()))?;
    Ok(Json(page).into_response())
}

/// Replays through the inbox (the deliveries are queued even if the client hangs up).
async fn replay(inbox: &Inbox, filter: ReplayFilter) -> Result<Vec<PendingDelivery>, Problem> {
    inbox
        .replay(filter)
        .await
        .map_err(|e| Problem::unavailable(e.to_string()))
}

/// `POST /webhooks/{id}/replay` → 202 with the event.
pub async fn replay_event(
    State(inbox): State<Inbox>,
    State(store): State<Arc<dyn Store>>,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let filter = ReplayFilter {
        event: Some(id),
        ..ReplayFilter::default()
    };
    let replayed = replay(&inbox, filter).await?;
    let event = store
        .event(id)
        .await
        .map_err(|e| Problem::unavailable(e.to_string()))?
        .ok_or_else(|| Problem::not_found("event"))?;
    if replayed.is_empty() {
        return Err(
            Problem::new(StatusCode::CONFLICT, "not_failed").detail(format!(
                "event {id} has no failed delivery to replay (it is {})",
                event.status.as_str()
            )),
        );
    }
    Ok((StatusCode::ACCEPTED, Json(event)).into_response())
}

/// The body of `POST /dead-letters/replay` (all optional; none = every dead letter).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkReplay {
    event_type: Option<String>,
    handler: Option<String>,
    before: Option<String>,
}

/// `POST /dead-letters/replay` → `{"replayed": N}`.
pub async fn replay_bulk(State(inbox): State<Inbox>, body: Bytes) -> Result<Response, Problem> {
    let req: BulkReplay = if body.iter().all(u8::is_ascii_whitespace) {
        BulkReplay::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| Problem::invalid_body(format!("invalid replay filter: {e}")))?
    };
    let before = req
        .before
        .as_deref()
        .map(|b| {
            Timestamp::parse(b).ok_or_else(|| {
                Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_filter")
                    .detail("before must be an RFC 3339 timestamp like 2026-11-25T22:44:57Z")
            })
        })
        .transpose()?;
    let filter = ReplayFilter {
        event: None,
        event_type: req.event_type,
        handler: req.handler,
        before,
    };
    let replayed = replay(&inbox, filter).await?;
    Ok(Json(json!({ "replayed": replayed.len() })).into_response())
}
