//! One destination's lane, as a state machine without I/O: what may start now,
//! what waits, and what an attempt's result does to the destination's health
//! (docs/handlers.md, "Destinations"). [`Lanes`](crate::processing::lanes::Lanes)
//! holds one per destination and does the waking and the telling.
//!
//! - **Flow control**: at most `max_in_flight` attempts at once; with a
//!   `rate_limit`, starts at least `period / N` apart (no catch-up burst).
//! - **Asked to slow down**: a `Retry-After` pauses the whole lane until then
//!   (capped at [`MAX_PAUSE`]).
//! - **Circuit**: [`OPEN_AFTER`] retryable failures in a row open it (`failing`):
//!   one probe at a time, at intervals from [`FIRST_PROBE`] doubling to
//!   [`LAST_PROBE`]; a success closes it. `disable_after` elapsed while failing, or
//!   a `410 Gone`, disables the lane until an operator resumes it.
//! - What cannot start waits *parked* in the lane, in arrival order, and starts as
//!   soon as the lane allows (the caller asks with [`Lane::release`]).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::model::Timestamp;
use crate::registry::flow::FlowControl;

/// Retryable failures in a row that open the circuit.
pub(crate) const OPEN_AFTER: u32 = 10;
/// The first wait before a probe of a failing destination.
pub(crate) const FIRST_PROBE: Duration = Duration::from_secs(5);
/// The longest wait between two probes.
pub(crate) const LAST_PROBE: Duration = Duration::from_secs(300);
/// The longest pause a `Retry-After` imposes on a destination.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// A destination's state, as `GET /destinations` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Delivering.
    Healthy,
    /// Paused by an operator, or by the destination's `Retry-After`.
    Paused,
    /// The circuit is open: one probe at a time.
    Failing,
    /// No attempts until an operator resumes it.
    Disabled,
}

impl State {
    /// Every state, for the metric that shows one of them.
    pub(crate) const ALL: [State; 4] = [
        State::Healthy,
        State::Paused,
        State::Failing,
        State::Disabled,
    ];

    /// The state's word in the API and the metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Paused => "paused",
            State::Failing => "failing",
            State::Disabled => "disabled",
        }
    }
}

/// Why an attempt waits (`hookbox_destination_throttled_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The rate limit's spacing.
    RateLimit,
    /// The destination's `Retry-After`.
    RetryAfter,
    /// The circuit is open, or the destination disabled.
    Circuit,
    /// An operator paused it.
    Paused,
    /// `max_in_flight` attempts run already.
    MaxInFlight,
}

impl Reason {
    /// Every reason, in the order of their discriminants.
    pub(crate) const ALL: [Reason; 5] = [
        Reason::RateLimit,
        Reason::RetryAfter,
        Reason::Circuit,
        Reason::Paused,
        Reason::MaxInFlight,
    ];

    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::RateLimit => "rate_limit",
            Reason::RetryAfter => "retry_after",
            Reason::Circuit => "circuit",
            Reason::Paused => "paused",
            Reason::MaxInFlight => "max_in_flight",
        }
    }
}

/// What an attempt's result means for its destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// 2xx, exit 0.
    Success,
    /// Worth retrying; `retry_after` when the destination asked to wait.
    Retryable {
        /// The error text.
        error: String,
        /// The destination's `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// Permanent for this delivery (4xx, exit 65): the destination's health is
    /// unchanged.
    Permanent,
    /// `410 Gone`: the destination is gone; it is disabled.
    Gone(String),
    /// The attempt did not finish (shutdown): only its place is given back.
    Abandoned,
}

/// The circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Circuit {
    Closed,
    Open {
        next_probe: Instant,
        interval: Duration,
        probing: bool,
    },
    Disabled,
}

/// A change of state worth telling (operator events, the stored state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transition {
    /// Before.
    pub(crate) previous: State,
    /// After.
    pub(crate) state: State,
}

/// What [`Lane::enter`] decided.
#[derive(Debug)]
pub(crate) enum Enter<J> {
    /// Start now: a place is taken.
    Go(J),
    /// Parked in the lane; it starts when the lane allows.
    Parked(Reason),
    /// The lane holds enough already: given back to the table, to be read again
    /// when the lane has room ([`Lane::take_spilled`]).
    LetGo(J, Reason),
}

