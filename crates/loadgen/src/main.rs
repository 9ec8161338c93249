//! Load generator for hookbox.
//!
//! Run with: cargo run --release -p loadgen -- ingest --url http://127.0.0.1:8000 --duration 10s --connections 64
//! (`scripts/bench.sh` builds it, starts hookbox and runs it).
//!
//! The modes:
//!
//! - `ingest` posts webhooks for a fixed time and reports throughput, latency
//!   percentiles and non-2xx statuses. Every connection is one task with its own
//!   HTTP/1.1 keep-alive connection and one request in flight. With `--source
//!   NAME` it posts to a `kind = "github"` source (`POST /ingest/NAME`) as GitHub
//!   does: the payload as the body, signed with `--secret` in
//!   `X-Hub-Signature-256`, a unique `X-GitHub-Delivery` per request — so the cost
//!   of verifying and identifying a source delivery shows against `/webhooks`;
//!   `--kind discord` or `--kind sendgrid` posts requests signed beforehand with
//!   ed25519 or ECDSA P-256 instead (the public-key kinds' cost).
//! - `e2e` posts a fixed number of events (retrying 429/503 answers with the same
//!   idempotency key), then polls `GET /metrics` until the gauge
//!   `hookbox_events_pending` is 0 and reports end-to-end events per second.
//! - `deliver` measures HTTP delivery: it starts a fast built-in receiver on
//!   127.0.0.1 (answers 200, counts each (subscriber, `webhook-id`) once), registers
//!   three subscribers through `POST /subscribers` (`bench-sub-1` and `bench-sub-2`
//!   take `bench.deliver.*`, `bench-sub-3` only `bench.deliver.three`), posts N
//!   events alternating `bench.deliver.two` and `bench.deliver.three` (fan-out 2.5 on
//!   average), waits until the receiver has every delivery, reports deliveries per
//!   second end to end, and deletes its subscribers. hookbox must let http handlers
//!   reach loopback: run it with `ALLOWED_TARGETS=127.0.0.0/8`.
//! - `fill` posts a fixed number of events (retrying 429/503 like `e2e`) and stops:
//!   a backlog for an instance without workers (`scripts/bench.sh recovery`
//!   measures memory and time to ready with it).
//!
//! - `storm` measures a retry storm: it seeds `--keys` events (default 1,000), posts
//!   new keys for `--duration`, then re-posts the seeded keys (same body) for
//!   `--duration`, and reports both rates and their ratio, from the same run.
//!
//! Every request (but the storm's) carries a unique `Idempotency-Key` (`<run id>-<sequence>`), so every
//! accepted request creates a new event. The progress line goes to stderr, the
//! results table to stdout.
//!
//! - `soak` holds hookbox under a steady load for a long time: it starts the
//!   built-in receiver answering 500 to `--fail-percent` (10) of its requests,
//!   registers one subscriber on it (retries every 1 s ±20 %, up to 10 attempts),
//!   posts `--rate` events per second for `--duration` (1h) — an open loop whose
//!   latencies count from when each request was due, so stalls are not hidden
//!   (coordinated omission) — and prints one row per `--interval` (60s): sent,
//!   2xx, non-2xx, p50, p99, max, how late requests were sent, and the receiver's
//!   deliveries and refusals; then waits for `hookbox_events_pending` to reach 0
//!   and deletes the subscriber ([`soak`]; `scripts/soak.sh` runs it and judges the
//!   server's memory, latency and storage over the run).
//!
//! - `websocket` measures a pull source: it is a WebSocket upstream on
//!   `--listen` (default 127.0.0.1:9100) that, once hookbox's `kind = "websocket"`
//!   source subscribes, sends `--messages` (50,000) small messages as fast as it
//!   can, then polls `GET /sources` until the source's committed cursor is the last
//!   message's, and reports committed messages per second ([`websocket`]).
//!
//! Examples:
//!
//! ```text
//! cargo run --release -p loadgen -- ingest --connections 16 --payload-bytes 4096
//! cargo run --release -p loadgen -- e2e --events 50000 --timeout 5m
//! ALLOWED_TARGETS=127.0.0.0/8 cargo run --release   # then, elsewhere:
//! cargo run --release -p loadgen -- deliver --events 20000
//! cargo run --release -p loadgen -- websocket --messages 50000   # see websocket.rs
//! cargo run --release -p loadgen -- soak --rate 2000 --duration 1h --fail-percent 10
//! ```
//!
//! The modules follow the tool's parts: [`cli`] (arguments), [`conn`] (target and
//! connections), [`post`] (the posting tasks and their tallies), [`sources`]
//! (posting as GitHub does), [`progress`] (the live line), one module per mode
//! ([`ingest`], [`e2e`], [`deliver`] with its [`receiver`] and [`admin`] client,
//! [`storm`], [`fill`], [`soak`])
//! and [`report`] (percentiles, the table, the exit code).

mod admin;
mod cli;
mod conn;
mod deliver;
mod drain;
mod e2e;
mod fill;
mod ingest;
mod lanes;
mod pipeline;
mod post;
mod progress;
mod receiver;
mod reference;
mod report;
mod soak;
mod sources;
mod storm;
mod websocket;

use std::error::Error;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// Error type used throughout: anything printable, sendable across tasks.
pub(crate) type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Ingest(args) => ingest::run_ingest(args).await,
        Command::E2e(args) => e2e::run_e2e(args).await,
        Command::Deliver(args) => deliver::run_deliver(args).await,
        Command::Fill(args) => fill::run_fill(args).await,
        Command::Drain(args) => drain::run_drain(args).await,
        Command::Websocket(args) => websocket::run_websocket(args).await,
        Command::Storm(args) => storm::run_storm(args).await,
        Command::Isolation(args) => lanes::run_isolation(args).await,
        Command::Rate(args) => lanes::run_rate(args).await,
        Command::Pipeline(args) => pipeline::run_pipeline(args),
        Command::Soak(args) => soak::run_soak(args).await,
        Command::SourceKeys => sources::source_keys().map(|keys| {
            print!("{keys}");
            ExitCode::SUCCESS
        }),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("loadgen: {err}");
            ExitCode::FAILURE
        }
    }
}
