//! Destinations: every handler has its own lane. A slow, silent, hung or
//! rate-limited destination delays only its own deliveries; `max_in_flight`,
//! `Retry-After` and the operator's pause hold at the receiver.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    Hookbox, eventually, exec_manifest, http_manifest, new_dir, on_both_backends, script,
};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(30);

fn event(event_type: &str, n: usize) -> Value {
    json!({"event_type": event_type, "payload": {"n": n}})
}

/// Accepts connections and never answers; keeps them open until dropped.
struct Silent {
    url: String,
    _listener: std::thread::JoinHandle<()>,
}

impl Silent {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let thread = std::thread::spawn(move || {
            let mut open = Vec::new();
            for conn in listener.incoming().flatten() {
                open.push(conn); // held, never answered
            }
        });
        Self {
            url,
            _listener: thread,
        }
    }
}

on_both_backends! {
/// The scenario of docs/handlers.md: ten destinations that answer after 2 s with
/// 1,000 deliveries waiting each (more than the window of due work holds), one
/// that never answers and an exec handler that hangs: a new event for another
/// destination is still delivered at once.
fn a_slow_destination_delays_only_its_own_deliveries(db: &Db) {
    const SLOW: usize = 10;
    const EACH: usize = 1000;
    let dir = new_dir();
    let slow: Vec<Receiver> = (0..SLOW).map(|_| Receiver::start()).collect();
    for (n, r) in slow.iter().enumerate() {
        r.set_default(Answer::status(200).after(Duration::from_secs(2)));
        http_manifest(dir.path(), &format!("slow-{n}"), &format!("[\"slow.{n}\"]"), &r.url, "", "");
    }
    let silent = Silent::start();
    http_manifest(dir.path(), "silent", "[\"silent\"]", &silent.url, "timeout = \"60s\"", "");
    let hang = script(dir.path(), "hang.sh", "sleep 60");
    exec_manifest(dir.path(), "hung", "[\"hung\"]", &hang, "timeout = \"60s\"");
    let fast = Receiver::start();
    http_manifest(dir.path(), "fast", "[\"fast\"]", &fast.url, "", "");
    let env = [("ALLOWED_TARGETS", "127.0.0.0/8")];
    let hb = Hookbox::restart(dir, &db.env(&env));
    // The backlog, posted from eight threads.
    let total = SLOW * EACH + 2 * 40;
    std::thread::scope(|s| {
        for t in 0..8 {
            let url = &hb.url;
            s.spawn(move || {
                for n in (t..total).step_by(8) {
                    let kind = if n < SLOW * EACH {
                        format!("slow.{}", n % SLOW)
                    } else {
                        ["silent", "hung"][n % 2].to_owned()
                    };
                    let (status, body) = crate::harness::post_to(url, &event(&kind, n), None);
                    assert_eq!(status, 202, "{body}");
                }
            });
        }
    });
    // Let the slow ones take every place they may.
    eventually(WAIT, "the slow receivers to be busy", || {
        slow.iter().all(|r| r.count() >= 8).then_some(())
    });
    for n in 0..5 {
        let posted = Instant::now();
        let r = hb.post(&event("fast", n), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
        fast.wait_for(n + 1, WAIT);
        let took = posted.elapsed();
        assert!(took < Duration::from_secs(1), "delivery {n} took {took:?} behind the slow ones");
    }
    // Each slow destination never ran more than its max_in_flight (8) at once.
    for r in &slow {
        let arrived: Vec<Instant> = r.requests().iter().map(|q| q.at).collect();
        for (i, t) in arrived.iter().enumerate() {
            let overlapping = arrived[i..].iter().filter(|u| **u < *t + Duration::from_millis(1500)).count();
            assert!(overlapping <= 8, "{overlapping} attempts at once");
        }
    }
    let list = hb.call("GET", "/destinations", None, &[]).json();
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), SLOW + 3, "{list}");
    let slow0 = items.iter().find(|d| d["name"] == "slow-0").expect("slow-0");
    assert_eq!(slow0["max_in_flight"], 8, "{slow0}");
    assert_eq!(slow0["state"], "healthy", "{slow0}");
    assert!(slow0["pending"].as_u64().expect("pending") > 900, "{slow0}");
}
}