/// One destination's lane; `J` is what waits in it.
#[derive(Debug)]
pub(crate) struct Lane<J> {
    /// Its limits (refreshed from the route at every entry).
    pub(crate) flow: FlowControl,
    in_flight: u32,
    parked: VecDeque<(Uuid, J)>,
    /// Released from the parked line with their place taken already.
    admitted: HashSet<Uuid>,
    next_start: Option<Instant>,
    /// Paused by an operator.
    paused: bool,
    /// Paused by the destination's `Retry-After`, until then.
    paused_until: Option<(Instant, Timestamp)>,
    circuit: Circuit,
    /// Retryable failures since the last success.
    pub(crate) consecutive_failures: u32,
    /// The last failure's error.
    pub(crate) last_error: Option<String>,
    /// When the shown state last changed.
    pub(crate) state_since: Timestamp,
    /// The last successful attempt.
    pub(crate) last_success: Option<Timestamp>,
    /// The first failure since the last success.
    pub(crate) failing_since: Option<Timestamp>,
    /// Work of this lane may wait unread in the table from this delivery on.
    spilled: Option<Uuid>,
    /// Its share of the window of due work (SQLite), which it may keep besides
    /// [`Lane::cap`]'s floor: set by the lanes when their number changes.
    pub(crate) share: usize,
}

impl<J> Lane<J> {
    /// A healthy lane with these limits.
    pub(crate) fn new(flow: FlowControl) -> Self {
        Self {
            flow,
            in_flight: 0,
            parked: VecDeque::new(),
            admitted: HashSet::new(),
            next_start: None,
            paused: false,
            paused_until: None,
            circuit: Circuit::Closed,
            consecutive_failures: 0,
            last_error: None,
            state_since: Timestamp::now(),
            last_success: None,
            failing_since: None,
            spilled: None,
            share: 0,
        }
    }

    /// Attempts running (or released to start).
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Deliveries in memory: running or parked.
    pub(crate) fn held(&self) -> usize {
        self.in_flight as usize + self.parked.len()
    }

    /// Most deliveries the lane keeps in memory: its [`share`](Lane::share) of the
    /// window, and at least 16 × `max_in_flight` (from 128 to 1024); more are let
    /// go to the table. Fewer made the window read the table again too often: 100
    /// destinations limited to 20/s each reached 653 deliveries/s in all with 32,
    /// 1,930 with 128; three unlimited destinations let go most of their work at
    /// 128 each while the window had room for it all (and read it back: ~10 %
    /// slower than no lanes at all), which their share spares.
    pub(crate) fn cap(&self) -> usize {
        (self.flow.max_in_flight as usize * 16)
            .clamp(128, 1024)
            .max(self.share)
    }

    /// True when the lane holds as much as it keeps in memory.
    pub(crate) fn capped(&self) -> bool {
        self.held() >= self.cap()
    }

    /// The state shown now. An operator's pause shows over everything (SPEC §10:
    /// pause → `paused`, a disabled destination too, until a resume makes it
    /// healthy); a `Retry-After` pause over all but `disabled`.
    pub(crate) fn state(&self, now: Instant) -> State {
        match self.circuit {
            _ if self.paused => State::Paused,
            Circuit::Disabled => State::Disabled,
            _ if self.paused_until.is_some_and(|(t, _)| t > now) => State::Paused,
            Circuit::Open { .. } => State::Failing,
            Circuit::Closed => State::Healthy,
        }
    }

    /// Until when a `Retry-After` pauses it, or `None` (an operator's pause shows
    /// no end either).
    pub(crate) fn paused_until(&self, now: Instant) -> Option<Timestamp> {
        self.paused_until
            .filter(|(t, _)| *t > now && !self.paused)
            .map(|(_, at)| at)
    }

    /// What keeps a new attempt from starting now, and when that may lift by
    /// itself (`None`: only an event lifts it).
    pub(crate) fn blocked(&self, now: Instant) -> Option<(Reason, Option<Instant>)> {
        if self.circuit == Circuit::Disabled {
            return Some((Reason::Circuit, None));
        }
        if self.paused {
            return Some((Reason::Paused, None));
        }
        if let Some((until, _)) = self.paused_until.filter(|(t, _)| *t > now) {
            return Some((Reason::RetryAfter, Some(until)));
        }
        if let Circuit::Open {
            next_probe,
            probing,
            ..
        } = self.circuit
        {
            if probing {
                return Some((Reason::Circuit, None));
            }
            if next_probe > now {
                return Some((Reason::Circuit, Some(next_probe)));
            }
        }
        if self.in_flight >= self.flow.max_in_flight {
            return Some((Reason::MaxInFlight, None));
        }
        match self.next_start {
            Some(t) if t > now => Some((Reason::RateLimit, Some(t))),
            _ => None,
        }
    }

