//! The admin routes and the console against other web pages and guessers (SPEC
//! §2), on the real binary over real sockets. Before these checks, a page the
//! operator visited could create a subscriber with a `text/plain` POST, a
//! re-pointed name could read `/dead-letters` (DNS rebinding), and ~16,900 wrong
//! tokens a second were answered from one connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, client};

/// One raw request (so `Host` and `Origin` are exactly what the test says); the
/// status code of the answer.
fn raw(hb: &Hookbox, head: &str, body: &str) -> u16 {
    let addr = hb.url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let req = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

fn subscribers(hb: &Hookbox) -> usize {
    hb.get("/subscribers").unwrap().json()["items"]
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn other_pages_cannot_drive_the_admin_api_without_a_token() {
    let hb = Hookbox::start(&[("ALLOWED_HOSTS", "hooks.internal")]);
    let addr = hb.url.trim_start_matches("http://").to_owned();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let body =
        json!({"name": "evil", "event_types": ["*"], "url": "https://evil.example/x"}).to_string();
    // A page elsewhere posting text/plain (a "simple" cross-site request).
    let head = format!("POST /subscribers HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain");
    assert_eq!(raw(&hb, &head, &body), 415);
    let head = format!(
        "POST /subscribers HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nOrigin: https://evil.example"
    );
    assert_eq!(raw(&hb, &head, &body), 403);
    let head = format!(
        "POST /subscribers HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nOrigin: null"
    );
    assert_eq!(raw(&hb, &head, &body), 403);
    assert_eq!(subscribers(&hb), 0, "nothing was created");
    // DNS rebinding: a name of the attacker's now pointing at 127.0.0.1.
    let head = format!("GET /dead-letters HTTP/1.1\r\nHost: rebound.evil.example:{port}");
    assert_eq!(raw(&hb, &head, ""), 421);
    let head = format!("GET /console HTTP/1.1\r\nHost: rebound.evil.example:{port}");
    assert_eq!(raw(&hb, &head, ""), 421);
    // The names the operator allowed, and loopback, are served.
    let head = format!("GET /dead-letters HTTP/1.1\r\nHost: hooks.internal:{port}");
    assert_eq!(raw(&hb, &head, ""), 200);
    let head = format!("GET /dead-letters HTTP/1.1\r\nHost: localhost:{port}");
    assert_eq!(raw(&hb, &head, ""), 200);
    // The listing is an admin route on an open path: the same checks. A key's
    // lookup stays open (a sender checks on its event from anywhere).
    let head =
        format!("GET /webhooks?status=completed HTTP/1.1\r\nHost: rebound.evil.example:{port}");
    assert_eq!(raw(&hb, &head, ""), 421);
    let head =
        format!("GET /webhooks?limit=1 HTTP/1.1\r\nHost: {addr}\r\nOrigin: https://evil.example");
    assert_eq!(raw(&hb, &head, ""), 403);
    let head = format!("GET /webhooks?limit=1 HTTP/1.1\r\nHost: localhost:{port}");
    assert_eq!(raw(&hb, &head, ""), 200);
    let head =
        format!("GET /webhooks?idempotency_key=k HTTP/1.1\r\nHost: rebound.evil.example:{port}");
    assert_eq!(raw(&hb, &head, ""), 404);
    // Its own origin, JSON: works.
    let head = format!(
        "POST /subscribers HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nOrigin: http://{addr}"
    );
    assert_eq!(
        raw(
            &hb,
            &head,
            &body.replace("https://evil.example/x", "https://93.184.215.14/x")
        ),
        201
    );
    // Intake is not an admin route: senders post from anywhere.
    let head = format!(
        "POST /webhooks HTTP/1.1\r\nHost: rebound.evil.example:{port}\r\nContent-Type: application/json\r\nOrigin: https://evil.example"
    );
    assert_eq!(
        raw(&hb, &head, r#"{"event_type": "a.b", "payload": {}}"#),
        202
    );
}

#[test]
fn wrong_tokens_and_logins_are_throttled_per_address() {
    let token = "the-right-admin-token-0123";
    let hb = Hookbox::start(&[("ADMIN_TOKEN", token)]);
    let c = client();
    let get = |auth: &str| {
        c.get(format!("{}/dead-letters", hb.url))
            .header("authorization", auth)
            .send()
            .expect("get")
    };
    for _ in 0..20 {
        assert_eq!(get("Bearer wrong-token-guess-000000").status(), 403);
    }
    let throttled = get("Bearer wrong-token-guess-000000");
    assert_eq!(throttled.status(), 429);
    let after: u64 = throttled.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&after), "{after}");
    assert_eq!(
        get(&format!("Bearer {token}")).status(),
        429,
        "until the minute is over"
    );
    let login = c
        .post(format!("{}/console/login", hb.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=another-guess-00000000")
        .send()
        .expect("login");
    assert_eq!(
        login.status(),
        429,
        "failed logins count in the same window"
    );
}

/// Wrong tokens count wherever a token is read: on the listing and the attempts
/// (open paths with admin reads), on `/metrics` when it is not public, and on
/// the open reads, whose full view would otherwise tell the right token from a
/// wrong one, unthrottled.
#[test]
fn wrong_tokens_on_open_paths_are_throttled_too() {
    let token = "the-right-admin-token-0123";
    let hb = Hookbox::start(&[("ADMIN_TOKEN", token), ("METRICS_PUBLIC", "false")]);
    let r = hb.post(&json!({"event_type": "a.b", "payload": {}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let paths = [
        "/metrics".to_owned(),
        "/webhooks?limit=1".to_owned(),
        format!("/webhooks/{id}/attempts"),
        format!("/webhooks/{id}"),
        "/webhooks?idempotency_key=k".to_owned(),
    ];
    let wrong = [("authorization", "Bearer wrong-token-guess-000000")];
    for n in 0..20 {
        let r = hb.call("GET", &paths[n % paths.len()], None, &wrong);
        assert!(
            matches!(r.status, 200 | 403 | 404),
            "{}: {}",
            r.status,
            r.text
        );
    }
    for path in &paths {
        let r = hb.call("GET", path, None, &wrong);
        assert_eq!(r.status, 429, "{path}: {}", r.text);
    }
    // No token at all is not a guess: the open read still answers.
    let open = hb.get(&format!("/webhooks/{id}")).unwrap();
    assert_eq!(open.status, 200, "{}", open.text);
}

/// With `ADMIN_TOKEN` set, open reads show status, not content: before, looking
/// up `ledger:1` … `ledger:59` without a token found every pulled event with its
/// receivers' error bodies and attempt history.
#[test]
fn open_reads_show_status_not_content_without_the_token() {
    let token = "the-right-admin-token-0123";
    let dir = crate::harness::new_dir();
    let fail = crate::harness::script(
        dir.path(),
        "fail.sh",
        "echo 'secret-ish receiver answer' >&2; exit 65",
    );
    crate::harness::exec_manifest(dir.path(), "failer", r#"["lan.*"]"#, &fail, "");
    crate::harness::write(dir.path(), "sources/lan.toml", "kind = \"none\"\n");
    let sources = dir
        .path()
        .join("sources")
        .to_str()
        .expect("utf-8")
        .to_owned();
    let hb = Hookbox::restart(dir, &[("ADMIN_TOKEN", token), ("SOURCES_DIR", &sources)]);
    let r = hb.post_raw(
        "/ingest/lan",
        r#"{"type": "thing"}"#,
        "application/json",
        &[("idempotency-key", "d-1")],
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    hb.wait_status(&id, "failed", Duration::from_secs(20));
    let auth = format!("Bearer {token}");
    let open = hb.get(&format!("/webhooks/{id}")).unwrap();
    assert_eq!(open.json()["status"], "failed", "the status is shown");
    assert!(!open.text.contains("secret-ish"), "{}", open.text);
    let full = hb.call(
        "GET",
        &format!("/webhooks/{id}"),
        None,
        &[("authorization", &auth)],
    );
    assert!(full.text.contains("secret-ish"), "{}", full.text);
    hb.get(&format!("/webhooks/{id}/attempts"))
        .unwrap()
        .assert_problem(401, "unauthorized");
    let attempts = hb.call(
        "GET",
        &format!("/webhooks/{id}/attempts"),
        None,
        &[("authorization", &auth)],
    );
    assert_eq!(attempts.status, 200);
    let key = full.json()["idempotency_key"]
        .as_str()
        .expect("key")
        .to_owned();
    assert!(key.starts_with("lan:"), "{key}");
    let lookup = format!("/webhooks?idempotency_key={key}");
    hb.get(&lookup).unwrap().assert_problem(404, "not_found");
    let by_key = hb.call("GET", &lookup, None, &[("authorization", &auth)]);
    assert_eq!(by_key.json()["id"], id.as_str(), "{}", by_key.text);
}
