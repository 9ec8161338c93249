//! Load generator for hookbox.
//!
//! Run with: cargo run --release --example loadgen -- ingest --url http://127.0.0.1:8000 --duration 10s --connections 64
//!
//! Three modes:
//!
//! - `ingest` posts webhooks for a fixed time and reports throughput, latency
//!   percentiles and non-2xx statuses. Every connection is one task with its own
//!   HTTP/1.1 keep-alive connection and one request in flight. With `--source
//!   NAME` it posts to a `kind = "github"` source (`POST /ingest/NAME`) as GitHub
//!   does: the payload as the body, signed with `--secret` in
//!   `X-Hub-Signature-256`, a unique `X-GitHub-Delivery` per request — so the cost
//!   of verifying and identifying a source delivery shows against `/webhooks`.
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
//!
//! Every request carries a unique `Idempotency-Key` (`<run id>-<sequence>`), so every
//! accepted request creates a new event. The progress line goes to stderr, the
//! results table to stdout.
//!
//! Examples:
//!
//! ```text
//! cargo run --release --example loadgen -- ingest --connections 16 --payload-bytes 4096
//! cargo run --release --example loadgen -- e2e --events 50000 --timeout 5m
//! ALLOWED_TARGETS=127.0.0.0/8 cargo run --release   # then, elsewhere:
//! cargo run --release --example loadgen -- deliver --events 20000
//! ```

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::net::TcpStream;

/// Error type used throughout: anything printable, sendable across tasks.
type BoxError = Box<dyn Error + Send + Sync>;

/// Limit for opening one TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Limit for one request, from send to the end of the response body.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed request, so a dead server does not cause a hot loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait honoured from a `Retry-After` answer in `e2e` mode.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(1);
/// How often the progress line is redrawn.
const PROGRESS_TICK: Duration = Duration::from_millis(250);
/// How often `e2e` polls `/metrics` while waiting for the backlog to drain.
const METRICS_POLL: Duration = Duration::from_millis(100);
/// The gauge `e2e` waits on.
const PENDING_METRIC: &str = "hookbox_events_pending";

/// Command line.
#[derive(Parser, Debug)]
#[command(
    about = "Load generator for hookbox (HTTP/1.1 keep-alive, one request in flight per connection)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What to run.
#[derive(Subcommand, Debug)]
enum Command {
    /// Post webhooks for a fixed duration; report throughput and latency.
    Ingest(IngestArgs),
    /// Post N events, then wait until hookbox has processed all of them.
    E2e(E2eArgs),
    /// Register 3 subscribers on a built-in receiver, post N events, and wait
    /// until every delivery (2.5 per event) has arrived.
    Deliver(DeliverArgs),
}

/// Options shared by both modes.
#[derive(Args, Debug)]
struct CommonArgs {
    /// Base URL of hookbox (plain http).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Concurrent keep-alive connections, one request in flight each.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    connections: u64,
    /// Approximate size in bytes of each event's `payload` JSON.
    #[arg(long, default_value_t = 1024)]
    payload_bytes: usize,
}

/// Options of `ingest`.
#[derive(Args, Debug)]
struct IngestArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// How long to send for (e.g. `10s`, `2m`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// `event_type` of the posted events.
    #[arg(long, default_value = "bench.ingest")]
    event_type: String,
    /// Post to `POST /ingest/<SOURCE>` as GitHub would instead of to `/webhooks`:
    /// the payload as the body, `X-GitHub-Event: ingest`, a unique
    /// `X-GitHub-Delivery` per request and `X-Hub-Signature-256` (HMAC-SHA256 of
    /// the body under `--secret`). The source must be `kind = "github"`.
    #[arg(long)]
    source: Option<String>,
    /// The source's secret (its `secret_env` value), with `--source`.
    #[arg(
        long,
        env = "LOADGEN_SOURCE_SECRET",
        default_value = "bench-github-secret"
    )]
    secret: String,
}

/// Options of `e2e`.
#[derive(Args, Debug)]
struct E2eArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Number of events to post.
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// `event_type` of the posted events.
    #[arg(long, default_value = "bench.e2e")]
    event_type: String,
    /// Give up (exit 1) when posting and draining take longer than this.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// Options of `deliver`.
