//! `pipeline`: what a filter and a transform cost per event, in-process, with
//! hookbox's own code (the library): a filter compiled once and evaluated on an
//! event's document; the document built from a 1 KB payload; a transform that
//! renames two fields of that payload run on warm runtimes, as an http delivery
//! runs it. Prints one row per operation: runs, median, p99 and mean.

use std::process::ExitCode;
use std::time::Instant;

use hookbox::registry::filter::{self, Filter};
use hookbox::registry::kinds::shaped;
use hookbox::transform::Transform;

use crate::BoxError;
use crate::cli::PipelineArgs;
use crate::post::event_body;

/// The filter `scripts/bench.sh transforms` gives every subscriber: it matches
/// every event `deliver` posts, after looking at two fields.
pub(crate) const BENCH_FILTER: &str = r#"{"event_type": {"$startsWith": "bench.deliver."}, "payload": {"source": "hookbox-loadgen"}}"#;

/// The transform it gives them: renames two fields of the payload.
pub(crate) const BENCH_TRANSFORM: &str = "function handler(webhook) {\n  \
    const p = webhook.payload.payload;\n  p.origin = p.source; delete p.source;\n  \
    p.run = p.run_id; delete p.run_id;\n  return webhook;\n}\n";

/// `pipeline`: times each operation `--runs` times and prints the table.
pub(crate) fn run_pipeline(args: PipelineArgs) -> Result<ExitCode, BoxError> {
    let envelope: serde_json::Value =
        serde_json::from_slice(&event_body("bench.deliver.two", "run", args.payload_bytes)?)?;
    let payload = envelope["payload"].to_string();
    let filter = Filter::parse(BENCH_FILTER)?;
    let document = filter::document("bench.deliver.two", None, &payload);
    let transform = Transform::compile("bench.js", BENCH_TRANSFORM)?;
    let url = reqwest_url("http://127.0.0.1:9/bench-sub-1")?;
    let body = format!(
        r#"{{"id":"0192","event_type":"bench.deliver.two","payload":{payload},"created_at":"2026-11-27T00:00:00Z"}}"#
    );
    let input = shaped::input("bench.deliver.two", &body, &url);
    let mut rows = Vec::new();
    rows.push(time("filter: evaluate", args.runs * 10, || {
        assert!(filter.matches(&document));
    }));
    rows.push(time("filter: parse payload + evaluate", args.runs, || {
        assert!(filter.matches(&filter::document("bench.deliver.two", None, &payload)));
    }));
    rows.push(time("transform: run (warm)", args.runs, || {
        let out = transform.run(&input).expect("the bench transform runs");
        let shaped = shaped::shape(&out, &body, &url).expect("an answer to send");
        assert!(matches!(shaped, shaped::Shaped::Send(_)));
    }));
    println!(
        "{:<36} {:>9} {:>10} {:>10} {:>10}",
        "operation", "runs", "median", "p99", "mean"
    );
    for (name, runs, median, p99, mean) in rows {
        println!("{name:<36} {runs:>9} {median:>8.2}µs {p99:>8.2}µs {mean:>8.2}µs");
    }
    Ok(ExitCode::SUCCESS)
}

fn reqwest_url(text: &str) -> Result<hookbox::registry::kinds::shaped::Url, BoxError> {
    Ok(text.parse()?)
}

/// Runs `f` `runs` times, each timed; (name, runs, median, p99, mean) in µs.
fn time(
    name: &'static str,
    runs: usize,
    mut f: impl FnMut(),
) -> (&'static str, usize, f64, f64, f64) {
    let mut took = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f();
        took.push(started.elapsed().as_nanos() as f64 / 1000.0);
    }
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 - 1.0) * q) as usize];
    let mean = took.iter().sum::<f64>() / took.len() as f64;
    (name, runs, at(0.5), at(0.99), mean)
}
