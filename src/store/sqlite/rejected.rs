//! The rejected log on SQLite: writes are commands of the single writer, reads go
//! to the read pool. The refusals the writer receives together are kept in one
//! transaction with one trim per source and class ([`keep_all`]): a flood of
//! forged requests costs the writer one commit per turn, not one per request
//! (each commit is a wait for the intake behind it).

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::{Connection, Sqlite, SqliteConnection};
use uuid::Uuid;

use super::SqliteStore;
use super::writer;
use crate::store::StoreError;
use crate::store::rejected::{Bounds, RejectedRow, RejectedStore, headers_text, row, sql};

type Query<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds a row for [`sql::INSERT`].
fn insert(r: &RejectedRow) -> Query<'static> {
    sqlx::query(sql::INSERT)
        .bind(r.id.to_string())
        .bind(r.source.clone())
        .bind(r.class.as_str())
        .bind(r.received_at.millis())
        .bind(r.reason.clone())
        .bind(i64::from(r.status))
        .bind(r.code.clone())
        .bind(r.detail.clone())
        .bind(headers_text(&r.headers))
        .bind(r.body.clone())
        .bind(i64::try_from(r.body_bytes).unwrap_or(i64::MAX))
        .bind(r.retryable)
        .bind(r.delivery_id.clone())
}

/// Keeps `rows` (each with its source's bounds) in one transaction, then trims
/// each source and class they touch once, by the bounds of its newest row: the
/// same entries remain as when each row is kept and trimmed in turn (a row past
/// a bound only goes further past it as newer rows come).
pub(super) async fn keep_all(
    conn: &mut SqliteConnection,
    rows: &[(RejectedRow, Bounds)],
) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
    for (r, _) in rows {
        insert(r).execute(&mut *tx).await?;
    }
    let mut trimmed = HashSet::new();
    for (r, bounds) in rows.iter().rev() {
        if !trimmed.insert((r.source.as_str(), r.class.as_str())) {
            continue;
        }
        sqlx::query(sql::TRIM)
            .bind(&r.source)
            .bind(r.class.as_str())
            .bind(i64::from(bounds.count))
            .bind(i64::try_from(bounds.bytes).unwrap_or(i64::MAX))
            .bind(bounds.oldest_kept(r.received_at))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

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
                Box::pin(async move { Ok(q.execute(&mut *conn).await?.rows_affected()) })
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
