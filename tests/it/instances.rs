//! Several instances on one PostgreSQL database (`LEASE_TIMEOUT`, issue 5;
//! docs/architecture.md, "SQLite and PostgreSQL"):
//! shared work with an instance killed, one key posted to two instances at once,
//! and strict ordering across instances.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Db, Hookbox, eventually, exec_manifest, new_dir, post_all, post_to, script};

/// A handler script in `dir` whose attempts wait until the file `go` exists, then
/// run `then` (shell): returns `go` and the script. An attempt of an instance
/// killed with SIGKILL outlives it (its process group is its own); it gives up
/// once the test's directory is gone instead of polling for ever.
fn gated(dir: &std::path::Path, then: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let go = dir.join("go");
    let s = script(
        dir,
        "gated.sh",
        &format!(
            "while [ ! -e {go} ]; do [ -d {dir} ] || exit 1; sleep 0.05; done\n{then}",
            go = go.display(),
            dir = dir.display()
        ),
    );
    (go, s)
}

#[test]
fn three_instances_complete_every_event_when_one_is_killed_9() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let log = dir.path().join("handled");
    // Attempts wait for `go`, so that whatever the machine's speed every instance
    // still holds claims when one is killed (without the gate a fast run finished
    // the backlog while the posts were still going).
    let (go, s) = gated(
        dir.path(),
        &format!(
            "echo \"$HOOKBOX_EVENT_ID\" >> {}; sleep 0.02",
            log.display()
        ),
    );
    exec_manifest(
        dir.path(),
        "record",
        r#"["work"]"#,
        &s,
        "timeout = \"300s\"",
    );
    let env = [
        ("WORKER_COUNT", "4"),
        ("LEASE_TIMEOUT", "2s"),
        ("QUEUE_MAXSIZE", "100000"),
        ("LOG_LEVEL", "hookbox=info,tower_http=warn"),
    ];
    // Each instance its own INSTANCE_ID (the claim owner in `locked_by`).
    let names = ["node-0", "node-1", "node-2"];
    let mut instances: Vec<(Hookbox, &str)> = names
        .iter()
        .map(|name| {
            let mut env = env.to_vec();
            env.push(("INSTANCE_ID", name));
            (Hookbox::restart(dir.clone(), &db.env(&env)), *name)
        })
        .collect();
    let urls: Vec<String> = instances.iter().map(|(h, _)| h.url.clone()).collect();
    // 6 threads post 500 events each, round robin over the instances.
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let urls = &urls;
                s.spawn(move || {
                    (0..500)
                        .map(|n| {
                            let url = &urls[(t + n) % urls.len()];
                            let (status, body) = post_to(
                                url,
                                &json!({"event_type": "work", "payload": {"t": t, "n": n}}),
                                None,
                            );
                            assert_eq!(status, 202, "{body}");
                            body["id"].as_str().expect("id").to_owned()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    assert_eq!(ids.len(), 3000);
    // Kill one instance while it holds claims, then let the work run.
    let processed = || db.scalar("SELECT count(*) FROM deliveries WHERE status = 'completed'");
    let held = |name: &str| {
        db.scalar(&format!(
            "SELECT count(*) FROM deliveries WHERE status = 'processing' AND locked_by = '{name}'"
        ))
    };
    let index = eventually(
        Duration::from_secs(60),
        "an instance holding claims",
        || instances.iter().position(|(_, name)| held(name) > 0),
    );
    let (victim, name) = instances.remove(index);
    victim.kill9();
    // What it held when it died: claimed, leased, never to be finished by it.
    let orphaned = held(name);
    assert!(
        orphaned > 0,
        "the killed instance held no work; the test proves nothing"
    );
    std::fs::write(&go, "").expect("go");
    let deadline = Instant::now() + Duration::from_secs(180);
    while processed() < 3000 {
        assert!(
            Instant::now() < deadline,
            "only {} of 3000 completed; logs: {:?}",
            processed(),
            instances[0].0.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        db.scalar("SELECT count(*) FROM events WHERE status <> 'completed'"),
        0
    );
    assert_eq!(db.scalar("SELECT count(*) FROM events"), 3000);
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    let handled: HashSet<&String> = lines.iter().collect();
    for id in &ids {
        assert!(handled.contains(id), "{id} never reached a handler");
    }
    // At least once, and twice only for what the dead instance was running.
    let duplicates = lines.len() - handled.len();
    assert!(
        duplicates as i64 <= orphaned,
        "{duplicates} duplicates, but the killed instance held only {orphaned}"
    );
    // Survivors see the same truth through the API.
    for (hb, _) in &instances {
        let ev = hb
            .get(&format!("/webhooks/{}", ids[0]))
            .expect("get")
            .json();
        assert_eq!(ev["status"], "completed");
    }
}

#[test]
fn one_key_posted_to_two_instances_at_once_makes_one_event() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let a = Hookbox::restart(dir.clone(), &db.env(&[]));
    let b = Hookbox::restart(dir, &db.env(&[]));
    for round in 0..20 {
        let key = format!("race-{round}");
        let body = json!({"event_type": "race", "payload": {"round": round}});
        let posts: Vec<_> = [&a.url, &b.url, &a.url, &b.url]
            .into_iter()
            .map(|url| (url.clone(), body.clone(), Some(key.clone())))
            .collect();
        let answers = post_all(&posts);
        let created = answers.iter().filter(|(s, _)| *s == 202).count();
        assert_eq!(created, 1, "{answers:?}");
        assert!(
            answers.iter().all(|(s, _)| *s == 200 || *s == 202),
            "{answers:?}"
        );
        let id = &answers[0].1["id"];
        assert!(
            answers.iter().all(|(_, body)| &body["id"] == id),
            "{answers:?}"
        );
    }
    assert_eq!(db.scalar("SELECT count(*) FROM events"), 20);
}

#[test]
fn ordering_holds_across_instances() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let out = dir.path().join("order");
    let s = script(
        dir.path(),
        "append.sh",
        &format!("p=$(cat); sleep 0.01; echo \"$p\" >> {}", out.display()),
    );
    exec_manifest(
        dir.path(),
        "ordered",
        r#"["ordered"]"#,
        &s,
        "ordering_key = \"/key\"",
    );
    let env = [
        ("WORKER_COUNT", "8"),
        ("LOG_LEVEL", "hookbox=info,tower_http=warn"),
    ];
    let instances: Vec<Hookbox> = (0..3)
        .map(|_| Hookbox::restart(dir.clone(), &db.env(&env)))
        .collect();
    const PER_KEY: usize = 30;
    // One thread per key posts its events in order, each to the next instance.
    std::thread::scope(|s| {
        for k in 0..5 {
            let instances = &instances;
            s.spawn(move || {
                for seq in 0..PER_KEY {
                    let url = &instances[(k + seq) % instances.len()].url;
                    let (status, body) = post_to(
                        url,
                        &json!({"event_type": "ordered", "payload": {"key": format!("k{k}"), "seq": seq}}),
                        None,
                    );
                    assert_eq!(status, 202, "{body}");
                }
            });
        }
    });
    eventually(Duration::from_secs(120), "every event handled", || {
        let n = db.scalar("SELECT count(*) FROM deliveries WHERE status = 'completed'");
        (n == 5 * PER_KEY as i64).then_some(())
    });
    let mut by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in std::fs::read_to_string(&out).expect("output").lines() {
        let v: Value = serde_json::from_str(line).expect("payload line");
        by_key
            .entry(v["key"].as_str().expect("key").to_owned())
            .or_default()
            .push(v["seq"].as_u64().expect("seq"));
    }
    assert_eq!(by_key.len(), 5);
    for (key, seqs) in &by_key {
        let expected: Vec<u64> = (0..PER_KEY as u64).collect();
        assert_eq!(seqs, &expected, "key {key} ran out of order");
    }
}

#[test]
fn a_subscriber_created_on_one_instance_routes_events_posted_to_another() {
    let Some(db) = Db::postgres() else { return };
    let rx = crate::receiver::Receiver::start();
    let dir = new_dir();
    let env = [("ALLOWED_TARGETS", "127.0.0.0/8")];
    let a = Hookbox::restart(dir.clone(), &db.env(&env));
    let b = Hookbox::restart(dir, &db.env(&env));
    let created = a.call(
        "POST",
        "/subscribers",
        Some(&json!({"name": "shared", "event_types": ["fanout.*"], "url": rx.url})),
        &[],
    );
    assert_eq!(created.status, 201, "{}", created.text);
    // At once: b routes with every subscriber committed before the event (b's copy
    // is older, so the commit is refused, b reloads and routes again).
    let (status, body) = post_to(
        &b.url,
        &json!({"event_type": "fanout.one", "payload": {}}),
        None,
    );
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("id").to_owned();
    let ev = b.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_eq!(
        ev["deliveries"].as_array().map(Vec::len),
        Some(1),
        "b did not route to the subscriber created on a: {ev}"
    );
    b.wait_status(&id, "completed", Duration::from_secs(20));
    // Deleting it on b stops routing on a.
    assert_eq!(
        b.call("DELETE", "/subscribers/shared", None, &[]).status,
        204
    );
    // Generous: the re-read runs every second, but a loaded machine stretches it.
    eventually(Duration::from_secs(30), "a stops routing", || {
        let (_, body) = post_to(
            &a.url,
            &json!({"event_type": "fanout.two", "payload": {}}),
            None,
        );
        let id = body["id"].as_str()?.to_owned();
        let ev = a.get(&format!("/webhooks/{id}")).ok()?.json();
        ev["deliveries"].as_array()?.is_empty().then_some(())
    });
}

/// A subscriber created on a and deleted on b before a's next re-read: a must stop
/// routing to it. (a's follower used to compare the database with the last list
/// *it* had read — still empty — so it saw no change and a routed to the deleted
/// subscriber forever.)
#[test]
fn a_subscriber_created_here_and_deleted_there_at_once_stops_routing_here() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let a = Hookbox::restart(dir.clone(), &db.env(&[]));
    let b = Hookbox::restart(dir, &db.env(&[]));
    let body = json!({"name": "brief", "event_types": ["brief.*"], "url": "https://example.com/h"});
    assert_eq!(a.call("POST", "/subscribers", Some(&body), &[]).status, 201);
    assert_eq!(
        b.call("DELETE", "/subscribers/brief", None, &[]).status,
        204
    );
    eventually(Duration::from_secs(30), "a stops routing", || {
        let (_, body) = post_to(
            &a.url,
            &json!({"event_type": "brief.one", "payload": {}}),
            None,
        );
        let id = body["id"].as_str()?.to_owned();
        let ev = a.get(&format!("/webhooks/{id}")).ok()?.json();
        ev["deliveries"].as_array()?.is_empty().then_some(())
    });
}

/// `INSTANCE_ID` (issue 13, item 3): an instance killed while it holds a claim and
/// restarted with the same id runs the delivery again at once, not after
/// `LEASE_TIMEOUT` (ten minutes here).
#[test]
fn a_restarted_instance_takes_back_its_own_claims_at_once() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let log = dir.path().join("handled");
    let (go, s) = gated(
        dir.path(),
        &format!("echo \"$HOOKBOX_EVENT_ID\" >> {}", log.display()),
    );
    exec_manifest(dir.path(), "slow", r#"["slow"]"#, &s, "timeout = \"300s\"");
    let env = [
        ("INSTANCE_ID", "node-a"),
        ("LEASE_TIMEOUT", "10m"),
        ("WORKER_COUNT", "2"),
    ];
    let first = Hookbox::restart(dir.clone(), &db.env(&env));
    let (status, body) = post_to(
        &first.url,
        &json!({"event_type": "slow", "payload": {}}),
        None,
    );
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("id").to_owned();
    let held = || {
        db.scalar(
            "SELECT count(*) FROM deliveries WHERE status = 'processing' \
             AND locked_by = 'node-a' AND locked_until > now() + interval '5 minutes'",
        )
    };
    eventually(Duration::from_secs(30), "node-a holds the delivery", || {
        (held() == 1).then_some(())
    });
    let dir = first.kill9();
    std::fs::write(&go, "").expect("go");
    let started = Instant::now();
    let second = Hookbox::restart(dir, &db.env(&env));
    second.wait_status(&id, "completed", Duration::from_secs(60));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "taken back after {:?}",
        started.elapsed()
    );
    let handled = std::fs::read_to_string(&log).expect("log");
    assert!(handled.contains(&id), "{handled}");
}

