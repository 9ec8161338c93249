//! The recent keys: the SQLite store's [`IdempotencyCache`] of the events whose key
//! its writer found taken (a retry that reached it), which
//! [`Store::recent_key`](crate::store::Store::recent_key) answers from, and the
//! writer's side of keeping it true.
//!
//! Only the writer task changes it, in commit order, so it never holds a status
//! older than the last commit: every batch first forgets the events whose status
//! it may change (settles, starts and attempt outcomes), before its `COMMIT`;
//! after the `COMMIT` it remembers the events it found holding a key (as read
//! inside the transaction): a key is remembered from its first retry on. Replay
//! forgets the events it resets before its commit, retention forgets every key
//! before it deletes. A key the cache does not hold is asked of the table, which
//! stays the authority (races between two new requests with one key, evicted
//! keys).
//!
//! A retry answered from the cache still counts: the writer's receipt carries it to
//! the next batch, where one multi-row UPDATE adds the batch's receipts to
//! `received_count` and moves `last_received_at`. The 200 does not wait for that
//! commit (waiting would cost the round trip the cache saves); instead a read of
//! events waits for the writer while receipts are queued, so whoever got a 200
//! reads a count that includes it. A crash between the answer and the next commit
//! loses that one count (the event itself was committed long before).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::script::{Script, padded};
use uuid::Uuid;

use crate::idempotency_cache::IdempotencyCache;
use crate::model::Timestamp;
use crate::store::{EventSummary, Inserted};

/// The recent keys of one SQLite store, and the retries counted from them that
/// the writer has not committed yet.
pub(crate) struct RecentKeys {
    /// Key → the event holding it, as the table holds it now.
    pub(super) keys: IdempotencyCache<EventSummary>,
    /// Receipts queued for the writer and not yet committed: while there are any,
    /// a read of events waits for the writer first ([`RecentKeys::unsettled`]), so
    /// that a client who got its 200 reads the count that includes it.
    queued: AtomicU64,
}

impl RecentKeys {
    /// An empty cache of at most `capacity` keys.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            keys: IdempotencyCache::new(capacity),
            queued: AtomicU64::new(0),
        }
    }

    /// A receipt is being queued.
    pub(super) fn queued(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// `n` receipts were committed (or failed, or never reached the writer).
    pub(super) fn settled(&self, n: u64) {
        if n > 0 {
            let _ = self
                .queued
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                    Some(q.saturating_sub(n))
                });
        }
    }

    /// True while some receipt is queued and not committed.
    pub(super) fn unsettled(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// Forgets every key (retention).
    pub(super) fn clear(&self) {
        self.keys.clear();
    }
}

/// How many recent keys the SQLite store keeps: a fixed bound (docs/architecture.md,
/// "Idempotency keys"). A key takes roughly its own length plus 250 bytes, so
/// about 20 MB for 64-byte keys at the bound.
pub const RECENT_KEYS: usize = 65_536;

/// Forgets the events whose status this write may change.
pub(super) fn forget(recent: &RecentKeys, events: &[Uuid]) {
    for id in events {
        recent.keys.invalidate(*id);
    }
}

/// After a commit: remembers the events that inserts found holding their key
/// (`found`, as read inside the transaction), except those whose status the same
/// batch changed (`changed`, sorted).
///
/// An event is remembered when a retry of its key first reaches the writer, not
/// when it is created: most keys are never sent again, and remembering each new
/// one — then forgetting it when its status changes — cost the writer more than
/// the first retry's trip to it saves (docs/benchmarks.md, "Keys remembered when
/// they are retried").
pub(super) fn remember<'a>(
    recent: &RecentKeys,
    found: impl Iterator<Item = &'a Inserted>,
    changed: &[Uuid],
) {
    for inserted in found {
        let event = &inserted.event;
        if changed.binary_search(&event.id).is_err() {
            recent
                .keys
                .insert(&event.idempotency_key, event.id, event.clone());
        }
    }
}

/// A batch's receipts (`(event, arrival)`), per event: how many, and the latest
/// arrival.
pub(super) fn receipts(
    arrivals: impl Iterator<Item = (Uuid, Timestamp)>,
) -> Vec<(Uuid, u32, Timestamp)> {
    let mut per_event: HashMap<Uuid, (u32, Timestamp)> = HashMap::new();
    for (event, at) in arrivals {
        let entry = per_event.entry(event).or_insert((0, at));
        entry.0 = entry.0.saturating_add(1);
        entry.1 = entry.1.max(at);
    }
    let mut all: Vec<_> = per_event
        .into_iter()
        .map(|(id, (n, at))| (id, n, at))
        .collect();
    all.sort_unstable_by_key(|r| r.0);
    all
}

/// One multi-row UPDATE of the batch's script: adds the receipts to
/// `received_count` and moves `last_received_at` forward. Padded to `rows` with
/// rows of NULLs (whose id names no event), as the batch's other statements are.
pub(super) fn count(script: &mut Script, receipts: &[(Uuid, u32, Timestamp)], rows: usize) {
    script.push(
        "UPDATE events SET received_count = events.received_count + v.column2, \
         last_received_at = CASE WHEN events.last_received_at IS NULL \
           OR events.last_received_at < v.column3 THEN v.column3 \
           ELSE events.last_received_at END FROM (",
    );
    script.push_values(padded(receipts, rows), |mut row, receipt| {
        let Some((id, n, at)) = receipt else {
            row.push_nulls(3);
            return;
        };
        row.push_bind(id.to_string())
            .push_bind(i64::from(n))
            .push_bind(at.to_rfc3339());
    });
    script.push(") AS v WHERE events.id = v.column1;");
}
