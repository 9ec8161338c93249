//! Group commit for intake: concurrent `insert_event` calls are gathered into
//! batches, and each batch is one statement (one round trip, one commit, one WAL
//! flush) over `UNNEST` arrays, as the SQLite writer commits whatever is waiting.
//! Measured before: one statement and one commit per event held intake at 7,400
//! requests a second, the connections waiting on `WALWrite`/`WALSync`.
//!
//! `ON CONFLICT (idempotency_key) DO UPDATE … WHERE` settles duplicate keys inside
//! the statement, across instances, exactly as one event at a time did: a key taken
//! by the same type and payload counts a receipt on the stored event (200), one
//! taken by another type or payload is left alone (422), a new key inserts the event
//! and its deliveries (202). A statement may not touch one row twice, so a second
//! request for a key already in the batch waits for the next batch (where it meets
//! the committed row). The rows are inserted in key order, so two batches in flight
//! at once (here or on another instance) wait for each other's keys in one order
//! and cannot deadlock.
//!
//! [`IN_FLIGHT`] batches run at once, each on a pooled connection, and the next
//! gathers meanwhile: everything that arrived while a batch committed goes in the
//! next one. If a batch fails, its events are
//! inserted one statement each, so that one event the database refuses fails alone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use sqlx::postgres::PgPool;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::warn;

use super::rows::{self, SUMMARY_COLUMNS};
use super::young::Young;
use crate::model::{NewEvent, Status};
use crate::store::{EventSummary, Inserted, StoreError};
use crate::trace_context::TraceContext;

/// Most events in one batch.
pub(super) const MAX_BATCH: usize = 1000;

/// How long a batch waits for a pooled connection: short, so that intake answers
/// 503 within a second while the database is away — a request may wait for a
/// batch slot (one such wait) and then for its own batch's (another).
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(400);

/// Batches committing at once (each holds a pooled connection meanwhile). One:
/// fewer, larger batches cost the database less per event. Measured with
/// `scripts/bench-pg.sh ingest` (release, 64 connections, 10 s, runs interleaved):
/// one in flight 24,653 / 24,001 requests/s, two 20,805 / 18,972, three 17,791 /
/// 17,911 (p99 7.5 ms, 8.5 ms, 9.9 ms).
pub(super) const IN_FLIGHT: usize = 1;

/// An event and where to answer once it is committed.
pub(super) type Request = (NewEvent, oneshot::Sender<Result<Inserted, StoreError>>);

/// Inserts a batch of events and the deliveries of those that are new. The events
/// come as parallel arrays ($1–$8, $16–$18: trace context and each event's number
/// of deliveries, one element per event), the deliveries as
/// parallel arrays too ($9–$12, with their event's id, and $14: the lease in
/// milliseconds of a delivery stored claimed by this instance, `locked_by` $15, or
/// NULL for one stored `pending`); keys are unique within a
/// batch. $13 is the version of the subscribers they were all routed with: when the
/// subscribers changed since, `hookbox_routed_with` (migration 0009) fails the
/// statement with SQLSTATE [`STALE_ROUTING`]. Answers one row per event inserted (its own id) or counted as a retry
/// (the stored event's id); an event whose key is held by another type or payload
/// has no row.
const INSERT_BATCH: &str = "\
WITH e AS (
    INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, status,
                        created_at, updated_at, source, traceparent, tracestate,
                        delivery_count)
    SELECT i.id, i.idempotency_key, i.event_type, i.payload, i.payload_sha256, i.status,
           i.created_at, i.created_at, i.source, i.traceparent, i.tracestate,
           i.delivery_count
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::timestamptz[], $8::text[], $16::text[], $17::text[], $18::int4[])
        AS i (id, idempotency_key, event_type, payload, payload_sha256, status, created_at,
              source, traceparent, tracestate, delivery_count)
    WHERE (SELECT hookbox_routed_with($13))
    ORDER BY i.idempotency_key COLLATE \"C\"
    ON CONFLICT (idempotency_key) DO UPDATE
        SET received_count = events.received_count + 1,
            last_received_at = excluded.created_at
        WHERE events.event_type = excluded.event_type
          AND events.payload_sha256 = excluded.payload_sha256
    RETURNING id, idempotency_key, event_type, status, created_at, payload_sha256,
              received_count
), d AS (
    INSERT INTO deliveries (id, event_id, handler, ordering_value, created_at, updated_at,
                            status, locked_until, locked_by)
    SELECT u.id, e.id, u.handler, u.ordering_value, e.created_at, e.created_at,
           CASE WHEN u.lease_ms IS NULL THEN 'pending' ELSE 'processing' END,
           now() + u.lease_ms * interval '1 millisecond',
           CASE WHEN u.lease_ms IS NOT NULL THEN $15 END
    FROM unnest($9::uuid[], $10::uuid[], $11::text[], $12::text[], $14::int8[])
        WITH ORDINALITY AS u (id, event_id, handler, ordering_value, lease_ms, n)
    JOIN e ON e.id = u.event_id
    ORDER BY u.n
    RETURNING 1
)
SELECT e.*, (SELECT count(*) FROM d) AS deliveries FROM e";

