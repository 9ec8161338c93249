//! The HTTP API (docs/api.md), as an axum [`Router`] over [`AppState`].
//!
//! Every error is RFC 9457 problem+json ([`problem::Problem`]), unknown routes and
//! methods included. The intake route carries, outermost first, backpressure (429
//! before the body is read) and idempotency (which also parses and validates); the
//! sources' route `POST /ingest/{name}` carries the same backpressure and verifies
//! before it parses (see [`ingest`]), then commits through the same
//! [`intake::commit`].
//!
//! Every route is one line of [`routes::table`], from which both the router and the
//! OpenAPI document ([`openapi`], `GET /openapi.json`) are built.

pub(crate) mod auth;
pub(crate) mod dead_letters;
pub(crate) mod destinations;
pub(crate) mod erase;
pub(crate) mod ingest;
pub(crate) mod intake;
pub(crate) mod openapi;
pub(crate) mod preview;
pub(crate) mod probes;
pub(crate) mod problem;
pub(crate) mod rejected;
pub(crate) mod routes;
pub(crate) mod sources;
pub(crate) mod status;
pub(crate) mod subscribers;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn_with_state, map_response};
use http::StatusCode;
use tower::ServiceBuilder;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter, UtoipaMethodRouterExt};

use crate::layers::backpressure::BackpressureLayer;
use crate::layers::idempotency::IdempotencyLayer;
use crate::layers::metrics::HttpMetricsLayer;
use crate::layers::trace::request_tracing;
use crate::state::AppState;
use problem::Problem;
use routes::Access;

/// Builds the whole router: every route of [`routes::table`] with the layers of its
/// [`routes::Access`].
pub(crate) fn router(app: AppState) -> Router {
    let (router, _document) = routes::table()
        .into_iter()
        .fold(OpenApiRouter::default(), |router, route| {
            router.routes(with_layers(route, &app))
        })
        .split_for_parts();
    router
        .fallback(|| async { Problem::not_found("route") })
        .method_not_allowed_fallback(|| async {
            Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
                .detail("this route does not accept that method")
        })
        // One `layer` call, not one per layer: axum boxes every route's service at
        // each call, and a boxed layer clones everything boxed beneath it on every
        // request (docs/benchmarks.md, "Boxed layers cloned per request").
        .layer(
            ServiceBuilder::new()
                .layer(request_tracing())
                .layer(HttpMetricsLayer::new()),
        )
        .with_state(app)
}

/// A route's handlers with the layers its access calls for.
fn with_layers(route: routes::Route, app: &AppState) -> UtoipaMethodRouter<AppState> {
    // Intake's backpressure reads how full processing is; the inbox does not know
    // the layer exists.
    let inbox = app.inbox.clone();
    let load = BackpressureLayer::new(Arc::new(move || inbox.overloaded()));
    match route.access {
        Access::Open => route.handlers,
        Access::Admin => route.handlers.map(|handlers| {
            handlers.route_layer(from_fn_with_state(app.clone(), auth::admin_only))
        }),
        Access::Intake => {
            let idempotency = IdempotencyLayer::new(
                intake::EventsIdempotency {
                    store: app.store.clone(),
                    intake: axum::extract::FromRef::from_ref(app),
                },
                app.max_body_bytes,
            )
            .body_timeout(intake::body_read_timeout());
            // Outermost first; one `route_layer` call (see `router`).
            let layers = ServiceBuilder::new()
                .layer(map_response(intake::count_rejections))
                .layer(load)
                .layer(DefaultBodyLimit::max(app.max_body_bytes))
                .layer(idempotency);
            route.handlers.map(|handlers| handlers.route_layer(layers))
        }
        // The same layers as intake, but no idempotency layer: the ingest handler
        // verifies the raw body before anything parses it.
        Access::Ingest => {
            let layers = ServiceBuilder::new()
                .layer(map_response(intake::count_rejections))
                .layer(load)
                .layer(DefaultBodyLimit::max(app.max_body_bytes));
            route.handlers.map(|handlers| handlers.route_layer(layers))
        }
    }
}
