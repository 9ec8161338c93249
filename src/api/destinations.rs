//! Destinations (admin): `GET /destinations`, `GET /destinations/{name}`, and
//! `POST /destinations/{name}/pause|resume` (docs/handlers.md, "Destinations").
//!
//! Every handler — manifest or subscriber — is a destination. Its state, places in
//! use and failures are this instance's lane ([`Lanes`]); its pending count and
//! the age of its oldest unfinished delivery are read from the database.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use crate::api::problem::Problem;
use crate::inbox::Inbox;
use crate::model::Timestamp;
use crate::processing::lanes::LaneView;
use crate::registry::Route;
use crate::registry::live::LiveRegistry;
use crate::store::{DestinationBacklog, Store};

/// One destination as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Destination {
    /// The handler's name.
    name: String,
    /// `http` (a subscriber too), `exec`, `log` or `rust`.
    kind: String,
    /// `healthy`, `paused`, `failing` or `disabled`.
    state: String,
    /// When the state last changed (for a destination that never changed: when
    /// this instance started).
    state_since: Timestamp,
    /// The end of a `Retry-After` pause (null otherwise, and for an operator's pause).
    paused_until: Option<Timestamp>,
    /// Attempts running now.
    in_flight: u32,
    /// Attempts it may run at once.
    max_in_flight: u32,
    /// `"50/s"`, or null.
    rate_limit: Option<String>,
    /// Deliveries not yet finished.
    pending: u64,
    /// Age of the oldest of them, in seconds (0 without any).
    oldest_pending_age_seconds: u64,
    /// The last failure's error.
    last_error: Option<String>,
    /// Retryable failures since the last success.
    consecutive_failures: u32,
}

/// `{items: [...]}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Destinations {
    /// Every destination, by name.
    items: Vec<Destination>,
}

fn shown(route: &Route, lane: LaneView, backlog: Option<&DestinationBacklog>) -> Destination {
    let now = Timestamp::now();
    let oldest_age = backlog
        .and_then(|b| b.oldest)
        .and_then(|t| (now.0 - t.0).to_std().ok())
        .unwrap_or(Duration::ZERO);
    Destination {
        name: route.name.clone(),
        kind: route.kind.clone(),
        state: lane.state.as_str().to_owned(),
        state_since: lane.state_since,
        paused_until: lane.paused_until,
        in_flight: lane.in_flight,
        max_in_flight: route.flow.max_in_flight,
        rate_limit: route.flow.rate_limit.map(|r| r.to_string()),
        pending: backlog.map_or(0, |b| b.pending),
        oldest_pending_age_seconds: oldest_age.as_secs(),
        last_error: lane.last_error,
        consecutive_failures: lane.consecutive_failures,
    }
}

async fn backlog(store: &dyn Store) -> Result<Vec<DestinationBacklog>, Problem> {
    store.destination_backlog().await.map_err(Problem::from)
}

/// `GET /destinations` (admin).
#[utoipa::path(
    get,
    path = "/destinations",
    tag = "operating",
    responses(
        (status = 200, description = "Every destination with its state", body = Destinations),
        (status = 503, description = "`unavailable`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn list(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
) -> Result<Json<Destinations>, Problem> {
    let counts = backlog(&*store).await?;
    let lanes = inbox.lanes();
    let mut items: Vec<Destination> = registry
        .current()
        .routes()
        .iter()
        .map(|r| {
            shown(
                r,
                lanes.view(&r.name),
                counts.iter().find(|b| b.handler == r.name),
            )
        })
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(Destinations { items }))
}

async fn one(
    inbox: &Inbox,
    registry: &LiveRegistry,
    store: &dyn Store,
    name: &str,
) -> Result<Json<Destination>, Problem> {
    let table = registry.current();
    let route = table
        .get(name)
        .ok_or_else(|| Problem::not_found("destination"))?;
    let counts = backlog(store).await?;
    Ok(Json(shown(
        route,
        inbox.lanes().view(name),
        counts.iter().find(|b| b.handler == name),
    )))
}

/// `GET /destinations/{name}` (admin).
#[utoipa::path(
    get,
    path = "/destinations/{name}",
    tag = "operating",
    params(("name" = String, Path, description = "The destination's (handler's) name")),
    responses(
        (status = 200, description = "The destination", body = Destination),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn read(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> Result<Json<Destination>, Problem> {
    one(&inbox, &registry, &*store, &name).await
}

/// `POST /destinations/{name}/pause` (admin): no attempts until resumed.
#[utoipa::path(
    post,
    path = "/destinations/{name}/pause",
    tag = "operating",
    params(("name" = String, Path, description = "The destination's (handler's) name")),
    responses(
        (status = 200, description = "The destination, `paused`", body = Destination),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn pause(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> Result<Json<Destination>, Problem> {
    let flow = flow_of(&registry, &name)?;
    let stored = inbox.lanes().pause(&name, flow);
    // Kept before the answer (the operator task keeps it too), so that the
    // other instances sharing the database follow at once (SPEC §10: paused
    // until resumed, on every instance).
    crate::operator::keep(&*store, &name, &stored).await;
    one(&inbox, &registry, &*store, &name).await
}

/// `POST /destinations/{name}/resume` (admin): healthy again — lifts an operator's
/// pause, a `Retry-After` pause, an open circuit and a disabled state — and its
/// due work runs at once.
#[utoipa::path(
    post,
    path = "/destinations/{name}/resume",
    tag = "operating",
    params(("name" = String, Path, description = "The destination's (handler's) name")),
    responses(
        (status = 200, description = "The destination, `healthy`", body = Destination),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn resume(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> Result<Json<Destination>, Problem> {
    let flow = flow_of(&registry, &name)?;
    let stored = inbox.lanes().resume(&name, flow);
    crate::operator::keep(&*store, &name, &stored).await;
    one(&inbox, &registry, &*store, &name).await
}

fn flow_of(
    registry: &LiveRegistry,
    name: &str,
) -> Result<crate::registry::flow::FlowControl, Problem> {
    registry
        .current()
        .get(name)
        .map(|r| r.flow.clone())
        .ok_or_else(|| Problem::not_found("destination"))
}
