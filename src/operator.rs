//! Operator events: what happens to destinations, told as hookbox's own events
//! (`hookbox.destination.*`, `hookbox.delivery.dead_lettered`), stored through the
//! inbox like any other event (`source` = `hookbox`) and routed to whatever
//! handlers match their type — a Slack or PagerDuty webhook pointed at
//! `hookbox.*` hears about trouble first (docs/handlers.md, "Operator events").
//!
//! The lanes and the workers tell ([`Notice`]); one task here keeps each
//! destination's state in the database (it survives a restart) and stores the
//! events. No loops: a destination never receives events about itself, and what
//! a delivery of a `hookbox.*` event causes raises nothing (the lanes mark it
//! `quiet`).

use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;
use tracing::warn;

use crate::inbox::{EventType, Inbox, Origin, Outcome, Payload, Submission};
use crate::model::Timestamp;
use crate::processing::lane::{State, Stored, Transition};
use crate::processing::lanes::Notice;
#[cfg(test)]
use crate::processing::lanes::is_operator_event;
use crate::registry::live::LiveRegistry;
use crate::store::Store;

/// The operator event a destination's change raises, if any: an operator's pause
/// and resume, and the circuit's and `410`'s changes (a `Retry-After` pause and its
/// end raise none).
fn destination_event(t: &Transition, by_operator: bool) -> Option<&'static str> {
    match (by_operator, t.state, t.previous) {
        (true, State::Paused, _) => Some("hookbox.destination.paused"),
        (true, State::Healthy, _) => Some("hookbox.destination.resumed"),
        (false, State::Failing, _) => Some("hookbox.destination.failing"),
        (false, State::Disabled, _) => Some("hookbox.destination.disabled"),
        (false, State::Healthy, State::Failing | State::Disabled) => {
            Some("hookbox.destination.recovered")
        }
        _ => None,
    }
}

/// Takes back every destination's kept state (at startup, before any attempt).
pub(crate) async fn restore(
    store: &dyn Store,
    lanes: &crate::processing::lanes::Lanes,
    registry: &LiveRegistry,
) -> Result<(), crate::store::StoreError> {
    let table = registry.current();
    lanes.know(
        table
            .routes()
            .iter()
            .map(|r| (r.name.clone(), r.flow.clone())),
    );
    for (name, text) in store.destination_states().await? {
        match decode(&table, &name, &text) {
            Ok((stored, flow)) => lanes.restore(&name, &stored, flow),
            Err(e) => {
                warn!(destination = %name, error = %e, "a kept destination state does not decode; it starts healthy")
            }
        }
    }
    Ok(())
}

/// A kept state, with the limits of its destination in `table`.
fn decode(
    table: &crate::registry::Registry,
    name: &str,
    text: &str,
) -> Result<(Stored, crate::registry::flow::FlowControl), serde_json::Error> {
    let stored = serde_json::from_str::<Stored>(text)?;
    let flow = table.get(name).map(|r| r.flow.clone()).unwrap_or_default();
    Ok((stored, flow))
}

/// How often an instance sharing PostgreSQL reads the states the others kept.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Several instances (PostgreSQL): follows the operators' pauses and resumes,
/// `Retry-After` pauses and disabled destinations that other instances kept — at
/// once when the database announces a change (`NOTIFY`), else every second.
pub(crate) async fn follow(
    store: Arc<dyn Store>,
    lanes: Arc<crate::processing::lanes::Lanes>,
    registry: Arc<LiveRegistry>,
) {
    let changes = store.destination_changes();
    loop {
        match &changes {
            Some(changed) => {
                tokio::select! {
                    () = tokio::time::sleep(FOLLOW_EVERY) => {}
                    () = changed.notified() => {}
                }
            }
            None => tokio::time::sleep(FOLLOW_EVERY).await,
        }
        let Ok(states) = store.destination_states().await else {
            continue; // the database is away: the next round
        };
        let table = registry.current();
        for (name, text) in states {
            // One that does not decode was said at startup (or is another
            // version's): nothing to follow.
            if let Ok((stored, flow)) = decode(&table, &name, &text) {
                lanes.follow(&name, &stored, flow);
            }
        }
    }
}