/// The SQLSTATE `hookbox_routed_with` raises when the subscribers changed since
/// the batch was routed.
const STALE_ROUTING: &str = "HB001";

/// Takes requests until every sender is gone, committing them in batches.
pub(super) async fn run(
    pool: PgPool,
    owner: Arc<str>,
    young: Arc<Young>,
    mut rx: mpsc::Receiver<Request>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Requests whose key was already in the batch being formed: first in the next.
    let mut carried: VecDeque<Request> = VecDeque::new();
    let mut received = Vec::with_capacity(MAX_BATCH);
    loop {
        // Wait for a free slot first, so that requests arriving meanwhile join
        // this batch instead of each starting one.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if carried.is_empty() {
            if rx.recv_many(&mut received, MAX_BATCH).await == 0 {
                return;
            }
        } else {
            let room = MAX_BATCH.saturating_sub(carried.len());
            if room > 0 {
                // Whatever else is waiting, without waiting for more.
                while received.len() < room {
                    match rx.try_recv() {
                        Ok(r) => received.push(r),
                        Err(_) => break,
                    }
                }
            }
        }
        let mut keys = HashSet::new();
        let mut batch: Vec<Request> = Vec::with_capacity(carried.len() + received.len());
        let mut later = VecDeque::new();
        for request in carried.drain(..).chain(received.drain(..)) {
            // One routing version per batch (it is checked as one).
            let version = batch.first().map(|(e, _)| e.routing_version);
            if batch.len() < MAX_BATCH
                && version.is_none_or(|v| v == request.0.routing_version)
                && keys.insert(request.0.idempotency_key.clone())
            {
                batch.push(request);
            } else {
                later.push_back(request);
            }
        }
        carried = later;
        let (pool, owner, young) = (pool.clone(), owner.clone(), young.clone());
        tokio::spawn(async move {
            let n = batch.len() as u64;
            commit(&pool, &owner, batch).await;
            young.inserted(&pool, n);
            drop(slot);
        });
    }
}

/// Commits one batch and answers each caller.
async fn commit(pool: &PgPool, owner: &str, mut batch: Vec<Request>) {
    let events: Vec<&NewEvent> = batch.iter().map(|(e, _)| e).collect();
    match insert(pool, owner, &events).await {
        Ok(answers) => {
            for ((_, reply), answer) in batch.drain(..).zip(answers) {
                let _ = reply.send(answer);
            }
        }
        Err(StoreError::StaleRouting) => {
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Err(StoreError::StaleRouting));
            }
        }
        // The database could not be reached (or one event alone): each caller
        // gets the error, at once.
        Err(e) if batch.len() == 1 || !refused(&e) => {
            warn!(error = %e, size = batch.len(), "could not store events");
            let shared = Arc::new(e);
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Err(StoreError::Batch(shared.clone())));
            }
        }
        Err(e) => {
            warn!(error = %e, size = batch.len(), "intake batch failed; storing one by one");
            let shared = Arc::new(e);
            for (event, reply) in batch.drain(..) {
                let answer = match insert(pool, owner, &[&event]).await {
                    Ok(mut one) => one
                        .pop()
                        .unwrap_or_else(|| Err(StoreError::Batch(shared.clone()))),
                    Err(e) => Err(e),
                };
                let _ = reply.send(answer);
            }
        }
    }
}

/// True when the database answered with an error about the statement (one event
/// it refuses may be the cause), not when it could not be reached.
fn refused(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(_)))
}

