//! Workers: take a job, run the handler under its timeout with panics caught,
//! record the outcome; the event's status follows its deliveries.
//!
//! A panic, a hang (timeout) or a garbage answer costs one attempt and never a
//! worker (invariant 4).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tower::ServiceExt;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::model::{Attempt, AttemptOutcome, DeliveryTask, Finish, Status, Timestamp};
use crate::processing::feed::Feed;
use crate::processing::job::Job;
use crate::processing::lane::Verdict;
use crate::processing::lanes::{Lanes, Notice, Slot, is_operator_event};
use crate::processing::queue::{Lease, Queue};
use crate::processing::window::Attempting;
use crate::redact;
use crate::registry::live::LiveRegistry;
use crate::registry::{Answered, Event, Route};
use crate::retry::{Decision, Failure, jitter};
use crate::store::{Store, StoreError};
use crate::telemetry::DeliveryOutcome;
use crate::trace_context::TraceContext;
use crate::trace_export;

/// What every worker shares.
#[derive(Clone)]
pub(crate) struct Workers {
    /// Where jobs come from.
    pub(crate) queue: Arc<Queue<Job>>,
    /// Where outcomes go.
    pub(crate) store: Arc<dyn Store>,
    /// Handlers by name.
    pub(crate) registry: Arc<LiveRegistry>,
    /// Who fills `queue`: the window (SQLite) or the claimer (PostgreSQL).
    pub(crate) feed: Feed,
    /// Every destination's lane: what may start now.
    pub(crate) lanes: Arc<Lanes>,
    /// The tasks recording outcomes (shutdown waits for them).
    pub(crate) recorders: tokio_util::task::TaskTracker,
}

/// An attempt's result, to record after the worker moved on.
struct Outcome {
    finish: Finish,
    /// `(handler, ordering value)` when the delivery is ordered.
    ordering: Option<(String, String)>,
    /// The retry to schedule once the outcome is committed.
    retry: Option<std::time::Duration>,
    /// The delivery had no `retry_after` before this attempt.
    fresh: bool,
    /// Its handler.
    handler: String,
    /// The attempt counts as running (erasure answers 409) until its outcome is
    /// committed: an erasure between the two would count the delivery out of the
    /// backlog, and the outcome a second time.
    running: Option<Attempting>,
}

impl Workers {
    /// Runs one worker until the queue closes.
    ///
    /// A job whose destination cannot take it now waits in its lane
    /// ([`Lanes::enter`]) and the worker takes the next one: a worker never waits
    /// for a destination. Recording an outcome is handed to a task of
    /// [`Workers::recorders`] that keeps the job's queue place until the commit
    /// (unless the feed lets it go early, see [`Feed::early_release`]), so the
    /// worker takes its next job while the writer commits (measured: 6.9k → 12k
    /// events/s end to end).
    ///
    /// Before anything that may keep it busy — an attempt, a read or write of the
    /// store — a worker wakes another for the jobs still queued
    /// ([`Queue::pass_on`]); a worker that only parks a job takes the next itself,
    /// so that the idle workers are not woken one per parked job.
    pub(crate) async fn run(self) {
        // A job of the destination this worker just served, whose turn came.
        let mut next: Option<Lease<Job>> = None;
        loop {
            let lease = match next.take() {
                Some(lease) if !self.queue.is_closed() => lease,
                Some(lease) => {
                    lease.requeue(); // shutting down: it runs after the restart
                    continue;
                }
                None => match self.queue.take().await {
                    Some(lease) => lease,
                    None => break,
                },
            };
            let (delivery, known) = match &*lease {
                Job::Settle(event) => {
                    self.queue.pass_on();
                    if let Err(e) = self.store.settle(*event).await {
                        warn!(event = %event, error = %e, "settling failed; recovery will redo it");
                    }
                    continue;
                }
                Job::Unrouted(_) => continue,
                Job::Deliver { delivery, task, .. } => (*delivery, task.clone()),
            };
            // Reading the task, or an ordered one's turn, asks the store.
            if known.as_ref().is_none_or(|t| t.ordering_value.is_some()) {
                self.queue.pass_on();
            }
            let task = match self.due_task(delivery, known).await {
                Ok(Some(task)) => task,
                Ok(None) => {
                    self.lanes.forget(delivery);
                    continue;
                }
                Err(e) => {
                    self.lanes.forget(delivery);
                    self.put_back(lease, delivery, &e);
                    continue;
                }
            };
            let registry = self.registry.current();
            let Some(route) = registry.get(&task.handler) else {
                self.lanes.forget(delivery);
                let message = format!("no handler named {:?} is registered", task.handler);
                // No attempt ran: nothing for the attempt history.
                let o = outcome(
                    &task,
                    Status::Failed,
                    task.attempts,
                    Some(message),
                    None,
                    None,
                );
                self.queue.pass_on();
                self.hand_over(lease, o).await;
                continue;
            };
            let quiet = is_operator_event(&task.event_type);
            let Some((lease, slot)) = self.lanes.enter(route, delivery, lease, quiet) else {
                continue; // it waits in its lane; this worker takes the next job
            };
            self.queue.pass_on();
            match self.attempt(route, &task, slot).await {
                Ok((outcome, then)) => {
                    self.hand_over(lease, outcome).await;
                    next = then;
                }
                Err(e) => self.put_back(lease, delivery, &e),
            }
        }
    }

