//! Pull sources (docs/sources.md): adapters that fetch events from systems that do not
//! push — a REST API paged by a cursor (`kind = "poll"`, `poll.rs`) or a WebSocket
//! stream (`kind = "websocket"`, `websocket.rs`).
//!
//! Each fetched item becomes an event through the same path as intake (the
//! inbox: route, commit, hand to processing), keyed `{name}:{id}`, so an item
//! fetched twice is stored once and counted in `received_count`. The adapter's
//! **cursor** is committed in the same transaction as the events it covers
//! ([`crate::store::pull`]): after a crash or restart it resumes exactly after the
//! last committed item. What it does:
//!
//! - **Failures** (connection refused or dropped, 5xx, 429, an answer that is not
//!   JSON, a failed commit) back off exponentially with jitter from 100 ms to 5 s,
//!   honouring `Retry-After` ([`backoff`]).
//! - **Bad items** (no id, no event type, not JSON, or an id stored before with
//!   another body) are skipped, logged, counted as rejected and kept in the
//!   source's rejected log; the cursor moves past them ([`item`]).
//! - **Backpressure**: while the queue is full the adapter reads nothing (what it
//!   fetched is committed, never dropped) and resumes when there is room.
//! - **One adapter per source** across instances sharing PostgreSQL (an advisory
//!   lock, [`crate::store::pull`]); the others stand by and take over when the
//!   holder dies.
//! - **Shutdown**: reading stops first, what was fetched is committed, then the
//!   usual drain.
//!
//! Its state is in [`status`] (`GET /sources`, `hookbox_source_up`,
//! `hookbox_source_cursor_lag_seconds`).

mod adapter;
pub(crate) mod backoff;
pub(crate) mod item;
mod poll;
mod run;
pub(crate) mod spec;
pub(crate) mod status;
mod websocket;

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub(crate) use spec::PullSpec;

use crate::inbox::Inbox;
use crate::sources::live::Sources;

/// How long one request to a polled API (or a WebSocket handshake) may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The running adapters of this instance.
pub(crate) struct Adapters {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

/// Starts one adapter per pull source (none when there are none, or when the
/// sources have no cursor store).
pub(crate) fn start(sources: &Sources, inbox: &Inbox) -> Adapters {
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let Some(store) = sources.cursors() else {
        return Adapters { stop, tasks };
    };
    let client = match client() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "cannot build the pull sources' HTTP client; they do not run");
            return Adapters { stop, tasks };
        }
    };
    for live in sources.pull() {
        let Some(spec) = live.source.pull.clone() else {
            continue;
        };
        let adapter = adapter::Adapter {
            live: live.clone(),
            spec,
            inbox: inbox.clone(),
            store: store.clone(),
            client: client.clone(),
            stop: stop.clone(),
        };
        tasks.spawn(run::run(adapter));
    }
    Adapters { stop, tasks }
}

/// The HTTP client of the poll adapters: no proxy from the environment, bounded
/// requests. Pull URLs are the operator's own configuration: no address guard.
fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("hookbox/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Adapters {
    /// Stops reading, lets each adapter commit what it fetched (up to `grace`),
    /// then returns.
    pub(crate) async fn stop(mut self, grace: Duration) {
        self.stop.cancel();
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all).await.is_err() {
            warn!(
                ?grace,
                "pull sources still committing after the grace period; stopped"
            );
            self.tasks.abort_all();
        }
    }
}
