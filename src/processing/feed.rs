//! Who feeds the workers: the one place where the two backends differ for
//! processing, chosen once when processing is built ([`crate::inbox::new_pair`]).
//!
//! - [`Feed::Local`] — SQLite, one instance: the [`Window`] of due work over the
//!   table. What is not run now (not due yet, or the store failed before the
//!   attempt) waits in the table, and the window brings it in when it is due; per
//!   key order is kept by its ordering gate.
//! - [`Feed::Shared`] — PostgreSQL, any number of instances: [`Claims`]. The
//!   database is the queue, a claimed delivery stays leased to this instance until
//!   its outcome is written, and a retry waits in the database until its
//!   `retry_after`; the claim query keeps per-key order.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::model::{DeliveryTask, Finish, Timestamp};
use crate::processing::claims::Claims;
use crate::processing::dispatch::Dispatch;
use crate::processing::job::Job;
use crate::processing::queue::Queue;
use crate::processing::window::Window;
use crate::store::StoreError;

/// How this instance's workers get their work. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Feed {
    /// SQLite, one instance: a window of due work over the table.
    Local(Arc<Window>),
    /// PostgreSQL, any number of instances: the database is the queue.
    Shared(Arc<Claims>),
}

impl Feed {
    /// Where committed work goes.
    pub(crate) fn dispatch(&self) -> &dyn Dispatch {
        match self {
            Self::Local(window) => &**window,
            Self::Shared(claims) => &**claims,
        }
    }

    /// How full processing is, for intake's backpressure: `Retry-After` when
    /// intake should answer 429.
    pub(crate) fn overloaded(&self) -> Option<Duration> {
        match self {
            Self::Local(window) => window.overloaded(),
            Self::Shared(claims) => claims.overloaded(),
        }
    }

    /// How many more due deliveries `QUEUE_MAXSIZE` has room for now (a pull
    /// source reads no more events than that before it looks again).
    pub(crate) fn room(&self) -> usize {
        let dispatch = self.dispatch();
        dispatch.capacity().saturating_sub(dispatch.depth())
    }

    /// The window, where there is one (SQLite): its ordering gate and per-lane
    /// counts.
    pub(crate) fn window(&self) -> Option<&Arc<Window>> {
        match self {
            Self::Local(window) => Some(window),
            Self::Shared(_) => None,
        }
    }

    /// True when several instances may share the database (PostgreSQL).
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Self::Shared(_))
    }

    /// Where the workers take jobs from.
    pub(crate) fn queue(&self) -> Arc<Queue<Job>> {
        match self {
            Self::Local(window) => window.queue(),
            Self::Shared(claims) => claims.queue(),
        }
    }

    /// Recovery, then the feed: on SQLite the pending backlog is counted and the
    /// window filled from the table (the rest waits there), then its refill
    /// starts; on PostgreSQL the claim query is the recovery (it also takes over
    /// deliveries whose lease expired), so the claim loop starts, which stops when
    /// `claiming` is cancelled, and the rest (leases, backlog) when `rest` is.
    pub(crate) async fn start(
        &self,
        claiming: &CancellationToken,
        rest: &CancellationToken,
    ) -> Result<JoinSet<()>, StoreError> {
        match self {
            Self::Local(window) => window.start().await,
            Self::Shared(claims) => {
                claims.reclaim().await?;
                claims.count_waiting().await?;
                claims.refresh_backlog().await?;
                Ok(claims.spawn(claiming, rest))
            }
        }
    }

    /// After the workers stopped: on PostgreSQL gives back what this instance
    /// still holds, so that other instances take it at once rather than after the
    /// lease; nothing to do on SQLite.
    pub(crate) async fn release(&self) {
        if let Self::Shared(claims) = self {
            if tokio::time::timeout(Duration::from_secs(5), claims.release())
                .await
                .is_err()
            {
                warn!("releasing claims timed out; they are rescued when their lease expires");
            }
        }
    }

    /// The store failed before the attempt of `job` ran: brings `job` back after
    /// `delay` and says true (SQLite), or says false (a claimed delivery stays
    /// leased to this instance).
    pub(crate) fn put_back_after(&self, job: Job, delay: Duration) -> bool {
        match self {
            Self::Local(window) => {
                window.put_back_after(job, delay);
                true
            }
            Self::Shared(_) => false,
        }
    }

    /// A delivery read with a `retry_after` still ahead: holds `job` until `due`
    /// and says true (SQLite), or says false when it is due anyway (a claim: the
    /// database's clock decided it).
    pub(crate) fn hold_until(&self, due: Timestamp) -> bool {
        match self {
            Self::Local(window) => {
                window.retry_due_at(due);
                true
            }
            Self::Shared(_) => false,
        }
    }

    /// Whether an attempt must stop when its delivery could not be marked
    /// `processing`: on SQLite it must (the window holds nothing); a claim holds
    /// the delivery, so on PostgreSQL only the event's shown status waits.
    pub(crate) fn needs_mark(&self) -> bool {
        !self.is_shared()
    }

    /// Whether the attempt of `task` may start now (strict per-key order on one
    /// instance); false lets the job go: the delivery waits in the database until
    /// its turn. On PostgreSQL always: the claim query decided.
    pub(crate) async fn admit(&self, task: &DeliveryTask) -> Result<bool, StoreError> {
        match self {
            Self::Local(window) => window.admit(task).await,
            Self::Shared(_) => Ok(true),
        }
    }

    /// On PostgreSQL, where the database keeps order and leases, a job gives its
    /// queue place back as soon as its attempt ran, so that claiming more work
    /// does not wait for outcomes to commit: this answers with a permit held until
    /// the commit, which bounds the outcomes waiting for one (a worker waits here
    /// while too many are). `None` on SQLite: the place is kept until the commit.
    pub(crate) async fn early_release(&self) -> Option<OwnedSemaphorePermit> {
        match self {
            Self::Local(_) => None,
            Self::Shared(claims) => claims.recording_permit().await,
        }
    }

    /// An attempt's outcome was written (`committed`), or the store stopped first;
    /// `retry` is after how long the delivery runs again, when it failed and will
    /// be retried.
    pub(crate) fn after_commit(&self, committed: bool, retry: Option<Duration>) {
        match (self, retry) {
            (Self::Local(window), Some(after)) if committed => {
                window.retry_due_at(Timestamp(Timestamp::now().0 + after));
            }
            // The claim loop learnt of due times when it last claimed; it is told
            // of this retry's, or it waits for its fallback poll.
            (Self::Shared(claims), Some(after)) => claims.wake_after(after),
            _ => {}
        }
    }

    /// An attempt's outcome for a delivery of `handler` was committed: `fresh`
    /// when the delivery had no `retry_after` before it (it counted in the pending
    /// backlog), `ordering` its handler and ordering value (SQLite: the window's
    /// counts and ordering gate).
    pub(crate) fn recorded(
        &self,
        handler: &str,
        finish: &Finish,
        fresh: bool,
        ordering: Option<&(String, String)>,
    ) {
        if let Self::Local(window) = self {
            window.recorded(handler, finish, fresh, ordering);
        }
    }
}