    /// Hands an outcome to a recorder task, with the job's queue place.
    async fn hand_over(&self, lease: Lease<Job>, outcome: Outcome) {
        let this = self.clone();
        let permit = self.feed.early_release().await;
        // The queue place goes now or with the commit.
        let place = permit.is_none().then_some(lease);
        self.recorders.spawn(async move {
            this.record(outcome).await;
            drop((place, permit));
        });
    }

    /// The store failed before the attempt ran: the job comes back later.
    fn put_back(&self, lease: Lease<Job>, delivery: Uuid, e: &StoreError) {
        if self
            .feed
            .put_back_after((*lease).clone(), RETRY_STORE_AFTER)
        {
            warn!(delivery = %delivery, error = %e, "could not read or start a delivery; retrying in 5s");
        } else {
            // A claimed job carries its task and a failed start is only
            // logged, so this does not happen; were it to, the lease
            // would keep the delivery until this instance stops.
            warn!(delivery = %delivery, error = %e, "could not start a claimed delivery");
        }
    }

    /// The delivery's task when an attempt of it is due now; `None` when it is
    /// finished, not due yet (held until then), or waits for an older delivery of
    /// its ordering key.
    async fn due_task(
        &self,
        delivery: Uuid,
        known: Option<Arc<DeliveryTask>>,
    ) -> Result<Option<Arc<DeliveryTask>>, StoreError> {
        // Intake's copy is read again when its event may have been erased since.
        let known = known.filter(|_| {
            self.feed
                .window()
                .is_none_or(|w| !w.copy_may_be_stale(delivery))
        });
        let task = match known {
            Some(task) => task,
            None => match self.store.delivery_task(delivery).await? {
                Some(task) => Arc::new(task),
                None => return Ok(None), // deleted by retention or erased
            },
        };
        if task.status.is_terminal() {
            return Ok(None); // a duplicate job (recovery and timer both had it)
        }
        // A claimed delivery is due by the database's clock, which decided the claim.
        if let Some(due) = task.retry_after.filter(|t| *t > Timestamp::now()) {
            if self.feed.hold_until(due) {
                return Ok(None);
            }
        }
        if !self.feed.admit(&task).await? {
            return Ok(None); // an older delivery of this key is unfinished: it waits
        }
        Ok(Some(task))
    }

