//! The OpenAPI 3.1 description of the HTTP API: `GET /openapi.json` serves it and
//! `hookbox openapi` prints it.
//!
//! It is built from the route table ([`super::routes::table`]) that the router is
//! built from: each handler's `#[utoipa::path]` attribute gives its method, path,
//! parameters and answers, and the bodies' schemas are derived from the handlers'
//! own types (`#[derive(ToSchema)]`), so the document follows the code.

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi, Server};
use utoipa::{Modify, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;

use super::routes::Access;
use crate::state::AppState;

/// The name of the admin token's security scheme in the document.
pub(crate) const ADMIN_SCHEME: &str = "admin_token";

/// What the document says about hookbox as a whole; the paths come from the route
/// table.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "hookbox",
        description = "A webhook inbox and delivery service: durable intake, idempotency, \
                       429 backpressure, handlers with retries and dead letters. Every error \
                       is an RFC 9457 problem (application/problem+json). Admin routes need \
                       `Authorization: Bearer <ADMIN_TOKEN>` when a token is set.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "events", description = "Intake and reading events"),
        (name = "operating", description = "Dead letters, replay and subscribers (admin)"),
        (name = "sources", description = "Webhooks as providers send them"),
        (name = "probes", description = "Health, readiness, metrics and this document"),
    ),
    modifiers(&AdminToken)
)]
struct Base;

/// Declares the admin token's bearer scheme.
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, doc: &mut OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            ADMIN_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("ADMIN_TOKEN; only when one is set"))
                    .build(),
            ),
        );
    }
}

/// The document: [`Base`] with every route of the route table; the admin routes
/// (by their [`Access`] in the table) require the admin token's scheme.
pub(crate) fn document() -> OpenApi {
    let mut doc = super::routes::table()
        .into_iter()
        .fold(
            OpenApiRouter::<AppState>::with_openapi(Base::openapi()),
            |router, mut route| {
                if route.access == Access::Admin {
                    for item in route.handlers.1.paths.values_mut() {
                        for operation in operations(item) {
                            operation.security = Some(vec![SecurityRequirement::new(
                                ADMIN_SCHEME,
                                Vec::<String>::new(),
                            )]);
                        }
                    }
                }
                router.routes(route.handlers)
            },
        )
        .into_openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc.servers = Some(vec![Server::new("/")]);
    doc
}

/// Every operation of a path.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// The document as pretty-printed JSON (what `hookbox openapi` prints).
pub(crate) fn json() -> String {
    document()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        let doc = crate::api::openapi::document();
        assert!(doc.paths.paths.contains_key("/webhooks/{id}/attempts"));
    }
}
