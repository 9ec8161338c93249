//! OTLP export of hookbox's spans (SPEC §13): one `hookbox.intake` span per
//! submission the inbox answered, one `hookbox.attempt` per delivery attempt, each
//! in its event's W3C trace ([`crate::trace_context`]) with the ids hookbox
//! propagated (the attempt span's id is the one the receiver saw in `traceparent`).
//!
//! Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: then nothing is built, queued or
//! sent, and each call here costs one atomic load. On, a finished span goes into a
//! bounded queue ([`QUEUE_SPANS`]) without ever waiting: when the queue is full the
//! span is dropped and counted in `hookbox_trace_spans_dropped_total`. One task
//! sends the queue in batches (up to [`BATCH_SPANS`] spans, at least every
//! [`BATCH_DELAY`]) as OTLP/HTTP protobuf requests through `opentelemetry-otlp`,
//! each bounded by `OTEL_EXPORTER_OTLP_TIMEOUT`; a batch the collector refuses or
//! never answers is dropped and counted too. So a dead collector costs spans,
//! never intake or a worker.
//!
//! Only sampled traces (flag `01`) are exported: a sender that marked its trace
//! unsampled gets none of hookbox's spans either (the parent-based rule).

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::Otlp;
use crate::telemetry::names;
use crate::trace_context::TraceContext;

/// Spans that may wait for the exporter; past this, new ones are dropped.
pub(crate) const QUEUE_SPANS: usize = 8192;
/// The most spans one export request carries.
pub(crate) const BATCH_SPANS: usize = 512;
/// The longest a span waits for its batch to fill.
pub(crate) const BATCH_DELAY: Duration = Duration::from_secs(1);

/// Where finished spans go; set once, when the exporter starts.
static QUEUE: OnceLock<mpsc::Sender<SpanData>> = OnceLock::new();

/// Whether spans are exported (`OTEL_EXPORTER_OTLP_ENDPOINT` set and the exporter
/// started): callers skip building what they would record.
pub(crate) fn enabled() -> bool {
    QUEUE.get().is_some()
}

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("the OTLP exporter: {0}")]
pub(crate) struct ExportError(String);

/// The running exporter: [`Exporting::finish`] sends what is queued.
pub(crate) struct Exporting {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Exporting {
    /// Stops taking batches' time: sends what is queued (bounded by the
    /// exporter's timeout) and returns.
    pub(crate) async fn finish(self, within: Duration) {
        self.stop.cancel();
        let _ = tokio::time::timeout(within, self.task).await;
    }
}

/// Starts the exporter for `settings` (from a runtime). A second start in one
/// process (tests embedding several apps) keeps the first queue.
pub(crate) fn start(settings: &Otlp) -> Result<Exporting, ExportError> {
    // Like every outbound request, never through a proxy named by HTTP_PROXY,
    // HTTPS_PROXY or ALL_PROXY (SPEC §1).
    let client = reqwest::Client::builder()
        .timeout(settings.timeout)
        .no_proxy()
        .build()
        .map_err(|e| ExportError(e.to_string()))?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.traces_endpoint())
        .with_timeout(settings.timeout)
        .with_headers(settings.headers.iter().cloned().collect())
        .build()
        .map_err(|e| ExportError(e.to_string()))?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
            )
            .build(),
    );
    let (tx, rx) = mpsc::channel(QUEUE_SPANS);
    let _ = QUEUE.set(tx);
    crate::trace_context::time_intake_spans();
    metrics::counter!(names::TRACE_SPANS_DROPPED).absolute(0);
    let stop = CancellationToken::new();
    let task = tokio::spawn(send_batches(exporter, rx, stop.clone(), settings.timeout));
    Ok(Exporting { stop, task })
}

/// The exporter's task: a batch when [`BATCH_SPANS`] wait or [`BATCH_DELAY`]
/// passed since the first of them; on stop, what is left.
async fn send_batches(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<SpanData>,
    stop: CancellationToken,
    timeout: Duration,
) {
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            n = rx.recv_many(&mut batch, BATCH_SPANS) => n == 0,
        };
        if !stopping && batch.len() < BATCH_SPANS {
            let deadline = tokio::time::Instant::now() + BATCH_DELAY;
            while batch.len() < BATCH_SPANS {
                let more = BATCH_SPANS - batch.len();
                match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, more)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        if stopping {
            while let Ok(span) = rx.try_recv() {
                batch.push(span);
            }
        }
        for chunk in batch.chunks(BATCH_SPANS) {
            send(&exporter, chunk.to_vec(), timeout).await;
        }
        batch.clear();
        if stopping {
            return;
        }
    }
}

