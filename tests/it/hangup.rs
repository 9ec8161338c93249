//! Clients that hang up right after sending their request: whatever hookbox
//! committed for them must still reach processing (ARCHITECTURE: "what happens after
//! a commit never depends on the HTTP request still being alive").
//!
//! Each client is a raw TCP socket that writes one whole request and closes at once,
//! so the server sees the hang-up while the commit is under way — the moment that
//! used to cancel the request's future between the commit and the hand-off to the
//! workers (intake, replay) or to the routing table (subscribers).

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Db, Hookbox, http_manifest, new_dir, on_both_backends};
use crate::receiver::{Answer, Receiver};

const LOOPBACK: (&str, &str) = ("ALLOWED_TARGETS", "127.0.0.0/8");

/// Generous: the machine is shared, and PostgreSQL's safety-net poll is 5 s.
const WAIT: Duration = Duration::from_secs(40);

/// One request as a raw client sends it.
struct Raw {
    method: &'static str,
    path: String,
    key: Option<String>,
    body: String,
}

impl Raw {
    fn post(path: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            method: "POST",
            path: path.into(),
            key: None,
            body: body.into(),
        }
    }
}

/// Writes the request on a fresh connection and hangs up at once (no answer is
/// read).
fn hang_up(hb: &Hookbox, raw: &Raw) {
    let addr = hb.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut request = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        raw.method,
        raw.path,
        raw.body.len()
    );
    if let Some(key) = &raw.key {
        request.push_str(&format!("Idempotency-Key: {key}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&raw.body);
    stream.write_all(request.as_bytes()).expect("write");
    let _ = stream.shutdown(Shutdown::Both);
}

/// Runs `hang_up` for every request, on 16 threads at once.
fn hang_up_all(hb: &Hookbox, requests: &[Raw]) {
    std::thread::scope(|s| {
        for chunk in requests.chunks(requests.len().div_ceil(16).max(1)) {
            s.spawn(move || {
                for raw in chunk {
                    hang_up(hb, raw);
                }
            });
        }
    });
}

/// Every event of the instance (admin listing, all pages).
fn all_events(hb: &Hookbox) -> Vec<Value> {
    let mut items = Vec::new();
    let mut path = "/webhooks?limit=500".to_owned();
    loop {
        let page = hb.get(&path).expect("list").json();
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/webhooks?limit=500&cursor={cursor}"),
            None => return items,
        }
    }
}

/// Waits until every listed event is `completed`; panics with the stuck ones.
fn wait_all_completed(hb: &Hookbox, what: &str) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = all_events(hb);
        let stuck: Vec<&Value> = events
            .iter()
            .filter(|e| e["status"] != "completed")
            .collect();
        if stuck.is_empty() {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {} committed events never completed, e.g. {}",
            stuck.len(),
            events.len(),
            stuck[0]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An ordered http handler (`hang.ordered`, ordering key `/customer`) and a log
/// handler (`hang.log`), against `rx`.
fn start(db: &Db, rx: &Receiver, extra: &str) -> Hookbox {
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "ordered",
        "[\"hang.ordered\"]",
        &rx.url,
        &format!("ordering_key = \"/customer\"\n{extra}"),
        "",
    );
    crate::harness::write(
        dir.path(),
        "handlers/log.toml",
        "event_types = [\"hang.log\"]\nkind = \"log\"\n",
    );
    Hookbox::restart(dir, &db.env(&[LOOPBACK]))
}

on_both_backends! {
fn committed_events_of_clients_that_hung_up_are_processed(db: &Db) {
    let rx = Receiver::start();
    rx.set_default(Answer::status(200));
    let hb = start(db, &rx, "");
    let requests: Vec<_> = (0..300)
        .map(|i| {
            let event_type = if i % 2 == 0 { "hang.ordered" } else { "hang.log" };
            let body = json!({
                "event_type": event_type,
                "payload": {"customer": format!("c{}", i % 5), "n": i},
            });
            Raw {
                key: Some(format!("hang-{i}")),
                ..Raw::post("/webhooks", body.to_string())
            }
        })
        .collect();
    hang_up_all(&hb, &requests);
    // What was committed must complete; an ordered key must not be blocked.
    std::thread::sleep(Duration::from_millis(500));
    let events = wait_all_completed(&hb, "intake");
    eprintln!("{} of 300 hung-up posts were committed", events.len());
    assert!(!events.is_empty(), "no hung-up post was committed: nothing was tested");
    // A sender's retry of a committed event gets it, completed.
    for e in events.iter().take(20) {
        let key = e["idempotency_key"].as_str().expect("key");
        let i: usize = key.trim_start_matches("hang-").parse().expect("index");
        let again = hb.post_raw(
            "/webhooks",
            &requests[i].body,
            "application/json",
            &[("Idempotency-Key", key)],
        );
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.json()["status"], "completed", "{}", again.text);
    }
    // And new events for every ordered key still go through.
    for c in 0..5 {
        let r = hb.post(
            &json!({"event_type": "hang.ordered", "payload": {"customer": format!("c{c}")}}),
            &[],
        );
        assert_eq!(r.status, 202, "{}", r.text);
        hb.wait_status(r.json()["id"].as_str().expect("id"), "completed", WAIT);
    }
}
}

