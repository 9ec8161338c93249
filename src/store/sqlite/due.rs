//! Due work on SQLite ([`DueStore`]): the queries that keep the window of due work
//! filled from the table, through the indexes of migration 0008. All of them read
//! through the read-only pool, never the writer.
//!
//! Each statement that walks a range names its index (`INDEXED BY`), so that the
//! plan cannot silently turn into a scan of every delivery ([`TASKS_OF`] looks
//! deliveries up by their primary key); `tests::the_due_work_queries_use_their_indexes`
//! checks the plans.
//!
//! Fresh work is read in two steps: the ids past the window's cursor
//! ([`FRESH_IDS_AFTER`]: index and deliveries rows only), then the tasks, payloads
//! included, of the ids the window does not hold yet ([`TASKS_OF`]).

use async_trait::async_trait;
use futures_util::TryStreamExt;
use uuid::Uuid;

use super::SqliteStore;
use super::rows;
use crate::model::{DeliveryTask, Timestamp};
use crate::store::rows::RowExt;
use crate::store::{DueStore, StoreError};

/// What a worker needs of a delivery and its event (as `delivery_task` decodes).
macro_rules! task_columns {
    () => {
        "d.id, d.handler, d.status, d.attempts, d.retry_after, d.ordering_value, \
         d.created_at, e.id AS event_id, e.idempotency_key, e.event_type, e.payload, \
         e.traceparent, e.tracestate"
    };
}

/// Not held back by an older unfinished delivery of the same handler and value.
macro_rules! first_of_its_key {
    () => {
        "(d.ordering_value IS NULL OR NOT EXISTS (SELECT 1 FROM deliveries o \
           INDEXED BY deliveries_key_unfinished \
           WHERE o.handler = d.handler AND o.ordering_value = d.ordering_value \
           AND o.status IN ('pending', 'processing') AND o.id < d.id))"
    };
}

/// Not one of the handlers a JSON array names (destinations that hold enough).
macro_rules! not_skipped {
    () => {
        " d.handler NOT IN (SELECT value FROM json_each(?)) AND "
    };
}

/// The ids of fresh deliveries after a cursor, oldest first, with their handlers;
/// binds: after, skip, limit. No payloads: the window reads the tasks of those it
/// does not hold yet and their lanes have room for ([`TASKS_OF`]), so a read again
/// from a rewound cursor does not fetch payloads it already has, nor a read the
/// payloads of work a full lane would let go.
pub(super) const FRESH_IDS_AFTER: &str = concat!(
    "SELECT d.id, d.handler FROM deliveries d INDEXED BY deliveries_fresh \
     WHERE d.status IN ('pending', 'processing') AND d.retry_after IS NULL AND d.id > ? AND ",
    not_skipped!(),
    first_of_its_key!(),
    " ORDER BY d.id LIMIT ?"
);

/// The unfinished deliveries among ids (a JSON array) with their events, in id
/// order; binds: ids.
pub(super) const TASKS_OF: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM deliveries d JOIN events e ON e.id = d.event_id \
     WHERE d.id IN (SELECT value FROM json_each(?)) \
     AND d.status IN ('pending', 'processing') ORDER BY d.id"
);

/// Retries due now, the longest due first; binds: now, skip, limit.
pub(super) const DUE_RETRIES: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM deliveries d INDEXED BY deliveries_retry JOIN events e ON e.id = d.event_id \
     WHERE d.status IN ('pending', 'processing') AND d.retry_after IS NOT NULL \
     AND d.retry_after <= ? AND ",
    not_skipped!(),
    first_of_its_key!(),
    " ORDER BY d.retry_after, d.id LIMIT ?"
);

/// The first retry not yet due; binds: now.
pub(super) const NEXT_RETRY: &str = "SELECT MIN(retry_after) AS next FROM deliveries \
     INDEXED BY deliveries_retry WHERE status IN ('pending', 'processing') \
     AND retry_after IS NOT NULL AND retry_after > ?";

/// Fresh deliveries per handler: the backlog at startup.
pub(super) const COUNT_FRESH: &str = "SELECT handler, COUNT(*) AS n \
     FROM deliveries INDEXED BY deliveries_fresh WHERE status IN ('pending', 'processing') \
     AND retry_after IS NULL GROUP BY handler";