#[derive(Args, Debug)]
struct DeliverArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Number of events to post (half `bench.deliver.two`, half `bench.deliver.three`).
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// Give up (exit 1) when posting and delivering take longer than this.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Bearer token for the admin routes, when hookbox has `ADMIN_TOKEN` set.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Ingest(args) => run_ingest(args).await,
        Command::E2e(args) => run_e2e(args).await,
        Command::Deliver(args) => run_deliver(args).await,
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("loadgen: {err}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// Target and connections
// ---------------------------------------------------------------------------

/// Where requests go: a resolved address plus what goes into `Host` and paths.
#[derive(Debug)]
struct Target {
    /// Address to connect to.
    addr: SocketAddr,
    /// Value of the `Host` header.
    host: HeaderValue,
    /// Path prefix from the base URL, without a trailing slash (usually empty).
    base_path: String,
}

impl Target {
    /// Parses a base URL such as `http://127.0.0.1:8000` and resolves its host.
    async fn resolve(url: &str) -> Result<Self, BoxError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid --url {url:?}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("--url {url:?}: only http:// URLs are supported").into());
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("--url {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = tokio::net::lookup_host((authority.host(), port))
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", authority.host()))?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", authority.host()))?;
        Ok(Self {
            addr,
            host: HeaderValue::from_str(authority.as_str())?,
            base_path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// Full request path for an endpoint such as `/webhooks`.
    fn path(&self, endpoint: &str) -> String {
        format!("{}{endpoint}", self.base_path)
    }
}

/// One HTTP/1.1 keep-alive connection that reopens itself when it was closed.
struct Connection {
    target: Arc<Target>,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// How many TCP connections this has opened so far.
    opened: u64,
}

impl Connection {
    /// A connection that opens lazily, on the first request.
    fn new(target: Arc<Target>) -> Self {
        Self {
            target,
            sender: None,
            opened: 0,
        }
    }

    /// Sends one request and reads the whole response body.
    ///
    /// On any error the connection is dropped and the next call reconnects.
    async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Bytes>, BoxError> {
        let result = tokio::time::timeout(REQUEST_TIMEOUT, self.send_inner(req)).await;
        let result = result.unwrap_or_else(|_| Err("request timed out".into()));
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn send_inner(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Bytes>, BoxError> {
        let sender = self.ready_sender().await?;
        let response = sender.send_request(req).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Response::from_parts(parts, body))
    }

    /// The current sender if it is still usable, else a freshly opened one.
    async fn ready_sender(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, BoxError> {
        if let Some(sender) = self.sender.as_mut() {
            // A keep-alive connection the server closed while idle is not an
            // error: it just gets replaced below.
            if sender.ready().await.is_err() {
                self.sender = None;
            }
        }
        if self.sender.is_none() {
            self.sender = Some(open_connection(self.target.addr).await?);
            self.opened += 1;
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "connection vanished".into())
    }
}

/// Opens a TCP connection (with `TCP_NODELAY`) and performs the HTTP/1.1 handshake.
async fn open_connection(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, BoxError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr} timed out"))?
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // A broken connection also fails the pending `send_request`, which is
        // where it gets counted; nothing more to do with the error here.
        let _ = connection.await;
    });
    Ok(sender)
}

/// Builds a GET request for `path`.
fn get_request(target: &Target, path: &str) -> Result<Request<Full<Bytes>>, BoxError> {
    Ok(Request::builder()
        .method(Method::GET)
        .uri(target.path(path))
        .header(HOST, target.host.clone())
        .body(Full::new(Bytes::new()))?)
}

/// Fails early, with one clear line, when nothing listens at the target.
async fn check_reachable(target: &Target) -> Result<(), BoxError> {
    open_connection(target.addr).await.map(drop)
}

// ---------------------------------------------------------------------------
// Posting webhooks
// ---------------------------------------------------------------------------

/// What every posting task shares.
struct Shared {
    target: Arc<Target>,
    /// Request path of the intake endpoint.
    path: String,
    /// Request bodies: event `seq` gets `bodies[seq % len]` (only keys differ
    /// between events with the same body).
    bodies: Vec<Bytes>,
    /// Prefix of every idempotency key of this run.
    run_id: String,
    /// With `ingest --source`: the `X-Hub-Signature-256` of the (one) body; the
    /// key goes in `X-GitHub-Delivery` instead of `Idempotency-Key`.
    github_signature: Option<HeaderValue>,
    budget: Budget,
    /// In `e2e` mode: retry 429/503 and failed requests with the same key.
    retry_rejected: bool,
    /// Responses received so far, any status (for the progress line).
    responses: AtomicU64,
    /// 2xx responses received so far (for the progress line).
    accepted: AtomicU64,
}

