//! Claim-based processing for a database that several instances share
//! (PostgreSQL): the database is the queue.
//!
//! One claim loop per instance keeps this instance's workers fed: when at most
//! `WORKER_COUNT` claimed deliveries are held, it claims up to [`HOLD_PER_WORKER`]
//! times that many due ones (`FOR UPDATE SKIP LOCKED`, see [`ClaimStore::claim`]) into the local
//! [`Queue`] the [`Workers`](crate::processing::worker::Workers) read. When nothing
//! more is due it sleeps until one of:
//!
//! - intake on this instance committed an event (a direct wake-up);
//! - any instance sent `NOTIFY hookbox_work` (intake after its commit, a finished
//!   ordered delivery that unblocks the next, a released lease);
//! - the next waiting retry is due, or a lease held by another instance expires;
//! - [`FALLBACK_POLL`] passed (a safety net; nothing relies on it).
//!
//! **Claimed at intake.** While the last claim found less due work than it had
//! room for (nothing older waits in the table) and the local queue has room,
//! intake stores a new event's deliveries without an ordering value already
//! claimed by this instance (`processing`, this instance's lease) and hands them
//! straight to the workers ([`Dispatch::reserve`], then [`Dispatch::submit`]):
//! no claim, no `NOTIFY`, no wake-up of any claimer for them. An instance that
//! keeps up with its own intake then claims almost nothing; one with a backlog
//! leaves new work to the claim's oldest-first order. Measured with two instances
//! end to end (`INSTANCES=2 CPU=1 scripts/bench-pg.sh e2e`): 7,970 claims of 12.5
//! rows and 6,000 look-ups of the next due time became 2,280 claims of 2.9 rows
//! and 1,850 look-ups, and the database's CPU per event fell from 172–199 µs to
//! 121–124 µs.
//!
//! A job gives its queue place back as soon as its attempt ran: its outcome waits
//! for the finisher's next group commit while the workers go on (at most
//! [`MAX_RECORDING`] outcomes wait at once). The lease keeps the delivery until
//! then, and the next delivery of an ordering key is not claimable before it.
//!
//! While a delivery is held its lease (`locked_until`) is renewed every third of
//! `LEASE_TIMEOUT`; an instance that dies stops renewing, and once its leases expire
//! any instance claims those deliveries again (at-least-once). Only deliveries the
//! claim loop received are renewed (not every row claimed under this instance's
//! id): a claim whose answer was lost is left to expire rather than held forever.
//! On a clean shutdown the instance releases what it still holds at once.
//!
//! Backpressure reads the shared backlog: deliveries due or running on every
//! instance (retries still waiting for their time are not work yet, so one dead
//! subscriber cannot make intake refuse everyone), counted every
//! [`BACKLOG_REFRESH`] — or less often when counting takes long (see
//! [`pause_after_count`]) — and compared with `QUEUE_MAXSIZE`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::processing::dispatch::Dispatch;
use crate::processing::job::Job;
use crate::processing::lanes::Lanes;
use crate::processing::queue::Queue;
use crate::store::ClaimStore;

/// The safety-net poll of an idle claim loop.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(5);

/// How often the shared backlog is counted for backpressure.
pub(crate) const BACKLOG_REFRESH: Duration = Duration::from_millis(100);

/// The pause after a count is at least this many times the count's own time.
const COUNT_PACE: u32 = 9;

/// How long to wait after a count of the backlog that took `took` before the
/// next: [`BACKLOG_REFRESH`] from one count's start to the next, unless counting
/// took so long that this instance would spend more than a tenth of its time
/// counting. The count reads every due delivery's index entry: 38 ms at 300,000
/// pending on this machine, so that every instance counting ten times a second
/// kept a third of a database core busy with a backlog it was not even working
/// on. This instance's own intake is added to the count at once, so a slower
/// count delays only what it learns of other instances' intake and outcomes.
fn pause_after_count(took: Duration) -> Duration {
    BACKLOG_REFRESH
        .saturating_sub(took)
        .max(took.saturating_mul(COUNT_PACE))
}

