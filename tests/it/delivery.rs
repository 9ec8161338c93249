//! HTTP delivery (docs/handlers.md, docs/api.md) against a real receiver on
//! 127.0.0.1: Standard Webhooks
//! signing (checked by an independent implementation), the retry decision matrix,
//! `Retry-After`, timeouts, strict per-key ordering, the subscribers API, dead letters
//! and replay, the admin token and the SSRF guard.
//!
//! hookbox refuses loopback targets unless `ALLOWED_TARGETS` lists them, so every
//! test that expects a delivery runs it with `ALLOWED_TARGETS=127.0.0.0/8`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::{
    Db, Hookbox, Reply, eventually, http_manifest, new_dir, on_both_backends, write,
};
use crate::receiver::{Answer, Received, Receiver};

const WAIT: Duration = Duration::from_secs(20);
const LOOPBACK: (&str, &str) = ("ALLOWED_TARGETS", "127.0.0.0/8");

fn post(hb: &Hookbox, event_type: &str, payload: Value) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": payload}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

/// A fresh `whsec_` secret: base64 of 32 random bytes.
fn new_secret() -> String {
    let key: Vec<u8> = std::iter::repeat_with(|| fastrand::u8(..))
        .take(32)
        .collect();
    format!("whsec_{}", STANDARD.encode(key))
}

/// Standard Webhooks, written here from the specification (not hookbox's code):
/// base64(HMAC-SHA256(base64decode(secret without `whsec_`), "{id}.{ts}.{body}")).
pub(crate) fn signature(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 secret");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("hmac key");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    STANDARD.encode(mac.finalize().into_bytes())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

fn delivery<'a>(ev: &'a Value, handler: &str) -> &'a Value {
    ev["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["handler"] == handler)
        .unwrap_or_else(|| panic!("no delivery for {handler}: {ev}"))
}

fn last_error(v: &Value) -> &str {
    v["last_error"]
        .as_str()
        .unwrap_or_else(|| panic!("no last_error: {v}"))
}

/// Asserts a problem+json answer with one of `statuses`.
fn assert_problem_among(r: &Reply, statuses: &[u16], what: &str) {
    assert!(
        statuses.contains(&r.status),
        "{what}: expected one of {statuses:?}, got {} {}",
        r.status,
        r.text
    );
    assert_eq!(
        r.header("content-type"),
        Some("application/problem+json"),
        "{what}: {}",
        r.text
    );
    assert_eq!(r.json()["status"], r.status, "{what}");
}

// ---------------------------------------------------------------------------
// a. Signing, body and headers
// ---------------------------------------------------------------------------

#[test]
fn deliveries_are_signed_with_every_rotated_secret_and_keep_their_id() {
    let rx = Receiver::start();
    rx.then(Answer::status(500));
    let (old, new) = (new_secret(), new_secret());
    let secrets = format!("{old} {new}");
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "signed",
        r#"["signed.*"]"#,
        &format!("{}/hook", rx.url),
        "backoff = [\"50ms\"]",
        "secret_env = \"SIGNED_SECRET\"",
    );
    let hb = Hookbox::restart(
        dir,
        &[
            LOOPBACK,
            ("SIGNED_SECRET", &secrets),
            ("LOG_LEVEL", "debug"),
        ],
    );
    let id = post(
        &hb,
        "signed.created",
        json!({"amount": 42, "note": "h\u{e9}llo \"quoted\" \\ / <>"}),
    );
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 2, "{ev}");
    let requests = rx.wait_for(2, WAIT);
    assert_eq!(requests.len(), 2, "one failed attempt, one success");
    for r in &requests {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/hook");
        assert_eq!(
            r.webhook_id(),
            id,
            "webhook-id is the event id on every attempt"
        );
        let ts = r.header("webhook-timestamp").expect("webhook-timestamp");
        let secs: i64 = ts.parse().expect("webhook-timestamp is unix seconds");
        assert!(
            (secs - unix_now()).abs() < 300,
            "webhook-timestamp {ts} is not now"
        );
        let header = r.header("webhook-signature").expect("webhook-signature");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "one signature per secret: {header}");
        let sigs: Vec<&str> = parts
            .iter()
            .map(|p| p.strip_prefix("v1,").expect("v1,<sig>"))
            .collect();
        assert_ne!(sigs[0], sigs[1], "{header}");
        for secret in [&old, &new] {
            let expected = signature(secret, &id, ts, &r.body);
            assert!(
                sigs.contains(&expected.as_str()),
                "no valid signature for one of the secrets: {header}"
            );
        }
        // The check can fail: another body (or another id) does not verify.
        let mut tampered = r.body.to_vec();
        tampered.push(b' ');
        assert!(!sigs.contains(&signature(&old, &id, ts, &tampered).as_str()));
        assert!(!sigs.contains(&signature(&old, "other", ts, &r.body).as_str()));
    }
    let logs = hb.logs().join("\n");
    let api = hb.get(&format!("/webhooks/{id}")).expect("get").text;
    for secret in [&old, &new] {
        let b64 = secret.trim_start_matches("whsec_");
        assert!(!logs.contains(b64), "a secret appears in hookbox's logs");
        assert!(!api.contains(b64), "a secret appears in the API");
    }
}