    /// Takes a place for an attempt starting now.
    fn start(&mut self, now: Instant) {
        self.in_flight += 1;
        if let Some(rate) = self.flow.rate_limit {
            let from = self.next_start.map_or(now, |t| t.max(now));
            self.next_start = Some(from + rate.interval());
        }
        if let Circuit::Open { probing, .. } = &mut self.circuit {
            *probing = true;
        }
    }

    /// A delivery wants to start: it goes, waits parked, or (with `may_let_go`,
    /// when the lane holds enough) is let go to the table.
    pub(crate) fn enter(
        &mut self,
        delivery: Uuid,
        job: J,
        now: Instant,
        may_let_go: bool,
    ) -> Enter<J> {
        if self.admitted.remove(&delivery) {
            return Enter::Go(job);
        }
        let reason = match self.blocked(now) {
            None if self.parked.is_empty() => {
                self.start(now);
                return Enter::Go(job);
            }
            None => Reason::MaxInFlight,
            Some((reason, _)) => reason,
        };
        if may_let_go && self.capped() {
            self.spilled = Some(self.spilled.map_or(delivery, |s| s.min(delivery)));
            return Enter::LetGo(job, reason);
        }
        self.parked.push_back((delivery, job));
        Enter::Parked(reason)
    }

    /// Parked deliveries that may start now (their places taken), and when to look
    /// again if the rest waits for the clock.
    pub(crate) fn release(&mut self, now: Instant) -> (Vec<J>, Option<Instant>) {
        let mut go = Vec::new();
        while !self.parked.is_empty() {
            if let Some((_, when)) = self.blocked(now) {
                return (go, when);
            }
            if let Some((delivery, job)) = self.parked.pop_front() {
                self.start(now);
                self.admitted.insert(delivery);
                go.push(job);
            }
        }
        (go, None)
    }

    /// True when `delivery` was released from the parked line with its place taken.
    pub(crate) fn admitted(&self, delivery: Uuid) -> bool {
        self.admitted.contains(&delivery)
    }

    /// A released delivery will not start: its place is given back.
    pub(crate) fn unadmit(&mut self, delivery: Uuid) {
        if self.admitted.remove(&delivery) {
            self.in_flight = self.in_flight.saturating_sub(1);
            if let Circuit::Open { probing, .. } = &mut self.circuit {
                *probing = false;
            }
        }
    }

    /// When the lane has room again for work it let go: where that work starts.
    pub(crate) fn take_spilled(&mut self) -> Option<Uuid> {
        if self.held() <= self.cap() / 2 && self.blocked_by_state().is_none() {
            self.spilled.take()
        } else {
            None
        }
    }

    /// Its work is left in the table by the PostgreSQL claim, `pending`: it holds
    /// all it keeps in memory ([`Lane::capped`]), or it is stopped until an
    /// operator says otherwise (paused by one, or disabled). A failing lane's
    /// work is still claimed (its oldest is the probe), and so is that of one
    /// paused by a `Retry-After` (it resumes by the clock).
    pub(crate) fn left_in_table(&self) -> bool {
        self.capped() || self.paused || matches!(self.circuit, Circuit::Disabled)
    }

    /// Blocked by something other than its limits (paused, failing, disabled).
    fn blocked_by_state(&self) -> Option<Reason> {
        match self.circuit {
            Circuit::Disabled | Circuit::Open { .. } => return Some(Reason::Circuit),
            Circuit::Closed => {}
        }
        self.paused.then_some(Reason::Paused)
    }

    /// A delivery of this lane let go from elsewhere (not parked here) may wait in
    /// the table from `delivery` on.
    pub(crate) fn spill(&mut self, delivery: Uuid) {
        self.spilled = Some(self.spilled.map_or(delivery, |s| s.min(delivery)));
    }

