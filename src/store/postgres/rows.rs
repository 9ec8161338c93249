//! How PostgreSQL keeps each kind of column ([`RowExt`] for [`PgRow`]: native
//! `uuid`, `timestamptz`, 32-bit `integer`), and loading deliveries to attach to
//! events.

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};
use uuid::Uuid;

use crate::model::{EventView, Timestamp};
use crate::store::StoreError;
use crate::store::rows::{DELIVERY_VIEW_COLUMNS, RowExt, attach};

pub(super) use crate::store::rows::{
    ATTEMPT_COLUMNS, ATTEMPT_ORDER, EVENT_COLUMNS, SUMMARY_COLUMNS, attempt, delivery_task,
    event_view, subscriber, summary,
};

/// Columns of a delivery joined with its event (`d` and `e`) for a
/// [`DeliveryTask`](crate::model::DeliveryTask).
pub(super) const TASK_COLUMNS: &str = "d.id, d.seq, d.handler, d.status, d.attempts, \
     d.retry_after, d.ordering_value, d.created_at, e.id AS event_id, e.idempotency_key, \
     e.event_type, e.payload, e.traceparent, e.tracestate";

impl RowExt for PgRow {
    fn text(&self, col: &str) -> Result<&str, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_text(&self, col: &str) -> Result<Option<&str>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn int(&self, col: &str) -> Result<i64, StoreError> {
        Ok(i64::from(self.try_get::<i32, _>(col)?))
    }

    fn long(&self, col: &str) -> Result<i64, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get::<Option<i32>, _>(col)?.map(i64::from))
    }

    fn opt_big(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get::<Option<i64>, _>(col)?)
    }

    fn blob(&self, col: &str) -> Result<Vec<u8>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn uuid(&self, col: &str) -> Result<Uuid, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn timestamp(&self, col: &str) -> Result<Timestamp, StoreError> {
        Ok(millis(self.try_get(col)?))
    }

    fn opt_timestamp(&self, col: &str) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.try_get::<Option<DateTime<Utc>>, _>(col)?.map(millis))
    }
}

fn millis(t: DateTime<Utc>) -> Timestamp {
    Timestamp(DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t))
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
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {DELIVERY_VIEW_COLUMNS} FROM deliveries WHERE event_id = ANY ($1) \
         ORDER BY handler"
    )))
    .bind(ids)
    .fetch_all(pool)
    .await?;
    attach(&rows, events)
}