/// Keeps and announces what it is told until every sender is gone.
pub(crate) async fn run(
    inbox: Inbox,
    store: Arc<dyn Store>,
    mut notices: mpsc::UnboundedReceiver<Notice>,
) {
    while let Some(notice) = notices.recv().await {
        match notice {
            Notice::Destination {
                name,
                transition,
                stored,
                by_operator,
                quiet,
            } => {
                // An operator's change was kept by the API before it answered;
                // keeping it again here, later, could land after a newer one.
                if !by_operator {
                    keep(&*store, &name, &stored).await;
                }
                let Some(t) = transition.filter(|_| !quiet) else {
                    continue;
                };
                if let Some(event_type) = destination_event(&t, by_operator) {
                    let payload = json!({
                        "destination": name,
                        "state": t.state.as_str(),
                        "previous_state": t.previous.as_str(),
                        "consecutive_failures": stored.consecutive_failures,
                        "last_error": stored.last_error,
                        "at": Timestamp::now().to_rfc3339(),
                    });
                    announce(&inbox, event_type, &name, &payload).await;
                }
            }
            Notice::DeadLettered {
                destination,
                event_id,
                event_type,
                attempts,
                last_error,
            } => {
                let payload = json!({
                    "destination": destination,
                    "event_id": event_id.to_string(),
                    "event_type": event_type,
                    "attempts": attempts,
                    "last_error": last_error,
                    "at": Timestamp::now().to_rfc3339(),
                });
                let kind = "hookbox.delivery.dead_lettered";
                announce(&inbox, kind, &destination, &payload).await;
            }
        }
    }
}

/// Keeps a destination's state in the database (a warning if it cannot): for a
/// restart, and for the other instances sharing PostgreSQL, which follow it.
pub(crate) async fn keep(store: &dyn Store, name: &str, stored: &Stored) {
    let text = match serde_json::to_string(stored) {
        Ok(text) => text,
        Err(e) => {
            return warn!(destination = name, error = %e, "could not encode a destination's state");
        }
    };
    if let Err(e) = store.save_destination(name.to_owned(), text).await {
        warn!(destination = name, error = %e, "could not keep a destination's state");
    }
}

/// Stores an operator event about `destination` through the inbox, routed to every
/// matching handler but that destination ([`Origin::Operator`]).
async fn announce(inbox: &Inbox, event_type: &str, destination: &str, payload: &serde_json::Value) {
    let submission = crate::json::canonical(&payload.to_string())
        .map_err(|e| e.to_string())
        .and_then(|text| {
            Ok(Submission {
                event_type: EventType::new(event_type)?,
                key: None,
                payload: Payload::new(text),
                origin: Origin::Operator {
                    about: destination.to_owned(),
                },
                trace: None,
            })
        });
    let outcome = match submission {
        Ok(submission) => inbox.accept(submission).await,
        Err(e) => {
            return warn!(destination, event_type, error = %e, "could not encode an operator event");
        }
    };
    match outcome {
        Ok(Outcome::Accepted(_)) => {}
        Ok(other) => {
            warn!(destination, event_type, outcome = ?other, "an operator event was not stored")
        }
        Err(e) => warn!(destination, event_type, error = %e, "could not store an operator event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(previous: State, state: State) -> Transition {
        Transition { previous, state }
    }

    #[test]
    fn which_changes_are_announced() {
        use State::*;
        assert_eq!(
            destination_event(&t(Healthy, Failing), false),
            Some("hookbox.destination.failing")
        );
        assert_eq!(
            destination_event(&t(Failing, Healthy), false),
            Some("hookbox.destination.recovered")
        );
        assert_eq!(
            destination_event(&t(Failing, Disabled), false),
            Some("hookbox.destination.disabled")
        );
        assert_eq!(
            destination_event(&t(Healthy, Paused), true),
            Some("hookbox.destination.paused")
        );
        assert_eq!(
            destination_event(&t(Disabled, Healthy), true),
            Some("hookbox.destination.resumed")
        );
        assert_eq!(
            destination_event(&t(Healthy, Paused), false),
            None,
            "Retry-After"
        );
        assert_eq!(
            destination_event(&t(Paused, Healthy), false),
            None,
            "its end"
        );
        assert!(is_operator_event("hookbox.destination.failing"));
        assert!(!is_operator_event("hookboxy"));
    }
}