    /// Records an attempt's result; answers the change of state it made, if any.
    pub(crate) fn finish(&mut self, verdict: Verdict, now: Instant) -> Option<Transition> {
        let before = self.state(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        let was_probe = match &mut self.circuit {
            Circuit::Open { probing, .. } => std::mem::replace(probing, false),
            _ => false,
        };
        let at = Timestamp::now();
        match verdict {
            Verdict::Success => {
                self.consecutive_failures = 0;
                self.last_success = Some(at);
                self.failing_since = None;
                if matches!(self.circuit, Circuit::Open { .. }) {
                    self.circuit = Circuit::Closed;
                }
            }
            Verdict::Retryable { error, retry_after } => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.last_error = Some(error);
                self.failing_since.get_or_insert(at);
                if let Some(asked) = retry_after.filter(|d| !d.is_zero()) {
                    let asked = asked.min(MAX_PAUSE);
                    self.paused_until = Some((now + asked, Timestamp(at.0 + asked)));
                }
                self.open_or_back_off(was_probe, now);
                self.disable_if_overdue(at);
            }
            Verdict::Gone(error) => {
                self.last_error = Some(error);
                self.failing_since.get_or_insert(at);
                self.circuit = Circuit::Disabled;
            }
            Verdict::Permanent | Verdict::Abandoned => {}
        }
        self.changed(before, now)
    }

    /// After a retryable failure: opens the circuit at [`OPEN_AFTER`], or waits
    /// longer before the next probe when this was one. A probe is never later
    /// than the moment `disable_after` runs out, so that a destination failing
    /// then is disabled on time, not at a probe up to [`LAST_PROBE`] later.
    fn open_or_back_off(&mut self, was_probe: bool, now: Instant) {
        let deadline = self.disable_deadline(now);
        match &mut self.circuit {
            Circuit::Closed if self.consecutive_failures >= OPEN_AFTER => {
                self.circuit = Circuit::Open {
                    next_probe: now + FIRST_PROBE,
                    interval: FIRST_PROBE,
                    probing: false,
                };
            }
            Circuit::Open {
                next_probe,
                interval,
                ..
            } if was_probe => {
                *interval = (*interval * 2).min(LAST_PROBE);
                *next_probe = now + *interval;
            }
            _ => {}
        }
        if let (Circuit::Open { next_probe, .. }, Some(deadline)) = (&mut self.circuit, deadline) {
            *next_probe = (*next_probe).min(deadline.max(now));
        }
    }

    /// When `disable_after` runs out, counted as [`Lane::disable_if_overdue`]
    /// counts it; `None` without `disable_after` or a time to count from.
    fn disable_deadline(&self, now: Instant) -> Option<Instant> {
        let limit = self.flow.disable_after?;
        let since = self.last_success.or(self.failing_since)?;
        let elapsed = (Timestamp::now().0 - since.0).to_std().unwrap_or_default();
        Some(now + limit.saturating_sub(elapsed))
    }

    /// `disable_after` elapsed while failing: disabled. Counted from the last
    /// success, or from the first failure if there was none (SPEC §10): a
    /// destination that last succeeded long ago is disabled as soon as its
    /// circuit opens.
    fn disable_if_overdue(&mut self, at: Timestamp) {
        let (Some(limit), Circuit::Open { .. }) = (self.flow.disable_after, self.circuit) else {
            return;
        };
        let since = self.last_success.or(self.failing_since);
        if since.is_some_and(|s| {
            at.0 - s.0 >= chrono::Duration::from_std(limit).unwrap_or(chrono::Duration::MAX)
        }) {
            self.circuit = Circuit::Disabled;
        }
    }

    /// An operator's pause: a transition unless an operator's pause holds it
    /// already (pausing twice is one pause, one event). Over a `Retry-After`
    /// pause it is one: the operator's holds until a resume.
    pub(crate) fn pause(&mut self, now: Instant) -> Option<Transition> {
        if self.paused {
            return None;
        }
        let before = self.state(now);
        self.paused = true;
        self.changed(before, now).or(Some(Transition {
            previous: before,
            state: State::Paused,
        }))
    }

    /// An operator's resume: healthy again, every pause and the circuit lifted.
    /// `disable_after` counts again from the resume as from a success, so a
    /// destination that keeps failing is `failing` before it is `disabled` again.
    /// A transition unless it was healthy already (resuming a healthy
    /// destination changes nothing to report).
    pub(crate) fn resume(&mut self, now: Instant) -> Option<Transition> {
        let before = self.state(now);
        self.paused = false;
        self.paused_until = None;
        self.circuit = Circuit::Closed;
        self.consecutive_failures = 0;
        self.next_start = None;
        if before != State::Healthy {
            self.failing_since = None;
            self.last_success = Some(Timestamp::now());
        }
        (before != State::Healthy).then(|| {
            self.state_since = Timestamp::now();
            Transition {
                previous: before,
                state: State::Healthy,
            }
        })
    }

