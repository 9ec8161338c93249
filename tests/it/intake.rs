//! Intake (docs/api.md, "Intake"): every row of the table.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, client, eventually, on_both_backends, post_all};

fn order(n: u32) -> serde_json::Value {
    json!({"event_type": "order.created", "payload": {"order": n, "items": ["a", "b"]}})
}

on_both_backends! {
fn new_event_is_202_with_location_and_summary(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let r = hb.post(&order(1), &[("Idempotency-Key", "k-1")]);
    assert_eq!(r.status, 202, "{}", r.text);
    let body = r.json();
    let id = body["id"].as_str().expect("id");
    assert_eq!(
        r.header("location"),
        Some(format!("/webhooks/{id}").as_str())
    );
    assert_eq!(body["idempotency_key"], "k-1");
    assert_eq!(body["event_type"], "order.created");
    assert_eq!(body["status"], "pending");
    let uuid = uuid::Uuid::parse_str(id).expect("uuid");
    assert_eq!(uuid.get_version_num(), 7);
    let created = body["created_at"].as_str().expect("created_at");
    assert_eq!(created.len(), "2026-11-25T22:44:57.123Z".len(), "{created}");
    assert!(created.ends_with('Z'));
    assert!(r.header("x-request-id").is_some());
}
}

on_both_backends! {
fn a_retry_gets_200_with_the_current_status_and_a_changed_payload_422(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let first = hb.post(&order(1), &[("Idempotency-Key", "same")]).json();
    // No handler routes order.created here, so the event completes on its own.
    eventually(Duration::from_secs(10), "completion", || {
        let r = hb
            .get(&format!("/webhooks/{}", first["id"].as_str()?))
            .ok()?;
        (r.json()["status"] == "completed").then_some(())
    });
    let again = hb.post(&order(1), &[("Idempotency-Key", "same")]);
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first["id"]);
    assert_eq!(again.json()["status"], "completed");

    let other_payload = hb.post(&order(2), &[("Idempotency-Key", "same")]);
    other_payload.assert_problem(422, "idempotency_key_reused");
    let other_type = hb.post(
        &json!({"event_type": "order.deleted", "payload": {"order": 1, "items": ["a", "b"]}}),
        &[("Idempotency-Key", "same")],
    );
    other_type.assert_problem(422, "idempotency_key_reused");
}
}

#[test]
fn key_sources_in_order_header_then_x_header_then_body() {
    let hb = Hookbox::start(&[]);
    let mut body = order(1);
    body["idempotency_key"] = json!("from-body");
    let r = hb.post(&body, &[]).json();
    assert_eq!(r["idempotency_key"], "from-body");
    let r = hb
        .post(&order(2), &[("X-Idempotency-Key", "from-x")])
        .json();
    assert_eq!(r["idempotency_key"], "from-x");
    let mut body = order(3);
    body["idempotency_key"] = json!("ignored");
    let r = hb
        .post(
            &body,
            &[
                ("Idempotency-Key", "from-header"),
                ("X-Idempotency-Key", "x"),
            ],
        )
        .json();
    assert_eq!(r["idempotency_key"], "from-header");
    // No key at all: the event's key is its id, and two posts are two events.
    let a = hb.post(&order(4), &[]).json();
    let b = hb.post(&order(4), &[]).json();
    assert_eq!(a["idempotency_key"], a["id"]);
    assert_ne!(a["id"], b["id"]);
}

#[test]
fn reordered_json_keys_are_the_same_payload() {
    let hb = Hookbox::start(&[]);
    let a = hb.post_raw(
        "/webhooks",
        r#"{"event_type":"t","payload":{"a":1,"b":{"c":2,"d":3}}}"#,
        "application/json",
        &[("Idempotency-Key", "ordered")],
    );
    let b = hb.post_raw(
        "/webhooks",
        r#"{"payload":{"b":{"d":3,"c":2},"a":1},  "event_type":"t"}"#,
        "application/json; charset=utf-8",
        &[("Idempotency-Key", "ordered")],
    );
    assert_eq!(a.status, 202);
    assert_eq!(b.status, 200, "{}", b.text);
}

