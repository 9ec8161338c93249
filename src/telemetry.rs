//! Logs and metrics: the tracing subscriber, the Prometheus recorder, and every
//! metric name (docs/api.md, "Probes and metrics") as a constant.

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Metric names (part of the contract: docs/api.md, "Probes and metrics").
pub mod names {
    /// Counter `{method,route,status}`.
    pub const HTTP_REQUESTS: &str = "hookbox_http_requests_total";
    /// Histogram `{method,route}`.
    pub const HTTP_REQUEST_DURATION: &str = "hookbox_http_request_duration_seconds";
    /// Counter `{event_type}` of accepted new events.
    pub const EVENTS_RECEIVED: &str = "hookbox_events_received_total";
    /// Counter of idempotent retries answered with the stored event.
    pub const EVENTS_DUPLICATE: &str = "hookbox_events_duplicate_total";
    /// Counter `{reason}` of refused intake requests.
    pub const EVENTS_REJECTED: &str = "hookbox_events_rejected_total";
    /// Counter of events no handler matched.
    pub const EVENTS_UNROUTED: &str = "hookbox_events_unrouted_total";
    /// Gauge: jobs in the in-memory queue (queued or running).
    pub const QUEUE_DEPTH: &str = "hookbox_queue_depth";
    /// Gauge: `QUEUE_MAXSIZE`.
    pub const QUEUE_CAPACITY: &str = "hookbox_queue_capacity";
    /// Counter `{handler,outcome}`; outcome is completed, retry or dead_letter.
    pub const DELIVERIES: &str = "hookbox_deliveries_total";
    /// Counter, label `destination`: events routed to a handler whose filter did
    /// not match them (no delivery made).
    pub const DELIVERIES_FILTERED: &str = "hookbox_deliveries_filtered_total";
    /// Histogram `{handler}` of attempt durations.
    pub const DELIVERY_DURATION: &str = "hookbox_delivery_duration_seconds";
    /// Gauge: events not yet terminal.
    pub const EVENTS_PENDING: &str = "hookbox_events_pending";
    /// Gauge: failed deliveries (dead letters).
    pub const DEAD_LETTERS: &str = "hookbox_dead_letters";
    /// Gauge: age of the oldest unfinished event.
    pub const OLDEST_PENDING_AGE: &str = "hookbox_oldest_pending_age_seconds";
    /// Counter `{source,outcome}` of requests to `POST /ingest/{name}` (docs/sources.md);
    /// outcome is accepted, duplicate or rejected.
    pub const SOURCE_REQUESTS: &str = "hookbox_source_requests_total";
    /// Counter `{source,reason}` of refused source requests; reason is signature,
    /// timestamp or other.
    pub const SOURCE_REJECTED: &str = "hookbox_source_rejected_total";
    /// Gauge `{source}`: 1 while a pull source's adapter fetches without error.
    pub const SOURCE_UP: &str = "hookbox_source_up";
    /// Gauge `{source}`: now minus the source's timestamp of the last committed item.
    pub const SOURCE_CURSOR_LAG: &str = "hookbox_source_cursor_lag_seconds";
    /// Counter of `POST /webhooks` retries answered from the recent keys (200 or
    /// 422) without a round trip to the database's writer (SQLite only).
    pub const IDEMPOTENCY_CACHE_HITS: &str = "hookbox_idempotency_cache_hits_total";
    /// Gauge `{destination,state}`: 1 for the destination's current state, else 0.
    pub const DESTINATION_STATE: &str = "hookbox_destination_state";
    /// Gauge `{destination}`: attempts running for the destination.
    pub const DESTINATION_IN_FLIGHT: &str = "hookbox_destination_in_flight";
    /// Counter `{destination,reason}`: attempts that had to wait for their
    /// destination (`rate_limit`, `retry_after`, `circuit`, `paused`, `max_in_flight`).
    pub const DESTINATION_THROTTLED: &str = "hookbox_destination_throttled_total";
    /// Counter of spans sent to the OTLP collector (SPEC §13).
    pub const TRACE_SPANS_EXPORTED: &str = "hookbox_trace_spans_exported_total";
    /// Counter of spans dropped: the export queue was full, or the collector
    /// refused or never answered their batch.
    pub const TRACE_SPANS_DROPPED: &str = "hookbox_trace_spans_dropped_total";
}