/// When the posting tasks stop.
enum Budget {
    /// Keep posting until this instant (`ingest`).
    Until { deadline: Instant, next: AtomicU64 },
    /// Post exactly `total` events, but give up at `deadline` (`e2e`).
    Count {
        total: u64,
        deadline: Instant,
        next: AtomicU64,
    },
}

impl Budget {
    /// Claims the sequence number of the next event, or `None` when done.
    fn claim(&self) -> Option<u64> {
        match self {
            Budget::Until { deadline, next } => {
                (Instant::now() < *deadline).then(|| next.fetch_add(1, Ordering::Relaxed))
            }
            Budget::Count {
                total,
                deadline,
                next,
            } => {
                if Instant::now() >= *deadline {
                    return None;
                }
                let seq = next.fetch_add(1, Ordering::Relaxed);
                (seq < *total).then_some(seq)
            }
        }
    }

    /// Whether the run's time is up.
    fn expired(&self) -> bool {
        let (Budget::Until { deadline, .. } | Budget::Count { deadline, .. }) = self;
        Instant::now() >= *deadline
    }
}

/// Counters and latencies of one task, merged into one at the end.
#[derive(Default, Debug)]
struct Stats {
    /// Latency of every response received, in microseconds.
    latencies_us: Vec<u32>,
    /// Responses by status code.
    statuses: BTreeMap<u16, u64>,
    /// Requests that got no response (connect, I/O or timeout errors).
    errors: u64,
    /// The first such error, to show what went wrong.
    first_error: Option<String>,
    /// TCP connections opened.
    connections_opened: u64,
    /// Events given up on (`e2e` only: the deadline passed while retrying).
    abandoned: u64,
}

impl Stats {
    /// Adds another task's numbers to these.
    fn merge(&mut self, other: Stats) {
        self.latencies_us.extend(other.latencies_us);
        for (status, count) in other.statuses {
            *self.statuses.entry(status).or_default() += count;
        }
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.connections_opened += other.connections_opened;
        self.abandoned += other.abandoned;
    }

    /// Number of responses with a 2xx status.
    fn accepted(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(status, _)| (200..300).contains(*status))
            .map(|(_, count)| count)
            .sum()
    }

    /// Number of responses received, any status.
    fn responses(&self) -> u64 {
        self.statuses.values().sum()
    }

    /// Non-2xx statuses with their counts.
    fn rejected(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.statuses
            .iter()
            .filter(|(status, _)| !(200..300).contains(*status))
            .map(|(status, count)| (*status, *count))
    }

    fn record_error(&mut self, err: &BoxError) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(err.to_string());
        }
    }
}

/// The outcome of posting one event once.
enum Attempt {
    /// A response arrived; retry it after this long if it is worth retrying.
    Answered { retry_after: Option<Duration> },
    /// No response (error already recorded).
    Failed,
}

/// Builds the JSON body `{"event_type": ..., "payload": {...}}` with a payload of
/// roughly `payload_bytes` bytes.
fn event_body(event_type: &str, run_id: &str, payload_bytes: usize) -> Result<Bytes, BoxError> {
    let mut payload = serde_json::json!({
        "source": "hookbox-loadgen",
        "run_id": run_id,
        "padding": "",
    });
    let overhead = serde_json::to_vec(&payload)?.len();
    payload["padding"] =
        serde_json::Value::String("x".repeat(payload_bytes.saturating_sub(overhead)));
    let body = serde_json::json!({ "event_type": event_type, "payload": payload });
    Ok(Bytes::from(serde_json::to_vec(&body)?))
}

/// Runs `connections` posting tasks until the budget is spent and merges their stats.
async fn post_events(shared: Arc<Shared>, connections: u64) -> Result<Stats, BoxError> {
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connection_task(Arc::clone(&shared))))
        .collect();
    let mut total = Stats::default();
    for task in tasks {
        total.merge(task.await?);
    }
    Ok(total)
}

