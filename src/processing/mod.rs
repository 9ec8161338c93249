//! Processing: everything between a committed event and its handler's outcome.
//!
//! - [`job`]: the unit of work, a leaf every other part uses;
//! - [`queue`]: the bounded in-memory queue the workers take jobs from;
//! - [`dispatch`]: where committed work goes — the window (SQLite) or the claimers
//!   (PostgreSQL);
//! - [`window`]: the window of due work over the table, its refill, waiting
//!   retries and the pending backlog (SQLite);
//! - [`claims`]: the claim loop, leases and shared backlog (PostgreSQL);
//! - [`feed`]: which of the two feeds this instance's workers — the one place
//!   where the backends differ for processing, chosen once;
//! - [`ordering`]: ordered deliveries being committed (SQLite; the table orders
//!   the rest);
//! - [`lane`] and [`lanes`]: every destination's lane — flow control, pauses, the
//!   circuit — so that one destination's trouble delays only its own work;
//! - [`worker`]: runs a job's attempt and records its outcome.
//!
//! Dependencies run one way, with no loop: `job`, `queue` and `ordering` are
//! leaves; `dispatch` uses them; `window` and `claims` are a
//! [`Dispatch`](dispatch::Dispatch) each; `feed` chooses between them; `worker`
//! uses `feed`, `lanes`, `job` and `queue`, and knows neither backend. None of
//! them knows the HTTP layers: intake's backpressure reads
//! [`Feed::overloaded`](feed::Feed::overloaded) through a closure `api` wires.

pub(crate) mod claims;
pub(crate) mod dispatch;
pub(crate) mod feed;
pub(crate) mod fresh;
pub(crate) mod job;
pub(crate) mod lane;
pub(crate) mod lanes;
pub(crate) mod ordering;
pub(crate) mod queue;
pub(crate) mod window;
pub(crate) mod worker;
