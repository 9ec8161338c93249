//! The window of due work (SQLite, one instance): the database is the queue, and
//! memory holds at most [`WINDOW`] jobs of it, whatever the size of the backlog.
//!
//! - **Intake** hands a committed event's deliveries straight to the window while
//!   there is room and nothing is left behind in the table; otherwise it leaves
//!   them to the refill (which then reads them in order, oldest first).
//! - **The refill** (one task) tops the window up once it is half empty: first
//!   retries that are due (the index of retries by due time), then fresh work
//!   (never tried, replayed, or interrupted while `processing`), read in id order
//!   from a cursor. Work left in the table behind the cursor (intake that found no
//!   room, a replay, a delivery whose turn came) moves the cursor back.
//! - **Waiting retries** stay in the table: one timer, set to the next due time
//!   the table or an outcome reports, wakes the refill.
//! - **Strict per-key ordering**: the refill skips a delivery that an older
//!   unfinished one of its handler and value holds back, and a worker checks again
//!   before it starts one ([`OrderingGate`] covers events still being committed).
//!   One held back is let go: when the older one's outcome is terminal, the window
//!   brings back the key's next delivery from the table.
//! - **Backpressure** reads the pending backlog, not the window: fresh deliveries
//!   (counted from the table at startup, then kept by intake, replay and outcomes),
//!   plus an event no handler matched while it holds a place in the window.
//!   What a destination holds back, or an older delivery of the same ordering
//!   key, is not due ([`FreshCounts`]).
//!   Retries waiting for their time are not counted against `QUEUE_MAXSIZE`, so
//!   one dead receiver cannot make intake refuse everyone; `MAX_BACKLOG` counts
//!   them too (`retries`: counted from the table every [`RECOUNT_RETRIES`]).
//!
//! Every delivery in memory is *held*, once: a job is added only when its
//! delivery is not held already, and its id is let go when its place in the queue
//! is given back. A read may predate an outcome committed while it ran, so the
//! rows it returns for deliveries let go meanwhile are dropped. The table may also
//! be read before intake hands its commit over (the refill, or a key's next
//! delivery brought back): such a delivery can run, finish and be let go before
//! its hand-off arrives, so a handed-over job at or below the highest id taken
//! from the table comes in without intake's task, and its worker reads the
//! delivery as it is then (a finished one is not run again).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::model::{DeliveryTask, Finish, Timestamp};
use crate::processing::dispatch::Dispatch;
use crate::processing::fresh::FreshCounts;
use crate::processing::job::Job;
use crate::processing::lanes::Lanes;
use crate::processing::ordering::OrderingGate;
use crate::processing::queue::Queue;
use crate::store::{DueStore, StoreError};

/// Most jobs the window holds, waiting or running.
pub(crate) const WINDOW: usize = 4096;

/// The refill tops the window up once at most this many jobs are in it.
const REFILL_AT: usize = WINDOW / 2;

/// Payload bytes one read of the table brings in at most (and one row more).
const READ_BUDGET: usize = 16 << 20;

/// How often the retries are counted from the table again (`MAX_BACKLOG`).
const RECOUNT_RETRIES: Duration = Duration::from_secs(2);

/// How long to wait before reading again after the database failed.
const READ_RETRY: Duration = Duration::from_secs(1);