/// Installs the global tracing subscriber (`LOG_LEVEL` filter, `LOG_FORMAT` lines).
/// A second call does nothing.
pub fn init_tracing(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let _ = match format {
        // An event's fields at the top level, beside `timestamp`, `level`,
        // `target` and `message`: a line about an event has its `trace_id` as a
        // key of its own (SPEC §13), not under `fields`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

/// One destination's delivery metrics (`hookbox_deliveries_total` by outcome and
/// `hookbox_delivery_duration_seconds`), looked up in the recorder at the first
/// delivery and kept with the route: every later delivery counts without building
/// the labels and finding them again (3.5 % of an http delivery's instructions).
///
/// ```
/// use hookbox::telemetry::{DeliveryMetrics, DeliveryOutcome};
///
/// let metrics = DeliveryMetrics::default();
/// metrics.took("orders", 0.012);
/// metrics.count("orders", DeliveryOutcome::Completed);
/// ```
#[derive(Debug, Default)]
pub struct DeliveryMetrics {
    took: std::sync::OnceLock<metrics::Histogram>,
    /// One per [`DeliveryOutcome`] (by its discriminant), each found when first
    /// counted, so that `/metrics` lists only outcomes that happened, as before.
    outcomes: [std::sync::OnceLock<metrics::Counter>; 4],
}

/// What an attempt came to, as `hookbox_deliveries_total`'s `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// `completed`
    Completed,
    /// `cancelled` (a transform cancelled it)
    Cancelled,
    /// `retry`
    Retry,
    /// `dead_letter`
    DeadLetter,
}

impl DeliveryOutcome {
    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
        }
    }
}

impl DeliveryMetrics {
    /// Records how long an attempt of `destination` took, in seconds.
    pub fn took(&self, destination: &str, seconds: f64) {
        self.took
            .get_or_init(|| {
                metrics::histogram!(names::DELIVERY_DURATION, "handler" => destination.to_owned())
            })
            .record(seconds);
    }

    /// Counts one attempt of `destination` that came to `outcome`.
    pub fn count(&self, destination: &str, outcome: DeliveryOutcome) {
        self.outcomes[outcome as usize]
            .get_or_init(|| {
                metrics::counter!(names::DELIVERIES, "handler" => destination.to_owned(), "outcome" => outcome.as_str())
            })
            .increment(1);
    }
}

/// `hookbox_events_received_total`'s handles, one per `event_type` label, each
/// found at the label's first event. Looking the counter up on every event built
/// its key (the label copied into it), hashed it and searched the recorder's
/// registry; a label the routing table gives is now one map lookup by `&str`.
/// Labels are bounded as the recorder's own registry is: by the routing table's
/// patterns (docs/api.md, "Probes and metrics").
///
/// ```
/// use hookbox::telemetry::ReceivedCounters;
///
/// let received = ReceivedCounters::default();
/// received.increment("order.created");
/// received.increment("other");
/// ```
#[derive(Debug, Default)]
pub struct ReceivedCounters(std::sync::Mutex<std::collections::HashMap<String, metrics::Counter>>);

impl ReceivedCounters {
    /// Counts one event under `label`.
    pub fn increment(&self, label: &str) {
        let mut handles = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counter) = handles.get(label) {
            counter.increment(1);
            return;
        }
        let counter = metrics::counter!(names::EVENTS_RECEIVED, "event_type" => label.to_owned());
        counter.increment(1);
        handles.insert(label.to_owned(), counter);
    }
}

