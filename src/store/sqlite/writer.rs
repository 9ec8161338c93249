//! The single writer: group commit.
//!
//! One task owns the only write connection. It takes everything waiting in its
//! channel (up to [`MAX_BATCH`]), applies it in one transaction with multi-row
//! statements, commits (one fsync for the whole batch), and only then answers each
//! caller. If a batch fails, its operations are retried one transaction each, so one
//! bad operation fails alone.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use sqlx::{Connection, SqliteConnection};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, warn};
use uuid::Uuid;

use super::recent::{self, RecentKeys};
use super::rows::{self, SUMMARY_COLUMNS};
use super::script::{Script, padded};
use super::slow_round::{Part, Round};
use crate::model::{Attempt, Finish, NewDelivery, NewEvent, Status, Subscriber, Timestamp};
use crate::store::rejected::{Bounds, RejectedRow};
use crate::store::rows::RowExt;
use crate::store::{EventSummary, Inserted, PendingDelivery, ReplayFilter, StoreError};
use crate::trace_context::TraceContext;

/// Most operations committed in one transaction.
const MAX_BATCH: usize = 1024;
/// Rows per multi-row INSERT (SQLite allows 32,766 bound values per statement).
pub(super) const ROWS_PER_STATEMENT: usize = 256;

/// A write request and where to send its result.
pub(super) enum Write {
    /// Insert an event and its deliveries (or find the one holding its key).
    Insert(NewEvent, oneshot::Sender<Result<Inserted, StoreError>>),
    /// Derive an event's status from its deliveries (nobody waits for it).
    Settle(Uuid),
    /// Mark a pending delivery `processing` (nobody waits for it).
    Start(Uuid, Uuid),
    /// Count one more request of an event (a retry answered from the recent keys;
    /// nobody waits for it).
    Receipt(Uuid, Timestamp),
    /// Record an attempt's outcome.
    Finish(Finish, oneshot::Sender<Result<(), StoreError>>),
    /// Keep a refused request in the rejected log (with its source's bounds):
    /// those received together are kept in one transaction after the batch
    /// ([`super::rejected_writes::keep_all`]).
    Reject(Box<(RejectedRow, Bounds)>, Reply),
    /// Any other write, run alone on the write connection after the batch (in its
    /// own transaction if it opens one); it answers its caller itself.
    Solo(Solo),
}

/// Where a write with nothing to return is answered.
pub(super) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// A refusal to keep, with its source's bounds, and where to answer.
type Rejection = ((RejectedRow, Bounds), Reply);

/// A write that runs alone: gets the connection, answers through its own channel.
pub(super) type Solo =
    Box<dyn for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, ()> + Send + Sync>;

/// Wraps an async function of the write connection as a [`Write::Solo`] whose
/// result goes to `reply`.
pub(super) fn solo<T, F>(reply: oneshot::Sender<Result<T, StoreError>>, f: F) -> Write
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, StoreError>>
        + Send
        + Sync
        + 'static,
{
    Write::Solo(Box::new(move |conn| {
        Box::pin(async move {
            let _ = reply.send(f(conn).await);
        })
    }))
}

/// What one write produced.
pub(super) enum Done {
    /// An insert's outcome.
    Inserted(Inserted),
    /// Any other write's.
    Unit,
}

/// Runs until every sender is gone; keeps `recent` (the recent keys) in step with
/// what it commits, and finishes the WAL checkpoints `checkpoint` asks for
/// between batches ([`super::checkpoint`]). A round of one second or more is
/// logged ([`super::slow_round`]).
pub(super) async fn run(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<Write>,
    recent: Arc<RecentKeys>,
    mut checkpoint: super::checkpoint::Finishing,
) {
    let mut received = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut received, MAX_BATCH).await > 0 {
        let (mut batch, mut rejects, mut solos) = (Vec::new(), Vec::new(), Vec::new());
        for op in received.drain(..) {
            match op {
                Write::Solo(f) => solos.push(f),
                Write::Reject(row, reply) => rejects.push((*row, reply)),
                op => batch.push(op),
            }
        }
        let mut round = Round::begin(batch.len(), solos.len());
        if !batch.is_empty() {
            let receipts = arrivals(&batch).count() as u64;
            commit_batch(&mut conn, &mut batch, &recent).await;
            recent.settled(receipts);
        }
        round.lap(Part::Batch);
        keep_rejected(&mut conn, rejects).await;
        round.lap(Part::Rejected);
        for f in solos {
            f(&mut conn).await;
        }
        round.lap(Part::Solos);
        checkpoint.between_batches(&mut conn).await;
        round.lap(Part::Checkpoint);
        round.end();
    }
    if let Err(e) = conn.close().await {
        warn!(error = %e, "closing the write connection");
    }
}

/// Keeps the refusals received together in one transaction; when that fails,
/// each in its own, so that one bad row fails only its own request.
async fn keep_rejected(conn: &mut SqliteConnection, rejects: Vec<Rejection>) {
    let (rows, replies): (Vec<_>, Vec<_>) = rejects.into_iter().unzip();
    if rows.is_empty() {
        return;
    }
    match super::rejected_writes::keep_all(conn, &rows).await {
        Ok(()) => replies.into_iter().for_each(|r| drop(r.send(Ok(())))),
        Err(e) if rows.len() == 1 => {
            if let Some(reply) = replies.into_iter().next() {
                drop(reply.send(Err(e)));
            }
        }
        Err(e) => {
            warn!(error = %e, size = rows.len(), "rejected-log group failed; keeping one by one");
            for (row, reply) in rows.into_iter().zip(replies) {
                let result =
                    super::rejected_writes::keep_all(conn, std::slice::from_ref(&row)).await;
                drop(reply.send(result));
            }
        }
    }
}