/// One connection: posts events one after another until the budget is spent.
async fn connection_task(shared: Arc<Shared>) -> Stats {
    let mut conn = Connection::new(Arc::clone(&shared.target));
    let mut stats = Stats::default();
    while let Some(seq) = shared.budget.claim() {
        let key = format!("{}-{seq}", shared.run_id);
        post_until_done(&shared, &mut conn, seq, &key, &mut stats).await;
    }
    stats.connections_opened = conn.opened;
    stats
}

/// Posts one event; in `e2e` mode retries rejections and errors with the same key.
async fn post_until_done(
    shared: &Shared,
    conn: &mut Connection,
    seq: u64,
    key: &str,
    stats: &mut Stats,
) {
    let retry = shared.retry_rejected;
    loop {
        let wait = match post_once(shared, conn, seq, key, stats).await {
            Attempt::Answered {
                retry_after: Some(wait),
            } if retry => wait,
            // Done, or (in `ingest`) a rejection that is only counted.
            Attempt::Answered { .. } => return,
            Attempt::Failed => ERROR_BACKOFF,
        };
        if shared.budget.expired() {
            stats.abandoned += u64::from(retry);
            return;
        }
        // After an error this also keeps a dead server from causing a hot loop.
        tokio::time::sleep(wait).await;
        if !retry {
            return;
        }
    }
}

/// Sends one POST /webhooks and records its latency and status.
async fn post_once(
    shared: &Shared,
    conn: &mut Connection,
    seq: u64,
    key: &str,
    stats: &mut Stats,
) -> Attempt {
    let request = match intake_request(shared, seq, key) {
        Ok(request) => request,
        Err(err) => {
            stats.record_error(&err);
            return Attempt::Failed;
        }
    };
    let started = Instant::now();
    match conn.send(request).await {
        Ok(response) => {
            let micros = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
            stats.latencies_us.push(micros);
            let status = response.status();
            *stats.statuses.entry(status.as_u16()).or_default() += 1;
            shared.responses.fetch_add(1, Ordering::Relaxed);
            if status.is_success() {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Attempt::Answered {
                retry_after: retry_wait(&response),
            }
        }
        Err(err) => {
            stats.record_error(&err);
            Attempt::Failed
        }
    }
}

/// Builds the intake request of event `seq` with its idempotency key.
fn intake_request(shared: &Shared, seq: u64, key: &str) -> Result<Request<Full<Bytes>>, BoxError> {
    let index = usize::try_from(seq).unwrap_or(0) % shared.bodies.len().max(1);
    let body = shared
        .bodies
        .get(index)
        .cloned()
        .ok_or("no request body to send")?;
    let request = Request::builder()
        .method(Method::POST)
        .uri(shared.path.as_str())
        .header(HOST, shared.target.host.clone())
        .header(CONTENT_TYPE, "application/json");
    let request = match &shared.github_signature {
        None => request.header("Idempotency-Key", key),
        Some(signature) => request
            .header("X-GitHub-Event", "ingest")
            .header("X-GitHub-Delivery", key)
            .header("X-Hub-Signature-256", signature.clone()),
    };
    Ok(request.body(Full::new(body))?)
}

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `body`): GitHub's signature header.
fn github_signature(secret: &str, body: &[u8]) -> Result<HeaderValue, BoxError> {
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .map_err(|e| format!("HMAC key: {e}"))?;
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(HeaderValue::from_str(&format!("sha256={hex}"))?)
}

/// The body a provider sends: the payload alone (`event_body`'s `payload`).
fn provider_body(run_id: &str, payload_bytes: usize) -> Result<Bytes, BoxError> {
    let envelope: serde_json::Value =
        serde_json::from_slice(&event_body("-", run_id, payload_bytes)?)?;
    Ok(Bytes::from(serde_json::to_vec(&envelope["payload"])?))
}

/// How long to wait before retrying this response, if it is worth retrying
/// (429 or 503, honouring `Retry-After` in seconds up to [`MAX_RETRY_WAIT`]).
fn retry_wait(response: &Response<Bytes>) -> Option<Duration> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let advised = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Some(
        advised
            .unwrap_or(ERROR_BACKOFF)
            .clamp(ERROR_BACKOFF, MAX_RETRY_WAIT),
    )
}

