//! Processing: everything between a committed event and its handler's outcome.
//!
//! - [`job`]: the unit of work, a leaf every other part uses;
//! - [`queue`]: the bounded in-memory queue the workers take jobs from;
//! - [`dispatch`]: where committed work goes — the queue (SQLite) or the claimers
//!   (PostgreSQL);
//! - [`timer`]: retries waiting for their time (SQLite);
//! - [`claims`]: the claim loop, leases and shared backlog (PostgreSQL);
//! - [`ordering`]: strict per-key ordering on one instance;
//! - [`worker`]: runs a job's attempt and records its outcome.
//!
//! Dependencies run one way, with no loop: `job` and `queue` are leaves;
//! `ordering` and `dispatch` use them; `worker` uses `job`, `queue` and `ordering`;
//! `timer` and `claims` implement the worker's [`Feeder`](worker::Feeder) (and
//! `claims` is a [`Dispatch`](dispatch::Dispatch) too). The worker knows its feeder
//! only through that trait.

pub(crate) mod claims;
pub(crate) mod dispatch;
pub(crate) mod job;
pub(crate) mod ordering;
pub(crate) mod queue;
pub(crate) mod timer;
pub(crate) mod worker;