/// Commits a batch, falling back to one transaction per op when it fails.
async fn commit_batch(conn: &mut SqliteConnection, batch: &mut Vec<Write>, recent: &RecentKeys) {
    {
        match commit(conn, batch, recent).await {
            Ok(results) => answer(batch.drain(..), results),
            Err(e) if batch.len() == 1 => {
                error!(error = %e, "write failed");
                answer(batch.drain(..), vec![Err(e)]);
            }
            Err(e) => {
                warn!(error = %e, size = batch.len(), "batch failed; retrying one by one");
                for op in batch.drain(..) {
                    let one = [op];
                    let results = match commit(conn, &one, recent).await {
                        Ok(r) => r,
                        Err(e) => vec![Err(e)],
                    };
                    answer(one.into_iter(), results);
                }
            }
        }
    }
}

// A caller that gave up (client disconnected) is fine to ignore: the event is
// committed and a retry with its key finds it. Hence the dropped send results.
fn answer(ops: impl Iterator<Item = Write>, results: Vec<Result<Done, StoreError>>) {
    let mut results = results.into_iter();
    for op in ops {
        let result = results.next().unwrap_or(Err(StoreError::WriterGone));
        match op {
            Write::Insert(_, reply) => drop(reply.send(result.and_then(|d| match d {
                Done::Inserted(i) => Ok(i),
                _ => Err(StoreError::Corrupt("insert answered without a row".into())),
            }))),
            Write::Finish(_, reply) => drop(reply.send(result.map(|_| ()))),
            Write::Solo(_) | Write::Reject(..) => {}
            Write::Settle(id) | Write::Start(_, id) | Write::Receipt(id, _) => {
                if let Err(e) = result {
                    warn!(event = %id, error = %e, "status update failed; recovery will redo it");
                }
            }
        }
    }
}

/// Applies `ops` in one transaction; one result per op, in order.
///
/// The transaction's statements — `BEGIN` and the multi-row statements — go to
/// SQLite as one script, so a batch costs two round trips to sqlx's SQLite thread
/// (the script, then `COMMIT`) instead of one per statement (measured: the round
/// trips were a third of the writer's time). The script is a cached statement:
/// batches of the same shape (the same padded row count and the same parts,
/// [`Parts::script`]) skip SQLite's parse and plan. Each events INSERT reports
/// how many rows went in; only the keys of a statement that skipped some (taken
/// keys) are looked up, inside the still open transaction, and the retries among
/// them (same type and payload) are counted ([`count_receipts`]) before the one
/// `COMMIT`.
async fn commit(
    conn: &mut SqliteConnection,
    ops: &[Write],
    recent: &RecentKeys,
) -> Result<Vec<Result<Done, StoreError>>, StoreError> {
    let parts = Parts::of(ops);
    let Parts {
        events, settles, ..
    } = &parts;
    // Before the commit, so that no retry is answered an older status after it.
    recent::forget(recent, settles);
    let receipts = recent::receipts(arrivals(ops));
    let script = parts.script(&receipts);
    let ran = match script.build() {
        Ok(query) => query.persistent(true).fetch_all(&mut *conn).await,
        Err(e) => Err(e),
    };
    let outcome = match ran {
        Ok(rows) => settle_inserts(conn, ops, events, &rows).await,
        Err(e) => Err(e.into()),
    };
    let committed = match outcome {
        Ok(results) => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(|_| results)
            .map_err(StoreError::from),
        Err(e) => Err(e),
    };
    match &committed {
        Ok(results) => {
            let found = ops
                .iter()
                .zip(results)
                .filter_map(|(op, result)| match (op, result) {
                    (Write::Insert(..), Ok(Done::Inserted(inserted))) if !inserted.created => {
                        Some(inserted)
                    }
                    _ => None,
                });
            recent::remember(recent, found, settles);
        }
        Err(_) => {
            // The script stopped at the failing statement, or a later step failed:
            // undo what the transaction began.
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        }
    }
    committed
}

/// What one batch writes, gathered from its operations in their order.
struct Parts<'a> {
    /// The events to insert.
    events: Vec<&'a NewEvent>,
    /// Their deliveries.
    deliveries: Vec<(&'a NewEvent, &'a NewDelivery)>,
    /// The deliveries to mark `processing` ([`unfinished_starts`]).
    starts: Vec<Uuid>,
    /// The attempts' outcomes.
    finishes: Vec<&'a Finish>,
    /// Their attempt rows, with their events' ids.
    attempts: Vec<(Uuid, &'a Attempt)>,
    /// The events whose status follows their deliveries, each once.
    settles: Vec<Uuid>,
}

impl<'a> Parts<'a> {
    /// Gathers the parts of `ops`, in one pass.
    fn of(ops: &'a [Write]) -> Self {
        let (mut events, mut finishes, mut settles) = (Vec::new(), Vec::new(), Vec::new());
        for op in ops {
            match op {
                Write::Insert(e, _) => events.push(e),
                Write::Finish(f, _) => {
                    finishes.push(f);
                    settles.push(f.event_id);
                }
                Write::Settle(event) | Write::Start(_, event) => settles.push(*event),
                Write::Receipt(..) | Write::Reject(..) | Write::Solo(_) => {}
            }
        }
        settles.sort_unstable();
        settles.dedup();
        let deliveries = events
            .iter()
            .flat_map(|e| e.deliveries.iter().map(move |d| (*e, d)))
            .collect();
        let attempts = finishes
            .iter()
            .filter_map(|f| f.attempt.as_ref().map(|a| (f.event_id, a)))
            .collect();
        Self {
            events,
            deliveries,
            starts: unfinished_starts(ops),
            finishes,
            attempts,
            settles,
        }
    }