// ---------------------------------------------------------------------------
// Progress line
// ---------------------------------------------------------------------------

/// A progress bar on stderr (hidden when stderr is not a terminal).
fn progress_bar(length: u64, template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    bar.set_style(style);
    bar
}

/// Redraws `bar` every [`PROGRESS_TICK`] until aborted: position from `position`,
/// message from the response counter and the rate over the last tick.
fn spawn_progress(
    bar: ProgressBar,
    shared: Arc<Shared>,
    started: Instant,
    position: fn(&Shared, Instant) -> u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(PROGRESS_TICK);
        let (mut last_count, mut last_at) = (0_u64, Instant::now());
        loop {
            ticker.tick().await;
            let count = shared.responses.load(Ordering::Relaxed);
            let now = Instant::now();
            let rate = (count - last_count) as f64 / now.duration_since(last_at).as_secs_f64();
            (last_count, last_at) = (count, now);
            bar.set_position(position(&shared, started));
            bar.set_message(format!(
                "{:>5.1}s  {count} requests  {rate:.0} req/s",
                started.elapsed().as_secs_f64()
            ));
        }
    })
}

// ---------------------------------------------------------------------------
// ingest
// ---------------------------------------------------------------------------

/// `ingest`: posts for a fixed duration and prints throughput and latency.
async fn run_ingest(args: IngestArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let run_id = uuid::Uuid::now_v7().to_string();
    let started = Instant::now();
    let (path, body, github_signature) = match &args.source {
        None => (
            target.path("/webhooks"),
            event_body(&args.event_type, &run_id, args.common.payload_bytes)?,
            None,
        ),
        Some(source) => {
            let body = provider_body(&run_id, args.common.payload_bytes)?;
            let signature = github_signature(&args.secret, &body)?;
            (
                target.path(&format!("/ingest/{source}")),
                body,
                Some(signature),
            )
        }
    };
    let mode = match &args.source {
        None => "ingest".to_owned(),
        Some(source) => format!("ingest --source {source}"),
    };
    let shared = Arc::new(Shared {
        path,
        bodies: vec![body],
        target,
        run_id,
        github_signature,
        budget: Budget::Until {
            deadline: started + args.duration,
            next: AtomicU64::new(0),
        },
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

// ---------------------------------------------------------------------------
// e2e
// ---------------------------------------------------------------------------

/// `e2e`: posts N events, waits until `hookbox_events_pending` is 0, prints rates.
async fn run_e2e(args: E2eArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let mut metrics_conn = Connection::new(Arc::clone(&target));
    // Check the gauge before posting anything: without it there is nothing to wait on.
    match read_pending(&mut metrics_conn, &target).await? {
        None => return Ok(metric_missing()),
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

    let drained = wait_for_drain(&mut metrics_conn, &target, deadline, started).await?;
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
/// `started`, or `None` at the deadline.
async fn wait_for_drain(
    conn: &mut Connection,
    target: &Target,
    deadline: Instant,
    started: Instant,
) -> Result<Option<Duration>, BoxError> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} e2e drain {msg}")
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

/// Scrapes `/metrics` once; `None` when the pending gauge is not in it.
async fn read_pending(conn: &mut Connection, target: &Target) -> Result<Option<f64>, BoxError> {
    let response = conn.send(get_request(target, "/metrics")?).await?;
    if !response.status().is_success() {
        return Err(format!("GET /metrics answered {}", response.status()).into());
    }
    let text =
        std::str::from_utf8(response.body()).map_err(|e| format!("/metrics is not UTF-8: {e}"))?;
    Ok(parse_gauge(text, PENDING_METRIC))
}

/// Finds `name` in Prometheus text format; sums its samples when it has labels.
fn parse_gauge(text: &str, name: &str) -> Option<f64> {
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

/// Reports the missing gauge and returns the failure exit code.
fn metric_missing() -> ExitCode {
    eprintln!(
        "loadgen: GET /metrics has no `{PENDING_METRIC}` gauge; e2e cannot tell when \
         the events are processed (is METRICS_PUBLIC=false, or is this not hookbox?)"
    );
    ExitCode::FAILURE
}

// ---------------------------------------------------------------------------
// deliver
// ---------------------------------------------------------------------------

/// The event types `deliver` posts, alternately: `two` reaches 2 subscribers,
/// `three` reaches 3.
const DELIVER_TYPES: [(&str, u64); 2] = [("bench.deliver.two", 2), ("bench.deliver.three", 3)];
/// The subscribers `deliver` registers: name and event type patterns.
const BENCH_SUBSCRIBERS: [(&str, &[&str]); 3] = [
    ("bench-sub-1", &["bench.deliver.*"]),
    ("bench-sub-2", &["bench.deliver.*"]),
    ("bench-sub-3", &["bench.deliver.three"]),
];
/// How often `deliver` checks the receiver's count while waiting.
const DELIVERY_POLL: Duration = Duration::from_millis(50);

/// What the built-in receiver has seen.
#[derive(Default)]
struct Tally {
    /// Requests received, duplicates included.
    requests: AtomicU64,
    /// Distinct (subscriber path, `webhook-id`) pairs received.
    unique: AtomicU64,
    inner: std::sync::Mutex<TallyInner>,
}

#[derive(Default)]
struct TallyInner {
    /// `"<path> <webhook-id>"` of every delivery received.
    seen: std::collections::HashSet<String>,
    /// Distinct deliveries per request path (one path per subscriber).
    per_path: BTreeMap<String, u64>,
    /// When the latest new delivery arrived.
    last_new: Option<Instant>,
}

impl Tally {
    fn lock(&self) -> std::sync::MutexGuard<'_, TallyInner> {
        // A panic while holding the lock cannot leave the counters inconsistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The receiver's only handler: count, answer 200 with an empty body.
async fn receive(
    axum::extract::State(tally): axum::extract::State<Arc<Tally>>,
    uri: Uri,
    headers: hyper::HeaderMap,
    // Read the body whole so the keep-alive connection can be reused.
    _body: Bytes,
) -> StatusCode {
    tally.requests.fetch_add(1, Ordering::Relaxed);
    let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut inner = tally.lock();
    if inner.seen.insert(format!("{} {id}", uri.path())) {
        *inner.per_path.entry(uri.path().to_owned()).or_default() += 1;
        inner.last_new = Some(Instant::now());
        tally.unique.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

/// Starts the receiver on `127.0.0.1:0` (TCP_NODELAY, HTTP/1.1 keep-alive).
async fn start_receiver(tally: Arc<Tally>) -> Result<SocketAddr, BoxError> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot start the receiver on 127.0.0.1: {e}"))?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|tcp| {
        // Only latency suffers without it.
        let _ = tcp.set_nodelay(true);
    });
    let app = axum::Router::new().fallback(receive).with_state(tally);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("loadgen: the receiver stopped: {err}");
        }
    });
    Ok(addr)
}

/// Talks to the subscribers API.
struct Admin {
    target: Arc<Target>,
    conn: Connection,
    /// `Bearer <token>`, when one was given.
    authorization: Option<HeaderValue>,
}

impl Admin {
    /// Sends one admin request; returns the status and the body as text.
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, String), BoxError> {
        let mut req = Request::builder()
            .method(method)
            .uri(self.target.path(path))
            .header(HOST, self.target.host.clone());
        if let Some(auth) = &self.authorization {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let body = match body {
            Some(json) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(json)?)
            }
            None => Bytes::new(),
        };
        let response = self.conn.send(req.body(Full::new(body))?).await?;
        let text = String::from_utf8_lossy(response.body()).into_owned();
        Ok((response.status(), text))
    }

    /// Creates one subscriber; a clear error unless hookbox answers 201.
    async fn create(&mut self, name: &str, patterns: &[&str], url: &str) -> Result<(), BoxError> {
        let body = serde_json::json!({"name": name, "event_types": patterns, "url": url});
        let (status, text) = self
            .send(Method::POST, "/subscribers", Some(&body))
            .await
            .map_err(|e| format!("POST /subscribers ({name}) failed: {e}"))?;
        if status == StatusCode::CREATED {
            return Ok(());
        }
        let hint = match status {
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
                " (this hookbox has no subscribers API)"
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                " (pass --admin-token or set ADMIN_TOKEN)"
            }
            StatusCode::UNPROCESSABLE_ENTITY => {
                " (is hookbox running with ALLOWED_TARGETS=127.0.0.0/8?)"
            }
            _ => "",
        };
        Err(format!(
            "creating subscriber {name} failed: POST /subscribers answered {status}{hint}: {}",
            text.trim()
        )
        .into())
    }

    /// Deletes one subscriber; a missing one is fine.
    async fn delete(&mut self, name: &str) -> Result<(), BoxError> {
        let (status, text) = self
            .send(Method::DELETE, &format!("/subscribers/{name}"), None)
            .await?;
        if status.is_success() || status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(format!(
                "DELETE /subscribers/{name} answered {status}: {}",
                text.trim()
            )
            .into())
        }
    }

    /// Deletes every bench subscriber, warning about failures.
    async fn delete_all(&mut self) {
        for (name, _) in BENCH_SUBSCRIBERS {
            if let Err(err) = self.delete(name).await {
                eprintln!("loadgen: warning: could not delete subscriber {name}: {err}");
            }
        }
    }
}

