//! The rejected log on SQLite: writes are commands of the single writer (a
//! refusal to keep is [`writer::Write::Reject`], kept with the others the writer
//! received at the same time by [`super::rejected_writes`]), reads go to the read
//! pool.

use async_trait::async_trait;
use uuid::Uuid;

use super::SqliteStore;
use super::writer;
use crate::store::StoreError;
use crate::store::rejected::{Bounds, RejectedRow, RejectedStore, row, sql};

#[async_trait]
impl RejectedStore for SqliteStore {
    async fn keep(&self, r: RejectedRow, bounds: Bounds) -> Result<(), StoreError> {
        self.send(|reply| writer::Write::Reject(Box::new((r, bounds)), reply))
            .await
    }

    async fn rejected(
        &self,
        source: &str,
        since: i64,
        limit: u32,
        preview: u32,
    ) -> Result<Vec<RejectedRow>, StoreError> {
        let rows = sqlx::query(sql::LIST)
            .bind(i64::from(preview))
            .bind(source)
            .bind(since)
            .bind(i64::from(limit))
            .fetch_all(&self.read)
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
            .fetch_optional(&self.read)
            .await?;
        found.as_ref().map(row).transpose()
    }

    async fn retryable(&self, source: &str, since: i64) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(sql::RETRYABLE)
            .bind(source)
            .bind(since)
            .fetch_all(&self.read)
            .await?;
        Ok(ids.iter().filter_map(|id| id.parse().ok()).collect())
    }

    async fn refused_again(&self, r: &RejectedRow) -> Result<(), StoreError> {
        let q = sqlx::query(sql::REFUSED_AGAIN)
            .bind(r.reason.clone())
            .bind(i64::from(r.status))
            .bind(r.code.clone())
            .bind(r.detail.clone())
            .bind(r.id.to_string());
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    q.execute(&mut *conn).await?;
                    Ok(())
                })
            })
        })
        .await
    }

    async fn forget(&self, source: &str, id: Uuid) -> Result<bool, StoreError> {
        let q = sqlx::query(sql::FORGET)
            .bind(source.to_owned())
            .bind(id.to_string());
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move { Ok(q.execute(&mut *conn).await?.rows_affected() > 0) })
            })
        })
        .await
    }

    async fn forget_delivery(&self, source: &str, delivery_id: &str) -> Result<u64, StoreError> {
        let q = sqlx::query(sql::FORGET_DELIVERY)
            .bind(source.to_owned())
            .bind(delivery_id.to_owned());
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                // An erasure's (SPEC §14): the raw bodies' bytes are zeros
                // (`secure_delete`), and their earlier images leave the WAL.
                Box::pin(async move {
                    let n = q.execute(&mut *conn).await?.rows_affected();
                    if n > 0 {
                        super::truncate_wal(conn, "an erasure").await;
                    }
                    Ok(n)
                })
            })
        })
        .await
    }

    async fn purge_rejected(&self, before: i64) -> Result<u64, StoreError> {
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    let done = sqlx::query(sql::PURGE)
                        .bind(before)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected())
                })
            })
        })
        .await
    }
}