    /// What is kept of this lane across a restart.
    pub(crate) fn stored(&self, now: Instant) -> Stored {
        let ts = |t: Option<Timestamp>| t.map(|t| t.to_rfc3339());
        Stored {
            state: self.state(now).as_str().to_owned(),
            state_since: self.state_since.to_rfc3339(),
            paused_until: ts(self.paused_until(now)),
            consecutive_failures: self.consecutive_failures,
            last_error: self.last_error.clone(),
            last_success: ts(self.last_success),
            failing_since: ts(self.failing_since),
            kept_by: Some(this_process().to_owned()),
        }
    }

    /// Takes back what was kept (at startup, before any attempt): a paused,
    /// failing or disabled destination stays so; a failing one probes first.
    pub(crate) fn restore(&mut self, stored: &Stored, now: Instant) {
        let ts = |t: &Option<String>| t.as_deref().and_then(Timestamp::parse);
        self.consecutive_failures = stored.consecutive_failures;
        self.last_error.clone_from(&stored.last_error);
        self.state_since = Timestamp::parse(&stored.state_since).unwrap_or(self.state_since);
        self.failing_since = ts(&stored.failing_since);
        // The state is kept when it changes, not at every success: a kept last
        // success is the last one only if the lane was failing since (else
        // `disable_after` would count from a success long superseded, and a
        // healthy destination restarted into a short outage be disabled at once).
        self.last_success = ts(&stored.last_success).filter(|_| self.failing_since.is_some());
        let until = ts(&stored.paused_until);
        match stored.state.as_str() {
            "disabled" => self.circuit = Circuit::Disabled,
            "failing" => {
                self.circuit = Circuit::Open {
                    next_probe: now,
                    interval: FIRST_PROBE,
                    probing: false,
                }
            }
            "paused" if until.is_none() => self.paused = true,
            _ => {}
        }
        if let Some(until) = until {
            let left = (until.0 - Timestamp::now().0).to_std().unwrap_or_default();
            if !left.is_zero() {
                self.paused_until = Some((now + left.min(MAX_PAUSE), until));
            }
        }
    }

    /// Follows what another instance kept (several instances on PostgreSQL): an
    /// operator's pause, a `Retry-After` pause (the receiver asked the whole
    /// destination to wait, SPEC §10), a disabled destination, and a resume of
    /// either. The circuit stays each instance's own. True when it changed
    /// anything.
    pub(crate) fn follow(&mut self, stored: &Stored, now: Instant) -> bool {
        if stored.kept_by.as_deref() == Some(this_process()) {
            return false;
        }
        if let Some(until) = stored.paused_until.as_deref().and_then(Timestamp::parse) {
            let left = (until.0 - Timestamp::now().0).to_std().unwrap_or_default();
            let later = self.paused_until.is_none_or(|(_, mine)| mine.0 < until.0);
            if stored.state == "paused" && !left.is_zero() && later {
                self.paused_until = Some((now + left.min(MAX_PAUSE), until));
                return true;
            }
        }
        match stored.state.as_str() {
            "paused" if stored.paused_until.is_none() && !self.paused => {
                self.pause(now);
                true
            }
            "disabled" if self.circuit != Circuit::Disabled => {
                let before = self.state(now);
                self.circuit = Circuit::Disabled;
                self.changed(before, now);
                true
            }
            "healthy" if self.paused || self.circuit == Circuit::Disabled => {
                self.resume(now);
                true
            }
            _ => false,
        }
    }

    fn changed(&mut self, before: State, now: Instant) -> Option<Transition> {
        let after = self.state(now);
        (after != before).then(|| {
            self.state_since = Timestamp::now();
            Transition {
                previous: before,
                state: after,
            }
        })
    }
}

/// A lane as kept in the database (JSON text, the same on both backends).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Stored {
    /// `healthy`, `paused`, `failing` or `disabled`.
    pub(crate) state: String,
    /// When it became so (RFC 3339).
    pub(crate) state_since: String,
    /// A `Retry-After` pause's end.
    pub(crate) paused_until: Option<String>,
    /// Retryable failures in a row.
    pub(crate) consecutive_failures: u32,
    /// The last error.
    pub(crate) last_error: Option<String>,
    /// The last success.
    pub(crate) last_success: Option<String>,
    /// The first failure since the last success.
    pub(crate) failing_since: Option<String>,
    /// The process that kept it ([`this_process`]): an instance does not follow
    /// its own states — its lanes are ahead of what it kept, and a state read
    /// back a moment late would undo a change made since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kept_by: Option<String>,
}

