//! The command line: one subcommand per mode, with the options they share.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Command line.
#[derive(Parser, Debug)]
#[command(
    about = "Load generator for hookbox (HTTP/1.1 keep-alive, one request in flight per connection)"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to run.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Post webhooks for a fixed duration; report throughput and latency.
    Ingest(IngestArgs),
    /// Post N events, then wait until hookbox has processed all of them.
    E2e(E2eArgs),
    /// Register 3 subscribers on a built-in receiver, post N events, and wait
    /// until every delivery (2.5 per event) has arrived.
    Deliver(DeliverArgs),
    /// Post N events and stop: a backlog for an instance without workers to hold.
    Fill(FillArgs),
    /// Receive on a fixed address until N deliveries from a draining instance have
    /// arrived, then post as many from a bare reqwest client to the same receiver;
    /// report both rates and their ratio.
    Drain(DrainArgs),
    /// Be a WebSocket upstream for a hookbox pull source: send N messages as fast
    /// as possible, and wait until hookbox has committed all of them.
    Websocket(WebsocketArgs),
    /// Seed N keys, then post new keys for a fixed time, then re-post the N known
    /// keys for the same time (a retry storm); report both rates and their ratio.
    Storm(StormArgs),
    /// A fast destination's delivery latency alone, then beside ten destinations
    /// that answer after 2 s (with backlogs) and one that never answers.
    Isolation(IsolationArgs),
    /// N subscribers rate-limited to R/s each: deliveries per second in all, and
    /// the most any one got in one second.
    Rate(RateArgs),
    /// Print the public keys loadgen signs Discord and SendGrid requests with, as
    /// `BENCH_DISCORD_KEY=…` and `BENCH_SENDGRID_KEY=…` lines.
    SourceKeys,
    /// Time a filter's evaluation and a transform's run per event, in-process
    /// (hookbox's library), and print a table.
    Pipeline(PipelineArgs),
    /// Post at a fixed rate for a long time to a subscriber on a built-in receiver
    /// that fails a share of the attempts; print one row per interval (latency
    /// counted from when each request was due).
    Soak(SoakArgs),
}

/// Options of `soak`.
#[derive(Args, Debug)]
pub(crate) struct SoakArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Events per second, held fixed whatever the answers' latency (request n is
    /// due n/rate seconds after the start).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) rate: u64,
    /// How long to post for (e.g. `1h`, `3m`).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) duration: Duration,
    /// One row per this much time.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) interval: Duration,
    /// The built-in receiver answers 500 to this many of every 100 deliveries
    /// (evenly spread: every tenth for 10), so that hookbox retries them.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub(crate) fail_percent: u8,
    /// `event_type` of the posted events (the subscriber takes exactly this type).
    #[arg(long, default_value = "bench.soak")]
    pub(crate) event_type: String,
    /// Name of the subscriber registered for the run (deleted at the end).
    #[arg(long, default_value = "bench-soak")]
    pub(crate) subscriber: String,
    /// The subscriber's `max_in_flight` (attempts at once to the receiver).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_in_flight: u32,
    /// After posting, wait this long at most for `hookbox_events_pending` to reach
    /// 0 (exit 1 if it does not); `0s` does not wait.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) drain_timeout: Duration,
    /// Bearer token for the admin routes, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
}

/// Options of `pipeline`.
#[derive(Args, Debug)]
pub(crate) struct PipelineArgs {
    /// Transform runs (filter evaluations: ten times as many).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) runs: usize,
    /// Size of the event payload.
    #[arg(long, default_value_t = 1024)]
    pub(crate) payload_bytes: usize,
}

/// Options of `isolation`.
#[derive(Args, Debug)]
pub(crate) struct IsolationArgs {
    /// Base URL of hookbox (plain http).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub(crate) url: String,
    /// Fast events measured in each phase.
    #[arg(long, default_value_t = 200)]
    pub(crate) samples: u64,
    /// Milliseconds between two measured events.
    #[arg(long, default_value_t = 20)]
    pub(crate) gap_ms: u64,
    /// Destinations that answer after 2 s.
    #[arg(long, default_value_t = 10)]
    pub(crate) slow: u64,
    /// Events waiting for each slow destination (and the silent one).
    #[arg(long, default_value_t = 1000)]
    pub(crate) backlog: u64,
    /// Bearer token for the admin routes, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
}

/// Options of `rate`.
#[derive(Args, Debug)]
pub(crate) struct RateArgs {
    /// Base URL of hookbox (plain http).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub(crate) url: String,
    /// Subscribers, each with its own event type.
    #[arg(long, default_value_t = 100)]
    pub(crate) subscribers: u64,
    /// Each one's limit, per second.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: u64,
    /// The measured window, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) seconds: u64,
    /// Bearer token for the admin routes, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
}

/// Options shared by both modes.
#[derive(Args, Debug)]
pub(crate) struct CommonArgs {
    /// Base URL of hookbox (plain http).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub(crate) url: String,
    /// Concurrent keep-alive connections, one request in flight each.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) connections: u64,
    /// Approximate size in bytes of each event's `payload` JSON.
    #[arg(long, default_value_t = 1024)]
    pub(crate) payload_bytes: usize,
}

