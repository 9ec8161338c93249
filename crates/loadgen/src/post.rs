//! Posting webhooks: the tasks that keep one request in flight per connection, their
//! budget (a deadline or a count), and what they tally.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::HeaderMap;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};

use crate::BoxError;
use crate::conn::{Connection, Target};
use crate::progress::{Counted, progress_bar, spawn_progress};

/// Longest wait honoured from a `Retry-After` answer in `e2e` mode.
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(1);
/// Pause after a failed request, so a dead server does not cause a hot loop.
pub(crate) const ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// What every posting task shares.
pub(crate) struct Shared {
    pub(crate) target: Arc<Target>,
    /// Request path of the intake endpoint.
    pub(crate) path: String,
    /// Request bodies: event `seq` gets `bodies[seq % len]` (only keys differ
    /// between events with the same body).
    pub(crate) bodies: Vec<Bytes>,
    /// Prefix of every idempotency key of this run.
    pub(crate) run_id: String,
    /// `storm`: event `seq` reuses the key of event `seq % key_space` (so every
    /// request repeats one of `key_space` keys); `None`: every key is new.
    pub(crate) key_space: Option<u64>,
    /// Where and how it posts: `/webhooks`, or as a provider (`ingest --source`).
    pub(crate) provider: Provider,
    pub(crate) budget: Budget,
    /// In `e2e` mode: retry 429/503 and failed requests with the same key.
    pub(crate) retry_rejected: bool,
    /// Responses received so far, any status (for the progress line).
    pub(crate) responses: AtomicU64,
    /// 2xx responses received so far (for the progress line).
    pub(crate) accepted: AtomicU64,
}

/// How a run posts: to `/webhooks`, or as a provider.
pub(crate) enum Provider {
    /// `POST /webhooks` with an `Idempotency-Key`.
    Intake,
    /// GitHub: `X-Hub-Signature-256` of the one body; the key in `X-GitHub-Delivery`.
    Github(HeaderValue),
    /// Requests signed beforehand: request `i` gets body `i` and these headers.
    Presigned(Vec<HeaderMap>),
}

/// When the posting tasks stop.
pub(crate) enum Budget {
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
    pub(crate) fn claim(&self) -> Option<u64> {
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
    pub(crate) fn expired(&self) -> bool {
        let (Budget::Until { deadline, .. } | Budget::Count { deadline, .. }) = self;
        Instant::now() >= *deadline
    }
}

/// Counters and latencies of one task, merged into one at the end.
#[derive(Default, Debug)]
pub(crate) struct Stats {
    /// Latency of every response received, in microseconds.
    pub(crate) latencies_us: Vec<u32>,
    /// Responses by status code.
    pub(crate) statuses: BTreeMap<u16, u64>,
    /// Requests that got no response (connect, I/O or timeout errors).
    pub(crate) errors: u64,
    /// The first such error, to show what went wrong.
    pub(crate) first_error: Option<String>,
    /// TCP connections opened.
    pub(crate) connections_opened: u64,
    /// Events given up on (`e2e` only: the deadline passed while retrying).
    pub(crate) abandoned: u64,
}

impl Stats {
    /// Adds another task's numbers to these.
    pub(crate) fn merge(&mut self, other: Stats) {
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
    pub(crate) fn accepted(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(status, _)| (200..300).contains(*status))
            .map(|(_, count)| count)
            .sum()
    }

    /// Number of responses received, any status.
    pub(crate) fn responses(&self) -> u64 {
        self.statuses.values().sum()
    }

    /// Non-2xx statuses with their counts.
    pub(crate) fn rejected(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.statuses
            .iter()
            .filter(|(status, _)| !(200..300).contains(*status))
            .map(|(status, count)| (*status, *count))
    }

    pub(crate) fn record_error(&mut self, err: &BoxError) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(err.to_string());
        }
    }
}

/// The outcome of posting one event once.
pub(crate) enum Attempt {
    /// A response arrived; retry it after this long if it is worth retrying.
    Answered { retry_after: Option<Duration> },
    /// No response (error already recorded).
    Failed,
}

/// Builds the JSON body `{"event_type": ..., "payload": {...}}` with a payload of
/// roughly `payload_bytes` bytes.
pub(crate) fn event_body(
    event_type: &str,
    run_id: &str,
    payload_bytes: usize,
) -> Result<Bytes, BoxError> {
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
pub(crate) async fn post_events(shared: Arc<Shared>, connections: u64) -> Result<Stats, BoxError> {
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
pub(crate) async fn connection_task(shared: Arc<Shared>) -> Stats {
    let mut conn = Connection::new(Arc::clone(&shared.target));
    let mut stats = Stats::default();
    while let Some(seq) = shared.budget.claim() {
        let key_seq = shared.key_space.map_or(seq, |space| seq % space.max(1));
        let key = format!("{}-{key_seq}", shared.run_id);
        post_until_done(&shared, &mut conn, seq, &key, &mut stats).await;
    }
    stats.connections_opened = conn.opened;
    stats
}

/// Posts one event; in `e2e` mode retries rejections and errors with the same key.
pub(crate) async fn post_until_done(
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
pub(crate) async fn post_once(
    shared: &Shared,
    conn: &mut Connection,
    seq: u64,
    key: &str,
    stats: &mut Stats,
) -> Attempt {
    post_timed(shared, conn, seq, key, stats, None).await
}

/// Sends one POST /webhooks and records its status and its latency: from `since`
/// (`soak`: when the request was due, so that time spent waiting for a free
/// connection counts), or from the send with `None`.
pub(crate) async fn post_timed(
    shared: &Shared,
    conn: &mut Connection,
    seq: u64,
    key: &str,
    stats: &mut Stats,
    since: Option<Instant>,
) -> Attempt {
    let request = match intake_request(shared, seq, key) {
        Ok(request) => request,
        Err(err) => {
            stats.record_error(&err);
            return Attempt::Failed;
        }
    };
    let started = since.unwrap_or_else(Instant::now);
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
pub(crate) fn intake_request(
    shared: &Shared,
    seq: u64,
    key: &str,
) -> Result<Request<Full<Bytes>>, BoxError> {
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
    let mut request = match &shared.provider {
        Provider::Intake => request.header("Idempotency-Key", key),
        Provider::Github(signature) => request
            .header("X-GitHub-Event", "ingest")
            .header("X-GitHub-Delivery", key)
            .header("X-Hub-Signature-256", signature.clone()),
        Provider::Presigned(_) => request,
    };
    if let (Provider::Presigned(all), Some(headers)) = (&shared.provider, request.headers_mut()) {
        if let Some(signed) = all.get(index) {
            headers.extend(signed.clone());
        }
    }
    Ok(request.body(Full::new(body))?)
}

/// How long to wait before retrying this response, if it is worth retrying
/// (429 or 503, honouring `Retry-After` in seconds up to [`MAX_RETRY_WAIT`]).
pub(crate) fn retry_wait(response: &Response<Bytes>) -> Option<Duration> {
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

/// How many events to post, by when, over how many connections.
pub(crate) struct Posting {
    pub(crate) total: u64,
    pub(crate) deadline: Instant,
    pub(crate) connections: u64,
}

/// Posts `posting.total` events (the bodies in turn, 429s and failures retried with
/// the same key) with a progress bar labelled `mode`.
pub(crate) async fn post_counted(
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
        key_space: None,
        provider: Provider::Intake,
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

impl Counted for Shared {
    fn responses(&self) -> u64 {
        self.responses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