/// How many claimed deliveries per worker the claim loop keeps queued (it claims
/// again once at most one per worker is). Twice the workers kept one instance's
/// claim loop just level with its intake end to end: every claim was full (3,000
/// of 3,150), so a backlog of a few batches stayed in the table and nothing could
/// be claimed at intake. Four times drains it: 95 % of deliveries were claimed at
/// intake (`STATEMENTS=1 scripts/bench-pg.sh e2e`: 1,080 claims of 4,400 rows
/// for 100,000 events), and the database's CPU per event fell from 116 / 120 µs
/// to 91 / 95 µs (interleaved, `CPU=1`).
const HOLD_PER_WORKER: usize = 4;

/// Most outcomes waiting for their commit at once (two of the finisher's batches):
/// a worker whose attempt ran waits while this many are.
const MAX_RECORDING: usize = 1024;

/// Held by the claim loop: once it stops (shutdown), intake claims nothing more,
/// since no worker would take it ([`Claims::close_intake_claims`]).
struct StopsIntakeClaims(Arc<Claims>);

impl Drop for StopsIntakeClaims {
    fn drop(&mut self) {
        self.0.close_intake_claims();
    }
}

/// Set in [`Claims::reserved`] once intake may claim nothing more: in the same
/// word as the count, so that no reservation can slip in after the close.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// How long the shutdown's release waits for intake commits that reserved room
/// before claiming stopped (a commit waits at most a few hundred milliseconds for
/// a connection; past this their rows are rescued when their lease expires).
const RESERVATIONS_GRACE: Duration = Duration::from_secs(2);

/// Longest wait after a database error before trying again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type BoxedTask = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// One instance's claimer: feeds its workers from the shared database.
pub(crate) struct Claims {
    store: Arc<dyn ClaimStore>,
    /// Claimed deliveries, waiting for or held by a worker of this instance.
    queue: Arc<Queue<Job>>,
    /// Wakes the claim loop when this instance accepted work.
    wake: Notify,
    /// Wakes the notifier, which sends one `NOTIFY` for any number of wake-ups.
    announce: Notify,
    /// Deliveries due or running on every instance, as last counted.
    backlog: AtomicU64,
    /// Deliveries claimed and not yet seen finished: the leases to renew.
    held: Mutex<HashSet<uuid::Uuid>>,
    /// Outcomes waiting for their commit (their jobs gave their queue place back).
    recording: Arc<Semaphore>,
    /// Queue places set aside for deliveries being committed claimed at intake,
    /// with [`CLOSED`] set once no more may be.
    reserved: AtomicUsize,
    /// Woken when reserved places are used or given back after the close.
    unreserved: Notify,
    /// The last claim found less due work than it had room for: nothing older
    /// waits, so new work may go straight to this instance's workers.
    drained: AtomicBool,
    capacity: usize,
    /// `MAX_BACKLOG`, over `total`.
    max_backlog: usize,
    /// The shared backlog, held-back work and waiting retries included.
    total: AtomicU64,
    /// Retries waiting for their time, on every instance, as last counted
    /// ([`Claims::count_waiting`], every [`INSTANCES_EVERY`]): part of `total`.
    waiting: AtomicU64,
    workers: usize,
    lease: Duration,
    /// The destinations' lanes: jobs parked there do not take a worker's place.
    lanes: Arc<Lanes>,
}

