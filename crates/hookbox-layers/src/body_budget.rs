//! One budget of bytes for every request body still arriving: a body holds the
//! bytes it has delivered so far against the budget until it has arrived whole (or
//! is dropped), so slow or stalled uploads cannot hold more memory in all than the
//! budget, however many connections they open. A body whose next chunk does not
//! fit fails with [`BudgetExceeded`], which [`crate::idempotency::buffer`] answers
//! with 503 `unavailable` and `Retry-After: 1`; nothing waits while holding bytes,
//! so bodies cannot starve each other.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use hookbox_layers::body_budget::BodyBudget;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let budget = BodyBudget::new(8);
//! let small = budget.wrap(Full::new(Bytes::from_static(b"1234")));
//! assert_eq!(small.collect().await.unwrap().to_bytes(), "1234");
//! assert_eq!(budget.available(), 8, "a whole body holds nothing");
//! let large = budget.wrap(Full::new(Bytes::from_static(b"123456789")));
//! let err = large.collect().await.unwrap_err();
//! assert!(hookbox_layers::body_budget::exceeded(&*err));
//! # }
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::BoxError;

/// A request body's chunk did not fit in the budget of bytes held by bodies still
/// arriving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetExceeded;

impl std::fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("too many request bodies are arriving at once; retry in a second")
    }
}

impl std::error::Error for BudgetExceeded {}

/// Whether `e`, or an error it wraps (a framework's body error), is
/// [`BudgetExceeded`].
pub fn exceeded(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<BudgetExceeded>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// The shared budget (cheap to clone).
#[derive(Debug, Clone)]
pub struct BodyBudget(Arc<Semaphore>);

impl BodyBudget {
    /// A budget of `bytes` (at most [`Semaphore::MAX_PERMITS`]).
    pub fn new(bytes: usize) -> Self {
        Self(Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))))
    }

    /// The bytes not held now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    /// `body`, holding what it delivers against this budget until it ends.
    pub fn wrap<B>(&self, body: B) -> Budgeted<B> {
        Budgeted {
            inner: body,
            budget: self.0.clone(),
            held: None,
        }
    }
}

pin_project! {
    /// A body counted against a [`BodyBudget`].
    pub struct Budgeted<B> {
        #[pin]
        inner: B,
        budget: Arc<Semaphore>,
        held: Option<OwnedSemaphorePermit>,
    }
}

impl<B> Body for Budgeted<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let frame = match this.inner.poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                *this.held = None; // arrived whole: nothing held any more
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        let n = frame.data_ref().map_or(0, Bytes::len);
        if n > 0 {
            let permit = u32::try_from(n)
                .ok()
                .and_then(|n| this.budget.clone().try_acquire_many_owned(n).ok());
            match (permit, this.held.as_mut()) {
                (None, _) => {
                    *this.held = None;
                    return Poll::Ready(Some(Err(BudgetExceeded.into())));
                }
                (Some(p), Some(held)) => held.merge(p),
                (Some(p), None) => *this.held = Some(p),
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
