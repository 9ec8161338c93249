//! `storm`: a retry storm against intake, beside the unique-key intake rate of the
//! same run.
//!
//! Three phases on one hookbox, one after another:
//!
//! 1. **seed**: posts `--keys` events (default 1,000) with keys `<run>-k-<n>`,
//!    retrying 429/503 with the same key, so that every key of the storm is known;
//! 2. **unique**: posts for `--duration`, every request a new key (`<run>-u-<n>`),
//!    as `ingest` does: the rate of new events;
//! 3. **storm**: posts for `--duration`, every request one of the seeded keys again
//!    (`<run>-k-<n mod keys>`) with the same body: retries, which hookbox answers 200
//!    with the event's current status.
//!
//! It prints one table row per timed phase and the ratio of the storm's rate to the
//! unique rate, with the storm's answers by status (all 200 when every retry was
//! recognised).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::BoxError;
use crate::cli::StormArgs;
use crate::conn::{Target, check_reachable};
use crate::post::{Budget, Posting, Shared, Stats, event_body, post_counted, post_events};
use crate::progress::{progress_bar, spawn_progress};
use crate::report::{Summary, format_micros, non_2xx_total, per_second, print_details};

/// How long the seed phase may take before the run gives up.
const SEED_TIMEOUT: Duration = Duration::from_secs(120);

/// One timed phase's figures.
struct Phase {
    name: &'static str,
    elapsed: Duration,
    stats: Stats,
}

impl Phase {
    fn rate(&self) -> f64 {
        per_second(self.stats.responses(), self.elapsed)
    }
}

/// `storm`: seeds the keys, measures the unique-key rate, then the retry storm.
pub(crate) async fn run_storm(args: StormArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let run_id = uuid::Uuid::now_v7().to_string();
    let body = event_body(&args.event_type, &run_id, args.common.payload_bytes)?;
    let keys = args.keys;

    let started = Instant::now();
    let plan = Posting {
        total: keys,
        deadline: started + SEED_TIMEOUT,
        connections: args.common.connections,
    };
    let seed_prefix = format!("{run_id}-k");
    let seeded = post_counted(
        &target,
        seed_prefix.clone(),
        vec![body.clone()],
        &plan,
        started,
        "storm seed",
    )
    .await?;
    if seeded.accepted() < keys {
        eprintln!(
            "loadgen: only {} of {keys} seed events were accepted",
            seeded.accepted()
        );
        print_details(&seeded);
        return Ok(ExitCode::FAILURE);
    }

    let unique = timed(&target, &args, "unique", format!("{run_id}-u"), None, &body).await?;
    let storm = timed(&target, &args, "storm", seed_prefix, Some(keys), &body).await?;

    print_rows(&args, keys, &mut [&unique, &storm]);
    let ratio = if unique.rate() > 0.0 {
        storm.rate() / unique.rate()
    } else {
        0.0
    };
    println!("storm / unique: {ratio:.2}x");
    let by_status: Vec<String> = storm
        .stats
        .statuses
        .iter()
        .map(|(status, n)| format!("{status}: {n}"))
        .collect();
    println!("storm answers by status: {}", by_status.join(", "));
    println!(
        "connection errors: unique {}, storm {}",
        unique.stats.errors, storm.stats.errors
    );
    if let Some(err) = unique
        .stats
        .first_error
        .as_ref()
        .or(storm.stats.first_error.as_ref())
    {
        println!("first connection error: {err}");
    }
    let answered = unique.stats.responses() > 0 && storm.stats.responses() > 0;
    Ok(if answered {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Posts for `--duration` over `--connections`: new keys under `prefix`, or (with
/// `key_space`) the first `key_space` of them again and again.
async fn timed(
    target: &Arc<Target>,
    args: &StormArgs,
    name: &'static str,
    prefix: String,
    key_space: Option<u64>,
    body: &Bytes,
) -> Result<Phase, BoxError> {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        path: target.path("/webhooks"),
        bodies: vec![body.clone()],
        target: Arc::clone(target),
        run_id: prefix,
        key_space,
        provider: crate::post::Provider::Intake,
        budget: Budget::Until {
            deadline: started + args.duration,
            next: AtomicU64::new(0),
        },
        retry_rejected: false,
        responses: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
    });
    let duration_ms = u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX);
    let bar = progress_bar(
        duration_ms,
        &format!("{{spinner}} storm {name} [{{bar:30}}] {{msg}}"),
    );
    let progress = spawn_progress(bar.clone(), Arc::clone(&shared), started, |_, started| {
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
    });
    let stats = post_events(shared, args.common.connections).await;
    progress.abort();
    bar.finish_and_clear();
    Ok(Phase {
        name,
        elapsed: started.elapsed(),
        stats: stats?,
    })
}

/// The results table: a header and one row per phase.
fn print_rows(args: &StormArgs, keys: u64, phases: &mut [&Phase]) {
    let header = [
        "phase", "conns", "keys", "duration", "requests", "req/s", "p50", "p99", "non-2xx",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for phase in phases.iter() {
        let mut latencies = phase.stats.latencies_us.clone();
        let summary = Summary::new(&mut latencies);
        rows.push(vec![
            phase.name.to_owned(),
            args.common.connections.to_string(),
            if phase.name == "storm" {
                keys.to_string()
            } else {
                "new".to_owned()
            },
            format!("{:.1}s", phase.elapsed.as_secs_f64()),
            phase.stats.responses().to_string(),
            format!("{:.1}", phase.rate()),
            format_micros(summary.p50),
            format_micros(summary.p99),
            non_2xx_total(&phase.stats),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0) + 2)
        .collect();
    for row in rows {
        let line: String = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.trim_end());
    }
}
