//! The console's reads on SQLite ([`crate::store::overview`] says what they count).
//! Timestamps are RFC 3339 text, so a minute is the text's first 16 characters.

use sqlx::sqlite::SqlitePool;
use sqlx::{QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use super::rows;
use crate::model::{DeadLetter, Status, Timestamp};
use crate::store::overview::{self, Overview, Series, StatusCounts};
use crate::store::{Page, ReplayFilter, StoreError};

fn count(row: &sqlx::sqlite::SqliteRow, col: &str) -> Result<u64, StoreError> {
    let n: i64 = row.try_get(col)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn status(row: &sqlx::sqlite::SqliteRow) -> Result<Status, StoreError> {
    let text: &str = row.try_get("status")?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

/// Events by status, deliveries per handler, and the series ending at `now`.
pub(super) async fn overview(pool: &SqlitePool, now: Timestamp) -> Result<Overview, StoreError> {
    let mut events = StatusCounts::default();
    for row in sqlx::query("SELECT status, COUNT(*) AS n FROM events GROUP BY status")
        .fetch_all(pool)
        .await?
    {
        events.add(status(&row)?, count(&row, "n")?);
    }
    let handlers = sqlx::query(
        "SELECT handler, status, COUNT(*) AS n, COALESCE(SUM(attempts), 0) AS attempts \
         FROM deliveries GROUP BY handler, status",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| {
        Ok((
            r.try_get::<String, _>("handler")?,
            status(r)?,
            count(r, "n")?,
            count(r, "attempts")?,
        ))
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    let start = overview::series_start(now);
    let earliest = Timestamp(start.0 - chrono::Duration::hours(1));
    let rows = sqlx::query(
        "SELECT 'r' AS series, substr(created_at, 1, 16) AS minute, COUNT(*) AS n \
           FROM events WHERE id >= $1 GROUP BY minute \
         UNION ALL \
         SELECT 'c', substr(updated_at, 1, 16) AS minute, COUNT(*) \
           FROM events WHERE id >= $2 AND status = 'completed' AND updated_at >= $3 \
           GROUP BY minute \
         UNION ALL \
         SELECT 'd', substr(updated_at, 1, 16) AS minute, COUNT(*) \
           FROM deliveries WHERE status = 'failed' AND updated_at >= $3 GROUP BY minute",
    )
    .bind(overview::v7_floor(start).to_string())
    .bind(overview::v7_floor(earliest).to_string())
    .bind(start.to_rfc3339())
    .fetch_all(pool)
    .await?;
    let mut counted = Vec::with_capacity(rows.len());
    for r in &rows {
        let minute: &str = r.try_get("minute")?;
        let Some(at) = overview::parse_minute(minute) else {
            return Err(StoreError::Corrupt(format!("timestamp {minute:?}")));
        };
        let series = match r.try_get::<&str, _>("series")? {
            "r" => Series::Received,
            "c" => Series::Completed,
            _ => Series::DeadLettered,
        };
        counted.push((at, series, count(r, "n")?));
    }
    Ok(Overview {
        events,
        handlers: overview::handlers(handlers),
        minutes: overview::lay_out(start, counted),
    })
}

/// An event's stored payload.
pub(super) async fn payload(pool: &SqlitePool, id: Uuid) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT payload FROM events WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(pool)
            .await?,
    )
}

/// `WHERE` conditions selecting the failed deliveries `d` of events `e` that
/// `filter` names — the same selection as the replay in `writer.rs`.
fn push_filter(qb: &mut QueryBuilder<Sqlite>, filter: &ReplayFilter) {
    qb.push(" WHERE d.status = 'failed'");
    if let Some(event) = filter.event {
        qb.push(" AND e.id = ").push_bind(event.to_string());
    }
    if let Some(t) = &filter.event_type {
        qb.push(" AND e.event_type = ").push_bind(t.clone());
    }
    if let Some(before) = filter.before {
        qb.push(" AND e.created_at < ")
            .push_bind(before.to_rfc3339());
    }
    if let Some(h) = &filter.handler {
        qb.push(" AND d.handler = ").push_bind(h.clone());
    }
}

/// A page of the dead letters `filter` selects, newest first.
pub(super) async fn dead_letters(
    pool: &SqlitePool,
    filter: &ReplayFilter,
    limit: u32,
    before: Option<Uuid>,
) -> Result<Page<DeadLetter>, StoreError> {
    let mut qb = QueryBuilder::<Sqlite>::new(
        "SELECT d.id, d.handler, d.status, d.attempts, d.last_error, d.updated_at, \
                e.id AS event_id, e.idempotency_key, e.event_type, e.status AS event_status, \
                e.created_at, e.payload \
         FROM deliveries d JOIN events e ON e.id = d.event_id",
    );
    push_filter(&mut qb, filter);
    if let Some(before) = before {
        qb.push(" AND d.id < ").push_bind(before.to_string());
    }
    qb.push(" ORDER BY d.id DESC LIMIT ")
        .push_bind(i64::from(limit) + 1);
    let fetched = qb.build().fetch_all(pool).await?;
    let mut items = fetched
        .iter()
        .map(rows::dead_letter)
        .collect::<Result<Vec<_>, _>>()?;
    let next_cursor = crate::store::cut_page(&mut items, limit, |x| x.id);
    Ok(Page { items, next_cursor })
}

/// How many dead letters `filter` selects.
pub(super) async fn count_dead_letters(
    pool: &SqlitePool,
    filter: &ReplayFilter,
) -> Result<u64, StoreError> {
    let mut qb = QueryBuilder::<Sqlite>::new(
        "SELECT COUNT(*) AS n FROM deliveries d JOIN events e ON e.id = d.event_id",
    );
    push_filter(&mut qb, filter);
    let row = qb.build().fetch_one(pool).await?;
    count(&row, "n")
}
