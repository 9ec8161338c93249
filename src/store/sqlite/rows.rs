//! Decoding SQLite rows into the model.

use std::collections::HashMap;

use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};
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

pub(super) fn uuid(row: &SqliteRow, col: &str) -> Result<Uuid, StoreError> {
    let text: &str = row.try_get(col)?;
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt(format!("{col} {text:?}")))
}

fn status(row: &SqliteRow) -> Result<Status, StoreError> {
    status_in(row, "status")
}

fn status_in(row: &SqliteRow, col: &str) -> Result<Status, StoreError> {
    let text: &str = row.try_get(col)?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

fn time(row: &SqliteRow, col: &str) -> Result<Timestamp, StoreError> {
    let text: &str = row.try_get(col)?;
    Timestamp::parse(text).ok_or_else(|| StoreError::Corrupt(format!("{col} {text:?}")))
}

pub(super) fn opt_time(row: &SqliteRow, col: &str) -> Result<Option<Timestamp>, StoreError> {
    let text: Option<&str> = row.try_get(col)?;
    text.map(|t| Timestamp::parse(t).ok_or_else(|| StoreError::Corrupt(format!("{col} {t:?}"))))
        .transpose()
}

fn attempts(row: &SqliteRow) -> Result<u32, StoreError> {
    let n: i64 = row.try_get("attempts")?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("attempts {n}")))
}

/// Decodes a row of [`SUMMARY_COLUMNS`].
pub(super) fn summary(row: &SqliteRow) -> Result<EventSummary, StoreError> {
    Ok(EventSummary {
        id: uuid(row, "id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        event_type: row.try_get("event_type")?,
        status: status(row)?,
        created_at: time(row, "created_at")?,
        payload_sha256: row.try_get("payload_sha256")?,
        received_count: received_count(row)?,
    })
}

/// The `received_count` column.
fn received_count(row: &SqliteRow) -> Result<u32, StoreError> {
    let n: i64 = row.try_get("received_count")?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("received_count {n}")))
}

/// Decodes a row of [`EVENT_COLUMNS`] (deliveries come separately).
pub(super) fn event_view(row: &SqliteRow) -> Result<EventView, StoreError> {
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

fn delivery_view(row: &SqliteRow) -> Result<DeliveryView, StoreError> {
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
    pool: &SqlitePool,
    events: &mut [EventView],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut qb = QueryBuilder::<Sqlite>::new(
        "SELECT event_id, handler, status, attempts, last_error, retry_after, updated_at \
         FROM deliveries WHERE event_id IN (",
    );
    let mut list = qb.separated(", ");
    for e in events.iter() {
        list.push_bind(e.id.to_string());
    }
    qb.push(") ORDER BY handler");
    let mut by_event: HashMap<Uuid, Vec<DeliveryView>> = HashMap::new();
    for row in qb.build().fetch_all(pool).await? {
        by_event
            .entry(uuid(&row, "event_id")?)
            .or_default()
            .push(delivery_view(&row)?);
    }
    for e in events.iter_mut() {
        e.deliveries = by_event.remove(&e.id).unwrap_or_default();
    }
    Ok(())
}

/// Decodes the join of a delivery and its event.
pub(super) fn delivery_task(row: &SqliteRow) -> Result<DeliveryTask, StoreError> {
    let payload: &str = row.try_get("payload")?;
    Ok(DeliveryTask {
        delivery_id: uuid(row, "id")?,
        handler: row.try_get("handler")?,
        status: status(row)?,
        attempts: attempts(row)?,
        retry_after: opt_time(row, "retry_after")?,
        ordering_value: row.try_get("ordering_value")?,
        created_at: time(row, "created_at")?,
        event_id: uuid(row, "event_id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        event_type: row.try_get("event_type")?,
        payload: payload.into(),
    })
}

/// Decodes a failed delivery joined with its event.
pub(super) fn dead_letter(row: &SqliteRow) -> Result<DeadLetter, StoreError> {
    let payload: String = row.try_get("payload")?;
    let payload = serde_json::value::RawValue::from_string(payload)
        .map_err(|e| StoreError::Corrupt(format!("payload: {e}")))?;
    Ok(DeadLetter {
        id: uuid(row, "id")?,
        handler: row.try_get("handler")?,
        status: status(row)?,
        attempts: attempts(row)?,
        last_error: row.try_get("last_error")?,
        updated_at: time(row, "updated_at")?,
        event: DeadLetterEvent {
            id: uuid(row, "event_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            event_type: row.try_get("event_type")?,
            status: status_in(row, "event_status")?,
            created_at: time(row, "created_at")?,
            payload,
        },
    })
}

fn json_list(row: &SqliteRow, col: &str) -> Result<Option<Vec<String>>, StoreError> {
    let text: Option<&str> = row.try_get(col)?;
    text.map(|t| serde_json::from_str(t).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
        .transpose()
}

/// Decodes a subscriber row.
pub(super) fn subscriber(row: &SqliteRow) -> Result<Subscriber, StoreError> {
    let max_attempts: Option<i64> = row.try_get("max_attempts")?;
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