/// A token of this process, set once: what [`Stored::kept_by`] holds.
pub(crate) fn this_process() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| Uuid::new_v4().simple().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::flow::RateLimit;

    fn lane(max: u32) -> Lane<u32> {
        Lane::new(FlowControl {
            max_in_flight: max,
            ..FlowControl::default()
        })
    }

    fn fail() -> Verdict {
        Verdict::Retryable {
            error: "HTTP 500".into(),
            retry_after: None,
        }
    }

    #[test]
    fn max_in_flight_parks_the_rest_in_order() {
        let mut l = lane(2);
        let now = Instant::now();
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        assert!(matches!(l.enter(ids[0], 0, now, false), Enter::Go(0)));
        assert!(matches!(l.enter(ids[1], 1, now, false), Enter::Go(1)));
        assert!(matches!(
            l.enter(ids[2], 2, now, false),
            Enter::Parked(Reason::MaxInFlight)
        ));
        assert!(matches!(l.enter(ids[3], 3, now, false), Enter::Parked(_)));
        assert_eq!(l.release(now).0, Vec::<u32>::new());
        l.finish(Verdict::Success, now);
        assert_eq!(l.release(now).0, vec![2], "the oldest parked goes first");
        assert!(
            matches!(l.enter(ids[2], 2, now, false), Enter::Go(2)),
            "its place is kept"
        );
        assert_eq!(l.in_flight(), 2);
    }

    #[test]
    fn a_rate_limit_spaces_starts_evenly() {
        let mut l: Lane<u32> = Lane::new(FlowControl {
            max_in_flight: 100,
            rate_limit: Some(RateLimit {
                count: 10,
                period: Duration::from_secs(1),
            }),
            disable_after: None,
        });
        let now = Instant::now();
        assert!(matches!(
            l.enter(Uuid::now_v7(), 0, now, false),
            Enter::Go(_)
        ));
        assert!(matches!(
            l.enter(Uuid::now_v7(), 1, now, false),
            Enter::Parked(Reason::RateLimit)
        ));
        let (go, when) = l.release(now);
        assert!(go.is_empty());
        assert_eq!(when, Some(now + Duration::from_millis(100)));
        let (go, _) = l.release(now + Duration::from_millis(100));
        assert_eq!(go, vec![1]);
    }

    #[test]
    fn retry_after_pauses_the_lane_and_zero_does_not() {
        let mut l = lane(8);
        let now = Instant::now();
        l.enter(Uuid::now_v7(), 0, now, false);
        l.finish(
            Verdict::Retryable {
                error: "HTTP 429".into(),
                retry_after: Some(Duration::ZERO),
            },
            now,
        );
        assert_eq!(l.state(now), State::Healthy);
        l.enter(Uuid::now_v7(), 0, now, false);
        let t = l.finish(
            Verdict::Retryable {
                error: "HTTP 429".into(),
                retry_after: Some(Duration::from_secs(7200)),
            },
            now,
        );
        assert_eq!(t.map(|t| t.state), Some(State::Paused));
        assert_eq!(
            l.blocked(now),
            Some((Reason::RetryAfter, Some(now + MAX_PAUSE))),
            "capped at 1 h"
        );
        assert_eq!(l.blocked(now + MAX_PAUSE), None);
    }

    #[test]
    fn the_circuit_opens_probes_and_closes() {
        let mut l = lane(8);
        let mut now = Instant::now();
        let mut last = None;
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            last = l.finish(fail(), now);
        }
        assert_eq!(last.map(|t| t.state), Some(State::Failing));
        assert!(matches!(
            l.enter(Uuid::now_v7(), 1, now, false),
            Enter::Parked(Reason::Circuit)
        ));
        assert!(matches!(
            l.enter(Uuid::now_v7(), 2, now, false),
            Enter::Parked(Reason::Circuit)
        ));
        now += FIRST_PROBE;
        assert_eq!(l.release(now).0, vec![1], "one probe");
        assert!(l.release(now).0.is_empty(), "only one at a time");
        l.finish(fail(), now);
        assert_eq!(
            l.blocked(now),
            Some((Reason::Circuit, Some(now + FIRST_PROBE * 2))),
            "the interval doubles"
        );
        now += FIRST_PROBE * 2;
        assert_eq!(l.release(now).0, vec![2]);
        let t = l.finish(Verdict::Success, now);
        assert_eq!(t.map(|t| t.state), Some(State::Healthy));
        assert_eq!(l.consecutive_failures, 0);
    }

    #[test]
    fn a_stored_state_comes_back() {
        let now = Instant::now();
        let mut l = lane(8);
        l.pause(now);
        let kept = l.stored(now);
        let mut back = lane(8);
        back.restore(&kept, now);
        assert_eq!(back.state(now), State::Paused);
        assert_eq!(back.blocked(now), Some((Reason::Paused, None)));
        let mut l = lane(8);
        l.enter(Uuid::now_v7(), 0, now, false);
        l.finish(Verdict::Gone("HTTP 410".into()), now);
        let mut back = lane(8);
        back.restore(&l.stored(now), now);
        assert_eq!(back.state(now), State::Disabled);
        assert_eq!(back.last_error.as_deref(), Some("HTTP 410"));
    }

    #[test]
    fn disable_after_elapsed_while_failing_disables() {
        let mut l: Lane<u32> = Lane::new(FlowControl {
            disable_after: Some(Duration::from_millis(20)),
            ..FlowControl::default()
        });
        let mut now = Instant::now();
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            l.finish(fail(), now);
        }
        assert_eq!(l.state(now), State::Failing);
        std::thread::sleep(Duration::from_millis(30));
        now += FIRST_PROBE;
        assert!(
            matches!(l.enter(Uuid::now_v7(), 1, now, false), Enter::Go(1)),
            "the probe"
        );
        let t = l.finish(fail(), now);
        assert_eq!(t.map(|t| t.state), Some(State::Disabled));
    }

    #[test]
    fn disable_after_counts_from_the_last_success() {
        let mut l: Lane<u32> = Lane::new(FlowControl {
            disable_after: Some(Duration::from_millis(20)),
            ..FlowControl::default()
        });
        let now = Instant::now();
        l.enter(Uuid::now_v7(), 0, now, false);
        l.finish(Verdict::Success, now);
        // Idle past `disable_after`, then failing: no success for that long.
        std::thread::sleep(Duration::from_millis(30));
        let mut last = None;
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            last = l.finish(fail(), now);
        }
        assert_eq!(last.map(|t| t.state), Some(State::Disabled));
    }

    /// The probe after the circuit opens comes no later than `disable_after`'s
    /// end, so a destination still failing then is disabled on time.
    #[test]
    fn the_next_probe_is_no_later_than_disable_after() {
        let limit = Duration::from_secs(2);
        let mut l: Lane<u32> = Lane::new(FlowControl {
            disable_after: Some(limit),
            ..FlowControl::default()
        });
        let now = Instant::now();
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            l.finish(fail(), now);
        }
        assert_eq!(l.state(now), State::Failing);
        let Circuit::Open { next_probe, .. } = l.circuit else {
            panic!("open: {:?}", l.circuit)
        };
        assert!(
            next_probe <= now + limit,
            "{:?} after now",
            next_probe - now
        );
        assert!(next_probe + Duration::from_millis(500) >= now + limit);
        // Without disable_after the first probe waits its interval.
        let mut plain = lane(8);
        for _ in 0..OPEN_AFTER {
            plain.enter(Uuid::now_v7(), 0, now, false);
            plain.finish(fail(), now);
        }
        let Circuit::Open { next_probe, .. } = plain.circuit else {
            panic!("open")
        };
        assert_eq!(next_probe, now + FIRST_PROBE);
    }

    /// Another instance's `Retry-After` pause holds here too, until its end.
    #[test]
    fn a_retry_after_pause_kept_elsewhere_is_followed() {
        let now = Instant::now();
        let mut there = lane(8);
        there.enter(Uuid::now_v7(), 0, now, false);
        there.finish(
            Verdict::Retryable {
                error: "HTTP 429".into(),
                retry_after: Some(Duration::from_secs(5)),
            },
            now,
        );
        let mut kept = there.stored(now);
        assert_eq!(kept.state, "paused");
        let mut here = lane(8);
        assert!(!here.follow(&kept, now), "not what this process kept");
        kept.kept_by = Some("another process".into());
        assert!(here.follow(&kept, now));
        assert_eq!(here.state(now), State::Paused);
        assert!(!here.follow(&kept, now), "once");
        assert_eq!(here.state(now + Duration::from_secs(6)), State::Healthy);
    }

    /// After an operator's resume a destination that keeps failing is `failing`
    /// first, then `disabled` once `disable_after` has passed since the resume.
    #[test]
    fn disable_after_counts_again_from_a_resume() {
        let limit = Duration::from_millis(40);
        let mut l: Lane<u32> = Lane::new(FlowControl {
            disable_after: Some(limit),
            ..FlowControl::default()
        });
        let now = Instant::now();
        l.enter(Uuid::now_v7(), 0, now, false);
        l.finish(Verdict::Gone("HTTP 410".into()), now);
        assert_eq!(l.state(now), State::Disabled);
        std::thread::sleep(limit * 2);
        let back = l.resume(now).map(|t| t.state);
        assert_eq!(back, Some(State::Healthy));
        let mut last = None;
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            last = l.finish(fail(), now).or(last);
        }
        assert_eq!(
            last.map(|t| t.state),
            Some(State::Failing),
            "not disabled at once"
        );
        std::thread::sleep(limit * 2);
        let probe = now + FIRST_PROBE;
        assert!(matches!(
            l.enter(Uuid::now_v7(), 1, probe, false),
            Enter::Go(1)
        ));
        let t = l.finish(fail(), probe);
        assert_eq!(t.map(|t| t.state), Some(State::Disabled));
    }

    /// A kept state holds the last success of its last change only: restored
    /// from a healthy lane it is not the last one, and `disable_after` must not
    /// count from it; from a failing lane it is.
    #[test]
    fn a_restored_last_success_counts_only_from_a_failing_state() {
        let now = Instant::now();
        let mut l = lane(8);
        l.enter(Uuid::now_v7(), 0, now, false);
        l.finish(Verdict::Success, now);
        let mut back = lane(8);
        back.restore(&l.stored(now), now);
        assert_eq!(back.last_success, None, "superseded by later successes");
        for _ in 0..OPEN_AFTER {
            l.enter(Uuid::now_v7(), 0, now, false);
            l.finish(fail(), now);
        }
        let mut back = lane(8);
        back.restore(&l.stored(now), now);
        assert_eq!(back.last_success, l.last_success, "no success since");
        assert_eq!(back.state(now), State::Failing);
    }

    #[test]
    fn gone_disables_until_resumed_and_nothing_is_dropped() {
        let mut l = lane(8);
        let now = Instant::now();
        l.enter(Uuid::now_v7(), 0, now, false);
        let t = l.finish(Verdict::Gone("HTTP 410".into()), now);
        assert_eq!(t.map(|t| t.state), Some(State::Disabled));
        assert!(matches!(
            l.enter(Uuid::now_v7(), 1, now, false),
            Enter::Parked(Reason::Circuit)
        ));
        assert!(l.release(now + LAST_PROBE * 10).0.is_empty());
        l.resume(now);
        assert_eq!(l.release(now).0, vec![1]);
    }

    #[test]
    fn a_full_lane_lets_go_and_asks_back_from_the_oldest() {
        let mut l = lane(1);
        let now = Instant::now();
        l.pause(now);
        let ids: Vec<Uuid> = (0..136).map(|_| Uuid::now_v7()).collect();
        let mut let_go = 0;
        for (n, id) in ids.iter().enumerate() {
            if matches!(l.enter(*id, n as u32, now, true), Enter::LetGo(..)) {
                let_go += 1;
            }
        }
        assert_eq!(l.held(), 128);
        assert_eq!(let_go, 8);
        assert_eq!(l.take_spilled(), None, "not while paused and full");
        l.resume(now);
        let (go, _) = l.release(now);
        assert_eq!(go.len(), 1);
        for _ in 0..70 {
            l.finish(Verdict::Success, now);
            l.release(now);
        }
        assert_eq!(l.take_spilled(), Some(ids[128]));
    }

    #[test]
    fn a_lane_keeps_its_share_of_the_window_before_it_lets_go() {
        let mut l = lane(1);
        l.share = 500;
        let now = Instant::now();
        l.pause(now);
        let let_go = (0..600u32)
            .filter(|n| matches!(l.enter(Uuid::now_v7(), *n, now, true), Enter::LetGo(..)))
            .count();
        assert_eq!(l.held(), 500, "the share, not the floor of 128");
        assert_eq!(let_go, 100);
    }
}
