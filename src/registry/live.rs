//! The registry as it changes at run time: the manifests' routes (fixed at startup)
//! plus the subscribers' (stored in the database, changed through the API).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::kinds::http::{self, HttpTarget};
use super::{Pattern, Registry, RegistryError, Route};
use crate::model::Subscriber;
use crate::retry::Policy;
use crate::signing::Secret;
use crate::ssrf::TargetGuard;
use crate::transform::Transform;

/// Why a subscriber cannot become a route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SubscriberError {
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
    /// True when the URL names a forbidden (internal) address.
    pub forbidden_target: bool,
}

fn invalid(field: &'static str, message: impl Into<String>) -> SubscriberError {
    SubscriberError {
        field,
        message: message.into(),
        forbidden_target: false,
    }
}

/// The current routing table, swapped whole when subscribers change.
pub struct LiveRegistry {
    manifests: Vec<Route>,
    /// The table and the version of the stored subscribers it was built from.
    current: RwLock<(Arc<Registry>, u64)>,
    /// The subscribers `current` was built from, by name, each with its route
    /// (`None`: it did not validate): what a follower compares with, and what a
    /// rebuild reuses for the subscribers that did not change.
    installed: std::sync::Mutex<HashMap<String, (Subscriber, Option<Route>)>>,
    client: reqwest::Client,
    guard: Arc<TargetGuard>,
    policy: Policy,
}

impl LiveRegistry {
    /// Starts from the manifests' registry; subscribers come with [`Self::reload`].
    pub fn new(
        manifests: Registry,
        client: reqwest::Client,
        guard: Arc<TargetGuard>,
        policy: Policy,
    ) -> Self {
        let routes = manifests.routes().to_vec();
        Self {
            manifests: routes,
            current: RwLock::new((Arc::new(manifests), 0)),
            installed: std::sync::Mutex::new(HashMap::new()),
            client,
            guard,
            policy,
        }
    }

    /// The routing table now.
    pub fn current(&self) -> Arc<Registry> {
        self.versioned().0
    }