/// Two live processes with one `INSTANCE_ID` (the default host name, on one host):
/// the second holds its claims under a name of its own and takes nothing back, so
/// it never steals the first one's running work.
#[test]
fn a_second_live_process_with_the_same_id_takes_nothing_back() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let (go, s) = gated(dir.path(), "");
    exec_manifest(dir.path(), "slow", r#"["slow"]"#, &s, "timeout = \"300s\"");
    let env = [("INSTANCE_ID", "twin"), ("LEASE_TIMEOUT", "10m")];
    let first = Hookbox::restart(dir.clone(), &db.env(&env));
    let (status, _) = post_to(
        &first.url,
        &json!({"event_type": "slow", "payload": {}}),
        None,
    );
    assert_eq!(status, 202);
    eventually(Duration::from_secs(30), "twin holds the delivery", || {
        let n = db.scalar(
            "SELECT count(*) FROM deliveries WHERE status = 'processing' AND locked_by = 'twin'",
        );
        (n == 1).then_some(())
    });
    let second = Hookbox::restart(dir, &db.env(&env));
    assert!(
        second
            .logs()
            .iter()
            .any(|l| l.contains("another live process uses this INSTANCE_ID")),
        "{:?}",
        second.logs()
    );
    // Still held by the first, untouched.
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM deliveries WHERE status = 'processing' AND locked_by = 'twin'"
        ),
        1
    );
    std::fs::write(&go, "").expect("go");
    drop(second);
    drop(first);
}

