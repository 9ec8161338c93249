//! The attempt history (`GET /webhooks/{id}/attempts`, docs/api.md): every attempt
//! of every delivery, oldest first, with a real receiver on 127.0.0.1 that fails in
//! different ways, a real exec handler, and retention deleting the history with its
//! event — on SQLite and on PostgreSQL.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::harness::{
    Db, Hookbox, eventually, exec_manifest, http_manifest, new_dir, on_both_backends, script, write,
};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(30);
const LOOPBACK: (&str, &str) = ("ALLOWED_TARGETS", "127.0.0.0/8");

fn post(hb: &Hookbox, event_type: &str) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": {"n": 1}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

/// The attempt history of an event (asserting a 200).
fn attempts(hb: &Hookbox, id: &str) -> Vec<Value> {
    let r = hb.get(&format!("/webhooks/{id}/attempts")).expect("get");
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(1),
        "only items: {body}"
    );
    body["items"].as_array().expect("items").clone()
}

/// The number of rows of the attempts table, read from the database itself.
fn stored_rows(db: &Db, hb: &Hookbox) -> i64 {
    if db.is_postgres() {
        return db.scalar("SELECT count(*) FROM attempts");
    }
    let path = hb.dir.path().join("events.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        use sqlx::{ConnectOptions, Connection};
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .read_only(true)
            .connect()
            .await
            .expect("open the SQLite file");
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts")
            .fetch_one(&mut conn)
            .await
            .expect("count");
        let _ = conn.close().await;
        n
    })
}

/// Every field of an attempt, and nothing else.
fn assert_shape(a: &Value) {
    let mut keys: Vec<&str> = a
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "attempt",
            "duration_ms",
            "error",
            "handler",
            "outcome",
            "response_body",
            "response_status",
            "started_at"
        ],
        "{a}"
    );
    let started = a["started_at"].as_str().expect("started_at");
    assert!(
        started.len() == 24 && started.ends_with('Z') && started.as_bytes()[19] == b'.',
        "RFC 3339 UTC with milliseconds: {started}"
    );
    assert!(a["duration_ms"].is_u64(), "{a}");
}

on_both_backends! {
fn a_500_a_timeout_then_a_200_are_three_attempts_oldest_first(db: &Db) {
    let receiver = Receiver::start();
    let long_body = format!("boom: {}", "x".repeat(3000));
    receiver
        .then(Answer::status(500).body(long_body))
        .then(Answer::status(200).after(Duration::from_secs(3)))
        .then(Answer::status(200).body("ok"));
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "flaky",
        r#"["order.*"]"#,
        &format!("{}/hook", receiver.url),
        "timeout = \"1s\"\nbackoff = [\"100ms\"]\nmax_attempts = 5",
        "",
    );
    let hb = Hookbox::restart(dir, &db.env(&[LOOPBACK]));
    let id = post(&hb, "order.created");
    hb.wait_status(&id, "completed", WAIT);
    let items = attempts(&hb, &id);
    assert_eq!(items.len(), 3, "{items:#?}");
    for a in &items {
        assert_shape(a);
        assert_eq!(a["handler"], "flaky");
    }
    let numbers: Vec<_> = items.iter().map(|a| a["attempt"].as_u64()).collect();
    assert_eq!(numbers, [Some(1), Some(2), Some(3)]);
    let outcomes: Vec<_> = items.iter().map(|a| a["outcome"].as_str()).collect();
    assert_eq!(outcomes, [Some("retry"), Some("retry"), Some("completed")]);
    let started: Vec<&str> = items.iter().map(|a| a["started_at"].as_str().expect("t")).collect();
    assert!(started.windows(2).all(|w| w[0] <= w[1]), "oldest first: {started:?}");

    // The 500: its status, and the start of its body, cut to 1 KB.
    assert_eq!(items[0]["response_status"], 500);
    let error = items[0]["error"].as_str().expect("error");
    assert!(error.starts_with("HTTP 500: boom: xxx"), "{error}");
    assert!(error.len() <= 1024, "{} bytes", error.len());
    // The timeout: no answer, no status; it ran for the handler's timeout.
    assert_eq!(items[1]["response_status"], Value::Null);
    assert!(
        items[1]["error"].as_str().expect("error").contains("timed out after 1s"),
        "{}",
        items[1]
    );
    let waited = items[1]["duration_ms"].as_u64().expect("duration");
    assert!((900..3000).contains(&waited), "{waited} ms");
    assert!(
        items[0]["response_body"].as_str().expect("body").starts_with("boom: xxx"),
        "{}",
        items[0]
    );
    assert_eq!(items[1]["response_body"], Value::Null);
    // The success, with what the receiver said.
    assert_eq!(items[2]["response_status"], 200);
    assert_eq!(items[2]["response_body"], "ok");
    assert_eq!(items[2]["error"], Value::Null);
    assert_eq!(stored_rows(db, &hb), 3);
}
}