/// One export request; its spans are counted as dropped when it fails.
async fn send(
    exporter: &opentelemetry_otlp::SpanExporter,
    spans: Vec<SpanData>,
    timeout: Duration,
) {
    let n = spans.len() as u64;
    let sent = tokio::time::timeout(timeout, exporter.export(spans)).await;
    match sent {
        Ok(Ok(())) => metrics::counter!(names::TRACE_SPANS_EXPORTED).increment(n),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, spans = n, "OTLP export failed; spans dropped");
            metrics::counter!(names::TRACE_SPANS_DROPPED).increment(n);
        }
        Err(_) => {
            tracing::debug!(spans = n, "OTLP export timed out; spans dropped");
            metrics::counter!(names::TRACE_SPANS_DROPPED).increment(n);
        }
    }
}

/// Records the `hookbox.intake` span of a submission: from when `trace` was made
/// at intake until now, a child of the sender's span when it sent one. `status`
/// is the HTTP status it was answered with (`None` for a pulled item).
pub(crate) fn intake(
    trace: &TraceContext,
    event_id: Option<Uuid>,
    event_type: &str,
    status: Option<u16>,
) {
    let Some(queue) = QUEUE.get() else { return };
    let mut attributes = vec![KeyValue::new("hookbox.event_type", event_type.to_owned())];
    if let Some(id) = event_id {
        attributes.push(KeyValue::new("hookbox.event_id", id.to_string()));
    }
    if let Some(status) = status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    let started = trace.began_at().unwrap_or_else(SystemTime::now);
    let span = span_data(
        "hookbox.intake",
        SpanKind::Server,
        trace,
        trace.parent_span_id(),
        (started, SystemTime::now()),
        attributes,
    );
    enqueue(queue, span);
}

/// What one attempt was, for its `hookbox.attempt` span.
pub(crate) struct AttemptSpan<'a> {
    /// The event's stored context (the attempt's parent).
    pub event: &'a TraceContext,
    /// The attempt's own span (what the receiver got in `traceparent`).
    pub span: &'a TraceContext,
    /// When it started.
    pub started: SystemTime,
    /// How long it took.
    pub took: Duration,
    /// The event.
    pub event_id: Uuid,
    /// The destination (handler) it went to.
    pub destination: &'a str,
    /// Its number, from 1.
    pub attempt: u32,
    /// The attempt history's word for how it ended.
    pub outcome: &'a str,
}

/// Records the `hookbox.attempt` span of one attempt, a child of its event's span.
pub(crate) fn attempt(a: &AttemptSpan<'_>) {
    let Some(queue) = QUEUE.get() else { return };
    let attributes = vec![
        KeyValue::new("hookbox.event_id", a.event_id.to_string()),
        KeyValue::new("hookbox.destination", a.destination.to_owned()),
        KeyValue::new("hookbox.attempt", i64::from(a.attempt)),
        KeyValue::new("hookbox.outcome", a.outcome.to_owned()),
    ];
    let span = span_data(
        "hookbox.attempt",
        SpanKind::Client,
        a.span,
        Some(a.event.span_id()),
        (a.started, a.started + a.took),
        attributes,
    );
    enqueue(queue, span);
}

/// Queues a span without waiting; a full queue drops it (counted).
fn enqueue(queue: &mpsc::Sender<SpanData>, span: Option<SpanData>) {
    let Some(span) = span else { return };
    if queue.try_send(span).is_err() {
        metrics::counter!(names::TRACE_SPANS_DROPPED).increment(1);
    }
}

/// A finished span of `trace` (its trace and span id); `None` when the trace is
/// not sampled or an id does not parse.
fn span_data(
    name: &'static str,
    kind: SpanKind,
    trace: &TraceContext,
    parent: Option<&str>,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
) -> Option<SpanData> {
    if !trace.sampled() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.span_id()).ok()?;
    let parent_span_id = match parent {
        Some(p) => SpanId::from_hex(p).ok()?,
        None => SpanId::INVALID,
    };
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanData {
        span_context: SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, state),
        parent_span_id,
        parent_span_is_remote: name == "hookbox.intake" && parent.is_some(),
        span_kind: kind,
        name: Cow::Borrowed(name),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: scope(),
    })
}

/// hookbox's instrumentation scope (its name and version).
fn scope() -> InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE
        .get_or_init(|| {
            InstrumentationScope::builder("hookbox")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build()
        })
        .clone()
}