/// A secret shorter than the 24 bytes Standard Webhooks recommends is taken, as
/// its libraries take it (with a warning that does not show it), and signs.
#[test]
fn a_short_secret_is_taken_with_a_warning_and_signs() {
    let rx = Receiver::start();
    let short = format!("whsec_{}", STANDARD.encode(b"short-key"));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "short",
        r#"["short.*"]"#,
        &format!("{}/hook", rx.url),
        "",
        "secret_env = \"SHORT_SECRET\"",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK, ("SHORT_SECRET", &short)]);
    let id = post(&hb, "short.created", json!({"n": 1}));
    hb.wait_status(&id, "completed", WAIT);
    let r = &rx.wait_for(1, WAIT)[0];
    let ts = r.header("webhook-timestamp").expect("webhook-timestamp");
    let header = r.header("webhook-signature").expect("webhook-signature");
    assert_eq!(
        header,
        format!("v1,{}", signature(&short, &id, ts, &r.body)),
        "signed with the short key"
    );
    let logs = hb.logs().join("\n");
    assert!(logs.contains("shorter than the 24 bytes"), "{logs}");
    assert!(logs.contains("SHORT_SECRET"), "names the variable: {logs}");
    assert!(!logs.contains(short.trim_start_matches("whsec_")), "{logs}");
}

#[test]
fn the_delivery_body_is_the_event_as_json() {
    let rx = Receiver::start();
    let dir = new_dir();
    http_manifest(dir.path(), "shape", r#"["shape.created"]"#, &rx.url, "", "");
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let payload =
        json!({"order": {"id": 7, "lines": [1, 2.5, null, true]}, "text": "\u{1F600} \"q\""});
    let r = hb.post(
        &json!({"event_type": "shape.created", "payload": payload}),
        &[],
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let accepted = r.json();
    let id = accepted["id"].as_str().expect("id");
    hb.wait_status(id, "completed", WAIT);
    let req = &rx.wait_for(1, WAIT)[0];
    assert!(
        req.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        req.headers
    );
    assert_eq!(req.webhook_id(), id);
    assert!(req.header("webhook-timestamp").is_some());
    assert!(
        req.header("webhook-signature").is_none(),
        "no secret, no signature"
    );
    let body = req.json();
    let keys: BTreeSet<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["id", "event_type", "payload", "created_at"]),
        "{body}"
    );
    assert_eq!(body["id"], id);
    assert_eq!(body["event_type"], "shape.created");
    assert_eq!(body["payload"], payload);
    assert_eq!(
        body["created_at"], accepted["created_at"],
        "created_at as the API shows it (RFC 3339 UTC, milliseconds)"
    );
}

// ---------------------------------------------------------------------------
// b–e. The decision matrix, Retry-After, timeouts
// ---------------------------------------------------------------------------

