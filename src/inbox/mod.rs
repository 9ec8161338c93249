//! The one path in: commit, then hand what was committed to processing.
//!
//! [`Inbox`] is built once at startup by [`new_inbox`], which is where the choice
//! between the backends is made, once, as a [`Feed`]. The database is the queue on
//! both: on SQLite (one instance) committed work goes to this instance's window of
//! due work, which refills itself from the table and keeps per-key order; on
//! PostgreSQL (several instances) committed work wakes the claimers, and the claim
//! query keeps the order. [`Inbox::start`] gives the app what it starts the
//! workers with.
//!
//! Every writer of new work goes through the inbox: intake and the sources
//! ([`Inbox::accept`]), replay ([`Inbox::replay`]), the subscribers API
//! ([`Inbox::change_subscribers`]). They run their commit *and* the step after it (queueing the jobs,
//! releasing the ordering gate, reloading the routing table) as one piece of work
//! that runs to its end ([`to_end`]). A client that hangs up makes the server drop the
//! request's future, which used to cancel it between the commit and the hand-off:
//! the event stayed `pending` until a restart, and an ordered key was blocked
//! behind it. The work runs on the request's own task while the request waits;
//! a dropped request spawns what is left of it, which runs to its end.
//!
//! Ordered deliveries take their place in line before their commit (in the ordering
//! gate of the window, SQLite), so that a younger delivery of their key does not
//! start meanwhile; a drop guard gives the place back, whatever ends the task.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use uuid::Uuid;

use crate::config::Config;
use crate::model::NewEvent;
use crate::processing::claims::Claims;
use crate::processing::feed::Feed;
use crate::processing::job::Job;
use crate::processing::lanes::Lanes;
use crate::processing::queue::Queue;
use crate::processing::window::{WINDOW, Window};
use crate::registry::live::LiveRegistry;
use crate::store::pull::{PullBatch, PulledEvent};
use crate::store::{Inserted, PendingDelivery, ReplayFilter, Store, StoreError, WorkStore};
use crate::trace_context::TraceContext;
use to_end::to_end;

mod admission;
mod to_end;

use admission::Rules;
pub(crate) use admission::{
    EventType, Fingerprint, IdempotencyKey, Origin, Outcome, Payload, Refusal, Submission,
};

/// A pull source's fetched items and the cursor after them, for
/// [`Inbox::accept_pulled`].
pub(crate) struct Pulled {
    /// The source's name.
    pub(crate) source: String,
    /// The items, in the order fetched.
    pub(crate) items: Vec<PulledItem>,
    /// The JSON text of the cursor after them.
    pub(crate) cursor: Option<String>,
    /// The cursor version they were fetched from.
    pub(crate) version: i64,
}

/// One fetched item: the submission and what the source says of it besides.
pub(crate) struct PulledItem {
    /// The event ([`Origin::Source`]).
    pub(crate) submission: Submission,
    /// The source's own sequence number, when it gives one.
    pub(crate) sequence: Option<i64>,
    /// The source's own timestamp, when it gives one.
    pub(crate) emitted_at: Option<crate::model::Timestamp>,
}
/// Dead letters replayed per transaction (`Inbox::replay`).
pub(crate) const REPLAY_PAGE: u32 = 250;

/// Why committing through the inbox failed.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The store refused or could not be reached; for intake: nothing was stored.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change was committed but the routing table could not be rebuilt.
    #[error("the routing table could not be rebuilt: {0}")]
    Routing(#[from] crate::registry::RegistryError),
    /// The commit panicked.
    #[error("the commit ended abnormally (it panicked)")]
    Panicked,
}

/// The one path in: commits new work and hands it to processing. Cheap to clone.
#[derive(Clone)]
pub struct Inbox(Arc<Parts>);

