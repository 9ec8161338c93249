//! The one path in: commit, then hand what was committed to processing.
//!
//! Every writer of new work goes through here: intake ([`accept`]), replay
//! ([`replay`]) and the subscribers API ([`change_subscribers`]). Each runs its
//! commit *and* the step after it (queueing the jobs, releasing the ordering gate,
//! reloading the routing table) in a task of its own that the request only awaits.
//! A client that hangs up makes the server drop the request's future, which used to
//! cancel it between the commit and the hand-off: the event stayed `pending` until a
//! restart, and an ordered key was blocked behind it. A dropped request now drops
//! only its wait for the answer; the task runs to its end.
//!
//! Ordered deliveries take their place in line before their commit (in the ordering
//! gate of processing); a drop guard gives the place back when the commit does not
//! create them, whatever ends the task.

use std::future::Future;
use std::sync::Arc;

use crate::model::NewEvent;
use crate::processing::job::Job;
use crate::processing::ordering::OrderingGate;
use crate::state::AppState;
use crate::store::{Inserted, PendingDelivery, ReplayFilter, Store, StoreError};

/// Why committing through the inbox failed.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The store refused or could not be reached; for intake: nothing was stored.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change was committed but the routing table could not be rebuilt.
    #[error("the routing table could not be rebuilt: {0}")]
    Routing(String),
    /// The commit task panicked or was cancelled by the runtime's shutdown.
    #[error("the commit task ended abnormally: {0}")]
    Task(String),
}

/// Runs `work` in a task of its own and waits for it: dropping the caller does not
/// cancel `work`.
async fn detached<T, F>(work: F) -> Result<T, InboxError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, InboxError>> + Send + 'static,
{
    tokio::spawn(work)
        .await
        .map_err(|e| InboxError::Task(e.to_string()))?
}

/// The ordered deliveries of one new event, registered with the gate; dropped
/// without [`Place::keep`], it releases them (and queues whoever they held back).
struct Place {
    app: AppState,
    gate: Option<Arc<OrderingGate>>,
    ordered: Vec<(String, String, uuid::Uuid)>,
}

impl Place {
    fn take(app: &AppState, event: &NewEvent) -> Self {
        let gate = app.gate.clone();
        let ordered: Vec<_> = match &gate {
            None => Vec::new(),
            Some(gate) => event
                .deliveries
                .iter()
                .filter_map(|d| {
                    let value = d.ordering_value.clone()?;
                    gate.register(&d.handler, &value, d.id);
                    Some((d.handler.clone(), value, d.id))
                })
                .collect(),
        };
        Self {
            app: app.clone(),
            gate,
            ordered,
        }
    }

    /// The deliveries were committed: their places are theirs now.
    fn keep(mut self) {
        self.ordered.clear();
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some(gate) = &self.gate else { return };
        let released: Vec<Job> = self
            .ordered
            .drain(..)
            .filter_map(|(handler, value, delivery)| gate.finished(&handler, &value, delivery))
            .collect();
        if !released.is_empty() {
            self.app.dispatch.submit(released);
        }
    }
}

/// Commits a new event with its deliveries and hands its jobs to processing, or
/// returns the event that already holds its key (nothing is queued then).
pub async fn accept(app: &AppState, event: NewEvent) -> Result<Inserted, InboxError> {
    let place = Place::take(app, &event);
    let jobs = Job::for_new_event(&event);
    let unrouted = event.deliveries.is_empty();
    let app = app.clone();
    detached(async move {
        let inserted = app.store.insert_event(event).await?;
        if inserted.created {
            place.keep();
            app.dispatch.submit(jobs);
            count_received(&app, &inserted.event.event_type, unrouted);
        }
        Ok(inserted)
    })
    .await
}

/// Counts a new event in `hookbox_events_received_total` (labelled by the routing
/// table) and, when no handler matched it, `hookbox_events_unrouted_total` — here,
/// after the commit, so that an event whose sender hung up is counted too.
fn count_received(app: &AppState, event_type: &str, unrouted: bool) {
    use crate::telemetry::names;
    let label = app.registry.current().event_type_label(event_type);
    metrics::counter!(names::EVENTS_RECEIVED, "event_type" => label).increment(1);
    if unrouted {
        metrics::counter!(names::EVENTS_UNROUTED).increment(1);
    }
}

/// Resets the failed deliveries `filter` selects to `pending` and queues them
/// (ordered ones take their place in line first); returns them.
pub async fn replay(
    app: &AppState,
    filter: ReplayFilter,
) -> Result<Vec<PendingDelivery>, InboxError> {
    let app = app.clone();
    detached(async move {
        let replayed = app.store.replay(filter).await?;
        if let Some(gate) = &app.gate {
            for d in &replayed {
                if let Some(value) = &d.ordering_value {
                    gate.register(&d.handler, value, d.delivery);
                }
            }
        }
        if !replayed.is_empty() {
            app.dispatch.submit(
                replayed
                    .iter()
                    .map(|d| Job::deliver(d.delivery, d.event))
                    .collect(),
            );
        }
        Ok(replayed)
    })
    .await
}

/// Serialises "read the subscribers, rebuild the table", so that two changes that
/// finish together cannot install an older reading over a newer one.
static RELOADING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `write` (a change to the stored subscribers) and then rebuilds the routing
/// table from what is stored, so a committed change is routed at once.
pub async fn change_subscribers<T, W, F>(app: &AppState, write: W) -> Result<T, InboxError>
where
    T: Send + 'static,
    W: FnOnce(Arc<dyn Store>) -> F,
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let change = write(app.store.clone());
    let app = app.clone();
    detached(async move {
        let outcome = change.await?;
        let _one_at_a_time = RELOADING.lock().await;
        let all = app.store.subscribers().await?;
        app.registry
            .reload(&all)
            .map_err(|e| InboxError::Routing(e.to_string()))?;
        Ok(outcome)
    })
    .await
}
