//! The console's reads on PostgreSQL ([`crate::store::overview`] holds the SQL
//! and says what it counts). Minutes are `date_trunc('minute', …)` of
//! `timestamptz` columns.

use sqlx::postgres::PgPool;
use sqlx::{Postgres, QueryBuilder};
use uuid::Uuid;

use crate::model::{DeadLetter, Timestamp};
use crate::store::overview::{self, FilterBinds, Overview};
use crate::store::{Page, ReplayFilter, StoreError};

/// Binds as PostgreSQL keeps them: `uuid` and `timestamptz`.
impl FilterBinds for QueryBuilder<Postgres> {
    fn sql(&mut self, text: &str) {
        self.push(text);
    }
    fn uuid(&mut self, id: Uuid) {
        self.push_bind(id);
    }
    fn text(&mut self, text: &str) {
        self.push_bind(text.to_owned());
    }
    fn time(&mut self, at: Timestamp) {
        self.push_bind(at.0);
    }
    fn int(&mut self, n: i64) {
        self.push_bind(n);
    }
}

/// Events by status, deliveries per handler, and the series ending at `now`.
pub(super) async fn overview(pool: &PgPool, now: Timestamp) -> Result<Overview, StoreError> {
    let by_status = sqlx::query(overview::EVENTS_BY_STATUS)
        .fetch_all(pool)
        .await?;
    let by_handler = sqlx::query(overview::DELIVERIES_BY_HANDLER)
        .fetch_all(pool)
        .await?;
    let (start, earliest) = overview::series_window(now);
    let sql = overview::series_sql(|col| format!("date_trunc('minute', {col})"));
    let series = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(overview::v7_floor(start))
        .bind(overview::v7_floor(earliest))
        .bind(start.0)
        .fetch_all(pool)
        .await?;
    overview::assemble(start, &by_status, &by_handler, &series)
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

/// A page of the dead letters `filter` selects, newest first.
pub(super) async fn dead_letters(
    pool: &PgPool,
    filter: &ReplayFilter,
    limit: u32,
    before: Option<Uuid>,
) -> Result<Page<DeadLetter>, StoreError> {
    let mut qb = QueryBuilder::<Postgres>::new(overview::DEAD_LETTERS_FROM);
    overview::push_filter(&mut qb, filter);
    overview::push_page(&mut qb, limit, before);
    overview::dead_letter_page(&qb.build().fetch_all(pool).await?, limit)
}

/// How many dead letters `filter` selects.
pub(super) async fn count_dead_letters(
    pool: &PgPool,
    filter: &ReplayFilter,
) -> Result<u64, StoreError> {
    let mut qb = QueryBuilder::<Postgres>::new(overview::DEAD_LETTERS_COUNT);
    overview::push_filter(&mut qb, filter);
    overview::dead_letter_count(&qb.build().fetch_one(pool).await?)
}