    /// The routing table now, with the version of the stored subscribers it was
    /// built from (see [`NewEvent::routing_version`](crate::model::NewEvent)).
    pub fn versioned(&self) -> (Arc<Registry>, u64) {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True when a manifest handler has this name.
    pub fn is_manifest(&self, name: &str) -> bool {
        self.manifests.iter().any(|r| r.name == name)
    }

    /// Rebuilds the table from the manifests and these subscribers. A subscriber
    /// that no longer validates (say, `ALLOWED_TARGETS` changed) is left out, and
    /// said so in the log.
    pub fn reload(&self, subscribers: Vec<Subscriber>) -> Result<(), RegistryError> {
        let version = self.versioned().1;
        self.reload_at(subscribers, version)
    }

    /// [`Self::reload`] from the subscribers stored at `version`. Only the
    /// subscribers that changed since the last build get a new route; the others
    /// keep theirs (nothing of them is copied but the route the table holds).
    pub fn reload_at(
        &self,
        subscribers: Vec<Subscriber>,
        version: u64,
    ) -> Result<(), RegistryError> {
        let mut routes = self.manifests.clone();
        let mut installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
        let mut before = std::mem::take(&mut *installed);
        let mut built = HashMap::with_capacity(subscribers.len());
        for s in subscribers {
            let (name, (s, route)) = match before.remove_entry(&s.name) {
                Some((name, (prev, route))) if prev == s => (name, (prev, route)),
                _ => {
                    let route = self
                        .route_of(&s)
                        .inspect_err(|e| {
                            tracing::warn!(subscriber = %s.name, error = %e, "subscriber skipped")
                        })
                        .ok();
                    (s.name.clone(), (s, route))
                }
            };
            routes.extend(route.iter().cloned());
            built.insert(name, (s, route));
        }
        match Registry::new(routes) {
            Ok(registry) => {
                *installed = built;
                *self.current.write().unwrap_or_else(|e| e.into_inner()) =
                    (Arc::new(registry), version);
                Ok(())
            }
            Err(e) => {
                // The table stays as it was; what it was built from is forgotten,
                // so that the next reload builds every route again.
                installed.clear();
                Err(e)
            }
        }
    }

    /// Rebuilds the table from `subscribers` unless it was built from exactly
    /// these; returns whether it did. Compares with what is *installed*, whoever
    /// installed it, so a change made here and undone elsewhere is still seen.
    /// `version` is the version of the stored subscribers they are; when only it
    /// changed, it is recorded without a rebuild.
    pub fn reload_if_changed(
        &self,
        subscribers: Vec<Subscriber>,
        version: u64,
    ) -> Result<bool, RegistryError> {
        let same = {
            let installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
            installed.len() == subscribers.len()
                && subscribers
                    .iter()
                    .all(|s| installed.get(&s.name).is_some_and(|(i, _)| i == s))
        };
        if same {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            current.1 = version;
            return Ok(false);
        }
        self.reload_at(subscribers, version).map(|()| true)
    }

    /// Validates a subscriber and makes its route (an `http` handler).
    pub fn route_of(&self, s: &Subscriber) -> Result<Route, SubscriberError> {
        if s.name.is_empty()
            || s.name.len() > 255
            || s.name.chars().any(|c| c.is_control() || c == '/')
        {
            return Err(invalid(
                "name",
                "must be 1 to 255 characters, without '/' or control characters",
            ));
        }
        if s.event_types.is_empty() {
            return Err(invalid(
                "event_types",
                "list at least one event type or pattern",
            ));
        }
        let patterns = s
            .event_types
            .iter()
            .map(|p| Pattern::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("event_types", e.to_string()))?;
        let url =
            reqwest::Url::parse(&s.url).map_err(|e| invalid("url", format!("not a URL: {e}")))?;
        self.guard.check_url(&url).map_err(|e| SubscriberError {
            field: "url",
            message: e.to_string(),
            forbidden_target: matches!(
                e,
                crate::ssrf::TargetError::Forbidden(_) | crate::ssrf::TargetError::ForbiddenName(_)
            ),
        })?;
        let secrets = match s.secret.as_deref() {
            None | Some("") => Vec::new(),
            Some(text) => Secret::parse_list(text).map_err(|e| invalid("secret", e.to_string()))?,
        };
        super::check_ordering_key(s.ordering_key.as_deref()).map_err(|(f, m)| invalid(f, m))?;
        let policy = super::overrides(&self.policy, s.max_attempts, s.backoff.as_deref())
            .map_err(|(f, m)| invalid(f, m))?;
        let flow = super::flow::FlowControl::from_fields(
            s.max_in_flight.map(i64::from),
            s.rate_limit.as_deref(),
            s.disable_after.as_deref(),
        )
        .map_err(|(f, m)| invalid(f, m))?;
        let filter = s
            .filter
            .as_ref()
            .map(|f| super::filter::Filter::compile(f).map(Arc::new))
            .transpose()
            .map_err(|e| invalid("filter", e.to_string()))?;
        let transform = s
            .transform
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(|t| Transform::compile(&format!("subscriber {}", s.name), t).map(Arc::new))
            .transpose()
            .map_err(|e| invalid("transform", e.to_string()))?;
        let target = Arc::new(HttpTarget {
            url: url.clone(),
            secrets,
            transform,
        });
        Ok(Route {
            name: s.name.clone(),
            patterns,
            ordering_key: s.ordering_key.clone().filter(|k| !k.is_empty()),
            policy,
            handler: http::handler(self.client.clone(), self.guard.clone(), (*target).clone()),
            kind: "subscriber".to_owned(),
            target: http::display_url(&url),
            active: s.active,
            flow,
            filter,
            http: Some(target),
        })
    }
}
