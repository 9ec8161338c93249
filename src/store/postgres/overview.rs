//! The console's reads on PostgreSQL ([`crate::store::overview`] says what they
//! count). Minutes are `date_trunc('minute', …)` of `timestamptz` columns.

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Postgres, QueryBuilder, Row};
use uuid::Uuid;

use super::rows;
use crate::model::{DeadLetter, Status, Timestamp};
use crate::store::overview::{self, Overview, Series, StatusCounts};
use crate::store::{Page, ReplayFilter, StoreError};

fn count(row: &PgRow, col: &str) -> Result<u64, StoreError> {
    let n: i64 = row.try_get(col)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn status(row: &PgRow) -> Result<Status, StoreError> {
    let text: &str = row.try_get("status")?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

/// Events by status, deliveries per handler, and the series ending at `now`.
pub(super) async fn overview(pool: &PgPool, now: Timestamp) -> Result<Overview, StoreError> {
    let mut events = StatusCounts::default();
    for row in sqlx::query("SELECT status, COUNT(*) AS n FROM events GROUP BY status")
        .fetch_all(pool)
        .await?
    {
        events.add(status(&row)?, count(&row, "n")?);
    }
    let handlers = sqlx::query(
        "SELECT handler, status, COUNT(*) AS n, COALESCE(SUM(attempts), 0)::bigint AS attempts \
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
        "SELECT 'r' AS series, date_trunc('minute', created_at) AS minute, COUNT(*) AS n \
           FROM events WHERE id >= $1 GROUP BY 2 \
         UNION ALL \
         SELECT 'c', date_trunc('minute', updated_at), COUNT(*) \
           FROM events WHERE id >= $2 AND status = 'completed' AND updated_at >= $3 \
           GROUP BY 2 \
         UNION ALL \
         SELECT 'd', date_trunc('minute', updated_at), COUNT(*) \
           FROM deliveries WHERE status = 'failed' AND updated_at >= $3 GROUP BY 2",
    )
    .bind(overview::v7_floor(start))
    .bind(overview::v7_floor(earliest))
    .bind(start.0)
    .fetch_all(pool)
    .await?;
    let mut counted = Vec::with_capacity(rows.len());
    for r in &rows {
        let minute: DateTime<Utc> = r.try_get("minute")?;
        let series = match r.try_get::<&str, _>("series")? {
            "r" => Series::Received,
            "c" => Series::Completed,
            _ => Series::DeadLettered,
        };
        counted.push((Timestamp(minute), series, count(r, "n")?));
    }
    Ok(Overview {
        events,
        handlers: overview::handlers(handlers),
        minutes: overview::lay_out(start, counted),
    })
}

/// An event's stored payload.
pub(super) async fn payload(pool: &PgPool, id: Uuid) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT payload FROM events WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?,
    )
}

/// `WHERE` conditions selecting the failed deliveries `d` of events `e` that
/// `filter` names — the same selection as the replay in `mod.rs`.
fn push_filter(qb: &mut QueryBuilder<Postgres>, filter: &ReplayFilter) {
    qb.push(" WHERE d.status = 'failed'");
    if let Some(event) = filter.event {
        qb.push(" AND e.id = ").push_bind(event);
    }
    if let Some(t) = &filter.event_type {
        qb.push(" AND e.event_type = ").push_bind(t.clone());
    }
    if let Some(before) = filter.before {
        qb.push(" AND e.created_at < ").push_bind(before.0);
    }
    if let Some(h) = &filter.handler {
        qb.push(" AND d.handler = ").push_bind(h.clone());
    }
}

/// A page of the dead letters `filter` selects, newest first.
pub(super) async fn dead_letters(
    pool: &PgPool,
    filter: &ReplayFilter,
    limit: u32,
    before: Option<Uuid>,
) -> Result<Page<DeadLetter>, StoreError> {
    let mut qb = QueryBuilder::<Postgres>::new(
        "SELECT d.id, d.handler, d.status, d.attempts, d.last_error, d.updated_at, \
                e.id AS event_id, e.idempotency_key, e.event_type, e.status AS event_status, \
                e.created_at, e.payload \
         FROM deliveries d JOIN events e ON e.id = d.event_id",
    );
    push_filter(&mut qb, filter);
    if let Some(before) = before {
        qb.push(" AND d.id < ").push_bind(before);
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
    pool: &PgPool,
    filter: &ReplayFilter,
) -> Result<u64, StoreError> {
    let mut qb = QueryBuilder::<Postgres>::new(
        "SELECT COUNT(*) AS n FROM deliveries d JOIN events e ON e.id = d.event_id",
    );
    push_filter(&mut qb, filter);
    let row = qb.build().fetch_one(pool).await?;
    count(&row, "n")
}
