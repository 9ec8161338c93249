//! Fresh planner statistics while the tables are young.
//!
//! PostgreSQL plans with the statistics its last `ANALYZE` left, and keeps a
//! prepared statement's generic plan until they change. A database that starts
//! empty and takes thousands of events a second is analysed by autovacuum only
//! after a minute or more (its naptime and thresholds), and until then every plan
//! believes the tables hold a few rows: a benchmark caught the claim's update
//! scanning all 56,000 deliveries to find 32 by id, and the outcome finish walking
//! 8,800 index entries of finished leases — each round trip costing milliseconds
//! and growing with the table.
//!
//! So each instance runs `ANALYZE` on the tables it fills each time the events it
//! has inserted since it started double (from [`FIRST`]): a dozen times up to a
//! million events, each reading a bounded sample, and never two at once. Once the
//! tables are large, autovacuum's own thresholds keep the statistics current.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::postgres::PgPool;
use tracing::{debug, warn};

/// Events inserted before the first `ANALYZE`.
const FIRST: u64 = 1_000;

/// The tables intake and processing fill.
const ANALYZE: &str = "ANALYZE events, deliveries, attempts";

/// Counts this instance's inserted events and analyses at each doubling.
#[derive(Debug)]
pub(super) struct Young {
    inserted: AtomicU64,
    next: AtomicU64,
    running: AtomicBool,
}

impl Default for Young {
    fn default() -> Self {
        Self {
            inserted: AtomicU64::new(0),
            next: AtomicU64::new(FIRST),
            running: AtomicBool::new(false),
        }
    }
}

impl Young {
    /// `n` more events were inserted; starts an `ANALYZE` in the background when
    /// their total reached the next doubling (unless one is running).
    pub(super) fn inserted(self: &Arc<Self>, pool: &PgPool, n: u64) {
        let total = self.inserted.fetch_add(n, Ordering::Relaxed) + n;
        if total < self.next.load(Ordering::Relaxed) || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.next.store(total.saturating_mul(2), Ordering::Relaxed);
        let (this, pool) = (self.clone(), pool.clone());
        tokio::spawn(async move {
            match sqlx::query(ANALYZE).execute(&pool).await {
                Ok(_) => debug!(events = total, "analysed the young tables"),
                Err(e) => warn!(error = %e, "could not analyse the tables; autovacuum will"),
            }
            this.running.store(false, Ordering::Release);
        });
    }
}
