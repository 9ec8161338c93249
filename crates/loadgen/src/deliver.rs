//! `deliver`: HTTP delivery end to end, through three subscribers and the built-in
//! receiver.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::BoxError;
use crate::admin::{Admin, BENCH_SUBSCRIBERS, Shape};
use crate::cli::DeliverArgs;
use crate::conn::{Target, check_reachable};
use crate::post::{Posting, event_body, post_counted};
use crate::progress::progress_bar;
use crate::receiver::{Tally, start_receiver};
use crate::report::{exit_code, non_2xx_total, per_second, print_details, print_table};

/// The event types `deliver` posts, alternately: `two` reaches 2 subscribers,
/// `three` reaches 3.
pub(crate) const DELIVER_TYPES: [(&str, u64); 2] =
    [("bench.deliver.two", 2), ("bench.deliver.three", 3)];
/// How often `deliver` checks the receiver's count while waiting.
pub(crate) const DELIVERY_POLL: Duration = Duration::from_millis(50);
/// Deliveries that `events` events fan out to: even ones reach 2 subscribers,
/// odd ones 3.
pub(crate) fn expected_deliveries(events: u64) -> u64 {
    let [(_, even), (_, odd)] = DELIVER_TYPES;
    events.div_ceil(2) * even + events / 2 * odd
}

/// `deliver`: subscribers on a built-in receiver, N events, deliveries per second.
pub(crate) async fn run_deliver(args: DeliverArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let tally = Arc::new(Tally::default());
    let receiver = start_receiver(Arc::clone(&tally)).await?;
    let mut admin = Admin::new(Arc::clone(&target), args.admin_token.as_deref())?;
    let shape = if args.bench_shape {
        Shape {
            filter: Some(serde_json::from_str(crate::pipeline::BENCH_FILTER)?),
            transform: Some(crate::pipeline::BENCH_TRANSFORM.to_owned()),
            max_in_flight: args.max_in_flight,
        }
    } else {
        Shape {
            filter: args
                .filter
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| format!("--filter is not JSON: {e}"))?,
            transform: args
                .transform
                .as_ref()
                .map(std::fs::read_to_string)
                .transpose()
                .map_err(|e| format!("--transform: {e}"))?,
            max_in_flight: args.max_in_flight,
        }
    };
    // Leftovers of an interrupted run would take the names.
    admin.delete_all().await;
    for (name, patterns) in BENCH_SUBSCRIBERS {
        let url = format!("http://{receiver}/{name}");
        if let Err(err) = admin.create(name, patterns, &url, &shape).await {
            eprintln!("loadgen: {err}");
            admin.delete_all().await;
            return Ok(ExitCode::FAILURE);
        }
    }
    let outcome = deliver_events(&args, &target, &tally).await;
    admin.delete_all().await;
    let (code, rate) = outcome?;
    if args.reference {
        compare_with_reference(&args, receiver, rate).await?;
    }
    Ok(code)
}

/// `--reference`: as many deliveries from the bare reqwest client of
/// [`crate::reference`] to the same receiver, `--reference-runs` times, and
/// hookbox's end-to-end rate over the median of the reference's.
async fn compare_with_reference(
    args: &DeliverArgs,
    receiver: std::net::SocketAddr,
    hookbox_rate: f64,
) -> Result<(), BoxError> {
    let total = expected_deliveries(args.events);
    let runs = crate::reference::run_references(
        receiver,
        total,
        args.common.connections,
        args.common.payload_bytes,
        args.reference_runs,
    )
    .await?;
    let reference_rate = runs.median();
    println!(
        "reference (bare reqwest, {} in flight, same receiver, {total} deliveries a run): {} \
         deliveries/s, median {reference_rate:.1} deliveries/s; hookbox / reference {:.2}x",
        args.common.connections,
        runs.listed(),
        crate::report::ratio(hookbox_rate, reference_rate),
    );
    Ok(())
}

/// `deliver`, with `+filter` and `+transform` when the subscribers have them.
fn mode(args: &DeliverArgs) -> String {
    let mut mode = "deliver".to_owned();
    if args.bench_shape {
        mode.push_str("+filter+transform");
    }
    if args.filter.is_some() {
        mode.push_str("+filter");
    }
    if args.transform.is_some() {
        mode.push_str("+transform");
    }
    mode
}