#[test]
fn a_500_then_a_200_completes_after_two_attempts() {
    let rx = Receiver::start();
    rx.then(Answer::status(500).body("upstream exploded"));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "flaky",
        r#"["flaky"]"#,
        &rx.url,
        "backoff = [\"50ms\"]",
        "",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let id = post(&hb, "flaky", json!({"n": 1}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    let d = delivery(&ev, "flaky");
    assert_eq!(d["status"], "completed");
    assert_eq!(d["attempts"], 2, "{ev}");
    let err = last_error(d);
    assert!(err.starts_with("HTTP 500"), "{err}");
    assert!(err.contains("upstream exploded"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    let statuses: Vec<u16> = rx.requests().iter().map(|r| r.answered).collect();
    assert_eq!(statuses, [500, 200]);
}

#[test]
fn a_400_dead_letters_after_one_attempt_with_the_answer_in_last_error() {
    let rx = Receiver::start();
    let start = "bad request: field amount must be positive; ";
    rx.set_default(Answer::status(400).body(format!("{start}{}END-MARKER", "y".repeat(3000))));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "strict",
        r#"["strict"]"#,
        &rx.url,
        "backoff = [\"20ms\"]",
        "",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let id = post(&hb, "strict", json!({"amount": -1}));
    let ev = hb.wait_status(&id, "failed", WAIT);
    let d = delivery(&ev, "strict");
    assert_eq!(d["status"], "failed");
    assert_eq!(d["attempts"], 1, "{ev}");
    let err = last_error(d);
    assert!(err.starts_with("HTTP 400"), "{err}");
    assert!(err.contains(start), "{err}");
    assert!(
        !err.contains("END-MARKER"),
        "more than 1 KB of the body kept"
    );
    assert!(err.len() <= 1024 + 100, "last_error is {} bytes", err.len());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rx.count(), 1, "a 400 must not be retried");
}

#[test]
fn a_429_with_retry_after_is_honoured_over_the_backoff() {
    let rx = Receiver::start();
    rx.then(Answer::status(429).retry_after("1").body("slow down"));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "limited",
        r#"["limited"]"#,
        &rx.url,
        "backoff = [\"50ms\"]",
        "",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let id = post(&hb, "limited", json!({"n": 1}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 2, "{ev}");
    assert!(last_error(&ev).starts_with("HTTP 429"), "{ev}");
    let requests = rx.wait_for(2, WAIT);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(950),
        "the retry came {gap:?} after a 429 with Retry-After: 1"
    );
}

#[test]
fn a_timeout_is_retried() {
    let rx = Receiver::start();
    rx.then(Answer::status(200).after(Duration::from_secs(3)));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "sleepy",
        r#"["sleepy"]"#,
        &rx.url,
        "timeout = \"300ms\"\nbackoff = [\"50ms\"]",
        "",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let id = post(&hb, "sleepy", json!({"n": 1}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 2, "{ev}");
    assert!(last_error(&ev).contains("timed out"), "{ev}");
    let requests = rx.wait_for(2, WAIT);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(300) && gap < Duration::from_millis(2500),
        "the retry came {gap:?} after the first attempt (timeout 300ms, answer after 3s)"
    );
}

// ---------------------------------------------------------------------------
// f. Strict per-key ordering
// ---------------------------------------------------------------------------

on_both_backends! {
fn per_key_order_holds_while_the_receiver_fails_at_random(db: &Db) {
    const KEYS: usize = 10;
    const PER_KEY: usize = 100;
    let rx = Receiver::start();
    rx.fail_randomly(0.2, 20_261_125);
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "ordered",
        r#"["ordered.event"]"#,
        &format!("{}/ordered", rx.url),
        "max_attempts = 50\nbackoff = [\"20ms\"]",
        "ordering_key = \"/key\"",
    );
    let hb = Hookbox::restart(dir, &db.env(&[LOOPBACK, ("SQLITE_SYNCHRONOUS", "normal")]));
    let started = Instant::now();
    // One poster per key: within a key, event n+1 is posted after event n is accepted.
    let posted: HashMap<String, (usize, usize)> = std::thread::scope(|s| {
        let posters: Vec<_> = (0..KEYS)
            .map(|k| {
                let hb = &hb;
                s.spawn(move || {
                    (0..PER_KEY)
                        .map(|seq| {
                            let id = post(
                                hb,
                                "ordered.event",
                                json!({"key": format!("k{k}"), "seq": seq}),
                            );
                            (id, (k, seq))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        posters
            .into_iter()
            .flat_map(|p| p.join().expect("poster"))
            .collect()
    });
    assert_eq!(posted.len(), KEYS * PER_KEY);
    eventually(
        Duration::from_secs(60),
        "every event delivered with a 200",
        || {
            let ok: BTreeSet<String> = rx
                .requests()
                .iter()
                .filter(|r| r.answered == 200)
                .map(|r| r.webhook_id().to_owned())
                .collect();
            (ok.len() >= posted.len()).then_some(())
        },
    );
    let requests = rx.requests();
    let mut delivered: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for r in &requests {
        let (k, seq) = *posted
            .get(r.webhook_id())
            .unwrap_or_else(|| panic!("unknown webhook-id {}", r.webhook_id()));
        let body = r.json();
        assert_eq!(body["payload"]["seq"], seq);
        assert_eq!(body["payload"]["key"], format!("k{k}"));
        if r.answered == 200 {
            delivered.entry(k).or_default().push(seq);
        }
    }
    for (k, seqs) in &mut delivered {
        // At-least-once: an answer hookbox did not get (a timeout on a loaded
        // machine) runs the same delivery again, before the key's next one.
        if let Some(w) = seqs.windows(2).find(|w| w[0] > w[1]) {
            panic!(
                "key k{k}: seq {} was delivered after seq {} ({seqs:?})",
                w[1], w[0]
            );
        }
        let before = seqs.len();
        seqs.dedup();
        if seqs.len() < before {
            assert_redelivered_for_a_reason(&hb, &requests, &posted, *k);
        }
        assert_eq!(seqs.len(), PER_KEY, "key k{k}");
    }
    let failures = requests.iter().filter(|r| r.answered == 500).count();
    assert!(
        failures > 50,
        "only {failures} random failures: not a stress"
    );
    eprintln!(
        "ordering stress: {} requests ({failures} failed) in {:?}",
        requests.len(),
        started.elapsed()
    );
}
}

// ---------------------------------------------------------------------------
// g. Subscribers API
// ---------------------------------------------------------------------------

fn subscriber_body(name: &str, url: &str) -> Value {
    json!({"name": name, "event_types": ["sub.*"], "url": url})
}

on_both_backends! {
fn subscribers_can_be_created_listed_read_paused_and_deleted(db: &Db) {
    let rx = Receiver::start();
    rx.then(Answer::status(500));
    let hb = Hookbox::start(&db.env(&[LOOPBACK]));
    let secret = new_secret();
    let b64 = secret.trim_start_matches("whsec_").to_owned();
    let url = format!("{}/sub", rx.url);
    let created = hb.call(
        "POST",
        "/subscribers",
        Some(&json!({
            "name": "sub-orders",
            "event_types": ["sub.*"],
            "url": url,
            "secret": secret,
            "ordering_key": "/customer",
            "max_attempts": 3,
            "backoff": ["50ms"],
        })),
        &[],
    );
    assert_eq!(created.status, 201, "{}", created.text);
    assert!(!created.text.contains(&b64), "the secret is echoed");
    let sub = created.json();
    assert_eq!(sub["name"], "sub-orders");
    assert_eq!(sub["event_types"], json!(["sub.*"]));
    assert_eq!(sub["url"], url);
    assert_eq!(sub["active"], true, "active by default: {sub}");

    // Routes new events at once, signed, with its own retry policy.
    let id = post(&hb, "sub.created", json!({"customer": "c1"}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    let d = delivery(&ev, "sub-orders");
    assert_eq!(d["attempts"], 2, "{ev}");
    let requests = rx.wait_for(2, WAIT);
    assert!(
        requests[1].at - requests[0].at < Duration::from_secs(2),
        "the subscriber's backoff [\"50ms\"] was not used"
    );
    let r = &requests[1];
    assert_eq!(r.path, "/sub");
    assert_eq!(r.webhook_id(), id);
    let ts = r.header("webhook-timestamp").expect("timestamp");
    let sig = r.header("webhook-signature").expect("signed");
    assert_eq!(sig, format!("v1,{}", signature(&secret, &id, ts, &r.body)));

    let list = hb.call("GET", "/subscribers", None, &[]);
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(!list.text.contains(&b64), "the secret is listed");
    let items = list.json()["items"].as_array().expect("items").clone();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["name"], "sub-orders");
    let one = hb.call("GET", "/subscribers/sub-orders", None, &[]);
    assert_eq!(one.status, 200, "{}", one.text);
    assert!(!one.text.contains(&b64));
    assert_eq!(one.json()["url"], url);
    assert_eq!(hb.call("GET", "/subscribers/nobody", None, &[]).status, 404);

    // Paused: no new deliveries.
    let paused = hb.call(
        "PATCH",
        "/subscribers/sub-orders",
        Some(&json!({"active": false})),
        &[],
    );
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.json()["active"], false);
    let before = rx.count();
    let id = post(&hb, "sub.paused", json!({"customer": "c2"}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(
        ev["deliveries"],
        json!([]),
        "an inactive subscriber got a delivery"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rx.count(), before);

    // Active again: delivers again.
    let resumed = hb.call(
        "PATCH",
        "/subscribers/sub-orders",
        Some(&json!({"active": true})),
        &[],
    );
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    let id = post(&hb, "sub.resumed", json!({"customer": "c3"}));
    hb.wait_status(&id, "completed", WAIT);
    let last = rx.wait_for(before + 1, WAIT);
    assert_eq!(last[before].webhook_id(), id);

    // Deleted: gone, and routes nothing.
    assert_eq!(
        hb.call("DELETE", "/subscribers/sub-orders", None, &[])
            .status,
        204
    );
    assert_eq!(
        hb.call("GET", "/subscribers/sub-orders", None, &[]).status,
        404
    );
    assert_eq!(
        hb.call("DELETE", "/subscribers/sub-orders", None, &[])
            .status,
        404
    );
    let id = post(&hb, "sub.deleted", json!({}));
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["deliveries"], json!([]));
}
}

#[test]
fn subscriber_names_are_unique_across_manifests_and_subscribers() {
    let rx = Receiver::start();
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/taken.toml",
        "event_types = [\"x.*\"]\nkind = \"log\"\n",
    );
    let hb = Hookbox::restart(dir, &[LOOPBACK]);
    let r = hb.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("taken", &rx.url)),
        &[],
    );
    assert_problem_among(&r, &[409], "a manifest's name");
    let r = hb.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("twice", &rx.url)),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = hb.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("twice", &rx.url)),
        &[],
    );
    assert_problem_among(&r, &[409], "another subscriber's name");
}

#[test]
fn subscribers_with_a_literal_internal_address_are_refused() {
    let rx = Receiver::start();
    let hb = Hookbox::start(&[LOOPBACK]);
    for (n, url) in [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.10:8080/hook",
        "http://[::1]:8080/",
        "http://0.0.0.0/",
    ]
    .into_iter()
    .enumerate()
    {
        let r = hb.call(
            "POST",
            "/subscribers",
            Some(&subscriber_body(&format!("ssrf-{n}"), url)),
            &[],
        );
        assert_problem_among(&r, &[422], url);
    }
    // ALLOWED_TARGETS opens 127.0.0.0/8, and only that.
    let ok = hb.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("loopback", &rx.url)),
        &[],
    );
    assert_eq!(ok.status, 201, "{}", ok.text);
    let list = hb.call("GET", "/subscribers", None, &[]).json();
    assert_eq!(list["items"].as_array().expect("items").len(), 1, "{list}");
}

#[test]
fn a_localhost_subscriber_is_refused_with_what_to_do_unless_loopback_is_allowed() {
    let rx = Receiver::start();
    let local = format!("http://localhost:{}/hook", rx.port);
    let closed = Hookbox::start(&[]);
    let r = closed.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("local", &local)),
        &[],
    );
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json()["code"], "forbidden_target", "{}", r.text);
    assert!(r.text.contains("ALLOWED_TARGETS=127.0.0.0/8"), "{}", r.text);
    let open = Hookbox::start(&[LOOPBACK]);
    let r = open.call(
        "POST",
        "/subscribers",
        Some(&subscriber_body("local", &local)),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text);
    // subscriber_body subscribes to sub.*.
    let id = post(&open, "sub.local", json!({"n": 1}));
    open.wait_status(&id, "completed", WAIT);
    assert_eq!(rx.count(), 1, "delivered to the receiver through localhost");
}

