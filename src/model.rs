//! The domain types that cross module boundaries: events, deliveries, their status,
//! and the timestamp format of the API.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

/// Lifecycle of an event and of each of its deliveries:
/// `pending → processing → completed | failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Accepted and waiting for a worker (or for its retry time).
    Pending,
    /// A worker is running (one of) its handlers.
    Processing,
    /// Every delivery succeeded (or no handler matched).
    Completed,
    /// A delivery was dead-lettered and none is still running.
    Failed,
}

impl Status {
    /// The name stored in the database and shown by the API.
    ///
    /// ```
    /// assert_eq!(hookbox::model::Status::Pending.as_str(), "pending");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Parses a stored or query-string status name.
    ///
    /// ```
    /// use hookbox::model::Status;
    /// assert_eq!(Status::parse("failed"), Some(Status::Failed));
    /// assert_eq!(Status::parse("done"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "processing" => Some(Self::Processing),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    /// True for `completed` and `failed`: nothing more will happen on its own.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// A point in time as the API shows it: RFC 3339, UTC, milliseconds
/// (`2026-11-25T22:44:57.123Z`). Stored in the same text form in SQLite, where it sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, utoipa::ToSchema)]
#[schema(value_type = String, format = DateTime, example = "2026-11-25T22:44:57.123Z")]
pub struct Timestamp(pub DateTime<Utc>);

impl Timestamp {
    /// The current time, truncated to milliseconds so that stored and shown values agree.
    pub fn now() -> Self {
        let now = Utc::now();
        let millis = now.timestamp_millis();
        Self(DateTime::from_timestamp_millis(millis).unwrap_or(now))
    }

    /// Formats as RFC 3339 UTC with milliseconds.
    ///
    /// ```
    /// use hookbox::model::Timestamp;
    /// let t = Timestamp::parse("2026-11-25T22:44:57.123Z").expect("valid");
    /// assert_eq!(t.to_rfc3339(), "2026-11-25T22:44:57.123Z");
    /// ```
    pub fn to_rfc3339(&self) -> String {
        match self.digits() {
            Some(text) => String::from_utf8_lossy(&text).into_owned(),
            None => self.0.to_rfc3339_opts(SecondsFormat::Millis, true),
        }
    }

    /// The 24 bytes [`Self::to_rfc3339`] writes for a year from 0 to 9999 outside a
    /// leap second (`None` otherwise: chrono writes those): put together from the
    /// time's fields, where chrono's formatter (about 700 instructions) ran through
    /// `core::fmt` for each of the few times every event is written out.
    fn digits(&self) -> Option<[u8; 24]> {
        use chrono::{Datelike, Timelike};
        let t = self.0.naive_utc();
        let (year, nanos) = (u32::try_from(t.year()).ok()?, t.nanosecond());
        if year > 9999 || nanos >= 1_000_000_000 {
            return None;
        }
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut value: u32| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, t.month());
        put(8, 2, t.day());
        put(11, 2, t.hour());
        put(14, 2, t.minute());
        put(17, 2, t.second());
        put(20, 3, nanos / 1_000_000);
        Some(out)
    }

    /// Parses any RFC 3339 timestamp (used for stored values and `before=` filters).
    pub fn parse(s: &str) -> Option<Self> {
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| Self(t.with_timezone(&Utc)))
    }

    /// Milliseconds since the Unix epoch.
    pub fn millis(&self) -> i64 {
        self.0.timestamp_millis()
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

/// One handler's share of an event, as the status API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// The handler's name.
    pub handler: String,
    /// This delivery's own status.
    pub status: Status,
    /// Attempts made so far.
    pub attempts: u32,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// When the next attempt is due, while waiting to retry.
    pub retry_after: Option<Timestamp>,
    /// Last change.
    pub updated_at: Timestamp,
}

