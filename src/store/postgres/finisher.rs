//! Group commit for attempt outcomes: one task takes every outcome waiting (up to
//! [`MAX_BATCH`], [`IN_FLIGHT`] batches at once) and records them, with their
//! attempt rows, in one
//! `hookbox_finish_attempts` call (migrations 0006, 0011, 0013, 0025 and 0026), so one commit (one WAL flush)
//! covers the batch. Measured: with one commit per outcome the
//! workers spent their time waiting on `WALWrite`.
//!
//! A small batch lingers ([`LINGER`]) for more outcomes first, since no caller
//! waits on its commit — unless one of its outcomes is ordered
//! ([`Finish::ordered`]): the next delivery of that key waits for it, so such an
//! outcome commits at once, and one sent while a batch lingers ends the wait
//! ([`run`]'s `hurry`).
//!
//! If a batch fails, its outcomes are recorded one call each, so that one outcome
//! the database refuses fails alone instead of taking its batch with it, batch
//! after batch (as the SQLite writer does).

use std::sync::Arc;

use sqlx::postgres::PgPool;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tracing::{debug, warn};

use crate::model::{Attempt, Finish, Timestamp};
use crate::store::StoreError;

/// Most outcomes recorded in one call.
const MAX_BATCH: usize = 512;

/// Records outcomes with their attempt rows; $7 holds each retry's delay in
/// milliseconds (or NULL), made a due time on the database's clock.
const RECORD: &str = "SELECT hookbox_finish_attempts($1, $2, $3, $4, $5, $6, \
     ARRAY(SELECT now() + r.ms * interval '1 millisecond' \
           FROM unnest($7::int8[]) WITH ORDINALITY AS r (ms, n) ORDER BY r.n), \
     $8, $9, $10, $11, $12, $13, $14, $15, $16)";

/// An outcome and where to answer once it is committed.
pub(super) type Request = (Finish, oneshot::Sender<Result<(), StoreError>>);

/// Batches committing at once (each holds a pooled connection meanwhile): one
/// gathers while another commits.
const IN_FLIGHT: usize = 2;

/// A batch smaller than this waits [`LINGER`] for more outcomes before it commits.
const LINGER_BELOW: usize = 64;

/// How long a small batch waits for more outcomes ([`run`]'s `linger`). Each
/// call costs the database its statements and a WAL flush whatever its size, and
/// those compete with intake's. End to end (`scripts/bench-pg.sh e2e`, 100,000
/// events, interleaved, 2026-12-04) 2 ms gave 14,651 / 15,922 / 15,857 events/s,
/// 5 ms 15,085 / 16,565 / 15,208, 10 ms 15,161 / 16,857 / 16,679 and 20 ms
/// 15,856 / 17,073 / 16,591; with `CPU=1`, 10 ms took the server from 53.1 / 55.1
/// to 51.1 / 51.4 µs of CPU per event. An event shows its new status up to this
/// much later; an ordered outcome does not wait (the next of its key waits for it).
pub(super) const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// Sends `finish` to the finisher behind `tx` and waits for its commit; an ordered
/// one tells `hurry` (the finisher's), which ends a linger.
pub(super) async fn submit(
    tx: &mpsc::Sender<Request>,
    hurry: &Notify,
    finish: Finish,
) -> Result<(), StoreError> {
    let (reply, answer) = oneshot::channel();
    let ordered = finish.ordered;
    tx.send((finish, reply))
        .await
        .map_err(|_| StoreError::WriterGone)?;
    if ordered {
        hurry.notify_one();
    }
    answer.await.map_err(|_| StoreError::WriterGone)?
}

/// Runs until every sender is gone. A batch smaller than [`LINGER_BELOW`] waits
/// `linger` for more ([`LINGER`]), unless it holds an ordered outcome or `hurry`
/// is notified meanwhile ([`submit`]).
pub(super) async fn run(
    pool: PgPool,
    owner: Arc<str>,
    mut rx: mpsc::Receiver<Request>,
    hurry: Arc<Notify>,
    linger: std::time::Duration,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        // A free slot first, so that outcomes arriving meanwhile join this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        if batch.len() < LINGER_BELOW && !batch.iter().any(|(f, _)| f.ordered) {
            // No client waits on this commit (the worker moved on; the lease
            // holds the delivery): a moment more makes a fuller batch. An ordered
            // outcome sent meanwhile ends the wait, as the next of its key waits.
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                () = hurry.notified() => {}
            }
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
        }
        let (pool, owner) = (pool.clone(), owner.clone());
        tokio::spawn(async move {
            commit(&pool, &owner, batch).await;
            drop(slot);
        });
    }
}

