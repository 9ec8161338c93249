//! Workers: take a job from the queue, do it, record the outcome.

use std::sync::Arc;

use tracing::warn;
use uuid::Uuid;

use crate::model::NewEvent;
use crate::queue::Queue;
use crate::store::Store;

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

/// Runs one worker until the queue closes.
pub async fn run(queue: Arc<Queue<Job>>, store: Arc<dyn Store>) {
    while let Some(lease) = queue.take().await {
        match &*lease {
            Job::Settle(event) => {
                if let Err(e) = store.settle(*event).await {
                    warn!(event = %event, error = %e, "settling failed; recovery will retry");
                }
            }
            Job::Deliver { delivery, .. } => {
                warn!(delivery = %delivery, "no handler runtime yet; left pending");
            }
        }
    }
}
