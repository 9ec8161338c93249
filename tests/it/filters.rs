//! Filters (SPEC §12) on the real binary, both backends: a manifest handler's
//! filter (a TOML inline table) and a subscriber's (JSON) decide which events get
//! a delivery at a real receiver; what they keep out is counted; invalid filters
//! stop `serve` with exit 2 naming the file and field, and a subscriber's is
//! refused with 422 `invalid_filter`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Hookbox, eventually, http_manifest, new_dir, on_both_backends};
use crate::receiver::Receiver;

const WAIT: Duration = Duration::from_secs(20);

fn post(hb: &Hookbox, event_type: &str, payload: Value) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": payload}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

on_both_backends! {
    fn only_matching_events_are_delivered(db: &Db) {
        let rx = Receiver::start();
        let dir = new_dir();
        http_manifest(
            dir.path(),
            "big-orders",
            r#"["order.*"]"#,
            &format!("{}/big", rx.url),
            r#"filter = { payload = { total = { "$gt" = 100 }, currency = { "$in" = ["EUR", "USD"] } } }"#,
            "",
        );
        let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
        let created = hb.call(
            "POST",
            "/subscribers",
            Some(&json!({
                "name": "refunds",
                "event_types": ["order.*"],
                "url": format!("{}/refunds", rx.url),
                "filter": {"$or": [{"event_type": "order.refunded"}, {"payload": {"note": {"$startsWith": "refund"}}}]}
            })),
            &[],
        );
        assert_eq!(created.status, 201, "{}", created.text);
        assert_eq!(created.json()["filter"]["$or"][0]["event_type"], "order.refunded");

        let big = post(&hb, "order.created", json!({"total": 250, "currency": "EUR"}));
        let small = post(&hb, "order.created", json!({"total": 5, "currency": "EUR"}));
        let yen = post(&hb, "order.created", json!({"total": 900, "currency": "JPY"}));
        let refund = post(&hb, "order.refunded", json!({"total": 250, "currency": "USD"}));
        let noted = post(&hb, "order.updated", json!({"note": "refund asked"}));
        for id in [&big, &small, &yen, &refund, &noted] {
            hb.wait_status(id, "completed", WAIT);
        }
        let seen = |path: &str| -> Vec<String> {
            rx.requests()
                .iter()
                .filter(|r| r.path == path)
                .map(|r| r.webhook_id().to_owned())
                .collect()
        };
        let mut big_seen = seen("/big");
        big_seen.sort();
        let mut expected = vec![big.clone(), refund.clone()];
        expected.sort();
        assert_eq!(big_seen, expected, "the manifest's filter");
        let mut refunds_seen = seen("/refunds");
        refunds_seen.sort();
        let mut expected = vec![refund.clone(), noted.clone()];
        expected.sort();
        assert_eq!(refunds_seen, expected, "the subscriber's filter");
        let small_event = hb.get(&format!("/webhooks/{small}")).unwrap().json();
        assert_eq!(small_event["deliveries"].as_array().map(Vec::len), Some(0), "{small_event}");
        let metrics = eventually(WAIT, "the filtered counter", || {
            let m = hb.get("/metrics").unwrap().text;
            m.contains(r#"hookbox_deliveries_filtered_total{destination="big-orders"} 3"#)
                .then_some(m)
        });
        assert!(
            metrics.contains(r#"hookbox_deliveries_filtered_total{destination="refunds"} 3"#),
            "{metrics}"
        );
        // A PATCH replaces the filter; null removes it.
        let patched = hb.call("PATCH", "/subscribers/refunds", Some(&json!({"filter": null})), &[]);
        assert_eq!(patched.status, 200, "{}", patched.text);
        assert!(patched.json()["filter"].is_null());
        let any = post(&hb, "order.created", json!({"total": 1}));
        hb.wait_status(&any, "completed", WAIT);
        assert!(seen("/refunds").contains(&any));
    }
}

#[test]
fn an_invalid_subscriber_filter_is_422_invalid_filter() {
    let hb = Hookbox::start(&[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    for filter in [
        json!({"total": {"$bigger": 1}}),
        json!([1]),
        json!({"$or": []}),
    ] {
        let r = hb.call(
            "POST",
            "/subscribers",
            Some(&json!({"name": "x", "event_types": ["*"], "url": "http://127.0.0.1:9/", "filter": filter})),
            &[],
        );
        r.assert_problem(422, "invalid_filter");
    }
    let r = hb.get("/subscribers").unwrap().json();
    assert_eq!(r["items"].as_array().map(Vec::len), Some(0));
    // A filter sent as a string holding JSON (a manifest's other form) is that
    // object; a string that is not JSON is refused like any bad filter.
    let body = |filter: &str| json!({"name": "s", "event_types": ["*"], "url": "http://127.0.0.1:9/", "filter": filter});
    hb.call("POST", "/subscribers", Some(&body("{not json")), &[])
        .assert_problem(422, "invalid_filter");
    let r = hb.call(
        "POST",
        "/subscribers",
        Some(&body(r#"{"payload": {"a": 1}}"#)),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["filter"], json!({"payload": {"a": 1}}));
    let patch = json!({"filter": r#"{"payload": {"a": {"$gt": 1}}}"#});
    let r = hb.call("PATCH", "/subscribers/s", Some(&patch), &[]);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["filter"], json!({"payload": {"a": {"$gt": 1}}}));
}

#[test]
fn an_invalid_manifest_filter_stops_serve_with_exit_2_naming_file_and_field() {
    for filter in [
        r#"filter = { total = { "$bigger" = 1 } }"#,
        r#"filter = "{not json""#,
        "filter = 3",
    ] {
        let dir = new_dir();
        http_manifest(
            dir.path(),
            "bad",
            r#"["*"]"#,
            "http://127.0.0.1:9/",
            filter,
            "",
        );
        let handlers = dir.path().join("handlers");
        let env = [("HANDLERS_DIR", handlers.to_str().expect("utf-8"))];
        let (code, stderr) = crate::config::run_with(&env, dir.path());
        assert_eq!(code, Some(2), "{filter}: {stderr}");
        assert!(stderr.contains("bad.toml: filter"), "{filter}: {stderr}");
    }
}
