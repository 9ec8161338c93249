//! Invariant 6 on SQLite: memory holds a bounded window of due work, whatever the
//! size of the backlog — while accepting it and after a restart. The database is
//! the queue; what is not in the window waits in the table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Hookbox, client, eventually, http_manifest, new_dir, write};
use crate::receiver::Receiver;

/// Events left pending (no workers).
const PENDING: usize = 200_000;

/// Posting threads (one request in flight each, keep-alive).
const THREADS: usize = 16;

/// The RSS allowed at any backlog: the process itself, its SQLite caches and a
/// window of a few thousand jobs. Holding every pending delivery, as hookbox did
/// before, cost about 1 KB each (805,000 pending: 1.1 GB; restarted: 630 MB), so
/// 200,000 would be far above it.
const BOUND: u64 = 120 << 20;

/// A `/proc/<pid>/status` field (`VmRSS`, `VmHWM`) in bytes.
pub(crate) fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"));
    kb * 1024
}

/// `hookbox_queue_depth` from `/metrics`: the pending backlog.
fn queue_depth(hb: &Hookbox) -> u64 {
    let text = hb.get("/metrics").expect("metrics").text;
    text.lines()
        .find_map(|l| l.strip_prefix("hookbox_queue_depth "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no hookbox_queue_depth in {text}"))
}

fn mb(bytes: u64) -> u64 {
    bytes >> 20
}

#[test]
fn a_backlog_of_200_000_costs_a_window_of_memory_not_the_backlog() {
    let dir = new_dir();
    write(
        dir.path(),
        "handlers/log.toml",
        "event_types = [\"m\"]\nkind = \"log\"\n",
    );
    let env = [
        ("WORKER_COUNT", "0"),
        ("QUEUE_MAXSIZE", "1000000"),
        // Not a line per request: 200,000 of them would only slow the test.
        ("LOG_LEVEL", "warn,hookbox=info"),
    ];
    let hb = Hookbox::restart(dir, &env);
    let url = format!("{}/webhooks", hb.url);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let url = url.clone();
            s.spawn(move || {
                for n in 0..PENDING / THREADS {
                    let res = client()
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(json!({"event_type": "m", "payload": {"t": t, "n": n}}).to_string())
                        .send()
                        .expect("send");
                    assert_eq!(res.status().as_u16(), 202);
                }
            });
        }
    });
    let filling = started.elapsed();
    let (filled, peak) = (
        proc_status(hb.pid(), "VmRSS"),
        proc_status(hb.pid(), "VmHWM"),
    );
    assert_eq!(queue_depth(&hb), PENDING as u64, "the backlog is counted");

    let dir = hb.kill9();
    let restarted_at = Instant::now();
    let hb = Hookbox::restart(dir, &env);
    let to_ready = restarted_at.elapsed();
    assert_eq!(
        queue_depth(&hb),
        PENDING as u64,
        "the backlog is counted after the restart"
    );
    std::thread::sleep(Duration::from_secs(1));
    let (restarted, restarted_peak) = (
        proc_status(hb.pid(), "VmRSS"),
        proc_status(hb.pid(), "VmHWM"),
    );
    eprintln!(
        "{PENDING} pending (filled in {:.1}s): RSS {} MB, peak {} MB; restarted: ready in \
         {:.2}s, RSS {} MB, peak {} MB",
        filling.as_secs_f64(),
        mb(filled),
        mb(peak),
        to_ready.as_secs_f64(),
        mb(restarted),
        mb(restarted_peak),
    );
    assert!(
        hb.logs()
            .iter()
            .any(|l| l.contains("recovered unfinished work")),
        "{:?}",
        hb.logs()
    );
    for (what, bytes) in [
        ("while accepting (peak)", peak),
        ("after the restart (peak)", restarted_peak),
    ] {
        assert!(
            bytes < BOUND,
            "{what}: RSS {} MB with {PENDING} pending, over {} MB",
            mb(bytes),
            mb(BOUND)
        );
    }
}

/// A backlog larger than the window (4096 jobs) drains through the refill after a
/// restart, every delivery exactly in its key's order, while the receiver fails at
/// random (so retries wait in the table and younger deliveries of their key wait
/// behind them).
#[test]
fn a_backlog_larger_than_the_window_drains_in_per_key_order_after_a_restart() {
    const KEYS: usize = 24;
    const PER_KEY: usize = 250;
    let rx = Receiver::start();
    rx.fail_randomly(0.2, 20_261_126);
    let dir = new_dir();
    http_manifest(
        dir.path(),
        "ordered",
        r#"["ordered.event"]"#,
        &format!("{}/ordered", rx.url),
        "max_attempts = 50\nbackoff = [\"20ms\"]",
        "ordering_key = \"/key\"",
    );
    let quiet = ("LOG_LEVEL", "warn,hookbox=info");
    let loopback = ("ALLOWED_TARGETS", "127.0.0.0/8");
    let idle = [("WORKER_COUNT", "0"), quiet, loopback];
    let hb = Hookbox::restart(dir, &idle);
    let url = format!("{}/webhooks", hb.url);
    // One poster per key: within a key, event n+1 is posted after n is accepted.
    let posted: HashMap<String, (usize, usize)> = std::thread::scope(|s| {
        let posters: Vec<_> = (0..KEYS)
            .map(|k| {
                let url = url.clone();
                s.spawn(move || {
                    (0..PER_KEY)
                        .map(|seq| {
                            let body = json!({"event_type": "ordered.event",
                                              "payload": {"key": format!("k{k}"), "seq": seq}});
                            let res = client()
                                .post(&url)
                                .header("content-type", "application/json")
                                .body(body.to_string())
                                .send()
                                .expect("send");
                            assert_eq!(res.status().as_u16(), 202);
                            let answer: serde_json::Value = res.json().expect("json");
                            (answer["id"].as_str().expect("id").to_owned(), (k, seq))
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
    assert!(rx.requests().is_empty(), "no workers, no deliveries yet");
    let hb = Hookbox::restart(hb.kill9(), &[quiet, loopback]);
    eventually(
        Duration::from_secs(180),
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
    let mut delivered: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for r in rx.requests().iter().filter(|r| r.answered == 200) {
        let (k, seq) = posted[r.webhook_id()];
        delivered.entry(k).or_default().push(seq);
    }
    for (k, seqs) in &delivered {
        assert_eq!(
            *seqs,
            (0..PER_KEY).collect::<Vec<_>>(),
            "key k{k} out of order or delivered twice: {:?}",
            hb.logs().iter().rev().take(20).collect::<Vec<_>>()
        );
    }
}