/// One instance's window of due work, and the pending backlog behind it.
pub(crate) struct Window {
    me: Weak<Window>,
    due: Arc<dyn DueStore>,
    /// The window itself: the workers take jobs from it.
    queue: Arc<Queue<Job>>,
    state: Mutex<State>,
    /// Wakes the refill: work was left in the table, or a retry falls due sooner.
    wake: Notify,
    /// Fresh deliveries, plus unrouted events in the window (see the module docs).
    /// Signed: an outcome may be counted before its intake (a refill can read and
    /// run a delivery between its commit and its hand-off); the sum is what counts.
    backlog: AtomicI64,
    /// Unfinished deliveries with a `retry_after` (retries, due or waiting), as
    /// last counted from the table: not due work, but pending, so counted
    /// against `MAX_BACKLOG` (SPEC §1).
    retries: AtomicI64,
    /// When an event was last erased (Unix ms; 0: never since startup).
    erased_at: AtomicI64,
    /// Fresh deliveries per destination and ordering key (the backlog's parts):
    /// what a destination or an older delivery of its key holds back is not due
    /// work.
    per_lane: Mutex<FreshCounts>,
    /// `QUEUE_MAXSIZE`.
    capacity: usize,
    /// `MAX_BACKLOG`.
    max_backlog: usize,
    gate: OrderingGate,
    /// The destinations' lanes: the refill leaves out those that hold enough.
    lanes: Arc<Lanes>,
    /// Events with an attempt running now, by count ([`Window::attempt`]): an
    /// attempt marks its delivery `processing` only after a moment, so erasing
    /// asks here too (409 while one runs, SPEC §14).
    attempting: Mutex<HashMap<Uuid, u32>>,
}

/// An attempt of an event running ([`Window::attempt`]); it ends when dropped.
pub(crate) struct Attempting {
    window: Arc<Window>,
    event: Uuid,
}

impl Drop for Attempting {
    fn drop(&mut self) {
        let mut running = self
            .window
            .attempting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = running.get_mut(&self.event) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.event);
            }
        }
    }
}

/// What the window knows of the table, under one lock.
struct State {
    /// Deliveries in memory (waiting in the window or running).
    held: HashSet<Uuid>,
    /// While the refill reads: deliveries let go since it began.
    released: Option<HashSet<Uuid>>,
    /// Deliveries whose turn came while they were held: brought back when let go.
    wanted: HashSet<Uuid>,
    /// The highest delivery id taken from the table (see the module docs): a
    /// hand-off at or below it may come after its delivery ran.
    read_up_to: Uuid,
    /// Fresh work with ids up to here is in memory, finished, or brought back by
    /// whoever holds it back; the refill reads from here on.
    cursor: Uuid,
    /// The lowest point the cursor was moved back to while the refill read.
    rewound: Option<Uuid>,
    /// Fresh work may wait in the table past the cursor.
    spilled: bool,
    /// Work was left in the table since the refill's read began.
    dirty: bool,
    /// When the refill should next look for due retries.
    next_retry: Option<Timestamp>,
}

impl Window {
    /// A window over `due` that answers 429 once the pending backlog reaches
    /// `capacity`.
    pub(crate) fn new(
        due: Arc<dyn DueStore>,
        capacity: usize,
        max_backlog: usize,
        lanes: Arc<Lanes>,
    ) -> Arc<Self> {
        let window = Arc::new_cyclic(|me: &Weak<Window>| {
            let on_release = me.clone();
            Self {
                me: me.clone(),
                due,
                queue: Queue::with_release(move |job: &Job| {
                    if let Some(window) = on_release.upgrade() {
                        window.let_go(job);
                    }
                }),
                state: Mutex::new(State {
                    held: HashSet::new(),
                    released: None,
                    wanted: HashSet::new(),
                    read_up_to: Uuid::nil(),
                    cursor: Uuid::nil(),
                    rewound: None,
                    spilled: true,
                    dirty: false,
                    next_retry: Some(Timestamp::now()),
                }),
                wake: Notify::new(),
                backlog: AtomicI64::new(0),
                retries: AtomicI64::new(0),
                erased_at: AtomicI64::new(0),
                attempting: Mutex::new(HashMap::new()),
                per_lane: Mutex::new(FreshCounts::default()),
                capacity,
                max_backlog,
                gate: OrderingGate::default(),
                lanes: lanes.clone(),
            }
        });
        let me = Arc::downgrade(&window);
        lanes.on_spill(move |from| {
            if let Some(window) = me.upgrade() {
                window.reread_from(from);
            }
        });
        window
    }

    /// A lane has room for work it let go from `from` on: the refill reads the
    /// table from there again (fresh work and due retries).
    fn reread_from(&self, from: Uuid) {
        let mut state = self.lock();
        self.rewind(&mut state, from);
        state.next_retry = Some(Timestamp::now());
    }

