//! The retry timer: holds jobs until they are due, then pushes them to the queue.
//!
//! A delivery that failed goes back to `pending` with `retry_after`; the worker
//! schedules it here, and recovery schedules the retries it finds waiting.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

use crate::model::Timestamp;
use crate::processing::job::Job;
use crate::processing::queue::Queue;
use crate::processing::worker::Feeder;

/// Where to schedule jobs for later.
#[derive(Clone)]
pub(crate) struct Timer {
    tx: mpsc::UnboundedSender<(Job, Instant)>,
}

impl Timer {
    /// Starts the timer task, which pushes due jobs to `queue`.
    pub(crate) fn start(queue: Arc<Queue<Job>>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, rx));
        Self { tx }
    }

    /// Pushes `job` to the queue at `at` (at once if that is past).
    pub(crate) fn at(&self, job: Job, at: Timestamp) {
        let wait = u64::try_from(at.millis() - Timestamp::now().millis()).unwrap_or(0);
        self.after(job, Duration::from_millis(wait));
    }

    /// Pushes `job` to the queue after `wait`.
    pub(crate) fn after(&self, job: Job, wait: Duration) {
        // The receiver lives as long as the runtime; a send after shutdown is moot.
        let _ = self.tx.send((job, Instant::now() + wait));
    }
}

/// One instance (SQLite): intake, startup recovery and this timer fill the queue, so
/// a retry, a delivery not due yet and one the store failed to start all wait here.
impl Feeder for Timer {
    fn put_back_after(&self, job: Job, delay: Duration) -> bool {
        self.after(job, delay);
        true
    }

    fn hold_until(&self, job: Job, due: Timestamp) -> bool {
        self.at(job, due);
        true
    }

    fn runs_unmarked(&self) -> bool {
        false
    }

    fn after_commit(&self, committed: bool, retry: Option<(Job, Duration)>) {
        if let (true, Some((job, after))) = (committed, retry) {
            self.after(job, after);
        }
    }
}

async fn run(queue: Arc<Queue<Job>>, mut rx: mpsc::UnboundedReceiver<(Job, Instant)>) {
    let mut waiting: DelayQueue<Job> = DelayQueue::new();
    loop {
        tokio::select! {
            next = rx.recv() => match next {
                Some((job, at)) => {
                    waiting.insert_at(job, at);
                }
                None => return,
            },
            Some(due) = waiting.next(), if !waiting.is_empty() => queue.push(due.into_inner()),
        }
    }
}