/// Posts the events and waits for the deliveries (the subscribers exist); the exit
/// code and the deliveries per second from the first post to the last delivery.
pub(crate) async fn deliver_events(
    args: &DeliverArgs,
    target: &Arc<Target>,
    tally: &Tally,
) -> Result<(ExitCode, f64), BoxError> {
    let run_id = uuid::Uuid::now_v7().to_string();
    let bodies = DELIVER_TYPES
        .iter()
        .map(|(event_type, _)| event_body(event_type, &run_id, args.common.payload_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let deadline = started + args.timeout;
    let plan = Posting {
        total: args.events,
        deadline,
        connections: args.common.connections,
    };
    let stats = post_counted(target, run_id, bodies, &plan, started, "deliver").await;
    let stats = stats?;
    let posting = started.elapsed();
    let accepted = stats.accepted();
    let expected = expected_deliveries(args.events);

    let complete = wait_for_deliveries(tally, expected, deadline, started).await;
    let (per_path, last_new) = {
        let inner = tally.lock();
        (inner.per_path.clone(), inner.last_new)
    };
    let delivered = tally.unique.load(Ordering::Relaxed);
    let requests = tally.requests.load(Ordering::Relaxed);
    let to_last = last_new.map(|t| t.saturating_duration_since(started));
    let rate = to_last.map_or(0.0, |d| per_second(delivered, d));
    print_table(&[
        ("mode", mode(args)),
        ("conns", args.common.connections.to_string()),
        ("events", accepted.to_string()),
        ("deliveries", format!("{delivered}/{expected}")),
        (
            "first post to last delivery",
            to_last.map_or("-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64())),
        ),
        (
            "deliveries/s e2e",
            to_last.map_or("-".to_owned(), |d| {
                format!("{:.1}", per_second(delivered, d))
            }),
        ),
        (
            "intake req/s",
            format!("{:.1}", per_second(accepted, posting)),
        ),
        ("non-2xx", non_2xx_total(&stats)),
    ]);
    let by_subscriber: Vec<String> = per_path
        .iter()
        .map(|(path, n)| format!("{}: {n}", path.trim_start_matches('/')))
        .collect();
    println!("deliveries by subscriber: {}", by_subscriber.join(", "));
    println!(
        "duplicate deliveries: {}",
        requests.saturating_sub(delivered)
    );
    print_details(&stats);
    if accepted < args.events {
        println!(
            "only {accepted} of {} events were accepted before the timeout",
            args.events
        );
    }
    if !complete {
        println!(
            "only {delivered} of {expected} deliveries arrived within --timeout {}",
            humantime::format_duration(args.timeout)
        );
        return Ok((ExitCode::FAILURE, rate));
    }
    Ok((exit_code(&stats), rate))
}

/// Waits until the receiver has `expected` distinct deliveries; false at the deadline.
pub(crate) async fn wait_for_deliveries(
    tally: &Tally,
    expected: u64,
    deadline: Instant,
    started: Instant,
) -> bool {
    let bar = progress_bar(
        expected,
        "{spinner} deliver wait [{bar:30}] {pos}/{len} deliveries  {msg}",
    );
    let mut ticker = tokio::time::interval(DELIVERY_POLL);
    let (mut last_count, mut last_at) = (0_u64, Instant::now());
    let complete = loop {
        ticker.tick().await;
        let count = tally.unique.load(Ordering::Relaxed);
        if count >= expected {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        let now = Instant::now();
        let rate = (count - last_count) as f64 / now.duration_since(last_at).as_secs_f64();
        (last_count, last_at) = (count, now);
        bar.set_position(count);
        bar.set_message(format!(
            "{:>5.1}s  {rate:.0} deliveries/s",
            started.elapsed().as_secs_f64()
        ));
    };
    bar.finish_and_clear();
    complete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fan_out_is_two_and_a_half_on_average() {
        assert_eq!(expected_deliveries(20_000), 50_000);
        assert_eq!(expected_deliveries(1), 2);
        assert_eq!(expected_deliveries(3), 7);
        assert_eq!(expected_deliveries(0), 0);
    }
}
