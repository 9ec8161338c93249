//! Transforms (SPEC §12) on the real binary: each effect seen at a real receiver
//! on 127.0.0.1, cancel, a throw, an endless loop stopped while other deliveries
//! flow, a subscriber's transform (both backends), a source's transform renaming
//! types before routing, and `POST /destinations/{name}/test`, which sends nothing.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Db, Hookbox, http_manifest, new_dir, on_both_backends, write};
use crate::receiver::Receiver;

const WAIT: Duration = Duration::from_secs(20);
const LOOPBACK: (&str, &str) = ("ALLOWED_TARGETS", "127.0.0.0/8");

fn post(hb: &Hookbox, event_type: &str, payload: Value) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": payload}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

const RESHAPE: &str = r#"
function handler(webhook) {
  const order = webhook.payload.payload;
  if (order.skip) { webhook.cancel = true; return webhook; }
  if (order.explode) { throw new Error("cannot reshape order " + order.id); }
  if (order.spin) { while (true) {} }
  webhook.payload = { order_id: order.id, amount_cents: order.total * 100 };
  webhook.method = "PUT";
  webhook.url = webhook.url + "/orders/" + order.id;
  webhook.headers["x-tenant"] = "acme";
  return webhook;
}
"#;

/// hookbox on `dir`, with its `sources` folder and loopback targets allowed.
fn start_with_sources(dir: std::sync::Arc<tempfile::TempDir>) -> Hookbox {
    let sources = dir
        .path()
        .join("sources")
        .to_str()
        .expect("utf-8")
        .to_owned();
    Hookbox::restart(dir, &[LOOPBACK, ("SOURCES_DIR", &sources)])
}

/// One hookbox with a `reshaped` http handler whose transform is RESHAPE, and a
/// plain `plain` handler for the same types on the same receiver.
fn start(rx: &Receiver) -> Hookbox {
    start_on(rx, &Db::sqlite())
}

fn start_on(rx: &Receiver, db: &Db) -> Hookbox {
    let dir = new_dir();
    write(dir.path(), "handlers/transforms/reshape.js", RESHAPE);
    http_manifest(
        dir.path(),
        "reshaped",
        r#"["order.*"]"#,
        &format!("{}/reshaped", rx.url),
        "transform = \"transforms/reshape.js\"\nmax_attempts = 3\nbackoff = [\"50ms\"]",
        "",
    );
    http_manifest(
        dir.path(),
        "plain",
        r#"["order.*"]"#,
        &format!("{}/plain", rx.url),
        "",
        "",
    );
    Hookbox::restart(dir, &db.env(&[LOOPBACK]))
}

#[test]
fn a_transform_reshapes_the_request_a_receiver_gets() {
    let rx = Receiver::start();
    let hb = start(&rx);
    let id = post(&hb, "order.created", json!({"id": "o-7", "total": 12.5}));
    hb.wait_status(&id, "completed", WAIT);
    let got = rx.wait_for(2, WAIT);
    let shaped = got
        .iter()
        .find(|r| r.path.starts_with("/reshaped"))
        .expect("reshaped");
    assert_eq!(shaped.method, "PUT");
    assert_eq!(shaped.path, "/reshaped/orders/o-7");
    assert_eq!(shaped.header("x-tenant"), Some("acme"));
    assert_eq!(
        shaped.json(),
        json!({"order_id": "o-7", "amount_cents": 1250})
    );
    assert_eq!(
        shaped.webhook_id(),
        id,
        "hookbox's own headers are still sent"
    );
    let plain = got.iter().find(|r| r.path == "/plain").expect("plain");
    assert_eq!(plain.json()["payload"], json!({"id": "o-7", "total": 12.5}));
    // The attempt history keeps what was actually sent; the console shows it.
    let attempts = hb.get(&format!("/webhooks/{id}/attempts")).unwrap().json();
    let items = attempts["items"].as_array().expect("items");
    let reshaped = items
        .iter()
        .find(|a| a["handler"] == "reshaped")
        .expect("reshaped");
    let sent: Value =
        serde_json::from_str(reshaped["request"].as_str().expect("request")).expect("JSON");
    assert_eq!(sent["method"], "PUT");
    assert!(
        sent["url"]
            .as_str()
            .unwrap()
            .ends_with("/reshaped/orders/o-7"),
        "{sent}"
    );
    assert_eq!(sent["headers"]["x-tenant"], "acme");
    assert_eq!(
        serde_json::from_str::<Value>(sent["body"].as_str().unwrap()).unwrap()["amount_cents"],
        1250
    );
    let plain_attempt = items
        .iter()
        .find(|a| a["handler"] == "plain")
        .expect("plain");
    assert!(
        plain_attempt["request"].is_null(),
        "no transform: the standard request"
    );
    let page = crate::console::get(&hb, &format!("/console/events/{id}"), None).text;
    assert!(
        page.contains("Sent (after its transform)") && page.contains("/reshaped/orders/o-7"),
        "{page}"
    );
}

