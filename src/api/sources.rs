//! The admin view of the push sources: `GET /sources` (each source with its
//! counters) and `GET /sources/{name}/rejected` (its log of refused requests,
//! newest first). Both are this instance's, since it started (see
//! [`crate::sources::live`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use crate::api::problem::Problem;
use crate::sources::live::{RejectedRequest, SourceView, Sources};

/// A list answer: `{items: [...]}`.
#[derive(Debug, Serialize)]
pub struct Items<T> {
    /// The entries.
    pub items: Vec<T>,
}

/// `GET /sources` (admin).
#[utoipa::path(
    get,
    path = "/sources",
    tag = "sources",
    responses((status = 200, description = "`{\"items\": [...]}`: every source with its \
               counts (this instance, since it started)", body = serde_json::Value))
)]
pub async fn list(State(sources): State<Arc<Sources>>) -> Json<Items<SourceView>> {
    Json(Items {
        items: sources.all().iter().map(|s| s.view()).collect(),
    })
}

/// `GET /sources/{name}/rejected` (admin): 404 for an unknown source.
#[utoipa::path(
    get,
    path = "/sources/{name}/rejected",
    tag = "sources",
    params(("name" = String, Path, description = "The source's name")),
    responses(
        (status = 200, description = "`{\"items\": [...]}`: its refused requests, newest first \
                                      (without secret-bearing headers)", body = serde_json::Value),
        (status = 404, description = "`not_found`: no such source", content_type = "application/problem+json", body = Problem),
    )
)]
pub async fn rejected(
    State(sources): State<Arc<Sources>>,
    Path(name): Path<String>,
) -> Result<Json<Items<RejectedRequest>>, Problem> {
    let source = sources
        .get(&name)
        .ok_or_else(|| Problem::not_found("source"))?;
    Ok(Json(Items {
        items: source.rejected_log(),
    }))
}