    /// The batch's script: `BEGIN`, then one multi-row statement (per
    /// [`ROWS_PER_STATEMENT`]) for each part that has rows, every one padded to
    /// the same row count ([`shape`] of all the parts' counts), then the
    /// `receipts` counted.
    ///
    /// One row count for the whole script, not one per statement: the text then
    /// depends on that count and on which parts are there, so a busy instance
    /// uses few texts, each compiled once and kept (`WRITER_STATEMENT_CACHE`).
    /// With a count per part, intake's and delivery work's sizes multiplied into
    /// more texts than the cache held, and SQLite parsed and planned scripts
    /// again and again (callgrind, one `kind = "http"` handler at 64
    /// connections: 31,600 instructions per event).
    fn script(&self, receipts: &[(Uuid, u32, Timestamp)]) -> Script {
        let rows = shape(&[
            self.events.len(),
            self.deliveries.len(),
            self.starts.len(),
            self.finishes.len(),
            self.attempts.len(),
            self.settles.len(),
            receipts.len(),
        ]);
        let mut script = Script::new("BEGIN IMMEDIATE;");
        for chunk in self.events.chunks(ROWS_PER_STATEMENT) {
            insert_events(&mut script, chunk, rows);
        }
        for chunk in self.deliveries.chunks(ROWS_PER_STATEMENT) {
            insert_deliveries(&mut script, chunk, rows);
        }
        for chunk in self.finishes.chunks(ROWS_PER_STATEMENT) {
            finish(&mut script, chunk, rows);
        }
        // After the outcomes: a start left here is either the only write of its
        // delivery in the batch or came after its outcome (a retry begun).
        for chunk in self.starts.chunks(ROWS_PER_STATEMENT) {
            start(&mut script, chunk, rows);
        }
        for chunk in self.attempts.chunks(ROWS_PER_STATEMENT) {
            record_attempts(&mut script, chunk, rows);
        }
        for chunk in self.settles.chunks(ROWS_PER_STATEMENT) {
            settle(&mut script, chunk, rows);
        }
        for chunk in receipts.chunks(ROWS_PER_STATEMENT) {
            recent::count(&mut script, chunk, rows);
        }
        script
    }
}

/// The deliveries to mark `processing`: every start but those whose outcome comes
/// later in the same batch. Such a start would be overwritten by its outcome in the
/// same transaction (the outcome sets status, attempts, error and time whatever they
/// were), so its `UPDATE` — a row rewrite and two index entries — is skipped; a
/// delivery started again after an outcome in the batch (a retry) keeps its start.
///
/// Most batches hold no start (intake alone, or outcomes whose starts went in an
/// earlier batch): those build nothing.
fn unfinished_starts(ops: &[Write]) -> Vec<Uuid> {
    let starts: Vec<(usize, Uuid)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            Write::Start(delivery, _) => Some((i, *delivery)),
            _ => None,
        })
        .collect();
    if starts.is_empty() {
        return Vec::new();
    }
    let last_finish: HashMap<Uuid, usize> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            Write::Finish(f, _) => Some((f.delivery_id, i)),
            _ => None,
        })
        .collect();
    starts
        .into_iter()
        .filter(|(i, delivery)| last_finish.get(delivery).is_none_or(|f| f < i))
        .map(|(_, delivery)| delivery)
        .collect()
}

/// Inside the batch's open transaction: which inserts created their event and
/// which found their key taken (those are looked up, and the retries among them
/// counted); one result per op, in order.
async fn settle_inserts(
    conn: &mut SqliteConnection,
    ops: &[Write],
    events: &[&NewEvent],
    rows: &[sqlx::sqlite::SqliteRow],
) -> Result<Vec<Result<Done, StoreError>>, StoreError> {
    // One row per events statement: how many of its rows went in. Only where some
    // did not (their key was taken) are the keys looked up.
    if rows.len() != events.len().div_ceil(ROWS_PER_STATEMENT) {
        return Err(StoreError::Corrupt(format!(
            "{} insert counts for {} events",
            rows.len(),
            events.len()
        )));
    }
    let mut unsure: Vec<&str> = Vec::new();
    for (chunk, row) in events.chunks(ROWS_PER_STATEMENT).zip(rows) {
        let went_in: i64 = sqlx::Row::try_get(row, 0)?;
        if usize::try_from(went_in).ok() != Some(chunk.len()) {
            unsure.extend(chunk.iter().map(|e| e.idempotency_key.as_str()));
        }
    }
    let mut existing = find_keys(conn, &unsure).await?;
    count_receipts(conn, events, &mut existing).await?;
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        results.push(match op {
            Write::Settle(..)
            | Write::Start(..)
            | Write::Receipt(..)
            | Write::Finish(..)
            | Write::Reject(..)
            | Write::Solo(_) => Ok(Done::Unit),
            // Either its statement inserted every row, or the row holding its key
            // is this event.
            Write::Insert(e, _)
                if existing
                    .get(&e.idempotency_key)
                    .is_none_or(|stored| stored.id == e.id) =>
            {
                Ok(Done::Inserted(Inserted {
                    event: EventSummary::fresh(e),
                    created: true,
                }))
            }
            Write::Insert(e, _) => existing
                .get(&e.idempotency_key)
                .cloned()
                .map(|event| {
                    Done::Inserted(Inserted {
                        event,
                        created: false,
                    })
                })
                .ok_or_else(|| StoreError::Corrupt("conflicting key not found".into())),
        });
    }
    Ok(results)
}

/// Row counts a batch's statements (inserts, starts, outcomes, attempts, settles)
/// are padded up to.
const SHAPES: [usize; 16] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256];

/// The rows every statement of a batch has: the first of [`SHAPES`] that holds
/// the most any of `counts` needs (a statement holds at most
/// [`ROWS_PER_STATEMENT`]).
///
/// A batch's script is a cached statement per shape. With a statement of exactly
/// as many rows as items, the mix of the counts made nearly every batch a new
/// shape, parsed and planned again (a drain spent ~8 % of its instructions
/// preparing scripts); padded to one common count, a batch has one of a few
/// shapes ([`Parts::script`]). Padded rows change nothing (see each statement).
///
/// ```ignore
/// assert_eq!(shape(&[5, 1, 0]), 6);
/// assert_eq!(shape(&[900]), ROWS_PER_STATEMENT);
/// ```
fn shape(counts: &[usize]) -> usize {
    let most = counts
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .min(ROWS_PER_STATEMENT);
    SHAPES.iter().copied().find(|&s| s >= most).unwrap_or(most)
}

