//! The claim side of the PostgreSQL store: the database is the queue.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use tokio::sync::Notify;
use uuid::Uuid;

use super::PgStore;
use super::rows::{self, TASK_COLUMNS};
use crate::store::{ClaimStore, Claimed, StoreError};

/// The channel of `LISTEN`/`NOTIFY` that announces new work.
pub(super) const CHANNEL: &str = "hookbox_work";

/// An older delivery of the same handler and ordering value is unfinished (strict
/// ordering: then `d` must wait).
const BLOCKED: &str = "d.ordering_value IS NOT NULL AND EXISTS (
            SELECT 1 FROM deliveries o
            WHERE o.handler = d.handler AND o.ordering_value = d.ordering_value
              AND o.status IN ('pending', 'processing') AND o.seq < d.seq)";

/// Not a destination that holds enough work already (`$4`, a text array: the
/// lanes of this instance that are full; `'{}'` for none).
const NOT_SKIPPED: &str = "d.handler <> ALL ($4::text[])";

/// Work never tried (or replayed): index `deliveries_ready` (migration 0010) holds
/// exactly these, in `seq` order.
const READY: &str = "d.status = 'pending' AND d.retry_after IS NULL";

/// Retries: `pending` deliveries with a `retry_after`. Index `deliveries_retry`
/// (migration 0004) holds exactly these by due time, so the due ones are a range.
const RETRY: &str = "d.status = 'pending' AND d.retry_after IS NOT NULL";

/// Running work: index `deliveries_leases` (migration 0010) holds exactly these by
/// lease expiry, so the expired ones are a range.
const LEASED: &str = "d.status = 'processing'";

/// Claims due deliveries, oldest first, skipping rows another instance is claiming
/// (`SKIP LOCKED`). Strict ordering lives here: a delivery with an ordering value is
/// not claimable while an older one of its handler and value is unfinished (pending,
/// waiting to retry, or processing, leased or not).
///
/// Due work comes from three index walks that each stop after `$1` rows and read
/// nothing they cannot take, so that a claim costs the same at any backlog: work
/// never tried in `seq` order, retries that are due (earliest due first; one dead
/// subscriber can leave any number waiting, never read), and deliveries whose lease
/// expired (their instance died). The oldest `$1` of the three are claimed. The
/// claimed rows are then found by primary key (`= ANY (ARRAY(…))`), which keeps
/// the planner from joining them by a scan of the table.
///
/// It runs on a connection of its own that always uses the generic plan
/// (`plan_cache_mode = force_generic_plan`). With the default, PostgreSQL compared
/// each custom plan (the limit known: a few rows) with the generic one (a tenth of
/// the table assumed), found the generic one dearer, and planned the statement
/// afresh at every claim: 0.6 ms of planning for a 1.2 ms claim
/// (`pg_stat_statements`: 2,993 plans for 3,175 claims). The generic plan is the
/// same walk of the same indexes, rebuilt whenever `ANALYZE` changes the
/// statistics.
pub(super) fn claim_sql() -> String {
    format!(
        "WITH ready AS (
    SELECT d.id, d.seq FROM deliveries d
    WHERE {READY} AND {NOT_SKIPPED} AND NOT ({BLOCKED})
    ORDER BY d.seq
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
), retried AS (
    SELECT d.id, d.seq FROM deliveries d
    WHERE {RETRY} AND d.retry_after <= now() AND {NOT_SKIPPED} AND NOT ({BLOCKED})
    ORDER BY d.retry_after
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
), expired AS (
    SELECT d.id, d.seq FROM deliveries d
    WHERE {LEASED} AND d.locked_until < now() AND {NOT_SKIPPED} AND NOT ({BLOCKED})
    ORDER BY d.locked_until
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
), due AS (
    SELECT id FROM (SELECT id, seq FROM ready UNION ALL SELECT id, seq FROM retried
                    UNION ALL SELECT id, seq FROM expired) w
    ORDER BY seq
    LIMIT $1
)
UPDATE deliveries d SET status = 'processing',
    locked_until = now() + $2 * interval '1 millisecond',
    locked_by = $3,
    updated_at = now()
FROM events e
WHERE d.id = ANY (ARRAY(SELECT id FROM due)) AND e.id = d.event_id
RETURNING {TASK_COLUMNS}"
    )
}

/// Deliveries due or running, on every instance: what backpressure weighs. Retries
/// still waiting for their `retry_after` are not work to do yet; counting them let
/// one dead subscriber make intake answer 429 for everyone. Each count reads its
/// partial index only.
fn backlog_sql() -> String {
    format!(
        "SELECT (SELECT count(*) FROM deliveries d WHERE {READY}) \
              + (SELECT count(*) FROM deliveries d WHERE {LEASED}) \
              + (SELECT count(*) FROM deliveries d WHERE {RETRY} AND d.retry_after <= now())"
    )
}

/// Retries still waiting for their time: what [`backlog_sql`] leaves out of
/// every pending delivery (read through index `deliveries_retry`).
fn waiting_retries_sql() -> String {
    format!("SELECT count(*) FROM deliveries d WHERE {RETRY} AND d.retry_after > now()")
}

/// The unfinished deliveries' `event_id` and `created_at`, read through their
/// partial indexes, one per kind of unfinished work (`pending` never tried,
/// `pending` waiting to retry, `processing`): how the events not yet finished are
/// found, since no index of `events` names its status (migration 0024).
pub(super) fn unfinished_sql() -> String {
    format!(
        "SELECT d.event_id, d.created_at FROM deliveries d WHERE {READY} \
         UNION ALL SELECT d.event_id, d.created_at FROM deliveries d WHERE {RETRY} \
         UNION ALL SELECT d.event_id, d.created_at FROM deliveries d WHERE {LEASED}"
    )
}

