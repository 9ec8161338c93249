//! Where committed work goes: the seam between intake and the two ways of
//! processing.
//!
//! - SQLite (one instance): the [`Window`](crate::processing::window::Window) of
//!   due work; intake hands the new event's jobs to it while it has room, or leaves
//!   them in the table for its refill.
//! - PostgreSQL (several instances): [`Claims`](crate::processing::claims::Claims); the
//!   database is the queue, so intake only wakes the claimers of every instance.
//!
//! Either way the same [`Workers`](crate::processing::worker::Workers) take jobs from a local
//! queue and run the same attempt and record code.

use crate::processing::job::Job;

/// What intake (and any other writer of new work) hands committed work to.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// `jobs` were committed: queue them, or wake whoever claims them.
    fn submit(&self, jobs: Vec<Job>);

    /// Work waiting or running (`hookbox_queue_depth`).
    fn depth(&self) -> usize;

    /// The bound at which intake answers 429 (`QUEUE_MAXSIZE`).
    fn capacity(&self) -> usize;
}
