//! Destinations: every handler has a lane of its own ([`Lane`]), so that a
//! destination that is slow, hangs, fails or asks to slow down delays only its own
//! deliveries (docs/handlers.md, "Destinations").
//!
//! A worker that takes a job asks [`Lanes::enter`] before it runs the attempt. When
//! the lane cannot start it (at `max_in_flight`, its rate limit, paused, failing,
//! disabled), the job is *parked* in the lane — it keeps its place in the queue —
//! and the worker takes the next job: workers never wait for a destination. When
//! the lane allows (an attempt finished, the clock moved, an operator resumed it)
//! its parked jobs are put back at the front of the queue with their place in the
//! lane taken. A lane keeps at most [`Lane::cap`] deliveries in memory; with
//! SQLite the rest are let go to the table and read again when it has room
//! ([`Lanes::on_spill`]); the refill and the claim leave out lanes that hold enough
//! ([`Lanes::capped`]), so one destination's backlog never fills the window.
//!
//! Every change of state is logged and shown in `hookbox_destination_state`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};
use tracing::{info, warn};
use uuid::Uuid;

use crate::model::Timestamp;
use crate::processing::job::Job;
use crate::processing::lane::{Enter, Lane, Reason, State, Stored, Transition, Verdict};
use crate::processing::queue::{Lease, Queue};
use crate::registry::Route;
use crate::registry::flow::FlowControl;
use crate::telemetry::names;

/// What the lanes and the workers tell whoever keeps and announces it
/// ([`crate::operator`]).
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    /// A destination's state changed, or an operator acted on it.
    Destination {
        /// The destination.
        name: String,
        /// The change, if the state changed.
        transition: Option<Transition>,
        /// Its state to keep.
        stored: Stored,
        /// An operator's pause or resume.
        by_operator: bool,
        /// Caused by a delivery of a `hookbox.*` event: kept, not announced.
        quiet: bool,
    },
    /// A delivery was dead-lettered.
    DeadLettered {
        /// Its destination.
        destination: String,
        /// Its event.
        event_id: Uuid,
        /// The event's type.
        event_type: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last_error: Option<String>,
    },
}

/// True for the types of operator events (their deliveries raise none).
pub(crate) fn is_operator_event(event_type: &str) -> bool {
    event_type.starts_with("hookbox.")
}

/// A destination as `GET /destinations` shows its lane.
#[derive(Debug, Clone)]
pub(crate) struct LaneView {
    /// Its state now.
    pub(crate) state: State,
    /// Since when.
    pub(crate) state_since: Timestamp,
    /// A `Retry-After` pause's end.
    pub(crate) paused_until: Option<Timestamp>,
    /// Attempts running.
    pub(crate) in_flight: u32,
    /// Retryable failures in a row.
    pub(crate) consecutive_failures: u32,
    /// The last failure.
    pub(crate) last_error: Option<String>,
}

/// The lanes of every destination of one instance.
pub(crate) struct Lanes {
    me: Weak<Lanes>,
    lanes: Mutex<HashMap<String, Held>>,
    /// The window of due work the lanes share (SQLite): it is divided among them
    /// ([`Lane::share`]; parked jobs do not count against the window, so a lane
    /// that holds its share never keeps the others' work out), and jobs beyond a
    /// lane's cap are let go to the table instead of parked. `None` on PostgreSQL: claims are held until
    /// they run, so lanes park all they are given.
    window: Option<usize>,
    /// Wakes the timer: a lane waits for the clock.
    wake: Notify,
    /// Called with the oldest delivery a lane let go, once it has room for it.
    spill: OnceLock<Box<dyn Fn(Uuid) + Send + Sync>>,
    /// Who keeps and announces changes (operator events).
    listener: OnceLock<mpsc::UnboundedSender<Notice>>,
    /// Instances sharing the destinations' limits (PostgreSQL): each keeps its part.
    share: AtomicU32,
    /// Jobs parked in every lane.
    parked: AtomicUsize,
    /// When these lanes began: a destination without a lane yet is healthy since.
    started: Timestamp,
}