impl Claims {
    /// A claimer for `workers` workers with leases of `lease`; intake is refused
    /// while the shared backlog is at `capacity`.
    pub(crate) fn new(
        store: Arc<dyn ClaimStore>,
        capacity: usize,
        max_backlog: usize,
        workers: usize,
        lease: Duration,
        lanes: Arc<Lanes>,
    ) -> Arc<Self> {
        let claims = Arc::new(Self {
            store,
            // Its own bound is never consulted: the claim loop and intake hold
            // at most HOLD_PER_WORKER times the worker count.
            queue: Queue::new(),
            wake: Notify::new(),
            announce: Notify::new(),
            backlog: AtomicU64::new(0),
            held: Mutex::new(HashSet::new()),
            recording: Arc::new(Semaphore::new(MAX_RECORDING)),
            reserved: AtomicUsize::new(0),
            unreserved: Notify::new(),
            drained: AtomicBool::new(false),
            capacity,
            max_backlog,
            total: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            workers,
            lease,
            lanes,
        });
        // A full lane that has room again: claim its work at once.
        let me = Arc::downgrade(&claims);
        claims.lanes.on_spill(move |_| {
            if let Some(claims) = me.upgrade() {
                claims.wake.notify_one();
            }
        });
        claims
    }

    /// Jobs queued or running, less those parked in their destination's lane.
    fn active(&self) -> usize {
        self.lanes.active(self.queue.depth())
    }

    /// Queue places set aside by intake and not yet used or given back.
    fn reserved_places(&self) -> usize {
        self.reserved.load(Ordering::Acquire) & !CLOSED
    }

    /// From now on intake claims nothing (claiming stopped: no worker would take
    /// it); reservations already made are still used or given back.
    fn close_intake_claims(&self) {
        self.drained.store(false, Ordering::Release);
        self.reserved.fetch_or(CLOSED, Ordering::AcqRel);
    }