#[test]
fn bad_subscriber_bodies_are_refused_with_a_problem() {
    let rx = Receiver::start();
    let hb = Hookbox::start(&[LOOPBACK]);
    let url = rx.url.as_str();
    for (what, body) in [
        (
            "missing url",
            json!({"name": "b1", "event_types": ["sub.*"]}),
        ),
        (
            "missing name",
            json!({"event_types": ["sub.*"], "url": url}),
        ),
        (
            "empty event_types",
            json!({"name": "b2", "event_types": [], "url": url}),
        ),
        (
            "a * not at the end",
            json!({"name": "b3", "event_types": ["ord*er"], "url": url}),
        ),
        (
            "a character outside the event type alphabet",
            json!({"name": "b4", "event_types": ["order created"], "url": url}),
        ),
        (
            "not a URL",
            json!({"name": "b5", "event_types": ["sub.*"], "url": "not a url"}),
        ),
        (
            "not http",
            json!({"name": "b6", "event_types": ["sub.*"], "url": "ftp://127.0.0.1/x"}),
        ),
        ("not an object", json!(["sub.*"])),
    ] {
        let r = hb.call("POST", "/subscribers", Some(&body), &[]);
        assert_problem_among(&r, &[400, 422], what);
    }
    let r = hb.post_raw("/subscribers", "{not json", "application/json", &[]);
    assert_problem_among(&r, &[400, 422], "not JSON");
    let list = hb.call("GET", "/subscribers", None, &[]);
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.json()["items"], json!([]), "a bad body was stored");
}