/// A lane's place taken by a running attempt; [`Lanes::finish`] gives it back (or
/// dropping it, as for an attempt that did not finish).
pub(crate) struct Slot {
    lanes: Arc<Lanes>,
    handler: String,
    done: bool,
    /// The attempt delivers an operator event: what it causes is not announced.
    quiet: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.done {
            let next = self
                .lanes
                .finished(&self.handler, Verdict::Abandoned, self.quiet);
            if let Some(lease) = next {
                lease.requeue();
            }
        }
    }
}

impl Lanes {
    /// Lanes sharing a window of due work (they let go what they cannot keep; the
    /// table brings it back), or, without one, parking everything.
    pub(crate) fn new(window: Option<usize>) -> Arc<Self> {
        let lanes = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            lanes: Mutex::new(HashMap::new()),
            window,
            wake: Notify::new(),
            spill: OnceLock::new(),
            listener: OnceLock::new(),
            share: AtomicU32::new(1),
            parked: AtomicUsize::new(0),
            started: Timestamp::now(),
        });
        tokio::spawn(lanes.clone().timer());
        lanes
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lane of `name`, made with `flow` if it has none yet (the lanes' shares
    /// of the window then shrink).
    fn lane<'a>(
        &self,
        lanes: &'a mut HashMap<String, Held>,
        name: &str,
        flow: FlowControl,
    ) -> &'a mut Held {
        if !lanes.contains_key(name) {
            lanes.insert(name.to_owned(), Held::new(name, flow));
            let share = self.window.unwrap_or(0) / lanes.len();
            for held in lanes.values_mut() {
                held.lane.share = share;
            }
        }
        match lanes.get_mut(name) {
            Some(lane) => lane,
            None => unreachable!("inserted above"),
        }
    }

    /// `instances` share every destination's limits from now on.
    pub(crate) fn share(&self, instances: u32) {
        self.share.store(instances.max(1), Ordering::Relaxed);
    }

    /// A route's limits as this instance keeps them.
    fn flow_of(&self, route: &Route) -> FlowControl {
        route.flow.shared(self.share.load(Ordering::Relaxed))
    }

    /// Sends every change of state (and operator's action) to `listener`.
    pub(crate) fn listen(&self, listener: mpsc::UnboundedSender<Notice>) {
        let _ = self.listener.set(listener);
    }

    fn tell(&self, notice: Notice) {
        if let Some(listener) = self.listener.get() {
            let _ = listener.send(notice);
        }
    }

    /// A delivery was dead-lettered (unless it delivered an operator event).
    pub(crate) fn dead_lettered(&self, notice: Notice) {
        self.tell(notice);
    }

    /// Takes back a destination's kept state (at startup, before any attempt).
    pub(crate) fn restore(&self, name: &str, stored: &Stored, flow: FlowControl) {
        let now = Instant::now();
        let mut lanes = self.lock();
        let lane = self.lane(&mut lanes, name, flow);
        lane.restore(stored, now);
        let state = lane.state(now);
        drop(lanes);
        set_state_gauge(name, state);
        self.wake.notify_one();
    }

    /// Follows the states other instances kept (PostgreSQL): operators' pauses
    /// and resumes, disabled destinations. Nothing is told: the instance that
    /// changed it did.
    pub(crate) fn follow(&self, name: &str, stored: &Stored, flow: FlowControl) {
        let now = Instant::now();
        let mut lanes = self.lock();
        let lane = self.lane(&mut lanes, name, flow);
        if !lane.follow(stored, now) {
            return;
        }
        let state = lane.state(now);
        let (go, spilled, when) = self.release(lane, now);
        drop(lanes);
        set_state_gauge(name, state);
        self.after(name, go, spilled, None, when.is_some());
    }

    /// Gives every destination of `names` its lane (and its metrics) at once, so
    /// that `hookbox_destination_state` shows each one from the start.
    pub(crate) fn know(&self, names: impl IntoIterator<Item = (String, FlowControl)>) {
        let mut lanes = self.lock();
        for (name, flow) in names {
            self.lane(&mut lanes, &name, flow);
        }
    }

    /// Sets what is called when a lane has room for work it let go.
    pub(crate) fn on_spill(&self, spill: impl Fn(Uuid) + Send + Sync + 'static) {
        let _ = self.spill.set(Box::new(spill));
    }

    /// A job of `route` wants to run its attempt now: the slot to run it with, or
    /// `None` when it waits in its lane (or was let go to the table).
    pub(crate) fn enter(
        &self,
        route: &Route,
        delivery: Uuid,
        lease: Lease<Job>,
        quiet: bool,
    ) -> Option<(Lease<Job>, Slot)> {
        let now = Instant::now();
        let mut lanes = self.lock();
        let flow = self.flow_of(route);
        let lane = self.lane(&mut lanes, &route.name, flow.clone());
        if lane.flow != flow {
            lane.flow = flow;
        }
        let entered = lane.enter(delivery, lease, now, self.window.is_some());
        if let Enter::Parked(reason) | Enter::LetGo(_, reason) = &entered {
            lane.throttled[*reason as usize].increment(1);
        }
        // Parked behind others while the lane could start some: they go now (the
        // clock may have let them go since the timer last looked).
        let (go, when) = match &entered {
            Enter::Parked(_) => {
                self.parked.fetch_add(1, Ordering::Relaxed);
                self.unpark(lane, now)
            }
            _ => (Vec::new(), None),
        };
        lane.in_flight_gauge.set(f64::from(lane.in_flight()));
        drop(lanes);
        for lease in go {
            lease.requeue();
        }
        if when.is_some() {
            self.wake.notify_one(); // the rest waits for the clock
        }
        match entered {
            Enter::Go(lease) => {
                let me = self.me.upgrade()?;
                Some((
                    lease,
                    Slot {
                        lanes: me,
                        handler: route.name.clone(),
                        done: false,
                        quiet,
                    },
                ))
            }
            Enter::Parked(_) => None,
            Enter::LetGo(lease, _) => {
                drop(lease);
                None
            }
        }
    }

    /// The attempt run with `slot` ended with `verdict`. Answers a job of the lane that may start now, for the caller to run next
    /// (its place in the lane taken): a worker that finished an attempt runs its
    /// destination's next parked job itself, without a trip through the queue.
    pub(crate) fn finish(&self, mut slot: Slot, verdict: Verdict) -> Option<Lease<Job>> {
        slot.done = true;
        self.finished(&slot.handler, verdict, slot.quiet)
    }

    fn finished(&self, handler: &str, verdict: Verdict, quiet: bool) -> Option<Lease<Job>> {
        let now = Instant::now();
        let mut lanes = self.lock();
        let lane = lanes.get_mut(handler)?;
        let transition = lane.finish(verdict, now);
        lane.in_flight_gauge.set(f64::from(lane.in_flight()));
        let notice = transition.map(|t| (t, lane.last_error.clone()));
        let kept = notice.as_ref().map(|_| lane.stored(now));
        let (mut go, spilled, when) = self.release(lane, now);
        drop(lanes);
        let next = (!go.is_empty()).then(|| go.remove(0));
        if let (Some((t, _)), Some(stored)) = (&notice, kept) {
            self.tell(Notice::Destination {
                name: handler.to_owned(),
                transition: Some(t.clone()),
                stored,
                by_operator: false,
                quiet,
            });
        }
        self.after(handler, go, spilled, notice, when.is_some());
        next
    }

    /// Lets a lane's parked jobs go that may, and answers what it let go earlier
    /// that it has room for now, and when the rest may go if the clock decides.
    fn release(
        &self,
        lane: &mut Lane<Lease<Job>>,
        now: Instant,
    ) -> (Vec<Lease<Job>>, Option<Uuid>, Option<Instant>) {
        let (go, when) = self.unpark(lane, now);
        (go, lane.take_spilled(), when)
    }

    /// [`Lane::release`], keeping the count of parked jobs.
    fn unpark(
        &self,
        lane: &mut Lane<Lease<Job>>,
        now: Instant,
    ) -> (Vec<Lease<Job>>, Option<Instant>) {
        let (go, when) = lane.release(now);
        self.parked.fetch_sub(go.len(), Ordering::Relaxed);
        (go, when)
    }

    /// What follows a change of a lane, done without its lock.
    fn after(
        &self,
        handler: &str,
        go: Vec<Lease<Job>>,
        spilled: Option<Uuid>,
        notice: Option<(Transition, Option<String>)>,
        clock: bool,
    ) {
        let wake = clock || notice.is_some();
        for lease in go {
            lease.requeue();
        }
        if let (Some(from), Some(spill)) = (spilled, self.spill.get()) {
            spill(from);
        }
        if let Some((t, error)) = notice {
            set_state_gauge(handler, t.state);
            let (from, to) = (t.previous.as_str(), t.state.as_str());
            match t.state {
                State::Healthy => info!(destination = handler, from, to, "destination recovered"),
                _ => {
                    warn!(destination = handler, from, to, last_error = ?error, "destination state changed")
                }
            }
        }
        if wake {
            self.wake.notify_one(); // the lane waits for the clock
        }
    }

    /// Jobs parked in every lane.
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }

    /// Of a queue's `depth` (jobs queued or running), those not parked in a lane:
    /// a parked job waits for its destination, not for a worker, and takes no room
    /// in the window or the claimed queue (each lane keeps a bounded number).
    pub(crate) fn active(&self, depth: usize) -> usize {
        depth.saturating_sub(self.parked())
    }

    /// Waits until at most `n` of `queue`'s jobs are active (parking a job frees
    /// no queue place, so the wait also looks again every 20 ms).
    pub(crate) async fn wait_active_at_most(&self, queue: &Queue<Job>, n: usize) {
        while self.active(queue.depth()) > n {
            tokio::select! {
                () = queue.wait_depth_at_most(n) => {}
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    /// A job released from a lane will not start after all (finished meanwhile,
    /// not due, or the store failed): its place in the lane is given back.
    pub(crate) fn forget(&self, delivery: Uuid) {
        let now = Instant::now();
        let mut lanes = self.lock();
        let Some((name, lane)) = lanes.iter_mut().find(|(_, l)| l.admitted(delivery)) else {
            return;
        };
        let name = name.clone();
        lane.unadmit(delivery);
        lane.in_flight_gauge.set(f64::from(lane.in_flight()));
        let (go, spilled, when) = self.release(lane, now);
        drop(lanes);
        self.after(&name, go, spilled, None, when.is_some());
    }

    /// An operator pauses a destination; the state to keep (the caller keeps it
    /// before answering, so that other instances follow at once).
    pub(crate) fn pause(&self, name: &str, flow: FlowControl) -> Stored {
        self.by_operator(name, flow, |lane, now| lane.pause(now))
    }

    /// An operator resumes a destination: healthy, its due work runs at once; the
    /// state to keep, as [`Lanes::pause`].
    pub(crate) fn resume(&self, name: &str, flow: FlowControl) -> Stored {
        self.by_operator(name, flow, |lane, now| lane.resume(now))
    }

    fn by_operator(
        &self,
        name: &str,
        flow: FlowControl,
        change: impl FnOnce(&mut Held, Instant) -> Option<Transition>,
    ) -> Stored {
        let now = Instant::now();
        let mut lanes = self.lock();
        let lane = lanes
            .entry(name.to_owned())
            .or_insert_with(|| Held::new(name, flow));
        let notice = change(lane, now).map(|t| (t, None));
        let stored = lane.stored(now);
        self.tell(Notice::Destination {
            name: name.to_owned(),
            transition: notice.as_ref().map(|(t, _)| t.clone()),
            stored: stored.clone(),
            by_operator: true,
            quiet: false,
        });
        let (go, spilled, when) = self.release(lane, now);
        drop(lanes);
        self.after(name, go, spilled, notice, when.is_some());
        stored
    }

    /// A destination's lane as shown (healthy since these lanes began while it has
    /// none yet).
    pub(crate) fn view(&self, name: &str) -> LaneView {
        let now = Instant::now();
        self.lock().get(name).map_or(
            LaneView {
                state: State::Healthy,
                state_since: self.started,
                paused_until: None,
                in_flight: 0,
                consecutive_failures: 0,
                last_error: None,
            },
            |lane| view(lane, now),
        )
    }

    /// Destinations whose lanes hold all they keep in memory, or may not start
    /// anything now: the refill and the claim leave their work in the table.
    pub(crate) fn capped(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, lane)| lane.capped())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// What the PostgreSQL claim leaves in the table ([`Lane::left_in_table`]):
    /// a paused or disabled destination's deliveries stay `pending` (SPEC §10)
    /// rather than claimed and parked in memory as `processing`.
    pub(crate) fn not_claimed(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, lane)| lane.left_in_table())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether [`Lanes::not_claimed`] names `name`: intake stores no delivery
    /// for it claimed.
    pub(crate) fn leaves_unclaimed(&self, name: &str) -> bool {
        self.lock()
            .get(name)
            .is_some_and(|lane| lane.left_in_table())
    }

    /// Of fresh work read in id order (`(delivery, handler)`), the deliveries
    /// their lanes have room for. A lane keeps at most [`Lane::cap`]: what lies
    /// past its room is left in the table, and the lane asks for it back from the
    /// first of it when it has room, as for a job it let go — but its payload was
    /// never fetched (measured: a drain of two destinations read every delivery's
    /// task 2.1 times, most to let it go at once). A destination without a lane
    /// yet takes all of its work.
    ///
    /// ```ignore
    /// let wanted = lanes.room_for(ids); // then fetch the tasks of `wanted`
    /// ```
    pub(crate) fn room_for(&self, read: Vec<(Uuid, String)>) -> Vec<Uuid> {
        let mut lanes = self.lock();
        let mut left: HashMap<String, usize> = HashMap::new();
        read.into_iter()
            .filter_map(|(delivery, handler)| {
                let Some(lane) = lanes.get_mut(&handler) else {
                    return Some(delivery);
                };
                let left = left
                    .entry(handler)
                    .or_insert_with(|| lane.cap().saturating_sub(lane.held()));
                if *left == 0 {
                    lane.spill(delivery);
                    return None;
                }
                *left -= 1;
                Some(delivery)
            })
            .collect()
    }

    /// A read left out `names` from `from` on: their lanes ask for it back when
    /// they have room.
    pub(crate) fn skipped(&self, names: &[String], from: Uuid) {
        let mut lanes = self.lock();
        for name in names {
            if let Some(lane) = lanes.get_mut(name) {
                lane.spill(from);
            }
        }
    }

    /// True when the destination may not start work now for a reason of its own
    /// state (paused, failing, disabled) or its limits: its waiting work is not
    /// due (`QUEUE_MAXSIZE`).
    pub(crate) fn holds_back(&self, name: &str) -> Option<u32> {
        let now = Instant::now();
        self.lock()
            .get(name)
            .and_then(|lane| lane.blocked(now).map(|_| lane.in_flight()))
    }

    /// Destinations that may not start work now (paused, failing, disabled, at
    /// their limits), with the attempts they run.
    pub(crate) fn holding_back(&self) -> Vec<(String, u32)> {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter(|(_, lane)| lane.blocked(now).is_some())
            .map(|(name, lane)| (name.clone(), lane.in_flight()))
            .collect()
    }

    /// Wakes lanes that wait for the clock (rate limits, `Retry-After`, probes).
    async fn timer(self: Arc<Self>) {
        loop {
            let woken = self.wake.notified();
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            let mut work = Vec::new();
            {
                let mut lanes = self.lock();
                for (name, lane) in lanes.iter_mut() {
                    let (go, when) = self.unpark(lane, now);
                    let spilled = lane.take_spilled();
                    if !go.is_empty() || spilled.is_some() {
                        work.push((name.clone(), go, spilled));
                    }
                    next = match (next, when) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
            for (name, go, spilled) in work {
                for lease in go {
                    lease.requeue();
                }
                if let (Some(from), Some(spill)) = (spilled, self.spill.get()) {
                    spill(from);
                }
                drop(name);
            }
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(wait) => {}
            }
            if Arc::strong_count(&self) == 1 {
                return; // nobody else holds the lanes: shut down
            }
        }
    }
}

fn view(lane: &Lane<Lease<Job>>, now: Instant) -> LaneView {
    LaneView {
        state: lane.state(now),
        state_since: lane.state_since,
        paused_until: lane.paused_until(now),
        in_flight: lane.in_flight(),
        consecutive_failures: lane.consecutive_failures,
        last_error: lane.last_error.clone(),
    }
}

/// A lane with its metrics' handles (made once: an attempt updates them without
/// building a metric key).
struct Held {
    lane: Lane<Lease<Job>>,
    /// `hookbox_destination_in_flight{destination}`.
    in_flight_gauge: metrics::Gauge,
    /// `hookbox_destination_throttled_total{destination,reason}`, by [`Reason`].
    throttled: [metrics::Counter; 5],
}

impl Held {
    fn new(name: &str, flow: FlowControl) -> Self {
        let counter = |reason: Reason| metrics::counter!(names::DESTINATION_THROTTLED, "destination" => name.to_owned(), "reason" => reason.as_str());
        set_state_gauge(name, State::Healthy);
        Self {
            lane: Lane::new(flow),
            in_flight_gauge: metrics::gauge!(names::DESTINATION_IN_FLIGHT, "destination" => name.to_owned()),
            throttled: Reason::ALL.map(counter),
        }
    }
}

impl std::ops::Deref for Held {
    type Target = Lane<Lease<Job>>;

    fn deref(&self) -> &Self::Target {
        &self.lane
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.lane
    }
}

/// `hookbox_destination_state{destination,state}`: 1 for the current state.
pub(crate) fn set_state_gauge(name: &str, state: State) {
    for s in State::ALL {
        metrics::gauge!(names::DESTINATION_STATE, "destination" => name.to_owned(), "state" => s.as_str())
            .set(if s == state { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(lanes: &Lanes) -> Vec<usize> {
        let mut all: Vec<usize> = lanes.lock().values().map(|h| h.lane.share).collect();
        all.sort_unstable();
        all
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_lanes_share_the_window_and_a_new_lane_shrinks_every_share() {
        let lanes = Lanes::new(Some(4096));
        let flow = FlowControl::default();
        lanes.know(["a", "b", "c"].map(|n| (n.to_owned(), flow.clone())));
        assert_eq!(shares(&lanes), [1365, 1365, 1365]);
        lanes.know([("d".to_owned(), flow.clone())]);
        assert_eq!(shares(&lanes), [1024, 1024, 1024, 1024]);
        let on_postgres = Lanes::new(None);
        on_postgres.know([("a".to_owned(), flow)]);
        assert_eq!(shares(&on_postgres), [0], "claims are never let go");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_read_keeps_what_each_lane_has_room_for_and_the_lane_asks_for_the_rest() {
        let lanes = Lanes::new(Some(4096));
        lanes.know(["a", "b"].map(|n| (n.to_owned(), FlowControl::default())));
        let room = lanes.lock()["a"].cap();
        assert_eq!(room, 2048, "its share of the window");
        // In id order, as the table is read: a's past its room, b's and an unknown
        // destination's interleaved.
        let read: Vec<(Uuid, String)> = (0..room + 50)
            .map(|n| match n % 100 {
                1 => (Uuid::now_v7(), "b".to_owned()),
                2 => (Uuid::now_v7(), "new".to_owned()),
                _ => (Uuid::now_v7(), "a".to_owned()),
            })
            .collect();
        let of = |name: &str| -> Vec<Uuid> {
            read.iter()
                .filter(|(_, h)| h == name)
                .map(|(id, _)| *id)
                .collect()
        };
        let (a, b, new) = (of("a"), of("b"), of("new"));
        let kept = lanes.room_for(read.clone());
        assert_eq!(kept.len(), room + b.len() + new.len());
        assert!(
            kept.iter().all(|id| !a[room..].contains(id)),
            "a's past its room are left"
        );
        assert!(b.iter().chain(&new).all(|id| kept.contains(id)));
        let mut all = lanes.lock();
        assert_eq!(
            all.get_mut("a").and_then(|l| l.take_spilled()),
            Some(a[room])
        );
        assert_eq!(all.get_mut("b").and_then(|l| l.take_spilled()), None);
    }
}