on_both_backends! {
fn a_4xx_dead_letters_after_one_attempt_without_showing_credentials(db: &Db) {
    let receiver = Receiver::start();
    let basic = STANDARD.encode("hook-user:hook-password");
    receiver.set_default(Answer::status(422).body(format!(
        "refused http://hook-user:hook-password@127.0.0.1/hook (Authorization: Basic {basic})"
    )));
    let dir = new_dir();
    let url = format!(
        "http://hook-user:hook-password@127.0.0.1:{}/hook",
        receiver.port
    );
    http_manifest(dir.path(), "strict", r#"["order.*"]"#, &url, "max_attempts = 5", "");
    let hb = Hookbox::restart(dir, &db.env(&[LOOPBACK]));
    let id = post(&hb, "order.created");
    hb.wait_status(&id, "failed", WAIT);
    let items = attempts(&hb, &id);
    assert_eq!(items.len(), 1, "{items:#?}");
    let a = &items[0];
    assert_shape(a);
    assert_eq!(a["attempt"], 1);
    assert_eq!(a["outcome"], "dead_letter");
    assert_eq!(a["response_status"], 422);
    let error = a["error"].as_str().expect("error");
    assert!(error.starts_with("HTTP 422: refused http://127.0.0.1/hook"), "{error}");
    let said = a["response_body"].as_str().expect("response_body");
    assert!(said.starts_with("refused http://127.0.0.1/hook"), "{said}");
    for secret in ["hook-password", "hook-user", basic.as_str()] {
        assert!(!error.contains(secret), "{secret} shown: {error}");
        assert!(!said.contains(secret), "{secret} shown: {said}");
    }
    assert_eq!(receiver.count(), 1);
}
}

on_both_backends! {
fn exec_attempts_keep_stderr_without_the_values_of_their_variables(db: &Db) {
    let dir = new_dir();
    let s = script(
        dir.path(),
        "flaky.sh",
        "if [ \"$HOOKBOX_ATTEMPT\" -lt 2 ]; then \
           echo \"cannot reach $LEDGER_URL with $LEDGER_KEY\" >&2; exit 3; fi",
    );
    write(
        dir.path(),
        "handlers/ledger.toml",
        &format!(
            "event_types = [\"ledger.*\"]\nkind = \"exec\"\nbackoff = [\"50ms\"]\n\
             [exec]\ncommand = [\"{}\"]\nenv = [\"LEDGER_URL\", \"LEDGER_KEY\"]\n",
            s.display()
        ),
    );
    let env = db.env(&[
        ("LEDGER_URL", "https://svc:pa55word@ledger.internal/v1"),
        ("LEDGER_KEY", "key-0123456789"),
    ]);
    let hb = Hookbox::restart(dir, &env);
    let id = post(&hb, "ledger.entry");
    hb.wait_status(&id, "completed", WAIT);
    let items = attempts(&hb, &id);
    assert_eq!(items.len(), 2, "{items:#?}");
    for a in &items {
        assert_shape(a);
        assert_eq!(a["handler"], "ledger");
        assert_eq!(a["response_status"], Value::Null, "no HTTP for exec");
    }
    assert_eq!(items[0]["outcome"], "retry");
    let error = items[0]["error"].as_str().expect("error");
    assert!(error.starts_with("exit code 3: cannot reach "), "{error}");
    for secret in ["pa55word", "key-0123456789", "svc:"] {
        assert!(!error.contains(secret), "{secret} shown: {error}");
    }
    assert_eq!(items[1]["outcome"], "completed");
    assert_eq!(items[1]["error"], Value::Null);
}
}

/// A program that prints credentials of its own (a bearer token, `password=`) and
/// pages of output: the attempt's `error`, the delivery's, the event's and the
/// destination's `last_error` show neither, and none is over 1 KB.
#[test]
fn printed_credentials_are_stripped_and_every_error_is_bounded() {
    let dir = new_dir();
    let s = script(
        dir.path(),
        "noisy.sh",
        "echo 'Authorization: Bearer sk_live_abcdef123456 password=hunter2' >&2; \
         head -c 1500 /dev/zero | tr '\\0' x >&2; exit 1",
    );
    exec_manifest(dir.path(), "noisy", r#"["noisy"]"#, &s, "max_attempts = 1");
    let hb = Hookbox::restart(dir, &[]);
    let id = post(&hb, "noisy");
    let ev = hb.wait_status(&id, "failed", WAIT);
    let items = attempts(&hb, &id);
    let destination = hb.call("GET", "/destinations/noisy", None, &[]).json();
    let shown = [
        destination["last_error"]
            .as_str()
            .expect("the destination's last_error")
            .to_owned(),
        items[0]["error"].as_str().expect("error").to_owned(),
        ev["last_error"].as_str().expect("last_error").to_owned(),
        ev["deliveries"][0]["last_error"]
            .as_str()
            .expect("delivery's last_error")
            .to_owned(),
    ];
    for text in &shown {
        assert!(text.len() <= 1024, "{} bytes", text.len());
        for secret in ["sk_live_abcdef123456", "hunter2"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
    }
}

on_both_backends! {
fn retention_deletes_the_attempts_with_their_event(db: &Db) {
    let dir = new_dir();
    let s = script(dir.path(), "fail-once.sh", "[ \"$HOOKBOX_ATTEMPT\" -ge 2 ] || exit 1");
    exec_manifest(dir.path(), "once", r#"["once"]"#, &s, "backoff = [\"20ms\"]");
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let id = post(&hb, "once");
    hb.wait_status(&id, "completed", WAIT);
    assert_eq!(attempts(&hb, &id).len(), 2);
    assert_eq!(stored_rows(db, &hb), 2);
    // The same database, now with a retention of zero days, run every 0.72 s.
    let retention = [("RETENTION_DAYS", "0"), ("CLEANUP_INTERVAL_HOURS", "0.0002")];
    let hb = Hookbox::restart(hb.kill9(), &db.env(&retention));
    eventually(WAIT, "retention", || {
        let r = hb.get(&format!("/webhooks/{id}")).ok()?;
        (r.status == 404).then_some(())
    });
    hb.get(&format!("/webhooks/{id}/attempts"))
        .expect("get")
        .assert_problem(404, "not_found");
    assert_eq!(stored_rows(db, &hb), 0, "attempts outlived their event");
}
}

#[test]
fn unknown_and_malformed_ids_are_404_and_400() {
    let hb = Hookbox::start(&[]);
    hb.get(&format!("/webhooks/{}/attempts", uuid::Uuid::now_v7()))
        .expect("get")
        .assert_problem(404, "not_found");
    hb.get("/webhooks/not-a-uuid/attempts")
        .expect("get")
        .assert_problem(400, "invalid_id");
    // A known event nothing was tried on yet: an empty history.
    let id = post(&hb, "nobody.listens");
    hb.wait_status(&id, "completed", WAIT);
    assert!(attempts(&hb, &id).is_empty());
}