// ---------------------------------------------------------------------------
// h. Dead letters and replay
// ---------------------------------------------------------------------------

/// Two http handlers against a receiver that answers 400: three `dlq.order` events
/// (handler `dl-orders`) and two `dlq.invoice` events (handler `dl-invoices`), all
/// dead-lettered.
fn dead_lettered(db: &Db) -> (Receiver, Hookbox, Vec<String>, Vec<String>) {
    let rx = Receiver::start();
    rx.set_default(Answer::status(400).body("rejected: unknown customer"));
    let dir = new_dir();
    for (name, event_type) in [("dl-orders", "dlq.order"), ("dl-invoices", "dlq.invoice")] {
        http_manifest(
            dir.path(),
            name,
            &format!("[\"{event_type}\"]"),
            &rx.url,
            "backoff = [\"50ms\"]",
            "",
        );
    }
    let hb = Hookbox::restart(dir, &db.env(&[LOOPBACK]));
    let orders: Vec<String> = (0..3)
        .map(|n| post(&hb, "dlq.order", json!({"n": n})))
        .collect();
    let invoices: Vec<String> = (0..2)
        .map(|n| post(&hb, "dlq.invoice", json!({"n": n})))
        .collect();
    for id in orders.iter().chain(&invoices) {
        hb.wait_status(id, "failed", WAIT);
    }
    (rx, hb, orders, invoices)
}

/// Every page of `GET /dead-letters?limit=`, followed through `next_cursor`.
fn dead_letter_pages(hb: &Hookbox, limit: u32) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut path = format!("/dead-letters?limit={limit}");
    loop {
        let r = hb.call("GET", &path, None, &[]);
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.json();
        pages.push(page["items"].as_array().expect("items").clone());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/dead-letters?limit={limit}&cursor={cursor}"),
            None => return pages,
        }
        assert!(pages.len() < 50, "pagination does not end");
    }
}

fn replay(hb: &Hookbox, id: &str) -> Reply {
    hb.call("POST", &format!("/webhooks/{id}/replay"), None, &[])
}

fn bulk_replay(hb: &Hookbox, filter: Value) -> Value {
    let r = hb.call("POST", "/dead-letters/replay", Some(&filter), &[]);
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

on_both_backends! {
fn dead_letters_are_listed_with_their_event_and_paginated(db: &Db) {
    let (_rx, hb, orders, invoices) = dead_lettered(db);
    let pages = dead_letter_pages(&hb, 2);
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2, 1], "{pages:?}");
    let mut seen = BTreeSet::new();
    for item in pages.iter().flatten() {
        let event = &item["event"];
        let id = event["id"].as_str().expect("event.id").to_owned();
        let (handler, event_type) = if orders.contains(&id) {
            ("dl-orders", "dlq.order")
        } else {
            assert!(invoices.contains(&id), "{item}");
            ("dl-invoices", "dlq.invoice")
        };
        assert_eq!(item["handler"], handler, "{item}");
        assert_eq!(event["event_type"], event_type, "{item}");
        assert_eq!(event["status"], "failed", "{item}");
        assert_eq!(item["attempts"], 1, "{item}");
        assert!(last_error(item).starts_with("HTTP 400"), "{item}");
        assert!(seen.insert(id), "listed twice: {item}");
    }
    assert_eq!(seen.len(), 5);
    let all = hb.call("GET", "/dead-letters", None, &[]).json();
    assert_eq!(all["items"].as_array().expect("items").len(), 5);
    assert_eq!(all["next_cursor"], Value::Null);
}
}