    /// Closes intake claims and waits (at most [`RESERVATIONS_GRACE`]) until the
    /// intake commits that had reserved room are done: their rows are then
    /// committed claimed by this instance, and the release that follows gives
    /// them back too.
    async fn settle_reservations(&self) {
        self.close_intake_claims();
        let settled = async {
            loop {
                let changed = self.unreserved.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.reserved_places() == 0 {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(RESERVATIONS_GRACE, settled)
            .await
            .is_err()
        {
            warn!(
                places = self.reserved_places(),
                "intake commits still running at shutdown; their deliveries are rescued when their lease expires"
            );
        }
    }

    /// How many claimed deliveries the claim loop and intake keep queued at most.
    fn hold(&self) -> usize {
        self.workers.saturating_mul(HOLD_PER_WORKER)
    }

    /// The local queue the workers take claimed deliveries from.
    pub(crate) fn queue(&self) -> Arc<Queue<Job>> {
        self.queue.clone()
    }

    /// Counts the shared backlog once (before `/ready`, so that backpressure starts
    /// from the truth).
    ///
    /// Work that its own destination holds back (paused, failing, disabled, at its
    /// limits) is not due: only what such a destination runs counts. Nor is work
    /// behind an older delivery of its ordering key, counted only once the rest
    /// reaches `QUEUE_MAXSIZE` (below it, it changes nothing).
    pub(crate) async fn refresh_backlog(&self) -> Result<(), crate::store::StoreError> {
        let n = self.store.backlog().await?;
        let holding = self.lanes.holding_back();
        let names: Vec<String> = holding.iter().map(|(name, _)| name.clone()).collect();
        let mut due = if holding.is_empty() {
            n
        } else {
            let held = self.store.backlog_of(&names).await?;
            let running: u64 = holding.iter().map(|(_, r)| u64::from(*r)).sum();
            n.saturating_sub(held).saturating_add(running.min(held))
        };
        if usize::try_from(due).unwrap_or(usize::MAX) >= self.capacity {
            due = due.saturating_sub(self.store.behind_keys(&names).await?);
        }
        // `MAX_BACKLOG` bounds every pending delivery, waiting retries too.
        let waiting = self.waiting.load(Ordering::Relaxed);
        self.backlog.store(due, Ordering::Relaxed);
        self.total
            .store(n.saturating_add(waiting), Ordering::Relaxed);
        Ok(())
    }

    /// Starts the claim loop (unless there are no workers), which stops when
    /// `claiming` is cancelled, and the lease renewal, the backlog counter and the
    /// notifier, which stop when `rest` is (after the workers drained). Dropping the
    /// set aborts them all.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        claiming: &CancellationToken,
        rest: &CancellationToken,
    ) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let mut spawn = |stop: &CancellationToken, task: BoxedTask| {
            let stop = stop.clone();
            tasks.spawn(async move {
                stop.run_until_cancelled_owned(task).await;
            });
        };
        if self.workers > 0 {
            spawn(claiming, Box::pin(self.clone().claim_loop()));
        }
        spawn(rest, Box::pin(self.clone().renew_loop()));
        spawn(rest, Box::pin(self.clone().count_loop()));
        spawn(rest, Box::pin(self.clone().notify_loop()));
        tasks
    }

    /// At startup: takes back what a previous run of this instance (same
    /// `INSTANCE_ID`) held when it died, at once rather than after the lease.
    pub(crate) async fn reclaim(&self) -> Result<(), crate::store::StoreError> {
        let n = self.store.reclaim().await?;
        if n > 0 {
            info!(
                deliveries = n,
                "took back the claims a previous run of this instance held"
            );
        }
        Ok(())
    }

    /// Gives back what this instance still holds (after its workers stopped), so
    /// that other instances take it at once rather than after the lease — once
    /// the intake commits that reserved room have stored their deliveries
    /// ([`Claims::settle_reservations`]).
    pub(crate) async fn release(&self) {
        self.settle_reservations().await;
        match self.store.release().await {
            Ok(0) => {}
            Ok(n) => info!(deliveries = n, "released unfinished claims"),
            Err(e) => {
                warn!(error = %e, "could not release claims; they are rescued when their lease expires")
            }
        }
    }

    async fn claim_loop(self: Arc<Self>) {
        let _stopped = StopsIntakeClaims(self.clone());
        let announced = self.store.announcements();
        let hold = self.hold();
        let mut backoff = Backoff::default();
        loop {
            // Refill once half of what is held has been taken.
            self.lanes
                .wait_active_at_most(&self.queue, self.workers)
                .await;
            let taken = self.active() + self.reserved_places();
            let room = hold.saturating_sub(taken).max(1);
            let limit = u32::try_from(room).unwrap_or(u32::MAX);
            let skip = self.lanes.not_claimed();
            // They ask for their work when they have room again (`on_spill`).
            self.lanes.skipped(&skip, uuid::Uuid::nil());
            let claimed = match self.store.claim(limit, self.lease, &skip).await {
                Ok(c) => {
                    backoff.succeeded("claiming");
                    c
                }
                Err(e) => {
                    backoff.failed("claiming", &e).await;
                    continue;
                }
            };
            let full = claimed.tasks.len() == room;
            self.drained.store(!full, Ordering::Release);
            self.held()
                .extend(claimed.tasks.iter().map(|t| t.delivery_id));
            self.queue
                .extend(claimed.tasks.into_iter().map(Job::claimed));
            if full {
                continue; // more may be due
            }
            let wait = claimed
                .next_due
                .map_or(FALLBACK_POLL, |d| d.min(FALLBACK_POLL));
            tokio::select! {
                () = self.wake.notified() => {}
                () = announced.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Wakes this instance's claim loop after `delay` (a retry falls due then).
    pub(crate) fn wake_after(self: &Arc<Self>, delay: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            this.wake.notify_one();
        });
    }

    async fn renew_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Backoff::default();
        loop {
            tick.tick().await;
            let held: Vec<uuid::Uuid> = self.held().iter().copied().collect();
            match self.store.renew(&held, self.lease).await {
                Ok(renewed) => {
                    backoff.succeeded("renewing leases");
                    // Forget what finished (or was lost); keep what was claimed since.
                    let renewed: HashSet<_> = renewed.into_iter().collect();
                    let mut current = self.held();
                    for id in held.iter().filter(|id| !renewed.contains(id)) {
                        current.remove(id);
                    }
                }
                Err(e) => backoff.failed("renewing leases", &e).await,
            }
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<uuid::Uuid>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the retries waiting for their time (`MAX_BACKLOG` counts them):
    /// at startup, then every [`INSTANCES_EVERY`] — one dead destination can
    /// leave a great many, read far less often than the due work.
    pub(crate) async fn count_waiting(&self) -> Result<(), crate::store::StoreError> {
        let waiting = self.store.waiting_retries().await?;
        self.waiting.store(waiting, Ordering::Relaxed);
        Ok(())
    }

    async fn count_loop(self: Arc<Self>) {
        let mut backoff = Backoff::default();
        let mut instances_at = tokio::time::Instant::now();
        loop {
            let started = tokio::time::Instant::now();
            if started >= instances_at {
                // The instances sharing the destinations' limits, and the waiting
                // retries, every few seconds.
                if let Ok(n) = self.store.instances().await {
                    self.lanes.share(n);
                }
                if let Err(e) = self.count_waiting().await {
                    warn!(error = %e, "could not count the waiting retries");
                }
                instances_at = started + INSTANCES_EVERY;
            }
            match self.refresh_backlog().await {
                Ok(()) => backoff.succeeded("counting the backlog"),
                Err(e) => backoff.failed("counting the backlog", &e).await,
            }
            tokio::time::sleep(pause_after_count(started.elapsed())).await;
        }
    }

    /// Sends `NOTIFY` after intake commits: at most one in flight, so a burst of
    /// events costs a few notifications rather than one each.
    async fn notify_loop(self: Arc<Self>) {
        let mut backoff = Backoff::default();
        loop {
            self.announce.notified().await;
            match self.store.announce().await {
                Ok(()) => backoff.succeeded("announcing work"),
                Err(e) => backoff.failed("announcing work", &e).await,
            }
        }
    }
}

/// How often the live instances are counted (they share the destinations'
/// limits), and the waiting retries.
const INSTANCES_EVERY: Duration = Duration::from_secs(2);

impl Dispatch for Claims {
    /// The jobs are in the database already. Those claimed at intake go straight
    /// to this instance's workers (their leases renewed from now on); for the rest
    /// this instance's claim loop is woken at once and every other instance's
    /// through `NOTIFY`.
    fn submit(&self, jobs: Vec<Job>) {
        let new = jobs
            .iter()
            .filter(|j| matches!(j, Job::Deliver { .. }))
            .count();
        if new == 0 {
            return;
        }
        // Counted at once here, so that this instance's own burst is shed
        // without waiting for the next count; what its destination holds back is
        // not due work, nor what may wait behind an older delivery of its
        // ordering key (the next count from the table tells).
        let due = jobs
            .iter()
            .filter(|j| match j {
                Job::Deliver { task: Some(t), .. } => {
                    t.ordering_value.is_none() && self.lanes.holds_back(&t.handler).is_none()
                }
                Job::Deliver { task: None, .. } => true,
                _ => false,
            })
            .count();
        self.backlog.fetch_add(due as u64, Ordering::Relaxed);
        self.total.fetch_add(new as u64, Ordering::Relaxed);
        let held: Vec<Job> = jobs
            .into_iter()
            .filter(|j| j.held_delivery().is_some())
            .collect();
        let claimed = held.len();
        if claimed > 0 {
            self.held()
                .extend(held.iter().filter_map(Job::held_delivery));
            self.unreserve(claimed);
            self.queue.extend(held);
        }
        if new > claimed {
            self.wake.notify_one();
            self.announce.notify_one();
        }
    }

    /// Room while the last claim found nothing more due and the queue, with what
    /// is set aside already, holds less than the claim loop keeps
    /// ([`HOLD_PER_WORKER`] times the workers): an idle or keeping-up instance
    /// takes its own new work without a claim, and one with a backlog leaves it to
    /// the claim's oldest-first order.
    fn reserve(&self, n: usize) -> Option<Duration> {
        let hold = self.hold();
        if n == 0 || !self.drained.load(Ordering::Acquire) {
            return None;
        }
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reserved| {
                (reserved & CLOSED == 0 && self.queue.depth() + reserved + n <= hold)
                    .then_some(reserved + n)
            })
            .ok()
            .map(|_| self.lease)
    }

    fn leaves_unclaimed(&self, handler: &str) -> bool {
        self.lanes.leaves_unclaimed(handler)
    }

    fn unreserve(&self, n: usize) {
        let before = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some((r & CLOSED) | (r & !CLOSED).saturating_sub(n))
            })
            .unwrap_or_else(|r| r);
        // Only the shutdown's release waits, and only once closed.
        if before & CLOSED != 0 {
            self.unreserved.notify_waiters();
        }
    }

