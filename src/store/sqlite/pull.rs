//! Pull sources on SQLite: one instance, so a lease is always granted; a batch's
//! events and its cursor are one command of the single writer, committed in one
//! transaction with the same multi-row statements as intake's group commit.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::SqliteConnection;

use super::SqliteStore;
use super::script::Script;
use super::writer::{
    self, ROWS_PER_STATEMENT, count_receipts, find_keys, insert_deliveries, insert_events,
};
use crate::model::{NewDelivery, NewEvent, Timestamp};
use crate::store::pull::{
    CursorRow, PullBatch, PullStore, SourceLease, cursor_row, source_marks, sql,
};
use crate::store::rows::RowExt;
use crate::store::{EventSummary, Inserted, StoreError};

#[async_trait]
impl PullStore for SqliteStore {
    async fn cursors(&self) -> Result<HashMap<String, CursorRow>, StoreError> {
        let rows = sqlx::query(sql::CURSORS).fetch_all(&self.read).await?;
        rows.iter()
            .map(|r| Ok((r.text("source")?.to_owned(), cursor_row(r)?)))
            .collect()
    }

    async fn reset_cursor(
        &self,
        source: &str,
        cursor: Option<String>,
    ) -> Result<CursorRow, StoreError> {
        let source = source.to_owned();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    let row = sqlx::query(sql::RESET_CURSOR)
                        .bind(source)
                        .bind(cursor)
                        .bind(Timestamp::now().to_rfc3339())
                        .fetch_one(&mut *conn)
                        .await?;
                    cursor_row(&row)
                })
            })
        })
        .await
    }

    async fn lease(&self, source: &str) -> Result<Option<Box<dyn SourceLease>>, StoreError> {
        Ok(Some(Box::new(Lease {
            store: self.clone(),
            source: source.to_owned(),
        })))
    }
}

/// One instance serves a SQLite file: the lease is the store itself.
struct Lease {
    store: SqliteStore,
    source: String,
}

#[async_trait]
impl SourceLease for Lease {
    async fn cursor(&mut self) -> Result<CursorRow, StoreError> {
        let row = sqlx::query(sql::CURSOR)
            .bind(&self.source)
            .fetch_optional(&self.store.read)
            .await?;
        row.as_ref()
            .map(cursor_row)
            .transpose()
            .map(Option::unwrap_or_default)
    }

    async fn commit(&mut self, batch: PullBatch) -> Result<Option<Vec<Inserted>>, StoreError> {
        self.store
            .send(|reply| writer::solo(reply, move |conn| Box::pin(commit(conn, batch))))
            .await
    }

    async fn check(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The batch in one transaction on the write connection: the events (taken keys
/// skipped, retries counted), their sequence and timestamp, and the cursor if its
/// version is still the batch's. Rolled back whole on any failure.
async fn commit(
    conn: &mut SqliteConnection,
    batch: PullBatch,
) -> Result<Option<Vec<Inserted>>, StoreError> {
    let outcome = apply(conn, &batch).await;
    let outcome = match outcome {
        Ok(Some(results)) => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(|_| Some(results))
            .map_err(StoreError::from),
        other => other,
    };
    if !matches!(outcome, Ok(Some(_))) {
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    outcome
}

/// Everything but the `COMMIT`; `Ok(None)` when the cursor moved.
async fn apply(
    conn: &mut SqliteConnection,
    batch: &PullBatch,
) -> Result<Option<Vec<Inserted>>, StoreError> {
    let events: Vec<&NewEvent> = batch.events.iter().map(|p| &p.event).collect();
    let deliveries: Vec<(&NewEvent, &NewDelivery)> = events
        .iter()
        .flat_map(|e| e.deliveries.iter().map(move |d| (*e, d)))
        .collect();
    // Exactly as many rows as items: this script is not kept compiled (below),
    // so padding would buy nothing.
    let mut script = Script::new("BEGIN IMMEDIATE;");
    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        insert_events(&mut script, chunk, chunk.len());
    }
    for chunk in deliveries.chunks(ROWS_PER_STATEMENT) {
        insert_deliveries(&mut script, chunk, chunk.len());
    }
    // Batches differ in size: not worth a place in the writer's statement cache.
    let rows = script
        .build()?
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    let mut unsure: Vec<&str> = Vec::new();
    for (chunk, row) in events.chunks(ROWS_PER_STATEMENT).zip(&rows) {
        let went_in: i64 = sqlx::Row::try_get(row, 0)?;
        if usize::try_from(went_in).ok() != Some(chunk.len()) {
            unsure.extend(chunk.iter().map(|e| e.idempotency_key.as_str()));
        }
    }
    let mut existing = find_keys(conn, &unsure).await?;
    count_receipts(conn, &events, &mut existing).await?;
    let results: Vec<Inserted> = events
        .iter()
        .map(|e| match existing.get(&e.idempotency_key) {
            Some(stored) if stored.id != e.id => Inserted {
                event: stored.clone(),
                created: false,
            },
            _ => Inserted {
                event: EventSummary::fresh(e),
                created: true,
            },
        })
        .collect();
    let moved = sqlx::query(sql::COMMIT_CURSOR)
        .bind(&batch.source)
        .bind(&batch.cursor)
        .bind(batch.version)
        .bind(Timestamp::now().to_rfc3339())
        .execute(&mut *conn)
        .await?;
    if moved.rows_affected() == 0 {
        return Ok(None);
    }
    let marks = source_marks(batch, &results);
    for chunk in marks.chunks(ROWS_PER_STATEMENT) {
        let mut qb = Script::new(
            "UPDATE events SET source_sequence = v.column2, source_emitted_at = v.column3 FROM (",
        );
        qb.push_values(chunk, |mut row, (id, sequence, emitted_at)| {
            row.push_bind(id.to_string())
                .push_bind(*sequence)
                .push_bind(emitted_at.map(|t| t.to_rfc3339()));
        });
        qb.push(") AS v WHERE events.id = v.column1");
        qb.build()?.persistent(false).execute(&mut *conn).await?;
    }
    Ok(Some(results))
}
