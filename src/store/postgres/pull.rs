//! Pull sources on PostgreSQL: one adapter per source across every instance.
//!
//! The lease is a session advisory lock (`pg_try_advisory_lock`, keyed by the
//! source's name) taken on a connection of its own, outside the pool. PostgreSQL
//! releases it when that connection ends — a clean stop, or the holder's process
//! killed (the kernel closes its socket) — and another instance's next attempt takes
//! it. Commits run on the same connection, in one transaction: the events (the
//! intake statement, once per event) and the cursor; a lost connection fails the
//! commit rather than letting two holders write.

use std::collections::HashMap;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use sqlx::postgres::PgConnection;
use sqlx::{ConnectOptions, Connection, Row};
use uuid::Uuid;

use super::{INSERT_EVENT, PgStore, rows};
use crate::model::{NewEvent, Status, Timestamp};
use crate::store::pull::{
    CursorRow, PullBatch, PullStore, SourceLease, cursor_row, source_marks, sql,
};
use crate::store::rows::RowExt;
use crate::store::{EventSummary, Inserted, StoreError};

/// The advisory lock key of a source: the first 8 bytes of a SHA-256 of its name,
/// in a namespace of hookbox's own.
fn lock_key(source: &str) -> i64 {
    let digest = Sha256::digest(format!("hookbox.pull-source:{source}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

#[async_trait]
impl PullStore for PgStore {
    async fn cursors(&self) -> Result<HashMap<String, CursorRow>, StoreError> {
        let rows = sqlx::query(sql::CURSORS).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| Ok((r.text("source")?.to_owned(), cursor_row(r)?)))
            .collect()
    }

    async fn reset_cursor(
        &self,
        source: &str,
        cursor: Option<String>,
    ) -> Result<CursorRow, StoreError> {
        let row = sqlx::query(sql::RESET_CURSOR)
            .bind(source)
            .bind(cursor)
            .bind(Timestamp::now().0)
            .fetch_one(&self.pool)
            .await?;
        cursor_row(&row)
    }

    async fn lease(&self, source: &str) -> Result<Option<Box<dyn SourceLease>>, StoreError> {
        let mut conn = self
            .options
            .clone()
            .application_name("hookbox-pull")
            .connect()
            .await?;
        let key = lock_key(source);
        let held: bool = sqlx::query("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut conn)
            .await?
            .try_get(0)?;
        if !held {
            let _ = conn.close().await;
            return Ok(None);
        }
        Ok(Some(Box::new(Lease {
            conn,
            source: source.to_owned(),
        })))
    }
}

/// The connection holding a source's advisory lock; dropping it ends the session
/// and so releases the lock.
struct Lease {
    conn: PgConnection,
    source: String,
}

#[async_trait]
impl SourceLease for Lease {
    async fn cursor(&mut self) -> Result<CursorRow, StoreError> {
        let row = sqlx::query(sql::CURSOR)
            .bind(&self.source)
            .fetch_optional(&mut self.conn)
            .await?;
        row.as_ref()
            .map(cursor_row)
            .transpose()
            .map(Option::unwrap_or_default)
    }

    async fn commit(&mut self, batch: PullBatch) -> Result<Option<Vec<Inserted>>, StoreError> {
        let mut tx = self.conn.begin().await?;
        let mut results = Vec::with_capacity(batch.events.len());
        for pulled in &batch.events {
            results.push(insert(&mut tx, &pulled.event).await?);
        }
        let moved = sqlx::query(sql::COMMIT_CURSOR)
            .bind(&batch.source)
            .bind(&batch.cursor)
            .bind(batch.version)
            .bind(Timestamp::now().0)
            .execute(&mut *tx)
            .await?;
        if moved.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let marks = source_marks(&batch, &results);
        if !marks.is_empty() {
            let ids: Vec<Uuid> = marks.iter().map(|m| m.0).collect();
            let sequences: Vec<Option<i64>> = marks.iter().map(|m| m.1).collect();
            let times: Vec<Option<chrono::DateTime<chrono::Utc>>> =
                marks.iter().map(|m| m.2.map(|t| t.0)).collect();
            sqlx::query(
                "UPDATE events SET source_sequence = v.seq, source_emitted_at = v.at \
                 FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[]) AS v (id, seq, at) \
                 WHERE events.id = v.id",
            )
            .bind(ids)
            .bind(sequences)
            .bind(times)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(results))
    }

    async fn check(&mut self) -> Result<(), StoreError> {
        self.conn.ping().await?;
        Ok(())
    }
}

/// Intake's statement for one event, inside the batch's transaction.
async fn insert(conn: &mut PgConnection, event: &NewEvent) -> Result<Inserted, StoreError> {
    let status = if event.deliveries.is_empty() {
        Status::Completed
    } else {
        Status::Pending
    };
    let ids: Vec<Uuid> = event.deliveries.iter().map(|d| d.id).collect();
    let handlers: Vec<String> = event.deliveries.iter().map(|d| d.handler.clone()).collect();
    let values: Vec<Option<String>> = event
        .deliveries
        .iter()
        .map(|d| d.ordering_value.clone())
        .collect();
    let row = sqlx::query(INSERT_EVENT)
        .bind(event.id)
        .bind(&event.idempotency_key)
        .bind(&event.event_type)
        .bind(&event.payload)
        .bind(&event.payload_sha256)
        .bind(status.as_str())
        .bind(event.created_at.0)
        .bind(ids)
        .bind(handlers)
        .bind(values)
        .bind(&event.source)
        .bind(
            event
                .trace
                .as_ref()
                .map(crate::trace_context::TraceContext::traceparent),
        )
        .bind(
            event
                .trace
                .as_ref()
                .and_then(|t| t.tracestate().map(str::to_owned)),
        )
        .fetch_optional(&mut *conn)
        .await?;
    match row.as_ref().map(rows::summary).transpose()? {
        Some(stored) if stored.id == event.id => Ok(Inserted {
            event: EventSummary::fresh(event),
            created: true,
        }),
        Some(stored) => Ok(Inserted {
            event: stored,
            created: false,
        }),
        None => {
            let sql = format!(
                "SELECT {} FROM events WHERE idempotency_key = $1",
                rows::SUMMARY_COLUMNS
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&event.idempotency_key)
                .fetch_optional(&mut *conn)
                .await?;
            match row.as_ref().map(rows::summary).transpose()? {
                Some(event) => Ok(Inserted {
                    event,
                    created: false,
                }),
                None => Err(StoreError::Corrupt("conflicting key not found".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lock_keys_differ_by_source_and_stay_the_same() {
        assert_eq!(super::lock_key("ledger"), super::lock_key("ledger"));
        assert_ne!(super::lock_key("ledger"), super::lock_key("stream"));
    }
}
