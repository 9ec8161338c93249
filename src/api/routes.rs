//! The route table: every route hookbox serves, once. The router
//! ([`super::router`]) and the OpenAPI document ([`super::openapi::document`]) are
//! both built from [`table`], so a route cannot be served without being described,
//! nor described without being served.
//!
//! Adding a route is one line here: its [`Access`] (which decides its layers) and
//! `routes!(module::handler)`, where the handler carries a `#[utoipa::path(…)]`
//! attribute that names its method, path, parameters and answers (docs/api.md,
//! "The OpenAPI document").

use utoipa_axum::router::UtoipaMethodRouter;
use utoipa_axum::routes;

use super::{
    dead_letters, destinations, erase, ingest, intake, preview, probes, rejected, sources, status,
    subscribers,
};
use crate::state::AppState;

/// Who may call a route; it decides the layers the route gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Anyone.
    Open,
    /// Only with the admin token, when one is set.
    Admin,
    /// `POST /webhooks`: open, behind backpressure, the body limit and idempotency.
    Intake,
    /// `POST /ingest/{name}`: open (verified by signature), behind backpressure and
    /// the body limit.
    Ingest,
}

/// One row of the table: who may call it, and its handlers with their OpenAPI
/// operations (one path).
pub(crate) struct Route {
    /// Decides the layers.
    pub access: Access,
    /// From `routes!(…)`.
    pub handlers: UtoipaMethodRouter<AppState>,
}

fn route(access: Access, handlers: UtoipaMethodRouter<AppState>) -> Route {
    Route { access, handlers }
}

/// Every route. One line per path (several handlers of one path share a line).
pub(crate) fn table() -> Vec<Route> {
    use Access::{Admin, Ingest, Intake, Open};
    vec![
        route(Intake, routes!(intake::intake)),
        route(Open, routes!(status::lookup_or_list)),
        route(Open, routes!(status::by_id)),
        route(Admin, routes!(erase::erase)),
        route(Open, routes!(status::attempts)),
        route(Admin, routes!(dead_letters::replay_event)),
        route(Admin, routes!(dead_letters::list)),
        route(Admin, routes!(dead_letters::replay_bulk)),
        route(Admin, routes!(subscribers::create, subscribers::list)),
        route(
            Admin,
            routes!(subscribers::read, subscribers::patch, subscribers::delete),
        ),
        route(Admin, routes!(destinations::list)),
        route(Admin, routes!(destinations::read)),
        route(Admin, routes!(destinations::pause)),
        route(Admin, routes!(destinations::resume)),
        route(Admin, routes!(preview::test)),
        route(Ingest, routes!(ingest::ingest)),
        route(Open, routes!(ingest::subscription_check)),
        route(Admin, routes!(sources::list)),
        route(Admin, routes!(rejected::list)),
        route(Admin, routes!(rejected::retry_one)),
        route(Admin, routes!(rejected::retry_every)),
        route(Admin, routes!(sources::reset)),
        route(Open, routes!(probes::health)),
        route(Open, routes!(probes::ready)),
        route(Open, routes!(probes::metrics)),
        route(Open, routes!(probes::openapi)),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use axum::body::Body;
    use http::{Method, Request, StatusCode};
    use tower::ServiceExt;

    use crate::app::App;
    use crate::config::Config;
    use crate::registry::Registry;

    /// The methods a route may have.
    const METHODS: [Method; 5] = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
    ];

    /// `(METHOD, path)` of every operation the document names.
    fn documented() -> BTreeSet<(String, String)> {
        let doc = serde_json::to_value(super::super::openapi::document()).expect("json");
        let paths = doc["paths"].as_object().expect("paths");
        let mut ops = BTreeSet::new();
        for (path, item) in paths {
            for method in METHODS {
                if item.get(method.as_str().to_lowercase()).is_some() {
                    ops.insert((method.to_string(), path.clone()));
                }
            }
        }
        ops
    }

    /// The paths of the real router. axum keeps no public list of them, but its
    /// `Debug` shows every path it matches, quoted; the fallback's own catch-all
    /// path is left out.
    fn router_paths(router: &axum::Router) -> BTreeSet<String> {
        let shown = format!("{router:?}");
        shown
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| s.starts_with('/') && !s.contains("__private__axum"))
            .map(str::to_owned)
            .collect()
    }

    /// A request path for a route path: `{id}` becomes a UUID, other parameters a
    /// name.
    fn concrete(path: &str) -> String {
        path.split('/')
            .map(|segment| match segment {
                "{id}" => "00000000-0000-7000-8000-000000000000",
                s if s.starts_with('{') => "nobody",
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// False for the router's own answers to what it does not route: 405, and the
    /// fallback's 404 (its catch-all path is in the router's `Debug` too).
    async fn is_route(answer: axum::response::Response) -> bool {
        match answer.status() {
            StatusCode::METHOD_NOT_ALLOWED => false,
            StatusCode::NOT_FOUND => {
                let body = axum::body::to_bytes(answer.into_body(), 64 * 1024)
                    .await
                    .expect("body");
                let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem");
                problem["detail"] != "route not found"
            }
            _ => true,
        }
    }

    /// Walks the router the service runs: every path it matches, with every method;
    /// whatever reaches a handler is a route, and the document must name exactly
    /// those.
    #[tokio::test]
    async fn the_document_names_every_route_of_the_router_and_nothing_else() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("events.db");
        let config = Config::from_pairs([
            ("BIND_ADDR", "127.0.0.1:0"),
            ("DB_PATH", db.to_str().expect("utf-8 path")),
        ])
        .expect("config");
        let app = App::bind(config, Registry::default(), None)
            .await
            .expect("bind");
        let router = app.router();
        let paths = router_paths(&router);
        assert!(
            paths.contains("/webhooks/{id}/attempts") && paths.len() >= 10,
            "cannot read the router's paths from {router:?}"
        );
        let mut served = BTreeSet::new();
        for path in &paths {
            for method in METHODS {
                let request = Request::builder()
                    .method(method.clone())
                    .uri(concrete(path))
                    .body(Body::empty())
                    .expect("request");
                let answer = router.clone().oneshot(request).await.expect("answer");
                if is_route(answer).await {
                    served.insert((method.to_string(), path.clone()));
                }
            }
        }
        let documented = documented();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty() && unserved.is_empty(),
            "served but not in the document: {undocumented:?}; \
             in the document but not served: {unserved:?}"
        );
    }
}