/// Fresh deliveries of handlers that order, per handler and ordering value (the
/// ordered part of [`COUNT_FRESH`]'s counts: what waits behind a key is not due).
pub(super) const COUNT_FRESH_KEYED: &str = "SELECT handler, ordering_value, COUNT(*) AS n \
     FROM deliveries INDEXED BY deliveries_key_unfinished WHERE ordering_value IS NOT NULL \
     AND status IN ('pending', 'processing') AND retry_after IS NULL \
     GROUP BY handler, ordering_value";

/// A count's `n`.
fn count(row: &sqlx::sqlite::SqliteRow) -> Result<u64, StoreError> {
    Ok(u64::try_from(row.int("n")?).unwrap_or(0))
}

/// An event's fresh deliveries (bind: its id), read as it is erased: the
/// backlog counted them. (None is `processing`: an erasure refuses then.)
pub(super) const ERASED_FRESH: &str = "SELECT handler, ordering_value FROM deliveries \
     WHERE event_id = ? AND status = 'pending' AND retry_after IS NULL";

/// Unfinished deliveries with a `retry_after`: retries, due or waiting.
pub(super) const COUNT_RETRIES: &str = "SELECT COUNT(*) AS n FROM deliveries \
     INDEXED BY deliveries_retry WHERE status IN ('pending', 'processing') \
     AND retry_after IS NOT NULL";

/// The oldest unfinished delivery of a key; binds: handler, value.
pub(super) const HEAD_OF_KEY: &str = "SELECT id, event_id, retry_after FROM deliveries \
     INDEXED BY deliveries_key_unfinished WHERE handler = ? AND ordering_value = ? \
     AND status IN ('pending', 'processing') ORDER BY id LIMIT 1";

/// Whether a key has an unfinished delivery older than an id; binds: handler, value, id.
pub(super) const OLDER_UNFINISHED: &str = "SELECT EXISTS (SELECT 1 FROM deliveries \
     INDEXED BY deliveries_key_unfinished WHERE handler = ? AND ordering_value = ? \
     AND status IN ('pending', 'processing') AND id < ?) AS older";

/// Unfinished events without an unfinished delivery.
const UNSETTLED: &str = "SELECT id FROM events e WHERE status IN ('pending', 'processing') \
     AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id \
                     AND d.status IN ('pending', 'processing')) ORDER BY id";

/// Handler names as the JSON array `json_each` reads.
fn json_list(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
}

impl SqliteStore {
    /// Runs a task query, decoding rows until `limit` or until the payloads pass
    /// `budget` bytes (the statement is dropped there).
    async fn tasks(
        &self,
        query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        budget: usize,
    ) -> Result<Vec<DeliveryTask>, StoreError> {
        let mut rows = query.fetch(&self.read);
        let mut tasks = Vec::new();
        let mut bytes = 0usize;
        while let Some(row) = rows.try_next().await? {
            let task = rows::delivery_task(&row)?;
            bytes = bytes.saturating_add(task.payload.len());
            tasks.push(task);
            if bytes >= budget {
                break;
            }
        }
        Ok(tasks)
    }
}

#[async_trait]
impl DueStore for SqliteStore {
    async fn count_fresh(
        &self,
        each: &mut (dyn for<'k> FnMut(&'k str, Option<&'k str>, u64) + Send),
    ) -> Result<(), StoreError> {
        // The keyed part per key first, streamed; then each handler's count
        // less its keyed part.
        let mut keyed: std::collections::HashMap<String, u64> = Default::default();
        let mut rows = sqlx::query(COUNT_FRESH_KEYED).fetch(&self.read);
        while let Some(row) = rows.try_next().await? {
            let (handler, n) = (row.text("handler")?, count(&row)?);
            each(handler, row.opt_text("ordering_value")?, n);
            match keyed.get_mut(handler) {
                Some(sum) => *sum += n,
                None => drop(keyed.insert(handler.to_owned(), n)),
            }
        }
        drop(rows);
        for row in sqlx::query(COUNT_FRESH).fetch_all(&self.read).await? {
            let handler = row.text("handler")?;
            let all = count(&row)?;
            each(
                handler,
                None,
                all.saturating_sub(keyed.get(handler).copied().unwrap_or(0)),
            );
        }
        Ok(())
    }

    async fn count_retries(&self) -> Result<u64, StoreError> {
        let row = sqlx::query(COUNT_RETRIES).fetch_one(&self.read).await?;
        Ok(u64::try_from(row.int("n")?).unwrap_or(0))
    }

    async fn fresh_ids_after(
        &self,
        after: Uuid,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<(Uuid, String)>, StoreError> {
        sqlx::query(FRESH_IDS_AFTER)
            .bind(after.to_string())
            .bind(json_list(skip))
            .bind(i64::from(limit))
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|r| Ok((r.uuid("id")?, r.text("handler")?.to_owned())))
            .collect()
    }

    async fn last_delivery_id(&self) -> Result<Option<Uuid>, StoreError> {
        let last: Option<String> = sqlx::query_scalar("SELECT max(id) FROM deliveries")
            .fetch_one(&self.read)
            .await?;
        last.map(|id| {
            id.parse()
                .map_err(|_| StoreError::Corrupt(format!("delivery id {id:?}")))
        })
        .transpose()
    }

    async fn tasks_of(&self, ids: &[Uuid], budget: usize) -> Result<Vec<DeliveryTask>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        self.tasks(sqlx::query(TASKS_OF).bind(json_list(&ids)), budget)
            .await
    }

