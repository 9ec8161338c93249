//! `DELETE /webhooks/{id}` (admin): erases an event (SPEC §14) — its payload,
//! deliveries and attempts, the rejected copies of its delivery in its source's
//! log, and its recent key — so that its key may be used again. 409
//! `event_in_progress` while one of its deliveries is being attempted (try again);
//! a delivery waiting for its retry is erased and never runs.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::api::problem::Problem;
use crate::api::status::parse_id;
use crate::state::AppState;
use crate::store::Erasure;

/// The handler.
#[utoipa::path(
    delete,
    path = "/webhooks/{id}",
    tag = "events",
    params(("id" = String, Path, description = "The event's id (a UUID)")),
    responses(
        (status = 204, description = "Erased: payload, deliveries, attempts, rejected copies"),
        (status = 400, description = "`invalid_id`: not a UUID", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such event", content_type = "application/problem+json", body = Problem),
        (status = 409, description = "`event_in_progress`: an attempt is running; try again", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn erase(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let in_progress = || {
        Problem::new(StatusCode::CONFLICT, "event_in_progress")
            .detail("a delivery of this event is being attempted; erase it once the attempt ends")
    };
    // An attempt that began a moment ago is not yet `processing` in the table.
    if app.inbox.attempting(id) {
        return Err(in_progress());
    }
    match app.store.erase(id).await? {
        Erasure::NotFound => Err(Problem::not_found("event")),
        Erasure::InProgress => Err(in_progress()),
        Erasure::Erased {
            idempotency_key,
            source,
            fresh,
        } => {
            // Counted out first: the event is gone whatever follows.
            app.inbox.erased(&fresh);
            // The source's rejected copies of this delivery (`{name}:{delivery id}`).
            if let (Some(name), Some(store)) = (source, app.sources.rejected_store()) {
                if let Some(delivery) = idempotency_key.strip_prefix(&format!("{name}:")) {
                    store.forget_delivery(&name, delivery).await?;
                }
            }
            tracing::info!(event = %id, "event erased");
            Ok(StatusCode::NO_CONTENT.into_response())
        }
    }
}