/// An `IN (…)` list of `ids`, padded to `rows` with NULLs (which equal no id).
fn push_id_list(script: &mut Script, ids: &[Uuid], rows: usize) {
    let mut list = script.separated(", ");
    for id in padded(ids, rows) {
        list.push_bind(id.map(|id| rows::id_text(&id)));
    }
}

/// `pending → processing` for deliveries a worker took.
fn start(script: &mut Script, deliveries: &[Uuid], rows: usize) {
    script.push("UPDATE deliveries SET status = 'processing', updated_at = ");
    script.push_bind(Timestamp::now().to_rfc3339());
    script.push(" WHERE status = 'pending' AND id IN (");
    push_id_list(script, deliveries, rows);
    script.push(");");
}

/// Attempt outcomes, one multi-row UPDATE padded to `rows` with rows of NULLs
/// (whose delivery id equals no delivery's). A success keeps the previous error.
fn finish(script: &mut Script, finishes: &[&Finish], rows: usize) {
    script.push(
        "UPDATE deliveries SET status = v.column2, attempts = v.column3, \
         last_error = COALESCE(v.column4, deliveries.last_error), retry_after = v.column5, \
         updated_at = v.column6 FROM (",
    );
    // One text for every row: a binding of it is a reference count, not a copy.
    let now: Arc<str> = Timestamp::now().to_rfc3339().into();
    script.push_values(padded(finishes, rows), |mut row, f| {
        let Some(f) = f else {
            row.push_nulls(6);
            return;
        };
        row.push_bind(rows::id_text(&f.delivery_id))
            .push_bind(f.status.as_str())
            .push_bind(i64::from(f.attempts))
            .push_bind(f.last_error.clone())
            .push_bind(f.retry_after.map(|t| t.to_rfc3339()))
            .push_bind(Arc::clone(&now));
    });
    script.push(") AS v WHERE deliveries.id = v.column1;");
}

/// The attempt history of the outcomes (one multi-row INSERT): an attempt already
/// on record is kept as it was, and an event that is gone (nothing should delete an
/// unfinished one) gets no rows instead of failing the batch. Padded to `rows`
/// with rows of NULLs (whose event id names no event: nothing is inserted).
fn record_attempts(script: &mut Script, attempts: &[(Uuid, &Attempt)], rows: usize) {
    script.push(
        "INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome, \
         response_status, response_body, error, request) SELECT v.* FROM (",
    );
    script.push_values(padded(attempts, rows), |mut row, item| {
        let Some((event, a)) = item else {
            row.push_nulls(10);
            return;
        };
        row.push_bind(rows::id_text(&event))
            .push_bind(a.handler.clone())
            .push_bind(i64::from(a.attempt))
            .push_bind(Timestamp(a.started_at).to_rfc3339())
            .push_bind(i64::try_from(a.duration_ms).unwrap_or(i64::MAX))
            .push_bind(a.outcome.as_str())
            .push_bind(a.response_status.map(i64::from))
            .push_bind(a.response_body.clone())
            .push_bind(a.error.clone())
            .push_bind(a.request.clone());
    });
    script.push(
        ") AS v WHERE EXISTS (SELECT 1 FROM events e WHERE e.id = v.column1) \
         ON CONFLICT DO NOTHING;",
    );
}

/// Deletes up to `?2` terminal events created before `?1`, oldest first, through
/// the index of terminal events by creation time (migration 0004): each batch
/// reads its own rows and stops, whatever the number of expired ones.
const PURGE: &str = "DELETE FROM events WHERE id IN (SELECT id FROM events \
     INDEXED BY events_terminal_created \
     WHERE status IN ('completed', 'failed') AND created_at < ? ORDER BY created_at LIMIT ?)";

const PURGE_SOURCE: &str = "DELETE FROM events WHERE id IN (SELECT id FROM events \
     WHERE source = ? AND status IN ('completed', 'failed') AND updated_at < ? \
     ORDER BY updated_at LIMIT ?)";

