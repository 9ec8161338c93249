//! The registry: which handlers receive which event types, and how.
//!
//! A [`Route`] is a named handler with its event type [`Pattern`]s, its retry
//! [`Policy`] and, optionally, an ordering key (a JSON pointer into the payload).
//! Intake asks the registry for the deliveries of each event and stores them with the
//! event, in the same transaction; workers look the handler up by name.
//!
//! Rust code registers handlers directly:
//!
//! ```
//! use hookbox::registry::{Event, HandlerError, Registry, handler_fn};
//!
//! let registry = Registry::builder()
//!     .route("order.*", handler_fn(|event: Event| async move {
//!         println!("order event {}", event.id);
//!         Ok::<(), HandlerError>(())
//!     }))
//!     .build()
//!     .expect("valid routes");
//! assert!(registry.is_routed("order.created"));
//! ```
//!
//! The binary fills the same registry from `HANDLERS_DIR/*.toml` ([`manifest`]).

pub mod filter;
pub mod flow;
mod handler;
pub mod kinds;
pub mod live;
pub mod manifest;
mod pattern;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use handler::Answered;
pub use handler::{BoxHandler, Event, HandlerError, handler_fn};
pub use pattern::{MAX_NAME_BYTES, Pattern, PatternError, event_type_error, is_event_type_byte};

use uuid::Uuid;

use crate::model::NewDelivery;
use crate::retry::{Backoff, Policy};

/// One handler with its routing facts.
#[derive(Clone)]
pub struct Route {
    /// Unique handler name (stored with each delivery).
    pub name: String,
    /// The event types it receives.
    pub patterns: Vec<Pattern>,
    /// JSON pointer into the payload; deliveries with equal values run in order.
    pub ordering_key: Option<String>,
    /// Retries, backoff and timeout.
    pub policy: Policy,
    /// The handler itself.
    pub handler: BoxHandler,
    /// `http`, `exec`, `log` or `rust` (for the routing table).
    pub kind: String,
    /// What it reaches: a URL, a command line (for the routing table; no secrets).
    pub target: String,
    /// An inactive route gets no new deliveries (its unfinished ones still run).
    pub active: bool,
    /// Its lane's limits: attempts at once, rate, when to disable.
    pub flow: flow::FlowControl,
    /// Only events that match it get a delivery (`None`: every event of its types).
    pub filter: Option<Arc<filter::Filter>>,
    /// An http handler's or subscriber's target (URL, secrets, transform), for
    /// `POST /destinations/{name}/test`; `None` for other kinds.
    pub http: Option<Arc<kinds::http::HttpTarget>>,
    /// Its delivery metrics' handles, found once ([`crate::telemetry::DeliveryMetrics`]).
    pub metrics: crate::telemetry::DeliveryMetrics,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("patterns", &self.patterns)
            .field("ordering_key", &self.ordering_key)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// True when this route receives new events of `event_type`.
    pub fn matches(&self, event_type: &str) -> bool {
        self.active && self.patterns.iter().any(|p| p.matches(event_type))
    }
}

/// Why a registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// An invalid pattern.
    #[error("handler {name:?}: {source}")]
    Pattern {
        /// The handler.
        name: String,
        /// The pattern problem.
        source: PatternError,
    },
    /// Two handlers with one name.
    #[error("two handlers are named {0:?}")]
    DuplicateName(String),
}

/// The routing table: the routes fixed at startup (manifests, Rust handlers) in
/// registration order, then the subscribers' routes by name. Each route is shared,
/// so a copy with one subscriber changed ([`Registry::with_subscriber`]) copies
/// pointers and builds nothing.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    routes: Vec<Arc<Route>>,
    /// How many of `routes` are fixed; the rest are subscribers', sorted by name.
    fixed: usize,
}