/// Claimed at intake: an idle instance stores a new delivery `processing` under
/// its own lease in the intake commit and runs it without a claim (no claim ever
/// wrote the row: its `updated_at` is still its `created_at`). A delivery with an
/// ordering value goes through the claim, which keeps strict ordering.
#[test]
fn an_idle_instance_runs_new_work_without_a_claim_unless_it_is_ordered() {
    let Some(db) = Db::postgres() else { return };
    let dir = new_dir();
    let (go, s) = gated(dir.path(), "");
    exec_manifest(dir.path(), "free", r#"["free"]"#, &s, "timeout = \"300s\"");
    exec_manifest(
        dir.path(),
        "ordered",
        r#"["ordered"]"#,
        &s,
        "timeout = \"300s\"\nordering_key = \"/key\"",
    );
    let done = script(dir.path(), "done.sh", "");
    exec_manifest(dir.path(), "warm", r#"["warm"]"#, &done, "");
    let env = [("INSTANCE_ID", "node-i"), ("WORKER_COUNT", "2")];
    let node = Hookbox::restart(dir, &db.env(&env));
    // Ready is not idle: until its first claim has found the table empty, an
    // instance leaves new work to the claim (on a loaded machine that claim can
    // come after the first post). A completed event shows a claim has run.
    let (status, body) = post_to(
        &node.url,
        &json!({"event_type": "warm", "payload": {}}),
        None,
    );
    assert_eq!(status, 202, "{body}");
    node.wait_status(
        body["id"].as_str().expect("id"),
        "completed",
        Duration::from_secs(60),
    );
    let running = |handler: &str, unclaimed: bool| {
        db.scalar(&format!(
            "SELECT count(*) FROM deliveries WHERE handler = '{handler}' \
             AND status = 'processing' AND locked_by = 'node-i' \
             AND (updated_at = created_at) = {unclaimed}"
        ))
    };
    let mut ids = Vec::new();
    for event_type in ["free", "ordered"] {
        let (status, body) = post_to(
            &node.url,
            &json!({"event_type": event_type, "payload": {"key": "k"}}),
            None,
        );
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_str().expect("id").to_owned());
    }
    eventually(Duration::from_secs(30), "both deliveries running", || {
        (running("free", true) == 1 && running("ordered", false) == 1).then_some(())
    });
    std::fs::write(&go, "").expect("go");
    for id in &ids {
        node.wait_status(id, "completed", Duration::from_secs(60));
    }
}
