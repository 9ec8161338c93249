//! Invariant 1 (nothing acknowledged is lost) and 6 (recovery before ready), with the
//! real process killed.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, client, eventually, new_dir, on_both_backends, write};

/// A fresh directory whose `log` handler routes the `t` events these tests post, so
/// that they leave deliveries for recovery (an unrouted event completes at once).
fn routed_dir() -> std::sync::Arc<tempfile::TempDir> {
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/log.toml",
        "event_types = [\"t\"]\nkind = \"log\"\n",
    );
    dir
}

on_both_backends! {
fn every_acknowledged_event_survives_kill_9(db: &Db) {
    let env = [("WORKER_COUNT", "0"), ("QUEUE_MAXSIZE", "100000")];
    let hb = Hookbox::restart(routed_dir(), &db.env(&env));
    let url = format!("{}/webhooks", hb.url);
    // 8 threads post 125 events each; each records the keys that were acknowledged.
    let acked: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let url = url.clone();
                s.spawn(move || {
                    let mut acked = Vec::new();
                    for n in 0..125 {
                        let key = format!("durable-{t}-{n}");
                        let res = client()
                            .post(&url)
                            .header("content-type", "application/json")
                            .header("Idempotency-Key", &key)
                            .body(json!({"event_type": "t", "payload": {"n": n}}).to_string())
                            .send()
                            .expect("send");
                        assert_eq!(res.status().as_u16(), 202);
                        acked.push(key);
                    }
                    acked
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    assert_eq!(acked.len(), 1000);
    let dir = hb.kill9();
    let hb = Hookbox::restart(dir, &db.env(&env));
    for key in &acked {
        let r = hb
            .get(&format!("/webhooks?idempotency_key={key}"))
            .expect("get");
        assert_eq!(r.status, 200, "{key} lost after kill -9");
    }
    // On PostgreSQL the database is the queue: there is nothing to load.
    assert!(
        db.is_postgres()
            || hb
                .logs()
                .iter()
                .any(|l| l.contains("recovered unfinished work")),
        "recovery should have loaded the 1000 pending deliveries"
    );
}
}

#[test]
fn ready_is_503_until_recovery_is_done_then_200() {
    // Leave many unfinished events behind (no workers), then watch /ready from the
    // moment the restarted process listens.
    let env = [("WORKER_COUNT", "0"), ("QUEUE_MAXSIZE", "1000000")];
    let hb = Hookbox::restart(routed_dir(), &env);
    let url = format!("{}/webhooks", hb.url);
    std::thread::scope(|s| {
        for t in 0..8 {
            let url = url.clone();
            s.spawn(move || {
                for n in 0..1000 {
                    let res = client()
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(json!({"event_type": "t", "payload": {"t": t, "n": n}}).to_string())
                        .send()
                        .expect("send");
                    assert_eq!(res.status().as_u16(), 202);
                }
            });
        }
    });
    let dir = hb.kill9();
    let mut seen = Vec::new();
    let hb = Hookbox::spawn(dir, &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let status = hb.get("/ready").map(|r| r.status).unwrap_or(0);
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        if status == 200 {
            break;
        }
    }
    assert_eq!(seen.last(), Some(&200), "never ready: {seen:?}");
    // stderr is read by a thread of the harness, which may still be behind the
    // thousands of request lines the polling above logged.
    eventually(Duration::from_secs(10), "the ready line in the log", || {
        hb.logs().iter().any(|l| l.contains(" ready")).then_some(())
    });
    let ready_before_recovery = hb
        .logs()
        .iter()
        .position(|l| l.contains("recovered unfinished work"))
        .zip(hb.logs().iter().position(|l| l.contains(" ready")))
        .is_some_and(|(recovered, ready)| recovered < ready);
    assert!(
        ready_before_recovery,
        "recovery must finish before ready: {:?}",
        hb.logs()
    );
    assert_eq!(
        seen.first(),
        Some(&503),
        "the first answer must be 503: {seen:?}"
    );
}

/// A SIGTERM that arrives while hookbox starts (here: as soon as it listens,
/// before it is ready) still shuts it down gracefully, exit 0: the handlers are
/// installed before startup, not once it runs (a signal in between had killed it).
#[test]
fn a_sigterm_while_starting_exits_0() {
    let mut hb = Hookbox::spawn(new_dir(), &[]);
    hb.sigterm();
    let code = hb.wait_exit(Duration::from_secs(15));
    assert_eq!(code, Some(0), "{:?}", hb.logs());
}

/// A SIGTERM while hookbox waits at startup for a database that does not answer
/// stops it at once, exit 0 (without the race against the signal it went on
/// trying for seconds and then exited 1).
#[test]
fn a_sigterm_while_waiting_for_the_database_exits_0() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = new_dir();
    let mut child = crate::harness::hookbox_in(dir.path())
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("HANDLERS_DIR", dir.path())
        .env(
            "DATABASE_URL",
            format!("postgres://hookbox@127.0.0.1:{closed}/none"),
        )
        .arg("serve")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "still waiting for the database"
    );
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
}

#[test]
fn sigterm_turns_ready_503_and_exits_0() {
    let mut hb = Hookbox::start(&[("SHUTDOWN_GRACE", "2s")]);
    assert_eq!(hb.get("/health").expect("health").status, 200);
    hb.sigterm();
    let code = hb.wait_exit(Duration::from_secs(15));
    assert_eq!(code, Some(0), "{:?}", hb.logs());
    assert!(hb.logs().iter().any(|l| l.contains("shutting down")));
}
