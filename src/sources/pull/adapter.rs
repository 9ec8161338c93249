//! One pull source's adapter: its session (the lease and the committed cursor),
//! and committing what a transport fetched — the part that poll and WebSocket
//! share. [`super::run`] takes the lease and runs the transport.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::backoff::Backoff;
use super::item::{self, Item, Refused};
use super::spec::PullSpec;
use super::status::{PullStatus, State};
use crate::inbox::{Inbox, Origin, Outcome, Pulled, PulledItem, Refusal, Submission};
use crate::sources::live::LiveSource;
use crate::store::StoreError;
use crate::store::pull::{PullStore, SourceLease};

/// How often a paused adapter looks for room in the queue.
const ROOM_CHECK: Duration = Duration::from_millis(20);

/// One source's adapter and what it works with.
pub(super) struct Adapter {
    pub(super) live: Arc<LiveSource>,
    pub(super) spec: Arc<PullSpec>,
    pub(super) inbox: Inbox,
    pub(super) store: Arc<dyn PullStore>,
    pub(super) client: reqwest::Client,
    pub(super) stop: CancellationToken,
}

/// The lease and the committed position the adapter works from.
pub(super) struct Session {
    lease: Box<dyn SourceLease>,
    /// The JSON text of the committed cursor.
    pub(super) cursor: Option<String>,
    version: i64,
}

impl Session {
    /// A session under `lease`, from the committed cursor.
    pub(super) async fn open(lease: Box<dyn SourceLease>) -> Result<Self, StoreError> {
        let mut session = Self {
            lease,
            cursor: None,
            version: 0,
        };
        session.reload().await?;
        Ok(session)
    }

    /// Reads the committed cursor again (after a reset).
    pub(super) async fn reload(&mut self) -> Result<(), StoreError> {
        let row = self.lease.cursor().await?;
        self.cursor = row.cursor;
        self.version = row.version;
        Ok(())
    }

    /// True when the lease is gone (PostgreSQL: its connection ended).
    pub(super) async fn lease_lost(&mut self) -> bool {
        self.lease.check().await.is_err()
    }
}

/// Why a transport returned.
pub(super) enum End {
    /// Shutdown.
    Stopped,
    /// The lease or the store failed: take the lease again.
    Lost(String),
}

/// What a commit did.
pub(super) enum Committed {
    /// Stored; the cursor moved to the batch's.
    Done,
    /// A reset moved the cursor meanwhile: nothing stored, the cursor reloaded.
    Moved,
}

/// One fetched item: what it became, and its text (for the rejected log).
pub(super) struct Fetched {
    pub(super) item: Result<Item, Refused>,
    pub(super) text: String,
}

impl Adapter {
    /// The source's status.
    pub(super) fn status(&self) -> &PullStatus {
        self.live
            .pull
            .as_ref()
            .expect("a pull source has a pull status")
    }

    /// The source's name.
    pub(super) fn name(&self) -> &str {
        &self.live.source.name
    }

    /// Reads one item's text into what it is.
    pub(super) fn read(&self, text: String) -> Fetched {
        let s = &self.live.source;
        Fetched {
            item: item::read(&self.spec.fields, &s.name, &s.event_type_prefix, &text),
            text,
        }
    }

    /// Records a failure and waits out its backoff; false when stopped meanwhile.
    pub(super) async fn fail(
        &self,
        backoff: &mut Backoff,
        error: &str,
        retry_after: Option<Duration>,
    ) -> bool {
        let wait = backoff.next(retry_after);
        warn!(source = %self.name(), error, ?wait, "pull source failed; backing off");
        self.status().failed(error);
        self.sleep(wait).await
    }

    /// Waits `d`; false when stopped meanwhile.
    pub(super) async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.stop.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    /// True (and the reset consumed) when `POST /sources/{name}/reset` asked for
    /// one since the last look.
    pub(super) fn reset_asked(&self) -> bool {
        self.status().reset.notified().now_or_never().is_some()
    }