impl Registry {
    /// Starts a registry for Rust handlers, with the global default policy.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder {
            routes: Vec::new(),
            errors: Vec::new(),
            policy: default_policy(),
        }
    }

    /// A registry of these routes (fixed: no subscribers yet); names must be
    /// unique.
    pub fn new(routes: Vec<Route>) -> Result<Self, RegistryError> {
        let mut names = HashSet::new();
        for r in &routes {
            if !names.insert(r.name.as_str()) {
                return Err(RegistryError::DuplicateName(r.name.clone()));
            }
        }
        Ok(Self {
            fixed: routes.len(),
            routes: routes.into_iter().map(Arc::new).collect(),
        })
    }

    /// The fixed routes in registration order, then the subscribers' by name.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }

    /// The route of a handler name.
    pub fn get(&self, name: &str) -> Option<&Route> {
        match self.subscriber_index(name) {
            Ok(at) => Some(&*self.routes[self.fixed + at]),
            Err(_) => self.fixed().iter().find(|r| r.name == name).map(|r| &**r),
        }
    }

    /// This table's fixed routes with `subscribers`' routes instead of the ones it
    /// has; a name taken twice (or by a fixed route) is an error.
    ///
    /// ```
    /// # use hookbox::registry::Registry;
    /// let empty = Registry::builder().build()?;
    /// assert!(empty.with_subscribers(Vec::new())?.routes().is_empty());
    /// # Ok::<(), hookbox::registry::RegistryError>(())
    /// ```
    pub fn with_subscribers(
        &self,
        mut subscribers: Vec<Arc<Route>>,
    ) -> Result<Self, RegistryError> {
        subscribers.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        if let Some(pair) = subscribers.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(RegistryError::DuplicateName(pair[0].name.clone()));
        }
        if let Some(r) = subscribers.iter().find(|r| self.is_fixed(&r.name)) {
            return Err(RegistryError::DuplicateName(r.name.clone()));
        }
        let mut routes = Vec::with_capacity(self.fixed + subscribers.len());
        routes.extend_from_slice(self.fixed());
        routes.extend(subscribers);
        Ok(Self {
            routes,
            fixed: self.fixed,
        })
    }

    /// A copy with the subscriber `name`'s route replaced by `route` (`None`:
    /// removed): one change, whatever the number of subscribers, costs a copy of
    /// the pointers and nothing else. `name` must not be a fixed route's.
    pub fn with_subscriber(
        &self,
        name: &str,
        route: Option<Arc<Route>>,
    ) -> Result<Self, RegistryError> {
        debug_assert!(route.as_ref().is_none_or(|r| r.name == name));
        if self.is_fixed(name) {
            return Err(RegistryError::DuplicateName(name.to_owned()));
        }
        let mut routes = self.routes.clone();
        match (self.subscriber_index(name), route) {
            (Ok(at), Some(route)) => routes[self.fixed + at] = route,
            (Ok(at), None) => {
                routes.remove(self.fixed + at);
            }
            (Err(at), Some(route)) => routes.insert(self.fixed + at, route),
            (Err(_), None) => {}
        }
        Ok(Self {
            routes,
            fixed: self.fixed,
        })
    }

    fn fixed(&self) -> &[Arc<Route>] {
        &self.routes[..self.fixed]
    }

    fn is_fixed(&self, name: &str) -> bool {
        self.fixed().iter().any(|r| r.name == name)
    }

    /// Where `name` is (or would go) among the subscribers' routes.
    fn subscriber_index(&self, name: &str) -> Result<usize, usize> {
        self.routes[self.fixed..].binary_search_by(|r| r.name.as_str().cmp(name))
    }

    /// True when some handler receives `event_type`.
    pub fn is_routed(&self, event_type: &str) -> bool {
        self.routes.iter().any(|r| r.matches(event_type))
    }

    /// The `event_type` label of `hookbox_events_received_total` (docs/api.md,
    /// "Probes and metrics"), bounded
    /// by the routing table: `event_type` itself when a handler routes it by exact
    /// name, else the longest wildcard pattern that routes it (`github.*`, `*`),
    /// else `other`.
    pub fn event_type_label(&self, event_type: &str) -> std::borrow::Cow<'_, str> {
        let mut widest: Option<&str> = None;
        for pattern in self
            .routes
            .iter()
            .filter(|r| r.active)
            .flat_map(|r| &r.patterns)
        {
            match pattern {
                Pattern::Exact(name) if name == event_type => return name.as_str().into(),
                Pattern::Prefix(prefix)
                    if event_type.starts_with(prefix.as_str())
                        && widest.is_none_or(|w| prefix.len() > w.len()) =>
                {
                    widest = Some(prefix);
                }
                _ => {}
            }
        }
        widest.map_or_else(|| "other".into(), |prefix| format!("{prefix}*").into())
    }

    /// One new delivery per matching handler whose filter (if any) matches, with
    /// its ordering value, for a payload given as JSON text (intake's canonical
    /// text) from `source` (`None`: `POST /webhooks`). The ordering pointer is
    /// resolved on the text, only for routes that have one; the payload is parsed
    /// once, only when a matching route has a filter. A filtered-out handler is
    /// counted in `hookbox_deliveries_filtered_total{destination}`.
    pub fn deliveries(
        &self,
        event_type: &str,
        source: Option<&str>,
        payload: &str,
    ) -> Vec<NewDelivery> {
        let mut document: Option<serde_json::Value> = None;
        self.routes
            .iter()
            .filter(|r| r.matches(event_type))
            .filter(|r| {
                let Some(filter) = &r.filter else {
                    return true;
                };
                let document = document.get_or_insert_with(|| {
                    filter::document(event_type, source, payload)
                });
                let matched = filter.matches(document);
                if !matched {
                    metrics::counter!(crate::telemetry::names::DELIVERIES_FILTERED, "destination" => r.name.clone())
                        .increment(1);
                }
                matched
            })
            .map(|r| NewDelivery {
                id: Uuid::now_v7(),
                handler: r.name.clone(),
                ordering_value: r
                    .ordering_key
                    .as_deref()
                    .and_then(|ptr| crate::json::pointer(payload, ptr))
                    .map(ordering_text),
            })
            .collect()
    }
}