on_both_backends! {
fn replays_of_clients_that_hung_up_are_processed(db: &Db) {
    let rx = Receiver::start();
    rx.set_default(Answer::status(400));
    let hb = start(db, &rx, "max_attempts = 1");
    let ids: Vec<String> = (0..60)
        .map(|i| {
            let r = hb.post(
                &json!({"event_type": "hang.ordered", "payload": {"customer": format!("c{}", i % 3), "n": i}}),
                &[],
            );
            assert_eq!(r.status, 202, "{}", r.text);
            r.json()["id"].as_str().expect("id").to_owned()
        })
        .collect();
    for id in &ids {
        hb.wait_status(id, "failed", WAIT);
    }
    rx.set_default(Answer::status(200));
    // Single replays for the first 40, hung up at once; a bulk replay for the rest.
    let singles: Vec<_> = ids[..40]
        .iter()
        .map(|id| {
Raw::post(format!("/webhooks/{id}/replay"), "")
        })
        .collect();
    hang_up_all(&hb, &singles);
    std::thread::sleep(Duration::from_millis(500));
    // Whatever the single replays did not reach is still failed: the bulk replay
    // (hung up too) takes it along with the last 20.
    hang_up(&hb, &Raw::post("/dead-letters/replay", "{}"));
    std::thread::sleep(Duration::from_millis(500));
    let failed_left = all_events(&hb)
        .iter()
        .filter(|e| e["status"] == "failed")
        .count();
    if failed_left > 0 {
        // The bulk replay was not committed before the hang-up: replay properly.
        let r = hb.call("POST", "/dead-letters/replay", Some(&json!({})), &[]);
        assert_eq!(r.status, 200, "{}", r.text);
    }
    wait_all_completed(&hb, "replay");
}
}

on_both_backends! {
fn subscribers_created_by_clients_that_hung_up_are_routed(db: &Db) {
    let rx = Receiver::start();
    rx.set_default(Answer::status(200));
    let hb = start(db, &rx, "");
    let url = format!("{}/sub", rx.url);
    let names: Vec<String> = (0..20).map(|i| format!("hung-{i}")).collect();
    let requests: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let body = json!({"name": name, "event_types": [format!("sub.hang{i}")], "url": url});
            Raw::post("/subscribers", body.to_string())
        })
        .collect();
    hang_up_all(&hb, &requests);
    std::thread::sleep(Duration::from_millis(500));
    let stored = hb.call("GET", "/subscribers", None, &[]).json();
    let stored: Vec<String> = stored["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_owned())
        .collect();
    eprintln!("{} of 20 hung-up subscribers were stored", stored.len());
    assert!(!stored.is_empty(), "no hung-up subscriber was stored: nothing was tested");
    for name in &stored {
        let i: usize = name.trim_start_matches("hung-").parse().expect("index");
        let r = hb.post(&json!({"event_type": format!("sub.hang{i}"), "payload": {}}), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
        let ev = hb.wait_status(r.json()["id"].as_str().expect("id"), "completed", WAIT);
        let handlers: Vec<&str> = ev["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .map(|d| d["handler"].as_str().expect("handler"))
            .collect();
        assert_eq!(handlers, [name.as_str()], "a stored subscriber is not routed: {ev}");
    }
}
}
