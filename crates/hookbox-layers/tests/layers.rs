//! The layers around plain axum services (no hookbox in sight).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use hookbox_layers::backpressure::{BackpressureLayer, LoadSignal};
use hookbox_layers::idempotency::{
    Begin, BoxFuture, CachedResponse, IdempotencyLayer, IdempotencyStore, Identity, MemoryStore,
};
use http::{Request, StatusCode};
use tower::ServiceExt;

fn charge(key: &str, body: &'static str) -> Request<Body> {
    Request::post("/charges")
        .header("idempotency-key", key)
        .body(Body::from(body))
        .expect("request")
}

/// A slow, counting endpoint behind the idempotency layer.
fn charges(calls: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route(
            "/charges",
            post(move || {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    (StatusCode::CREATED, "charged")
                }
            }),
        )
        .route_layer(IdempotencyLayer::new(
            MemoryStore::new(Duration::from_secs(60)),
            1024,
        ))
}

#[tokio::test]
async fn idempotency_replays_conflicts_and_rejects_reuse() {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = charges(calls.clone());
    let (first, second) = tokio::join!(app.clone().oneshot(charge("a", "{\"amount\":1}")), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        app.clone().oneshot(charge("a", "{\"amount\":1}")).await
    });
    assert_eq!(first.expect("first").status(), StatusCode::CREATED);
    assert_eq!(
        second.expect("second").status(),
        StatusCode::CONFLICT,
        "in flight"
    );
    let replay = app
        .clone()
        .oneshot(charge("a", "{\"amount\":1}"))
        .await
        .expect("replay");
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let body = axum::body::to_bytes(replay.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(&body[..], b"charged");
    let reuse = app
        .clone()
        .oneshot(charge("a", "{\"amount\":2}"))
        .await
        .expect("reuse");
    assert_eq!(reuse.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    let big = Request::post("/charges")
        .header("idempotency-key", "big")
        .body(Body::from(vec![b'x'; 2048]))
        .expect("request");
    assert_eq!(
        app.oneshot(big).await.expect("big").status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn idempotency_expires_keys() {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/charges",
            post({
                let calls = calls.clone();
                move || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { "ok" }
                }
            }),
        )
        .route_layer(IdempotencyLayer::new(
            MemoryStore::new(Duration::from_millis(100)),
            1024,
        ));
    app.clone().oneshot(charge("e", "{}")).await.expect("first");
    tokio::time::sleep(Duration::from_millis(150)).await;
    app.oneshot(charge("e", "{}")).await.expect("after expiry");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A store that keeps no responses (its record of a key lives elsewhere): it
/// counts the responses it is handed.
#[derive(Default)]
struct Elsewhere {
    finished: AtomicUsize,
    handed: AtomicUsize,
}

impl IdempotencyStore for Elsewhere {
    fn identify(&self, parts: &mut http::request::Parts, _: &bytes::Bytes) -> Identity {
        let key = parts.headers.get("idempotency-key").map(|v| v.as_bytes());
        Identity::Keyed {
            key: String::from_utf8_lossy(key.unwrap_or_default()).into_owned(),
            fingerprint: String::new(),
        }
    }

    fn begin<'a>(
        &'a self,
        _: &'a http::request::Parts,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Begin, tower::BoxError>> {
        Box::pin(async { Ok(Begin::Proceed) })
    }

    fn finish(&self, _: String, _: String, response: Option<CachedResponse>) -> BoxFuture<'_, ()> {
        self.finished.fetch_add(1, Ordering::SeqCst);
        if response.is_some() {
            self.handed.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async {})
    }

    fn keeps_responses(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn a_store_that_keeps_no_responses_is_handed_none_and_the_answer_goes_through() {
    let store = Arc::new(Elsewhere::default());
    let app = Router::new()
        .route(
            "/charges",
            post(|| async { (StatusCode::CREATED, [("location", "/charges/1")], "charged") }),
        )
        .route_layer(IdempotencyLayer::shared(store.clone(), 1024));
    let res = app.oneshot(charge("k", "{}")).await.expect("answer");
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(res.headers()["location"], "/charges/1");
    let body = axum::body::to_bytes(res.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(&body[..], b"charged");
    assert_eq!(
        store.finished.load(Ordering::SeqCst),
        1,
        "the key is finished"
    );
    assert_eq!(store.handed.load(Ordering::SeqCst), 0, "no response copied");
}

struct Gate(AtomicUsize);

impl LoadSignal for Gate {
    fn overloaded(&self) -> Option<Duration> {
        (self.0.load(Ordering::SeqCst) > 0).then_some(Duration::from_millis(1500))
    }
}

#[tokio::test]
async fn backpressure_sheds_without_calling_the_service() {
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Gate(AtomicUsize::new(1)));
    let app = Router::new()
        .route(
            "/jobs",
            post({
                let calls = calls.clone();
                move || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { "queued" }
                }
            }),
        )
        .route_layer(BackpressureLayer::new(gate.clone()));
    let req = || Request::post("/jobs").body(Body::empty()).expect("request");
    let shed = app.clone().oneshot(req()).await.expect("shed");
    assert_eq!(shed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        shed.headers()["retry-after"],
        "2",
        "rounded up to whole seconds"
    );
    assert_eq!(shed.headers()["content-type"], "application/problem+json");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    gate.0.store(0, Ordering::SeqCst);
    assert_eq!(
        app.oneshot(req()).await.expect("ok").status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn request_tracing_echoes_only_short_printable_request_ids() {
    use hookbox_layers::trace::request_tracing;
    let app = Router::new()
        .route("/", axum::routing::get(|| async { "hi" }))
        .layer(request_tracing());
    let id_for = |value: &[u8]| {
        let app = app.clone();
        let value = http::HeaderValue::from_bytes(value).expect("header value");
        async move {
            let req = Request::get("/")
                .header("x-request-id", value)
                .body(Body::empty())
                .expect("request");
            let res = app.oneshot(req).await.expect("response");
            res.headers()["x-request-id"]
                .to_str()
                .expect("ascii")
                .to_owned()
        }
    };
    let longest = "x".repeat(200);
    for good in ["1", "a-b_c.d~!#", longest.as_str()] {
        assert_eq!(id_for(good.as_bytes()).await, good);
    }
    let too_long = "x".repeat(201);
    for bad in [too_long.as_bytes(), b"", b"two words", b"\xff\xfe"] {
        let got = id_for(bad).await;
        assert!(
            uuid::Uuid::parse_str(&got).is_ok(),
            "{bad:?} should be replaced, got {got:?}"
        );
    }
}

#[test]
fn metric_names_take_a_prefix() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let app = Router::new()
        .route("/items/{id}", axum::routing::get(|| async { "item" }))
        .layer(hookbox_layers::metrics::HttpMetricsLayer::new().prefix("shop_"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let req = Request::get("/items/7")
                .body(Body::empty())
                .expect("request");
            app.oneshot(req).await.expect("response");
        });
    });
    let text = handle.render();
    assert!(
        text.contains(
            r#"shop_http_requests_total{method="GET",route="/items/{id}",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(!text.contains("hookbox_"), "{text}");
}

#[test]
fn metrics_count_each_label_set_apart() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let app = Router::new()
        .route(
            "/items/{id}",
            axum::routing::get(|| async { "item" }).post(|| async { StatusCode::CREATED }),
        )
        .layer(hookbox_layers::metrics::HttpMetricsLayer::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let sent = [
        ("GET", "/items/1"),
        ("GET", "/items/2"),
        ("POST", "/items/3"),
        ("GET", "/elsewhere"),
        ("GET", "/items/4"),
    ];
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            for (method, path) in sent {
                let req = Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .expect("request");
                app.clone().oneshot(req).await.expect("response");
            }
        });
    });
    let text = handle.render();
    for line in [
        r#"hookbox_http_requests_total{method="GET",route="/items/{id}",status="200"} 3"#,
        r#"hookbox_http_requests_total{method="POST",route="/items/{id}",status="201"} 1"#,
        r#"hookbox_http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"hookbox_http_request_duration_seconds_count{method="GET",route="/items/{id}"} 3"#,
        r#"hookbox_http_request_duration_seconds_count{method="POST",route="/items/{id}"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}
