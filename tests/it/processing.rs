//! Processing (docs/states.md, docs/handlers.md) with real exec handlers and the
//! real binary.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Hookbox, exec_manifest, new_dir, on_both_backends, script, write};

const WAIT: Duration = Duration::from_secs(20);

fn post(hb: &Hookbox, event_type: &str, n: u32) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": {"n": n}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

on_both_backends! {
fn fan_out_runs_every_matching_handler_with_payload_and_env(db: &Db) {
    let dir = new_dir();
    let out = dir.path().join("out");
    let s = script(
        dir.path(),
        "record.sh",
        &format!(
            "echo \"$0 $HOOKBOX_EVENT_ID $HOOKBOX_EVENT_TYPE $HOOKBOX_ATTEMPT $(cat)\" >> {}",
            out.display()
        ),
    );
    exec_manifest(dir.path(), "first", r#"["order.*"]"#, &s, "");
    exec_manifest(dir.path(), "second", r#"["order.created"]"#, &s, "");
    exec_manifest(dir.path(), "other", r#"["invoice.*"]"#, &s, "");
    let hb = Hookbox::restart(dir.clone(), &db.env(&[]));
    let id = post(&hb, "order.created", 7);
    let ev = hb.wait_status(&id, "completed", WAIT);
    let handlers: Vec<&str> = ev["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["handler"].as_str().expect("handler"))
        .collect();
    assert_eq!(handlers, ["first", "second"]);
    assert_eq!(ev["attempts"], 1);
    let lines = std::fs::read_to_string(&out).expect("handler output");
    assert_eq!(lines.lines().count(), 2, "{lines}");
    for line in lines.lines() {
        assert!(
            line.ends_with(&format!("{id} order.created 1 {{\"n\":7}}")),
            "{line}"
        );
    }
}
}

on_both_backends! {
fn failing_twice_then_succeeding_completes_after_three_attempts(db: &Db) {
    let dir = new_dir();
    let s = script(
        dir.path(),
        "flaky.sh",
        "if [ \"$HOOKBOX_ATTEMPT\" -lt 3 ]; then echo \"upstream 500 on $HOOKBOX_ATTEMPT\" >&2; exit 1; fi",
    );
    exec_manifest(
        dir.path(),
        "flaky",
        r#"["flaky"]"#,
        &s,
        "backoff = [\"50ms\"]",
    );
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let id = post(&hb, "flaky", 1);
    let ev = hb.wait_status(&id, "completed", WAIT);
    let d = &ev["deliveries"][0];
    assert_eq!(d["attempts"], 3);
    assert_eq!(d["status"], "completed");
    assert_eq!(
        d["last_error"], "exit code 1: upstream 500 on 2",
        "the last failure is kept"
    );
    assert_eq!(d["retry_after"], serde_json::Value::Null);
}
}

on_both_backends! {
fn exhaustion_dead_letters_with_attempts_and_last_error(db: &Db) {
    let dir = new_dir();
    let s = script(
        dir.path(),
        "broken.sh",
        "echo 'database is down' >&2; exit 3",
    );
    exec_manifest(
        dir.path(),
        "broken",
        r#"["broken"]"#,
        &s,
        "max_attempts = 3\nbackoff = [\"20ms\", \"40ms\"]",
    );
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let id = post(&hb, "broken", 1);
    let ev = hb.wait_status(&id, "failed", WAIT);
    assert_eq!(ev["attempts"], 3);
    assert_eq!(ev["last_error"], "exit code 3: database is down");
    assert_eq!(ev["deliveries"][0]["status"], "failed");
    assert_eq!(ev["deliveries"][0]["attempts"], 3);
    let metrics = hb.get("/metrics").expect("metrics").text;
    assert!(
        metrics.contains(r#"hookbox_deliveries_total{handler="broken",outcome="dead_letter"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hookbox_deliveries_total{handler="broken",outcome="retry"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains("hookbox_dead_letters 1"), "{metrics}");
}
}

on_both_backends! {
fn exit_65_dead_letters_after_one_attempt(db: &Db) {
    let dir = new_dir();
    let s = script(dir.path(), "reject.sh", "echo 'bad payload' >&2; exit 65");
    exec_manifest(
        dir.path(),
        "reject",
        r#"["reject"]"#,
        &s,
        "backoff = [\"20ms\"]",
    );
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let id = post(&hb, "reject", 1);
    let ev = hb.wait_status(&id, "failed", WAIT);
    assert_eq!(ev["attempts"], 1);
    assert_eq!(ev["last_error"], "exit code 65: bad payload");
}
}

on_both_backends! {
fn a_timeout_is_retried_and_kills_the_whole_process_group(db: &Db) {
    let dir = new_dir();
    let pids = dir.path().join("pids");
    let s = script(
        dir.path(),
        "hang.sh",
        &format!(
            "if [ \"$HOOKBOX_ATTEMPT\" = 1 ]; then sleep 30 & echo $! >> {}; wait; fi; exit 0",
            pids.display()
        ),
    );
    exec_manifest(
        dir.path(),
        "hang",
        r#"["hang"]"#,
        &s,
        "timeout = \"300ms\"\nbackoff = [\"20ms\"]",
    );
    let hb = Hookbox::restart(dir, &db.env(&[]));
    let id = post(&hb, "hang", 1);
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 2);
    assert_eq!(ev["last_error"], "timed out after 300ms");
    let pid = std::fs::read_to_string(&pids).expect("pid file");
    // Killed means gone or a zombie waiting for init to reap it.
    let running = || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .ok()
            .and_then(|stat| {
                stat.rsplit(')')
                    .next()
                    .map(|rest| !rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    };
    assert!(
        !running(),
        "the grandchild sleep {pid} outlived its timed-out attempt"
    );
}
}

on_both_backends! {
fn an_unrouted_event_completes_and_is_counted(db: &Db) {
    let hb = Hookbox::start(&db.env(&[]));
    let id = post(&hb, "nobody.listens", 1);
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["deliveries"], json!([]));
    let metrics = hb.get("/metrics").expect("metrics").text;
    assert!(
        metrics.contains("hookbox_events_unrouted_total 1"),
        "{metrics}"
    );
}
}

on_both_backends! {
fn kill_9_mid_run_then_restart_completes_every_event_at_least_once(db: &Db) {
    let dir = new_dir();
    let log = dir.path().join("handled");
    let s = script(
        dir.path(),
        "slow.sh",
        &format!("echo \"$HOOKBOX_EVENT_ID\" >> {}; sleep 0.2", log.display()),
    );
    exec_manifest(dir.path(), "slow", r#"["slow"]"#, &s, "");
    // On PostgreSQL the restarted instance is a new claimer: it takes over the
    // dead one's deliveries once their lease expires.
    let env = [("WORKER_COUNT", "2"), ("LEASE_TIMEOUT", "1s")];
    let hb = Hookbox::restart(dir.clone(), &db.env(&env));
    let ids: Vec<String> = (0..12).map(|n| post(&hb, "slow", n)).collect();
    crate::harness::eventually(WAIT, "a few handled", || {
        let n = std::fs::read_to_string(&log).ok()?.lines().count();
        (n >= 3).then_some(())
    });
    let dir = hb.kill9();
    let hb = Hookbox::restart(dir, &db.env(&env));
    for id in &ids {
        hb.wait_status(id, "completed", WAIT);
    }
    let handled = std::fs::read_to_string(&log).expect("log");
    for id in &ids {
        assert!(
            handled.lines().any(|l| l == id),
            "{id} never reached the handler"
        );
    }
}
}

on_both_backends! {
fn retention_deletes_old_terminal_events_and_never_unfinished_ones(db: &Db) {
    let dir = new_dir();
    let s = script(dir.path(), "block.sh", "sleep 30");
    exec_manifest(dir.path(), "block", r#"["block"]"#, &s, "timeout = \"60s\"");
    let env = [
        ("RETENTION_DAYS", "0"),
        ("CLEANUP_INTERVAL_HOURS", "0.0002"),
    ];
    let hb = Hookbox::restart(dir, &db.env(&env));
    let blocked = post(&hb, "block", 1);
    let done: Vec<String> = (0..5).map(|n| post(&hb, "done", n)).collect();
    for id in &done {
        crate::harness::eventually(WAIT, "retention", || {
            let r = hb.get(&format!("/webhooks/{id}")).ok()?;
            (r.status == 404).then_some(())
        });
    }
    // Several retention passes later, the running event is still there.
    std::thread::sleep(Duration::from_millis(2500));
    let r = hb.get(&format!("/webhooks/{blocked}")).expect("get");
    assert_eq!(r.status, 200, "retention deleted unfinished work");
    assert_eq!(r.json()["status"], "processing");
}
}

on_both_backends! {
fn sigterm_lets_the_running_attempt_finish_and_refuses_new_events(db: &Db) {
    let dir = new_dir();
    let s = script(dir.path(), "pause.sh", "sleep 1");
    exec_manifest(dir.path(), "pause", r#"["pause"]"#, &s, "");
    let mut hb = Hookbox::restart(dir.clone(), &db.env(&[("SHUTDOWN_GRACE", "10s")]));
    let id = post(&hb, "pause", 1);
    hb.wait_status(&id, "processing", WAIT);
    hb.sigterm();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(hb.get("/ready").map(|r| r.status).unwrap_or(503), 503);
    let refused = hb.post(&json!({"event_type": "pause"}), &[]);
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(
        hb.wait_exit(Duration::from_secs(15)),
        Some(0),
        "{:?}",
        hb.logs()
    );
    let hb = Hookbox::restart(hb.kill9(), &db.env(&[("WORKER_COUNT", "0")]));
    let ev = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_eq!(
        ev["status"], "completed",
        "the attempt finished within the grace period"
    );
}
}

#[test]
fn bad_manifests_stop_startup_naming_file_and_field() {
    for (file, text, field) in [
        (
            "kind.toml",
            "event_types = [\"a\"]\nkind = \"smtp\"\n",
            "kind",
        ),
        (
            "typo.toml",
            "event_types = [\"a\"]\nkind = \"log\"\nmax_atempts = 3\n",
            "max_atempts",
        ),
        (
            "pattern.toml",
            "event_types = [\"a*b\"]\nkind = \"log\"\n",
            "event_types",
        ),
        (
            "secret.toml",
            "event_types = [\"a\"]\nkind = \"http\"\n[http]\nurl = \"https://example.com/\"\nsecret_env = \"HOOKBOX_TEST_UNSET_SECRET\"\n",
            "http.secret_env",
        ),
    ] {
        let dir = new_dir();
        write(dir.path(), &format!("handlers/{file}"), text);
        let out = crate::harness::hookbox_in(dir.path())
            .env("DB_PATH", dir.path().join("events.db"))
            .env("BIND_ADDR", "127.0.0.1:0")
            .env("HANDLERS_DIR", dir.path().join("handlers"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(file) && stderr.contains(field),
            "{file}: {stderr}"
        );
        let check = handlers_check(&dir.path().join("handlers"));
        assert_eq!(check.status.code(), Some(1), "{file}");
    }
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/a.toml",
        "name = \"same\"\nevent_types = [\"a\"]\nkind = \"log\"\n",
    );
    write(
        dir.path(),
        "handlers/b.toml",
        "name = \"same\"\nevent_types = [\"b\"]\nkind = \"log\"\n",
    );
    let check = handlers_check(&dir.path().join("handlers"));
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("already the name"));
}

/// `hookbox handlers check DIR` with an empty environment.
fn handlers_check(dir: &std::path::Path) -> std::process::Output {
    crate::harness::hookbox_in(crate::harness::new_dir().path())
        .args(["handlers", "check"])
        .arg(dir)
        .output()
        .expect("check")
}

#[test]
fn handlers_check_of_a_folder_that_does_not_exist_fails_and_says_so() {
    let dir = new_dir();
    let out = handlers_check(&dir.path().join("typo-dir"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("typo-dir") && stderr.contains("no such folder"),
        "{stderr}"
    );
}

#[test]
fn handlers_check_prints_the_routing_table() {
    let out = handlers_check(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/handlers/examples"
    )));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for name in [
        "billing-sync",
        "log-everything",
        "notify",
        "order.created, invoice.*",
        "/customer_id",
    ] {
        assert!(stdout.contains(name), "{name} missing:\n{stdout}");
    }
}

#[test]
fn handlers_check_warns_about_a_localhost_target_with_what_to_do() {
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/local.toml",
        "name = \"local\"\nevent_types = [\"a\"]\nkind = \"http\"\n\n[http]\nurl = \"http://localhost:9000/hook\"\n",
    );
    let out = handlers_check(&dir.path().join("handlers"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "a warning, not an error: {all}");
    assert!(
        all.contains("localhost") && all.contains("ALLOWED_TARGETS=127.0.0.0/8"),
        "{all}"
    );
}

#[test]
fn a_manifest_with_a_toml_syntax_error_is_named_with_its_line_and_column() {
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/broken.toml",
        "name = \"broken\"\nevent_types = [\"a\"\nkind = \"log\"\n",
    );
    let out = handlers_check(&dir.path().join("handlers"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("broken.toml") && stdout.contains("(line 3, column 1)"),
        "{stdout}"
    );
}

#[test]
fn an_address_in_use_is_said_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let dir = new_dir();
    let out = crate::harness::hookbox_in(dir.path())
        .arg("serve")
        .env("BIND_ADDR", &addr)
        .env("DB_PATH", dir.path().join("events.db"))
        .env("HANDLERS_DIR", dir.path().join("handlers"))
        .env("SOURCES_DIR", dir.path().join("sources"))
        .output()
        .expect("serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("cannot listen"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(&addr), "{line}");
    assert_eq!(line.matches("in use").count(), 1, "said once: {line}");
}
