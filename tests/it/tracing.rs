//! W3C Trace Context (SPEC §13) on the real binary: a sender's `traceparent` is
//! kept with the event (both backends) and every attempt — retried ones included —
//! reaches a real receiver as a child span of that trace; an exec child gets
//! `TRACEPARENT`; an invalid `traceparent` starts a new trace.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Hookbox, exec_manifest, http_manifest, new_dir, on_both_backends, script};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(20);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn post(hb: &Hookbox, headers: &[(&str, &str)]) -> String {
    let r = hb.post(
        &json!({"event_type": "traced.thing", "payload": {"n": 1}}),
        headers,
    );
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

/// `(version, trace id, span id, flags)` of a valid traceparent, lower-case hex.
fn parts(traceparent: &str) -> (String, String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    assert!(
        p[0] == "00" && hex(p[1], 32) && hex(p[2], 16) && hex(p[3], 2),
        "{traceparent}"
    );
    (p[0].into(), p[1].into(), p[2].into(), p[3].into())
}

on_both_backends! {
    fn every_attempt_is_a_child_span_of_the_senders_trace(db: &Db) {
        let rx = Receiver::start();
        rx.then(Answer::status(500));
        let dir = new_dir();
        http_manifest(dir.path(), "traced", r#"["traced.*"]"#, &format!("{}/t", rx.url), "backoff = [\"50ms\"]", "");
        let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
        let given = format!("00-{TRACE}-{PARENT}-01");
        let id = post(&hb, &[("traceparent", &given), ("tracestate", "vendor=abc,other=1")]);
        let ev = hb.wait_status(&id, "completed", WAIT);
        assert_eq!(ev["trace_id"], TRACE, "{ev}");
        let got = rx.wait_for(2, WAIT);
        assert_eq!(got.len(), 2, "one failed attempt, one success");
        let spans: Vec<String> = got
            .iter()
            .map(|r| {
                let (_, trace, span, flags) = parts(r.header("traceparent").expect("traceparent"));
                assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"));
                assert_ne!(span, PARENT, "an attempt is a span of its own");
                assert_eq!(r.header("tracestate"), Some("vendor=abc,other=1"));
                span
            })
            .collect();
        assert_ne!(spans[0], spans[1], "each attempt has its own span");
    }
}

/// A `log` handler's line about an event carries its `trace_id` (SPEC §13: JSON
/// log lines about an event carry it).
#[test]
fn a_log_handlers_line_carries_the_trace_id() {
    let dir = new_dir();
    crate::harness::write(
        dir.path(),
        "handlers/seen.toml",
        "event_types = [\"traced.*\"]\nkind = \"log\"\n",
    );
    let hb = Hookbox::restart(dir, &[("LOG_FORMAT", "json")]);
    let id = post(&hb, &[("traceparent", &format!("00-{TRACE}-{PARENT}-01"))]);
    hb.wait_status(&id, "completed", WAIT);
    let line = crate::harness::eventually(WAIT, "the log handler's line", || {
        hb.logs()
            .into_iter()
            .find(|l| l.contains("event received") && l.contains(&id))
    });
    let v: Value = serde_json::from_str(&line).expect("json");
    assert_eq!(v["trace_id"], TRACE, "a key of the line itself: {line}");
}

#[test]
fn an_invalid_traceparent_starts_a_new_trace() {
    let hb = Hookbox::start(&[]);
    for bad in [
        format!("ff-{TRACE}-{PARENT}-01"),
        format!("00-{}-{PARENT}-01", TRACE.to_uppercase()),
        format!("00-{}-{PARENT}-01", "0".repeat(32)),
        format!("00-{TRACE}-{}-01", "0".repeat(16)),
        format!("00-{TRACE}-{PARENT}"),
        "garbage".to_owned(),
    ] {
        let id = post(&hb, &[("traceparent", &bad)]);
        let ev: Value = hb.get(&format!("/webhooks/{id}")).unwrap().json();
        let trace = ev["trace_id"].as_str().expect("a trace id");
        assert_eq!(trace.len(), 32, "{bad}: {ev}");
        assert_ne!(trace, TRACE, "{bad}");
    }
    let id = post(&hb, &[]);
    let ev: Value = hb.get(&format!("/webhooks/{id}")).unwrap().json();
    assert_eq!(
        ev["trace_id"].as_str().map(str::len),
        Some(32),
        "no traceparent: a new trace"
    );
}

#[test]
fn an_exec_child_gets_traceparent() {
    let dir = new_dir();
    let out = dir.path().join("traceparent.txt");
    let child = script(
        dir.path(),
        "print.sh",
        &format!(
            "cat >/dev/null; printf '%s' \"$TRACEPARENT\" > {}",
            out.display()
        ),
    );
    exec_manifest(dir.path(), "printer", r#"["traced.*"]"#, &child, "");
    let hb = Hookbox::restart(dir.clone(), &[]);
    let id = post(&hb, &[("traceparent", &format!("00-{TRACE}-{PARENT}-00"))]);
    hb.wait_status(&id, "completed", WAIT);
    let printed = std::fs::read_to_string(&out).expect("the child wrote it");
    let (_, trace, span, flags) = parts(&printed);
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "00"));
    assert_ne!(span, PARENT);
}