on_both_backends! {
fn replaying_one_event_completes_it_and_keeps_its_history(db: &Db) {
    let (rx, hb, orders, _invoices) = dead_lettered(db);
    let id = &orders[0];
    let before = rx.count();
    rx.set_default(Answer::status(200));
    let r = replay(&hb, id);
    assert_eq!(r.status, 202, "{}", r.text);
    let ev = hb.wait_status(id, "completed", WAIT);
    let d = delivery(&ev, "dl-orders");
    assert_eq!(d["status"], "completed");
    assert_eq!(d["attempts"], 2, "attempts are kept and increased: {ev}");
    assert!(
        last_error(d).starts_with("HTTP 400"),
        "the failure history is kept: {ev}"
    );
    let requests = rx.wait_for(before + 1, WAIT);
    assert_eq!(requests[before].webhook_id(), id.as_str());
    let again = replay(&hb, id);
    assert_problem_among(&again, &[409], "replaying a completed event");
    let unknown = replay(&hb, "0190a8a4-0000-7000-8000-000000000000");
    assert_problem_among(&unknown, &[404], "replaying an unknown event");
    let left: usize = dead_letter_pages(&hb, 500).iter().map(Vec::len).sum();
    assert_eq!(left, 4);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.count(), before + 1, "one replay, one delivery");
}
}

on_both_backends! {
fn bulk_replay_by_handler_and_by_event_type_is_idempotent(db: &Db) {
    let (rx, hb, orders, invoices) = dead_lettered(db);
    rx.set_default(Answer::status(200));
    assert_eq!(
        bulk_replay(&hb, json!({"handler": "dl-orders"})),
        json!({"replayed": 3})
    );
    for id in &orders {
        let ev = hb.wait_status(id, "completed", WAIT);
        assert_eq!(ev["attempts"], 2, "{ev}");
    }
    for id in &invoices {
        let r = hb.get(&format!("/webhooks/{id}")).expect("get");
        assert_eq!(
            r.json()["status"],
            "failed",
            "the handler filter was ignored"
        );
    }
    assert_eq!(
        bulk_replay(&hb, json!({"handler": "dl-orders"})),
        json!({"replayed": 0})
    );
    assert_eq!(
        bulk_replay(&hb, json!({"event_type": "dlq.invoice"})),
        json!({"replayed": 2})
    );
    for id in &invoices {
        hb.wait_status(id, "completed", WAIT);
    }
    assert_eq!(
        bulk_replay(&hb, json!({"event_type": "dlq.invoice"})),
        json!({"replayed": 0})
    );
    let all = hb.call("GET", "/dead-letters", None, &[]).json();
    assert_eq!(all["items"], json!([]), "{all}");
}
}

// ---------------------------------------------------------------------------
// i. Admin token
// ---------------------------------------------------------------------------

const TOKEN: &str = "admin-token-for-tests";

fn assert_guarded(hb: &Hookbox, method: &str, path: &str, body: Option<&Value>) {
    let none = hb.call(method, path, body, &[]);
    none.assert_problem(401, "unauthorized");
    let wrong = hb.call(method, path, body, &[("authorization", "Bearer not-it")]);
    wrong.assert_problem(403, "forbidden");
}

fn bearer() -> (&'static str, String) {
    ("authorization", format!("Bearer {TOKEN}"))
}

#[test]
fn the_admin_token_guards_the_listing_and_private_metrics_only() {
    let hb = Hookbox::start(&[("ADMIN_TOKEN", TOKEN)]);
    let (k, v) = bearer();
    let auth = [(k, v.as_str())];
    let r = hb.post(
        &json!({"event_type": "open.intake", "payload": {}}),
        &[("Idempotency-Key", "k-open")],
    );
    assert_eq!(r.status, 202, "intake stays open: {}", r.text);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    assert_eq!(
        hb.call("GET", &format!("/webhooks/{id}"), None, &[]).status,
        200
    );
    assert_eq!(
        hb.call("GET", "/webhooks?idempotency_key=k-open", None, &[])
            .status,
        200
    );
    assert_guarded(&hb, "GET", "/webhooks?limit=5", None);
    let listing = hb.call("GET", "/webhooks?limit=5", None, &auth);
    assert_eq!(listing.status, 200, "{}", listing.text);
    for open in ["/health", "/ready", "/metrics"] {
        assert_eq!(hb.call("GET", open, None, &[]).status, 200, "{open}");
    }
    drop(hb);

    let hb = Hookbox::start(&[("ADMIN_TOKEN", TOKEN), ("METRICS_PUBLIC", "false")]);
    assert_guarded(&hb, "GET", "/metrics", None);
    let metrics = hb.call("GET", "/metrics", None, &auth);
    assert_eq!(metrics.status, 200);
    assert!(metrics.text.contains("hookbox_queue_capacity"));
    for open in ["/health", "/ready"] {
        assert_eq!(hb.call("GET", open, None, &[]).status, 200, "{open}");
    }
}

