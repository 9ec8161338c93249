//! The admin view of the sources: `GET /sources` (each source with its counters;
//! a pull source also with its committed cursor, state, last error and lag),
//! and `POST /sources/{name}/reset` (moves a pull source's cursor). Counters and
//! states are this instance's, since it started (see [`crate::sources::live`]);
//! cursors are read from the database. The rejected log is [`super::rejected`].

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use http::StatusCode;
use serde::Serialize;

use crate::api::problem::Problem;
use crate::sources::live::{SourceView, Sources};

/// A list answer: `{items: [...]}`.
#[derive(Debug, Serialize)]
pub(crate) struct Items<T> {
    /// The entries.
    pub items: Vec<T>,
}

/// `GET /sources` (admin).
#[utoipa::path(
    get,
    path = "/sources",
    tag = "sources",
    responses(
        (status = 200, description = "`{\"items\": [...]}`: every source with its \
               counts (this instance, since it started); pull sources also with their \
               committed cursor, state, last error and lag", body = serde_json::Value),
        (status = 503, description = "`unavailable`: the cursors could not be read", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn list(
    State(sources): State<Arc<Sources>>,
) -> Result<Json<Items<SourceView>>, Problem> {
    Ok(Json(Items {
        items: sources.views().await?,
    }))
}

/// `POST /sources/{name}/reset` (admin) with `{"cursor": …}`: moves a pull source's
/// committed cursor (`null`: from the beginning) and wakes its adapter, which
/// resumes from there; a commit of items fetched from the old cursor is refused.
/// 200 with the source's listing entry; 400 `invalid_body` without `cursor`; 404
/// for an unknown source; 409 `not_a_pull_source` for a push source.
#[utoipa::path(
    post,
    path = "/sources/{name}/reset",
    tag = "sources",
    params(("name" = String, Path, description = "The pull source's name")),
    request_body(content = serde_json::Value, description = "`{\"cursor\": …}`: the new cursor (`null`: from the beginning)"),
    responses(
        (status = 200, description = "The source's listing entry, with its new cursor", body = serde_json::Value),
        (status = 400, description = "`invalid_body`: not JSON or no `cursor`", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such source", content_type = "application/problem+json", body = Problem),
        (status = 409, description = "`not_a_pull_source`: a push source has no cursor", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn reset(
    State(sources): State<Arc<Sources>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<SourceView>, Problem> {
    let source = sources
        .get(&name)
        .ok_or_else(|| Problem::not_found("source"))?;
    let Some(status) = &source.pull else {
        return Err(
            Problem::new(StatusCode::CONFLICT, "not_a_pull_source").detail(format!(
                "{name:?} is a push source (POST {}): it has no cursor",
                source.source.path()
            )),
        );
    };
    // Canonical text, numbers exactly as sent (12345678901234567890123 stays that,
    // 1.10 stays 1.10): a cursor is the source's own value, never rounded.
    let text =
        std::str::from_utf8(&body).map_err(|_| Problem::invalid_body("the body is not UTF-8"))?;
    let members = crate::json::canonical_members(text)
        .map_err(|e| Problem::invalid_body(format!("the body is not JSON: {e}")))?;
    let cursor = members
        .and_then(|m| m.into_iter().find(|(k, _)| k == "cursor"))
        .map(|(_, v)| v)
        .ok_or_else(|| {
            Problem::invalid_body("expected {\"cursor\": …} (null: from the beginning)")
        })?;
    let cursor = (cursor != "null").then_some(cursor);
    let store = sources
        .cursors()
        .ok_or_else(|| Problem::unavailable("no cursor store"))?;
    let row = store
        .reset_cursor(&name, cursor)
        .await
        .map_err(Problem::from)?;
    tracing::info!(source = %name, cursor = ?row.cursor, "pull source cursor reset");
    status.reset.notify_one();
    Ok(Json(source.view_with(Some(&row))))
}
