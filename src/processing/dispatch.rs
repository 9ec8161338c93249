//! Where committed work goes: the seam between intake and the two ways of
//! processing.
//!
//! - SQLite (one instance): the [`Window`](crate::processing::window::Window) of
//!   due work; intake hands the new event's jobs to it while it has room, or leaves
//!   them in the table for its refill.
//! - PostgreSQL (several instances): [`Claims`](crate::processing::claims::Claims); the
//!   database is the queue, so intake wakes the claimers of every instance — or,
//!   while this instance's workers have room and nothing older is due, stores the
//!   new deliveries claimed by this instance and hands them straight to them.
//!
//! Either way the same [`Workers`](crate::processing::worker::Workers) take jobs from a local
//! queue and run the same attempt and record code.

use crate::processing::job::Job;

/// What intake (and any other writer of new work) hands committed work to.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// `jobs` were committed: queue them, or wake whoever claims them. Jobs of
    /// deliveries claimed at intake ([`Job::held_delivery`]) use up what
    /// [`Dispatch::reserve`] set aside for them.
    fn submit(&self, jobs: Vec<Job>);

    /// Sets aside room for `n` new deliveries to be stored claimed by this
    /// instance and handed straight to its workers, and answers the lease to store
    /// them under; `None` when there is no such room or nothing may jump the queue
    /// (the default: the window takes new work by itself). What is set aside is
    /// used up by [`Dispatch::submit`] or given back by [`Dispatch::unreserve`].
    fn reserve(&self, _n: usize) -> Option<std::time::Duration> {
        None
    }

    /// Gives back room [`Dispatch::reserve`] set aside that no commit used (a
    /// duplicate key, a failed or refused commit).
    fn unreserve(&self, _n: usize) {}

    /// Whether `handler`'s destination leaves its work in the table now (paused
    /// by an operator, disabled, or holding all it keeps in memory): an event
    /// with a delivery for it is not stored claimed, so that delivery stays
    /// `pending` (SPEC §10) until the destination takes work again.
    fn leaves_unclaimed(&self, _handler: &str) -> bool {
        false
    }

    /// Work waiting or running (`hookbox_queue_depth`).
    fn depth(&self) -> usize;

    /// The bound at which intake answers 429 (`QUEUE_MAXSIZE`).
    fn capacity(&self) -> usize;
}
