//! Decoding rows into the model, once for both backends.
//!
//! Both schemas have the same tables and columns; they differ only in how a column
//! is typed (SQLite keeps uuids and timestamps as TEXT and integers as 64 bits,
//! PostgreSQL has `uuid`, `timestamptz` and 32-bit `integer`). [`RowExt`] reads one
//! column of each kind and is implemented per backend (`sqlite/rows.rs`,
//! `postgres/rows.rs`); the decoders here are written once against it.

use uuid::Uuid;

use crate::model::{
    Attempt, AttemptOutcome, DeadLetter, DeadLetterEvent, DeliveryTask, DeliveryView, EventView,
    Status, Subscriber, Timestamp,
};
use crate::store::{EventSummary, StoreError};

/// Columns read for an [`EventSummary`].
pub(super) const SUMMARY_COLUMNS: &str =
    "id, idempotency_key, event_type, status, created_at, payload_sha256, received_count";

/// Columns read for an [`EventView`].
pub(super) const EVENT_COLUMNS: &str = "id, idempotency_key, event_type, status, created_at, \
     payload_sha256, received_count, attempts, last_error, updated_at, source, \
     COALESCE(last_received_at, created_at) AS last_received_at, source_sequence, \
     source_emitted_at, traceparent";

/// [`crate::store::sql::ERASE_EVENT`]'s answer (or PostgreSQL's own erase's):
/// the erased event's key and source.
pub(super) fn erased(row: &impl RowExt) -> Result<(String, Option<String>), StoreError> {
    Ok((
        row.text("idempotency_key")?.to_owned(),
        row.opt_text("source")?.map(str::to_owned),
    ))
}

/// One column of a row, by kind, as the backend stores that kind.
pub(super) trait RowExt {
    /// A TEXT column.
    fn text(&self, col: &str) -> Result<&str, StoreError>;
    /// A nullable TEXT column.
    fn opt_text(&self, col: &str) -> Result<Option<&str>, StoreError>;
    /// An INTEGER column.
    fn int(&self, col: &str) -> Result<i64, StoreError>;
    /// A 64-bit INTEGER column (`bigint` in PostgreSQL).
    fn long(&self, col: &str) -> Result<i64, StoreError>;
    /// A nullable INTEGER column.
    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError>;
    /// A nullable 64-bit INTEGER column (`bigint` on PostgreSQL).
    fn opt_big(&self, col: &str) -> Result<Option<i64>, StoreError>;
    /// A BLOB (`bytea`) column.
    fn blob(&self, col: &str) -> Result<Vec<u8>, StoreError>;
    /// A boolean column.
    fn flag(&self, col: &str) -> Result<bool, StoreError>;
    /// A uuid column.
    fn uuid(&self, col: &str) -> Result<Uuid, StoreError>;
    /// A timestamp column, at the API's millisecond precision.
    fn timestamp(&self, col: &str) -> Result<Timestamp, StoreError>;
    /// A nullable timestamp column.
    fn opt_timestamp(&self, col: &str) -> Result<Option<Timestamp>, StoreError>;
}

/// Parses a timestamp kept as RFC 3339 text (SQLite).
pub(super) fn parse_time(col: &str, text: &str) -> Result<Timestamp, StoreError> {
    Timestamp::parse(text).ok_or_else(|| StoreError::Corrupt(format!("{col} {text:?}")))
}

/// Parses a uuid kept as text (SQLite).
pub(super) fn parse_uuid(col: &str, text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt(format!("{col} {text:?}")))
}

fn owned(row: &impl RowExt, col: &str) -> Result<String, StoreError> {
    row.text(col).map(str::to_owned)
}

fn opt_owned(row: &impl RowExt, col: &str) -> Result<Option<String>, StoreError> {
    Ok(row.opt_text(col)?.map(str::to_owned))
}

fn status_in(row: &impl RowExt, col: &str) -> Result<Status, StoreError> {
    let text = row.text(col)?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

fn count(row: &impl RowExt, col: &str) -> Result<u32, StoreError> {
    let n = row.int(col)?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("{col} {n}")))
}