    /// How many events to take at most before looking at the queue again: its room
    /// (at least one, at most `max`), so that a group commit does not run far
    /// past `QUEUE_MAXSIZE` (an event with several deliveries may pass it by
    /// those).
    pub(super) fn room(&self, max: usize) -> usize {
        self.inbox.room().clamp(1, max)
    }

    /// Waits while the queue is full (state `paused`); false when stopped.
    pub(super) async fn wait_for_room(&self) -> bool {
        if self.inbox.overloaded().is_none() {
            return true;
        }
        let before = self.status().state();
        self.status().set_state(State::Paused);
        while self.inbox.overloaded().is_some() {
            if !self.sleep(ROOM_CHECK).await {
                return false;
            }
        }
        self.status().set_state(if before == State::Paused {
            State::Running
        } else {
            before
        });
        true
    }

    /// Commits fetched items and the cursor after them (the last cursor value among
    /// them, bad items included: the cursor moves past those) in one transaction,
    /// then counts each item: accepted, duplicate or rejected.
    pub(super) async fn commit(
        &self,
        session: &mut Session,
        fetched: Vec<Fetched>,
    ) -> Result<Committed, StoreError> {
        let cursor = fetched
            .iter()
            .rev()
            .find_map(|f| match &f.item {
                Ok(item) => item.cursor.clone(),
                Err(refused) => refused.cursor.clone(),
            })
            .or_else(|| session.cursor.clone());
        let mut items = Vec::with_capacity(fetched.len());
        let mut texts = Vec::with_capacity(fetched.len());
        let mut refused = Vec::new();
        let mut last_emitted = None;
        for f in fetched {
            match f.item {
                Ok(item) => {
                    last_emitted = item.emitted_at.or(last_emitted);
                    items.push(PulledItem {
                        submission: Submission {
                            event_type: item.event_type,
                            key: Some(item.key),
                            payload: item.payload,
                            origin: Origin::Source(self.name().to_owned()),
                            trace: None,
                        },
                        sequence: item.sequence,
                        emitted_at: item.emitted_at,
                    });
                    texts.push(f.text);
                }
                Err(r) => refused.push((r.code, r.detail, f.text)),
            }
        }
        let pulled = Pulled {
            source: self.name().to_owned(),
            items,
            cursor: cursor.clone(),
            version: session.version,
        };
        let lease = &mut session.lease;
        let results = self
            .inbox
            .accept_pulled(pulled, |batch| lease.commit(batch))
            .await?;
        let Some(results) = results else {
            info!(source = %self.name(), "the cursor was reset meanwhile; reloading it");
            session.reload().await?;
            return Ok(Committed::Moved);
        };
        session.cursor = cursor;
        session.version += 1;
        self.count(results, texts, refused).await;
        self.status().committed(last_emitted);
        Ok(Committed::Done)
    }

    /// Counts a committed batch's items in the source's counters and metrics.
    async fn count(
        &self,
        outcomes: Vec<Outcome>,
        texts: Vec<String>,
        refused: Vec<(&'static str, String, String)>,
    ) {
        for (outcome, text) in outcomes.into_iter().zip(texts) {
            match outcome {
                Outcome::Accepted(_) => self.live.accepted(),
                Outcome::Duplicate(_) => self.live.duplicate(),
                Outcome::KeyReused(event) => {
                    let detail = format!(
                        "the id {:?} was stored before with another body",
                        event.idempotency_key
                    );
                    self.live
                        .refused_item("idempotency_key_reused", detail, &text)
                        .await;
                }
                Outcome::Refused(refusal) => {
                    let code = match refusal {
                        Refusal::OrderingValueNul { .. } => "invalid_ordering_value",
                        Refusal::KeyOfSource { .. } => "invalid_idempotency_key",
                        Refusal::Draining => "unavailable",
                    };
                    self.live
                        .refused_item(code, refusal.to_string(), &text)
                        .await;
                }
            }
        }
        for (code, detail, text) in refused {
            self.live.refused_item(code, detail, &text).await;
        }
    }
}