    /// Runs one attempt of a delivery with its lane's `slot`, which it gives back
    /// with what the result means for the destination; with the outcome, the
    /// destination's next job whose turn came (see [`Lanes::finish`]).
    async fn attempt(
        &self,
        route: &Route,
        task: &DeliveryTask,
        slot: Slot,
    ) -> Result<(Outcome, Option<Lease<Job>>), StoreError> {
        let attempt = task.attempts + 1;
        let started_at = Timestamp::now().0;
        let started = Instant::now();
        let span = task.trace.as_ref().map(TraceContext::child);
        // Known to be running from its first moment (erasing answers 409) until
        // its outcome is committed, not only once it is marked `processing`
        // (SQLite; PostgreSQL stores it claimed, `processing`, before it runs).
        let running = self.feed.window().map(|w| w.attempt(task.event_id));
        let (result, done) = self.attempt_marked(route, task, attempt, &span).await?;
        // What is kept and shown of a failure (the attempt history, the delivery's,
        // the event's and the destination's `last_error`, the log, operator
        // events): credentials stripped, at most 1 KB.
        let result = result.map_err(|mut failure| {
            failure.message = redact::attempt_error(&failure.message, Attempt::MAX_ERROR_BYTES);
            failure
        });
        let (answer, request) = (done.answer, done.request);
        let took = started.elapsed();
        let cancelled = answer.as_ref().is_some_and(|a| a.cancelled);
        let response_status = answer.as_ref().filter(|a| !a.cancelled).map(|a| a.status);
        let next = self.lanes.finish(slot, verdict(&result, response_status));
        let response_body = answer
            .and_then(|a| a.body)
            .map(|b| redact::attempt_error(&b, Attempt::MAX_ERROR_BYTES));
        route.metrics.took(&route.name, took.as_secs_f64());
        // Its row in the attempt history, committed with the outcome; its span.
        let record = |outcome: AttemptOutcome, error: Option<&str>| {
            if let (Some(event), Some(span)) = (&task.trace, &span) {
                trace_export::attempt(&trace_export::AttemptSpan {
                    event,
                    span,
                    started: started_at.into(),
                    took,
                    event_id: task.event_id,
                    destination: &task.handler,
                    attempt,
                    outcome: outcome.as_str(),
                });
            }
            Attempt {
                handler: task.handler.clone(),
                attempt,
                started_at,
                duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                outcome,
                response_status,
                response_body: response_body.clone(),
                request: request.clone(),
                // Stripped and bounded already (`result` above).
                error: error.map(str::to_owned),
            }
        };
        let Err(failure) = result else {
            let (label, kind) = if cancelled {
                (DeliveryOutcome::Cancelled, AttemptOutcome::Cancelled)
            } else {
                (DeliveryOutcome::Completed, AttemptOutcome::Completed)
            };
            count(route, label);
            let done = record(kind, None);
            let mut o = outcome(task, Status::Completed, attempt, None, None, Some(done));
            o.running = running;
            return Ok((o, next));
        };
        let mut decided = match route.policy.decide(attempt, &failure, jitter()) {
            Decision::Retry { after } => {
                count(route, DeliveryOutcome::Retry);
                debug!(delivery = %task.delivery_id, trace_id = trace_id(task), attempt, error = %failure.message, "retry scheduled");
                let tried = record(AttemptOutcome::Retry, Some(&failure.message));
                let mut o = outcome(
                    task,
                    Status::Pending,
                    attempt,
                    Some(failure.message),
                    Some(after),
                    Some(tried),
                );
                o.retry = Some(after);
                o
            }
            Decision::DeadLetter => {
                count(route, DeliveryOutcome::DeadLetter);
                warn!(delivery = %task.delivery_id, trace_id = trace_id(task), handler = %route.name, attempt, error = %failure.message, "dead letter");
                if !is_operator_event(&task.event_type) {
                    self.lanes.dead_lettered(Notice::DeadLettered {
                        destination: route.name.clone(),
                        event_id: task.event_id,
                        event_type: task.event_type.clone(),
                        attempts: attempt,
                        last_error: Some(failure.message.clone()),
                    });
                }
                let tried = record(AttemptOutcome::DeadLetter, Some(&failure.message));
                outcome(
                    task,
                    Status::Failed,
                    attempt,
                    Some(failure.message),
                    None,
                    Some(tried),
                )
            }
        };
        decided.running = running;
        Ok((decided, next))
    }

    /// Runs the attempt; if it is still running after [`MARK_PROCESSING_AFTER`],
    /// marks the delivery `processing` (fast attempts skip that write: recovery
    /// treats `pending` and `processing` alike, so it only serves visibility).
    async fn attempt_marked(
        &self,
        route: &Route,
        task: &DeliveryTask,
        attempt: u32,
        span: &Option<TraceContext>,
    ) -> Result<(Result<(), Failure>, Done), crate::store::StoreError> {
        let run = attempt_once(route, task, attempt, span);
        tokio::pin!(run);
        tokio::select! {
            result = &mut run => return Ok(result),
            () = tokio::time::sleep(MARK_PROCESSING_AFTER) => {}
        }
        if let Err(e) = self.store.start(task.delivery_id, task.event_id).await {
            if self.feed.needs_mark() {
                return Err(e);
            }
            // Only the event's shown status waits for this; the claim holds.
            debug!(delivery = %task.delivery_id, error = %e, "could not mark the event processing")
        }
        Ok(run.await)
    }

    /// Commits an outcome, then tells the feeder (which schedules its retry or lets
    /// the next delivery of its ordering key go).
    async fn record(&self, outcome: Outcome) {
        let committed = self.commit(&outcome.finish).await;
        self.feed.after_commit(committed, outcome.retry);
        if committed {
            self.feed.recorded(
                &outcome.handler,
                &outcome.finish,
                outcome.fresh,
                outcome.ordering.as_ref(),
            );
        }
    }