/// The global retry policy of the built-in defaults (docs/configuration.md:
/// `MAX_ATTEMPTS` 5, 5 s base, 300 s
/// cap, 30 s timeout).
pub fn default_policy() -> Policy {
    Policy {
        max_attempts: 5,
        backoff: Backoff::Exponential {
            base: Duration::from_secs(5),
            max: Duration::from_secs(300),
        },
        timeout: Duration::from_secs(30),
        max_delay: Duration::from_secs(300),
    }
}

/// Builds a [`Registry`] in code.
pub struct RegistryBuilder {
    routes: Vec<Route>,
    errors: Vec<RegistryError>,
    policy: Policy,
}

impl RegistryBuilder {
    /// The policy of routes added after this call (manifests override per handler).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Routes the event types matching `pattern` to `handler`, named after the
    /// pattern.
    pub fn route(self, pattern: &str, handler: BoxHandler) -> Self {
        self.named(pattern, &[pattern], handler)
    }

    /// Routes several patterns to one named handler.
    pub fn named(mut self, name: &str, patterns: &[&str], handler: BoxHandler) -> Self {
        let parsed: Result<Vec<Pattern>, PatternError> =
            patterns.iter().map(|p| Pattern::parse(p)).collect();
        match parsed {
            Ok(patterns) => self.routes.push(Route {
                name: name.to_owned(),
                patterns,
                ordering_key: None,
                policy: self.policy.clone(),
                handler,
                kind: "rust".to_owned(),
                target: "-".to_owned(),
                active: true,
                flow: flow::FlowControl::default(),
                filter: None,
                http: None,
                metrics: Default::default(),
            }),
            Err(source) => self.errors.push(RegistryError::Pattern {
                name: name.to_owned(),
                source,
            }),
        }
        self
    }

    /// Adds a fully described route (as the manifest loader does).
    pub fn with_route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// The registry, or the first problem found.
    pub fn build(mut self) -> Result<Registry, RegistryError> {
        if !self.errors.is_empty() {
            return Err(self.errors.remove(0));
        }
        Registry::new(self.routes)
    }
}