/// A stored event with everything the status API shows about it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventView {
    /// UUID v7, so ids sort by creation time.
    pub id: Uuid,
    /// The caller's key, or the id when the caller sent none.
    pub idempotency_key: String,
    /// What kind of event this is; handlers route on it.
    pub event_type: String,
    /// Derived from the deliveries (see [`Status`]).
    pub status: Status,
    /// The highest attempt count among its deliveries.
    pub attempts: u32,
    /// The most recent delivery error.
    pub last_error: Option<String>,
    /// When it was accepted.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// The source it came from (`POST /ingest/{name}`); `None` for `POST /webhooks`.
    pub source: Option<String>,
    /// How many requests carried it: 1, plus one per duplicate answered 200.
    pub received_count: u32,
    /// When the latest of those requests arrived (`created_at` until a duplicate).
    pub last_received_at: Timestamp,
    /// A pulled event's sequence number at its source, when the source gives one.
    pub source_sequence: Option<i64>,
    /// A pulled event's timestamp at its source, when the source gives one.
    pub source_emitted_at: Option<Timestamp>,
    /// Its W3C trace id (32 hex): the sender's, from `traceparent`, or a new one
    /// (SPEC §13); `null` for an event stored before hookbox kept one.
    pub trace_id: Option<String>,
    /// One entry per handler that matched.
    pub deliveries: Vec<DeliveryView>,
    /// Hex SHA-256 of the canonical payload, for idempotency checks (not shown).
    #[serde(skip)]
    pub payload_sha256: String,
}

/// An event ready to be stored: validated, fingerprinted and routed.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Fresh UUID v7.
    pub id: Uuid,
    /// The caller's key, or the id as text.
    pub idempotency_key: String,
    /// Validated event type.
    pub event_type: String,
    /// Canonical JSON text of the payload (object keys sorted).
    pub payload: String,
    /// Hex SHA-256 of `payload`.
    pub payload_sha256: String,
    /// Acceptance time.
    pub created_at: Timestamp,
    /// The source it came from (`POST /ingest/{name}`); `None` for `POST /webhooks`.
    pub source: Option<String>,
    /// Its place in a W3C trace (SPEC §13); `None` only in tests.
    pub trace: Option<crate::trace_context::TraceContext>,
    /// The deliveries the registry decided on.
    pub deliveries: Vec<NewDelivery>,
    /// The version of the stored subscribers the routing table that decided
    /// `deliveries` was built from (PostgreSQL refuses the commit when the
    /// subscribers changed since: [`StoreError::StaleRouting`](crate::store::StoreError)).
    pub routing_version: u64,
    /// Set by `Inbox::accept` when this instance's
    /// workers have room and nothing older is due (PostgreSQL): the deliveries
    /// without an ordering value are stored already claimed by this instance, under
    /// a lease this long, and go straight to its workers — no claim for them.
    /// `None` everywhere else (and the SQLite store ignores it).
    pub claim_lease: Option<std::time::Duration>,
}

impl NewEvent {
    /// For tests: a new event of type `t` with key `key`, payload `{}` and one
    /// delivery, for handler `h`.
    #[cfg(test)]
    pub(crate) fn with_one_delivery(key: &str) -> NewEvent {
        NewEvent {
            id: Uuid::now_v7(),
            idempotency_key: key.into(),
            event_type: "t".into(),
            payload: "{}".into(),
            payload_sha256: "-".into(),
            created_at: Timestamp::now(),
            source: None,
            trace: None,
            routing_version: 0,
            claim_lease: None,
            deliveries: vec![NewDelivery {
                id: Uuid::now_v7(),
                handler: "h".into(),
                ordering_value: None,
            }],
        }
    }

    /// Whether `delivery` is stored claimed by this instance ([`NewEvent::claim_lease`]):
    /// it has no ordering value and a lease is set.
    pub fn claims(&self, delivery: &NewDelivery) -> bool {
        self.claim_lease.is_some() && delivery.ordering_value.is_none()
    }

    /// How many of its deliveries could be claimed at intake (those without an
    /// ordering value: an ordered one waits its turn through the claim query).
    pub fn claimable(&self) -> usize {
        self.deliveries
            .iter()
            .filter(|d| d.ordering_value.is_none())
            .count()
    }
}

/// One delivery to create with its event.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    /// Fresh UUID v7.
    pub id: Uuid,
    /// The handler's name.
    pub handler: String,
    /// The value of the handler's ordering key in this payload, if it has one.
    pub ordering_value: Option<String>,
}