/// A copy looks its handles up again: a copied route may be renamed.
impl Clone for DeliveryMetrics {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// Installs the Prometheus recorder with histogram buckets (so histograms render as
/// histograms, not summaries) and starts its upkeep task. Call once, from a runtime.
pub fn install_prometheus() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    const BUCKETS: &[f64] = &[
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// Registers every metric with a description so `/metrics` lists them from the start.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::HTTP_REQUESTS,
        "HTTP requests by method, route and status"
    );
    describe_histogram!(
        names::HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "HTTP request duration"
    );
    describe_counter!(names::EVENTS_RECEIVED, "New events accepted, by event type");
    describe_counter!(
        names::EVENTS_DUPLICATE,
        "Idempotent retries of known events"
    );
    describe_counter!(names::EVENTS_REJECTED, "Intake requests refused, by reason");
    describe_counter!(names::EVENTS_UNROUTED, "Events that matched no handler");
    describe_gauge!(
        names::DESTINATION_STATE,
        "1 for each destination's current state (healthy, paused, failing, disabled)"
    );
    describe_gauge!(
        names::DESTINATION_IN_FLIGHT,
        "Attempts running per destination"
    );
    describe_counter!(
        names::DESTINATION_THROTTLED,
        "Attempts that waited for their destination, by reason"
    );
    describe_gauge!(names::QUEUE_DEPTH, "Jobs queued or running in memory");
    describe_gauge!(names::QUEUE_CAPACITY, "QUEUE_MAXSIZE");
    describe_counter!(
        names::DELIVERIES,
        "Delivery attempts by handler and outcome"
    );
    describe_counter!(
        names::DELIVERIES_FILTERED,
        "Events a handler's filter kept from it, by destination"
    );
    describe_histogram!(
        names::DELIVERY_DURATION,
        Unit::Seconds,
        "Delivery attempt duration"
    );
    describe_gauge!(names::EVENTS_PENDING, "Events not yet completed or failed");
    describe_gauge!(names::DEAD_LETTERS, "Failed deliveries (dead letters)");
    describe_gauge!(
        names::OLDEST_PENDING_AGE,
        Unit::Seconds,
        "Age of the oldest unfinished event"
    );
    describe_counter!(
        names::SOURCE_REQUESTS,
        "Requests to POST /ingest/{name}, by source and outcome (accepted, duplicate, rejected)"
    );
    describe_counter!(
        names::SOURCE_REJECTED,
        "Source requests refused, by source and reason (signature, timestamp, other)"
    );
    describe_gauge!(
        names::SOURCE_UP,
        "Pull sources: 1 while connected or polling without error"
    );
    describe_gauge!(
        names::SOURCE_CURSOR_LAG,
        Unit::Seconds,
        "Pull sources: now minus the source's timestamp of the last committed item"
    );
    describe_counter!(
        names::IDEMPOTENCY_CACHE_HITS,
        "Intake retries answered from the recent keys, without the database's writer"
    );
    describe_counter!(
        names::TRACE_SPANS_EXPORTED,
        "Spans sent to the OTLP collector (OTEL_EXPORTER_OTLP_ENDPOINT)"
    );
    describe_counter!(
        names::TRACE_SPANS_DROPPED,
        "Spans dropped: the export queue was full or the collector failed their batch"
    );
    metrics::counter!(names::EVENTS_DUPLICATE).absolute(0);
    metrics::counter!(names::IDEMPOTENCY_CACHE_HITS).absolute(0);
    metrics::counter!(names::EVENTS_UNROUTED).absolute(0);
}

#[cfg(test)]
mod tests {
    use super::{DeliveryMetrics, DeliveryOutcome, ReceivedCounters};
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// The kept handles count what the `metrics::counter!` lookups counted: per
    /// destination and outcome, outcomes that never happened left out.
    #[test]
    fn kept_handles_count_per_destination_and_outcome() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let (orders, invoices) = (DeliveryMetrics::default(), DeliveryMetrics::default());
            for _ in 0..2 {
                orders.count("orders", DeliveryOutcome::Completed);
                orders.took("orders", 0.01);
            }
            orders.count("orders", DeliveryOutcome::Retry);
            invoices.count("invoices", DeliveryOutcome::DeadLetter);
        });
        let text = handle.render();
        for line in [
            r#"hookbox_deliveries_total{handler="orders",outcome="completed"} 2"#,
            r#"hookbox_deliveries_total{handler="orders",outcome="retry"} 1"#,
            r#"hookbox_deliveries_total{handler="invoices",outcome="dead_letter"} 1"#,
            r#"hookbox_delivery_duration_seconds_count{handler="orders"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("cancelled"), "{text}");
        assert!(
            !text.contains(r#"handler="invoices",outcome="completed""#),
            "{text}"
        );
    }

    /// Each label counts its own events through its kept handle.
    #[test]
    fn received_counters_count_per_label() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let received = ReceivedCounters::default();
            for _ in 0..3 {
                received.increment("order.created");
            }
            received.increment("github.*");
        });
        let text = handle.render();
        for line in [
            r#"hookbox_events_received_total{event_type="order.created"} 3"#,
            r#"hookbox_events_received_total{event_type="github.*"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