#[test]
fn the_admin_token_guards_subscribers_dead_letters_and_replay() {
    let rx = Receiver::start();
    let hb = Hookbox::start(&[("ADMIN_TOKEN", TOKEN), LOOPBACK]);
    let (k, v) = bearer();
    let auth = [(k, v.as_str())];
    let id = post(&hb, "nobody.listens", json!({}));
    hb.wait_status(&id, "completed", WAIT);
    let sub = subscriber_body("guarded", &rx.url);
    let patch = json!({"active": false});
    let replay_path = format!("/webhooks/{id}/replay");
    let guarded: [(&str, &str, Option<&Value>); 8] = [
        ("GET", "/subscribers", None),
        ("POST", "/subscribers", Some(&sub)),
        ("GET", "/subscribers/guarded", None),
        ("PATCH", "/subscribers/guarded", Some(&patch)),
        ("DELETE", "/subscribers/guarded", None),
        ("GET", "/dead-letters", None),
        ("POST", "/dead-letters/replay", Some(&json!({}))),
        ("POST", &replay_path, None),
    ];
    for (method, path, body) in guarded {
        assert_guarded(&hb, method, path, body);
    }
    // With the token, each route does its work.
    let r = hb.call("POST", "/subscribers", Some(&sub), &auth);
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(hb.call("GET", "/subscribers", None, &auth).status, 200);
    assert_eq!(
        hb.call("GET", "/subscribers/guarded", None, &auth).status,
        200
    );
    assert_eq!(
        hb.call("PATCH", "/subscribers/guarded", Some(&patch), &auth)
            .status,
        200
    );
    assert_eq!(
        hb.call("DELETE", "/subscribers/guarded", None, &auth)
            .status,
        204
    );
    assert_eq!(hb.call("GET", "/dead-letters", None, &auth).status, 200);
    let bulk = hb.call("POST", "/dead-letters/replay", Some(&json!({})), &auth);
    assert_eq!(bulk.status, 200, "{}", bulk.text);
    assert_eq!(bulk.json(), json!({"replayed": 0}));
    let single = hb.call("POST", &replay_path, None, &auth);
    assert_problem_among(&single, &[409], "replaying a completed event");
}

// ---------------------------------------------------------------------------
// j. SSRF at delivery time
// ---------------------------------------------------------------------------

/// A manifest pointing at the receiver through `host`, without `ALLOWED_TARGETS`.
fn refused_at_delivery(host: &str, mentions: &[&str]) {
    let rx = Receiver::start();
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "internal",
        r#"["internal"]"#,
        &format!("http://{host}:{}/hook", rx.port),
        "max_attempts = 2\nbackoff = [\"20ms\"]",
        "",
    );
    let hb = Hookbox::restart(dir, &[]);
    let id = post(&hb, "internal", json!({"n": 1}));
    let ev = hb.wait_status(&id, "failed", WAIT);
    let d = delivery(&ev, "internal");
    assert_eq!(
        d["attempts"], 2,
        "a refused target is a retryable failure: {ev}"
    );
    let err = last_error(d);
    assert!(
        mentions.iter().any(|m| err.contains(m)),
        "last_error does not name the internal target: {err}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.count(), 0, "the receiver was reached");
}

#[test]
fn a_literal_loopback_target_is_refused_at_delivery_time() {
    refused_at_delivery("127.0.0.1", &["127.0.0.1"]);
}

#[test]
fn a_name_resolving_to_loopback_is_refused_at_delivery_time() {
    refused_at_delivery("localhost", &["localhost", "127.0.0.1", "::1"]);
}

// ---------------------------------------------------------------------------
// k. The README's quick start
// ---------------------------------------------------------------------------