    async fn due_retries(
        &self,
        now: Timestamp,
        limit: u32,
        budget: usize,
        skip: &[String],
    ) -> Result<Vec<DeliveryTask>, StoreError> {
        let query = sqlx::query(DUE_RETRIES)
            .bind(now.to_rfc3339())
            .bind(json_list(skip))
            .bind(i64::from(limit));
        self.tasks(query, budget).await
    }

    async fn next_retry(&self, now: Timestamp) -> Result<Option<Timestamp>, StoreError> {
        let row = sqlx::query(NEXT_RETRY)
            .bind(now.to_rfc3339())
            .fetch_one(&self.read)
            .await?;
        row.opt_timestamp("next")
    }

    async fn head_of_key(
        &self,
        handler: &str,
        value: &str,
    ) -> Result<Option<(Uuid, Uuid, Option<Timestamp>)>, StoreError> {
        let row = sqlx::query(HEAD_OF_KEY)
            .bind(handler)
            .bind(value)
            .fetch_optional(&self.read)
            .await?;
        row.map(|r| {
            Ok((
                r.uuid("id")?,
                r.uuid("event_id")?,
                r.opt_timestamp("retry_after")?,
            ))
        })
        .transpose()
    }

    async fn older_unfinished(
        &self,
        handler: &str,
        value: &str,
        delivery: Uuid,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(OLDER_UNFINISHED)
            .bind(handler)
            .bind(value)
            .bind(delivery.to_string())
            .fetch_one(&self.read)
            .await?;
        Ok(row.int("older")? != 0)
    }

    async fn unsettled(&self) -> Result<Vec<Uuid>, StoreError> {
        sqlx::query(UNSETTLED)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|r| r.uuid("id"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::query_plan as plan;

    /// Every due-work query reads a range of its index: no scan of the deliveries
    /// table and no sort of the backlog, whatever its size.
    #[tokio::test]
    async fn the_due_work_queries_use_their_indexes() {
        let id = "019ab000-0000-7000-8000-000000000000";
        let now = "2026-11-26T00:00:00.000Z";
        for (sql, binds, index) in [
            (
                super::FRESH_IDS_AFTER,
                vec![id, "[\"h\"]", "100"],
                "deliveries_fresh",
            ),
            (
                super::TASKS_OF,
                vec!["[\"019ab000-0000-7000-8000-000000000000\"]"],
                "sqlite_autoindex_deliveries_1",
            ),
            (
                super::DUE_RETRIES,
                vec![now, "[\"h\"]", "100"],
                "deliveries_retry",
            ),
            (super::NEXT_RETRY, vec![now], "deliveries_retry"),
            (
                super::HEAD_OF_KEY,
                vec!["h", "v"],
                "deliveries_key_unfinished",
            ),
            (
                super::OLDER_UNFINISHED,
                vec!["h", "v", id],
                "deliveries_key_unfinished",
            ),
        ] {
            let plan = plan(sql, &binds).await;
            assert!(plan.iter().any(|l| l.contains(index)), "{sql}: {plan:#?}");
            assert!(
                !plan.iter().any(|l| l.contains("TEMP B-TREE")),
                "{sql}: {plan:#?}"
            );
            assert!(
                !plan.iter().any(|l| l.starts_with("SCAN")
                    && !l.contains("INDEX")
                    && !l.contains("CONSTANT ROW")),
                "{sql}: {plan:#?}"
            );
        }
    }
}