/// Commits one batch and answers each caller. Batches in flight at once lock the
/// events they share in one order (by id, `hookbox_finish_attempts`) and finish
/// distinct deliveries, so they cannot deadlock; an event with one delivery is
/// updated from its outcome without that lock (0026), only by the call whose
/// lease its delivery carries.
async fn commit(pool: &PgPool, owner: &str, mut batch: Vec<Request>) {
    let finishes: Vec<&Finish> = batch.iter().map(|(f, _)| f).collect();
    match record(pool, owner, &finishes, Timestamp::now()).await {
        Ok(recorded) => {
            lost(finishes.len(), recorded);
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Ok(()));
            }
        }
        Err(e) if batch.len() == 1 => {
            warn!(error = %e, "could not record an outcome");
            if let Some((_, reply)) = batch.pop() {
                let _ = reply.send(Err(e));
            }
        }
        Err(e) => {
            warn!(error = %e, size = batch.len(), "outcome batch failed; recording one by one");
            for (finish, reply) in batch.drain(..) {
                let one = record(pool, owner, &[&finish], Timestamp::now()).await;
                let _ = reply.send(one.map(|recorded| lost(1, recorded)));
            }
        }
    }
}

/// Logs outcomes not recorded because their lease was lost.
fn lost(sent: usize, recorded: usize) {
    if recorded < sent {
        debug!(
            lost = sent - recorded,
            "leases lost before outcomes were recorded; other instances run them again"
        );
    }
}

/// Records `finishes`. A retry's due time is the database's clock plus the delay
/// the worker chose (its `retry_after` less `now`, this instance's clock), so that
/// instances whose clocks disagree still agree on when a retry is due.
pub(super) async fn record(
    pool: &PgPool,
    owner: &str,
    finishes: &[&Finish],
    now: Timestamp,
) -> Result<usize, StoreError> {
    let mut events: Vec<uuid::Uuid> = finishes.iter().map(|f| f.event_id).collect();
    events.sort_unstable();
    events.dedup();
    let column = |f: &dyn Fn(&Finish) -> Option<String>| -> Vec<Option<String>> {
        finishes.iter().map(|x| f(x)).collect()
    };
    let attempts: Vec<Option<&Attempt>> = finishes.iter().map(|f| f.attempt.as_ref()).collect();
    let recorded: i32 = sqlx::query_scalar(RECORD)
        .bind(owner)
        .bind(finishes.iter().map(|f| f.delivery_id).collect::<Vec<_>>())
        .bind(events)
        .bind(
            finishes
                .iter()
                .map(|f| f.status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(finishes.iter().map(|f| int(f.attempts)).collect::<Vec<_>>())
        .bind(column(&|f| f.last_error.clone()))
        .bind(
            finishes
                .iter()
                .map(|f| {
                    f.retry_after
                        .map(|t| (t.0 - now.0).num_milliseconds().max(0))
                })
                .collect::<Vec<_>>(),
        )
        .bind(column(&|f| f.attempt.as_ref().map(|a| a.handler.clone())))
        .bind(
            attempts
                .iter()
                .map(|a| a.map(|a| int(a.attempt)))
                .collect::<Vec<_>>(),
        )
        .bind(
            attempts
                .iter()
                .map(|a| a.map(|a| a.started_at))
                .collect::<Vec<_>>(),
        )
        .bind(
            attempts
                .iter()
                .map(|a| a.map(|a| i64::try_from(a.duration_ms).unwrap_or(i64::MAX)))
                .collect::<Vec<_>>(),
        )
        .bind(
            attempts
                .iter()
                .map(|a| a.map(|a| a.outcome.as_str()))
                .collect::<Vec<_>>(),
        )
        .bind(
            attempts
                .iter()
                .map(|a| a.and_then(|a| a.response_status).map(i32::from))
                .collect::<Vec<_>>(),
        )
        .bind(column(&|f| {
            f.attempt.as_ref().and_then(|a| a.response_body.clone())
        }))
        .bind(column(&|f| {
            f.attempt.as_ref().and_then(|a| a.error.clone())
        }))
        .bind(column(&|f| {
            f.attempt.as_ref().and_then(|a| a.request.clone())
        }))
        .fetch_one(pool)
        .await?;
    Ok(usize::try_from(recorded).unwrap_or(0))
}

/// A count as PostgreSQL's `integer`.
fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
