//! The registry: which handlers receive which event types.
//!
//! A route is a named handler with its event type [`Pattern`]s and, optionally, an
//! ordering key (a JSON pointer into the payload). Intake asks the registry for the
//! deliveries of each event and stores them with it, in the same transaction.

mod pattern;

pub use pattern::{Pattern, PatternError, is_event_type_byte};

use serde_json::Value;
use uuid::Uuid;

use crate::model::NewDelivery;

/// One handler's routing facts.
#[derive(Debug, Clone)]
pub struct Route {
    /// Unique handler name.
    pub name: String,
    /// The event types it receives.
    pub patterns: Vec<Pattern>,
    /// JSON pointer into the payload; deliveries with equal values run in order.
    pub ordering_key: Option<String>,
}

impl Route {
    /// True when this route receives `event_type`.
    pub fn matches(&self, event_type: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(event_type))
    }
}

/// The routing table.
///
/// ```
/// use hookbox::registry::{Pattern, Registry, Route};
/// let registry = Registry::new(vec![Route {
///     name: "billing".into(),
///     patterns: vec![Pattern::parse("invoice.*").expect("valid")],
///     ordering_key: Some("/customer_id".into()),
/// }]);
/// let payload = serde_json::json!({"customer_id": 42});
/// let deliveries = registry.deliveries("invoice.paid", &payload);
/// assert_eq!(deliveries[0].handler, "billing");
/// assert_eq!(deliveries[0].ordering_value.as_deref(), Some("42"));
/// assert!(registry.deliveries("order.created", &payload).is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registry {
    routes: Vec<Route>,
}

impl Registry {
    /// A registry of these routes.
    pub fn new(routes: Vec<Route>) -> Self {
        Self { routes }
    }

    /// The routes, in registration order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// True when some handler receives `event_type` (metric labels use it).
    pub fn is_routed(&self, event_type: &str) -> bool {
        self.routes.iter().any(|r| r.matches(event_type))
    }

    /// One new delivery per matching handler, with its ordering value.
    pub fn deliveries(&self, event_type: &str, payload: &Value) -> Vec<NewDelivery> {
        self.routes
            .iter()
            .filter(|r| r.matches(event_type))
            .map(|r| NewDelivery {
                id: Uuid::now_v7(),
                handler: r.name.clone(),
                ordering_value: r
                    .ordering_key
                    .as_deref()
                    .and_then(|ptr| payload.pointer(ptr))
                    .map(ordering_text),
            })
            .collect()
    }
}

/// The text form of an ordering key value: strings as they are, others as JSON.
fn ordering_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