/// What the inbox is made of; the backend-specific part, [`Feed`], is chosen by
/// [`new_inbox`].
struct Parts {
    store: Arc<dyn Store>,
    registry: Arc<LiveRegistry>,
    /// Where committed work goes: the window of due work (SQLite, whose ordering
    /// gate ordered deliveries line up in before their commit) or the claimers
    /// (PostgreSQL, where the claim query orders).
    feed: Feed,
    /// Every destination's lane (what the workers may start; operators' pauses).
    lanes: Arc<Lanes>,
    /// The sources' key namespaces and shutdown.
    rules: Rules,
    /// Serialises "read the subscribers, rebuild the table", so that two changes
    /// that finish together cannot install an older reading over a newer one.
    reloading: tokio::sync::Mutex<()>,
    /// `hookbox_events_received_total`, by label.
    received: crate::telemetry::ReceivedCounters,
}

/// What admission needs to know besides the routing table.
pub(crate) struct Admission {
    /// The sources' names: `POST /webhooks` may not use keys in their namespaces.
    pub(crate) sources: Vec<String>,
    /// Pushed events are refused once shutdown has begun.
    pub(crate) lifecycle: Arc<crate::lifecycle::Lifecycle>,
}

/// Builds the inbox and the processing it hands work to, for the database opened
/// (`work`): the one place that chooses between one instance on SQLite and
/// several sharing PostgreSQL.
pub(crate) fn new_inbox(
    config: &Config,
    store: Arc<dyn Store>,
    work: WorkStore,
    registry: Arc<LiveRegistry>,
    admission: Admission,
) -> Inbox {
    // SQLite lets go what a lane cannot keep (the window reads it again); a
    // PostgreSQL claim is held until it runs, so lanes park all they are given.
    let lanes = Lanes::new(matches!(work, WorkStore::Due(_)).then_some(WINDOW));
    let feed = match work {
        WorkStore::Due(due) => Feed::Local(Window::new(
            due,
            config.queue_maxsize,
            config.max_backlog,
            lanes.clone(),
        )),
        WorkStore::Claims(claims) => Feed::Shared(Claims::new(
            claims,
            config.queue_maxsize,
            config.max_backlog,
            config.worker_count,
            config.lease_timeout,
            lanes.clone(),
        )),
    };
    Inbox(Arc::new(Parts {
        store,
        registry,
        feed,
        lanes,
        rules: Rules {
            namespaces: admission.sources.into_iter().collect(),
            lifecycle: admission.lifecycle,
        },
        reloading: tokio::sync::Mutex::new(()),
        received: Default::default(),
    }))
}

/// What the workers run with once [`Inbox::start`] has loaded or begun claiming
/// the work.
pub(crate) struct Started {
    /// Where the workers take jobs from.
    pub(crate) queue: Arc<Queue<Job>>,
    /// Who fills `queue` besides the inbox.
    pub(crate) feed: Feed,
    /// Every destination's lane.
    pub(crate) lanes: Arc<Lanes>,
    /// Background tasks (refilling the window; claiming, leases, following the
    /// subscribers); dropping the set aborts them.
    pub(crate) tasks: JoinSet<()>,
}

impl Inbox {
    /// Recovery, then the feed ([`Feed::start`]); on PostgreSQL also following the
    /// subscribers that other instances change, until `rest` is cancelled.
    pub(crate) async fn start(
        &self,
        claiming: &CancellationToken,
        rest: &CancellationToken,
    ) -> Result<Started, StoreError> {
        let feed = self.0.feed.clone();
        let mut tasks = feed.start(claiming, rest).await?;
        if feed.is_shared() {
            let (stop, follow) = (rest.clone(), self.clone().follow_subscribers());
            tasks.spawn(async move {
                stop.run_until_cancelled_owned(follow).await;
            });
        }
        Ok(Started {
            queue: feed.queue(),
            feed,
            lanes: self.lanes(),
            tasks,
        })
    }

    /// True when several instances may share the database (PostgreSQL).
    pub(crate) fn is_shared(&self) -> bool {
        self.0.feed.is_shared()
    }

    /// After the workers stopped: gives back what this instance still holds
    /// ([`Feed::release`]).
    pub(crate) async fn release(&self) {
        self.0.feed.release().await;
    }
}

/// The ordered deliveries of one new event, lined up in the window's gate while
/// they are committed; dropped without [`Place::keep`] (nothing was created), it
/// withdraws them, and whoever they held back goes.
struct Place {
    inbox: Inbox,
    ordered: Vec<(String, String, Uuid)>,
}

