//! The recent keys (docs/architecture.md, "Idempotency keys"): a retry of a key
//! retried lately (its first retry reaches the writer) is answered from memory on SQLite — and answered exactly as the
//! table would answer it. PostgreSQL keeps no such memory; the same tests show it
//! answers alike.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Db, Hookbox, eventually, exec_manifest, new_dir, on_both_backends, script};

const WAIT: Duration = Duration::from_secs(20);

fn event(event_type: &str, n: u32) -> Value {
    json!({"event_type": event_type, "payload": {"n": n}})
}

/// `hookbox_idempotency_cache_hits_total`.
fn cache_hits(hb: &Hookbox) -> f64 {
    let text = hb.get("/metrics").expect("metrics").text;
    text.lines()
        .find_map(|l| l.strip_prefix("hookbox_idempotency_cache_hits_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Hits on SQLite (more than `before`); none at all on PostgreSQL.
fn assert_answered_from_cache(db: &Db, hb: &Hookbox, before: f64) {
    let after = cache_hits(hb);
    if db.is_postgres() {
        assert_eq!(after, 0.0, "PostgreSQL keeps no recent keys");
    } else {
        assert!(
            after > before,
            "no retry was answered from the cache ({after})"
        );
    }
}

fn retry(hb: &Hookbox, body: &Value, key: &str) -> Value {
    let r = hb.post(body, &[("Idempotency-Key", key)]);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let id = r.json()["id"].as_str().expect("id").to_owned();
    assert_eq!(
        r.header("location"),
        Some(format!("/webhooks/{id}").as_str())
    );
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "the same answer as the table's"
    );
    r.json()
}

on_both_backends! {
/// The status a retry answers follows the event through its life: the cache never
/// answers an older one.
fn a_cached_retry_answers_the_current_status(db: &Db) {
    let dir = new_dir();
    let go = dir.path().join("go");
    let handler = script(
        dir.path(),
        "wait.sh",
        &format!("while [ ! -f {} ]; do sleep 0.05; done; exit 0", go.display()),
    );
    exec_manifest(dir.path(), "waits", "[\"job.run\"]", &handler, "");
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let body = event("job.run", 1);
    let first = hb.post(&body, &[("Idempotency-Key", "life")]);
    assert_eq!(first.status, 202, "{}", first.text);
    let id = first.json()["id"].as_str().expect("id").to_owned();
    hb.wait_status(&id, "processing", WAIT);
    let before = cache_hits(&hb);
    for _ in 0..3 {
        let again = retry(&hb, &body, "life");
        assert_eq!(again["id"], id.as_str());
        assert_eq!(again["status"], "processing");
        assert_eq!(again["idempotency_key"], "life");
        assert_eq!(again["event_type"], "job.run");
        assert_eq!(again["created_at"], first.json()["created_at"]);
    }
    assert_answered_from_cache(db, &hb, before);
    std::fs::write(&go, "").expect("go");
    hb.wait_status(&id, "completed", WAIT);
    // The first retry after the change may go to the table; every one says completed.
    let before = cache_hits(&hb);
    for _ in 0..3 {
        assert_eq!(retry(&hb, &body, "life")["status"], "completed");
    }
    assert_answered_from_cache(db, &hb, before);
}
}

on_both_backends! {
fn a_changed_payload_or_type_is_422_from_the_cache_too(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let body = event("order.created", 1);
    assert_eq!(hb.post(&body, &[("Idempotency-Key", "k")]).status, 202);
    retry(&hb, &body, "k");
    let before = cache_hits(&hb);
    hb.post(&event("order.created", 2), &[("Idempotency-Key", "k")])
        .assert_problem(422, "idempotency_key_reused");
    hb.post(&event("order.deleted", 1), &[("Idempotency-Key", "k")])
        .assert_problem(422, "idempotency_key_reused");
    assert_answered_from_cache(db, &hb, before);
    let metrics = hb.get("/metrics").expect("metrics").text;
    assert!(
        metrics.contains("hookbox_events_rejected_total{reason=\"idempotency_key_reused\"} 2"),
        "the 422s are counted as refusals: {metrics}"
    );
    // Still one event, untouched by the refused requests.
    let stored = hb.get("/webhooks?idempotency_key=k").expect("get").json();
    assert_eq!(stored["received_count"], 2);
}
}

on_both_backends! {
/// Every 200 counts, and the count is there for whoever got the 200 (a read right
/// after it) and after a restart.
fn received_count_counts_every_cached_retry(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let body = event("order.created", 7);
    let first = hb.post(&body, &[("Idempotency-Key", "count")]).json();
    let id = first["id"].as_str().expect("id").to_owned();
    hb.wait_status(&id, "completed", WAIT);
    let before = cache_hits(&hb);
    for n in 2..=6 {
        retry(&hb, &body, "count");
        let seen = hb.get(&format!("/webhooks/{id}")).expect("get").json();
        assert_eq!(seen["received_count"], n, "{seen}");
    }
    assert_answered_from_cache(db, &hb, before);
    let seen = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    let last = seen["last_received_at"].as_str().expect("last_received_at");
    assert!(last > first["created_at"].as_str().expect("created_at"), "{seen}");
    let metrics = hb.get("/metrics").expect("metrics").text;
    assert!(metrics.contains("hookbox_events_duplicate_total 5"), "{metrics}");
    // Durable: a restart reads the same count.
    let dir = hb.kill9();
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let seen = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_eq!(seen["received_count"], 6, "{seen}");
}
}

/// With room for only 64 keys, most of 500 are forgotten: their retries go to the
/// table, which answers them alike (and counts them alike). A key is remembered
/// from its first retry on, so the first pass fills the cache and the second finds
/// only the last keys it remembered.
#[test]
fn evicted_keys_are_answered_by_the_table() {
    let hb = Hookbox::start(&[("HOOKBOX_RECENT_KEYS", "64")]);
    let mut ids = Vec::new();
    for n in 0..500 {
        let key = format!("ev-{n}");
        let r = hb.post(&event("order.created", n), &[("Idempotency-Key", &key)]);
        assert_eq!(r.status, 202, "{}", r.text);
        ids.push(r.json()["id"].as_str().expect("id").to_owned());
    }
    for (n, id) in (0..).zip(&ids) {
        let again = retry(&hb, &event("order.created", n), &format!("ev-{n}"));
        assert_eq!(again["id"], id.as_str());
    }
    let before = cache_hits(&hb);
    for (n, id) in (0..).zip(&ids) {
        let again = retry(&hb, &event("order.created", n), &format!("ev-{n}"));
        assert_eq!(again["id"], id.as_str());
    }
    let hits = cache_hits(&hb) - before;
    assert!(
        hits < 250.0,
        "most keys were evicted, yet {hits} of 500 hits"
    );
    for n in 0..500 {
        hb.post(
            &event("order.created", 9999),
            &[("Idempotency-Key", &format!("ev-{n}"))],
        )
        .assert_problem(422, "idempotency_key_reused");
    }
    // A key the table answered is remembered again.
    let before = cache_hits(&hb);
    retry(&hb, &event("order.created", 0), "ev-0");
    retry(&hb, &event("order.created", 0), "ev-0");
    assert!(
        cache_hits(&hb) > before,
        "the table's answer refills the cache"
    );
    for (n, id) in ids.iter().enumerate().step_by(50) {
        let seen = hb.get(&format!("/webhooks/{id}")).expect("get").json();
        let expected = if n == 0 { 5 } else { 3 };
        assert_eq!(seen["received_count"], expected, "key ev-{n}: {seen}");
    }
}

on_both_backends! {
/// A replayed event is not answered with its old `failed`.
fn replay_changes_what_a_retry_answers(db: &Db) {
    let dir = new_dir();
    let go = dir.path().join("go");
    let tried = dir.path().join("tried");
    let handler = script(
        dir.path(),
        "once.sh",
        &format!(
            "if [ ! -f {t} ]; then touch {t}; exit 65; fi\n\
             while [ ! -f {g} ]; do sleep 0.05; done; exit 0",
            t = tried.display(),
            g = go.display()
        ),
    );
    exec_manifest(dir.path(), "once", "[\"job.flaky\"]", &handler, "");
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let body = event("job.flaky", 1);
    let id = hb.post(&body, &[("Idempotency-Key", "flaky")]).json()["id"]
        .as_str()
        .expect("id")
        .to_owned();
    hb.wait_status(&id, "failed", WAIT);
    let before = cache_hits(&hb);
    for _ in 0..3 {
        assert_eq!(retry(&hb, &body, "flaky")["status"], "failed");
    }
    assert_answered_from_cache(db, &hb, before);
    let replay = hb.call("POST", &format!("/webhooks/{id}/replay"), None, &[]);
    assert_eq!(replay.status, 202, "{}", replay.text);
    let status = retry(&hb, &body, "flaky")["status"].clone();
    assert!(
        status == "pending" || status == "processing",
        "a retry right after the replay answered {status}"
    );
    std::fs::write(&go, "").expect("go");
    hb.wait_status(&id, "completed", WAIT);
    assert_eq!(retry(&hb, &body, "flaky")["status"], "completed");
}
}

on_both_backends! {
/// Once retention has deleted an event, its key is free again: a retry is a new
/// event (202), not the deleted one.
fn retention_frees_the_key_from_the_cache_too(db: &Db) {
    // Terminal events older than ~4 s are deleted, every ~1 s.
    let hb = Hookbox::start(&db.env(&[
        ("RETENTION_DAYS", "0.00005"),
        ("CLEANUP_INTERVAL_HOURS", "0.0003"),
    ]));
    let body = event("order.created", 3);
    let id = hb.post(&body, &[("Idempotency-Key", "old")]).json()["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let before = cache_hits(&hb);
    for _ in 0..3 {
        retry(&hb, &body, "old");
    }
    assert_answered_from_cache(db, &hb, before);
    eventually(WAIT, "retention deletes the event", || {
        let r = hb.get(&format!("/webhooks/{id}")).ok()?;
        (r.status == 404).then_some(())
    });
    let again = hb.post(&body, &[("Idempotency-Key", "old")]);
    assert_eq!(again.status, 202, "{}", again.text);
    assert_ne!(again.json()["id"], id.as_str());
}
}
