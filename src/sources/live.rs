//! The sources of a running instance: each [`Source`] with its counters, and the
//! way to its rejected log.
//!
//! The counters are **per instance and in memory**: they count what this process
//! saw since it started (several instances sharing PostgreSQL each have their own),
//! and a restart empties them. The rejected log is in the database
//! ([`crate::store::rejected`]): shared, durable, bounded per source; what it keeps
//! of a request is [`super::rejected::entry`]'s choice, so an operator can see why
//! a sender's webhooks fail (a rotated secret, a clock off by minutes) and retry
//! them once that is fixed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use http::HeaderMap;
use serde::Serialize;

use super::Source;
use super::pull::status::{PullStatus, PullView};
use super::rejected::{self, BODY_PREVIEW_BYTES, MASK_MARGIN, Reason, Refusal, RejectedRequest};
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::store::pull::{CursorRow, PullStore};
use crate::store::rejected::{Bounds, KEPT_PER_CLASS, RejectedRow, RejectedStore};
use crate::telemetry::names;

/// Rejected requests a listing shows per source and quota (the newest): every
/// entry the log keeps, so that a flood of forged requests cannot hide a real
/// sender's refusals (the other quota) from the listing either.
pub(crate) const REJECTED_LOG_SIZE: u32 = KEPT_PER_CLASS;

/// Every configured source, by name.
#[derive(Default)]
pub struct Sources {
    all: Vec<Arc<LiveSource>>,
    by_name: HashMap<String, Arc<LiveSource>>,
    /// Where pull sources keep their cursors (set by the app).
    cursors: Option<Arc<dyn PullStore>>,
    /// Where sources keep the requests they refused (set by the app).
    rejected: Option<Arc<dyn RejectedStore>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("all", &self.all)
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// The sources a manifest folder gave (names are unique there).
    pub fn new(sources: Vec<Source>) -> Self {
        let all: Vec<Arc<LiveSource>> = sources
            .into_iter()
            .map(|source| Arc::new(LiveSource::new(source)))
            .collect();
        let by_name = all
            .iter()
            .map(|s| (s.source.name.clone(), s.clone()))
            .collect();
        Self {
            all,
            by_name,
            cursors: None,
            rejected: None,
        }
    }

    /// With the store where pull sources keep their cursors.
    pub fn with_cursors(mut self, store: Arc<dyn PullStore>) -> Self {
        self.cursors = Some(store);
        self
    }

    /// With the store where sources keep the requests they refused.
    pub fn with_rejected(mut self, store: Arc<dyn RejectedStore>) -> Self {
        for source in &self.all {
            let _ = source.log.set(store.clone());
        }
        self.rejected = Some(store);
        self
    }

    /// The store of the rejected log, if set.
    pub fn rejected_store(&self) -> Option<&Arc<dyn RejectedStore>> {
        self.rejected.as_ref()
    }

    /// The store where pull sources keep their cursors, if set.
    pub fn cursors(&self) -> Option<&Arc<dyn PullStore>> {
        self.cursors.as_ref()
    }

    /// The pull sources.
    pub fn pull(&self) -> impl Iterator<Item = &Arc<LiveSource>> {
        self.all.iter().filter(|s| s.source.pull.is_some())
    }

    /// The source of this name.
    pub fn get(&self, name: &str) -> Option<&Arc<LiveSource>> {
        self.by_name.get(name)
    }

    /// Every source, in manifest order.
    pub fn all(&self) -> &[Arc<LiveSource>] {
        &self.all
    }

    /// Every source's view, a pull source's with its committed cursor (one read
    /// of the cursors, when there is a pull source): what `GET /sources` and the
    /// console's Sources page show.
    pub async fn views(&self) -> Result<Vec<SourceView>, crate::store::StoreError> {
        let cursors = match self.cursors() {
            Some(store) if self.pull().next().is_some() => store.cursors().await?,
            _ => Default::default(),
        };
        Ok(self
            .all()
            .iter()
            .map(|s| s.view_with(cursors.get(&s.source.name)))
            .collect())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// One source and what this instance saw of it.
pub struct LiveSource {
    /// The manifest.
    pub source: Source,
    accepted: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
    /// Milliseconds since the epoch; 0 = never.
    last_accepted: AtomicI64,
    last_rejected: AtomicI64,
    /// Where its rejected requests go (set once, by [`Sources::with_rejected`]).
    log: OnceLock<Arc<dyn RejectedStore>>,
    /// A pull source's adapter status; `None` for a push source.
    pub pull: Option<PullStatus>,
}

impl std::fmt::Debug for LiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSource")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// A source's counters as `GET /sources` shows them (this instance, since start).
#[derive(Debug, Clone, Serialize)]
pub struct SourceView {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// The URL path senders post to (`null` for a pull source).
    pub path: Option<String>,
    /// Prepended to the provider's event types.
    pub event_type_prefix: String,
    /// New events accepted (202).
    pub accepted: u64,
    /// Redeliveries answered with the stored event (200).
    pub duplicates: u64,
    /// Requests refused (401, and 400/413/422 of verified ones).
    pub rejected: u64,
    /// The latest 202 or 200.
    pub last_accepted_at: Option<Timestamp>,
    /// The latest refusal.
    pub last_rejected_at: Option<Timestamp>,
    /// A pull source's URL, cursor, state, last error and lag.
    #[serde(flatten)]
    pub pull: Option<PullView>,
}

impl LiveSource {
    fn new(source: Source) -> Self {
        Self {
            pull: source.pull.as_ref().map(|_| PullStatus::new(&source.name)),
            source,
            accepted: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_accepted: AtomicI64::new(0),
            last_rejected: AtomicI64::new(0),
            log: OnceLock::new(),
        }
    }

    /// Counts a new event (202).
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.last_accepted
            .store(Timestamp::now().millis(), Ordering::Relaxed);
        self.count("accepted");
    }

    /// Counts a redelivery answered 200.
    pub fn duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
        self.last_accepted
            .store(Timestamp::now().millis(), Ordering::Relaxed);
        self.count("duplicate");
    }

