//! One pull source's life on an instance: take the lease (or stand by while
//! another instance holds it), open the session at the committed cursor, run the
//! source's transport ([`super::poll`] or [`super::websocket`]); again after a lost
//! lease, until stopped.

use std::time::Duration;

use tracing::info;

use super::adapter::{Adapter, End, Session};
use super::backoff::Backoff;
use super::spec::Transport;
use super::status::State;

/// How often a standby instance tries to take a source over.
pub(super) const LEASE_RETRY: Duration = Duration::from_secs(1);

/// Runs `adapter` until it is stopped.
pub(super) async fn run(adapter: Adapter) {
    let mut backoff = Backoff::default();
    while !adapter.stop.is_cancelled() {
        let lease = match adapter.store.lease(adapter.name()).await {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                adapter.status().set_state(State::Standby);
                if !adapter.sleep(LEASE_RETRY).await {
                    break;
                }
                continue;
            }
            Err(e) => {
                let error = format!("cannot take the lease: {e}");
                if !adapter.fail(&mut backoff, &error, None).await {
                    break;
                }
                continue;
            }
        };
        let mut session = match Session::open(lease).await {
            Ok(session) => session,
            Err(e) => {
                let error = format!("cannot read the cursor: {e}");
                if !adapter.fail(&mut backoff, &error, None).await {
                    break;
                }
                continue;
            }
        };
        info!(source = %adapter.name(), cursor = ?session.cursor, "pull source running on this instance");
        adapter.status().set_state(State::Running);
        let end = match &adapter.spec.transport {
            Transport::Poll { .. } => super::poll::run(&adapter, &mut session, &mut backoff).await,
            Transport::WebSocket { .. } => {
                super::websocket::run(&adapter, &mut session, &mut backoff).await
            }
        };
        match end {
            End::Stopped => break,
            End::Lost(error) => {
                drop(session);
                if !adapter.fail(&mut backoff, &error, None).await {
                    break;
                }
            }
        }
    }
    adapter.status().set_state(State::Stopped);
}
