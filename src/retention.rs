//! Retention: every `CLEANUP_INTERVAL_HOURS`, delete `completed` and `failed` events
//! created more than `RETENTION_DAYS` ago, with their deliveries, in batches of 1000.
//! `pending` and `processing` events are never deleted (invariant 7). The same run
//! deletes a source's terminal events sooner when its manifest says `retention`
//! (counted from when they became terminal: their last change), and drops rejected
//! requests older than the rejected log keeps them (7 days).

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::model::Timestamp;
use crate::store::rejected::{Bounds, RejectedStore};
use crate::store::{Store, StoreError};

/// Rows deleted per transaction.
pub(crate) const BATCH: u32 = 1000;

/// After each batch, retention waits this many times as long as the batch took,
/// so that it holds the database (SQLite's one writer) a third of the time at
/// most while it runs, and intake keeps the rest: back to back, a run of tens of
/// thousands of events left intake too little of the writer for seconds, and
/// requests queued behind it (measured in the soak: stalls of 0.5–1.2 s at half
/// of peak intake).
const PAUSE_FACTOR: u32 = 2;

/// The longest pause between two batches.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Deletes every terminal event created before `cutoff`, batch by batch.
pub(crate) async fn purge_before(store: &dyn Store, cutoff: Timestamp) -> Result<u64, StoreError> {
    paced(|| store.purge(cutoff, BATCH)).await
}

/// Deletes `source`'s terminal events last changed before `cutoff`, batch by batch.
async fn purge_source(
    store: &dyn Store,
    source: &str,
    cutoff: Timestamp,
) -> Result<u64, StoreError> {
    paced(|| store.purge_source(source, cutoff, BATCH)).await
}

/// Runs `batch` until it deletes fewer than [`BATCH`] rows, pausing between two
/// runs ([`PAUSE_FACTOR`]); how many rows in all.
async fn paced<F, Fut>(mut batch: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    loop {
        let started = tokio::time::Instant::now();
        let n = batch().await?;
        total += n;
        if n < u64::from(BATCH) {
            return Ok(total);
        }
        let pause = (started.elapsed() * PAUSE_FACTOR).min(MAX_PAUSE);
        tokio::time::sleep(pause).await;
    }
}

/// Now minus `keep`; `None` when that is before anything can be.
fn ago(keep: Duration) -> Option<Timestamp> {
    chrono::Duration::from_std(keep)
        .ok()
        .and_then(|d| Timestamp::now().0.checked_sub_signed(d))
        .map(Timestamp)
}

/// Runs retention forever (the first run one interval after start).
pub(crate) async fn run(
    store: Arc<dyn Store>,
    rejected: Option<Arc<dyn RejectedStore>>,
    sources: Vec<(String, Duration)>,
    retention_days: f64,
    interval: Duration,
) {
    let keep = Duration::try_from_secs_f64(retention_days * 86_400.0).unwrap_or(Duration::MAX);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A retention too long to subtract from now deletes nothing, and does not
        // keep the other purges from running.
        if let Some(cutoff) = ago(keep) {
            match purge_before(&*store, cutoff).await {
                Ok(0) => {}
                Ok(n) => info!(deleted = n, before = %cutoff.to_rfc3339(), "retention"),
                Err(e) => warn!(error = %e, "retention failed; next run will retry"),
            }
        }
        for (source, keep) in &sources {
            let Some(cutoff) = ago(*keep) else { continue };
            match purge_source(&*store, source, cutoff).await {
                Ok(0) => {}
                Ok(n) => info!(deleted = n, source = %source, "source retention"),
                Err(e) => {
                    warn!(error = %e, source = %source, "source retention failed; next run will retry")
                }
            }
        }
        if let Some(log) = &rejected {
            let before = Bounds::default().oldest_kept(Timestamp::now());
            if let Err(e) = log.purge_rejected(before).await {
                warn!(error = %e, "rejected-log retention failed; next run will retry");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Full batches are followed by a pause twice their length; the last, short
    /// batch ends the run at once.
    #[tokio::test]
    async fn pauses_twice_as_long_as_each_full_batch_took() {
        let mut left = vec![5, u64::from(BATCH), u64::from(BATCH)];
        let started = tokio::time::Instant::now();
        let total = paced(|| {
            let n = left.pop().unwrap_or(0);
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(n)
            }
        })
        .await
        .unwrap();
        assert_eq!(total, 2 * u64::from(BATCH) + 5);
        // Three batches of 10 ms and two pauses of at least 20 ms: 70 ms or more
        // (without the pauses, 30 ms).
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(70), "{took:?}");
    }
}
