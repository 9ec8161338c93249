//! Hardening of the store and what reads it (issue 9): a NUL byte in an error,
//! metric label cardinality, cached gauges, outcomes that cannot be written (a full
//! disk) and PostgreSQL backpressure that counts only due work.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, exec_manifest, http_manifest, new_dir, on_both_backends, script};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(30);

fn post(hb: &Hookbox, event_type: &str, n: u32) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": {"n": n}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

on_both_backends! {
/// PostgreSQL refuses NUL in text: an error holding one used to fail the whole
/// outcome batch, retried forever, and every outcome batched with it.
fn a_nul_byte_in_an_error_is_stored_without_it_and_stops_nothing(db: &Db) {
    let dir = new_dir();
    let receiver = Receiver::start();
    receiver.set_default(Answer::status(500).body("bad\0body"));
    let nul = script(dir.path(), "nul.sh", "printf 'bad\\000byte' >&2; exit 1");
    let ok = script(dir.path(), "ok.sh", "exit 0");
    let retry = "max_attempts = 2\nbackoff = [\"50ms\"]";
    exec_manifest(dir.path(), "nul", r#"["nul"]"#, &nul, retry);
    exec_manifest(dir.path(), "ok", r#"["ok"]"#, &ok, "");
    http_manifest(dir.path(), "nulhttp", r#"["nulhttp"]"#, &receiver.url, retry, "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    let mut ok_ids = Vec::new();
    let mut bad_ids = Vec::new();
    for n in 0..4 {
        ok_ids.push(post(&hb, "ok", n));
        bad_ids.push((post(&hb, "nul", n), "bad\u{fffd}byte"));
        bad_ids.push((post(&hb, "nulhttp", n), "bad\u{fffd}body"));
        ok_ids.push(post(&hb, "ok", n + 100));
    }
    for id in &ok_ids {
        hb.wait_status(id, "completed", WAIT);
    }
    for (id, text) in &bad_ids {
        let ev = hb.wait_status(id, "failed", WAIT);
        let error = ev["last_error"].as_str().expect("last_error");
        assert!(!error.contains('\0'), "{ev}");
        assert!(error.ends_with(text), "{ev}");
        assert_eq!(ev["deliveries"][0]["attempts"], 2, "{ev}");
        assert!(!ev["deliveries"][0]["last_error"].as_str().expect("error").contains('\0'));
    }
}
}

/// SPEC §5: a type routed by a wildcard is labelled with the pattern, so that a
/// `"*"` route does not make one series per event type ever posted.
#[test]
fn events_received_are_labelled_by_the_pattern_that_routed_them() {
    let dir = new_dir();
    let ok = script(dir.path(), "ok.sh", "exit 0");
    exec_manifest(dir.path(), "all", r#"["*"]"#, &ok, "");
    exec_manifest(dir.path(), "github", r#"["github.*"]"#, &ok, "");
    exec_manifest(dir.path(), "exact", r#"["order.created"]"#, &ok, "");
    let hb = Hookbox::restart(dir, &[]);
    for t in [
        "a.one",
        "a.two",
        "zzz",
        "github.push",
        "github.ping",
        "order.created",
    ] {
        post(&hb, t, 1);
    }
    let text = hb.get("/metrics").expect("metrics").text;
    for line in [
        r#"hookbox_events_received_total{event_type="*"} 3"#,
        r#"hookbox_events_received_total{event_type="github.*"} 2"#,
        r#"hookbox_events_received_total{event_type="order.created"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    for raw in ["a.one", "zzz", "github.push", "other"] {
        assert!(
            !text.contains(&format!("event_type=\"{raw}\"")),
            "{raw} is a label:\n{text}"
        );
    }
}
