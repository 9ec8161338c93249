//! Hardening of the store and what reads it (issue 9): a NUL byte in an error,
//! metric label cardinality, cached gauges, outcomes that cannot be written (a full
//! disk) and PostgreSQL backpressure that counts only due work.

use serde_json::json;

use crate::harness::{Hookbox, exec_manifest, new_dir, script};

fn post(hb: &Hookbox, event_type: &str, n: u32) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": {"n": n}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
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