    /// Counts `n` fresh deliveries of `handler` with ordering value `key`
    /// (negative: finished or erased).
    pub(crate) fn count_fresh(&self, handler: &str, key: Option<&str>, n: i64) {
        self.count_fresh_all([(handler, key)], n);
    }

    /// Counts `n` fresh deliveries for each of `deliveries` (handler and
    /// ordering value), under one lock.
    fn count_fresh_all<'h>(
        &self,
        deliveries: impl IntoIterator<Item = (&'h str, Option<&'h str>)>,
        n: i64,
    ) {
        let mut lanes = self.per_lane.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = 0;
        for (handler, key) in deliveries {
            lanes.add(handler, key, n);
            total += n;
        }
        drop(lanes);
        self.backlog.fetch_add(total, Ordering::Relaxed);
    }

    /// Fresh deliveries that their own destination holds back (paused, failing,
    /// disabled, at its limits), or an older delivery of their ordering key: not
    /// due work, so not counted against `QUEUE_MAXSIZE` (what runs still counts).
    fn held_back(&self) -> i64 {
        let lanes = self.per_lane.lock().unwrap_or_else(|e| e.into_inner());
        lanes.held(|name| self.lanes.holds_back(name))
    }

    /// The queue the workers take jobs from.
    pub(crate) fn queue(&self) -> Arc<Queue<Job>> {
        self.queue.clone()
    }

    /// Counts the backlog and fills the window once (what `/ready` waits for), then
    /// starts the refill and the settling of events whose status update was lost.
    pub(crate) async fn start(self: &Arc<Self>) -> Result<JoinSet<()>, StoreError> {
        let mut counts = FreshCounts::default();
        let mut fresh = 0u64;
        self.due
            .count_fresh(&mut |handler, key, n| {
                counts.add(handler, key, i64::try_from(n).unwrap_or(i64::MAX));
                fresh = fresh.saturating_add(n);
            })
            .await?;
        let retries = self.due.count_retries().await?;
        self.retries.store(
            i64::try_from(retries).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        // Replaces what intake counted before (the count includes it).
        {
            let mut lanes = self.per_lane.lock().unwrap_or_else(|e| e.into_inner());
            *lanes = counts;
            self.backlog
                .store(i64::try_from(fresh).unwrap_or(i64::MAX), Ordering::Relaxed);
        }
        self.fill().await?;
        let loaded = self.queue.depth();
        if fresh > 0 || loaded > 0 {
            info!(
                backlog = fresh,
                loaded, "recovered unfinished work: backlog counted, window filled"
            );
        }
        let mut tasks = JoinSet::new();
        tasks.spawn(self.clone().refill());
        tasks.spawn(self.clone().settle_lost());
        tasks.spawn(self.clone().recount_retries());
        Ok(tasks)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Free places in the window.
    fn room(&self) -> usize {
        WINDOW.saturating_sub(self.active())
    }

    /// Jobs in the window that are not parked in their destination's lane.
    fn active(&self) -> usize {
        self.lanes.active(self.queue.depth())
    }

    fn add_backlog(&self, n: usize) {
        self.backlog
            .fetch_add(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    fn sub_backlog(&self, n: usize) {
        self.backlog
            .fetch_sub(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Queues jobs taken from the table (a read, a delivery brought back), and
    /// notes the highest delivery id among them.
    fn enqueue_read(&self, state: &mut State, jobs: Vec<Job>) -> usize {
        let highest = jobs.iter().filter_map(|job| match job {
            Job::Deliver { delivery, .. } => Some(*delivery),
            Job::Settle(_) | Job::Unrouted(_) => None,
        });
        state.read_up_to = highest.fold(state.read_up_to, Ord::max);
        self.enqueue(state, jobs)
    }

    /// Queues the jobs whose delivery is not held yet (and holds them).
    fn enqueue(&self, state: &mut State, jobs: impl IntoIterator<Item = Job>) -> usize {
        let fresh: Vec<Job> = jobs
            .into_iter()
            .filter(|job| match job {
                Job::Deliver { delivery, .. } => state.held.insert(*delivery),
                Job::Settle(_) | Job::Unrouted(_) => true,
            })
            .collect();
        let n = fresh.len();
        self.queue.extend(fresh);
        n
    }

    /// Fresh work from `id` on is left in the table: the refill reads it.
    fn rewind(&self, state: &mut State, id: Uuid) {
        let before = Uuid::from_u128(id.as_u128().saturating_sub(1));
        state.cursor = state.cursor.min(before);
        state.rewound = Some(state.rewound.map_or(before, |r| r.min(before)));
        state.spilled = true;
        state.dirty = true;
        self.wake.notify_one();
    }

    /// Something the table held was taken away outside the window (an event was
    /// erased): the next delivery of an ordering key it headed is now the key's
    /// first, wherever the cursor is, so the refill reads the table again from its
    /// start, once. And a job that carries intake's copy of its task, made before
    /// now, may be of the erased event: its task is read again before it runs
    /// ([`Window::copy_may_be_stale`]).
    pub(crate) fn reread(&self) {
        self.erased_at
            .fetch_max(Timestamp::now().millis(), Ordering::Relaxed);
        let mut state = self.lock();
        self.rewind(&mut state, Uuid::nil());
    }

    /// Whether intake's copy of `delivery`'s task may be of an event erased since
    /// (the delivery was made before the last erasure: its id is a UUID v7, whose
    /// first 48 bits are its Unix time in milliseconds). Erasures are rare, so
    /// reading the task again then costs little; otherwise nothing is read.
    pub(crate) fn copy_may_be_stale(&self, delivery: Uuid) -> bool {
        let made = i64::try_from(delivery.as_u128() >> 80).unwrap_or(i64::MAX);
        made <= self.erased_at.load(Ordering::Relaxed)
    }

    /// A retry falls due at `at`: the refill looks for it then.
    pub(crate) fn retry_due_at(&self, at: Timestamp) {
        let mut state = self.lock();
        if state.next_retry.is_none_or(|t| at < t) {
            state.next_retry = Some(at);
            self.wake.notify_one();
        }
    }

    /// Brings a delivery the window does not hold back into it (without its task:
    /// the worker reads it as it is then), or leaves it to the refill.
    fn bring_back(&self, state: &mut State, delivery: Uuid, event: Uuid) {
        if state.held.contains(&delivery) {
            return;
        }
        if self.room() > 0 {
            self.enqueue_read(state, vec![Job::deliver(delivery, event)]);
        } else {
            // Fresh or a due retry: both reads find it.
            self.rewind(state, delivery);
            state.next_retry = Some(Timestamp::now());
        }
    }

    /// A job's place was given back (its outcome recorded, or let go).
    fn let_go(&self, job: &Job) {
        match job {
            Job::Deliver {
                delivery, event, ..
            } => {
                let mut state = self.lock();
                state.held.remove(delivery);
                if let Some(released) = &mut state.released {
                    released.insert(*delivery);
                }
                if state.wanted.remove(delivery) {
                    self.bring_back(&mut state, *delivery, *event);
                }
            }
            Job::Unrouted(_) => self.sub_backlog(1),
            Job::Settle(_) => {}
        }
    }

    /// The next delivery of `handler` and `value` may run: brings it in.
    async fn release_key(self: Arc<Self>, handler: String, value: String) {
        let head = loop {
            match self.due.head_of_key(&handler, &value).await {
                Ok(head) => break head,
                Err(e) => {
                    warn!(handler, error = %e, "could not read the next delivery of an ordering key; retrying");
                    tokio::time::sleep(READ_RETRY).await;
                }
            }
        };
        let Some((delivery, event, retry_after)) = head else {
            return;
        };
        if let Some(at) = retry_after.filter(|t| *t > Timestamp::now()) {
            return self.retry_due_at(at);
        }
        let mut state = self.lock();
        if state.held.contains(&delivery) {
            // Its worker may be letting it go right now: look again when it does.
            state.wanted.insert(delivery);
        } else {
            self.bring_back(&mut state, delivery, event);
        }
    }

    /// Tops the window up once: due retries, then fresh work. True when the refill
    /// should go on at once (more may be waiting).
    async fn fill(&self) -> Result<bool, StoreError> {
        let mut more = false;
        let now = Timestamp::now();
        let room = self.room();
        let retries_due = {
            let mut state = self.lock();
            let due = state.next_retry.is_some_and(|t| t <= now);
            if due {
                state.next_retry = None;
                state.released = Some(HashSet::new());
            }
            (due, state.held.len())
        };
        if let (true, held) = retries_due {
            // Due retries already held come back too; ask for enough to fill the room.
            let limit = clamp(room.saturating_add(held));
            let skip = self.lanes.capped();
            let read = self.due.due_retries(now, limit, READ_BUDGET, &skip).await;
            // Their due retries are read again when they have room.
            self.lanes.skipped(&skip, Uuid::max());
            let rows = match read {
                Ok(rows) => rows,
                Err(e) => {
                    let mut state = self.lock();
                    state.released = None;
                    state.next_retry = Some(now);
                    return Err(e);
                }
            };
            let exhausted = short(&rows, limit);
            let next = if exhausted {
                self.due.next_retry(now).await
            } else {
                Ok(Some(now))
            };
            let mut state = self.lock();
            self.add_read(&mut state, rows);
            match next {
                Ok(next) => {
                    state.next_retry = match (state.next_retry, next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Err(e) => {
                    state.next_retry = Some(now);
                    return Err(e);
                }
            }
            more |= !exhausted;
        }
        let from = {
            let mut state = self.lock();
            if !state.spilled || self.room() == 0 {
                return Ok(more);
            }
            state.rewound = None;
            state.dirty = false;
            state.released = Some(HashSet::new());
            state.cursor
        };
        let limit = clamp(self.room());
        let skip = self.lanes.capped();
        self.lanes.skipped(&skip, from);
        let (rows, exhausted, last) = match self.read_fresh(from, limit, &skip).await {
            Ok(read) => read,
            Err(e) => {
                self.lock().released = None;
                return Err(e);
            }
        };
        let mut state = self.lock();
        self.add_read(&mut state, rows);
        let mut cursor = last.map_or(from, |l| l.max(from));
        if let Some(r) = state.rewound.take() {
            cursor = cursor.min(r);
        }
        state.cursor = cursor;
        if exhausted && !state.dirty {
            state.spilled = false;
        }
        Ok(more || !exhausted || state.dirty)
    }

    /// Reads fresh work after `from`: the ids first, then the tasks of those not
    /// held already (a read from a rewound cursor passes over work the window
    /// has: its payloads are not fetched again) whose lanes have room
    /// ([`Lanes::room_for`]). Returns the tasks, whether nothing
    /// more waits past them, and where the next read starts.
    ///
    /// A read that comes back short has passed over everything stored when it
    /// began: the next one starts after the last delivery id stored then, not
    /// after the last id it returned. What it passed over without returning is a
    /// skipped destination's (its lane brings the cursor back when it has room,
    /// [`Lanes::skipped`]) or held back by its ordering key (let go when its turn
    /// comes); anything committed since is handed to the window or rewinds it. So
    /// a paused destination's backlog is walked once, not by every refill — a
    /// replay of 200,000 dead letters to a paused destination rewound the window
    /// after each page of 1,000, and each refill walked the whole growing backlog.
    async fn read_fresh(
        &self,
        from: Uuid,
        limit: u32,
        skip: &[String],
    ) -> Result<(Vec<DeliveryTask>, bool, Option<Uuid>), StoreError> {
        let stored = if skip.is_empty() {
            None
        } else {
            self.due.last_delivery_id().await?
        };
        let read = self.due.fresh_ids_after(from, limit, skip).await?;
        let (count, last_read) = (read.len(), read.last().map(|(id, _)| *id));
        let unheld: Vec<(Uuid, String)> = {
            let state = self.lock();
            read.into_iter()
                .filter(|(id, _)| !state.held.contains(id))
                .collect()
        };
        let wanted = self.lanes.room_for(unheld);
        let rows = self.due.tasks_of(&wanted, READ_BUDGET).await?;
        if cut_by_budget(&rows) {
            // Cut short by the budget: read on from the last task read.
            let last = rows.last().map(|t| t.delivery_id);
            return Ok((rows, false, last));
        }
        let exhausted = count < limit as usize;
        let last = match exhausted {
            true => last_read.max(stored),
            false => last_read,
        };
        Ok((rows, exhausted, last))
    }

    /// Adds what a read returned, except deliveries held or let go since it began.
    fn add_read(&self, state: &mut State, rows: Vec<DeliveryTask>) {
        let released = state.released.take().unwrap_or_default();
        let jobs: Vec<Job> = rows
            .into_iter()
            .filter(|t| !released.contains(&t.delivery_id))
            .map(Job::claimed)
            .collect();
        self.enqueue_read(state, jobs);
    }

    /// Keeps the window filled while there is room; sleeps until work is left in
    /// the table or the next retry falls due.
    async fn refill(self: Arc<Self>) {
        let mut failing = false;
        loop {
            self.lanes.wait_active_at_most(&self.queue, REFILL_AT).await;
            let woken = self.wake.notified();
            match self.fill().await {
                Ok(true) => continue,
                Ok(false) => {
                    if failing {
                        info!("reading due work works again");
                        failing = false;
                    }
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "could not read due work; retrying");
                        failing = true;
                    }
                    tokio::time::sleep(READ_RETRY).await;
                    continue;
                }
            }
            let next = self.lock().next_retry;
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                Duration::from_millis(
                    u64::try_from(t.millis() - Timestamp::now().millis()).unwrap_or(0),
                )
            });
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Counts the retries from the table every [`RECOUNT_RETRIES`] (as
    /// PostgreSQL's claimer does): `MAX_BACKLOG` guards the disk, and a count a
    /// moment old serves it, sees erasures, and keeps the outcomes' path free of
    /// bookkeeping.
    async fn recount_retries(self: Arc<Self>) {
        loop {
            tokio::time::sleep(RECOUNT_RETRIES).await;
            match self.due.count_retries().await {
                Ok(n) => self
                    .retries
                    .store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed),
                Err(e) => debug!(error = %e, "could not count the retries"),
            }
        }
    }

    /// Settles the unfinished events none of whose deliveries is unfinished (a
    /// status update lost), in the background.
    async fn settle_lost(self: Arc<Self>) {
        match self.due.unsettled().await {
            Ok(events) if !events.is_empty() => {
                info!(
                    events = events.len(),
                    "settling events whose status was not updated"
                );
                let mut state = self.lock();
                self.enqueue(&mut state, events.into_iter().map(Job::Settle));
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "could not look for unsettled events"),
        }
    }

    /// An attempt of `event` starts; it runs until the answer is dropped.
    pub(crate) fn attempt(self: &Arc<Self>, event: Uuid) -> Attempting {
        *self
            .attempting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(event)
            .or_default() += 1;
        Attempting {
            window: self.clone(),
            event,
        }
    }

    /// Whether an attempt of `event` is running now.
    pub(crate) fn attempting(&self, event: Uuid) -> bool {
        self.attempting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&event)
    }

    /// An ordered delivery is about to be committed (intake).
    pub(crate) fn line_up(&self, handler: &str, value: &str, delivery: Uuid) {
        self.gate.line_up(handler, value, delivery);
    }

    /// An ordered delivery lined up was committed: the table knows it now.
    pub(crate) fn committed(&self, handler: &str, value: &str, delivery: Uuid) {
        self.gate.leave(handler, value, delivery);
    }

    /// An ordered delivery lined up was not committed: whoever it held back goes.
    pub(crate) fn withdrawn(&self, handler: &str, value: &str, delivery: Uuid) {
        self.gate.leave(handler, value, delivery);
        if let Some(me) = self.me.upgrade() {
            tokio::spawn(me.release_key(handler.to_owned(), value.to_owned()));
        }
    }
}

/// A row count as a `LIMIT`.
fn clamp(n: usize) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// True when a read returned less than it asked for and was not cut short by the
/// byte budget: nothing more waits past it.
fn short(rows: &[DeliveryTask], limit: u32) -> bool {
    rows.len() < limit as usize && !cut_by_budget(rows)
}

/// True when a read's payloads reached the byte budget (it stopped there).
fn cut_by_budget(rows: &[DeliveryTask]) -> bool {
    rows.iter().map(|t| t.payload.len()).sum::<usize>() >= READ_BUDGET
}

impl Dispatch for Window {
    /// Committed work: counted in the backlog, and handed to the window while
    /// there is room and nothing waits in the table before it; else left there.
    fn submit(&self, jobs: Vec<Job>) {
        let deliveries = jobs
            .iter()
            .filter(|j| matches!(j, Job::Deliver { .. }))
            .count();
        // New work is counted per destination here; a replay counts its own
        // (its jobs carry no task) through `count_fresh`.
        self.count_fresh_all(
            jobs.iter().filter_map(|job| match job {
                Job::Deliver { task: Some(t), .. } => {
                    Some((t.handler.as_str(), t.ordering_value.as_deref()))
                }
                _ => None,
            }),
            1,
        );
        let mut state = self.lock();
        // Straight in while nothing waits in the table before it, or while the
        // window is less than half full whatever waits there: work that one
        // destination leaves in the table must not delay another's new work. (The
        // refill still reads the table from its cursor; it skips what is held,
        // and a worker checks an ordering key's turn before it starts.)
        let half_empty = self.active() + jobs.len() <= REFILL_AT;
        if (!state.spilled || half_empty) && self.room() >= jobs.len() {
            let unrouted = jobs.len() - deliveries;
            self.add_backlog(unrouted);
            let read_up_to = state.read_up_to;
            let jobs = jobs.into_iter().map(|job| maybe_ran(job, read_up_to));
            self.enqueue(&mut state, jobs);
            return;
        }
        // An unrouted event is complete already: nothing to leave in the table.
        let first = jobs
            .iter()
            .filter_map(|j| match j {
                Job::Deliver { delivery, .. } => Some(*delivery),
                _ => None,
            })
            .min();
        if let Some(first) = first {
            self.rewind(&mut state, first);
        }
    }

    fn depth(&self) -> usize {
        let all = self.backlog.load(Ordering::Relaxed);
        let due = if all < i64::try_from(self.capacity).unwrap_or(i64::MAX) {
            all // below the bound whatever is held back: no need to look
        } else {
            all - self.held_back()
        };
        usize::try_from(due.max(0)).unwrap_or(usize::MAX)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A handed-over job whose delivery the window may have taken from the table
/// already (its id at or below `read_up_to`) loses intake's task: it may have run
/// since, and its worker reads what it is now.
fn maybe_ran(job: Job, read_up_to: Uuid) -> Job {
    match job {
        Job::Deliver {
            delivery,
            event,
            task: Some(_),
        } if delivery <= read_up_to => Job::deliver(delivery, event),
        job => job,
    }
}

impl Window {
    /// Due work at `QUEUE_MAXSIZE`, or every pending delivery at `MAX_BACKLOG`:
    /// intake answers 429 with this `Retry-After`.
    pub(crate) fn overloaded(&self) -> Option<Duration> {
        let pending = self
            .backlog
            .load(Ordering::Relaxed)
            .saturating_add(self.retries.load(Ordering::Relaxed));
        let all = usize::try_from(pending.max(0)).unwrap_or(0);
        (Dispatch::depth(self) >= self.capacity || all >= self.max_backlog)
            .then_some(Duration::from_secs(1))
    }
}

/// What the workers ask of the window ([`Feed::Local`](crate::processing::feed::Feed)):
/// what is not run now waits in the table, and the window brings it in when it is
/// due.
impl Window {
    /// The store failed before the attempt of `job` ran: it comes back after
    /// `delay`.
    pub(crate) fn put_back_after(&self, job: Job, delay: Duration) {
        let (
            Job::Deliver {
                delivery, event, ..
            },
            Some(me),
        ) = (job, self.me.upgrade())
        else {
            return;
        };
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut state = me.lock();
            me.bring_back(&mut state, delivery, event);
        });
    }

    /// Whether the attempt of `task` may start now: false while an older delivery
    /// of its ordering key is being committed or unfinished.
    pub(crate) async fn admit(&self, task: &DeliveryTask) -> Result<bool, StoreError> {
        let Some(value) = &task.ordering_value else {
            return Ok(true);
        };
        if self
            .gate
            .older_committing(&task.handler, value, task.delivery_id)
        {
            return Ok(false);
        }
        let older = self
            .due
            .older_unfinished(&task.handler, value, task.delivery_id)
            .await?;
        Ok(!older)
    }

    /// An attempt's outcome was committed: the backlog's count, and the next
    /// delivery of its ordering key once it is finished.
    pub(crate) fn recorded(
        &self,
        handler: &str,
        finish: &Finish,
        fresh: bool,
        ordering: Option<&(String, String)>,
    ) {
        if fresh {
            self.count_fresh(handler, ordering.map(|(_, value)| value.as_str()), -1);
        }
        if let (true, Some((handler, value)), Some(me)) =
            (finish.status.is_terminal(), ordering, self.me.upgrade())
        {
            tokio::spawn(me.release_key(handler.clone(), value.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SqliteSynchronous;
    use crate::model::{NewEvent, Status};
    use crate::store::Store;
    use crate::store::sqlite::SqliteStore;

    /// The race behind a rare duplicate delivery (and a lost attempt row: both
    /// runs were attempt 1): the refill read a just-committed delivery before
    /// intake handed it over, it ran and finished, and the late hand-off queued it
    /// again with intake's task, `pending` and never tried.
    #[tokio::test]
    async fn a_hand_off_that_comes_after_its_delivery_ran_does_not_bring_intakes_task() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("window.db");
        let store = Arc::new(
            SqliteStore::open(&path, SqliteSynchronous::Normal)
                .await
                .expect("open"),
        );
        let window = Window::new(store.clone(), 100, 1_000, Lanes::new(Some(WINDOW)));
        let event = NewEvent::with_one_delivery("late-hand-off");
        let delivery = event.deliveries[0].id;
        store.insert_event(event.clone()).await.expect("commit");
        // The refill finds it in the table first, and its attempt is recorded.
        window.fill().await.expect("fill");
        let ran = window.queue().take().await.expect("the read's job");
        assert!(matches!(&*ran, Job::Deliver { delivery: d, .. } if *d == delivery));
        let finish = Finish {
            ordered: false,
            delivery_id: delivery,
            event_id: event.id,
            status: Status::Completed,
            attempts: 1,
            last_error: None,
            retry_after: None,
            attempt: None,
        };
        store.finish(finish).await.expect("outcome");
        drop(ran);
        let now = store.delivery_task(delivery).await.expect("read");
        assert!(
            now.is_some_and(|t| t.status.is_terminal()),
            "what a worker reads for a job without its task: finished, not run again"
        );
        // Intake's hand-off, late.
        window.submit(Job::for_new_event(&event));
        let late = window.queue().take().await.expect("the hand-off's job");
        let Job::Deliver { task, .. } = &*late else {
            panic!("not a delivery: {:?}", *late);
        };
        assert!(
            task.is_none(),
            "the hand-off brought intake's task (pending, never tried): {task:?}"
        );
        // Whereas a hand-off the table has not been read past keeps it.
        let next = NewEvent::with_one_delivery("on-time");
        store.insert_event(next.clone()).await.expect("commit");
        window.submit(Job::for_new_event(&next));
        let on_time = window.queue().take().await.expect("the hand-off's job");
        assert!(matches!(&*on_time, Job::Deliver { task: Some(_), .. }));
    }
}
