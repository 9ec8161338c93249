//! The `LISTEN` connection: turns `NOTIFY hookbox_work` from any instance into a
//! wake-up of this instance's claimer, `NOTIFY hookbox_subscribers` (sent by the
//! trigger of migration 0009 on every change of the subscribers) into a reload of
//! its routing table, and `NOTIFY hookbox_destinations` (sent with every kept
//! destination state) into a look at the states, reconnecting by itself.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::claim::CHANNEL;

/// The channel on which changes of the subscribers are announced.
const SUBSCRIBERS: &str = "hookbox_subscribers";

/// The channel on which kept destination states are announced.
pub(super) const DESTINATIONS: &str = "hookbox_destinations";

/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Listens forever on its own connection (not one of the pool's).
pub(super) async fn run(
    options: PgConnectOptions,
    wake: Arc<Notify>,
    changed: Arc<Notify>,
    destinations: Arc<Notify>,
) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "LISTEN connection failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        if let Err(e) = listener
            .listen_all([CHANNEL, SUBSCRIBERS, DESTINATIONS])
            .await
        {
            warn!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        }
        // Announcements sent while we were not listening are lost: look now.
        wake.notify_one();
        changed.notify_one();
        destinations.notify_one();
        backoff = Duration::from_millis(100);
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) if n.channel() == SUBSCRIBERS => changed.notify_one(),
                Ok(Some(n)) if n.channel() == DESTINATIONS => destinations.notify_one(),
                Ok(Some(_)) => wake.notify_one(),
                Ok(None) => {
                    debug!("LISTEN connection lost; reconnecting");
                    wake.notify_one();
                    changed.notify_one();
                    destinations.notify_one();
                    tokio::time::sleep(backoff).await;
                }
                Err(e) => {
                    warn!(error = %e, "LISTEN connection lost; reconnecting");
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
