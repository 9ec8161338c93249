//! `e2e`: post a fixed number of events, then wait until `hookbox_events_pending`
//! is 0 and report end-to-end events per second.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::BoxError;
use crate::cli::E2eArgs;
use crate::conn::{Connection, Target, check_reachable, get_request};
use crate::post::{Posting, event_body, post_counted};
use crate::report::{
    Summary, exit_code, format_micros, non_2xx_total, per_second, print_details, print_table,
};

/// The gauge `e2e` waits on.
pub(crate) const PENDING_METRIC: &str = "hookbox_events_pending";
/// How often `e2e` polls `/metrics` while waiting for the backlog to drain.
pub(crate) const METRICS_POLL: Duration = Duration::from_millis(100);

/// `e2e`: posts N events, waits until `hookbox_events_pending` is 0, prints rates.
pub(crate) async fn run_e2e(args: E2eArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let mut metrics_conn = Connection::new(Arc::clone(&target));
    // Check the gauge before posting anything: without it there is nothing to wait on.
    match read_pending(&mut metrics_conn, &target).await? {
        None => return Ok(metric_missing("e2e")),
        Some(pending) if pending > 0.0 => eprintln!(
            "loadgen: warning: {PENDING_METRIC} is already {pending} before posting; \
             the drain time includes that backlog"
        ),
        Some(_) => {}
    }

    let run_id = uuid::Uuid::now_v7().to_string();
    let bodies = vec![event_body(
        &args.event_type,
        &run_id,
        args.common.payload_bytes,
    )?];
    let started = Instant::now();
    let deadline = started + args.timeout;
    let plan = Posting {
        total: args.events,
        deadline,
        connections: args.common.connections,
    };
    let stats = post_counted(&target, run_id, bodies, &plan, started, "e2e").await;
    let mut stats = stats?;
    let posting = started.elapsed();

    let done = wait_for_listing(&mut metrics_conn, &target, deadline, started).await;
    let drained = wait_for_drain(&mut metrics_conn, &target, deadline, started, "e2e").await?;
    let summary = Summary::new(&mut stats.latencies_us);
    let accepted = stats.accepted();
    let total = drained.unwrap_or_else(|| started.elapsed());
    let not_drained = "timeout".to_owned();
    print_table(&[
        ("mode", "e2e".to_owned()),
        ("conns", args.common.connections.to_string()),
        ("events", accepted.to_string()),
        ("posting", format!("{:.1}s", posting.as_secs_f64())),
        (
            "intake req/s",
            format!("{:.1}", per_second(accepted, posting)),
        ),
        ("p50", format_micros(summary.p50)),
        ("p99", format_micros(summary.p99)),
        (
            "to pending=0",
            drained.map_or(not_drained.clone(), |d| format!("{:.1}s", d.as_secs_f64())),
        ),
        (
            "events/s e2e",
            drained.map_or(not_drained, |d| format!("{:.1}", per_second(accepted, d))),
        ),
        (
            "to done",
            done.map_or("-".to_owned(), |d| format!("{:.2}s", d.as_secs_f64())),
        ),
        (
            "events/s to done",
            done.map_or("-".to_owned(), |d| {
                format!("{:.1}", per_second(accepted, d))
            }),
        ),
        ("non-2xx", non_2xx_total(&stats)),
    ]);
    print_details(&stats);
    if accepted < args.events {
        println!(
            "only {accepted} of {} events were accepted before the timeout",
            args.events
        );
    }
    if drained.is_none() {
        println!(
            "{PENDING_METRIC} did not reach 0 within --timeout {} ({:.1}s elapsed)",
            humantime::format_duration(args.timeout),
            total.as_secs_f64()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(&stats))
}

/// Polls `/metrics` until the pending gauge is 0; returns the time since
/// `started`, or `None` at the deadline. `mode` labels the progress line.
pub(crate) async fn wait_for_drain(
    conn: &mut Connection,
    target: &Target,
    deadline: Instant,
    started: Instant,
    mode: &str,
) -> Result<Option<Duration>, BoxError> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!("{{spinner}} {mode} drain {{msg}}"))
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let mut ticker = tokio::time::interval(METRICS_POLL);
    let result = loop {
        ticker.tick().await;
        let now = Instant::now();
        match read_pending(conn, target).await {
            Ok(Some(pending)) if pending <= 0.0 => break Ok(Some(now.duration_since(started))),
            Ok(Some(pending)) => bar.set_message(format!(
                "{:>5.1}s  {PENDING_METRIC} = {pending}",
                started.elapsed().as_secs_f64()
            )),
            Ok(None) => break Err(format!("{PENDING_METRIC} disappeared from /metrics").into()),
            // A failed scrape is retried on the next tick.
            Err(err) => bar.set_message(format!("scraping /metrics failed: {err}")),
        }
        if now >= deadline {
            break Ok(None);
        }
        bar.tick();
    };
    bar.finish_and_clear();
    result
}

