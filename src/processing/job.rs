//! The unit of work: what the queue, the window of due work and the claimer hold
//! and the worker runs.
//!
//! A leaf: it knows the model and nothing else of processing, so every part of
//! processing can use it without depending on the worker.

use std::sync::Arc;

use uuid::Uuid;

use crate::model::{DeliveryTask, NewEvent, Status};

/// One unit of work in the in-memory queue.
#[derive(Debug, Clone)]
pub(crate) enum Job {
    /// Run one attempt of a delivery.
    Deliver {
        /// The delivery.
        delivery: Uuid,
        /// Its event.
        event: Uuid,
        /// What intake or the window's refill already read of it (spares the
        /// worker a read); `None` for a delivery brought back by id, which is read
        /// from the store as it is then.
        task: Option<Arc<DeliveryTask>>,
    },
    /// Derive an event's status from its deliveries (recovery of an event whose
    /// status update was lost).
    Settle(Uuid),
    /// A new event no handler matched: stored `completed` already, it only holds a
    /// place in the queue until a worker takes it, like any accepted event.
    Unrouted(
        #[expect(
            dead_code,
            reason = "no reader since Job left the public API; shown by Debug"
        )]
        Uuid,
    ),
}

impl Job {
    /// The jobs a freshly stored event needs: one per delivery, or one settle. A
    /// delivery stored claimed by this instance ([`NewEvent::claims`]) is
    /// `processing` already.
    pub(crate) fn for_new_event(event: &NewEvent) -> Vec<Job> {
        if event.deliveries.is_empty() {
            return vec![Job::Unrouted(event.id)];
        }
        let payload: Arc<str> = event.payload.as_str().into();
        event
            .deliveries
            .iter()
            .map(|d| Job::Deliver {
                delivery: d.id,
                event: event.id,
                task: Some(Arc::new(DeliveryTask {
                    delivery_id: d.id,
                    handler: d.handler.clone(),
                    status: if event.claims(d) {
                        Status::Processing
                    } else {
                        Status::Pending
                    },
                    attempts: 0,
                    retry_after: None,
                    ordering_value: d.ordering_value.clone(),
                    created_at: event.created_at,
                    event_id: event.id,
                    idempotency_key: event.idempotency_key.clone(),
                    event_type: event.event_type.clone(),
                    payload: payload.clone(),
                    trace: event.trace.clone(),
                })),
            })
            .collect()
    }

    /// A job for a delivery read whole from the database: claimed from a shared one
    /// (already `processing`), or read into the window of due work.
    pub(crate) fn claimed(task: DeliveryTask) -> Job {
        Job::Deliver {
            delivery: task.delivery_id,
            event: task.event_id,
            task: Some(Arc::new(task)),
        }
    }

    /// The delivery, when this job runs one that is stored claimed by this
    /// instance already (claimed at intake: its task is `processing`).
    pub(crate) fn held_delivery(&self) -> Option<Uuid> {
        match self {
            Job::Deliver {
                delivery,
                task: Some(task),
                ..
            } if task.status == Status::Processing => Some(*delivery),
            _ => None,
        }
    }

    /// A job that reads its delivery from the store when it runs.
    pub(crate) fn deliver(delivery: Uuid, event: Uuid) -> Job {
        Job::Deliver {
            delivery,
            event,
            task: None,
        }
    }
}
