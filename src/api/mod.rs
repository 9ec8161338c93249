//! The HTTP API (docs/api.md), as an axum [`Router`] over [`AppState`].
//!
//! Every error is RFC 9457 problem+json ([`problem::Problem`]), unknown routes and
//! methods included. The intake route carries, outermost first, backpressure (429
//! before the body is read) and idempotency (which also parses and validates); the
//! sources' route `POST /ingest/{name}` carries the same backpressure and verifies
//! before it parses (see [`ingest`]), then commits through the same
//! [`intake::commit`].

pub mod auth;
pub mod dead_letters;
pub mod ingest;
pub mod intake;
pub mod probes;
pub mod problem;
pub mod sources;
pub mod status;
pub mod subscribers;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn_with_state, map_response};
use axum::routing::{get, post};
use http::StatusCode;

use crate::layers::backpressure::BackpressureLayer;
use crate::layers::idempotency::IdempotencyLayer;
use crate::layers::metrics::HttpMetricsLayer;
use crate::layers::trace::request_tracing;
use crate::state::AppState;
use problem::Problem;

/// Builds the whole router.
pub fn router(app: AppState) -> Router {
    let idempotency = IdempotencyLayer::new(
        intake::EventsIdempotency {
            store: app.store.clone(),
            require_key: app.require_idempotency_key,
        },
        app.max_body_bytes,
    )
    .body_timeout(intake::body_read_timeout());
    let intake = post(intake::intake)
        .route_layer(idempotency)
        .route_layer(DefaultBodyLimit::max(app.max_body_bytes))
        .route_layer(BackpressureLayer::new(app.load.clone()))
        .route_layer(map_response(intake::count_rejections));
    // The same layers as intake, but no idempotency layer: the ingest handler
    // verifies the raw body before anything parses it.
    let ingest = post(ingest::ingest)
        .route_layer(DefaultBodyLimit::max(app.max_body_bytes))
        .route_layer(BackpressureLayer::new(app.load.clone()))
        .route_layer(map_response(intake::count_rejections));
    let admin = Router::new()
        .route("/sources", get(sources::list))
        .route("/sources/{name}/rejected", get(sources::rejected))
        .route("/sources/{name}/reset", post(sources::reset))
        .route("/webhooks/{id}/replay", post(dead_letters::replay_event))
        .route("/dead-letters", get(dead_letters::list))
        .route("/dead-letters/replay", post(dead_letters::replay_bulk))
        .route(
            "/subscribers",
            post(subscribers::create).get(subscribers::list),
        )
        .route(
            "/subscribers/{name}",
            get(subscribers::read)
                .patch(subscribers::patch)
                .delete(subscribers::delete),
        )
        .route_layer(from_fn_with_state(app.clone(), auth::admin_only));
    Router::new()
        .merge(admin)
        .route("/webhooks", intake.get(status::lookup_or_list))
        .route("/webhooks/{id}", get(status::by_id))
        .route("/ingest/{name}", ingest)
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
        .route("/metrics", get(probes::metrics))
        .fallback(|| async { Problem::not_found("route") })
        .method_not_allowed_fallback(|| async {
            Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
                .detail("this route does not accept that method")
        })
        .layer(HttpMetricsLayer::new())
        .layer(request_tracing())
        .with_state(app)
}