#[test]
fn malformed_bodies_are_400_invalid_body() {
    let hb = Hookbox::start(&[]);
    for body in [
        "not json",
        "",
        "[1,2]",
        "\"text\"",
        "{}",
        r#"{"payload": {}}"#,
        r#"{"event_type": 42}"#,
        r#"{"event_type": null}"#,
        r#"{"event_type": "t", "idempotency_key": 5}"#,
        "{\"event_type\": \"t\", \"payload\": \"\\ud800\"}",
    ] {
        hb.post_raw("/webhooks", body, "application/json", &[])
            .assert_problem(400, "invalid_body");
    }
}

#[test]
fn bad_event_types_are_422() {
    let hb = Hookbox::start(&[]);
    let long = "a".repeat(256);
    for t in ["", "has space", "emoji😀", "semi;colon", long.as_str()] {
        hb.post(&json!({"event_type": t, "payload": {}}), &[])
            .assert_problem(422, "invalid_event_type");
    }
    let max = "a".repeat(255);
    for t in ["a", "order.created", "A-z_0.9:x/y", max.as_str()] {
        let r = hb.post(&json!({"event_type": t, "payload": {}}), &[]);
        assert_eq!(r.status, 202, "{t}: {}", r.text);
    }
}

#[test]
fn bad_keys_are_422() {
    let hb = Hookbox::start(&[]);
    let long = "k".repeat(256);
    hb.post(&order(1), &[("Idempotency-Key", long.as_str())])
        .assert_problem(422, "invalid_idempotency_key");
    let mut body = order(1);
    body["idempotency_key"] = json!("");
    hb.post(&body, &[])
        .assert_problem(422, "invalid_idempotency_key");
    let max = "k".repeat(255);
    assert_eq!(
        hb.post(&order(1), &[("Idempotency-Key", max.as_str())])
            .status,
        202
    );
}

