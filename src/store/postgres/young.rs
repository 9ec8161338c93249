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
//! So every [`CHECK_EVERY`] events it inserted, an instance looks at the
//! deliveries table's statistics, and runs `ANALYZE` on the tables intake and
//! processing fill, on a small sample ([`SAMPLE`]), when [`WRITES_PER_ROW`] times
//! more rows changed since the last one than the table held then (it about
//! doubled, or was never analysed) — while
//! the table is young (under
//! [`YOUNG`] rows): past that, autovacuum's own thresholds keep up. The decision
//! and the `ANALYZE` run under a transaction-scoped advisory lock that is only
//! tried, so instances sharing the database analyse once, not once each, and an
//! instance restarted beside a large table analyses nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::Row;
use sqlx::postgres::PgPool;
use tracing::{debug, warn};

/// Events an instance inserts between two looks at the statistics.
const CHECK_EVERY: u64 = 1_000;

/// How often a delivery is written: inserted, claimed, finished. The statistics'
/// change count counts each write, so a table that doubled in rows shows about
/// this many changes per row it held. (Counting one per row analysed a table that
/// grew by a third: seven `ANALYZE`s of 300 ms each in a run of 100,000 events.)
const WRITES_PER_ROW: f64 = 3.0;

/// Rows of `deliveries` from which autovacuum alone keeps the statistics.
const YOUNG: f64 = 1_000_000.0;

/// Takes the lock of the decision, or answers false at once.
const LOCK: &str = "SELECT pg_try_advisory_xact_lock(hashtext('hookbox analyze'))";

/// The table's rows at its last `ANALYZE` (-1 or 0 before the first) and the rows
/// changed since.
const STATISTICS: &str = "SELECT c.reltuples::float8 AS tuples, \
         s.n_mod_since_analyze::float8 AS changed \
     FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid \
     WHERE c.oid = 'deliveries'::regclass";

/// The tables intake and processing fill.
const ANALYZE: &str = "ANALYZE events, deliveries, attempts";

/// The statistics target of a young table's `ANALYZE` (PostgreSQL's default is
/// 100): a sample of 3,000 rows instead of 30,000. What the plans need of a young
/// table is its size and the rough shape of its columns; autovacuum's own
/// `ANALYZE`, at the server's target, follows once the table has grown. Measured
/// after 100,000 events end to end: 26 ms instead of 270–300 ms, where the four
/// `ANALYZE`s of a run had been 8 % of the database's time.
const SAMPLE: &str = "SET LOCAL default_statistics_target = 10";

/// Counts this instance's inserted events and looks at the statistics every
/// [`CHECK_EVERY`].
#[derive(Debug, Default)]
pub(super) struct Young {
    inserted: AtomicU64,
    running: AtomicBool,
}

impl Young {
    /// `n` more events were inserted; looks at the statistics in the background
    /// when another [`CHECK_EVERY`] were (unless a look is under way).
    pub(super) fn inserted(self: &Arc<Self>, pool: &PgPool, n: u64) {
        let before = self.inserted.fetch_add(n, Ordering::Relaxed);
        if before / CHECK_EVERY == (before + n) / CHECK_EVERY
            || self.running.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let (this, pool) = (self.clone(), pool.clone());
        tokio::spawn(async move {
            match refresh(&pool).await {
                Ok(true) => debug!("analysed the young tables"),
                Ok(false) => {}
                Err(e) => warn!(error = %e, "could not analyse the tables; autovacuum will"),
            }
            this.running.store(false, Ordering::Release);
        });
    }
}

/// Runs `ANALYZE` if the deliveries table is young and about doubled since its
/// last one, and no other instance is deciding; true when it ran.
async fn refresh(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut run: bool = sqlx::query_scalar(LOCK).fetch_one(&mut *tx).await?;
    if run {
        let row = sqlx::query(STATISTICS).fetch_one(&mut *tx).await?;
        let tuples: f64 = row.try_get::<f64, _>("tuples")?.max(0.0);
        let changed: f64 = row.try_get::<Option<f64>, _>("changed")?.unwrap_or(0.0);
        run = due(tuples, changed);
    }
    if run {
        sqlx::query(SAMPLE).execute(&mut *tx).await?;
        sqlx::query(ANALYZE).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(run)
}

/// Whether a table of `tuples` rows at its last `ANALYZE`, `changed` since, needs
/// one now.
fn due(tuples: f64, changed: f64) -> bool {
    tuples < YOUNG && changed >= (WRITES_PER_ROW * tuples).max(CHECK_EVERY as f64)
}

#[cfg(test)]
mod tests {
    use super::due;

    #[test]
    fn a_young_table_is_analysed_each_time_it_doubles() {
        assert!(!due(0.0, 999.0));
        assert!(due(0.0, 1_000.0)); // never analysed, 1,000 rows in
        // 40,000 rows then: 40,000 more, each written three times.
        assert!(!due(40_000.0, 119_999.0));
        assert!(due(40_000.0, 120_000.0));
    }

    #[test]
    fn a_grown_table_is_left_to_autovacuum() {
        assert!(!due(1_000_000.0, 5_000_000.0));
        assert!(!due(20_000_000.0, 1_000.0));
    }
}