/// The README's quick start, step by step against the real binary: hookbox with
/// loopback allowed, `hookbox secret` into the file the README names, the
/// README's own Python receiver (its code taken from the README, on a free port),
/// the subscriber and the event as the README writes them; the receiver checks
/// the signature itself (Python's hmac, independent of hookbox) and prints
/// `signature ok`.
#[test]
fn the_readme_quick_start_ends_with_a_signed_delivery_at_the_readers_receiver() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    for step in [
        "ALLOWED_TARGETS=127.0.0.0/8 hookbox",
        "hookbox secret > .hookbox-secret",
        "SECRET=$(cat .hookbox-secret)",
        r#""name": "my-app", "event_types": ["order.*"],"#,
        r#""url": "http://127.0.0.1:9000/hooks", "secret": "'"$SECRET"'"}'"#,
        "-H 'Idempotency-Key: order-42-created'",
        r#"-d '{"event_type": "order.created", "payload": {"order_id": 42}}'"#,
    ] {
        assert!(
            readme.contains(step),
            "the quick start no longer says {step:?}"
        );
    }
    let Some(python) = ["python3"].into_iter().find(|p| {
        std::process::Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the README's receiver (no python3)"
        );
        return;
    };
    // The receiver's code as the README shows it, out of its list indentation.
    let start = readme.find("python3 -c '").expect("the receiver") + "python3 -c '".len();
    let end = readme[start..].find("serve_forever()'").expect("its end")
        + start
        + "serve_forever()".len();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let code: String = readme[start..end]
        .lines()
        .map(|l| l.strip_prefix("   ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("9000", &port.to_string());

    let hb = Hookbox::start(&[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    let folder = crate::harness::new_dir();
    let out = crate::harness::hookbox_in(folder.path())
        .arg("secret")
        .output()
        .expect("hookbox secret");
    std::fs::write(folder.path().join(".hookbox-secret"), &out.stdout).expect("secret file");
    let secret = String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    let mut receiver = std::process::Command::new(python)
        .args(["-c", &code])
        .current_dir(folder.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the README's receiver");
    let lines = {
        let stdout = receiver.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        rx
    };
    let subscriber = json!({
        "name": "my-app", "event_types": ["order.*"],
        "url": format!("http://127.0.0.1:{port}/hooks"), "secret": secret,
    });
    let r = hb.call("POST", "/subscribers", Some(&subscriber), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let r = hb.post(
        &json!({"event_type": "order.created", "payload": {"order_id": 42}}),
        &[("Idempotency-Key", "order-42-created")],
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    // The receiver may still be starting: hookbox retries until it listens.
    let said = lines.recv_timeout(Duration::from_secs(60));
    // It prints before it answers: the event completes once the answer is in.
    let done = said.is_ok().then(|| hb.wait_status(&id, "completed", WAIT));
    let _ = receiver.kill();
    let _ = receiver.wait();
    let said = said.expect("the receiver printed nothing");
    assert!(said.starts_with("signature ok "), "{said}");
    assert!(said.contains(r#""payload":{"order_id":42}"#), "{said}");
    assert!(done.is_some());
}

/// Every event of key `k` the receiver answered 200 more than once: hookbox recorded
/// one attempt per request it sent, and all but the last as failed by something
/// other than the receiver's answer (a timeout, a lost connection), so the repeat
/// was at-least-once doing its job, not a second dispatch of a finished delivery.
fn assert_redelivered_for_a_reason(
    hb: &Hookbox,
    requests: &[Received],
    posted: &HashMap<String, (usize, usize)>,
    k: usize,
) {
    let mut per_event: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    for r in requests.iter().filter(|r| posted[r.webhook_id()].0 == k) {
        per_event
            .entry(r.webhook_id())
            .or_default()
            .push(r.answered);
    }
    for (id, answers) in per_event {
        if answers.iter().filter(|a| **a == 200).count() < 2 {
            continue;
        }
        // The last outcome may still be on its way to the database.
        let attempts = eventually(WAIT, "every attempt recorded", || {
            let reply = hb.get(&format!("/webhooks/{id}/attempts")).ok()?;
            let items = reply.json()["items"].as_array().cloned()?;
            (items.len() >= answers.len()).then_some(items)
        });
        let history = format!("receiver answered {answers:?}; hookbox recorded {attempts:?}");
        assert_eq!(attempts.len(), answers.len(), "{history}");
        let last = attempts.len() - 1;
        for (i, attempt) in attempts
            .iter()
            .enumerate()
            .filter(|(i, _)| answers[*i] == 200)
        {
            let unheard = attempt["response_status"].is_null() && attempt["outcome"] == "retry";
            let done = i == last && attempt["outcome"] == "completed";
            assert!(
                unheard || done,
                "event {id} (key k{k}) was sent again after a 200 it heard: {history}"
            );
        }
    }
}

on_both_backends! {
/// Erasing the delivery at the head of an ordering key (waiting for its retry)
/// lets the key's next delivery go at once: before, on SQLite, nothing told the
/// window, and the next one waited for something else to wake its refill.
fn erasing_the_head_of_an_ordering_key_lets_the_next_one_go(db: &Db) {
    let rx = Receiver::start();
    rx.then(Answer::status(500));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "ordered",
        r#"["ordered.event"]"#,
        &format!("{}/ordered", rx.url),
        "max_attempts = 5\nbackoff = [\"60s\"]",
        "ordering_key = \"/key\"",
    );
    let hb = Hookbox::restart(dir, &db.env(&[LOOPBACK]));
    let head = post(&hb, "ordered.event", json!({"key": "k", "seq": 0}));
    rx.wait_for(1, WAIT);
    let next = post(&hb, "ordered.event", json!({"key": "k", "seq": 1}));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rx.count(), 1, "the next one waits behind the head's retry");
    let erased = hb.call("DELETE", &format!("/webhooks/{head}"), None, &[]);
    assert_eq!(erased.status, 204, "{}", erased.text);
    let got = rx.wait_for(2, Duration::from_secs(10));
    assert_eq!(got[1].json()["payload"]["seq"], 1);
    hb.wait_status(&next, "completed", WAIT);
}
}