/// The counts behind [`crate::store::Stats`]: events with an unfinished delivery
/// and the oldest of them ([`unfinished_sql`]), and the dead letters.
pub(super) fn stats_sql() -> String {
    format!(
        "WITH unfinished AS MATERIALIZED ({}) \
         SELECT (SELECT count(DISTINCT event_id) FROM unfinished) AS pending, \
                (SELECT count(*) FROM deliveries WHERE status = 'failed') AS dead, \
                (SELECT min(created_at) FROM unfinished) AS oldest",
        unfinished_sql()
    )
}

/// [`backlog_sql`] for the handlers of `$1` (a text array) only.
fn backlog_of_sql() -> String {
    format!(
        "SELECT (SELECT count(*) FROM deliveries d WHERE {READY} AND d.handler = ANY ($1)) \
              + (SELECT count(*) FROM deliveries d WHERE {LEASED} AND d.handler = ANY ($1)) \
              + (SELECT count(*) FROM deliveries d WHERE {RETRY} AND d.retry_after <= now() \
                 AND d.handler = ANY ($1))"
    )
}

/// Work never tried behind an older delivery of its key ([`BLOCKED`]), except
/// that of the handlers of `$1` (a text array). Read only when the due backlog
/// reaches `QUEUE_MAXSIZE`: it visits each waiting delivery.
fn behind_keys_sql() -> String {
    format!(
        "SELECT count(*) FROM deliveries d WHERE {READY} AND d.handler <> ALL ($1::text[]) \
         AND {BLOCKED}"
    )
}

/// Milliseconds until the next retry is due or the next foreign lease expires.
const NEXT_DUE: &str = "\
SELECT (EXTRACT(EPOCH FROM (LEAST(
    (SELECT min(retry_after) FROM deliveries WHERE status = 'pending' AND retry_after > now()),
    (SELECT min(locked_until) FROM deliveries WHERE status = 'processing' AND locked_by <> $1)
) - now())) * 1000)::float8 AS ms";

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// How long until the next waiting retry is due or a foreign lease expires.
    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let ms: Option<f64> = sqlx::query(NEXT_DUE)
            .bind(&*self.owner)
            .fetch_one(&self.pool)
            .await?
            .try_get("ms")?;
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)))
    }
}

#[async_trait]
impl ClaimStore for PgStore {
    fn owner(&self) -> &str {
        &self.owner
    }

    async fn claim(
        &self,
        limit: u32,
        lease: Duration,
        skip: &[String],
    ) -> Result<Claimed, StoreError> {
        let fetched = sqlx::query(sqlx::AssertSqlSafe(claim_sql()))
            .bind(i64::from(limit))
            .bind(millis(lease))
            .bind(&*self.owner)
            .bind(skip)
            .fetch_all(&self.claims)
            .await?;
        let mut claimed = Vec::with_capacity(fetched.len());
        for row in &fetched {
            let seq: i64 = row.try_get("seq")?;
            claimed.push((seq, rows::delivery_task(row)?));
        }
        // RETURNING has no order; run them oldest first.
        claimed.sort_by_key(|(seq, _)| *seq);
        let tasks: Vec<_> = claimed.into_iter().map(|(_, t)| t).collect();
        // The claim is committed: from here on nothing may fail, or the claimed
        // deliveries would wait for their lease to expire.
        let next_due = if tasks.len() < limit as usize {
            match self.next_due().await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(error = %e, "could not read the next due time");
                    None
                }
            }
        } else {
            None
        };
        Ok(Claimed { tasks, next_due })
    }

    async fn renew(&self, held: &[Uuid], lease: Duration) -> Result<Vec<Uuid>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let renewed = sqlx::query_scalar(
            "UPDATE deliveries SET locked_until = now() + $1 * interval '1 millisecond' \
             WHERE id = ANY ($2) AND locked_by = $3 AND status = 'processing' RETURNING id",
        )
        .bind(millis(lease))
        .bind(held)
        .bind(&*self.owner)
        .fetch_all(&self.pool)
        .await?;
        Ok(renewed)
    }

    async fn release(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE deliveries SET status = 'pending', locked_until = NULL, locked_by = NULL, \
             updated_at = now() WHERE locked_by = $1 AND status = 'processing'",
        )
        .bind(&*self.owner)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            self.announce().await?;
        }
        Ok(done.rows_affected())
    }

    /// What a previous run under this `INSTANCE_ID` held is released (as at a
    /// graceful stop), unless another live process holds the id.
    async fn reclaim(&self) -> Result<u64, StoreError> {
        if self.owns_id {
            self.release().await
        } else {
            Ok(0)
        }
    }

    async fn backlog(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(backlog_sql()))
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn waiting_retries(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(waiting_retries_sql()))
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn instances(&self) -> Result<u32, StoreError> {
        let n: i64 = sqlx::query_scalar(super::instance::LIVE)
            .fetch_one(&self.pool)
            .await?;
        Ok(u32::try_from(n).unwrap_or(1).max(1))
    }

    async fn backlog_of(&self, handlers: &[String]) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(backlog_of_sql()))
            .bind(handlers)
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn behind_keys(&self, except: &[String]) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(behind_keys_sql()))
            .bind(except)
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn announce(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(CHANNEL)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn announcements(&self) -> Arc<Notify> {
        self.listen();
        self.announced.clone()
    }
}
