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

use crate::api::problem::Problem;
use crate::api::status::{page_limit, parse_id};
use crate::inbox::Inbox;
use crate::model::{DeadLetter, EventView, Timestamp};
use crate::store::{Page, PendingDelivery, ReplayFilter, Store};

/// `GET /dead-letters?limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/dead-letters",
    tag = "operating",
    params(
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 50)"),
        ("cursor" = Option<String>, Query, description = "The previous page's `next_cursor`"),
    ),
    responses(
        (status = 200, description = "Failed deliveries with their event, newest first", body = Page<DeadLetter>),
        (status = 400, description = "`invalid_query`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn list(
    State(store): State<Arc<dyn Store>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, Problem> {
    let params = crate::api::status::given(params);
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
        .map_err(Problem::from)?;
    Ok(Json(page).into_response())
}

/// Replays through the inbox (the deliveries are queued even if the client hangs up).
async fn replay(inbox: &Inbox, filter: ReplayFilter) -> Result<Vec<PendingDelivery>, Problem> {
    inbox.replay(filter).await.map_err(Problem::from)
}

/// `POST /webhooks/{id}/replay` → 202 with the event.
#[utoipa::path(
    post,
    path = "/webhooks/{id}/replay",
    tag = "operating",
    params(("id" = String, Path, description = "The event's id (a UUID)")),
    responses(
        (status = 202, description = "Its failed deliveries are pending again (attempts and history kept)", body = EventView),
        (status = 400, description = "`invalid_id`", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
        (status = 409, description = "`not_failed`: nothing to replay", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn replay_event(
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
        .map_err(Problem::from)?
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
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkReplay {
    /// Only events of this type.
    event_type: Option<String>,
    /// Only this handler's deliveries.
    handler: Option<String>,
    /// Only events created before this time (RFC 3339).
    before: Option<String>,
}

/// The answer of `POST /dead-letters/replay`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Replayed {
    /// How many deliveries are pending again.
    pub replayed: usize,
}

/// `POST /dead-letters/replay` → `{"replayed": N}`.
#[utoipa::path(
    post,
    path = "/dead-letters/replay",
    tag = "operating",
    request_body(content = Option<BulkReplay>, content_type = "application/json"),
    responses(
        (status = 200, description = "The selected dead letters are pending again", body = Replayed),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "`invalid_filter`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn replay_bulk(
    State(inbox): State<Inbox>,
    body: Bytes,
) -> Result<Response, Problem> {
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
    Ok(Json(Replayed {
        replayed: replayed.len(),
    })
    .into_response())
}
