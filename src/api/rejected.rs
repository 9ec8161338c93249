//! A source's durable rejected log (SPEC §11): `GET /sources/{name}/rejected`
//! lists it, newest first; `POST /sources/{name}/rejected/{id}/retry` verifies one
//! entry again with the current secrets, its timestamp judged against when it was
//! received, and ingests it exactly as if it had passed then (202/200 as intake,
//! or the refusal again); `POST /sources/{name}/rejected/retry` does it for every
//! retryable entry, oldest first. An entry that passes (a duplicate's 200
//! included) leaves the log; one refused again stays, with its new reason.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Serialize;

use super::ingest::{self, Passed, Refused};
use super::intake::Intake;
use super::problem::Problem;
use super::sources::Items;
use crate::sources::live::{LiveSource, REJECTED_LOG_SIZE, Sources};
use crate::sources::rejected::RejectedRequest;
use crate::store::StoreError;
use crate::store::rejected::{Bounds, RejectedRow};

/// `GET /sources/{name}/rejected` (admin): 404 for an unknown source.
#[utoipa::path(
    get,
    path = "/sources/{name}/rejected",
    tag = "sources",
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, description = "`{\"items\": [...]}`: its refused requests, newest first \
                                      (up to 1,000 of each quota, the last 7 days; each with `id`, \
                                      `received_at`, `reason`, `detail`, `headers` with \
                                      credentials redacted, `body` cut at 1 KB, `retryable`)",
         body = serde_json::Value),
        (status = 404, description = "`not_found`: no such source", content_type = "application/problem+json", body = Problem),
        (status = 503, description = "`unavailable`: the log could not be read", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn list(
    State(sources): State<Arc<Sources>>,
    Path(name): Path<String>,
) -> Result<Json<Items<RejectedRequest>>, Problem> {
    let source = sources
        .get(&name)
        .ok_or_else(|| Problem::not_found("source"))?;
    Ok(Json(Items {
        items: source.rejected_log(REJECTED_LOG_SIZE).await?,
    }))
}

/// `POST /sources/{name}/rejected/{id}/retry` (admin).
#[utoipa::path(
    post,
    path = "/sources/{name}/rejected/{id}/retry",
    tag = "sources",
    params(
        ("name" = String, Path, description = "The source's name"),
        ("id" = String, Path, description = "The entry's id"),
    ),
    responses(
        (status = 202, description = "It verifies now: ingested as intake answers (and out of the log)", body = serde_json::Value),
        (status = 200, description = "It verifies now and was a redelivery (out of the log)", body = serde_json::Value),
        (status = 401, description = "`invalid_signature`: refused again (it stays in the log)", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such source or entry", content_type = "application/problem+json", body = Problem),
        (status = 409, description = "`not_retryable`: its proof was not kept (a token header, a body too large)", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "Refused again after verification (`invalid_event_type`, …)", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn retry_one(
    State(app): State<Intake>,
    Path((name, id)): Path<(String, String)>,
) -> Response {
    let Some(source) = push_source(&app, &name) else {
        return Problem::not_found("source").into_response();
    };
    let Ok(id) = id.parse() else {
        return Problem::not_found("rejected request").into_response();
    };
    match retry_entry(&app, &source, id).await {
        Ok(Ok(passed)) => passed.response,
        Ok(Err(refused)) => refused.problem.into_response(),
        Err(NotRetried::Missing) => Problem::not_found("rejected request").into_response(),
        Err(NotRetried::NotRetryable) => Problem::new(StatusCode::CONFLICT, "not_retryable")
            .detail("what proved this request (a credential header, or a body too large to keep) was not kept")
            .into_response(),
        Err(NotRetried::Store(e)) => Problem::from(e).into_response(),
    }
}

/// Why an entry was not retried.
#[derive(Debug)]
pub(crate) enum NotRetried {
    /// No such entry (retried already, or aged out).
    Missing,
    /// What proved it was not kept.
    NotRetryable,
    /// The log could not be read or written.
    Store(StoreError),
}

/// Retries entry `id` of `source`, if there is one and it can be: what the API's
/// and the console's retry of one entry both do.
pub(crate) async fn retry_entry(
    app: &Intake,
    source: &LiveSource,
    id: uuid::Uuid,
) -> Result<Result<Passed, Refused>, NotRetried> {
    let row = entry(source, id)
        .await
        .map_err(NotRetried::Store)?
        .ok_or(NotRetried::Missing)?;
    if !row.retryable {
        return Err(NotRetried::NotRetryable);
    }
    retry(app, source, row).await.map_err(NotRetried::Store)
}

/// What a retry of every entry did.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub(crate) struct RetryAll {
    /// New events committed.
    pub accepted: u64,
    /// Requests that were redeliveries of stored events.
    pub duplicates: u64,
    /// Entries refused again (they stay).
    pub still_rejected: u64,
}

/// `POST /sources/{name}/rejected/retry` (admin).
#[utoipa::path(
    post,
    path = "/sources/{name}/rejected/retry",
    tag = "sources",
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, description = "`{\"accepted\": N, \"duplicates\": M, \"still_rejected\": K}`", body = serde_json::Value),
        (status = 404, description = "`not_found`: no such source", content_type = "application/problem+json", body = Problem),
        (status = 503, description = "`unavailable`: the log could not be read", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn retry_every(
    State(app): State<Intake>,
    Path(name): Path<String>,
) -> Result<Json<RetryAll>, Problem> {
    let source = push_source(&app, &name).ok_or_else(|| Problem::not_found("source"))?;
    Ok(Json(retry_all(&app, &source).await?))
}

/// Retries every retryable entry of `source`, oldest first.
pub(crate) async fn retry_all(app: &Intake, source: &LiveSource) -> Result<RetryAll, StoreError> {
    let mut tally = RetryAll::default();
    let Some(store) = source.log() else {
        return Ok(tally);
    };
    let since = Bounds::default().oldest_kept(crate::model::Timestamp::now());
    for id in store.retryable(&source.source.name, since).await? {
        let Some(row) = entry(source, id).await? else {
            continue; // retried meanwhile
        };
        match retry(app, source, row).await? {
            Ok(passed) => {
                tally.accepted += passed.accepted;
                tally.duplicates += passed.duplicates;
            }
            Err(_) => tally.still_rejected += 1,
        }
    }
    Ok(tally)
}

/// A push source by name.
fn push_source(app: &Intake, name: &str) -> Option<Arc<LiveSource>> {
    app.sources
        .get(name)
        .filter(|s| s.source.pull.is_none())
        .cloned()
}

async fn entry(source: &LiveSource, id: uuid::Uuid) -> Result<Option<RejectedRow>, StoreError> {
    match source.log() {
        Some(store) => store.rejected_one(&source.source.name, id).await,
        None => Ok(None),
    }
}

/// Receives `row` again as of when it came; out of the log when it passes, its
/// new refusal recorded when not.
pub(crate) async fn retry(
    app: &Intake,
    source: &LiveSource,
    mut row: RejectedRow,
) -> Result<Result<Passed, Refused>, StoreError> {
    let headers = header_map(&row.headers);
    let result = ingest::receive(app, source, &headers, &row.body, row.received_at).await;
    let Some(store) = source.log() else {
        return Ok(result);
    };
    match &result {
        Ok(_) => {
            store.forget(&source.source.name, row.id).await?;
            tracing::info!(source = %source.source.name, id = %row.id, "rejected request retried: it passed");
        }
        Err(refused) if refused.logged => {
            let refusal = refused.refusal();
            row.reason = refusal.reason.as_str().to_owned();
            row.status = refusal.status;
            row.code = refusal.code.to_owned();
            row.detail = refusal.detail.to_owned();
            store.refused_again(&row).await?;
        }
        Err(_) => {}
    }
    Ok(result)
}

/// The stored headers as a map again (a pair that is no longer a valid header is
/// left out).
fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    headers
}
