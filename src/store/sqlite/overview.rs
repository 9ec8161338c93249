//! The console's reads on SQLite ([`crate::store::overview`] holds the SQL and
//! says what it counts). Timestamps are RFC 3339 text, so a minute is the text's
//! first 16 characters.

use sqlx::sqlite::SqlitePool;
use sqlx::{QueryBuilder, Sqlite};
use uuid::Uuid;

use crate::model::{DeadLetter, Timestamp};
use crate::store::overview::{self, FilterBinds, Overview};
use crate::store::{Page, ReplayFilter, StoreError};

/// Binds as SQLite keeps them: uuids and timestamps as text.
impl FilterBinds for QueryBuilder<Sqlite> {
    fn sql(&mut self, text: &str) {
        self.push(text);
    }
    fn uuid(&mut self, id: Uuid) {
        self.push_bind(id.to_string());
    }
    fn text(&mut self, text: &str) {
        self.push_bind(text.to_owned());
    }
    fn time(&mut self, at: Timestamp) {
        self.push_bind(at.to_rfc3339());
    }
    fn int(&mut self, n: i64) {
        self.push_bind(n);
    }
}

/// Events by status, deliveries per handler, and the series ending at `now`.
pub(super) async fn overview(pool: &SqlitePool, now: Timestamp) -> Result<Overview, StoreError> {
    let by_status = sqlx::query(overview::EVENTS_BY_STATUS)
        .fetch_all(pool)
        .await?;
    let by_handler = sqlx::query(overview::DELIVERIES_BY_HANDLER)
        .fetch_all(pool)
        .await?;
    let (start, earliest) = overview::series_window(now);
    let sql = overview::series_sql(|col| format!("substr({col}, 1, 16) || ':00Z'"));
    let series = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(overview::v7_floor(start).to_string())
        .bind(overview::v7_floor(earliest).to_string())
        .bind(start.to_rfc3339())
        .fetch_all(pool)
        .await?;
    overview::assemble(start, &by_status, &by_handler, &series)
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

/// A page of the dead letters `filter` selects, newest first.
pub(super) async fn dead_letters(
    pool: &SqlitePool,
    filter: &ReplayFilter,
    limit: u32,
    before: Option<Uuid>,
) -> Result<Page<DeadLetter>, StoreError> {
    let mut qb = QueryBuilder::<Sqlite>::new(overview::DEAD_LETTERS_FROM);
    overview::push_filter(&mut qb, filter);
    overview::push_page(&mut qb, limit, before);
    overview::dead_letter_page(&qb.build().fetch_all(pool).await?, limit)
}

/// How many dead letters `filter` selects.
pub(super) async fn count_dead_letters(
    pool: &SqlitePool,
    filter: &ReplayFilter,
) -> Result<u64, StoreError> {
    let mut qb = QueryBuilder::<Sqlite>::new(overview::DEAD_LETTERS_COUNT);
    overview::push_filter(&mut qb, filter);
    overview::dead_letter_count(&qb.build().fetch_one(pool).await?)
}
