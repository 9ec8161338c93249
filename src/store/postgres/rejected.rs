//! The rejected log on PostgreSQL: one table every instance shares; an insert and
//! its trim in one transaction.

use async_trait::async_trait;
use sqlx::Postgres;
use uuid::Uuid;

use super::PgStore;
use crate::store::StoreError;
use crate::store::rejected::{Bounds, RejectedRow, RejectedStore, headers_text, row, sql};

type Query<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// Binds a row for [`sql::INSERT`].
fn insert(r: &RejectedRow) -> Query<'_> {
    sqlx::query(sql::INSERT)
        .bind(r.id.to_string())
        .bind(&r.source)
        .bind(r.class.as_str())
        .bind(r.received_at.millis())
        .bind(&r.reason)
        .bind(i32::from(r.status))
        .bind(&r.code)
        .bind(&r.detail)
        .bind(headers_text(&r.headers))
        .bind(&r.body)
        .bind(i64::try_from(r.body_bytes).unwrap_or(i64::MAX))
        .bind(r.retryable)
        .bind(&r.delivery_id)
}

#[async_trait]
impl RejectedStore for PgStore {
    async fn keep(&self, r: RejectedRow, bounds: Bounds) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        insert(&r).execute(&mut *tx).await?;
        // One trim of a source's class at a time: two deleting overlapping rows
        // in different orders deadlocked (40P01) under a flood. Held to the commit.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 0))")
            .bind(&r.source)
            .bind(r.class.as_str())
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql::TRIM)
            .bind(&r.source)
            .bind(r.class.as_str())
            .bind(i64::from(bounds.count))
            .bind(i64::try_from(bounds.bytes).unwrap_or(i64::MAX))
            .bind(bounds.oldest_kept(r.received_at))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn rejected(
        &self,
        source: &str,
        since: i64,
        limit: u32,
        preview: u32,
    ) -> Result<Vec<RejectedRow>, StoreError> {
        let rows = sqlx::query(sql::LIST)
            .bind(i32::try_from(preview).unwrap_or(i32::MAX))
            .bind(source)
            .bind(since)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    async fn rejected_one(
        &self,
        source: &str,
        id: Uuid,
    ) -> Result<Option<RejectedRow>, StoreError> {
        let found = sqlx::query(sql::ONE)
            .bind(source)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        found.as_ref().map(row).transpose()
    }

    async fn retryable(&self, source: &str, since: i64) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(sql::RETRYABLE)
            .bind(source)
            .bind(since)
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.iter().filter_map(|id| id.parse().ok()).collect())
    }

    async fn refused_again(&self, r: &RejectedRow) -> Result<(), StoreError> {
        sqlx::query(sql::REFUSED_AGAIN)
            .bind(&r.reason)
            .bind(i32::from(r.status))
            .bind(&r.code)
            .bind(&r.detail)
            .bind(r.id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn forget(&self, source: &str, id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::FORGET)
            .bind(source)
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn forget_delivery(&self, source: &str, delivery_id: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(sql::FORGET_DELIVERY)
            .bind(source)
            .bind(delivery_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn purge_rejected(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(sql::PURGE)
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