/// Formats a byte slice as lowercase hex.
///
/// ```
/// assert_eq!(hookbox::model::hex(&[0x0f, 0xa0]), "0fa0");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Everything a worker needs for one attempt of one delivery.
#[derive(Debug, Clone)]
pub struct DeliveryTask {
    /// The delivery.
    pub delivery_id: Uuid,
    /// Its handler's name.
    pub handler: String,
    /// Its status now.
    pub status: Status,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due, if it waits.
    pub retry_after: Option<Timestamp>,
    /// The ordering key value, if the handler orders.
    pub ordering_value: Option<String>,
    /// When the delivery (and its event) was created.
    pub created_at: Timestamp,
    /// The event.
    pub event_id: Uuid,
    /// The event's idempotency key.
    pub idempotency_key: String,
    /// The event type.
    pub event_type: String,
    /// Canonical JSON payload.
    pub payload: std::sync::Arc<str>,
    /// The event's trace context (each attempt is a child span); `None` for an
    /// event stored before hookbox kept one.
    pub trace: Option<crate::trace_context::TraceContext>,
}

/// The outcome of one attempt, to record.
#[derive(Debug, Clone)]
pub struct Finish {
    /// The delivery.
    pub delivery_id: Uuid,
    /// Its event (whose status follows).
    pub event_id: Uuid,
    /// `completed`, `pending` (retry) or `failed` (dead letter).
    pub status: Status,
    /// Attempts made, this one included.
    pub attempts: u32,
    /// The error of this attempt, if it failed (kept on success too: the last one).
    pub last_error: Option<String>,
    /// When the retry is due.
    pub retry_after: Option<Timestamp>,
    /// The attempt this outcome ends, kept in the attempt history in the same commit
    /// (`None` when no attempt ran, e.g. its handler is no longer registered).
    pub attempt: Option<Attempt>,
    /// Its delivery has an ordering key value: the next delivery of that key waits
    /// for this outcome's commit, so a store that gathers outcomes into batches
    /// commits it without waiting for more (PostgreSQL's finisher).
    pub ordered: bool,
}

/// What one attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The handler succeeded: the delivery is done.
    Completed,
    /// It failed and the delivery will be tried again.
    Retry,
    /// It failed and the delivery is dead-lettered.
    DeadLetter,
    /// A transform cancelled it (`webhook.cancel = true`): nothing was sent, and
    /// the delivery is done.
    Cancelled,
}

impl AttemptOutcome {
    /// The name stored in the database and shown by the API.
    ///
    /// ```
    /// assert_eq!(hookbox::model::AttemptOutcome::DeadLetter.as_str(), "dead_letter");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses a stored outcome name.
    ///
    /// ```
    /// use hookbox::model::AttemptOutcome;
    /// assert_eq!(AttemptOutcome::parse("retry"), Some(AttemptOutcome::Retry));
    /// assert_eq!(AttemptOutcome::parse("failed"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "completed" => Some(Self::Completed),
            "retry" => Some(Self::Retry),
            "dead_letter" => Some(Self::DeadLetter),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// One attempt of one delivery, as `GET /webhooks/{id}/attempts` shows it: every
/// attempt is kept as long as its event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    /// The handler (the delivery is the event's one for this handler).
    pub handler: String,
    /// Its number among the delivery's attempts, from 1.
    pub attempt: u32,
    /// When it started (shown as RFC 3339 UTC with milliseconds).
    #[serde(serialize_with = "millis")]
    #[schema(value_type = Timestamp)]
    pub started_at: DateTime<Utc>,
    /// How long it ran.
    pub duration_ms: u64,
    /// What it came to.
    pub outcome: AttemptOutcome,
    /// The HTTP status of the answer (http handlers that got one).
    pub response_status: Option<u16>,
    /// What the receiver said: the first bytes of the answer's body (http handlers
    /// whose answer had one, success or not); at most [`Attempt::MAX_ERROR_BYTES`],
    /// credentials stripped.
    pub response_body: Option<String>,
    /// Why it failed: the error, or the status and first bytes of the answer; at most
    /// [`Attempt::MAX_ERROR_BYTES`], credentials stripped.
    pub error: Option<String>,
    /// What a transform made of the request, as JSON text (`method`, `url` without
    /// credentials, `headers`, and the first KB of `body`); `null` when no
    /// transform ran (the standard request was sent), and then left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

impl Attempt {
    /// The longest `error` kept.
    pub const MAX_ERROR_BYTES: usize = 1024;
}

fn millis<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    Timestamp(*t).serialize(s)
}