/// Deliveries that `events` events fan out to: even ones reach 2 subscribers,
/// odd ones 3.
fn expected_deliveries(events: u64) -> u64 {
    let [(_, even), (_, odd)] = DELIVER_TYPES;
    events.div_ceil(2) * even + events / 2 * odd
}

/// `deliver`: subscribers on a built-in receiver, N events, deliveries per second.
async fn run_deliver(args: DeliverArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.common.url).await?);
    check_reachable(&target).await?;
    let tally = Arc::new(Tally::default());
    let receiver = start_receiver(Arc::clone(&tally)).await?;
    let authorization = args
        .admin_token
        .as_deref()
        .map(|t| HeaderValue::from_str(&format!("Bearer {t}")))
        .transpose()
        .map_err(|_| "--admin-token is not a valid header value")?;
    let mut admin = Admin {
        target: Arc::clone(&target),
        conn: Connection::new(Arc::clone(&target)),
        authorization,
    };
    // Leftovers of an interrupted run would take the names.
    admin.delete_all().await;
    for (name, patterns) in BENCH_SUBSCRIBERS {
        let url = format!("http://{receiver}/{name}");
        if let Err(err) = admin.create(name, patterns, &url).await {
            eprintln!("loadgen: {err}");
            admin.delete_all().await;
            return Ok(ExitCode::FAILURE);
        }
    }
    let outcome = deliver_events(&args, &target, &tally).await;
    admin.delete_all().await;
    outcome
}