/// Applies a handler's `max_attempts` and `backoff` overrides to `defaults`; an
/// error names the field.
pub(crate) fn overrides(
    defaults: &Policy,
    max_attempts: Option<u32>,
    backoff: Option<&[String]>,
) -> Result<Policy, (&'static str, String)> {
    let mut p = defaults.clone();
    if let Some(n) = max_attempts {
        if n == 0 {
            return Err(("max_attempts", "must be at least 1".into()));
        }
        p.max_attempts = n;
    }
    if let Some(steps) = backoff {
        if steps.is_empty() {
            return Err((
                "backoff",
                "expected durations like [\"5s\", \"30s\"]".into(),
            ));
        }
        let parsed = steps
            .iter()
            .map(|d| {
                crate::config::parse_limited_duration(d)
                    .map_err(|e| ("backoff", format!("{d:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        p.backoff = Backoff::Schedule(parsed);
    }
    Ok(p)
}

/// An ordering key must be a JSON pointer (`/customer_id`).
pub(crate) fn check_ordering_key(key: Option<&str>) -> Result<(), (&'static str, String)> {
    match key {
        Some(k) if !k.is_empty() && !k.starts_with('/') => Err((
            "ordering_key",
            format!("{k:?} is not a JSON pointer (like /customer_id)"),
        )),
        _ => Ok(()),
    }
}

/// The text form of an ordering key value (JSON text): strings as they are, others
/// as their (canonical) JSON text, numbers digit for digit.
fn ordering_text(v: &str) -> String {
    if v.starts_with('"') {
        if let Some(s) = crate::json::string_value(v) {
            return s;
        }
    }
    v.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> BoxHandler {
        handler_fn(|_: Event| async { Ok(()) })
    }

    #[test]
    fn fans_out_to_every_matching_handler_with_ordering_values() {
        let mut r = Registry::builder()
            .route("invoice.*", ok())
            .named("all", &["*"], ok())
            .named("exact", &["order.created"], ok())
            .build()
            .expect("valid");
        Arc::make_mut(&mut r.routes[0]).ordering_key = Some("/customer/id".into());
        let payload = r#"{"customer":{"id":42}}"#;
        let d = r.deliveries("invoice.paid", None, payload);
        let names: Vec<&str> = d.iter().map(|d| d.handler.as_str()).collect();
        assert_eq!(names, ["invoice.*", "all"]);
        assert_eq!(d[0].ordering_value.as_deref(), Some("42"));
        assert_eq!(d[1].ordering_value, None);
        assert_eq!(r.deliveries("order.created", None, payload).len(), 2);
        assert!(!r.is_routed("") || r.is_routed("x"));
    }

    #[test]
    fn labels_are_the_exact_name_or_the_longest_routing_pattern_or_other() {
        let mut r = Registry::builder()
            .named("all", &["*"], ok())
            .named("gh", &["github.*", "github.pull_request.*"], ok())
            .named("exact", &["github.push"], ok())
            .named("off", &["off.*"], ok())
            .build()
            .expect("valid");
        Arc::make_mut(&mut r.routes[3]).active = false;
        assert_eq!(r.event_type_label("github.push"), "github.push");
        assert_eq!(r.event_type_label("github.ping"), "github.*");
        assert_eq!(
            r.event_type_label("github.pull_request.opened"),
            "github.pull_request.*"
        );
        assert_eq!(r.event_type_label("off.x"), "*");
        assert_eq!(r.event_type_label("anything"), "*");
        r.routes.remove(0);
        assert_eq!(r.event_type_label("anything"), "other");
        assert_eq!(r.event_type_label("off.x"), "other");
    }

    #[test]
    fn duplicate_names_and_bad_patterns_are_refused() {
        let dup = Registry::builder()
            .route("a", ok())
            .route("a", ok())
            .build();
        assert!(matches!(dup, Err(RegistryError::DuplicateName(_))));
        let bad = Registry::builder().route("a*b", ok()).build();
        assert!(matches!(bad, Err(RegistryError::Pattern { .. })));
    }
}