/// Options of `ingest`.
#[derive(Args, Debug)]
pub(crate) struct IngestArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// How long to send for (e.g. `10s`, `2m`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) duration: Duration,
    /// `event_type` of the posted events.
    #[arg(long, default_value = "bench.ingest")]
    pub(crate) event_type: String,
    /// Post to `POST /ingest/<SOURCE>` as its provider (`--kind`) would instead of
    /// to `/webhooks`. `github`: the payload as the body, `X-GitHub-Event: ingest`, a
    /// unique `X-GitHub-Delivery` per request and `X-Hub-Signature-256` (HMAC-SHA256
    /// of the body under `--secret`). `discord` (ed25519) and `sendgrid` (ECDSA
    /// P-256): `--requests` bodies, each with its own id, signed before the run
    /// with loadgen's fixed keys (`loadgen source-keys` prints the public ones).
    #[arg(long)]
    pub(crate) source: Option<String>,
    /// The source's kind, with `--source`: `github`, `discord` or `sendgrid`.
    #[arg(long, default_value = "github")]
    pub(crate) kind: String,
    /// With `--kind discord` or `sendgrid`: how many requests to sign beforehand
    /// (the run ends when they are spent, or at `--duration`).
    #[arg(long, default_value_t = 50_000)]
    pub(crate) requests: usize,
    /// The source's secret (its `secret_env` value), with `--source`.
    #[arg(
        long,
        env = "LOADGEN_SOURCE_SECRET",
        default_value = "bench-github-secret"
    )]
    pub(crate) secret: String,
}

/// Options of `e2e`.
#[derive(Args, Debug)]
pub(crate) struct E2eArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Number of events to post.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) events: u64,
    /// `event_type` of the posted events.
    #[arg(long, default_value = "bench.e2e")]
    pub(crate) event_type: String,
    /// Give up (exit 1) when posting and draining take longer than this.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

/// Options of `deliver`.
#[derive(Args, Debug)]
pub(crate) struct DeliverArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Number of events to post (half `bench.deliver.two`, half `bench.deliver.three`).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) events: u64,
    /// Give up (exit 1) when posting and delivering take longer than this.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
    /// Bearer token for the admin routes, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
    /// A filter (JSON) every subscriber gets; it must match every event, or the
    /// receiver waits for deliveries that never come.
    #[arg(long)]
    pub(crate) filter: Option<String>,
    /// A JavaScript file every subscriber gets as its transform.
    #[arg(long)]
    pub(crate) transform: Option<std::path::PathBuf>,
    /// Every subscriber gets the benchmark's filter (matching every event) and
    /// transform (renaming two fields of the payload), as `pipeline` times them.
    #[arg(long, conflicts_with_all = ["filter", "transform"])]
    pub(crate) bench_shape: bool,
    /// Each subscriber's `max_in_flight` (default: hookbox's, 8 each, 24 attempts
    /// at once in all; the reference has `--connections` requests in flight).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_in_flight: Option<u32>,
    /// After the run, post as many deliveries from a bare reqwest client
    /// (`--connections` at once) to the same receiver, and report the ratio.
    #[arg(long)]
    pub(crate) reference: bool,
    /// How many reference runs, one after another; the ratio is over the
    /// median of their rates.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub(crate) reference_runs: u32,
}

/// Options of `drain`.
#[derive(Args, Debug)]
pub(crate) struct DrainArgs {
    /// The receiver's address (the one the instance's http handlers post to).
    #[arg(long, default_value = "127.0.0.1:9200")]
    pub(crate) listen: std::net::SocketAddr,
    /// Distinct deliveries to wait for.
    #[arg(long, default_value_t = 80_000)]
    pub(crate) deliveries: u64,
    /// The reference client's requests in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) in_flight: u64,
    /// Approximate size in bytes of the reference requests' `payload`.
    #[arg(long, default_value_t = 1024)]
    pub(crate) payload_bytes: usize,
    /// How many reference runs, one after another; the ratio is over the
    /// median of their rates.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub(crate) reference_runs: u32,
    /// Give up (exit 1) when the deliveries take longer than this to arrive.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

/// Options of `fill`.
#[derive(Args, Debug)]
pub(crate) struct FillArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Number of events to post.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) events: u64,
    /// `event_type` of the posted events (route it to a handler, or the events
    /// complete at once and leave no backlog).
    #[arg(long, default_value = "bench.recovery")]
    pub(crate) event_type: String,
    /// Give up (exit 1) when posting takes longer than this.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

/// Options of `websocket`.
#[derive(Args, Debug)]
pub(crate) struct WebsocketArgs {
    /// Base URL of hookbox (plain http), for `GET /sources`.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub(crate) url: String,
    /// Where the WebSocket upstream listens (hookbox's source `url` must point here).
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    pub(crate) listen: std::net::SocketAddr,
    /// The name of hookbox's `kind = "websocket"` source.
    #[arg(long, default_value = "bench-ws")]
    pub(crate) source: String,
    /// Messages to send.
    #[arg(long, default_value_t = 50_000)]
    pub(crate) messages: u64,
    /// Give up (exit 1) when subscribing and committing take longer than this.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
    /// Bearer token for `GET /sources`, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
}

/// Options of `storm`.
#[derive(Args, Debug)]
pub(crate) struct StormArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// How long each timed phase (unique keys, then the storm) sends for.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) duration: Duration,
    /// How many known keys the storm re-posts.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) keys: u64,
    /// `event_type` of the posted events.
    #[arg(long, default_value = "bench.ingest")]
    pub(crate) event_type: String,
}

/// The listen address's default.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9100";

/// Parses `--listen`.
pub(crate) fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|e| format!("{s:?}: {e}"))
}