    fn count(&self, outcome: &'static str) {
        metrics::counter!(names::SOURCE_REQUESTS, "source" => self.source.name.clone(), "outcome" => outcome)
            .increment(1);
    }

    /// Counts a refused request and keeps it in the rejected log (a failure to
    /// keep it is logged: the sender's answer does not depend on it).
    pub async fn rejected(&self, row: RejectedRow) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.last_rejected
            .store(row.received_at.millis(), Ordering::Relaxed);
        self.count("rejected");
        let label = match row.reason.as_str() {
            "signature" => Reason::Signature.label(),
            "timestamp" => Reason::Timestamp.label(),
            _ => Reason::Other.label(),
        };
        metrics::counter!(names::SOURCE_REJECTED, "source" => self.source.name.clone(), "reason" => label)
            .increment(1);
        tracing::warn!(
            source = %self.source.name,
            reason = %row.reason,
            status = row.status,
            detail = %row.detail,
            "source request refused"
        );
        let Some(store) = self.log.get() else { return };
        if let Err(e) = store.keep(row, Bounds::default()).await {
            tracing::warn!(source = %self.source.name, error = %e, "the rejected log could not keep a request");
        }
    }

    /// The rejected log, newest first: at most `limit` (and
    /// [`REJECTED_LOG_SIZE`]) of each quota, none older than the log keeps.
    pub async fn rejected_log(&self, limit: u32) -> Result<Vec<RejectedRequest>, StoreError> {
        let Some(store) = self.log.get() else {
            return Ok(Vec::new());
        };
        let since = Bounds::default().oldest_kept(Timestamp::now());
        let preview = (BODY_PREVIEW_BYTES + MASK_MARGIN) as u32;
        let rows = store
            .rejected(
                &self.source.name,
                since,
                limit.min(REJECTED_LOG_SIZE),
                preview,
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| RejectedRequest::shown(row, &self.source.secrets))
            .collect())
    }

    /// The store of the rejected log, once set.
    pub fn log(&self) -> Option<&Arc<dyn RejectedStore>> {
        self.log.get()
    }

    /// The counters, and for a pull source its committed cursor `row`.
    pub fn view_with(&self, row: Option<&CursorRow>) -> SourceView {
        let at = |t: &AtomicI64| match t.load(Ordering::Relaxed) {
            0 => None,
            ms => chrono::DateTime::from_timestamp_millis(ms).map(Timestamp),
        };
        SourceView {
            name: self.source.name.clone(),
            kind: self.source.kind.clone(),
            path: self.source.pull.is_none().then(|| self.source.path()),
            event_type_prefix: self.source.event_type_prefix.clone(),
            accepted: self.accepted.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            last_accepted_at: at(&self.last_accepted),
            last_rejected_at: at(&self.last_rejected),
            pull: match (&self.pull, &self.source.pull) {
                (Some(status), Some(spec)) => Some(status.view(spec.shown_url(), row)),
                _ => None,
            },
        }
    }

    /// Counts a pulled item that could not be stored and keeps it in the rejected
    /// log (no headers: the adapter's own requests carry only its credentials; not
    /// retryable: nothing verifies an item).
    pub async fn refused_item(&self, code: &'static str, detail: String, item: &str) {
        let refusal = Refusal {
            reason: Reason::Other,
            status: 422,
            code,
            detail: &detail,
        };
        let mut row = rejected::entry(
            &self.source,
            Timestamp::now(),
            refusal,
            &HeaderMap::new(),
            item.as_bytes(),
            true,
        );
        row.retryable = false;
        self.rejected(row).await;
    }
}

#[cfg(test)]
mod tests {
    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::live::Sources;
        use crate::sources::manifest::load_str;

        let env = |_: &str| None;
        let sources = Sources::new(vec![load_str("lan.toml", "kind = \"none\"", &env).unwrap()]);
        let lan = sources.get("lan").unwrap();
        lan.accepted();
        assert_eq!(lan.view_with(None).accepted, 1);
        assert!(sources.get("other").is_none());
    }
}
