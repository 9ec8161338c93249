//! `soak`: hookbox under a steady load for a long time (issue 28: an hour at half
//! of peak intake, with a handler that fails 10 % of attempts).
//!
//! It starts the built-in [`receiver`](crate::receiver) answering 500 to
//! `--fail-percent` of its requests (evenly spread: every tenth for 10), registers
//! one subscriber for `--event-type` on it through the admin API (`backoff =
//! ["1s"]`, which hookbox jitters by ±20 %; `max_attempts = 10`; `max_in_flight`
//! from `--max-in-flight`), and posts `--rate` events per second for `--duration`
//! over `--connections` keep-alive connections.
//!
//! The rate is an open loop: request n is due n / rate seconds after the start, the
//! first free connection sends it, and its latency counts from when it was **due**,
//! not from when it was sent. A stall of hookbox therefore shows as the latency of
//! every request that waited behind it instead of as fewer samples (coordinated
//! omission); how late requests left — every connection busy, or the generator short
//! of CPU — is a column of its own. A request still unsent 10 s after the end
//! ([`SEND_GRACE`]) is counted as never sent.
//!
//! Every `--interval` (default 60 s) it prints one row for the requests that finished
//! in it: `elapsed` (seconds since the start, at the row's end), `sent`, `2xx`,
//! `non-2xx`, `errors` (no answer), `p50`, `p99`, `max`, `late_ms` (the 99th
//! percentile of how late requests were sent, in milliseconds), and the receiver's
//! `delivered` (attempts answered 200) and `refused` (answered 500). Then it waits
//! (up to `--drain-timeout`) until `hookbox_events_pending` is 0, deletes its
//! subscriber and prints a summary of the whole run. `scripts/soak.sh` runs it beside
//! hookbox, samples the server at each interval and judges the run.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use indicatif::ProgressBar;

use crate::BoxError;
use crate::admin::Admin;
use crate::cli::SoakArgs;
use crate::conn::{Connection, Target, check_reachable};
use crate::e2e::{metric_missing, read_pending, wait_for_drain};
use crate::post::{
    Attempt, Budget, ERROR_BACKOFF, Provider, Shared, Stats, event_body, post_timed,
};
use crate::progress::{progress_bar, spawn_progress};
use crate::receiver::{Tally, start_receiver};
use crate::report::{
    Summary, exit_code, format_micros, non_2xx_total, per_second, percentile, print_details,
    print_table,
};

/// The subscriber's retry schedule: one step, repeated (hookbox jitters each wait
/// by ±20 %).
pub(crate) const BACKOFF: &str = "1s";
/// The subscriber's attempts before a dead letter.
pub(crate) const MAX_ATTEMPTS: u32 = 10;
/// The per-interval rows' columns.
pub(crate) const COLUMNS: [&str; 11] = [
    "elapsed",
    "sent",
    "2xx",
    "non-2xx",
    "errors",
    "p50",
    "p99",
    "max",
    "late_ms",
    "delivered",
    "refused",
];
/// How long after `--duration` a request that was due before it may still be
/// sent (the generator or every connection behind); past it the rest are counted
/// as never sent.
pub(crate) const SEND_GRACE: Duration = Duration::from_secs(10);
/// Width of every column of the rows (the longest header, `delivered`, and two
/// spaces; counts up to 8 digits).
const COLUMN_WIDTH: usize = 11;

/// What the requests that finished in one interval (or in the whole run) add up to.
#[derive(Default)]
pub(crate) struct Window {
    /// Their statuses, errors and latencies (from when each was due).
    pub(crate) stats: Stats,
    /// How late each was sent after it was due, in microseconds.
    pub(crate) late_us: Vec<u32>,
}

impl Window {
    /// Counts one request.
    fn add(&mut self, stats: Stats, late: Duration) {
        self.stats.merge(stats);
        self.late_us.push(micros(late));
    }

    /// Adds another window's requests to these.
    fn merge(&mut self, other: Window) {
        self.stats.merge(other.stats);
        self.late_us.extend(other.late_us);
    }

