//! The in-memory work queue of one instance.
//!
//! Intake pushes after its commit; workers [`take`](Queue::take) jobs. The *depth*
//! counts jobs queued **or running** (a [`Lease`] gives its place back when dropped),
//! so a queue of a few slow jobs is as full as one of many waiting ones. Pushing
//! always succeeds — a committed event is never dropped; the bound is kept by
//! whoever fills the queue, which intake asks *before* it commits (429 at
//! `QUEUE_MAXSIZE`): the window of due work on SQLite
//! ([`Window`](crate::processing::window::Window), which learns through
//! [`Queue::with_release`] when a job's place is given back), the claimer on
//! PostgreSQL. (`tests::a_running_job_still_counts` shows it.)

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A multi-producer, multi-consumer FIFO with a depth signal.
pub(crate) struct Queue<T> {
    jobs: Mutex<Jobs<T>>,
    ready: Notify,
    /// Notified when a job's place is given back (a [`Lease`] dropped).
    freed: Notify,
    depth: AtomicUsize,
    /// Called with each job whose place is given back (its [`Lease`] dropped).
    on_release: Option<Release<T>>,
}

/// What [`Queue::with_release`] calls when a job's place is given back.
type Release<T> = Box<dyn Fn(&T) + Send + Sync>;

struct Jobs<T> {
    items: VecDeque<T>,
    closed: bool,
}

impl<T> Queue<T> {
    /// An empty queue.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::unshared(None))
    }

    /// A queue that calls `release` with each job whose place is given back (after
    /// its outcome was recorded, or when the worker let it go).
    pub(crate) fn with_release(release: impl Fn(&T) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self::unshared(Some(Box::new(release))))
    }

    fn unshared(on_release: Option<Release<T>>) -> Self {
        Self {
            jobs: Mutex::new(Jobs {
                items: VecDeque::new(),
                closed: false,
            }),
            ready: Notify::new(),
            freed: Notify::new(),
            depth: AtomicUsize::new(0),
            on_release,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Jobs<T>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a job, whatever the depth.
    #[cfg(test)]
    pub(crate) fn push(&self, job: T) {
        self.depth.fetch_add(1, Ordering::Relaxed);
        self.lock().items.push_back(job);
        self.ready.notify_one();
    }

    /// Appends many jobs at once.
    pub(crate) fn extend(&self, jobs: impl IntoIterator<Item = T>) {
        let mut guard = self.lock();
        let before = guard.items.len();
        guard.items.extend(jobs);
        let added = guard.items.len() - before;
        // Counted before the lock is released: a worker could otherwise take a job
        // and give its place back first, and the depth would wrap below zero (read
        // as "overloaded" by intake for that instant).
        self.depth.fetch_add(added, Ordering::Relaxed);
        drop(guard);
        // One worker is woken; each that takes a job and gets busy with it wakes
        // the next while jobs remain ([`Queue::pass_on`]). Waking one per job
        // woke up to 128 workers per commit, most of which only parked their job
        // in a full lane.
        if added > 0 {
            self.ready.notify_one();
        }
    }

    /// Waits for the next job; `None` once the queue is closed (shutdown).
    pub(crate) async fn take(self: &Arc<Self>) -> Option<Lease<T>> {
        loop {
            let notified = self.ready.notified();
            {
                let mut guard = self.lock();
                if guard.closed {
                    return None;
                }
                if let Some(job) = guard.items.pop_front() {
                    return Some(Lease {
                        job: Some(job),
                        queue: self.clone(),
                    });
                }
            }
            notified.await;
        }
    }

    /// Wakes one more taker while jobs are queued: a taker calls this before it
    /// gets busy with the job it took (an attempt, the store), so the rest are not
    /// left waiting; one that only sets its job aside takes the next itself and
    /// wakes nobody.
    pub(crate) fn pass_on(&self) {
        if !self.lock().items.is_empty() {
            self.ready.notify_one();
        }
    }

    /// Stops handing out jobs (shutdown); waiting workers get `None`.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    /// True once [`Queue::close`] was called (shutdown).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Jobs queued or running.
    pub(crate) fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Waits until at most `n` jobs are queued or running (for a single task that
    /// refills the queue, such as the PostgreSQL claimer).
    pub(crate) async fn wait_depth_at_most(&self, n: usize) {
        loop {
            let freed = self.freed.notified();
            if self.depth() <= n {
                return;
            }
            freed.await;
        }
    }
}

/// A job taken from the queue; its place is given back when this is dropped.
pub(crate) struct Lease<T> {
    /// Always `Some` until [`Lease::requeue`] takes it.
    job: Option<T>,
    queue: Arc<Queue<T>>,
}

impl<T> Lease<T> {
    /// Puts the job back at the front of its queue, keeping its place (a job that
    /// waited in its destination's lane and may start now).
    pub(crate) fn requeue(mut self) {
        if let Some(job) = self.job.take() {
            self.queue.lock().items.push_front(job);
            self.queue.ready.notify_one();
        }
    }
}

impl<T> Deref for Lease<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.job {
            Some(job) => job,
            None => unreachable!("a lease holds its job until it is requeued"),
        }
    }
}

impl<T> Drop for Lease<T> {
    fn drop(&mut self) {
        let Some(job) = &self.job else {
            return; // requeued: the place goes on with the job
        };
        self.queue.depth.fetch_sub(1, Ordering::Relaxed);
        if let Some(release) = &self.queue.on_release {
            release(job);
        }
        self.queue.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs' example (a doc test while the queue was public).
    #[tokio::test(flavor = "current_thread")]
    async fn a_running_job_still_counts() {
        let q = Queue::new();
        q.push("a");
        q.push("b");
        assert_eq!(q.depth(), 2);
        let lease = q.take().await.expect("open");
        assert_eq!(*lease, "a");
        assert_eq!(q.depth(), 2, "a running job still counts");
        drop(lease);
        assert_eq!(q.depth(), 1);
        let lease = q.take().await.expect("open");
        lease.requeue();
        assert_eq!(q.depth(), 1, "a requeued job keeps its place");
        assert_eq!(*q.take().await.expect("open"), "b");
    }

    /// Jobs pushed with `extend` while workers take and finish them at once: the
    /// depth must never read more than what was ever pushed (a wrap below zero
    /// reads as a huge depth, which intake would answer with 429).
    #[test]
    fn depth_never_wraps_while_workers_race_extend() {
        const JOBS: usize = 200_000;
        let queue = Queue::<usize>::new();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let max_seen = rt.block_on(async {
            let mut workers = Vec::new();
            for _ in 0..4 {
                let q = queue.clone();
                workers.push(tokio::spawn(async move {
                    while let Some(lease) = q.take().await {
                        drop(lease);
                    }
                }));
            }
            let watcher = {
                let q = queue.clone();
                std::thread::spawn(move || {
                    let mut max = 0;
                    while !q.lock().closed {
                        max = max.max(q.depth());
                    }
                    max
                })
            };
            for i in 0..JOBS {
                queue.extend([i]);
                if i % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            while queue.depth() > 0 {
                tokio::task::yield_now().await;
            }
            queue.close();
            for w in workers {
                w.await.expect("worker");
            }
            watcher.join().expect("watcher")
        });
        assert!(
            max_seen <= JOBS,
            "depth wrapped below zero: read {max_seen}"
        );
    }
}