/// Decodes a row of [`SUMMARY_COLUMNS`].
pub(super) fn summary(row: &impl RowExt) -> Result<EventSummary, StoreError> {
    Ok(EventSummary {
        id: row.uuid("id")?,
        idempotency_key: owned(row, "idempotency_key")?,
        event_type: owned(row, "event_type")?,
        status: status_in(row, "status")?,
        created_at: row.timestamp("created_at")?,
        payload_sha256: owned(row, "payload_sha256")?,
        received_count: count(row, "received_count")?,
    })
}

/// Decodes a row of [`EVENT_COLUMNS`] (deliveries come separately).
pub(super) fn event_view(row: &impl RowExt) -> Result<EventView, StoreError> {
    let s = summary(row)?;
    Ok(EventView {
        id: s.id,
        idempotency_key: s.idempotency_key,
        event_type: s.event_type,
        status: s.status,
        attempts: count(row, "attempts")?,
        last_error: opt_owned(row, "last_error")?,
        created_at: s.created_at,
        updated_at: row.timestamp("updated_at")?,
        source: opt_owned(row, "source")?,
        received_count: s.received_count,
        last_received_at: row.timestamp("last_received_at")?,
        source_sequence: row.opt_big("source_sequence")?,
        source_emitted_at: row.opt_timestamp("source_emitted_at")?,
        trace_id: crate::trace_context::TraceContext::stored(row.opt_text("traceparent")?, None)
            .map(|t| t.trace_id().to_owned()),
        deliveries: Vec::new(),
        payload_sha256: s.payload_sha256,
    })
}

/// Columns read for a [`DeliveryView`] (with `event_id`, to attach it).
pub(super) const DELIVERY_VIEW_COLUMNS: &str =
    "event_id, handler, status, attempts, last_error, retry_after, updated_at";

/// Decodes a row of [`DELIVERY_VIEW_COLUMNS`] into its event's id and the view.
pub(super) fn delivery_view(row: &impl RowExt) -> Result<(Uuid, DeliveryView), StoreError> {
    Ok((
        row.uuid("event_id")?,
        DeliveryView {
            handler: owned(row, "handler")?,
            status: status_in(row, "status")?,
            attempts: count(row, "attempts")?,
            last_error: opt_owned(row, "last_error")?,
            retry_after: row.opt_timestamp("retry_after")?,
            updated_at: row.timestamp("updated_at")?,
        },
    ))
}

/// Attaches deliveries (rows of [`DELIVERY_VIEW_COLUMNS`] in handler order) to their
/// events.
pub(super) fn attach<R: RowExt>(rows: &[R], events: &mut [EventView]) -> Result<(), StoreError> {
    let mut by_event: std::collections::HashMap<Uuid, Vec<DeliveryView>> = Default::default();
    for row in rows {
        let (event, view) = delivery_view(row)?;
        by_event.entry(event).or_default().push(view);
    }
    for e in events.iter_mut() {
        e.deliveries = by_event.remove(&e.id).unwrap_or_default();
    }
    Ok(())
}

/// Decodes the join of a delivery (`id`, `handler`, `status`, `attempts`,
/// `retry_after`, `ordering_value`, `created_at`) and its event (`event_id`,
/// `idempotency_key`, `event_type`, `payload`).
pub(super) fn delivery_task(row: &impl RowExt) -> Result<DeliveryTask, StoreError> {
    Ok(DeliveryTask {
        delivery_id: row.uuid("id")?,
        handler: owned(row, "handler")?,
        status: status_in(row, "status")?,
        attempts: count(row, "attempts")?,
        retry_after: row.opt_timestamp("retry_after")?,
        ordering_value: opt_owned(row, "ordering_value")?,
        created_at: row.timestamp("created_at")?,
        event_id: row.uuid("event_id")?,
        idempotency_key: owned(row, "idempotency_key")?,
        event_type: owned(row, "event_type")?,
        payload: row.text("payload")?.into(),
        trace: crate::trace_context::TraceContext::stored(
            row.opt_text("traceparent")?,
            row.opt_text("tracestate")?,
        ),
    })
}

