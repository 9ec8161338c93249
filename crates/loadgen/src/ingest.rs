//! `ingest`: post for a fixed time, report throughput and latency.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use crate::BoxError;
use crate::cli::IngestArgs;
use crate::conn::{Target, check_reachable};
use crate::post::Provider;
use crate::post::{Budget, Shared, event_body, post_events};
use crate::progress::{progress_bar, spawn_progress};
use crate::report::{
    Summary, exit_code, format_micros, non_2xx_total, per_second, print_details, print_table,
};
use crate::sources::{github_signature, presign, provider_body};

/// `ingest`: posts for a fixed duration and prints throughput and latency.
pub(crate) async fn run_ingest(args: IngestArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let run_id = uuid::Uuid::now_v7().to_string();
    let (path, bodies, provider) = match (&args.source, args.kind.as_str()) {
        (None, _) => (
            target.path("/webhooks"),
            vec![event_body(
                &args.event_type,
                &run_id,
                args.common.payload_bytes,
            )?],
            Provider::Intake,
        ),
        (Some(source), "github") => {
            let body = provider_body(&run_id, args.common.payload_bytes)?;
            let signature = github_signature(&args.secret, &body)?;
            (
                target.path(&format!("/ingest/{source}")),
                vec![body],
                Provider::Github(signature),
            )
        }
        (Some(source), kind) => {
            let (bodies, headers) =
                presign(kind, &run_id, args.common.payload_bytes, args.requests)?;
            (
                target.path(&format!("/ingest/{source}")),
                bodies,
                Provider::Presigned(headers),
            )
        }
    };
    let mode = match &args.source {
        None => "ingest".to_owned(),
        Some(source) => format!("ingest --source {source} ({})", args.kind),
    };
    // Presigned requests are used once each: the run ends when they are spent.
    let budget = match provider {
        Provider::Presigned(_) => Budget::Count {
            total: bodies.len() as u64,
            deadline: Instant::now() + args.duration,
            next: AtomicU64::new(0),
        },
        _ => Budget::Until {
            deadline: Instant::now() + args.duration,
            next: AtomicU64::new(0),
        },
    };
    let started = Instant::now();
    let shared = Arc::new(Shared {
        path,
        bodies,
        target,
        run_id,
        key_space: None,
        provider,
        budget,
        retry_rejected: false,
        responses: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
    });

    let duration_ms = u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX);
    let bar = progress_bar(duration_ms, "{spinner} ingest [{bar:30}] {msg}");
    let progress = spawn_progress(bar.clone(), Arc::clone(&shared), started, |_, started| {
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
    });
    let stats = post_events(shared, args.common.connections).await;
    progress.abort();
    bar.finish_and_clear();
    let mut stats = stats?;
    let elapsed = started.elapsed();

    let summary = Summary::new(&mut stats.latencies_us);
    let requests = stats.responses();
    print_table(&[
        ("mode", mode),
        ("conns", args.common.connections.to_string()),
        ("duration", format!("{:.1}s", elapsed.as_secs_f64())),
        ("requests", requests.to_string()),
        ("req/s", format!("{:.1}", per_second(requests, elapsed))),
        ("p50", format_micros(summary.p50)),
        ("p90", format_micros(summary.p90)),
        ("p99", format_micros(summary.p99)),
        ("max", format_micros(summary.max)),
        ("non-2xx", non_2xx_total(&stats)),
    ]);
    print_details(&stats);
    Ok(exit_code(&stats))
}
