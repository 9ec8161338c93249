//! Decoding PostgreSQL rows into the model.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};
use uuid::Uuid;

use crate::model::{
    DeadLetter, DeadLetterEvent, DeliveryTask, DeliveryView, EventView, Status, Subscriber,
    Timestamp,
};
use crate::store::{EventSummary, StoreError};

/// Columns read for an [`EventSummary`].
pub(super) const SUMMARY_COLUMNS: &str =
    "id, idempotency_key, event_type, status, created_at, payload_sha256, received_count";

/// Columns read for an [`EventView`].
pub(super) const EVENT_COLUMNS: &str = "id, idempotency_key, event_type, status, created_at, \
     payload_sha256, received_count, attempts, last_error, updated_at, source, \
     COALESCE(last_received_at, created_at) AS last_received_at";

/// Columns of a delivery joined with its event (`d` and `e`) for a [`DeliveryTask`].
pub(super) const TASK_COLUMNS: &str = "d.id, d.seq, d.handler, d.status, d.attempts, \
     d.retry_after, d.ordering_value, d.created_at, e.id AS event_id, e.idempotency_key, \
     e.event_type, e.payload";

fn status(row: &PgRow) -> Result<Status, StoreError> {
    status_in(row, "status")
}

fn status_in(row: &PgRow, col: &str) -> Result<Status, StoreError> {
    let text: &str = row.try_get(col)?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

/// A `timestamptz` column, at the API's millisecond precision.
pub(super) fn time(row: &PgRow, col: &str) -> Result<Timestamp, StoreError> {
    let t: DateTime<Utc> = row.try_get(col)?;
    Ok(millis(t))
}

/// A nullable `timestamptz` column.
pub(super) fn opt_time(row: &PgRow, col: &str) -> Result<Option<Timestamp>, StoreError> {
    let t: Option<DateTime<Utc>> = row.try_get(col)?;
    Ok(t.map(millis))
}

fn millis(t: DateTime<Utc>) -> Timestamp {
    Timestamp(DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t))
}

fn attempts(row: &PgRow) -> Result<u32, StoreError> {
    let n: i32 = row.try_get("attempts")?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("attempts {n}")))
}

/// Decodes a row of [`SUMMARY_COLUMNS`].
pub(super) fn summary(row: &PgRow) -> Result<EventSummary, StoreError> {
    Ok(EventSummary {
        id: row.try_get("id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        event_type: row.try_get("event_type")?,
        status: status(row)?,
        created_at: time(row, "created_at")?,
        payload_sha256: row.try_get("payload_sha256")?,
        received_count: received_count(row)?,
    })
}

/// The `received_count` column.
fn received_count(row: &PgRow) -> Result<u32, StoreError> {
    let n: i32 = row.try_get("received_count")?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("received_count {n}")))
}

/// Decodes a row of [`EVENT_COLUMNS`] (deliveries come separately).
pub(super) fn event_view(row: &PgRow) -> Result<EventView, StoreError> {
    let s = summary(row)?;
    Ok(EventView {
        id: s.id,
        idempotency_key: s.idempotency_key,
        event_type: s.event_type,
        status: s.status,
        attempts: attempts(row)?,
        last_error: row.try_get("last_error")?,
        created_at: s.created_at,
        updated_at: time(row, "updated_at")?,
        source: row.try_get("source")?,
        received_count: s.received_count,
        last_received_at: time(row, "last_received_at")?,
        deliveries: Vec::new(),
        payload_sha256: s.payload_sha256,
    })
}

fn delivery_view(row: &PgRow) -> Result<DeliveryView, StoreError> {
    Ok(DeliveryView {
        handler: row.try_get("handler")?,
        status: status(row)?,
        attempts: attempts(row)?,
        last_error: row.try_get("last_error")?,
        retry_after: opt_time(row, "retry_after")?,
        updated_at: time(row, "updated_at")?,
    })
}

/// Loads the deliveries of `events` (one query) and attaches them in handler order.
pub(super) async fn attach_deliveries(
    pool: &PgPool,
    events: &mut [EventView],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    let rows = sqlx::query(
        "SELECT event_id, handler, status, attempts, last_error, retry_after, updated_at \
         FROM deliveries WHERE event_id = ANY ($1) ORDER BY handler",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let mut by_event: HashMap<Uuid, Vec<DeliveryView>> = HashMap::new();
    for row in rows {
        by_event
            .entry(row.try_get("event_id")?)
            .or_default()
            .push(delivery_view(&row)?);
    }
    for e in events.iter_mut() {
        e.deliveries = by_event.remove(&e.id).unwrap_or_default();
    }
    Ok(())
}

/// Decodes a row of [`TASK_COLUMNS`].
pub(super) fn delivery_task(row: &PgRow) -> Result<DeliveryTask, StoreError> {
    let payload: &str = row.try_get("payload")?;
    Ok(DeliveryTask {
        delivery_id: row.try_get("id")?,
        handler: row.try_get("handler")?,
        status: status(row)?,
        attempts: attempts(row)?,
        retry_after: opt_time(row, "retry_after")?,
        ordering_value: row.try_get("ordering_value")?,
        created_at: time(row, "created_at")?,
        event_id: row.try_get("event_id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        event_type: row.try_get("event_type")?,
        payload: payload.into(),
    })
}

/// Decodes a failed delivery joined with its event.
pub(super) fn dead_letter(row: &PgRow) -> Result<DeadLetter, StoreError> {
    let payload: String = row.try_get("payload")?;
    let payload = serde_json::value::RawValue::from_string(payload)
        .map_err(|e| StoreError::Corrupt(format!("payload: {e}")))?;
    Ok(DeadLetter {
        id: row.try_get("id")?,
        handler: row.try_get("handler")?,
        status: status(row)?,
        attempts: attempts(row)?,
        last_error: row.try_get("last_error")?,
        updated_at: time(row, "updated_at")?,
        event: DeadLetterEvent {
            id: row.try_get("event_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            event_type: row.try_get("event_type")?,
            status: status_in(row, "event_status")?,
            created_at: time(row, "created_at")?,
            payload,
        },
    })
}

fn json_list(row: &PgRow, col: &str) -> Result<Option<Vec<String>>, StoreError> {
    let text: Option<&str> = row.try_get(col)?;
    text.map(|t| serde_json::from_str(t).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
        .transpose()
}

/// Decodes a subscriber row.
pub(super) fn subscriber(row: &PgRow) -> Result<Subscriber, StoreError> {
    let max_attempts: Option<i32> = row.try_get("max_attempts")?;
    Ok(Subscriber {
        name: row.try_get("name")?,
        event_types: json_list(row, "event_types")?.unwrap_or_default(),
        url: row.try_get("url")?,
        secret: row.try_get("secret")?,
        ordering_key: row.try_get("ordering_key")?,
        max_attempts: max_attempts.and_then(|n| u32::try_from(n).ok()),
        backoff: json_list(row, "backoff")?,
        active: row.try_get("active")?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
    })
}