    /// Commits an outcome, retrying with backoff while the store cannot write it
    /// (a full disk, the database away): the attempt ran, so it is its outcome that
    /// is retried, never the attempt. The caller keeps the job's queue place (and
    /// on PostgreSQL the lease) meanwhile. Gives up only when the store has stopped
    /// (shutdown): the delivery is still unfinished in the database then, and runs
    /// again after the restart (at-least-once). False when it gave up.
    async fn commit(&self, finish: &Finish) -> bool {
        let mut wait = std::time::Duration::from_millis(100);
        let mut failures = 0u32;
        loop {
            match self.store.finish(finish.clone()).await {
                Ok(()) => {
                    if failures > 0 {
                        info!(delivery = %finish.delivery_id, failures, "attempt recorded after all");
                    }
                    return true;
                }
                Err(StoreError::WriterGone) => {
                    warn!(delivery = %finish.delivery_id, "the store stopped before the attempt was recorded; it runs again after a restart");
                    return false;
                }
                Err(e) => {
                    if failures == 0 {
                        warn!(delivery = %finish.delivery_id, error = %e, "could not record an attempt; retrying the write (not the attempt)");
                    } else {
                        debug!(delivery = %finish.delivery_id, error = %e, failures, "could not record an attempt yet");
                    }
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_STORE_AFTER);
                }
            }
        }
    }
}

fn outcome(
    task: &DeliveryTask,
    status: Status,
    attempts: u32,
    last_error: Option<String>,
    retry_in: Option<std::time::Duration>,
    attempt: Option<Attempt>,
) -> Outcome {
    Outcome {
        finish: Finish {
            delivery_id: task.delivery_id,
            event_id: task.event_id,
            status,
            attempts,
            last_error,
            retry_after: retry_in.map(|d| Timestamp(Timestamp::now().0 + d)),
            attempt,
            ordered: task.ordering_value.is_some(),
        },
        retry: None,
        running: None,
        fresh: task.retry_after.is_none(),
        handler: task.handler.clone(),
        ordering: task
            .ordering_value
            .as_ref()
            .map(|v| (task.handler.clone(), v.clone())),
    }
}

/// How long to wait before trying again when the store failed.
const RETRY_STORE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// How long an attempt runs before its delivery is marked `processing`.
pub(crate) const MARK_PROCESSING_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

/// What an attempt's result means for its destination: a `Retry-After` on a 429
/// or 503 (or from a Rust handler) pauses it, a `410 Gone` disables it.
fn verdict(result: &Result<(), Failure>, status: Option<u16>) -> Verdict {
    match result {
        Ok(()) => Verdict::Success,
        Err(f) if status == Some(410) => Verdict::Gone(f.message.clone()),
        Err(f) if f.permanent => Verdict::Permanent,
        Err(f) => Verdict::Retryable {
            error: f.message.clone(),
            retry_after: f
                .retry_after
                .filter(|_| matches!(status, None | Some(429 | 503))),
        },
    }
}

/// The event's trace id for log lines (empty for an event stored without one).
fn trace_id(task: &DeliveryTask) -> &str {
    task.trace.as_ref().map_or("", TraceContext::trace_id)
}

fn count(route: &Route, outcome: DeliveryOutcome) {
    route.metrics.count(&route.name, outcome);
}

/// One attempt under the route's timeout (as the child `span` of the event's
/// trace), with panics turned into failures; with the HTTP status of the answer,
/// when an http handler got one.
async fn attempt_once(
    route: &Route,
    task: &DeliveryTask,
    attempt: u32,
    span: &Option<TraceContext>,
) -> (Result<(), Failure>, Done) {
    let event = Event::new(
        task.event_id,
        task.delivery_id,
        task.idempotency_key.clone(),
        task.event_type.clone(),
        task.payload.clone(),
        task.created_at,
        attempt,
    )
    .with_trace(span.clone());
    let answer = event.answer();
    let call = AssertUnwindSafe(route.handler.clone().oneshot(event)).catch_unwind();
    let ran = tokio::time::timeout(route.policy.timeout, call).await;
    let answered = Done {
        answer: answer.get().cloned(),
        request: answer.request().cloned(),
    };
    let result = match ran {
        Err(_) => Err(Failure::retryable(format!(
            "timed out after {}",
            humantime::format_duration(route.policy.timeout)
        ))),
        Ok(Err(panic)) => Err(Failure::retryable(format!(
            "handler panicked: {}",
            panic_text(&*panic)
        ))),
        Ok(Ok(Err(e))) => Err(e.into()),
        Ok(Ok(Ok(()))) => Ok(()),
    };
    (result, answered)
}

/// What an attempt left besides its result: the answer it got, and what a
/// transform made of its request.
#[derive(Debug, Default)]
pub(crate) struct Done {
    answer: Option<Answered>,
    request: Option<String>,
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
