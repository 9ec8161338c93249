//! Invariant 6 on SQLite: memory holds a bounded window of due work, whatever the
//! size of the backlog — while accepting it and after a restart. The database is
//! the queue; what is not in the window waits in the table.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Hookbox, client, new_dir, write};

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
fn proc_status(pid: u32, field: &str) -> u64 {
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
