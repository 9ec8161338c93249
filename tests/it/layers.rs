//! The layers as hookbox re-exports them (`hookbox::layers`, the crate
//! `hookbox-layers`): the same paths work for embedders. The layers' own tests are in
//! crates/hookbox-layers/tests.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use hookbox::layers::backpressure::{BackpressureLayer, LoadSignal};
use http::{Request, StatusCode};
use tower::ServiceExt;

struct Full;

impl LoadSignal for Full {
    fn overloaded(&self) -> Option<Duration> {
        Some(Duration::from_millis(1500))
    }
}

#[tokio::test]
async fn the_reexported_backpressure_layer_answers_hookbox_s_problem() {
    let app = Router::new()
        .route("/jobs", post(|| async { "queued" }))
        .route_layer(BackpressureLayer::new(Arc::new(Full)));
    let req = Request::post("/jobs").body(Body::empty()).expect("request");
    let shed = app.oneshot(req).await.expect("shed");
    assert_eq!(shed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(shed.headers()["retry-after"], "2");
    let code = shed
        .extensions()
        .get::<hookbox::layers::rejection::ProblemCode>();
    assert_eq!(code.map(|c| c.0), Some("overloaded"));
    let body = axum::body::to_bytes(shed.into_body(), 4096)
        .await
        .expect("body");
    let json: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(json["type"], "urn:hookbox:problem:overloaded");
    assert_eq!(json["title"], "Too Many Requests");
    assert_eq!(json["status"], 429);
    assert_eq!(json["code"], "overloaded");
}