/// How many events to post, by when, over how many connections.
struct Posting {
    total: u64,
    deadline: Instant,
    connections: u64,
}

/// Posts `posting.total` events (the bodies in turn, 429s and failures retried with
/// the same key) with a progress bar labelled `mode`.
async fn post_counted(
    target: &Arc<Target>,
    run_id: String,
    bodies: Vec<Bytes>,
    posting: &Posting,
    started: Instant,
    mode: &str,
) -> Result<Stats, BoxError> {
    let shared = Arc::new(Shared {
        path: target.path("/webhooks"),
        bodies,
        target: Arc::clone(target),
        run_id,
        github_signature: None,
        budget: Budget::Count {
            total: posting.total,
            deadline: posting.deadline,
            next: AtomicU64::new(0),
        },
        retry_rejected: true,
        responses: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
    });
    let template =
        format!("{{spinner}} {mode} post [{{bar:30}}] {{pos}}/{{len}} accepted  {{msg}}");
    let bar = progress_bar(posting.total, &template);
    let progress = spawn_progress(bar.clone(), Arc::clone(&shared), started, |shared, _| {
        shared.accepted.load(Ordering::Relaxed)
    });
    let stats = post_events(shared, posting.connections).await;
    progress.abort();
    bar.finish_and_clear();
    stats
}