/// Deletes one batch of a source's terminal events last changed before `cutoff`
/// (its `retention`); as [`purge`] otherwise.
pub(super) async fn purge_source(
    conn: &mut SqliteConnection,
    source: &str,
    cutoff: Timestamp,
    limit: u32,
    recent: &RecentKeys,
) -> Result<u64, StoreError> {
    recent.clear();
    let done = sqlx::query(PURGE_SOURCE)
        .bind(source)
        .bind(cutoff.to_rfc3339())
        .bind(i64::from(limit))
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes one batch of old terminal events; deliveries and attempts follow by
/// cascade. The recent keys are forgotten first (retention runs rarely; the keys
/// still in use come back from the table at their next retry).
pub(super) async fn purge(
    conn: &mut SqliteConnection,
    cutoff: Timestamp,
    limit: u32,
    recent: &RecentKeys,
) -> Result<u64, StoreError> {
    recent.clear();
    let done = sqlx::query(PURGE)
        .bind(cutoff.to_rfc3339())
        .bind(i64::from(limit))
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Derives each event's status from its deliveries (docs/states.md): `completed`
/// when all
/// are (or there are none); `failed` when one is dead-lettered and none is still
/// pending or processing; `pending` while nothing was tried yet; else `processing`.
///
/// One pass over the event's deliveries computes the status and the attempts
/// (one index range, each row read once), where a correlated subquery per column
/// read them five times; the latest error is looked up only for an event whose
/// deliveries have one.
fn settle(script: &mut Script, events: &[Uuid], rows: usize) {
    script.push(
        "UPDATE events SET (status, attempts, last_error) = (SELECT \
             CASE WHEN total(d.status <> 'completed') = 0 THEN 'completed' \
                  WHEN total(d.status IN ('pending', 'processing')) = 0 THEN 'failed' \
                  WHEN total(d.status <> 'pending' OR d.attempts > 0) = 0 THEN 'pending' \
                  ELSE 'processing' END, \
             COALESCE(MAX(d.attempts), 0), \
             CASE WHEN total(d.last_error IS NOT NULL) > 0 THEN \
               (SELECT l.last_error FROM deliveries l WHERE l.event_id = events.id \
                AND l.last_error IS NOT NULL ORDER BY l.updated_at DESC LIMIT 1) END \
           FROM deliveries d WHERE d.event_id = events.id), \
           updated_at = ",
    );
    script.push_bind(Timestamp::now().to_rfc3339());
    script.push(" WHERE id IN (");
    push_id_list(script, events, rows);
    script.push(");");
}

/// Counts the retries of a batch: every new event whose key was taken by an event
/// of the same type and payload (which intake answers 200) adds one to that
/// event's `received_count` and moves its `last_received_at` to the retry's
/// arrival; one multi-row UPDATE. An event of another type or payload (a 422)
/// counts nothing. `existing` (the events holding the taken keys) gets the new
/// counts.
pub(super) async fn count_receipts(
    conn: &mut SqliteConnection,
    events: &[&NewEvent],
    existing: &mut HashMap<String, EventSummary>,
) -> Result<(), StoreError> {
    if existing.is_empty() {
        return Ok(());
    }
    // Per stored event: (its key, retries, latest arrival).
    let mut receipts: HashMap<Uuid, (&str, u32, Timestamp)> = HashMap::new();
    for e in events {
        let Some(stored) = existing.get(&e.idempotency_key) else {
            continue;
        };
        if stored.id == e.id
            || stored.event_type != e.event_type
            || stored.payload_sha256 != e.payload_sha256
        {
            continue;
        }
        let entry =
            receipts
                .entry(stored.id)
                .or_insert((e.idempotency_key.as_str(), 0, e.created_at));
        entry.1 += 1;
        entry.2 = entry.2.max(e.created_at);
    }
    let receipts: Vec<_> = receipts.into_iter().collect();
    for chunk in receipts.chunks(ROWS_PER_STATEMENT) {
        let mut qb = Script::new(
            "UPDATE events SET received_count = events.received_count + v.column2, \
             last_received_at = v.column3 FROM (",
        );
        qb.push_values(chunk, |mut row, (id, (_, n, at))| {
            row.push_bind(id.to_string())
                .push_bind(i64::from(*n))
                .push_bind(at.to_rfc3339());
        });
        qb.push(") AS v WHERE events.id = v.column1");
        qb.build()?.persistent(false).execute(&mut *conn).await?;
    }
    for (_, (key, n, _)) in receipts {
        if let Some(stored) = existing.get_mut(key) {
            stored.received_count = stored.received_count.saturating_add(n);
        }
    }
    Ok(())
}

/// One multi-row INSERT that skips taken keys, then a row with how many it inserted.
///
/// Its rows are padded to `rows` (one of [`SHAPES`]) with rows of NULLs, which
/// the `WHERE` leaves out: the batch's script is then one of few texts, each
/// compiled once and kept (`WRITER_STATEMENT_CACHE`), where every batch size was
/// a text of its own, parsed and planned again.
pub(super) fn insert_events(script: &mut Script, events: &[&NewEvent], rows: usize) {
    script.push(
        "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, \
         status, created_at, updated_at, source, traceparent, tracestate) SELECT * FROM (",
    );
    script.push_values(padded(events, rows), |mut row, e| {
        let Some(e) = e else {
            row.push_nulls(11);
            return;
        };
        let created = e.created_at.to_rfc3339();
        // An event no handler routes is complete at once (docs/states.md); the answer to
        // its POST still says `pending`, the status every new event is accepted in.
        let status = if e.deliveries.is_empty() {
            Status::Completed
        } else {
            Status::Pending
        };
        row.push_bind(rows::id_text(&e.id))
            .push_bind(e.idempotency_key.clone())
            .push_bind(e.event_type.clone())
            .push_bind(e.payload.clone())
            .push_bind(e.payload_sha256.clone())
            .push_bind(status.as_str())
            .push_bind(created.clone())
            .push_bind(created)
            .push_bind(e.source.clone())
            .push_bind(e.trace.as_ref().map(TraceContext::traceparent))
            .push_bind(
                e.trace
                    .as_ref()
                    .and_then(|t| t.tracestate().map(str::to_owned)),
            );
    });
    script.push(
        ") WHERE column1 IS NOT NULL ON CONFLICT (idempotency_key) DO NOTHING; SELECT changes();",
    );
}

/// The deliveries of the events that were inserted (an event whose key was taken
/// was not, and its fresh id is in no row, so its deliveries are skipped), padded
/// as [`insert_events`] pads: a row of NULLs names no event.
pub(super) fn insert_deliveries(
    script: &mut Script,
    deliveries: &[(&NewEvent, &NewDelivery)],
    rows: usize,
) {
    script.push(
        "INSERT INTO deliveries (id, event_id, handler, ordering_value, created_at, updated_at) \
         SELECT v.* FROM (",
    );
    script.push_values(padded(deliveries, rows), |mut row, item| {
        let Some((e, d)) = item else {
            row.push_nulls(6);
            return;
        };
        let created = e.created_at.to_rfc3339();
        row.push_bind(rows::id_text(&d.id))
            .push_bind(rows::id_text(&e.id))
            .push_bind(d.handler.clone())
            .push_bind(d.ordering_value.clone())
            .push_bind(created.clone())
            .push_bind(created);
    });
    script.push(") AS v WHERE EXISTS (SELECT 1 FROM events e WHERE e.id = v.column2);");
}

pub(super) async fn find_keys(
    conn: &mut SqliteConnection,
    keys: &[&str],
) -> Result<HashMap<String, EventSummary>, StoreError> {
    let mut found = HashMap::with_capacity(keys.len());
    for chunk in keys.chunks(ROWS_PER_STATEMENT) {
        let mut qb = Script::new(format!(
            "SELECT {SUMMARY_COLUMNS} FROM events WHERE idempotency_key IN ("
        ));
        let mut list = qb.separated(", ");
        for k in chunk {
            list.push_bind(k.to_string());
        }
        qb.push(")");
        for row in qb.build()?.fetch_all(&mut *conn).await? {
            let s = rows::summary(&row)?;
            found.insert(s.idempotency_key.clone(), s);
        }
    }
    Ok(found)
}

/// Resets the selected dead letters to `pending` and re-derives their events.
pub(super) async fn replay(
    conn: &mut SqliteConnection,
    filter: ReplayFilter,
    after: Option<Uuid>,
    limit: u32,
    recent: &RecentKeys,
) -> Result<Vec<PendingDelivery>, StoreError> {
    let mut tx = conn.begin().await?;
    let mut qb =
        Script::new("UPDATE deliveries SET status = 'pending', retry_after = NULL, updated_at = ");
    qb.push_bind(Timestamp::now().to_rfc3339());
    qb.push(" WHERE id IN (");
    replay_selection(&mut qb, &filter, after);
    qb.push_bind(i64::from(limit));
    qb.push(") RETURNING id, event_id, handler, ordering_value");
    let rows = qb.build()?.fetch_all(&mut *tx).await?;
    let mut replayed = Vec::with_capacity(rows.len());
    for r in &rows {
        replayed.push(PendingDelivery {
            delivery: r.uuid("id")?,
            event: r.uuid("event_id")?,
            retry_after: None,
            handler: sqlx::Row::try_get(r, "handler")?,
            ordering_value: sqlx::Row::try_get(r, "ordering_value")?,
        });
    }
    let mut events: Vec<Uuid> = replayed.iter().map(|d| d.event).collect();
    events.sort_unstable();
    events.dedup();
    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        let mut script = Script::new("");
        settle(&mut script, chunk, chunk.len());
        script.build()?.persistent(false).execute(&mut *tx).await?;
    }
    recent::forget(recent, &events);
    tx.commit().await?;
    replayed.sort_by_key(|d| d.delivery);
    Ok(replayed)
}

/// Appends the ids of the dead letters `filter` selects after `after`, in id
/// order, up to a `LIMIT` whose value the caller binds next. Read through the
/// index of failed deliveries (one event's: through its deliveries), with the
/// event's type and age checked per row, so that a page costs its own rows: a
/// selection of event ids first made every page of a 200,000-letter replay pass
/// over every event and sort (0.27 s a page, the writer held throughout).
fn replay_selection(qb: &mut Script, filter: &ReplayFilter, after: Option<Uuid>) {
    qb.push("SELECT d.id FROM deliveries AS d WHERE d.status = 'failed'");
    if let Some(event) = filter.event {
        qb.push(" AND d.event_id = ").push_bind(event.to_string());
    }
    if let Some(after) = after {
        qb.push(" AND d.id > ").push_bind(after.to_string());
    }
    if let Some(handler) = &filter.handler {
        qb.push(" AND d.handler = ").push_bind(handler.clone());
    }
    if filter.event_type.is_some() || filter.before.is_some() {
        qb.push(" AND EXISTS (SELECT 1 FROM events AS e WHERE e.id = d.event_id");
        if let Some(t) = &filter.event_type {
            qb.push(" AND e.event_type = ").push_bind(t.clone());
        }
        if let Some(before) = filter.before {
            qb.push(" AND e.created_at < ")
                .push_bind(before.to_rfc3339());
        }
        qb.push(")");
    }
    qb.push(" ORDER BY d.id LIMIT ");
}

/// Inserts (or, with `replace`, updates) a subscriber; false when the name is taken
/// (insert) or unknown (update).
pub(super) async fn save_subscriber(
    conn: &mut SqliteConnection,
    (s, key_id): (Subscriber, Option<String>),
    replace: bool,
) -> Result<bool, StoreError> {
    let (event_types, backoff) = crate::store::subscriber_lists(&s)?;
    let sql = if replace {
        crate::store::sql::UPDATE_SUBSCRIBER
    } else {
        crate::store::sql::INSERT_SUBSCRIBER
    };
    let done = sqlx::query(sql)
        .bind(s.name)
        .bind(event_types)
        .bind(s.url)
        .bind(s.secret)
        .bind(s.ordering_key)
        .bind(s.max_attempts.map(i64::from))
        .bind(backoff)
        .bind(s.active)
        .bind(s.created_at.to_rfc3339())
        .bind(s.updated_at.to_rfc3339())
        .bind(s.max_in_flight.map(i64::from))
        .bind(s.rate_limit)
        .bind(s.disable_after)
        .bind(s.filter.as_ref().map(|f| f.to_string()))
        .bind(s.transform)
        .bind(key_id)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The receipts among `ops`: each retry's event and arrival.
fn arrivals(ops: &[Write]) -> impl Iterator<Item = (Uuid, Timestamp)> + '_ {
    ops.iter().filter_map(|op| match op {
        Write::Receipt(event, at) => Some((*event, *at)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::query_plan as plan;
    use super::{
        PURGE, Parts, ROWS_PER_STATEMENT, RecentKeys, SHAPES, Script, Write, commit,
        insert_deliveries, insert_events, replay_selection, shape,
    };
    use crate::model::Timestamp;
    use crate::model::{Finish, NewEvent, Status};
    use crate::store::ReplayFilter;
    use sqlx::Connection;
    use tokio::sync::oneshot;
    use uuid::Uuid;

    /// Delivery work comes in few statement shapes, each large enough for every
    /// count and never more rows than a statement holds.
    #[test]
    fn delivery_work_is_padded_to_few_shapes() {
        for most in 1..=ROWS_PER_STATEMENT {
            let rows = shape(&[most, most / 2, 0, 1]);
            assert!(
                rows >= most && rows <= ROWS_PER_STATEMENT,
                "{most} -> {rows}"
            );
            assert!(SHAPES.contains(&rows));
            assert!(
                (rows - most) * 3 <= rows,
                "{most} -> {rows}: over a third padding"
            );
        }
        assert_eq!(shape(&[900, 3, 0, 0]), ROWS_PER_STATEMENT);
    }

    /// Batches of intake of near sizes are one script text (compiled once and
    /// kept): their rows are padded to the same shape. A padding row is NULLs, which
    /// the events table refuses: were one not left out, its batch would fail.
    #[test]
    fn intake_batches_of_near_sizes_share_one_script() {
        let events: Vec<NewEvent> = (0..7)
            .map(|i| NewEvent::with_one_delivery(&format!("k{i}")))
            .collect();
        let script = |n: usize| {
            let batch: Vec<&NewEvent> = events.iter().take(n).collect();
            let deliveries: Vec<_> = batch.iter().map(|e| (*e, &e.deliveries[0])).collect();
            let mut script = Script::new("");
            let rows = shape(&[batch.len(), deliveries.len()]);
            insert_events(&mut script, &batch, rows);
            insert_deliveries(&mut script, &deliveries, rows);
            script.sql().to_owned()
        };
        assert_eq!(script(5), script(6));
        assert_ne!(script(6), script(7));
        assert_eq!(script(3).matches("(?").count(), 2 * 3);
    }

    /// A batch's script text depends on one row count and on which parts it has,
    /// not on each part's own count: intake and delivery work of different mixes
    /// within one shape share a text (compiled once and kept), and every statement
    /// of it has that many rows.
    #[test]
    fn mixed_batches_within_one_shape_share_one_script() {
        let events: Vec<NewEvent> = (0..6)
            .map(|i| NewEvent::with_one_delivery(&format!("k{i}")))
            .collect();
        let script = |inserted: usize, finished: usize| {
            let ops: Vec<Write> = events
                .iter()
                .take(inserted)
                .map(|e| Write::Insert(e.clone(), oneshot::channel().0))
                .chain(
                    events
                        .iter()
                        .rev()
                        .take(finished)
                        .map(|e| outcome(e.deliveries[0].id, e.id, Status::Completed, 1)),
                )
                .collect();
            Parts::of(&ops).script(&[]).sql().to_owned()
        };
        assert_eq!(script(5, 1), script(1, 6));
        assert_eq!(script(6, 2), script(2, 5));
        assert_ne!(
            script(5, 1),
            script(5, 0),
            "which parts it has still counts"
        );
        // `BEGIN`, then events, deliveries, outcomes and settles: 6 rows each.
        let sql = script(1, 6);
        let statement = |start: &str| {
            sql.split(';')
                .find(|s| s.trim_start().starts_with(start))
                .unwrap_or_default()
                .to_owned()
        };
        let rows = |start: &str| statement(start).matches("(?").count();
        assert_eq!(rows("INSERT INTO events"), 6);
        assert_eq!(rows("INSERT INTO deliveries"), 6);
        assert_eq!(rows("UPDATE deliveries SET status = v.column2"), 6);
        // The settle: its time, then an id list of 6.
        let settle = statement("UPDATE events SET (status");
        assert_eq!(settle.matches('?').count(), 1 + 6, "{settle}");
    }

    /// A fresh in-memory database, migrated as hookbox migrates.
    async fn migrated() -> sqlx::SqliteConnection {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("connect");
        super::super::migrate(&mut conn).await.expect("migrate");
        conn
    }

    /// The bundled SQLite's compile-time options (`PRAGMA compile_options`).
    async fn compile_options() -> Vec<String> {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("in-memory database");
        sqlx::query_scalar("PRAGMA compile_options")
            .fetch_all(&mut conn)
            .await
            .expect("compile options")
    }

    /// The bundled SQLite keeps no memory statistics (`.cargo/config.toml`): with
    /// them, every allocation and free took one process-wide mutex.
    #[tokio::test]
    async fn sqlite_is_built_without_memory_statistics() {
        let options = compile_options().await;
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }

    /// One batch: what `commit` makes of `ops` on `conn`.
    async fn run_batch(conn: &mut sqlx::SqliteConnection, ops: Vec<Write>) {
        let recent = RecentKeys::new(16);
        for result in commit(conn, &ops, &recent).await.expect("batch") {
            result.expect("op");
        }
    }

    /// A delivery's status and its event's after a batch.
    async fn statuses(conn: &mut sqlx::SqliteConnection, delivery: Uuid) -> (String, String) {
        sqlx::query_as(
            "SELECT d.status, e.status FROM deliveries d JOIN events e ON e.id = d.event_id \
             WHERE d.id = ?",
        )
        .bind(delivery.to_string())
        .fetch_one(conn)
        .await
        .expect("statuses")
    }

    fn outcome(delivery: Uuid, event: Uuid, status: Status, attempts: u32) -> Write {
        let finish = Finish {
            ordered: false,
            delivery_id: delivery,
            event_id: event,
            status,
            attempts,
            last_error: None,
            retry_after: (status == Status::Pending)
                .then(|| Timestamp(chrono::Utc::now() + chrono::Duration::hours(1))),
            attempt: None,
        };
        Write::Finish(finish, oneshot::channel().0)
    }

    /// A batch whose small parts are padded far past their size (20 inserts; one
    /// start, one outcome with its attempt, one settle, one retry counted) changes
    /// only what its real rows name: the padding rows (NULLs) insert, update,
    /// settle and count nothing.
    #[tokio::test]
    async fn padding_rows_change_nothing_in_a_mixed_batch() {
        let mut conn = migrated().await;
        let first = NewEvent::with_one_delivery("first");
        let started = NewEvent::with_one_delivery("started");
        let (e, d) = (first.id, first.deliveries[0].id);
        let s = started.deliveries[0].id;
        run_batch(
            &mut conn,
            vec![
                Write::Insert(first, oneshot::channel().0),
                Write::Insert(started.clone(), oneshot::channel().0),
            ],
        )
        .await;
        let mut done = outcome(d, e, Status::Completed, 1);
        if let Write::Finish(f, _) = &mut done {
            f.attempt = Some(crate::model::Attempt {
                handler: "h".into(),
                attempt: 1,
                started_at: chrono::Utc::now(),
                duration_ms: 3,
                outcome: crate::model::AttemptOutcome::Completed,
                response_status: Some(200),
                response_body: None,
                error: None,
                request: None,
            });
        }
        let mut ops: Vec<Write> = (0..20)
            .map(|i| {
                let event = NewEvent::with_one_delivery(&format!("k{i}"));
                Write::Insert(event, oneshot::channel().0)
            })
            .collect();
        ops.extend([
            done,
            Write::Start(s, started.id),
            Write::Receipt(e, Timestamp::now()),
        ]);
        run_batch(&mut conn, ops).await;
        let received: Vec<i64> =
            sqlx::query_scalar("SELECT received_count FROM events ORDER BY received_count DESC")
                .fetch_all(&mut conn)
                .await
                .expect("received counts");
        assert_eq!(received[0], 2, "the retry counted on its event");
        assert!(received[1..].iter().all(|&n| n == 1), "{received:?}");
        for (table, rows) in [("events", 22), ("deliveries", 22), ("attempts", 1)] {
            let sql = format!("SELECT count(*) FROM {table}");
            let found: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&mut conn)
                .await
                .expect(table);
            assert_eq!(found, rows, "{table}");
        }
        assert_eq!(
            statuses(&mut conn, d).await,
            ("completed".into(), "completed".into())
        );
        assert_eq!(
            statuses(&mut conn, s).await,
            ("processing".into(), "processing".into())
        );
        let untouched: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id \
             WHERE d.status = 'pending' AND e.status = 'pending' AND d.attempts = 0",
        )
        .fetch_one(&mut conn)
        .await
        .expect("untouched");
        assert_eq!(untouched, 20);
    }

    /// A batch that holds a delivery's start and outcome ends as the writes would
    /// one by one: the start its outcome follows is skipped (the outcome sets
    /// everything), a start after an outcome (a retry begun) is applied after it.
    #[tokio::test]
    async fn a_batch_applies_starts_and_outcomes_in_their_order() {
        let mut conn = migrated().await;
        let event = NewEvent::with_one_delivery("k");
        let (e, d) = (event.id, event.deliveries[0].id);
        run_batch(&mut conn, vec![Write::Insert(event, oneshot::channel().0)]).await;
        assert_eq!(
            statuses(&mut conn, d).await,
            ("pending".into(), "pending".into())
        );

        let retry_begun = vec![
            Write::Start(d, e),
            outcome(d, e, Status::Pending, 1),
            Write::Start(d, e),
        ];
        run_batch(&mut conn, retry_begun).await;
        let expected = ("processing".to_string(), "processing".to_string());
        assert_eq!(statuses(&mut conn, d).await, expected);

        let done = vec![
            outcome(d, e, Status::Pending, 2),
            Write::Start(d, e),
            outcome(d, e, Status::Completed, 3),
        ];
        run_batch(&mut conn, done).await;
        assert_eq!(
            statuses(&mut conn, d).await,
            ("completed".into(), "completed".into())
        );
        let attempts: i64 = sqlx::query_scalar("SELECT attempts FROM deliveries WHERE id = ?")
            .bind(d.to_string())
            .fetch_one(&mut conn)
            .await
            .expect("attempts");
        assert_eq!(attempts, 3);
    }

    /// A batch statement's journal stays in memory up to 4 MiB
    /// (`.cargo/config.toml`): at SQLite's default of 64 KiB nearly every intake
    /// batch created, wrote and deleted a temporary file.
    #[tokio::test]
    async fn statement_journals_spill_to_a_file_only_past_4_mib() {
        let options = compile_options().await;
        assert!(
            options.iter().any(|o| o == "STMTJRNL_SPILL=4194304"),
            "{options:?}"
        );
    }

    /// Retention walks an index of terminal events oldest first and stops after
    /// the batch: no sort of every expired row, no scan of the table.
    #[tokio::test]
    async fn retention_deletes_through_the_terminal_events_index() {
        let plan = plan(PURGE, &["2020-01-01T00:00:00.000Z", "1000"]).await;
        assert!(
            plan.iter()
                .any(|l| l.contains("USING INDEX events_terminal_created")),
            "{plan:#?}"
        );
        assert!(!plan.iter().any(|l| l.contains("TEMP B-TREE")), "{plan:#?}");
        assert!(!plan.iter().any(|l| l.starts_with("SCAN")), "{plan:#?}");
    }

    /// A page of a replay reads the failed deliveries' index in id order from
    /// where the last page ended, whatever the filter: no pass over the events,
    /// no sort (the first version selected event ids, then sorted).
    #[tokio::test]
    async fn a_replay_page_reads_its_own_rows() {
        let id = uuid::Uuid::now_v7();
        let filters = [
            ReplayFilter::default(),
            ReplayFilter {
                event_type: Some("t".into()),
                handler: Some("h".into()),
                before: Some(Timestamp::now()),
                ..ReplayFilter::default()
            },
            ReplayFilter {
                event: Some(id),
                ..ReplayFilter::default()
            },
        ];
        for filter in filters {
            for after in [None, Some(id)] {
                let mut qb = Script::new("");
                replay_selection(&mut qb, &filter, after);
                qb.push("?");
                let binds = vec!["1000"; qb.sql().matches('?').count()];
                let plan = plan(qb.sql(), &binds).await;
                let index = if filter.event.is_some() {
                    "(event_id=?)"
                } else {
                    "INDEX deliveries_failed"
                };
                assert!(
                    plan.iter().any(|l| l.contains(index)),
                    "{filter:?} {plan:#?}"
                );
                // Scanning the failed deliveries' own index is the point; a scan of
                // anything else is a pass over a table.
                let scans = plan.iter().filter(|l| l.contains("SCAN"));
                assert!(
                    scans.clone().all(|l| l.contains("INDEX deliveries_failed")),
                    "{filter:?} {plan:#?}"
                );
                assert!(scans.count() <= 1, "{filter:?} {plan:#?}");
                if filter.event.is_none() {
                    assert!(!plan.iter().any(|l| l.contains("TEMP B-TREE")), "{plan:#?}");
                }
            }
        }
    }
}