/// Inserts `events` (keys unique among them) in one statement; answers one result
/// per event, in order.
async fn insert(
    pool: &PgPool,
    owner: &str,
    events: &[&NewEvent],
) -> Result<Vec<Result<Inserted, StoreError>>, StoreError> {
    let n = events.len();
    let (
        mut ids,
        mut keys,
        mut types,
        mut payloads,
        mut hashes,
        mut statuses,
        mut times,
        mut sources,
    ) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut d_ids, mut d_events, mut d_handlers, mut d_values, mut d_leases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // $16, $17: each event's trace context (SPEC §13).
    let (mut parents, mut states): (Vec<Option<String>>, Vec<Option<&str>>) =
        (Vec::with_capacity(n), Vec::with_capacity(n));
    // $18: how many deliveries each event has (migration 0026: an event with one is
    // settled from its outcome).
    let mut counts: Vec<i32> = Vec::with_capacity(n);
    for e in events {
        ids.push(e.id);
        keys.push(e.idempotency_key.as_str());
        types.push(e.event_type.as_str());
        payloads.push(e.payload.as_str());
        hashes.push(e.payload_sha256.as_str());
        // An event no handler routes is complete at once (no settle job needed).
        statuses.push(if e.deliveries.is_empty() {
            Status::Completed.as_str()
        } else {
            Status::Pending.as_str()
        });
        times.push(e.created_at.0);
        sources.push(e.source.as_deref());
        parents.push(e.trace.as_ref().map(TraceContext::traceparent));
        states.push(e.trace.as_ref().and_then(TraceContext::tracestate));
        counts.push(i32::try_from(e.deliveries.len()).unwrap_or(i32::MAX));
        for d in &e.deliveries {
            d_ids.push(d.id);
            d_events.push(e.id);
            d_handlers.push(d.handler.as_str());
            d_values.push(d.ordering_value.as_deref());
            d_leases.push(
                e.claim_lease
                    .filter(|_| e.claims(d))
                    .map(|l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX)),
            );
        }
    }
    // A database that is away fails intake at once (503) rather than after the
    // pool's wait for a connection; nothing was sent, so nothing was stored.
    let mut conn = tokio::time::timeout(ACQUIRE_TIMEOUT, pool.acquire())
        .await
        .map_err(|_| StoreError::Database(sqlx::Error::PoolTimedOut))??;
    let rows = sqlx::query(INSERT_BATCH)
        .bind(ids)
        .bind(&keys)
        .bind(types)
        .bind(payloads)
        .bind(hashes)
        .bind(statuses)
        .bind(times)
        .bind(sources)
        .bind(d_ids)
        .bind(d_events)
        .bind(d_handlers)
        .bind(d_values)
        .bind(i64::try_from(events.first().map_or(0, |e| e.routing_version)).unwrap_or(i64::MAX))
        .bind(d_leases)
        .bind(owner)
        .bind(parents)
        .bind(states)
        .bind(counts)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some(STALE_ROUTING) => {
                StoreError::StaleRouting
            }
            _ => StoreError::from(e),
        })?;
    let mut stored: HashMap<String, EventSummary> = HashMap::with_capacity(rows.len());
    for row in &rows {
        let summary = rows::summary(row)?;
        stored.insert(summary.idempotency_key.clone(), summary);
    }
    // Keys held by another type or payload (the insert waited for the holder's
    // commit, so a new statement sees it): one query for all of them.
    let taken: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !stored.contains_key(*k))
        .collect();
    let mut holders: HashMap<String, EventSummary> = HashMap::new();
    if !taken.is_empty() {
        let sql = format!("SELECT {SUMMARY_COLUMNS} FROM events WHERE idempotency_key = ANY ($1)");
        for row in sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&taken)
            .fetch_all(&mut *conn)
            .await?
        {
            let summary = rows::summary(&row)?;
            holders.insert(summary.idempotency_key.clone(), summary);
        }
    }
    Ok(events
        .iter()
        .map(|e| answer(e, &mut stored, &mut holders))
        .collect())
}

/// The answer for `event`: new, a counted retry, or the holder of its key.
fn answer(
    event: &NewEvent,
    stored: &mut HashMap<String, EventSummary>,
    holders: &mut HashMap<String, EventSummary>,
) -> Result<Inserted, StoreError> {
    match stored.remove(&event.idempotency_key) {
        Some(stored) if stored.id == event.id => Ok(Inserted {
            event: EventSummary::fresh(event),
            created: true,
        }),
        // A retry, counted on the event that holds the key.
        Some(stored) => Ok(Inserted {
            event: stored,
            created: false,
        }),
        None => match holders.remove(&event.idempotency_key) {
            Some(existing) => Ok(Inserted {
                event: existing,
                created: false,
            }),
            None => Err(StoreError::Corrupt(format!(
                "the key {:?} conflicted, but its event was not found",
                event.idempotency_key
            ))),
        },
    }
}
