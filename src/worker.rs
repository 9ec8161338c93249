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
use tracing::{debug, warn};
use uuid::Uuid;

use crate::model::{DeliveryTask, Finish, NewEvent, Status, Timestamp};
use crate::queue::Queue;
use crate::registry::{Event, Registry, Route};
use crate::retry::{Decision, Failure, jitter};
use crate::store::Store;
use crate::telemetry::names;
use crate::timer::Timer;

/// One unit of work in the in-memory queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// Run one attempt of a delivery.
    Deliver {
        /// The delivery.
        delivery: Uuid,
        /// Its event.
        event: Uuid,
    },
    /// Derive an event's status from its deliveries; an event without deliveries
    /// (no handler matched) becomes `completed`.
    Settle(Uuid),
}

impl Job {
    /// The jobs a freshly stored event needs: one per delivery, or one settle.
    pub fn for_new_event(event: &NewEvent) -> Vec<Job> {
        if event.deliveries.is_empty() {
            return vec![Job::Settle(event.id)];
        }
        event
            .deliveries
            .iter()
            .map(|d| Job::Deliver {
                delivery: d.id,
                event: event.id,
            })
            .collect()
    }
}

/// What every worker shares.
#[derive(Clone)]
pub struct Workers {
    /// Where jobs come from.
    pub queue: Arc<Queue<Job>>,
    /// Where outcomes go.
    pub store: Arc<dyn Store>,
    /// Handlers by name.
    pub registry: Arc<Registry>,
    /// Where retries wait.
    pub timer: Timer,
}

impl Workers {
    /// Runs one worker until the queue closes.
    pub async fn run(self) {
        while let Some(lease) = self.queue.take().await {
            match &*lease {
                Job::Settle(event) => {
                    if let Err(e) = self.store.settle(*event).await {
                        warn!(event = %event, error = %e, "settling failed; recovery will redo it");
                    }
                }
                Job::Deliver { delivery, .. } => {
                    if let Err(e) = self.deliver(*delivery).await {
                        // The delivery stays pending/processing: the next start
                        // recovers it; meanwhile try again in a while.
                        warn!(delivery = %delivery, error = %e, "could not record an attempt");
                        self.timer
                            .after(lease.clone(), std::time::Duration::from_secs(5));
                    }
                }
            }
        }
    }

    async fn deliver(&self, delivery: Uuid) -> Result<(), crate::store::StoreError> {
        let Some(task) = self.store.delivery_task(delivery).await? else {
            return Ok(()); // deleted by retention or replayed elsewhere
        };
        if task.status.is_terminal() {
            return Ok(()); // a duplicate job (recovery and timer both had it)
        }
        if let Some(due) = task.retry_after.filter(|t| *t > Timestamp::now()) {
            self.timer.at(job_of(&task), due);
            return Ok(());
        }
        let Some(route) = self.registry.get(&task.handler) else {
            let message = format!("no handler named {:?} is registered", task.handler);
            return self
                .record(&task, Status::Failed, task.attempts, Some(message), None)
                .await;
        };
        self.store.start(task.delivery_id, task.event_id).await?;
        let attempt = task.attempts + 1;
        let started = Instant::now();
        let result = attempt_once(route, &task, attempt).await;
        metrics::histogram!(names::DELIVERY_DURATION, "handler" => route.name.clone())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                count(route, "completed");
                self.record(&task, Status::Completed, attempt, None, None)
                    .await
            }
            Err(failure) => match route.policy.decide(attempt, &failure, jitter()) {
                Decision::Retry { after } => {
                    count(route, "retry");
                    let due = Timestamp(Timestamp::now().0 + after);
                    debug!(delivery = %task.delivery_id, attempt, error = %failure.message, "retry scheduled");
                    self.record(
                        &task,
                        Status::Pending,
                        attempt,
                        Some(failure.message),
                        Some(due),
                    )
                    .await?;
                    self.timer.after(job_of(&task), after);
                    Ok(())
                }
                Decision::DeadLetter => {
                    count(route, "dead_letter");
                    warn!(delivery = %task.delivery_id, handler = %route.name, attempt, error = %failure.message, "dead letter");
                    self.record(&task, Status::Failed, attempt, Some(failure.message), None)
                        .await
                }
            },
        }
    }

    async fn record(
        &self,
        task: &DeliveryTask,
        status: Status,
        attempts: u32,
        last_error: Option<String>,
        retry_after: Option<Timestamp>,
    ) -> Result<(), crate::store::StoreError> {
        self.store
            .finish(Finish {
                delivery_id: task.delivery_id,
                event_id: task.event_id,
                status,
                attempts,
                last_error,
                retry_after,
            })
            .await
    }
}

fn job_of(task: &DeliveryTask) -> Job {
    Job::Deliver {
        delivery: task.delivery_id,
        event: task.event_id,
    }
}

fn count(route: &Route, outcome: &'static str) {
    metrics::counter!(names::DELIVERIES, "handler" => route.name.clone(), "outcome" => outcome)
        .increment(1);
}

/// One attempt under the route's timeout, with panics turned into failures.
async fn attempt_once(route: &Route, task: &DeliveryTask, attempt: u32) -> Result<(), Failure> {
    let event = Event::new(
        task.event_id,
        task.delivery_id,
        task.idempotency_key.clone(),
        task.event_type.clone(),
        task.payload.clone(),
        task.created_at,
        attempt,
    );
    let call = AssertUnwindSafe(route.handler.clone().oneshot(event)).catch_unwind();
    match tokio::time::timeout(route.policy.timeout, call).await {
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
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