/// Decodes a failed delivery joined with its event.
pub(super) fn dead_letter(row: &impl RowExt) -> Result<DeadLetter, StoreError> {
    let payload = serde_json::value::RawValue::from_string(owned(row, "payload")?)
        .map_err(|e| StoreError::Corrupt(format!("payload: {e}")))?;
    Ok(DeadLetter {
        id: row.uuid("id")?,
        handler: owned(row, "handler")?,
        status: status_in(row, "status")?,
        attempts: count(row, "attempts")?,
        last_error: opt_owned(row, "last_error")?,
        updated_at: row.timestamp("updated_at")?,
        event: DeadLetterEvent {
            id: row.uuid("event_id")?,
            idempotency_key: owned(row, "idempotency_key")?,
            event_type: owned(row, "event_type")?,
            status: status_in(row, "event_status")?,
            created_at: row.timestamp("created_at")?,
            payload,
        },
    })
}

fn json_list(row: &impl RowExt, col: &str) -> Result<Option<Vec<String>>, StoreError> {
    row.opt_text(col)?
        .map(|t| serde_json::from_str(t).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
        .transpose()
}

/// Decodes a subscriber row, opening its secret with `keys`.
pub(super) fn subscriber(
    row: &impl RowExt,
    keys: &crate::sealing::Keyring,
) -> Result<Subscriber, StoreError> {
    let name: String = owned(row, "name")?;
    let key_id = row.opt_text("secret_key_id")?;
    let secret = match row.opt_text("secret")? {
        None => None,
        Some(text) => {
            Some(
                keys.open(&name, text, key_id)
                    .map_err(|reason| StoreError::Sealed {
                        subscriber: name.clone(),
                        reason,
                    })?,
            )
        }
    };
    Ok(Subscriber {
        name,
        event_types: json_list(row, "event_types")?.unwrap_or_default(),
        url: owned(row, "url")?,
        secret,
        ordering_key: opt_owned(row, "ordering_key")?,
        max_attempts: row
            .opt_int("max_attempts")?
            .and_then(|n| u32::try_from(n).ok()),
        backoff: json_list(row, "backoff")?,
        max_in_flight: row
            .opt_int("max_in_flight")?
            .and_then(|n| u32::try_from(n).ok()),
        rate_limit: opt_owned(row, "rate_limit")?,
        disable_after: opt_owned(row, "disable_after")?,
        filter: row
            .opt_text("filter")?
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("subscribers.filter: {e}")))?,
        transform: opt_owned(row, "transform")?,
        active: row.flag("active")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

/// Columns read for an [`Attempt`].
pub(super) const ATTEMPT_COLUMNS: &str = "handler, attempt, started_at, duration_ms, outcome, response_status, response_body, error, \
     request";

/// The order of [`Store::list_attempts`](super::Store::list_attempts): oldest first
/// (ties, within a millisecond, by handler and number).
pub(super) const ATTEMPT_ORDER: &str = "ORDER BY started_at, handler, attempt";

/// Decodes a row of [`ATTEMPT_COLUMNS`].
pub(super) fn attempt(row: &impl RowExt) -> Result<Attempt, StoreError> {
    let outcome = row.text("outcome")?;
    let status = row.opt_int("response_status")?;
    Ok(Attempt {
        handler: owned(row, "handler")?,
        attempt: count(row, "attempt")?,
        started_at: row.timestamp("started_at")?.0,
        duration_ms: u64::try_from(row.long("duration_ms")?).unwrap_or(0),
        outcome: AttemptOutcome::parse(outcome)
            .ok_or_else(|| StoreError::Corrupt(format!("outcome {outcome:?}")))?,
        response_status: status
            .map(|n| u16::try_from(n).map_err(|_| StoreError::Corrupt(format!("status {n}"))))
            .transpose()?,
        response_body: opt_owned(row, "response_body")?,
        request: opt_owned(row, "request")?,
        error: opt_owned(row, "error")?,
    })
}