on_both_backends! {
/// `max_in_flight = 2`: never more than two attempts at once at the receiver.
fn max_in_flight_holds_at_the_receiver(db: &Db) {
    let dir = new_dir();
    let r = Receiver::start();
    r.set_default(Answer::status(200).after(Duration::from_millis(400)));
    http_manifest(dir.path(), "two", "[\"t\"]", &r.url, "max_in_flight = 2", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    for n in 0..8 {
        assert_eq!(hb.post(&event("t", n), &[]).status, 202);
    }
    let got = r.wait_for(8, WAIT);
    let arrived: Vec<Instant> = got.iter().map(|q| q.at).collect();
    for (i, t) in arrived.iter().enumerate() {
        let at_once = arrived[i..].iter().filter(|u| **u < *t + Duration::from_millis(350)).count();
        assert!(at_once <= 2, "{at_once} attempts within one answer's time");
    }
}
}

on_both_backends! {
/// A 429 with `Retry-After` pauses that destination only: its other deliveries
/// wait without using attempts, another destination goes on.
fn retry_after_pauses_only_its_destination(db: &Db) {
    let dir = new_dir();
    let (asks, other) = (Receiver::start(), Receiver::start());
    asks.then(Answer::status(429).retry_after("3"));
    http_manifest(dir.path(), "asks", "[\"a\"]", &asks.url, "max_in_flight = 1", "");
    http_manifest(dir.path(), "other", "[\"b\"]", &other.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    let ids: Vec<String> = (0..4)
        .map(|n| hb.post(&event("a", n), &[]).json()["id"].as_str().expect("id").to_owned())
        .collect();
    asks.wait_for(1, WAIT);
    let paused = eventually(WAIT, "paused", || {
        let d = hb.call("GET", "/destinations/asks", None, &[]).json();
        (d["state"] == "paused").then_some(d)
    });
    assert!(paused["paused_until"].is_string(), "{paused}");
    for n in 0..3 {
        hb.post(&event("b", n), &[]);
    }
    other.wait_for(3, Duration::from_secs(2));
    assert_eq!(asks.count(), 1, "nothing reaches a paused destination");
    for id in &ids {
        hb.wait_status(id, "completed", WAIT);
    }
    let got = asks.requests();
    assert_eq!(got.len(), 5, "one retry, no attempt burned");
    assert!(got[1].at >= got[0].at + Duration::from_millis(2900), "waited for Retry-After");
}
}

/// The state `hookbox_destination_state` shows as 1 for `destination`.
fn state_metric(hb: &Hookbox, destination: &str) -> String {
    let text = hb.get("/metrics").expect("metrics").text;
    let ones: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hookbox_destination_state{"))
        .filter(|l| l.contains(&format!("destination=\"{destination}\"")))
        .filter(|l| l.ends_with(" 1"))
        .collect();
    assert_eq!(ones.len(), 1, "one state at 1: {ones:?}");
    ones[0]
        .split("state=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_owned()
}

on_both_backends! {
/// An operator's pause holds every delivery (nothing dropped) until resumed.
fn pause_and_resume(db: &Db) {
    let dir = new_dir();
    let r = Receiver::start();
    http_manifest(dir.path(), "billing", "[\"t\"]", &r.url, "rate_limit = \"20/s\"", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    assert_eq!(state_metric(&hb, "billing"), "healthy", "shown from the start");
    let paused = hb.call("POST", "/destinations/billing/pause", Some(&json!({})), &[]);
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.json()["state"], "paused");
    assert_eq!(paused.json()["paused_until"], Value::Null);
    assert_eq!(paused.json()["rate_limit"], "20/s");
    let ids: Vec<String> = (0..5)
        .map(|n| hb.post(&event("t", n), &[]).json()["id"].as_str().expect("id").to_owned())
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(r.count(), 0, "a paused destination gets nothing");
    let d = hb.call("GET", "/destinations/billing", None, &[]).json();
    assert_eq!(d["pending"], 5, "{d}");
    assert_eq!(state_metric(&hb, "billing"), "paused");
    let resumed = hb.call("POST", "/destinations/billing/resume", Some(&json!({})), &[]);
    assert_eq!(resumed.json()["state"], "healthy", "{}", resumed.text);
    for id in &ids {
        hb.wait_status(id, "completed", WAIT);
    }
    assert_eq!(
        hb.call("GET", "/destinations/nope", None, &[]).status,
        404
    );
}
}

#[test]
fn flow_settings_are_checked() {
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "bad",
        "[\"t\"]",
        "https://example.com/h",
        "rate_limit = \"fast\"",
        "",
    );
    let out = crate::harness::hookbox_in(dir.path())
        .env("HANDLERS_DIR", dir.path().join("handlers"))
        .env("DB_PATH", dir.path().join("db.sqlite"))
        .env("BIND_ADDR", "127.0.0.1:0")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rate_limit"), "{stderr}");
    let hb = Hookbox::start(&[]);
    for body in [
        json!({"name": "s", "event_types": ["t"], "url": "https://example.com/h", "max_in_flight": 0}),
        json!({"name": "s", "event_types": ["t"], "url": "https://example.com/h", "rate_limit": "5/d"}),
        json!({"name": "s", "event_types": ["t"], "url": "https://example.com/h", "disable_after": "soon"}),
    ] {
        let r = hb.call("POST", "/subscribers", Some(&body), &[]);
        assert_eq!(r.status, 422, "{body}: {}", r.text);
    }
    let ok = json!({"name": "s", "event_types": ["t"], "url": "https://example.com/h", "max_in_flight": 3, "rate_limit": "600/m"});
    let r = hb.call("POST", "/subscribers", Some(&ok), &[]);
    assert_eq!(r.status, 201, "{}", r.text);
    let d = hb.call("GET", "/destinations/s", None, &[]).json();
    assert_eq!(d["max_in_flight"], 3, "{d}");
    assert_eq!(d["rate_limit"], "600/m", "{d}");
    assert_eq!(
        d["kind"], "http",
        "a subscriber is an http destination: {d}"
    );
}

on_both_backends! {
/// Deliveries that a silent destination holds back (at its `max_in_flight`) or
/// that a paused one keeps are not due work: intake goes on accepting events for
/// others past `QUEUE_MAXSIZE`, until `MAX_BACKLOG`.
fn held_back_work_does_not_fill_the_queue(db: &Db) {
    let dir = new_dir();
    let silent = Silent::start();
    http_manifest(
        dir.path(),
        "silent",
        "[\"silent\"]",
        &silent.url,
        "timeout = \"60s\"",
        "",
    );
    let ok = Receiver::start();
    http_manifest(dir.path(), "ok", "[\"ok\"]", &ok.url, "", "");
    let env = [
        ("ALLOWED_TARGETS", "127.0.0.0/8"),
        ("QUEUE_MAXSIZE", "20"),
        ("MAX_BACKLOG", "60"),
    ];
    let hb = Hookbox::restart(dir, &db.env(&env));
    for n in 0..40 {
        let r = hb.post(&event("silent", n), &[]);
        assert_eq!(r.status, 202, "event {n}: {}", r.text);
        if n == 8 {
            // The destination holds its eight places: what follows waits for it.
            eventually(WAIT, "eight attempts running", || {
                let d = hb.call("GET", "/destinations/silent", None, &[]).json();
                (d["in_flight"] == 8).then_some(())
            });
            std::thread::sleep(Duration::from_millis(300)); // a backlog count
        }
    }
    for n in 0..5 {
        let r = hb.post(&event("ok", n), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
    }
    ok.wait_for(5, WAIT);
    let paused = hb.call("POST", "/destinations/silent/pause", Some(&json!({})), &[]);
    assert_eq!(paused.status, 200, "{}", paused.text);
    let refused = eventually(WAIT, "a 429 at MAX_BACKLOG", || {
        let r = hb.post(&event("silent", 100), &[]);
        (r.status != 202).then_some(r)
    });
    refused.assert_problem(429, "overloaded");
}
}

on_both_backends! {
/// Deliveries behind an older one of their ordering key are not due work (SPEC
/// §1): forty events of one key for a destination that never answers leave one
/// attempt running and thirty-nine waiting, and intake goes on past
/// `QUEUE_MAXSIZE`; events of new keys are due (each key's first can run) and
/// reach the bound.
fn work_behind_its_ordering_key_does_not_fill_the_queue(db: &Db) {
    let dir = new_dir();
    let silent = Silent::start();
    http_manifest(
        dir.path(),
        "ledger",
        "[\"ledger\"]",
        &silent.url,
        "ordering_key = \"/acct\"\ntimeout = \"60s\"\nmax_in_flight = 100",
        "",
    );
    let env = [
        ("ALLOWED_TARGETS", "127.0.0.0/8"),
        ("QUEUE_MAXSIZE", "10"),
        ("MAX_BACKLOG", "1000"),
    ];
    let hb = Hookbox::restart(dir, &db.env(&env));
    let keyed = |acct: &str, n: usize| {
        json!({"event_type": "ledger", "payload": {"acct": acct, "n": n}})
    };
    for n in 0..40 {
        let r = hb.post(&keyed("one", n), &[]);
        assert_eq!(r.status, 202, "event {n} of one key: {}", r.text);
        if n == 0 {
            eventually(WAIT, "the key's first attempt running", || {
                let d = hb.call("GET", "/destinations/ledger", None, &[]).json();
                (d["in_flight"] == 1).then_some(())
            });
        }
    }
    std::thread::sleep(Duration::from_millis(300)); // a backlog count
    for n in 0..5 {
        let r = hb.post(&keyed("one", 100 + n), &[]);
        assert_eq!(r.status, 202, "after a count, event {n}: {}", r.text);
    }
    // After a crash the backlog is counted from the table, keys and all.
    let hb = Hookbox::restart(hb.kill9(), &db.env(&env));
    for n in 0..5 {
        let r = hb.post(&keyed("one", 200 + n), &[]);
        assert_eq!(r.status, 202, "after a restart, event {n}: {}", r.text);
    }
    let refused = eventually(WAIT, "a 429 once new keys' work is due", || {
        let r = hb.post(&keyed(&format!("key-{}", uuid::Uuid::new_v4()), 0), &[]);
        (r.status != 202).then_some(r)
    });
    refused.assert_problem(429, "overloaded");
}
}

on_both_backends! {
/// Retries waiting for their time are not due work (`QUEUE_MAXSIZE` leaves them
/// out) but they are pending deliveries: `MAX_BACKLOG` counts them (SPEC §1).
fn waiting_retries_count_against_max_backlog(db: &Db) {
    let dir = new_dir();
    let down = Receiver::start();
    down.set_default(Answer::status(500));
    http_manifest(
        dir.path(),
        "down",
        "[\"down\"]",
        &down.url,
        "backoff = [\"120s\"]",
        "",
    );
    let env = [
        ("ALLOWED_TARGETS", "127.0.0.0/8"),
        ("QUEUE_MAXSIZE", "100"),
        ("MAX_BACKLOG", "3"),
    ];
    let hb = Hookbox::restart(dir, &db.env(&env));
    // (PostgreSQL's count may briefly count a new delivery twice — intake adds
    // it at once, and a count that read it may land after — so at this tiny
    // bound an event is posted again until accepted.)
    let ids: Vec<String> = (0..3)
        .map(|n| {
            let r = eventually(WAIT, "accepted", || {
                let r = hb.post(&event("down", n), &[]);
                (r.status == 202).then_some(r)
            });
            r.json()["id"].as_str().expect("id").to_owned()
        })
        .collect();
    for id in &ids {
        eventually(WAIT, "its retry scheduled", || {
            let e = hb.call("GET", &format!("/webhooks/{id}"), None, &[]).json();
            let d = &e["deliveries"][0];
            (d["attempts"] == 1 && d["retry_after"].is_string()).then_some(())
        });
    }
    // A count of the waiting retries (both stores count them every 2 s), then
    // the next event is refused at once — before the circuit (10 failures) could
    // hold the destination back and make its new work count for another reason.
    std::thread::sleep(Duration::from_millis(2500));
    let refused = hb.post(&event("down", 100), &[]);
    refused.assert_problem(429, "overloaded");
    // An erased event's waiting retry leaves the count (at the next count).
    let erased = hb.call("DELETE", &format!("/webhooks/{}", ids[0]), None, &[]);
    assert_eq!(erased.status, 204, "{}", erased.text);
    std::thread::sleep(Duration::from_millis(2500));
    let r = hb.post(&event("down", 101), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
}
}

on_both_backends! {
/// Operator events are transitions (SPEC §10): pausing a disabled destination
/// shows `paused` and says so once; a second pause and a resume of a healthy
/// destination store none. Keys are `hookbox:{type}:{destination}:{n}`, `n` a
/// number.
fn operator_events_come_only_from_changes(db: &Db) {
    let dir = new_dir();
    let (gone, watch) = (Receiver::start(), Receiver::start());
    gone.then(Answer::status(410));
    http_manifest(dir.path(), "gone", "[\"g\"]", &gone.url, "", "");
    http_manifest(dir.path(), "watch", "[\"hookbox.*\"]", &watch.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    hb.post(&event("g", 1), &[]);
    watch.wait_for(1, WAIT); // disabled
    let pause = || hb.call("POST", "/destinations/gone/pause", Some(&json!({})), &[]);
    let first = pause();
    assert_eq!(first.json()["state"], "paused", "{}", first.text);
    assert_eq!(first.json()["paused_until"], Value::Null, "{}", first.text);
    assert_eq!(pause().json()["state"], "paused");
    let resume = || hb.call("POST", "/destinations/gone/resume", Some(&json!({})), &[]);
    assert_eq!(resume().json()["state"], "healthy");
    assert_eq!(resume().json()["state"], "healthy");
    watch.wait_for(3, WAIT); // paused, resumed
    // (The watcher runs several attempts at once: the order it gets them in is
    // not the order they were stored in.) What a second pause or resume would
    // have stored comes right after: a moment later, the store has none.
    std::thread::sleep(Duration::from_millis(1500));
    let seen = operator_events(&watch);
    let mut kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "hookbox.destination.disabled",
            "hookbox.destination.paused",
            "hookbox.destination.resumed"
        ],
        "{seen:?}"
    );
    let stored = hb.get("/webhooks?event_type=hookbox.destination.paused").expect("list").json();
    assert_eq!(stored["items"].as_array().map(Vec::len), Some(1), "{stored}");
    let of = |kind: &str| &seen.iter().find(|(k, _)| k == kind).expect("seen").1;
    assert_eq!(of("hookbox.destination.paused")["previous_state"], "disabled");
    assert_eq!(of("hookbox.destination.paused")["state"], "paused");
    assert_eq!(of("hookbox.destination.resumed")["previous_state"], "paused");
    let listed = hb.get("/webhooks?event_type=hookbox.destination.paused").expect("list").json();
    let key = listed["items"][0]["idempotency_key"].as_str().expect("key").to_owned();
    let n = key
        .strip_prefix("hookbox:hookbox.destination.paused:gone:")
        .unwrap_or_else(|| panic!("{key}"));
    assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()), "{key}");
}
}

/// The payloads of the operator events a receiver got, by type.
fn operator_events(r: &Receiver) -> Vec<(String, Value)> {
    r.requests()
        .iter()
        .map(|q| q.json())
        .map(|b| {
            (
                b["event_type"].as_str().unwrap_or("").to_owned(),
                b["payload"].clone(),
            )
        })
        .collect()
}

on_both_backends! {
/// Operator events: a `hookbox.*` handler hears of a destination disabled by
/// `410 Gone`, of an operator's resume and pause, and of a dead letter; never of
/// itself.
fn operator_events_reach_a_hookbox_subscriber(db: &Db) {
    let dir = new_dir();
    let (gone, refuses, watch) = (Receiver::start(), Receiver::start(), Receiver::start());
    gone.then(Answer::status(410));
    refuses.set_default(Answer::status(400));
    http_manifest(dir.path(), "gone", "[\"g\"]", &gone.url, "", "");
    http_manifest(dir.path(), "refuses", "[\"r\"]", &refuses.url, "", "");
    http_manifest(dir.path(), "watch", "[\"hookbox.*\"]", &watch.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    let id = hb.post(&event("g", 1), &[]).json()["id"].as_str().expect("id").to_owned();
    let disabled = eventually(WAIT, "disabled", || {
        let d = hb.call("GET", "/destinations/gone", None, &[]).json();
        (d["state"] == "disabled").then_some(d)
    });
    assert!(disabled["last_error"].as_str().unwrap_or("").contains("410"), "{disabled}");
    watch.wait_for(1, WAIT);
    let (kind, payload) = operator_events(&watch).remove(0);
    assert_eq!(kind, "hookbox.destination.disabled");
    assert_eq!(payload["destination"], "gone");
    assert_eq!(payload["previous_state"], "healthy");
    // Nothing dropped: the delivery waits, and runs once resumed.
    let waiting = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_ne!(waiting["status"], "completed", "{waiting}");
    hb.call("POST", "/destinations/gone/resume", Some(&json!({})), &[]);
    hb.wait_status(&id, "completed", WAIT);
    watch.wait_for(2, WAIT);
    assert_eq!(operator_events(&watch)[1].0, "hookbox.destination.resumed");
    // A dead letter.
    hb.post(&event("r", 1), &[]);
    watch.wait_for(3, WAIT);
    let (kind, payload) = operator_events(&watch).remove(2);
    assert_eq!(kind, "hookbox.delivery.dead_lettered");
    assert_eq!(payload["destination"], "refuses");
    assert_eq!(payload["event_type"], "r");
    assert_eq!(payload["attempts"], 1);
    // Pausing the watcher itself tells others, not it.
    hb.call("POST", "/destinations/watch/pause", Some(&json!({})), &[]);
    hb.call("POST", "/destinations/watch/resume", Some(&json!({})), &[]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(watch.count(), 3, "{:?}", operator_events(&watch));
    let stored = hb.get("/webhooks?status=completed&limit=50").expect("list").json();
    assert!(
        stored["items"].as_array().expect("items").iter().any(|e| e["source"] == "hookbox"),
        "{stored}"
    );
}
}

on_both_backends! {
/// An operator's pause survives a restart; nothing is sent until resumed.
fn a_pause_survives_a_restart(db: &Db) {
    let dir = new_dir();
    let r = Receiver::start();
    http_manifest(dir.path(), "billing", "[\"t\"]", &r.url, "", "");
    let env = db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    let hb = Hookbox::restart(dir, &env);
    hb.call("POST", "/destinations/billing/pause", Some(&json!({})), &[]);
    let id = hb.post(&event("t", 1), &[]).json()["id"].as_str().expect("id").to_owned();
    std::thread::sleep(Duration::from_millis(300));
    let hb = Hookbox::restart(hb.kill9(), &env);
    let d = hb.call("GET", "/destinations/billing", None, &[]).json();
    assert_eq!(d["state"], "paused", "{d}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(r.count(), 0);
    // Restored before the first claim: its work was not taken (SPEC §10).
    let e = hb.call("GET", &format!("/webhooks/{id}"), None, &[]).json();
    assert_eq!(e["deliveries"][0]["status"], "pending", "{e}");
    hb.call("POST", "/destinations/billing/resume", Some(&json!({})), &[]);
    hb.wait_status(&id, "completed", WAIT);
}
}

/// Ten retryable failures in a row open the circuit: its deliveries wait without
/// using attempts while one probe runs at a time; a success closes it.
#[test]
fn the_circuit_opens_and_closes() {
    let dir = new_dir();
    let r = Receiver::start();
    r.set_default(Answer::status(500));
    http_manifest(
        dir.path(),
        "flaky",
        "[\"t\"]",
        &r.url,
        "max_attempts = 50\nbackoff = [\"100ms\"]\nmax_in_flight = 1",
        "",
    );
    let hb = Hookbox::restart(dir, &[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    let ids: Vec<String> = (0..3)
        .map(|n| {
            hb.post(&event("t", n), &[]).json()["id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    let failing = eventually(WAIT, "failing", || {
        let d = hb.call("GET", "/destinations/flaky", None, &[]).json();
        (d["state"] == "failing").then_some(d)
    });
    assert_eq!(failing["consecutive_failures"], 10, "{failing}");
    let at_open = r.count();
    assert_eq!(at_open, 10);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(r.count(), at_open, "nothing before the first probe (5 s)");
    r.set_default(Answer::status(200));
    for id in &ids {
        hb.wait_status(id, "completed", WAIT);
    }
    let d = hb.call("GET", "/destinations/flaky", None, &[]).json();
    assert_eq!(d["state"], "healthy", "{d}");
    assert_eq!(
        r.count(),
        at_open + 3,
        "one probe, then the rest: no attempt burned"
    );
}

/// `disable_after` elapsed while failing disables the destination then, not at
/// a probe that may come minutes later (the first is 5 s after the circuit opens,
/// the limit here 2 s): one probe at the limit, which fails, and `disabled`.
#[test]
fn disable_after_disables_on_time() {
    let dir = new_dir();
    let r = Receiver::start();
    r.set_default(Answer::status(500));
    http_manifest(
        dir.path(),
        "doomed",
        "[\"t\"]",
        &r.url,
        "max_attempts = 50\nbackoff = [\"50ms\"]\nmax_in_flight = 1\ndisable_after = \"2s\"",
        "",
    );
    let hb = Hookbox::restart(dir, &[("ALLOWED_TARGETS", "127.0.0.0/8")]);
    let began = Instant::now();
    for n in 0..3 {
        assert_eq!(hb.post(&event("t", n), &[]).status, 202);
    }
    let disabled = eventually(WAIT, "disabled", || {
        let d = hb.call("GET", "/destinations/doomed", None, &[]).json();
        (d["state"] == "disabled").then_some(began.elapsed())
    });
    assert!(
        disabled < Duration::from_millis(4500),
        "disabled {disabled:?} after the first failure, not by the time disable_after ran out"
    );
    assert_eq!(
        r.count(),
        11,
        "ten failures open the circuit, one probe at the limit"
    );
}

/// Arrivals in the busiest second of `arrived`.
fn busiest_second(arrived: &[Instant]) -> usize {
    arrived
        .iter()
        .map(|t| {
            arrived
                .iter()
                .filter(|u| **u >= *t && **u < *t + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

on_both_backends! {
/// `rate_limit = "10/s"`: starts spread evenly, never more than one over ten in
/// any second at the receiver.
fn a_rate_limit_holds_at_the_receiver(db: &Db) {
    let dir = new_dir();
    let r = Receiver::start();
    http_manifest(dir.path(), "paced", "[\"t\"]", &r.url, "rate_limit = \"10/s\"", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    for n in 0..30 {
        assert_eq!(hb.post(&event("t", n), &[]).status, 202);
    }
    let got = r.wait_for(30, WAIT);
    let arrived: Vec<Instant> = got.iter().map(|q| q.at).collect();
    let busiest = busiest_second(&arrived);
    assert!(busiest <= 11, "{busiest} starts in one second");
    let span = arrived[29].duration_since(arrived[0]);
    assert!(span >= Duration::from_millis(2800), "30 starts in {span:?}");
}
}

/// PostgreSQL: two instances share a destination's limits: `rate_limit = "10/s"`
/// is ten a second in all, not per instance.
#[test]
fn two_instances_share_a_rate_limit() {
    let Some(db) = crate::harness::Db::postgres() else {
        return;
    };
    let dir = new_dir();
    let r = Receiver::start();
    http_manifest(
        dir.path(),
        "paced",
        "[\"t\"]",
        &r.url,
        "rate_limit = \"10/s\"",
        "",
    );
    let start = |name: &'static str| {
        Hookbox::restart(
            dir.clone(),
            &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8"), ("INSTANCE_ID", name)]),
        )
    };
    let (a, b) = (start("node-a"), start("node-b"));
    // Each has counted both (every 2 s).
    std::thread::sleep(Duration::from_millis(2500));
    for n in 0..40 {
        let hb = if n % 2 == 0 { &a } else { &b };
        assert_eq!(hb.post(&event("t", n), &[]).status, 202);
    }
    let got = r.wait_for(40, Duration::from_secs(60));
    let arrived: Vec<Instant> = got.iter().map(|q| q.at).collect();
    let busiest = busiest_second(&arrived);
    assert!(
        busiest <= 12,
        "{busiest} starts in one second from two instances"
    );
}

/// PostgreSQL: an operator's pause on one instance holds on the others as soon as
/// it is answered (the state is kept before the answer and announced with
/// `NOTIFY`), and so does the resume.
#[test]
fn a_pause_holds_on_every_instance() {
    let Some(db) = crate::harness::Db::postgres() else {
        return;
    };
    let dir = new_dir();
    let r = Receiver::start();
    http_manifest(dir.path(), "billing", "[\"t\"]", &r.url, "", "");
    let start = |name: &'static str| {
        Hookbox::restart(
            dir.clone(),
            &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8"), ("INSTANCE_ID", name)]),
        )
    };
    let (a, b) = (start("node-a"), start("node-b"));
    let paused = a.call("POST", "/destinations/billing/pause", Some(&json!({})), &[]);
    assert_eq!(paused.json()["state"], "paused");
    // Not the once-a-second look: the announcement.
    eventually(
        Duration::from_millis(400),
        "paused on the other instance",
        || {
            let d = b.call("GET", "/destinations/billing", None, &[]).json();
            (d["state"] == "paused").then_some(())
        },
    );
    let ids: Vec<String> = (0..6)
        .map(|n| {
            let hb = if n % 2 == 0 { &a } else { &b };
            hb.post(&event("t", n), &[]).json()["id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(r.count(), 0, "no instance delivers to a paused destination");
    for id in &ids {
        let e = a.call("GET", &format!("/webhooks/{id}"), None, &[]).json();
        assert_eq!(
            e["deliveries"][0]["status"], "pending",
            "a paused destination's work waits pending (SPEC §10), not claimed: {e}"
        );
    }
    b.call(
        "POST",
        "/destinations/billing/resume",
        Some(&json!({})),
        &[],
    );
    for id in &ids {
        a.wait_status(id, "completed", WAIT);
    }
}

/// PostgreSQL: a receiver's `Retry-After` pauses its destination on every
/// instance, not only on the one that got the answer.
#[test]
fn a_retry_after_pause_holds_on_every_instance() {
    let Some(db) = crate::harness::Db::postgres() else {
        return;
    };
    let dir = new_dir();
    let r = Receiver::start();
    r.then(Answer::status(503).retry_after("3"));
    http_manifest(dir.path(), "asks", "[\"t\"]", &r.url, "", "");
    let start = |name: &'static str| {
        Hookbox::restart(
            dir.clone(),
            &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8"), ("INSTANCE_ID", name)]),
        )
    };
    let (a, b) = (start("node-a"), start("node-b"));
    a.post(&event("t", 0), &[]);
    r.wait_for(1, WAIT);
    eventually(
        Duration::from_secs(2),
        "paused on the other instance",
        || {
            let d = b.call("GET", "/destinations/asks", None, &[]).json();
            (d["state"] == "paused" && d["paused_until"].is_string()).then_some(())
        },
    );
    let asked = r.requests()[0].at;
    for n in 1..5 {
        let hb = if n % 2 == 0 { &a } else { &b };
        assert_eq!(hb.post(&event("t", n), &[]).status, 202);
    }
    let got = r.wait_for(5, WAIT);
    assert_eq!(got.len(), 5, "each event once, the paused one retried");
    for later in &got[1..] {
        assert!(
            later.at >= asked + Duration::from_millis(2900),
            "a delivery went out {:?} after the Retry-After of 3 s",
            later.at - asked
        );
    }
}

on_both_backends! {
/// More replayed dead letters than a paused destination keeps in memory (its
/// lane holds at most 2,048, its share of the window): the window passes over the held backlog once while
/// another destination's new work goes on, and a resume brings back every
/// replayed delivery — each delivered once.
fn a_replay_to_a_paused_destination_arrives_once_resumed(db: &Db) {
    const N: usize = 2_500;
    let dir = new_dir();
    let flaky = Receiver::start();
    flaky.set_default(Answer::status(400));
    http_manifest(dir.path(), "flaky", "[\"t\"]", &flaky.url, "max_attempts = 1", "");
    let ok = Receiver::start();
    http_manifest(dir.path(), "ok", "[\"ok\"]", &ok.url, "", "");
    let hb = Hookbox::restart(dir, &db.env(&[("ALLOWED_TARGETS", "127.0.0.0/8")]));
    std::thread::scope(|scope| {
        for t in 0..4 {
            let hb = &hb;
            scope.spawn(move || {
                for n in (t..N).step_by(4) {
                    let r = hb.post(&event("t", n), &[]);
                    assert_eq!(r.status, 202, "{}", r.text);
                }
            });
        }
    });
    flaky.wait_for(N, Duration::from_secs(120));
    eventually(WAIT, "every delivery dead-lettered", || {
        let d = hb.call("GET", "/destinations/flaky", None, &[]).json();
        (d["pending"] == 0).then_some(())
    });
    hb.call("POST", "/destinations/flaky/pause", Some(&json!({})), &[]);
    flaky.set_default(Answer::status(200));
    let replayed = hb.call("POST", "/dead-letters/replay", Some(&json!({})), &[]);
    assert_eq!(replayed.json()["replayed"], N, "{}", replayed.text);
    for n in 0..50 {
        assert_eq!(hb.post(&event("ok", n), &[]).status, 202);
    }
    ok.wait_for(50, WAIT);
    assert_eq!(flaky.count(), N, "nothing reaches a paused destination");
    hb.call("POST", "/destinations/flaky/resume", Some(&json!({})), &[]);
    eventually(Duration::from_secs(120), "every replayed delivery done", || {
        let d = hb.call("GET", "/destinations/flaky", None, &[]).json();
        (d["pending"] == 0 && flaky.count() >= 2 * N).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut seen = std::collections::HashMap::new();
    for r in flaky.requests() {
        *seen.entry(r.webhook_id().to_owned()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), N);
    assert!(seen.values().all(|n| *n == 2), "each refused once, delivered once");
}
}
