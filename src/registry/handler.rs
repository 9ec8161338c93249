//! What a handler is: a `tower::Service<Event>` that answers `()` or a
//! [`HandlerError`] saying retry, retry after, or give up.
//!
//! ```
//! use hookbox::registry::{Event, HandlerError, handler_fn};
//!
//! let notify = handler_fn(|event: Event| async move {
//!     if event.payload().len() > 1_000_000 {
//!         return Err(HandlerError::Permanent("payload too large for SMS".into()));
//!     }
//!     Ok(())
//! });
//! # let _ = notify;
//! ```

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tower::util::BoxCloneSyncService;
use uuid::Uuid;

use crate::model::Timestamp;
use crate::retry::Failure;

/// The event as a handler receives it, for one attempt of one delivery.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event id (the same on every attempt; `webhook-id` over HTTP).
    pub id: Uuid,
    /// The delivery this attempt belongs to.
    pub delivery_id: Uuid,
    /// The event's idempotency key.
    pub idempotency_key: String,
    /// The event type.
    pub event_type: String,
    /// When the event was accepted.
    pub created_at: Timestamp,
    /// This attempt's number, from 1.
    pub attempt: u32,
    payload: Arc<str>,
    /// Where an http handler leaves the answer it got.
    answer: Answer,
    /// This attempt's span in the event's trace (SPEC §13).
    trace: Option<crate::trace_context::TraceContext>,
}

/// The answer to one attempt (its HTTP status and the first bytes of its body),
/// which an http handler leaves on the attempt's [`Event`] (all its clones share
/// it) and the worker records with the attempt. Empty for other kinds, and when no
/// answer came.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer(Arc<Slots>);

/// What one attempt leaves for its worker.
#[derive(Debug, Default)]
struct Slots {
    /// The answer, once one came.
    answered: OnceLock<Answered>,
    /// What a transform made of the request (JSON text), when one ran.
    request: OnceLock<String>,
}

/// What an answer said: the status, and the start of the body (None when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answered {
    /// The HTTP status.
    pub(crate) status: u16,
    /// The first bytes of the body, as text (lossy), when it had any.
    pub(crate) body: Option<String>,
    /// True when a transform cancelled the delivery: nothing was sent, and
    /// `status` means nothing.
    pub(crate) cancelled: bool,
}

impl Answer {
    /// The answer, once one came.
    pub(crate) fn get(&self) -> Option<&Answered> {
        self.0.answered.get()
    }

    /// What a transform made of the request (JSON text), if one ran.
    pub(crate) fn request(&self) -> Option<&String> {
        self.0.request.get()
    }
}

impl Event {
    /// An event for one attempt. `payload` must be JSON text.
    pub fn new(
        id: Uuid,
        delivery_id: Uuid,
        idempotency_key: String,
        event_type: String,
        payload: Arc<str>,
        created_at: Timestamp,
        attempt: u32,
    ) -> Self {
        Self {
            id,
            delivery_id,
            idempotency_key,
            event_type,
            created_at,
            attempt,
            payload,
            answer: Answer::default(),
            trace: None,
        }
    }

    /// With this attempt's span in the event's trace: an http delivery sends it as
    /// `traceparent` (and `tracestate`), an exec child gets `TRACEPARENT`.
    pub fn with_trace(mut self, trace: Option<crate::trace_context::TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// This attempt's span in the event's trace, if the event has one.
    pub fn trace(&self) -> Option<&crate::trace_context::TraceContext> {
        self.trace.as_ref()
    }

    /// Records the answer this attempt got (the http kind); the first one stays.
    pub(crate) fn answered(&self, status: u16, body: Option<String>) {
        let _ = self.answer.0.answered.set(Answered {
            status,
            body,
            cancelled: false,
        });
    }

    /// Records what a transform made of this attempt's request (JSON text), for the
    /// attempt history.
    pub(crate) fn sent(&self, request: String) {
        let _ = self.answer.0.request.set(request);
    }

    /// Records that a transform cancelled this delivery: nothing is sent, and the
    /// attempt's outcome is `cancelled` (the delivery completes).
    pub(crate) fn cancelled(&self) {
        let _ = self.answer.0.answered.set(Answered {
            status: 0,
            body: None,
            cancelled: true,
        });
    }

    /// Where this attempt's answer will be.
    pub(crate) fn answer(&self) -> Answer {
        self.answer.clone()
    }

    /// The payload as JSON text (canonical: object keys sorted).
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// The payload parsed.
    pub fn payload_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(&self.payload)
    }
}

/// How a handler says an attempt failed (apalis-style typed control flow).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Try again after the policy's backoff.
    #[error("{0}")]
    Retry(String),
    /// Try again, but not before `after`.
    #[error("{message} (retry after {after:?})")]
    RetryAfter {
        /// The least delay the handler asks for.
        after: Duration,
        /// What went wrong.
        message: String,
    },
    /// Retrying cannot help: dead-letter now.
    #[error("{0}")]
    Permanent(String),
}

impl From<HandlerError> for Failure {
    fn from(e: HandlerError) -> Self {
        match e {
            HandlerError::Retry(m) => Failure::retryable(m),
            HandlerError::RetryAfter { after, message } => Failure {
                message,
                permanent: false,
                retry_after: Some(after),
            },
            HandlerError::Permanent(m) => Failure::permanent(m),
        }
    }
}

/// A type-erased handler, as the registry keeps them.
pub type BoxHandler = BoxCloneSyncService<Event, (), HandlerError>;

/// Makes a handler from an async function.
pub fn handler_fn<F, Fut>(f: F) -> BoxHandler
where
    F: Fn(Event) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    BoxCloneSyncService::new(tower::service_fn(f))
}