    fn depth(&self) -> usize {
        usize::try_from(self.backlog.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Claims {
    /// The claim decided the order and the lease holds the delivery until its
    /// outcome commits, so the queue place is not needed meanwhile: claiming more
    /// work does not wait for the finisher's commit. The permit bounds the
    /// outcomes waiting for their commit.
    pub(crate) async fn recording_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.recording.clone().acquire_owned().await.ok()
    }
}

impl Claims {
    /// Claimed work at `QUEUE_MAXSIZE`, or every pending delivery at
    /// `MAX_BACKLOG`: intake answers 429 with this `Retry-After`.
    pub(crate) fn overloaded(&self) -> Option<Duration> {
        let total = usize::try_from(self.total.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        (Dispatch::depth(self) >= self.capacity || total >= self.max_backlog)
            .then_some(Duration::from_secs(1))
    }
}

/// Exponential backoff after database errors, logging the first failure and the
/// recovery rather than every attempt.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    async fn failed(&mut self, what: &str, error: &crate::store::StoreError) {
        if self.failures == 0 {
            warn!(error = %error, "{what} failed; retrying with backoff");
        }
        self.failures = self.failures.saturating_add(1);
        let wait = Duration::from_millis(100)
            .saturating_mul(1 << self.failures.min(6))
            .min(MAX_BACKOFF);
        tokio::time::sleep(wait).await;
    }

    fn succeeded(&mut self, what: &str) {
        if self.failures > 0 {
            info!(failures = self.failures, "{what} works again");
            self.failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    #[test]
    fn a_quick_count_repeats_every_refresh_period() {
        assert_eq!(
            pause_after_count(Duration::from_millis(1)),
            Duration::from_millis(99)
        );
        assert_eq!(pause_after_count(Duration::ZERO), BACKLOG_REFRESH);
    }

    /// A claimer for two workers with 30 s leases on a fresh PostgreSQL database
    /// (`None` when there is none to test against), and its store.
    async fn claimer() -> Option<(
        crate::store::postgres::tests::TestDb,
        Arc<crate::store::postgres::PgStore>,
        Arc<Claims>,
    )> {
        let db = crate::store::postgres::tests::TestDb::new().await?;
        let store = crate::store::postgres::PgStore::open(&db.url, 2)
            .await
            .expect("open");
        let store = Arc::new(store);
        let claims = Claims::new(
            store.clone(),
            100,
            1000,
            2,
            Duration::from_secs(30),
            crate::processing::lanes::Lanes::new(None),
        );
        Some((db, store, claims))
    }

    /// Waits (at most ten seconds) until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// New work goes straight to this instance's workers only once a claim found
    /// nothing more due, and only as far as the queue has room; what intake set
    /// aside is used by its commit's jobs (queued, their leases renewed) or given
    /// back; once claiming stopped (shutdown), nothing is claimed at intake.
    #[tokio::test]
    async fn intake_claims_only_with_room_and_nothing_due() {
        use crate::model::{DeliveryTask, Status};
        let Some((_db, _store, claims)) = claimer().await else {
            return;
        };
        let lease = claims.lease;
        assert_eq!(claims.reserve(1), None, "no claim has run yet");
        let (claiming, rest) = (CancellationToken::new(), CancellationToken::new());
        let _tasks = claims.spawn(&claiming, &rest);
        until("no claim ran", || claims.drained.load(Ordering::Acquire)).await;
        // The claim loop keeps four times the workers: eight.
        assert_eq!(claims.reserve(7), Some(lease));
        assert_eq!(claims.reserve(2), None, "seven set aside, room for one");
        claims.unreserve(5);
        let task = |status| DeliveryTask {
            delivery_id: uuid::Uuid::now_v7(),
            handler: "h".into(),
            status,
            attempts: 0,
            retry_after: None,
            ordering_value: None,
            created_at: Timestamp::now(),
            event_id: uuid::Uuid::now_v7(),
            idempotency_key: "k".into(),
            event_type: "t".into(),
            payload: "{}".into(),
            trace: None,
        };
        let held = task(Status::Processing);
        let held_id = held.delivery_id;
        claims.submit(vec![
            Job::claimed(held),
            Job::claimed(task(Status::Processing)),
            Job::claimed(task(Status::Pending)),
        ]);
        assert_eq!(claims.queue.depth(), 2, "the two claimed at intake");
        assert_eq!(claims.reserved_places(), 0);
        assert!(claims.held().contains(&held_id), "its lease is renewed");
        assert_eq!(claims.depth(), 3, "all three are backlog");
        claims.queue.close();
        claiming.cancel();
        until("claiming did not stop", || {
            !claims.drained.load(Ordering::Acquire)
        })
        .await;
        assert_eq!(claims.reserve(1), None, "no claiming after shutdown");
        rest.cancel();
    }

    /// The shutdown's release waits for an intake commit that reserved room before
    /// claiming stopped, so that the delivery it commits claimed by this instance
    /// is given back too instead of staying leased until its lease expires; no
    /// reservation is made once the release began.
    #[tokio::test]
    async fn the_release_waits_for_intake_commits_that_reserved_room() {
        use crate::store::Store;
        let Some((_db, store, claims)) = claimer().await else {
            return;
        };
        let lease = claims.lease;
        let (claiming, rest) = (CancellationToken::new(), CancellationToken::new());
        let _tasks = claims.spawn(&claiming, &rest);
        until("no claim ran", || claims.drained.load(Ordering::Acquire)).await;
        // Intake reserves room, then shutdown stops claiming and releases while
        // its commit is still under way.
        assert_eq!(claims.reserve(1), Some(lease));
        claiming.cancel();
        let releasing = tokio::spawn({
            let claims = claims.clone();
            async move { claims.release().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!releasing.is_finished(), "released before the commit");
        assert_eq!(claims.reserve(1), None, "no reservation once releasing");
        let mut event = crate::store::postgres::tests::new_event("k", "{}", &["h"]);
        event.claim_lease = Some(lease);
        assert!(
            store
                .insert_event(event.clone())
                .await
                .expect("insert")
                .created
        );
        claims.submit(Job::for_new_event(&event));
        tokio::time::timeout(Duration::from_secs(5), releasing)
            .await
            .expect("the release went on after the commit")
            .expect("release");
        let (status, owner): (String, Option<String>) =
            sqlx::query_as("SELECT status, locked_by FROM deliveries")
                .fetch_one(store.pool())
                .await
                .expect("delivery");
        assert_eq!((status.as_str(), owner), ("pending", None), "given back");
        rest.cancel();
    }

    #[test]
    fn a_slow_count_takes_at_most_a_tenth_of_the_time() {
        for ms in [11_u64, 38, 130, 2_000] {
            let took = Duration::from_millis(ms);
            let cycle = took + pause_after_count(took);
            assert!(cycle >= took * 10, "{ms} ms: cycle {cycle:?}");
        }
    }
}
