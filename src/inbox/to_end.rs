//! Work that runs to its end even if whoever awaits it goes away.
//!
//! A commit and the hand-off after it must not be cut apart: a client that hangs
//! up makes the server drop its request's future, and a commit whose hand-off was
//! dropped left its event `pending` until a restart. [`to_end`] runs the work on
//! the caller's own task — no task of its own, no hop to another thread, as long as
//! the caller waits, which is nearly always — and, should the caller be dropped
//! first, spawns what is left of it, which then runs to its end on its own.
//! (Spawning every commit cost a task per request: issue 28 asks that only the
//! hand-off outlive the request.)

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::InboxError;

/// Runs `work` to its end and returns its result; if the returned future is
/// dropped before `work` has finished, the rest of `work` is spawned on the
/// current runtime and finishes there. A panic inside `work` is
/// [`InboxError::Panicked`] for the caller that waits.
///
/// ```text
/// // Inside the inbox: the commit and its hand-off, on the request's task.
/// let outcome = to_end(async move { commit_and_hand_off().await }).await?;
/// ```
pub(super) async fn to_end<T, F>(work: F) -> Result<T, InboxError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, InboxError>> + Send + 'static,
{
    ToEnd(Some(Box::pin(work))).await
}

/// The work while it is unfinished; `None` once it has answered.
struct ToEnd<F: Future + Send + 'static>(Option<Pin<Box<F>>>)
where
    F::Output: Send + 'static;

impl<T, F> Future for ToEnd<F>
where
    T: Send + 'static,
    F: Future<Output = Result<T, InboxError>> + Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Pending; // polled again after it answered: never by `to_end`
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx)));
        let answer = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(answer)) => answer,
            Err(_) => Err(InboxError::Panicked),
        };
        self.0 = None;
        Poll::Ready(answer)
    }
}

impl<F: Future + Send + 'static> Drop for ToEnd<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(work) = self.0.take() else { return };
        // The caller went away before the work answered: the rest runs on its
        // own. Outside a runtime (its shutdown dropping the caller) there is
        // nothing left to run it, as there was none for a spawned task either.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn work_answers_its_caller() {
        let answer = to_end(async { Ok::<_, InboxError>(7) }).await;
        assert_eq!(answer.ok(), Some(7));
    }

    /// A caller dropped mid-way (a client that hung up) leaves the work running:
    /// its step after the wait still happens.
    #[tokio::test]
    async fn work_runs_on_after_its_caller_is_dropped() {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let seen = finished.clone();
        let caller = to_end(async move {
            let _ = wait.await;
            seen.store(true, Ordering::SeqCst);
            Ok::<_, InboxError>(())
        });
        // Poll once, so that the work is under way, then drop the caller.
        let dropped = tokio::time::timeout(Duration::from_millis(20), caller).await;
        assert!(dropped.is_err(), "the work waits for `go`");
        assert!(!finished.load(Ordering::SeqCst));
        go.send(()).expect("the work still waits");
        for _ in 0..100 {
            if finished.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the work did not finish after its caller was dropped");
    }

    #[tokio::test]
    async fn a_panic_is_an_error_for_the_caller() {
        let answer = to_end(async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok::<_, InboxError>(())
        })
        .await;
        assert!(matches!(answer, Err(InboxError::Panicked)), "{answer:?}");
    }
}
