//! hookbox embedded as a library: Rust handlers registered in code.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hookbox::app::App;
use hookbox::config::Config;
use hookbox::registry::{Event, HandlerError, Registry, handler_fn};
use hookbox::retry::{Backoff, Policy};
use serde_json::{Value, json};

async fn wait_status(client: &reqwest::Client, base: &str, id: &str, status: &str) -> Value {
    for _ in 0..400 {
        let ev: Value = client
            .get(format!("{base}/webhooks/{id}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if ev["status"] == status {
            return ev;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{id} never became {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_costs_attempts_never_workers() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("events.db");
    let config = Config::from_pairs([
        ("BIND_ADDR", "127.0.0.1:0"),
        ("DB_PATH", db.to_str().expect("path")),
        ("WORKER_COUNT", "2"),
    ])
    .expect("config");
    let ok_calls = Arc::new(AtomicUsize::new(0));
    let counted = ok_calls.clone();
    let fast = Policy {
        max_attempts: 2,
        backoff: Backoff::Schedule(vec![Duration::from_millis(10)]),
        timeout: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
    };
    let registry = Registry::builder()
        .policy(fast)
        .route(
            "boom",
            handler_fn(|event: Event| async move {
                if event.payload().contains("panic") {
                    panic!("handler bug on {}", event.id);
                }
                Err(HandlerError::Permanent("nope".into()))
            }),
        )
        .route(
            "fine",
            handler_fn(move |_: Event| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
        )
        .build()
        .expect("registry");
    let app = App::bind(config, registry, None).await.expect("bind");
    let base = format!("http://{}", app.local_addr());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = stop_rx.await;
    }));
    let client = reqwest::Client::new();
    let post = |event_type: &str, payload: Value| {
        let req = client
            .post(format!("{base}/webhooks"))
            .header("content-type", "application/json")
            .body(json!({"event_type": event_type, "payload": payload}).to_string());
        async move {
            let res = req.send().await.expect("post");
            assert_eq!(res.status().as_u16(), 202);
            let body: Value = res.json().await.expect("json");
            body["id"].as_str().expect("id").to_owned()
        }
    };
    // Four panics, two attempts each: eight retryable failures in a row, under the
    // ten that would open the destination's circuit.
    let mut panics = Vec::new();
    for n in 0..4 {
        panics.push(post("boom", json!({"mode": "panic", "n": n})).await);
    }
    let permanent = post("boom", json!({"mode": "refuse"})).await;
    let mut fines = Vec::new();
    for n in 0..6 {
        fines.push(post("fine", json!({"n": n})).await);
    }
    for id in &panics {
        let ev = wait_status(&client, &base, id, "failed").await;
        assert_eq!(ev["attempts"], 2, "a panic is a retryable failure");
        let err = ev["last_error"].as_str().expect("last_error");
        assert!(err.starts_with("handler panicked: handler bug on"), "{err}");
    }
    let ev = wait_status(&client, &base, &permanent, "failed").await;
    assert_eq!(ev["attempts"], 1);
    for id in &fines {
        wait_status(&client, &base, id, "completed").await;
    }
    assert_eq!(
        ok_calls.load(Ordering::SeqCst),
        6,
        "both workers survived the panics"
    );
    let _ = stop_tx.send(());
    server.await.expect("join").expect("clean shutdown");
}
