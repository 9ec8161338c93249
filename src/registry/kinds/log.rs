//! `kind = "log"`: writes each event to the service log and succeeds. Useful to see
//! traffic before a real handler exists, and as a no-op handler for benchmarks.

use super::super::{BoxHandler, Event, handler_fn};

/// A handler that logs the event (the payload only at `debug`).
pub fn handler(name: &str) -> BoxHandler {
    let name = name.to_owned();
    handler_fn(move |event: Event| {
        let name = name.clone();
        async move {
            // A line about an event carries its trace (SPEC §13).
            let trace_id = event.trace().map_or("", |t| t.trace_id());
            tracing::info!(
                handler = %name,
                event_id = %event.id,
                trace_id,
                event_type = %event.event_type,
                attempt = event.attempt,
                bytes = event.payload().len(),
                "event received"
            );
            tracing::debug!(handler = %name, event_id = %event.id, trace_id, payload = %event.payload());
            Ok(())
        }
    })
}