/// Posts the events and waits for the deliveries (the subscribers exist).
async fn deliver_events(
    args: &DeliverArgs,
    target: &Arc<Target>,
    tally: &Tally,
) -> Result<ExitCode, BoxError> {
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
    print_table(&[
        ("mode", "deliver".to_owned()),
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
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(&stats))
}

/// Waits until the receiver has `expected` distinct deliveries; false at the deadline.
async fn wait_for_deliveries(
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

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

/// Latency percentiles in microseconds.
#[derive(Debug, PartialEq)]
struct Summary {
    p50: Option<u32>,
    p90: Option<u32>,
    p99: Option<u32>,
    max: Option<u32>,
}

impl Summary {
    /// Sorts the samples and picks nearest-rank percentiles.
    fn new(samples: &mut [u32]) -> Self {
        samples.sort_unstable();
        Self {
            p50: percentile(samples, 50.0),
            p90: percentile(samples, 90.0),
            p99: percentile(samples, 99.0),
            max: samples.last().copied(),
        }
    }
}

/// Nearest-rank percentile of sorted samples: the smallest value with at least
/// `p` percent of the samples at or below it.
fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Formats a latency: `850us`, `1.85ms`, `12.3ms`, `1.20s`, or `-` without samples.
fn format_micros(micros: Option<u32>) -> String {
    let Some(us) = micros else {
        return "-".to_owned();
    };
    let ms = f64::from(us) / 1000.0;
    match us {
        0..1_000 => format!("{us}us"),
        1_000..10_000 => format!("{ms:.2}ms"),
        10_000..1_000_000 => format!("{ms:.1}ms"),
        _ => format!("{:.2}s", ms / 1000.0),
    }
}

/// `count` per second over `elapsed` (0 for an empty interval).
fn per_second(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// The non-2xx column: `none` or the total count.
fn non_2xx_total(stats: &Stats) -> String {
    let total: u64 = stats.rejected().map(|(_, count)| count).sum();
    if total == 0 {
        "none".to_owned()
    } else {
        total.to_string()
    }
}

/// Prints a two-line table with columns padded to fit header and value.
fn print_table(columns: &[(&str, String)]) {
    let (mut header, mut values) = (String::new(), String::new());
    for (name, value) in columns {
        let width = name.len().max(value.len()) + 2;
        // Writing to a String cannot fail.
        let _ = write!(header, "{name:<width$}");
        let _ = write!(values, "{value:<width$}");
    }
    println!("{}", header.trim_end());
    println!("{}", values.trim_end());
}

/// Prints the status breakdown, connection errors and connections opened.
fn print_details(stats: &Stats) {
    let rejected: Vec<String> = stats
        .rejected()
        .map(|(status, count)| format!("{status}: {count}"))
        .collect();
    if !rejected.is_empty() {
        println!("non-2xx by status: {}", rejected.join(", "));
    }
    println!("connection errors: {}", stats.errors);
    if let Some(err) = &stats.first_error {
        println!("first connection error: {err}");
    }
    if stats.abandoned > 0 {
        println!("events given up at the timeout: {}", stats.abandoned);
    }
    println!("connections opened: {}", stats.connections_opened);
}

/// 0 normally; 1 when not a single response came back.
fn exit_code(stats: &Stats) -> ExitCode {
    if stats.responses() == 0 {
        eprintln!("loadgen: no request got a response");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<u32> = (1..=100).rev().collect();
        let summary = Summary::new(&mut samples);
        assert_eq!(
            summary,
            Summary {
                p50: Some(50),
                p90: Some(90),
                p99: Some(99),
                max: Some(100)
            }
        );
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
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

    #[test]
    fn latency_formatting() {
        assert_eq!(format_micros(Some(850)), "850us");
        assert_eq!(format_micros(Some(1_850)), "1.85ms");
        assert_eq!(format_micros(Some(40_000)), "40.0ms");
        assert_eq!(format_micros(Some(1_200_000)), "1.20s");
        assert_eq!(format_micros(None), "-");
    }

    #[test]
    fn fan_out_is_two_and_a_half_on_average() {
        assert_eq!(expected_deliveries(20_000), 50_000);
        assert_eq!(expected_deliveries(1), 2);
        assert_eq!(expected_deliveries(3), 7);
        assert_eq!(expected_deliveries(0), 0);
    }

    #[test]
    fn body_is_about_the_requested_size() -> Result<(), BoxError> {
        let body = event_body("bench.ingest", "run", 1024)?;
        let value: serde_json::Value = serde_json::from_slice(&body)?;
        let payload = serde_json::to_vec(&value["payload"])?;
        assert_eq!(payload.len(), 1024);
        assert_eq!(value["event_type"], "bench.ingest");
        Ok(())
    }
}
