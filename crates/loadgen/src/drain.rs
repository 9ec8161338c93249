//! `drain`: HTTP delivery from a backlog, beside the bare reqwest client of
//! [`crate::reference`] (issue 28, item 2).
//!
//! The built-in receiver listens on `--listen`, the address that the `kind =
//! "http"` handler manifests of the instance under test name (`scripts/bench.sh
//! drain` writes two, so every event is two deliveries). Started before that
//! instance, `drain` waits for `--deliveries` distinct deliveries and times them
//! from the first one's arrival to the last one's; then, on the same receiver, the
//! reference client posts as many requests, `--in-flight` at once, and the table
//! gives both rates and their ratio.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::BoxError;
use crate::cli::DrainArgs;
use crate::deliver::wait_for_deliveries;
use crate::receiver::{Tally, start_receiver_on};
use crate::reference::run_references;
use crate::report::{per_second, print_table, ratio};

/// `drain`: see the module docs.
pub(crate) async fn run_drain(args: DrainArgs) -> Result<ExitCode, BoxError> {
    let tally = Arc::new(Tally::default());
    let receiver = start_receiver_on(Arc::clone(&tally), args.listen).await?;
    eprintln!(
        "loadgen: receiving on {receiver}; waiting for {} deliveries",
        args.deliveries
    );
    let started = Instant::now();
    let complete =
        wait_for_deliveries(&tally, args.deliveries, started + args.timeout, started).await;
    let (first, last) = {
        let inner = tally.lock();
        (inner.first_new, inner.last_new)
    };
    let delivered = tally.unique.load(Ordering::Relaxed);
    let requests = tally.requests.load(Ordering::Relaxed);
    let drained = first.zip(last).map(|(f, l)| l.saturating_duration_since(f));
    let hookbox_rate = drained.map_or(0.0, |d| per_second(delivered, d));
    let references = run_references(
        receiver,
        args.deliveries,
        args.in_flight,
        args.payload_bytes,
        args.reference_runs,
    )
    .await?;
    let reference_rate = references.median();
    print_table(&[
        ("mode", "drain".to_owned()),
        ("deliveries", format!("{delivered}/{}", args.deliveries)),
        (
            "first to last",
            drained.map_or("-".to_owned(), |d| format!("{:.2}s", d.as_secs_f64())),
        ),
        ("hookbox deliveries/s", format!("{hookbox_rate:.1}")),
        ("reference deliveries/s", format!("{reference_rate:.1}")),
        (
            "hookbox / reference",
            format!("{:.2}x", ratio(hookbox_rate, reference_rate)),
        ),
    ]);
    let answered: Vec<String> = references
        .runs
        .iter()
        .map(|r| format!("{} in {:.2}s", r.delivered, r.elapsed.as_secs_f64()))
        .collect();
    println!(
        "duplicate deliveries: {}; reference (the median of {} runs of {} deliveries, \
         {} in flight): {} answered 2xx, {} deliveries/s",
        requests.saturating_sub(delivered),
        references.runs.len(),
        args.deliveries,
        args.in_flight,
        answered.join(", "),
        references.listed(),
    );
    if !complete {
        println!(
            "only {delivered} of {} deliveries arrived within --timeout {}",
            args.deliveries,
            humantime::format_duration(args.timeout)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
