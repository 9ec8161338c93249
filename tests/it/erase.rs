//! `DELETE /webhooks/{id}` (SPEC §14) on the real binary, both backends: the event,
//! its deliveries and attempts, the rejected copies of its delivery and its
//! recent key are gone, and its key may be used again; a delivery waiting for its
//! retry never runs; an attempt that is running makes it 409. And a source's
//! `retention`, which deletes its finished events sooner.

use std::time::Duration;

use serde_json::json;

use crate::harness::{
    Hookbox, eventually, exec_manifest, http_manifest, new_dir, on_both_backends, script, write,
};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(20);

on_both_backends! {
    fn an_erased_event_leaves_nothing_behind(db: &Db) {
        let rx = Receiver::start();
        rx.then(Answer::status(500));
        let dir = new_dir();
        write(dir.path(), "sources/gh.toml", "kind = \"github\"\nsecret_env = \"GH\"\n");
        http_manifest(dir.path(), "later", r#"["gh.*"]"#, &format!("{}/later", rx.url), "backoff = [\"2s\"]", "");
        let sources = dir.path().join("sources").to_str().expect("utf-8").to_owned();
        let env = [("SOURCES_DIR", sources.as_str()), ("ALLOWED_TARGETS", "127.0.0.0/8"), ("GH", "gh-secret")];
        let hb = Hookbox::restart(dir, &db.env(&env));
        // As GitHub sends it: delivery d-1, signed (computed here with the hmac crate).
        let send = |body: &str| {
            use hmac::{Hmac, KeyInit, Mac};
            let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(b"gh-secret").expect("key");
            mac.update(body.as_bytes());
            let sig: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
            let sig = format!("sha256={sig}");
            let headers = [("x-github-event", "push"), ("x-github-delivery", "d-1"), ("x-hub-signature-256", sig.as_str())];
            hb.post_raw("/ingest/gh", body, "application/json", &headers)
        };
        let r = send(r#"{"n": 1}"#);
        assert_eq!(r.status, 202, "{}", r.text);
        let id = r.json()["id"].as_str().expect("id").to_owned();
        // The same delivery id with another body: refused, kept in the log.
        send(r#"{"n": 2}"#).assert_problem(422, "idempotency_key_reused");
        assert_eq!(hb.get("/sources/gh/rejected").unwrap().json()["items"].as_array().map(Vec::len), Some(1));
        // The first attempt fails; its retry waits 2 s (recorded: pending again).
        rx.wait_for(1, WAIT);
        crate::harness::eventually(WAIT, "the retry to wait", || {
            let ev = hb.get(&format!("/webhooks/{id}")).unwrap().json();
            let d = &ev["deliveries"][0];
            (d["attempts"] == 1 && d["status"] == "pending").then_some(())
        });
        let erased = hb.call("DELETE", &format!("/webhooks/{id}"), None, &[]);
        assert_eq!(erased.status, 204, "{}", erased.text);
        hb.get(&format!("/webhooks/{id}")).unwrap().assert_problem(404, "not_found");
        hb.get(&format!("/webhooks/{id}/attempts")).unwrap().assert_problem(404, "not_found");
        assert_eq!(hb.get("/sources/gh/rejected").unwrap().json()["items"].as_array().map(Vec::len), Some(0));
        hb.call("DELETE", &format!("/webhooks/{id}"), None, &[]).assert_problem(404, "not_found");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(rx.requests().len(), 1, "the waiting retry never ran");
        // Its key may be used again: a new event.
        let again = send(r#"{"n": 3}"#);
        assert_eq!(again.status, 202, "{}", again.text);
        assert_ne!(again.json()["id"], id.as_str());
    }
}

#[test]
fn a_running_attempt_makes_erasure_409_and_bad_ids_are_refused() {
    let dir = new_dir();
    let slow = script(dir.path(), "slow.sh", "cat >/dev/null; sleep 3");
    exec_manifest(dir.path(), "slow", r#"["slow.*"]"#, &slow, "");
    let hb = Hookbox::restart(dir, &[]);
    let r = hb.post(&json!({"event_type": "slow.one", "payload": {}}), &[]);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    hb.wait_status(&id, "processing", WAIT);
    hb.call("DELETE", &format!("/webhooks/{id}"), None, &[])
        .assert_problem(409, "event_in_progress");
    hb.wait_status(&id, "completed", WAIT);
    assert_eq!(
        hb.call("DELETE", &format!("/webhooks/{id}"), None, &[])
            .status,
        204
    );
    hb.call("DELETE", "/webhooks/not-a-uuid", None, &[])
        .assert_problem(400, "invalid_id");
}

/// From its first moment: an attempt marks its delivery `processing` only after
/// 50 ms (SQLite), and an erasure sent as the handler started answered 204 and
/// erased the event under the running attempt.
#[test]
fn an_attempt_that_just_started_makes_erasure_409() {
    let dir = new_dir();
    let mark = dir.path().join("started");
    let slow = script(
        dir.path(),
        "slow.sh",
        &format!("touch '{}'; cat >/dev/null; sleep 2", mark.display()),
    );
    exec_manifest(dir.path(), "slow", r#"["slow.*"]"#, &slow, "");
    let hb = Hookbox::restart(dir, &[]);
    let r = hb.post(&json!({"event_type": "slow.one", "payload": {}}), &[]);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let began = std::time::Instant::now();
    while !mark.exists() {
        assert!(began.elapsed() < WAIT, "the handler never started");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    hb.call("DELETE", &format!("/webhooks/{id}"), None, &[])
        .assert_problem(409, "event_in_progress");
    hb.wait_status(&id, "completed", WAIT);
}

on_both_backends! {
/// A delivery handed to the window with intake's copy of its task, then erased
/// while its destination is paused, never runs once it resumes (SPEC §14: the
/// erased event reaches no one).
fn an_erased_event_waiting_in_a_paused_lane_is_never_delivered(db: &Db) {
    let dir = new_dir();
    let rx = Receiver::start();
    http_manifest(dir.path(), "held", r#"["held.*"]"#, &rx.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    let paused = hb.call("POST", "/destinations/held/pause", Some(&json!({})), &[]);
    assert_eq!(paused.status, 200, "{}", paused.text);
    let r = hb.post(
        &json!({"event_type": "held.one", "payload": {"secret": 1}}),
        &[],
    );
    let id = r.json()["id"].as_str().expect("id").to_owned();
    std::thread::sleep(Duration::from_millis(200));
    let erased = hb.call("DELETE", &format!("/webhooks/{id}"), None, &[]);
    assert_eq!(erased.status, 204, "{}", erased.text);
    hb.call("POST", "/destinations/held/resume", Some(&json!({})), &[]);
    // Another event after it: once it arrives, the erased one had its turn.
    let r = hb.post(&json!({"event_type": "held.two", "payload": {}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    let got = rx.wait_for(1, WAIT);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rx.requests().len(), 1, "only the second event");
    assert_eq!(got[0].json()["event_type"], "held.two");
}
}

on_both_backends! {
/// An erased event's waiting deliveries leave the due backlog with it: with no
/// workers and `QUEUE_MAXSIZE=3`, three events fill the queue (429), and after
/// one is erased another is accepted.
fn an_erased_events_deliveries_leave_the_queue(db: &Db) {
    let dir = new_dir();
    let rx = Receiver::start();
    http_manifest(dir.path(), "held", r#"["held.*"]"#, &rx.url, "", "");
    let env = [
        ("ALLOWED_TARGETS", "127.0.0.0/8"),
        ("WORKER_COUNT", "0"),
        ("QUEUE_MAXSIZE", "3"),
    ];
    let hb = Hookbox::restart(dir, &db.env(&env));
    let post = |n: u32| hb.post(&json!({"event_type": "held.one", "payload": {"n": n}}), &[]);
    let ids: Vec<String> = (0..3)
        .map(|n| {
            // (PostgreSQL counts from the table: a count that read an event may
            // land after intake counted it, so at this tiny bound a post may be
            // refused for a moment.)
            let r = eventually(WAIT, "accepted", || {
                let r = post(n);
                (r.status == 202).then_some(r)
            });
            r.json()["id"].as_str().expect("id").to_owned()
        })
        .collect();
    eventually(WAIT, "the queue full", || {
        let r = post(10);
        (r.status == 429).then_some(())
    });
    let erased = hb.call("DELETE", &format!("/webhooks/{}", ids[0]), None, &[]);
    assert_eq!(erased.status, 204, "{}", erased.text);
    eventually(WAIT, "room again after the erasure", || {
        let r = post(11);
        (r.status == 202).then_some(())
    });
}
}

/// An erased payload is gone from the database file, not only from the API:
/// the rows' bytes are overwritten (SQLite keeps a deleted row's bytes in its
/// free space otherwise), and what the WAL held is gone once it is checkpointed
/// (here: a clean stop). The receiver had it; the file does not.
#[test]
fn an_erased_payload_is_not_left_in_the_database_file() {
    let dir = new_dir();
    let rx = Receiver::start();
    http_manifest(dir.path(), "gets", r#"["secret.*"]"#, &rx.url, "", "");
    let mut hb = Hookbox::restart(dir.clone(), &[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    let marker = format!("erase-me-{}", uuid::Uuid::new_v4().simple());
    let kept = format!("keep-me-{}", uuid::Uuid::new_v4().simple());
    // Over 4 KB (overflow pages), and each row rewritten by its status updates
    // before it is erased; the erased one is the last, so nothing after it
    // reuses the space its earlier versions left.
    let post = |text: &str| {
        let r = hb.post(
            &json!({"event_type": "secret.pii", "payload": {"ssn": text, "pad": "x".repeat(5000)}}),
            &[],
        );
        let id = r.json()["id"].as_str().expect("id").to_owned();
        hb.wait_status(&id, "completed", WAIT);
        id
    };
    let _stays = post(&kept);
    let gone = post(&marker);
    let erased = hb.call("DELETE", &format!("/webhooks/{gone}"), None, &[]);
    assert_eq!(erased.status, 204, "{}", erased.text);
    hb.sigterm();
    assert_eq!(hb.wait_exit(WAIT), Some(0));
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("events.db") {
            files.push((name, std::fs::read(entry.path()).expect("read")));
        }
    }
    let holding = |needle: &str| -> Vec<String> {
        files
            .iter()
            .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .map(|(name, _)| name.clone())
            .collect()
    };
    assert!(
        !holding(&kept).is_empty(),
        "the check reads the file: the other payload is there"
    );
    let left = holding(&marker);
    assert!(left.is_empty(), "the erased payload is still in {left:?}");
}

#[test]
fn erasure_needs_the_admin_token() {
    let hb = Hookbox::start(&[("ADMIN_TOKEN", "the-right-admin-token-0123")]);
    let r = hb.post(&json!({"event_type": "a.b", "payload": {}}), &[]);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    hb.call("DELETE", &format!("/webhooks/{id}"), None, &[])
        .assert_problem(401, "unauthorized");
    let ok = hb.call(
        "DELETE",
        &format!("/webhooks/{id}"),
        None,
        &[("authorization", "Bearer the-right-admin-token-0123")],
    );
    assert_eq!(ok.status, 204);
}

on_both_backends! {
    /// A source's `retention` deletes its finished events sooner than
    /// `RETENTION_DAYS`, counted from when they finished; other events stay.
    fn a_source_retention_deletes_its_finished_events_sooner(db: &Db) {
        let dir = new_dir();
        write(dir.path(), "sources/lan.toml", "kind = \"none\"\nretention = \"1s\"\n");
        let sources = dir.path().join("sources").to_str().expect("utf-8").to_owned();
        let env = [("SOURCES_DIR", sources.as_str()), ("CLEANUP_INTERVAL_HOURS", "0.0002")];
        let hb = Hookbox::restart(dir, &db.env(&env));
        let r = hb.post_raw("/ingest/lan", r#"{"type": "thing"}"#, "application/json", &[]);
        assert_eq!(r.status, 202, "{}", r.text);
        let sourced = r.json()["id"].as_str().expect("id").to_owned();
        let kept = hb.post(&json!({"event_type": "a.b", "payload": {}}), &[]);
        let kept = kept.json()["id"].as_str().expect("id").to_owned();
        hb.wait_status(&sourced, "completed", WAIT);
        crate::harness::eventually(WAIT, "the source's retention", || {
            (hb.get(&format!("/webhooks/{sourced}")).unwrap().status == 404).then_some(())
        });
        assert_eq!(hb.get(&format!("/webhooks/{kept}")).unwrap().status, 200, "RETENTION_DAYS keeps it");
    }
}