    /// Requests that finished, answered or not.
    fn sent(&self) -> u64 {
        self.stats.responses() + self.stats.errors
    }

    /// The 99th percentile of the lateness, in milliseconds (`-` without requests).
    fn late_ms(&mut self) -> String {
        self.late_us.sort_unstable();
        percentile(&self.late_us, 99.0).map_or("-".to_owned(), |us| {
            format!("{:.1}", f64::from(us) / 1000.0)
        })
    }
}

/// What the connections share: the schedule and the current interval's window.
struct Pacer {
    shared: Arc<Shared>,
    start: Instant,
    rate: u64,
    window: Mutex<Window>,
}

impl Pacer {
    /// When request `seq` is due.
    fn due(&self, seq: u64) -> Instant {
        self.start + due_after(seq, self.rate)
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        // A panic while holding the lock cannot leave a window half counted.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long after the start request `seq` is due at `rate` per second (exact:
/// whole seconds, then the remainder in nanoseconds).
pub(crate) fn due_after(seq: u64, rate: u64) -> Duration {
    let rate = rate.max(1);
    Duration::from_secs(seq / rate) + Duration::from_nanos(seq % rate * 1_000_000_000 / rate)
}

/// Requests due within `duration` at `rate` per second.
pub(crate) fn requests_in(duration: Duration, rate: u64) -> u64 {
    u64::try_from(duration.as_millis() * u128::from(rate) / 1000).unwrap_or(u64::MAX)
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// One row, each cell left-aligned in its column.
pub(crate) fn row(cells: &[String]) -> String {
    let mut line = String::new();
    for cell in cells {
        // Writing to a String cannot fail.
        let _ = write!(line, "{cell:<COLUMN_WIDTH$}");
    }
    line.trim_end().to_owned()
}

/// `soak`: registers the subscriber, posts at the fixed rate, prints the rows,
/// waits for the backlog, removes the subscriber.
pub(crate) async fn run_soak(args: SoakArgs) -> Result<ExitCode, BoxError> {
    if args.interval.is_zero() {
        return Err("--interval must be longer than 0s".into());
    }
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let mut metrics = Connection::new(Arc::clone(&target));
    if read_pending(&mut metrics, &target).await?.is_none() {
        return Ok(metric_missing("soak"));
    }
    let tally = Arc::new(Tally {
        fail_percent: args.fail_percent,
        forget_ids: true,
        ..Tally::default()
    });
    let receiver = start_receiver(Arc::clone(&tally)).await?;
    let mut admin = Admin::new(Arc::clone(&target), args.admin_token.as_deref())?;
    let name = args.subscriber.as_str();
    let url = format!("http://{receiver}/{name}");
    // A leftover of an interrupted run would take the name.
    admin.delete(name).await?;
    let subscriber = serde_json::json!({
        "name": name,
        "event_types": [args.event_type],
        "url": url,
        "backoff": [BACKOFF],
        "max_attempts": MAX_ATTEMPTS,
        "max_in_flight": args.max_in_flight,
    });
    if let Err(err) = admin.create_body(name, &subscriber).await {
        eprintln!("loadgen: {err}");
        return Ok(ExitCode::FAILURE);
    }
    eprintln!(
        "loadgen: soak: {}/s for {} over {} connections; subscriber {name} -> {url} \
         (backoff {BACKOFF} ±20 %, {MAX_ATTEMPTS} attempts, max_in_flight {}); the \
         receiver answers 500 to {} % of deliveries",
        args.rate,
        humantime::format_duration(args.duration),
        args.common.connections,
        args.max_in_flight,
        args.fail_percent,
    );
    let outcome = soak(&args, &target, &tally, &mut metrics).await;
    if let Err(err) = admin.delete(name).await {
        eprintln!("loadgen: warning: could not delete subscriber {name}: {err}");
    }
    outcome
}

/// Posts, prints a row per interval, waits for the backlog, prints the summary.
async fn soak(
    args: &SoakArgs,
    target: &Arc<Target>,
    tally: &Tally,
    metrics: &mut Connection,
) -> Result<ExitCode, BoxError> {
    let run_id = uuid::Uuid::now_v7().to_string();
    let body = event_body(&args.event_type, &run_id, args.common.payload_bytes)?;
    let due = requests_in(args.duration, args.rate);
    let start = Instant::now();
    let pacer = Arc::new(Pacer {
        shared: Arc::new(Shared {
            path: target.path("/webhooks"),
            bodies: vec![body],
            target: Arc::clone(target),
            run_id,
            key_space: None,
            provider: Provider::Intake,
            budget: Budget::Count {
                total: due,
                deadline: start + args.duration + SEND_GRACE,
                next: AtomicU64::new(0),
            },
            retry_rejected: false,
            responses: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        }),
        start,
        rate: args.rate,
        window: Mutex::default(),
    });

    let duration_ms = u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX);
    let bar = progress_bar(duration_ms, "{spinner} soak [{bar:30}] {msg}");
    let progress = spawn_progress(
        bar.clone(),
        Arc::clone(&pacer.shared),
        start,
        |_, started| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    );
    bar.suspend(|| println!("{}", row(&COLUMNS.map(str::to_owned))));
    let tasks: Vec<_> = (0..args.common.connections)
        .map(|_| tokio::spawn(pace(Arc::clone(&pacer))))
        .collect();
    let mut posting = std::pin::pin!(join_all(tasks));
    let mut ticker = tokio::time::interval_at((start + args.interval).into(), args.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rows = Rows::default();
    let opened = loop {
        tokio::select! {
            finished = &mut posting => {
                let mut opened = 0;
                for task in finished {
                    opened += task?;
                }
                break opened;
            }
            _ = ticker.tick() => rows.print(&pacer, tally, &bar),
        }
    };
    // The last, partial interval.
    if pacer.window().sent() > 0 {
        rows.print(&pacer, tally, &bar);
    }
    let posted = start.elapsed();
    progress.abort();
    bar.finish_and_clear();

    let drained = if args.drain_timeout.is_zero() {
        None
    } else {
        let deadline = Instant::now() + args.drain_timeout;
        let ended = Instant::now();
        Some(wait_for_drain(metrics, target, deadline, ended, "soak").await?)
    };

    let mut total = rows.total;
    total.stats.connections_opened = opened;
    let late = total.late_ms();
    let summary = Summary::new(&mut total.stats.latencies_us);
    let accepted = total.stats.accepted();
    print_table(&[
        ("mode", "soak".to_owned()),
        ("rate", format!("{}/s", args.rate)),
        ("conns", args.common.connections.to_string()),
        ("duration", format!("{:.1}s", posted.as_secs_f64())),
        ("sent", total.sent().to_string()),
        ("2xx/s", format!("{:.1}", per_second(accepted, posted))),
        ("p50", format_micros(summary.p50)),
        ("p99", format_micros(summary.p99)),
        ("max", format_micros(summary.max)),
        ("late_ms p99", late),
        ("non-2xx", non_2xx_total(&total.stats)),
        (
            "delivered",
            tally.succeeded.load(Ordering::Relaxed).to_string(),
        ),
        ("refused", tally.failed.load(Ordering::Relaxed).to_string()),
        (
            "backlog drained",
            match drained {
                None => "not waited".to_owned(),
                Some(None) => "no".to_owned(),
                Some(Some(d)) => format!("{:.1}s after", d.as_secs_f64()),
            },
        ),
    ]);
    print_details(&total.stats);
    let unsent = due.saturating_sub(total.sent());
    if unsent > 0 {
        println!("requests due but never sent (the generator fell behind): {unsent}");
    }
    if drained == Some(None) {
        println!(
            "hookbox_events_pending did not reach 0 within --drain-timeout {}",
            humantime::format_duration(args.drain_timeout)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(&total.stats))
}

/// One connection: sends each request it claims when it is due.
async fn pace(pacer: Arc<Pacer>) -> u64 {
    let shared = &pacer.shared;
    let mut conn = Connection::new(Arc::clone(&shared.target));
    while let Some(seq) = shared.budget.claim() {
        let due = pacer.due(seq);
        tokio::time::sleep_until(due.into()).await;
        let late = Instant::now().saturating_duration_since(due);
        let key = format!("{}-{seq}", shared.run_id);
        let mut stats = Stats::default();
        let attempt = post_timed(shared, &mut conn, seq, &key, &mut stats, Some(due)).await;
        pacer.window().add(stats, late);
        if matches!(attempt, Attempt::Failed) {
            // A dead server must not turn the schedule's backlog into a hot loop.
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
    }
    conn.opened
}

/// The rows printed so far: the whole run's window and the receiver's counts at
/// the last row.
#[derive(Default)]
struct Rows {
    total: Window,
    delivered: u64,
    refused: u64,
}

impl Rows {
    /// Prints the current window as a row and adds it to the total.
    fn print(&mut self, pacer: &Pacer, tally: &Tally, bar: &ProgressBar) {
        let mut window = std::mem::take(&mut *pacer.window());
        let (delivered, refused) = (
            tally.succeeded.load(Ordering::Relaxed),
            tally.failed.load(Ordering::Relaxed),
        );
        let late = window.late_ms();
        let summary = Summary::new(&mut window.stats.latencies_us);
        let rejected: u64 = window.stats.rejected().map(|(_, n)| n).sum();
        let line = row(&[
            format!("{:.0}s", pacer.start.elapsed().as_secs_f64()),
            window.sent().to_string(),
            window.stats.accepted().to_string(),
            rejected.to_string(),
            window.stats.errors.to_string(),
            format_micros(summary.p50),
            format_micros(summary.p99),
            format_micros(summary.max),
            late,
            (delivered - self.delivered).to_string(),
            (refused - self.refused).to_string(),
        ]);
        bar.suspend(|| println!("{line}"));
        (self.delivered, self.refused) = (delivered, refused);
        self.total.merge(window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_due_evenly() {
        assert_eq!(due_after(0, 1000), Duration::ZERO);
        assert_eq!(due_after(1, 1000), Duration::from_millis(1));
        assert_eq!(due_after(2500, 1000), Duration::from_millis(2500));
        assert_eq!(due_after(1, 3), Duration::from_nanos(333_333_333));
        assert_eq!(due_after(4, 3), Duration::from_nanos(1_333_333_333));
        assert_eq!(
            due_after(u64::MAX, 1_000_000).as_secs(),
            u64::MAX / 1_000_000
        );
    }

    #[test]
    fn a_run_holds_rate_times_duration_requests() {
        assert_eq!(requests_in(Duration::from_secs(3600), 2000), 7_200_000);
        assert_eq!(requests_in(Duration::from_millis(1500), 3), 4);
        assert_eq!(requests_in(Duration::ZERO, 10), 0);
    }

    #[test]
    fn rows_line_up_under_the_header() {
        let header = row(&COLUMNS.map(str::to_owned));
        let cells = [
            "3600s", "120000", "120000", "0", "0", "1.85ms", "12.3ms", "1.20s", "0.9", "131000",
            "13100",
        ]
        .map(str::to_owned);
        let line = row(&cells);
        for (i, (column, cell)) in COLUMNS.iter().zip(&cells).enumerate() {
            let at = i * COLUMN_WIDTH;
            assert!(header[at..].starts_with(column), "{column} at {at}");
            assert!(line[at..].starts_with(cell.as_str()), "{cell} at {at}");
        }
    }

    #[test]
    fn lateness_is_its_99th_percentile_in_ms() {
        let mut window = Window::default();
        assert_eq!(window.late_ms(), "-");
        for us in (1..=100).rev() {
            window.add(Stats::default(), Duration::from_micros(us * 100));
        }
        assert_eq!(window.late_ms(), "9.9");
    }
}