#[test]
fn oversized_bodies_are_413_and_wrong_types_415() {
    let hb = Hookbox::start(&[("MAX_BODY_BYTES", "1000")]);
    let big = json!({"event_type": "t", "payload": "x".repeat(2000)});
    hb.post(&big, &[]).assert_problem(413, "payload_too_large");
    let fits = json!({"event_type": "t", "payload": "x".repeat(900)});
    assert_eq!(hb.post(&fits, &[]).status, 202);

    let r = hb.post_raw("/webhooks", r#"{"event_type":"t"}"#, "text/plain", &[]);
    r.assert_problem(415, "unsupported_media_type");
    let r = hb.post_raw(
        "/webhooks",
        "event_type=t",
        "application/x-www-form-urlencoded",
        &[],
    );
    r.assert_problem(415, "unsupported_media_type");
}

#[test]
fn a_chunked_body_over_the_limit_is_413() {
    let hb = Hookbox::start(&[("MAX_BODY_BYTES", "1000")]);
    // A streamed body has no Content-Length: the limit must hold while reading.
    let body = reqwest::blocking::Body::new(std::io::Cursor::new(vec![b' '; 2000]));
    let res = client()
        .post(format!("{}/webhooks", hb.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("send");
    assert_eq!(res.status().as_u16(), 413);
}

#[test]
fn require_idempotency_key_makes_keyless_posts_400() {
    let hb = Hookbox::start(&[("REQUIRE_IDEMPOTENCY_KEY", "true")]);
    hb.post(&order(1), &[])
        .assert_problem(400, "missing_idempotency_key");
    assert_eq!(
        hb.post(&order(1), &[("Idempotency-Key", "given")]).status,
        202
    );
}

on_both_backends! {
fn a_full_queue_answers_429_and_stores_nothing(db: &Db) {
    // WORKER_COUNT=0: nothing drains the queue. A handler routes the events, so
    // each leaves work behind (on PostgreSQL an unrouted event is done at once).
    let dir = crate::harness::new_dir();
    crate::harness::write(
        dir.path(),
        "handlers/log.toml",
        "event_types = [\"order.*\"]\nkind = \"log\"\n",
    );
    let hb = Hookbox::restart(
        dir,
        &db.env(&[("QUEUE_MAXSIZE", "3"), ("WORKER_COUNT", "0")]),
    );
    for n in 0..3 {
        let r = hb.post(&order(n), &[("Idempotency-Key", &format!("q-{n}"))]);
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let r = hb.post(&order(3), &[("Idempotency-Key", "q-3")]);
    r.assert_problem(429, "overloaded");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    assert_eq!(
        hb.get("/webhooks?idempotency_key=q-3").expect("get").status,
        404
    );
    assert_eq!(
        hb.get("/webhooks?idempotency_key=q-2").expect("get").status,
        200
    );
}
}

on_both_backends! {
fn fifty_concurrent_posts_with_one_key_make_one_event(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let posts = vec![(hb.url.clone(), order(7), Some("contended".to_owned())); 50];
    let answers: Vec<(u16, String)> = post_all(&posts)
        .into_iter()
        .map(|(status, body)| (status, body["id"].as_str().expect("id").to_owned()))
        .collect();
    let created = answers.iter().filter(|(s, _)| *s == 202).count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(answers.iter().all(|(s, _)| *s == 202 || *s == 200));
    let first = &answers[0].1;
    assert!(answers.iter().all(|(_, id)| id == first), "{answers:?}");
    let list = hb.get("/webhooks?limit=500").expect("list").json();
    assert_eq!(list["items"].as_array().expect("items").len(), 1);
}
}

on_both_backends! {
fn a_burst_of_new_and_taken_keys_gets_one_answer_each(db: &Db) {
    // Taken and new keys arrive together, so they share group commits: every new
    // key must be 202 with an event of its own, every taken one 200 with the stored
    // event, whatever else was in its batch.
    let hb = Hookbox::start(&db.env(&[]));
    let stored: Vec<String> = (0..10)
        .map(|i| {
            let r = hb.post(&order(i), &[("Idempotency-Key", &format!("taken-{i}"))]);
            assert_eq!(r.status, 202, "{}", r.text);
            r.json()["id"].as_str().expect("id").to_owned()
        })
        .collect();
    let keys: Vec<(String, u32)> = (0..20)
        .map(|i| (format!("taken-{}", i % 10), i % 10))
        .chain((0..40).map(|i| (format!("new-{i}"), 100 + i)))
        .collect();
    let posts: Vec<_> = keys
        .iter()
        .map(|(key, n)| (hb.url.clone(), order(*n), Some(key.clone())))
        .collect();
    let answers: Vec<(&String, u16, String)> = keys
        .iter()
        .zip(post_all(&posts))
        .map(|((key, _), (status, body))| {
            (key, status, body["id"].as_str().expect("id").to_owned())
        })
        .collect();
    let mut new_ids = std::collections::HashSet::new();
    for (key, status, id) in &answers {
        if let Some(i) = key.strip_prefix("taken-") {
            let i: usize = i.parse().expect("index");
            assert_eq!((*status, id), (200, &stored[i]), "{key}");
        } else {
            assert_eq!(*status, 202, "{key}");
            assert!(!stored.contains(id) && new_ids.insert(id.clone()), "{key}: {id}");
            let by_key = hb.get(&format!("/webhooks?idempotency_key={key}")).expect("get");
            assert_eq!(by_key.json()["id"].as_str(), Some(id.as_str()), "{key}");
        }
    }
    assert_eq!(new_ids.len(), 40);
    let list = hb.get("/webhooks?limit=500").expect("list").json();
    assert_eq!(list["items"].as_array().expect("items").len(), 50);
}
}

// ---------------------------------------------------------------------------
// Hardening: exact numbers, duplicate keys, NUL, slow bodies, memory
// ---------------------------------------------------------------------------

/// A payload whose numbers f64 cannot hold, sent with its keys out of order.
const EXACT_BODY: &str = r#"{"event_type": "num.check", "payload": {"small": 0.1000000000000000000001, "big": 12345678901234567890123, "neg": -0, "exp": 1E+2, "list": [1.50, 2.0, 18446744073709551616]}}"#;

/// Its canonical text: keys sorted, every number digit for digit.
const EXACT_CANONICAL: &str = r#"{"big":12345678901234567890123,"exp":1E+2,"list":[1.50,2.0,18446744073709551616],"neg":-0,"small":0.1000000000000000000001}"#;

on_both_backends! {
fn payload_numbers_reach_receivers_and_exec_children_as_sent(db: &Db) {
    let rx = crate::receiver::Receiver::start();
    let dir = crate::harness::new_dir();
    let out = dir.path().join("stdin.json");
    let s = crate::harness::script(dir.path(), "save.sh", &format!("cat > {}", out.display()));
    crate::harness::exec_manifest(dir.path(), "saver", r#"["num.*"]"#, &s, "");
    crate::harness::http_manifest(dir.path(), "poster", r#"["num.*"]"#, &rx.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    let r = hb.post_raw("/webhooks", EXACT_BODY, "application/json", &[("Idempotency-Key", "exact")]);
    assert_eq!(r.status, 202, "{}", r.text);
    hb.wait_status(r.json()["id"].as_str().expect("id"), "completed", Duration::from_secs(20));
    let stdin = std::fs::read_to_string(&out).expect("the exec child's stdin");
    assert_eq!(stdin, EXACT_CANONICAL);
    let received = rx.wait_for(1, Duration::from_secs(10));
    let body = String::from_utf8(received[0].body.to_vec()).expect("utf-8");
    assert!(
        body.contains(&format!("\"payload\":{EXACT_CANONICAL}")),
        "the receiver got {body}"
    );
    // The same numbers in another layout are the same payload…
    let again = hb.post_raw(
        "/webhooks",
        &format!(r#"{{"payload":{EXACT_CANONICAL},"event_type":"num.check"}}"#),
        "application/json",
        &[("Idempotency-Key", "exact")],
    );
    assert_eq!(again.status, 200, "{}", again.text);
    // …and a number f64 would round to the same value is another one.
    let rounded = EXACT_BODY.replace("0.1000000000000000000001", "0.1000000000000000000002");
    hb.post_raw("/webhooks", &rounded, "application/json", &[("Idempotency-Key", "exact")])
        .assert_problem(422, "idempotency_key_reused");
}
}

#[test]
fn an_object_with_a_key_twice_is_400_invalid_body() {
    let hb = Hookbox::start(&[]);
    for body in [
        r#"{"event_type": "t", "event_type": "u"}"#,
        r#"{"event_type": "t", "payload": {"a": 1, "a": 2}}"#,
        r#"{"event_type": "t", "payload": [{"a": {"b": 1, "\u0062": 1}}]}"#,
        r#"{"event_type": "t", "payload": 1, "x": {"k": 1, "k": 1}}"#,
    ] {
        let r = hb.post_raw("/webhooks", body, "application/json", &[]);
        r.assert_problem(400, "invalid_body");
        assert!(
            r.json()["detail"]
                .as_str()
                .expect("detail")
                .contains("twice"),
            "{}",
            r.text
        );
    }
    let list = hb.get("/webhooks").expect("list").json();
    assert_eq!(list["items"], json!([]), "nothing was stored");
}

on_both_backends! {
fn nul_in_a_key_or_an_ordering_value_is_a_clear_422(db: &Db) {
    let dir = crate::harness::new_dir();
    crate::harness::write(
        dir.path(),
        "handlers/ordered.toml",
        "event_types = [\"nul.*\"]\nkind = \"log\"\nordering_key = \"/customer\"\n",
    );
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let keyed = r#"{"event_type": "nul.key", "idempotency_key": "a\u0000b", "payload": {}}"#;
    hb.post_raw("/webhooks", keyed, "application/json", &[])
        .assert_problem(422, "invalid_idempotency_key");
    let ordered = r#"{"event_type": "nul.order", "payload": {"customer": "c\u0000"}}"#;
    for _ in 0..2 {
        // Not a retryable 503: the same answer every time.
        hb.post_raw("/webhooks", ordered, "application/json", &[("Idempotency-Key", "nul-o")])
            .assert_problem(422, "invalid_ordering_value");
    }
    // A NUL elsewhere in the payload is data like any other, on both backends.
    let fine = r#"{"event_type": "nul.order", "payload": {"customer": "c", "note": "x\u0000y"}}"#;
    let r = hb.post_raw("/webhooks", fine, "application/json", &[("Idempotency-Key", "nul-ok")]);
    assert_eq!(r.status, 202, "{}", r.text);
    hb.wait_status(r.json()["id"].as_str().expect("id"), "completed", Duration::from_secs(20));
    // An unrouted event has no ordering value: its payload is not looked into.
    let unrouted = r#"{"event_type": "other", "payload": {"customer": "c\u0000"}}"#;
    let r = hb.post_raw("/webhooks", unrouted, "application/json", &[]);
    assert_eq!(r.status, 202, "{}", r.text);
}
}

/// Sends `head` (request line and headers), then `body_part` bytes by bytes every
/// `pace`, until the server answers; returns the status line and how long it took.
fn slow_post(
    hb: &Hookbox,
    declared: usize,
    body_part: &[u8],
    pace: Duration,
) -> (String, Duration) {
    use std::io::{Read, Write};
    let addr = hb.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let head = format!(
        "POST /webhooks HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    let started = std::time::Instant::now();
    stream.write_all(head.as_bytes()).expect("write");
    let mut writer = stream.try_clone().expect("clone");
    let part = body_part.to_vec();
    std::thread::spawn(move || {
        for b in part {
            if writer.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(pace);
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    (
        text.lines().next().unwrap_or("").to_owned(),
        started.elapsed(),
    )
}

#[test]
fn a_stalled_or_trickled_body_is_408_after_the_bound() {
    let hb = Hookbox::start(&[("HOOKBOX_BODY_READ_TIMEOUT_MS", "1500")]);
    let body = br#"{"event_type": "slow", "payload": {}}"#;
    // Headers, a few bytes, then nothing.
    let (status, took) = slow_post(&hb, body.len(), &body[..5], Duration::ZERO);
    assert!(
        status.starts_with("HTTP/1.1 408"),
        "{status:?} after {took:?}"
    );
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    // A byte every 100 ms: never idle, but the whole body is still too slow.
    let (status, took) = slow_post(&hb, body.len(), body, Duration::from_millis(100));
    assert!(
        status.starts_with("HTTP/1.1 408"),
        "{status:?} after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A body that comes in time is taken.
    let (status, _) = slow_post(&hb, body.len(), body, Duration::from_millis(10));
    assert!(status.starts_with("HTTP/1.1 202"), "{status:?}");
    assert_eq!(
        hb.get("/webhooks").expect("list").json()["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

/// The peak resident memory of a process so far, in bytes (Linux).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

#[test]
fn megabyte_bodies_of_zeros_cost_little_memory_while_they_wait() {
    let hb = Hookbox::start(&[]);
    // Warm up (first request, pools, allocator), then measure the peak's growth.
    hb.post(&order(0), &[]);
    let before = peak_rss(hb.pid());
    let zeros = format!(
        "{{\"event_type\":\"zeros\",\"payload\":[{}0]}}",
        "0,".repeat(520_000)
    );
    assert!(zeros.len() <= 1_048_576);
    let body: serde_json::Value = serde_json::from_str(&zeros).expect("json");
    let posts = vec![(hb.url.clone(), body, None); 8];
    for (status, answer) in post_all(&posts) {
        assert_eq!(status, 202, "{answer}");
    }
    let grew = peak_rss(hb.pid()).saturating_sub(before);
    eprintln!(
        "8 concurrent 1 MB bodies of zeros: peak RSS grew {} MB",
        grew >> 20
    );
    // 8 bodies of 1 MB, each kept raw, canonical and in its queued job: ~24 MB,
    // measured 38-48 MB with the allocator's per-thread arenas, and 62 MB once on
    // a loaded CI run. A tree of values costs 32 bytes per zero: 16 MB each, 130 MB
    // for 8 on top of all that.
    assert!(grew < 100 << 20, "peak RSS grew {} MB", grew >> 20);
}
