//! `fill`: post a fixed number of events and stop — a backlog for hookbox to hold
//! (run it against an instance with `WORKER_COUNT=0`). `scripts/bench.sh recovery`
//! fills this way, then restarts hookbox and measures its memory and time to ready.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use crate::BoxError;
use crate::cli::FillArgs;
use crate::conn::{Target, check_reachable};
use crate::post::{Posting, event_body, post_counted};
use crate::report::{
    Summary, exit_code, format_micros, non_2xx_total, per_second, print_details, print_table,
};

/// `fill`: posts N events (429/503 and failures retried with the same key), prints
/// the rate.
pub(crate) async fn run_fill(args: FillArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let run_id = uuid::Uuid::now_v7().to_string();
    let bodies = vec![event_body(
        &args.event_type,
        &run_id,
        args.common.payload_bytes,
    )?];
    let started = Instant::now();
    let plan = Posting {
        total: args.events,
        deadline: started + args.timeout,
        connections: args.common.connections,
    };
    let mut stats = post_counted(&target, run_id, bodies, &plan, started, "fill").await?;
    let posting = started.elapsed();
    let summary = Summary::new(&mut stats.latencies_us);
    let accepted = stats.accepted();
    print_table(&[
        ("mode", "fill".to_owned()),
        ("conns", args.common.connections.to_string()),
        ("events", accepted.to_string()),
        ("posting", format!("{:.1}s", posting.as_secs_f64())),
        (
            "intake req/s",
            format!("{:.1}", per_second(accepted, posting)),
        ),
        ("p50", format_micros(summary.p50)),
        ("p99", format_micros(summary.p99)),
        ("non-2xx", non_2xx_total(&stats)),
    ]);
    print_details(&stats);
    if accepted < args.events {
        println!(
            "only {accepted} of {} events were accepted before the timeout",
            args.events
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(&stats))
}
