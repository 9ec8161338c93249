//! Reading status, probes, request ids and metrics (docs/api.md).

use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, client, eventually, on_both_backends};

on_both_backends! {
fn get_by_id_by_key_and_the_errors(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let posted = hb
        .post(
            &json!({"event_type": "a.b", "payload": {"x": 1}}),
            &[("Idempotency-Key", "kk")],
        )
        .json();
    let id = posted["id"].as_str().expect("id");
    let ev = eventually(Duration::from_secs(10), "completed", || {
        let ev = hb.get(&format!("/webhooks/{id}")).ok()?.json();
        (ev["status"] == "completed").then_some(ev)
    });
    for field in [
        "id",
        "idempotency_key",
        "event_type",
        "status",
        "attempts",
        "last_error",
        "created_at",
        "updated_at",
        "deliveries",
    ] {
        assert!(ev.get(field).is_some(), "{field} missing: {ev}");
    }
    assert_eq!(ev["attempts"], 0);
    assert_eq!(ev["deliveries"], json!([]));
    let by_key = hb.get("/webhooks?idempotency_key=kk").expect("get").json();
    assert_eq!(by_key["id"], id);

    hb.get("/webhooks/not-a-uuid")
        .expect("get")
        .assert_problem(400, "invalid_id");
    hb.get(&format!("/webhooks/{}", uuid::Uuid::now_v7()))
        .expect("get")
        .assert_problem(404, "not_found");
    hb.get("/webhooks?idempotency_key=nope")
        .expect("get")
        .assert_problem(404, "not_found");
    hb.get("/no/such/route")
        .expect("get")
        .assert_problem(404, "not_found");
}
}

on_both_backends! {
fn listing_is_newest_first_with_filters_and_a_cursor(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let mut ids = Vec::new();
    for n in 0..7 {
        let t = if n % 2 == 0 { "even" } else { "odd" };
        let r = hb
            .post(&json!({"event_type": t, "payload": {"n": n}}), &[])
            .json();
        ids.push(r["id"].as_str().expect("id").to_owned());
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/webhooks?limit=3&cursor={c}"),
            None => "/webhooks?limit=3".to_owned(),
        };
        let page = hb.get(&path).expect("list").json();
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 3);
        seen.extend(
            items
                .iter()
                .map(|e| e["id"].as_str().expect("id").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);

    let odd = hb.get("/webhooks?event_type=odd").expect("list").json();
    assert_eq!(odd["items"].as_array().expect("items").len(), 3);
    eventually(Duration::from_secs(10), "all completed", || {
        let done = hb.get("/webhooks?status=completed&limit=500").ok()?.json();
        (done["items"].as_array()?.len() == 7).then_some(())
    });
    let pending = hb.get("/webhooks?status=pending").expect("list").json();
    assert_eq!(pending["items"], json!([]));

    hb.get("/webhooks?limit=501")
        .expect("get")
        .assert_problem(400, "invalid_query");
    hb.get("/webhooks?limit=0")
        .expect("get")
        .assert_problem(400, "invalid_query");
    hb.get("/webhooks?status=done")
        .expect("get")
        .assert_problem(400, "invalid_query");
    hb.get("/webhooks?cursor=garbage")
        .expect("get")
        .assert_problem(400, "invalid_query");
    // Empty parameters (SPEC writes the route `?status=&event_type=&limit=&cursor=`)
    // are parameters left out.
    for path in [
        "/webhooks?status=&event_type=&limit=&cursor=",
        "/dead-letters?limit=&cursor=",
        "/subscribers?limit=&cursor=",
    ] {
        let r = hb.get(path).expect("list");
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        if path.starts_with("/webhooks") {
            assert_eq!(r.json()["items"].as_array().expect("items").len(), 7, "{path}");
        }
    }
}
}

#[test]
fn the_listing_needs_the_admin_token_when_one_is_set() {
    let hb = Hookbox::start(&[("ADMIN_TOKEN", "t0ken-of-16-chars")]);
    hb.get("/webhooks")
        .expect("get")
        .assert_problem(401, "unauthorized");
    let res = client()
        .get(format!("{}/webhooks", hb.url))
        .bearer_auth("wrong")
        .send()
        .expect("send");
    assert_eq!(res.status().as_u16(), 403);
    let res = client()
        .get(format!("{}/webhooks", hb.url))
        .bearer_auth("t0ken-of-16-chars")
        .send()
        .expect("send");
    assert_eq!(res.status().as_u16(), 200);
    // Intake and the probes stay open.
    assert_eq!(hb.post(&json!({"event_type": "t"}), &[]).status, 202);
    assert_eq!(hb.get("/health").expect("health").status, 200);
    assert_eq!(hb.get("/ready").expect("ready").status, 200);
}

#[test]
fn request_ids_are_echoed_or_made() {
    let hb = Hookbox::start(&[]);
    let res = client()
        .get(format!("{}/health", hb.url))
        .header("X-Request-ID", "caller-chosen-id")
        .send()
        .expect("send");
    assert_eq!(res.headers()["x-request-id"], "caller-chosen-id");
    let made = hb.get("/nope").expect("get");
    let id = made.header("x-request-id").expect("x-request-id");
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    let problem = hb.post_raw("/webhooks", "x", "application/json", &[]);
    assert!(problem.header("x-request-id").is_some());
}

on_both_backends! {
fn health_ready_and_metrics(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    assert_eq!(
        hb.get("/health").expect("health").json(),
        json!({"status": "ok"})
    );
    assert_eq!(hb.get("/ready").expect("ready").status, 200);
    hb.post(
        &json!({"event_type": "m.t", "payload": {}}),
        &[("Idempotency-Key", "m")],
    );
    hb.post(
        &json!({"event_type": "m.t", "payload": {}}),
        &[("Idempotency-Key", "m")],
    );
    hb.post(&json!({"event_type": ""}), &[]);
    let text = eventually(Duration::from_secs(5), "metrics", || {
        let text = hb.get("/metrics").ok()?.text;
        text.contains("hookbox_queue_capacity").then_some(text)
    });
    for name in [
        "hookbox_http_requests_total",
        "hookbox_http_request_duration_seconds_bucket",
        "hookbox_events_received_total",
        "hookbox_events_duplicate_total",
        "hookbox_events_rejected_total",
        "hookbox_queue_capacity",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.contains(r#"route="/webhooks""#), "{text}");
    assert!(
        text.contains(r#"event_type="other""#),
        "unrouted types count as other:\n{text}"
    );
    assert!(text.contains(r#"reason="invalid_event_type""#), "{text}");
    // The raw path of an unknown route never becomes a label.
    hb.get("/secret/path/123").expect("get");
    let text = hb.get("/metrics").expect("metrics").text;
    assert!(!text.contains("/secret/path/123"));
}
}

#[test]
fn json_logs_carry_the_request_id_on_every_line_of_the_request() {
    let hb = Hookbox::start(&[("LOG_FORMAT", "json"), ("LOG_LEVEL", "debug")]);
    let res = client()
        .get(format!("{}/health", hb.url))
        .header("X-Request-ID", "trace-me-123")
        .send()
        .expect("send");
    assert_eq!(res.status().as_u16(), 200);
    let lines = eventually(Duration::from_secs(5), "request log lines", || {
        let lines: Vec<String> = hb
            .logs()
            .into_iter()
            .filter(|l| l.contains("trace-me-123"))
            .collect();
        (lines.len() >= 2).then_some(lines)
    });
    for line in hb.logs() {
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        assert!(v.is_object());
    }
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["span"]["request_id"], "trace-me-123", "{line}");
    }
}