impl Place {
    fn take(inbox: &Inbox, event: &NewEvent) -> Self {
        let ordered = event
            .deliveries
            .iter()
            .filter_map(|d| {
                let value = d.ordering_value.clone()?;
                inbox
                    .line_up(&d.handler, &value, d.id)
                    .then(|| (d.handler.clone(), value, d.id))
            })
            .collect();
        Self {
            inbox: inbox.clone(),
            ordered,
        }
    }

    /// The deliveries were committed: the table keeps their place now.
    fn keep(mut self) {
        if let Some(window) = self.inbox.0.feed.window() {
            for (handler, value, delivery) in self.ordered.drain(..) {
                window.committed(&handler, &value, delivery);
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(window) = self.inbox.0.feed.window() {
            for (handler, value, delivery) in self.ordered.drain(..) {
                window.withdrawn(&handler, &value, delivery);
            }
        }
    }
}

/// Room in this instance's queue set aside for one new event's deliveries, to be
/// stored claimed by this instance ([`NewEvent::claim_lease`]); given back when
/// dropped unless the commit used it ([`Reservation::used`]).
struct Reservation {
    feed: Feed,
    n: usize,
}

impl Reservation {
    /// Asks for room for `event`'s claimable deliveries and sets its lease if
    /// there is (clears it if not). An event with a claimable delivery for a
    /// destination that leaves its work in the table is not claimed at all: that
    /// delivery waits `pending` (a paused destination's work is not running), and
    /// the claim loop takes the others.
    fn take(feed: &Feed, event: &mut NewEvent) -> Self {
        let n = event.claimable();
        let dispatch = feed.dispatch();
        let left = n > 0
            && event
                .deliveries
                .iter()
                .any(|d| d.ordering_value.is_none() && dispatch.leaves_unclaimed(&d.handler));
        event.claim_lease = if left { None } else { dispatch.reserve(n) };
        Self {
            feed: feed.clone(),
            n: if event.claim_lease.is_some() { n } else { 0 },
        }
    }

    /// The deliveries were committed claimed: [`Dispatch::submit`] uses the room.
    fn used(mut self) {
        self.n = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.n > 0 {
            self.feed.dispatch().unreserve(self.n);
        }
    }
}

/// How often an instance sharing PostgreSQL re-reads the subscribers (besides
/// whenever another instance announces a change).
pub(crate) const SUBSCRIBER_REFRESH: Duration = Duration::from_secs(1);

/// How many times one event is routed again because the subscribers changed
/// while it was being committed.
const MAX_REROUTES: u32 = 5;

impl Inbox {
    /// How full processing is, for intake's backpressure: `Some(Retry-After)` while
    /// intake should answer 429 (the queue at `QUEUE_MAXSIZE`, or the backlog at
    /// `MAX_BACKLOG`).
    pub fn overloaded(&self) -> Option<Duration> {
        self.0.feed.overloaded()
    }

    /// How many more due deliveries fit under `QUEUE_MAXSIZE` now.
    pub(crate) fn room(&self) -> usize {
        self.0.feed.room()
    }

    /// Work waiting or running (`hookbox_queue_depth`).
    pub fn depth(&self) -> usize {
        self.0.feed.dispatch().depth()
    }

    /// The bound at which intake answers 429 (`hookbox_queue_capacity`).
    pub fn capacity(&self) -> usize {
        self.0.feed.dispatch().capacity()
    }

    /// Lines an ordered delivery up while it is committed (one instance, SQLite);
    /// false where there is no line (PostgreSQL: the claim query orders).
    fn line_up(&self, handler: &str, value: &str, delivery: Uuid) -> bool {
        let Some(window) = self.0.feed.window() else {
            return false;
        };
        window.line_up(handler, value, delivery);
        true
    }

    /// Admits a submission: refuses what the rules forbid ([`Refusal`]), routes it,
    /// commits it with its deliveries and hands their jobs to processing; or finds
    /// the event that already holds its key ([`Outcome::Duplicate`] for the same
    /// type and payload, whose `received_count` the commit raised, else
    /// [`Outcome::KeyReused`]; nothing is queued then).
    ///
    /// When the subscribers changed since the event was routed (another instance
    /// changed them, PostgreSQL), the commit is refused: the routing table is
    /// reloaded, the event routed again and committed with the new deliveries. The
    /// commit and the hand-off run on if the caller is dropped (a client that hung
    /// up).
    pub async fn accept(&self, mut submission: Submission) -> Result<Outcome, InboxError> {
        if !crate::trace_export::enabled() {
            return self.commit(submission).await;
        }
        let trace = submission
            .trace
            .get_or_insert_with(|| TraceContext::accept(None, None))
            .clone();
        let event_type = submission.event_type.as_str().to_owned();
        let pushed = matches!(submission.origin, Origin::Webhooks | Origin::Source(_));
        let result = self.commit(submission).await;
        let (event_id, status) = match &result {
            Ok(outcome) => (outcome.event().map(|e| e.id), outcome.http_status()),
            Err(_) => (None, 503),
        };
        crate::trace_export::intake(&trace, event_id, &event_type, pushed.then_some(status));
        result
    }

    /// [`Inbox::accept`] without its span.
    async fn commit(&self, submission: Submission) -> Result<Outcome, InboxError> {
        let (mut event, origin) = match self.0.rules.admit(&self.0.registry, submission) {
            Ok(admitted) => admitted,
            Err(refusal) => return Ok(Outcome::Refused(refusal)),
        };
        let mut place = Place::take(self, &event);
        let inbox = self.clone();
        // Only a shared store refuses a stale routing and needs the event again: the
        // others are handed it, not a copy.
        let shared = self.is_shared();
        to_end(async move {
            let mut attempts = 0;
            loop {
                let reservation = Reservation::take(&inbox.0.feed, &mut event);
                let jobs = Job::for_new_event(&event);
                let unrouted = event.deliveries.is_empty();
                let (event_type, payload_sha256) =
                    (event.event_type.clone(), event.payload_sha256.clone());
                let (sent, kept) = if shared {
                    (event.clone(), Some(event))
                } else {
                    (event, None)
                };
                match inbox.0.store.insert_event(sent).await {
                    Ok(inserted) => {
                        if inserted.created {
                            place.keep();
                            reservation.used();
                            inbox.0.feed.dispatch().submit(jobs);
                            inbox.count_received(&inserted.event.event_type, unrouted);
                        }
                        return Ok(admission::outcome(inserted, &event_type, &payload_sha256));
                    }
                    Err(StoreError::StaleRouting) if attempts < MAX_REROUTES => {
                        let Some(again) = kept else {
                            return Err(StoreError::StaleRouting.into());
                        };
                        event = again;
                        attempts += 1;
                        drop(place);
                        // Unless another request has reloaded the table meanwhile.
                        if inbox.0.registry.versioned().1 == event.routing_version {
                            inbox.reload_routing().await?;
                        }
                        match admission::route(
                            &inbox.0.registry,
                            &event.event_type,
                            &event.payload,
                            &origin,
                        ) {
                            Ok((deliveries, version)) => {
                                event.deliveries = deliveries;
                                event.routing_version = version;
                            }
                            Err(refusal) => return Ok(Outcome::Refused(refusal)),
                        }
                        place = Place::take(&inbox, &event);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
        .await
    }

    /// What [`Inbox::accept`] would refuse `submission` for, without committing it
    /// (intake's answer to a recently seen key checks this first).
    pub(crate) fn refusal(&self, submission: &Submission) -> Option<Refusal> {
        self.0.rules.refusal(&self.0.registry, submission)
    }

    /// Admits a pull source's fetched items as [`Inbox::accept`] does, and commits
    /// those admitted through `commit` (their events and the cursor after them in
    /// one transaction, [`crate::store::pull`]) before handing their jobs to
    /// processing. One outcome per item, in order; `None` when the commit was
    /// refused because the cursor moved (nothing stored). The caller is the
    /// adapter's own task, which is never cancelled mid-commit, so this runs in it.
    pub(crate) async fn accept_pulled<F, Fut>(
        &self,
        pulled: Pulled,
        commit: F,
    ) -> Result<Option<Vec<Outcome>>, StoreError>
    where
        F: FnOnce(PullBatch) -> Fut,
        Fut: Future<Output = Result<Option<Vec<Inserted>>, StoreError>>,
    {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(pulled.items.len());
        let mut prepared = Vec::new();
        let mut events = Vec::new();
        for item in pulled.items {
            match self.0.rules.admit(&self.0.registry, item.submission) {
                Err(refusal) => outcomes.push(Some(Outcome::Refused(refusal))),
                Ok((event, _)) => {
                    outcomes.push(None);
                    let traced = event
                        .trace
                        .clone()
                        .filter(|_| crate::trace_export::enabled());
                    prepared.push((
                        Place::take(self, &event),
                        Job::for_new_event(&event),
                        (event.deliveries.is_empty(), traced),
                        (event.event_type.clone(), event.payload_sha256.clone()),
                    ));
                    events.push(PulledEvent {
                        event,
                        sequence: item.sequence,
                        emitted_at: item.emitted_at,
                    });
                }
            }
        }
        let batch = PullBatch {
            source: pulled.source,
            events,
            cursor: pulled.cursor,
            version: pulled.version,
        };
        let Some(results) = commit(batch).await? else {
            return Ok(None);
        };
        let mut due = Vec::new();
        let mut committed = Vec::with_capacity(results.len());
        for ((place, jobs, (unrouted, traced), asked), inserted) in
            prepared.into_iter().zip(results)
        {
            if inserted.created {
                place.keep();
                due.extend(jobs);
                self.count_received(&inserted.event.event_type, unrouted);
                if let Some(trace) = traced {
                    let event = &inserted.event;
                    crate::trace_export::intake(&trace, Some(event.id), &event.event_type, None);
                }
            }
            committed.push(admission::outcome(inserted, &asked.0, &asked.1));
        }
        if !due.is_empty() {
            self.0.feed.dispatch().submit(due);
        }
        let mut committed = committed.into_iter();
        Ok(Some(
            outcomes
                .into_iter()
                .filter_map(|o| o.or_else(|| committed.next()))
                .collect(),
        ))
    }

    /// Rebuilds the routing table from the stored subscribers (one reload at a
    /// time, so that an older reading never replaces a newer one).
    async fn reload_routing(&self) -> Result<(), InboxError> {
        let _one_at_a_time = self.0.reloading.lock().await;
        let (all, version) = self.0.store.routing().await?;
        self.0
            .registry
            .reload_if_changed(all, version)
            .map(|_| ())
            .map_err(InboxError::Routing)
    }

    /// Counts a new event in `hookbox_events_received_total` (labelled by the
    /// routing table) and, when no handler matched it,
    /// `hookbox_events_unrouted_total` — here, after the commit, so that an event
    /// whose sender hung up is counted too.
    fn count_received(&self, event_type: &str, unrouted: bool) {
        use crate::telemetry::names;
        let routing = self.0.registry.current();
        self.0
            .received
            .increment(&routing.event_type_label(event_type));
        if unrouted {
            metrics::counter!(names::EVENTS_UNROUTED).increment(1);
        }
    }

    /// Every destination's lane.
    pub(crate) fn lanes(&self) -> Arc<Lanes> {
        self.0.lanes.clone()
    }

    /// Resets the failed deliveries `filter` selects to `pending` and queues them
    /// (an ordered one runs in its turn); returns them.
    pub async fn replay(&self, filter: ReplayFilter) -> Result<Vec<PendingDelivery>, InboxError> {
        let inbox = self.clone();
        to_end(async move {
            // Page by page, each its own short transaction, each handed to
            // processing at once: replaying 200,000 dead letters never holds the
            // writer (and intake behind it) for the whole of them.
            let mut all = Vec::new();
            let mut after = None;
            loop {
                let page = inbox
                    .0
                    .store
                    .replay_page(&filter, after, REPLAY_PAGE)
                    .await?;
                inbox.dispatch_replayed(&page);
                let full = page.len() >= REPLAY_PAGE as usize;
                after = page.iter().map(|d| d.delivery).max();
                all.extend(page);
                if !full {
                    return Ok(all);
                }
                tokio::task::yield_now().await;
            }
        })
        .await
    }

    /// Whether an attempt of `event` is running on this instance now (SQLite:
    /// before its delivery is marked `processing`); erasing waits for it (409).
    pub(crate) fn attempting(&self, event: Uuid) -> bool {
        self.0
            .feed
            .window()
            .is_some_and(|window| window.attempting(event))
    }

    /// An event was erased. On SQLite the window reads its table again, so that
    /// the next delivery of an ordering key the event's delivery headed is not
    /// left waiting for something else to wake the refill (PostgreSQL's claims
    /// look for a key's head each time).
    /// `fresh` are its deliveries that were fresh work (handler and ordering
    /// value; [`Erasure::Erased`](crate::store::Erasure::Erased)): no longer in
    /// the pending backlog.
    pub fn erased(&self, fresh: &[(String, Option<String>)]) {
        if let Some(window) = self.0.feed.window() {
            for (handler, key) in fresh {
                window.count_fresh(handler, key.as_deref(), -1);
            }
            window.reread();
        }
    }

    /// Hands replayed deliveries to processing.
    fn dispatch_replayed(&self, replayed: &[PendingDelivery]) {
        if let Some(window) = self.0.feed.window() {
            for d in replayed {
                window.count_fresh(&d.handler, d.ordering_value.as_deref(), 1);
            }
        }
        if !replayed.is_empty() {
            self.0.feed.dispatch().submit(
                replayed
                    .iter()
                    .map(|d| Job::deliver(d.delivery, d.event))
                    .collect(),
            );
        }
    }

    /// Runs `write` (a change to the stored subscriber `name`) and then brings
    /// the routing table up to what is stored, so a committed change is routed at
    /// once: that one subscriber is read again and its route replaced
    /// ([`LiveRegistry::apply`](crate::registry::live::LiveRegistry::apply)), or,
    /// when another instance changed the subscribers meanwhile, all are read again.
    pub async fn change_subscribers<T, W, F>(&self, name: &str, write: W) -> Result<T, InboxError>
    where
        T: Send + 'static,
        W: FnOnce(Arc<dyn Store>) -> F,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let change = write(self.0.store.clone());
        let (inbox, name) = (self.clone(), name.to_owned());
        to_end(async move {
            // Held from before the write, so that the follower, woken by this
            // very change's NOTIFY, cannot read everything between the write
            // and the reading back of its one subscriber.
            let _one_at_a_time = inbox.0.reloading.lock().await;
            let outcome = change.await?;
            let (now, version) = inbox.0.store.subscriber_routing(&name).await?;
            let registry = &inbox.0.registry;
            if !registry
                .apply(&name, now, version)
                .map_err(InboxError::Routing)?
            {
                let (all, version) = inbox.0.store.routing().await?;
                registry
                    .reload_at(all, version)
                    .map_err(InboxError::Routing)?;
            }
            Ok(outcome)
        })
        .await
    }

    /// Reloads the routing table whenever the stored subscribers change (another
    /// instance created, changed or deleted one: its `NOTIFY`, or the periodic
    /// re-read); runs until dropped.
    async fn follow_subscribers(self) {
        let changes = self.0.store.subscriber_changes();
        let mut tick = tokio::time::interval(SUBSCRIBER_REFRESH);
        loop {
            match &changes {
                Some(changed) => {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = changed.notified() => {}
                    }
                }
                None => {
                    tick.tick().await;
                }
            }
            // Under the lock of local changes, so that an older reading never
            // replaces a newer one installed meanwhile.
            let _one_at_a_time = self.0.reloading.lock().await;
            // The version alone first: a table built from the stored version is
            // current, and reading every subscriber each second would cost as
            // much as they are many.
            match self.0.store.routing_version().await {
                Ok(stored) if stored == self.0.registry.versioned().1 => continue,
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "could not read the subscribers' version");
                    continue;
                }
            }
            match self.0.store.routing().await {
                Ok((now, version)) => {
                    if let Err(e) = self.0.registry.reload_if_changed(now, version) {
                        warn!(error = %e, "could not apply the subscribers");
                    }
                }
                Err(e) => warn!(error = %e, "could not read the subscribers"),
            }
        }
    }
}