/// An http handler registered at run time (docs/handlers.md, "Subscribers").
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Subscriber {
    /// Unique among manifests and subscribers.
    pub name: String,
    /// Exact names or trailing-`*` prefixes.
    pub event_types: Vec<String>,
    /// Where deliveries go.
    pub url: String,
    /// `whsec_…` signing secret(s), space-separated; never shown by the API.
    #[serde(skip_serializing)]
    pub secret: Option<String>,
    /// JSON pointer into the payload: FIFO per value.
    pub ordering_key: Option<String>,
    /// Overrides `MAX_ATTEMPTS`.
    pub max_attempts: Option<u32>,
    /// Explicit backoff schedule (`["5s", "30s"]`).
    pub backoff: Option<Vec<String>>,
    /// Attempts running at once for this destination (default 8).
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Attempts started per second, minute or hour (`"50/s"`), spread evenly.
    #[serde(default)]
    pub rate_limit: Option<String>,
    /// Failing without a success for this long disables it (`"72h"`).
    #[serde(default)]
    pub disable_after: Option<String>,
    /// Only events matching this filter are delivered (SPEC §12; docs/handlers.md).
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// JavaScript reshaping each attempt's request (SPEC §12; docs/handlers.md).
    #[serde(default)]
    pub transform: Option<String>,
    /// An inactive subscriber gets no new deliveries.
    pub active: bool,
    /// Creation time.
    #[serde(skip_deserializing, default = "Timestamp::now")]
    pub created_at: Timestamp,
    /// Last change.
    #[serde(skip_deserializing, default = "Timestamp::now")]
    pub updated_at: Timestamp,
}

/// A failed delivery with its event, as `GET /dead-letters` lists it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// The delivery id.
    pub id: Uuid,
    /// The handler that kept failing.
    pub handler: String,
    /// Always `failed`.
    pub status: Status,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub updated_at: Timestamp,
    /// The event.
    pub event: DeadLetterEvent,
}

/// The event of a dead letter, payload included (for inspection before replay).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeadLetterEvent {
    /// Event id.
    pub id: Uuid,
    /// Its idempotency key.
    pub idempotency_key: String,
    /// Its type.
    pub event_type: String,
    /// Its status.
    pub status: Status,
    /// Acceptance time.
    pub created_at: Timestamp,
    /// The payload.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<serde_json::value::RawValue>,
}

#[cfg(test)]
mod tests {
    use super::Timestamp;
    use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
    use proptest::prelude::*;

    /// What chrono writes, the form every stored timestamp has.
    fn chrono_text(t: &Timestamp) -> String {
        t.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    proptest! {
        /// Any millisecond from year 0 to 9999 is written as chrono writes it.
        #[test]
        fn written_as_chrono_writes_it(millis in -62_167_219_200_000_i64..253_402_300_800_000) {
            let t = Timestamp(DateTime::from_timestamp_millis(millis).expect("in range"));
            prop_assert_eq!(t.to_rfc3339(), chrono_text(&t));
        }
    }

    /// Years chrono writes with a sign, and a leap second, are left to chrono.
    #[test]
    fn the_edges_are_chrono_s() {
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_milli_opt(23, 59, 59, 1_500))
            .expect("a leap second");
        for t in [
            DateTime::<Utc>::from_naive_utc_and_offset(leap, Utc),
            DateTime::from_timestamp_millis(-62_167_219_200_001).expect("year -1"),
            DateTime::from_timestamp_millis(253_402_300_800_000).expect("year 10000"),
            DateTime::from_timestamp_millis(0).expect("the epoch"),
        ] {
            let t = Timestamp(t);
            assert_eq!(t.to_rfc3339(), chrono_text(&t));
        }
        let epoch = Timestamp(DateTime::from_timestamp_millis(0).expect("the epoch"));
        assert_eq!(epoch.to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }
}