on_both_backends! {
    fn cancel_completes_without_sending_and_a_throw_dead_letters_with_its_message(db: &Db) {
    let rx = Receiver::start();
    let hb = start_on(&rx, db);
    let skipped = post(&hb, "order.created", json!({"id": "s", "skip": true}));
    let thrown = post(&hb, "order.created", json!({"id": "t", "explode": true}));
    let ev = hb.wait_status(&skipped, "completed", WAIT);
    let attempts = hb.get(&format!("/webhooks/{skipped}/attempts")).unwrap().json();
    let reshaped: Vec<&Value> = attempts["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|a| a["handler"] == "reshaped")
        .collect();
    assert_eq!(reshaped.len(), 1, "{attempts}");
    assert_eq!(reshaped[0]["outcome"], "cancelled", "{ev}");
    let ev = hb.wait_status(&thrown, "failed", WAIT);
    let delivery = ev["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["handler"] == "reshaped")
        .expect("reshaped")
        .clone();
    assert_eq!(delivery["attempts"], 1, "a throw is permanent: {delivery}");
    let error = delivery["last_error"].as_str().expect("last_error");
    assert!(error.contains("cannot reshape order t"), "{error}");
    assert!(rx.requests().iter().all(|r| !r.path.starts_with("/reshaped")), "nothing was sent");
    let metrics = hb.get("/metrics").unwrap().text;
    assert!(
        metrics.contains(r#"hookbox_deliveries_total{handler="reshaped",outcome="cancelled"} 1"#),
        "{metrics}"
    );
    }
}

#[test]
fn an_endless_loop_is_stopped_while_other_deliveries_keep_flowing() {
    let rx = Receiver::start();
    let hb = start(&rx);
    let spin = post(&hb, "order.created", json!({"id": "loop", "spin": true}));
    let started = Instant::now();
    let others: Vec<String> = (0..20)
        .map(|n| {
            post(
                &hb,
                "order.created",
                json!({"id": format!("n{n}"), "total": n}),
            )
        })
        .collect();
    for id in &others {
        hb.wait_status(id, "completed", WAIT);
    }
    let ev = hb.wait_status(&spin, "failed", WAIT);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let text = ev.to_string();
    assert!(text.contains("longer than 100 ms"), "{text}");
}

on_both_backends! {
    /// A subscriber's transform (the source text in the API), kept in the
    /// database; one that does not compile is 422 `invalid_transform`.
    fn a_subscribers_transform_is_stored_and_applied(db: &Db) {
        let rx = Receiver::start();
        let hb = Hookbox::restart(new_dir(), &db.env(&[LOOPBACK]));
        let bad = hb.call(
            "POST",
            "/subscribers",
            Some(&json!({"name": "s", "event_types": ["*"], "url": rx.url, "transform": "function handler(w) {"})),
            &[],
        );
        bad.assert_problem(422, "invalid_transform");
        let source = "function handler(w) { w.payload = {kind: w.event_type}; return w; }";
        let made = hb.call(
            "POST",
            "/subscribers",
            Some(&json!({"name": "s", "event_types": ["*"], "url": format!("{}/s", rx.url), "transform": source})),
            &[],
        );
        assert_eq!(made.status, 201, "{}", made.text);
        assert_eq!(made.json()["transform"], source);
        let id = post(&hb, "thing.done", json!({"x": 1}));
        hb.wait_status(&id, "completed", WAIT);
        assert_eq!(rx.wait_for(1, WAIT)[0].json(), json!({"kind": "thing.done"}));
    }
}

#[test]
fn a_source_transform_renames_types_before_routing_and_its_throw_is_422() {
    let rx = Receiver::start();
    let dir = new_dir();
    write(
        dir.path(),
        "sources/transforms/rename.js",
        "function handler(w) {\n  if (w.payload.bad) throw new Error('bad item');\n  \
         w.event_type = 'shop.' + w.payload.topic.replace('/', '.');\n  \
         w.payload = {id: w.payload.id, seen_header: w.headers['x-shop'] || null};\n  return w;\n}",
    );
    write(
        dir.path(),
        "sources/shop.toml",
        "kind = \"none\"\ntransform = \"transforms/rename.js\"\n",
    );
    http_manifest(
        dir.path(),
        "orders",
        r#"["shop.orders.create"]"#,
        &format!("{}/o", rx.url),
        "",
        "",
    );
    let hb = start_with_sources(dir);
    let r = hb.post_raw(
        "/ingest/shop",
        r#"{"type": "ignored", "topic": "orders/create", "id": "p-1"}"#,
        "application/json",
        &[("x-shop", "s1"), ("idempotency-key", "d-1")],
    );
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["event_type"], "shop.orders.create");
    let got = rx.wait_for(1, WAIT);
    assert_eq!(
        got[0].json()["payload"],
        json!({"id": "p-1", "seen_header": "s1"})
    );
    let bad = hb.post_raw(
        "/ingest/shop",
        r#"{"type": "x", "topic": "a/b", "bad": true}"#,
        "application/json",
        &[("idempotency-key", "d-2")],
    );
    bad.assert_problem(422, "transform_failed");
    assert!(bad.text.contains("bad item"), "{}", bad.text);
    let log = hb.get("/sources/shop/rejected").unwrap().json();
    assert_eq!(log["items"][0]["code"], "transform_failed", "{log}");
}

/// A transform that leaves the payload alone keeps it as it was sent, although
/// JavaScript's numbers are doubles (`12.50` comes back as `12.5`, `1.0` as `1`,
/// an integer past 2^53 rounded): a source's transform that only renames the
/// type stores the payload a source without one stores, and a destination's that
/// only adds a header posts the body it would post without one (SPEC §12).
#[test]
fn a_transform_that_leaves_the_payload_alone_keeps_its_numbers() {
    let rx = Receiver::start();
    let dir = new_dir();
    write(
        dir.path(),
        "sources/transforms/rename.js",
        "function handler(w) { w.event_type = 'num.renamed'; return w; }",
    );
    write(
        dir.path(),
        "sources/renamed.toml",
        "kind = \"none\"\ntransform = \"transforms/rename.js\"\n",
    );
    write(dir.path(), "sources/plain.toml", "kind = \"none\"\n");
    write(
        dir.path(),
        "handlers/transforms/tenant.js",
        "function handler(w) { w.headers['x-tenant'] = 'acme'; return w; }",
    );
    http_manifest(
        dir.path(),
        "bare",
        r#"["*"]"#,
        &format!("{}/bare", rx.url),
        "",
        "",
    );
    http_manifest(
        dir.path(),
        "tenant",
        r#"["*"]"#,
        &format!("{}/tenant", rx.url),
        "transform = \"transforms/tenant.js\"",
        "",
    );
    let hb = start_with_sources(dir);
    let body =
        r#"{"type": "num.plain", "price": 12.50, "one": 1.0, "e": 1e2, "big": 9007199254740993}"#;
    for (source, key) in [("plain", "k-1"), ("renamed", "k-2")] {
        let r = hb.post_raw(
            &format!("/ingest/{source}"),
            body,
            "application/json",
            &[("idempotency-key", key)],
        );
        assert_eq!(r.status, 202, "{source}: {}", r.text);
    }
    let got = rx.wait_for(4, WAIT);
    let payload = |b: &[u8]| {
        let text = String::from_utf8_lossy(b).into_owned();
        let start = text.find("\"payload\":").expect("payload") + 10;
        let end = text.rfind(",\"created_at\"").expect("created_at");
        text[start..end].to_owned()
    };
    let sent: Vec<String> = got.iter().map(|r| payload(&r.body)).collect();
    assert!(
        sent[0].contains("12.50") && sent[0].contains("9007199254740993"),
        "{sent:?}"
    );
    for other in &sent[1..] {
        assert_eq!(other, &sent[0], "every copy as sent: {sent:?}");
    }
    let tenant = got.iter().find(|r| r.path == "/tenant").expect("tenant's");
    assert_eq!(tenant.header("x-tenant"), Some("acme"));
}

#[test]
fn the_test_route_answers_what_would_be_sent_and_sends_nothing() {
    let rx = Receiver::start();
    let hb = start(&rx);
    let try_it = |body: Value| hb.call("POST", "/destinations/reshaped/test", Some(&body), &[]);
    let r = try_it(json!({"event_type": "order.created", "payload": {"id": "z", "total": 2}}));
    assert_eq!(r.status, 200, "{}", r.text);
    let a = r.json();
    assert_eq!(a["matched"], true);
    assert_eq!(a["cancelled"], false);
    assert!(a["error"].is_null());
    assert_eq!(a["request"]["method"], "PUT");
    assert!(
        a["request"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/reshaped/orders/z"),
        "{a}"
    );
    assert_eq!(
        a["request"]["payload"],
        json!({"order_id": "z", "amount_cents": 200})
    );
    assert_eq!(a["request"]["headers"]["x-tenant"], "acme");
    let a = try_it(json!({"event_type": "order.created", "payload": {"skip": true}})).json();
    assert_eq!(
        (a["matched"].clone(), a["cancelled"].clone()),
        (json!(true), json!(true))
    );
    assert!(a["request"].is_null());
    let a = try_it(json!({"event_type": "order.created", "payload": {"id": "q", "explode": true}}))
        .json();
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("cannot reshape order q"),
        "{a}"
    );
    let a = try_it(json!({"event_type": "invoice.paid", "payload": {}})).json();
    assert_eq!(a["matched"], false);
    // A stored event by its id.
    let id = post(&hb, "order.created", json!({"id": "st", "total": 1}));
    hb.wait_status(&id, "completed", WAIT);
    let before = rx.requests().len();
    let a = try_it(json!({"event_id": id})).json();
    assert_eq!(a["request"]["payload"]["order_id"], "st", "{a}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rx.requests().len(), before, "the test route sent nothing");
    try_it(json!({"event_id": uuid::Uuid::now_v7()})).assert_problem(404, "not_found");
    hb.call(
        "POST",
        "/destinations/nope/test",
        Some(&json!({"event_type": "a"})),
        &[],
    )
    .assert_problem(404, "not_found");
    try_it(json!({"bogus": 1})).assert_problem(400, "invalid_body");
    // A subscriber: its transform's URL passes the guard as a delivery's would,
    // and it is matched only while it is active (routed).
    let sneaky =
        "function handler(w) { w.url = 'http://169.254.169.254/latest/meta-data'; return w; }";
    let sub =
        json!({"name": "sneaky", "event_types": ["audit.*"], "url": rx.url, "transform": sneaky});
    let r = hb.call("POST", "/subscribers", Some(&sub), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let probe = json!({"event_type": "audit.read", "payload": {}});
    let test_sneaky = || {
        hb.call("POST", "/destinations/sneaky/test", Some(&probe), &[])
            .json()
    };
    let a = test_sneaky();
    assert_eq!(a["matched"], true, "{a}");
    assert!(a["request"].is_null(), "{a}");
    assert!(
        a["error"].as_str().is_some_and(|e| e.contains("refused")),
        "{a}"
    );
    let off = json!({"active": false});
    let r = hb.call("PATCH", "/subscribers/sneaky", Some(&off), &[]);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        test_sneaky()["matched"],
        false,
        "an inactive subscriber is not routed"
    );
}

#[test]
fn a_transform_that_does_not_compile_is_reported_with_its_line() {
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/transforms/broken.js",
        "function handler(w) {\n  return w +;\n}\n",
    );
    http_manifest(
        dir.path(),
        "broken",
        r#"["*"]"#,
        "http://127.0.0.1:9/",
        "transform = \"transforms/broken.js\"",
        "",
    );
    let out = crate::harness::hookbox_in(dir.path())
        .args(["handlers", "check"])
        .arg(dir.path().join("handlers"))
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("broken.toml: transform: transforms/broken.js")
            && stdout.contains("line 2"),
        "{stdout}"
    );
    let handlers = dir.path().join("handlers");
    let env = [("HANDLERS_DIR", handlers.to_str().expect("utf-8"))];
    let (code, stderr) = crate::config::run_with(&env, dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("transform") && stderr.contains("line 2"),
        "{stderr}"
    );
}

/// The destination's console page tries an ad-hoc event with a form (with
/// `csrf`) and shows what would be sent beside it; nothing is sent.
#[test]
fn the_console_tries_an_event_on_a_destination() {
    let rx = Receiver::start();
    let hb = start(&rx);
    let page = crate::console::get(&hb, "/console/destinations/reshaped", None);
    assert_eq!(page.status, 200, "{}", page.text);
    let token = crate::console::csrf_in(&page.text);
    let set = page.header("set-cookie").expect("a session cookie");
    let cookie = set.split(';').next().expect("pair").to_owned();
    let tried = crate::console::post_form(
        &hb,
        "/console/destinations/reshaped/test",
        Some(&cookie),
        &[
            ("csrf", &token),
            ("event_type", "order.created"),
            ("payload", r#"{"id": "c-1", "total": 3}"#),
        ],
    );
    assert_eq!(tried.status, 200, "{}", tried.text);
    assert!(
        tried.text.contains("Would send") && tried.text.contains("amount_cents"),
        "{}",
        tried.text
    );
    assert!(
        tried.text.contains("/reshaped/orders/c-1"),
        "{}",
        tried.text
    );
    let forged = crate::console::post_form(
        &hb,
        "/console/destinations/reshaped/test",
        Some(&cookie),
        &[("csrf", "forged"), ("event_type", "order.created")],
    );
    assert_eq!(forged.status, 403);
    std::thread::sleep(Duration::from_millis(200));
    assert!(rx.requests().is_empty(), "nothing was sent");
}