/// Polls the listing until no event is `pending` or `processing` (`GET
/// /webhooks?status=…&limit=1`, read from the database as it is, every
/// [`LISTING_POLL`]); the time since `started`. The pending gauge is computed at
/// most once a second, so `wait_for_drain` can see the end up to a second late;
/// this sees it within a poll. `None` at the deadline, or when the listing is not
/// open (`ADMIN_TOKEN` set) or not hookbox's.
pub(crate) async fn wait_for_listing(
    conn: &mut Connection,
    target: &Target,
    deadline: Instant,
    started: Instant,
) -> Option<Duration> {
    let mut ticker = tokio::time::interval(LISTING_POLL);
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let mut done = true;
        for status in ["pending", "processing"] {
            let path = format!("/webhooks?status={status}&limit=1");
            let request = get_request(target, &path).ok()?;
            let response = conn.send(request).await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            done &= listing_is_empty(response.body())?;
        }
        if done {
            return Some(now.duration_since(started));
        }
        if now >= deadline {
            return None;
        }
    }
}

/// How often `e2e` reads the listing while waiting for the last event.
pub(crate) const LISTING_POLL: Duration = Duration::from_millis(50);

/// Whether a listing page (`{"items": [...]}`) has no item; `None` when it is not one.
fn listing_is_empty(body: &[u8]) -> Option<bool> {
    let page: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(page.get("items")?.as_array()?.is_empty())
}

/// Scrapes `/metrics` once; `None` when the pending gauge is not in it.
pub(crate) async fn read_pending(
    conn: &mut Connection,
    target: &Target,
) -> Result<Option<f64>, BoxError> {
    let response = conn.send(get_request(target, "/metrics")?).await?;
    if !response.status().is_success() {
        return Err(format!("GET /metrics answered {}", response.status()).into());
    }
    let text =
        std::str::from_utf8(response.body()).map_err(|e| format!("/metrics is not UTF-8: {e}"))?;
    Ok(parse_gauge(text, PENDING_METRIC))
}

/// Finds `name` in Prometheus text format; sums its samples when it has labels.
pub(crate) fn parse_gauge(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `rest` is ` 123`, `{label="x"} 123`, or the tail of a longer name.
        let value = if let Some(labelled) = rest.strip_prefix('{') {
            labelled.rsplit_once('}').map(|(_, value)| value)
        } else {
            rest.starts_with([' ', '\t']).then_some(rest)
        };
        let Some(value) = value.and_then(|v| v.split_whitespace().next()) else {
            continue;
        };
        if let Ok(value) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

/// Reports the missing gauge (`mode` is what needs it) and returns the failure
/// exit code.
pub(crate) fn metric_missing(mode: &str) -> ExitCode {
    eprintln!(
        "loadgen: GET /metrics has no `{PENDING_METRIC}` gauge; {mode} cannot tell when \
         the events are processed (is METRICS_PUBLIC=false, or is this not hookbox?)"
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_is_empty_only_without_items() {
        assert_eq!(
            listing_is_empty(br#"{"items": [], "next_cursor": null}"#),
            Some(true)
        );
        assert_eq!(
            listing_is_empty(br#"{"items": [{"id": "x"}]}"#),
            Some(false)
        );
        assert_eq!(listing_is_empty(br#"{"type": "about:blank"}"#), None);
        assert_eq!(listing_is_empty(b"not json"), None);
    }

    #[test]
    fn gauge_parsing() {
        let text = "# HELP hookbox_events_pending x\n# TYPE hookbox_events_pending gauge\n\
                    hookbox_events_pending_total 9\nhookbox_events_pending 123\n";
        assert_eq!(parse_gauge(text, PENDING_METRIC), Some(123.0));
        let labelled =
            "hookbox_events_pending{shard=\"a\"} 2\nhookbox_events_pending{shard=\"b\"} 3e0\n";
        assert_eq!(parse_gauge(labelled, PENDING_METRIC), Some(5.0));
        assert_eq!(parse_gauge("hookbox_queue_depth 0\n", PENDING_METRIC), None);
    }
}
