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

/// A subscriber as the table was built from it, with its route (`None`: it did
/// not validate).
type Installed = (Subscriber, Option<Arc<Route>>);

/// The current routing table, swapped whole when subscribers change.
pub struct LiveRegistry {
    /// The manifests' routes alone: what every table starts from.
    manifests: Registry,
    /// The table and the version of the stored subscribers it was built from.
    current: RwLock<(Arc<Registry>, u64)>,
    /// The subscribers `current` was built from, by name, each with its route
    /// (`None`: it did not validate): what a follower compares with, and what a
    /// rebuild reuses for the subscribers that did not change.
    installed: std::sync::Mutex<HashMap<String, Installed>>,
    client: crate::registry::kinds::outbound::Outbound,
    guard: Arc<TargetGuard>,
    policy: Policy,
}

impl LiveRegistry {
    /// Starts from the manifests' registry; subscribers come with [`Self::reload`].
    pub fn new(
        manifests: Registry,
        client: crate::registry::kinds::outbound::Outbound,
        guard: Arc<TargetGuard>,
        policy: Policy,
    ) -> Self {
        Self {
            current: RwLock::new((Arc::new(manifests.clone()), 0)),
            manifests,
            installed: std::sync::Mutex::new(HashMap::new()),
            client,
            guard,
            policy,
        }
    }

    /// The guard every delivery's target passes (`ALLOWED_TARGETS`).
    pub fn guard(&self) -> &TargetGuard {
        &self.guard
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
        self.manifests.get(name).is_some()
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
        let mut installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
        let mut before = std::mem::take(&mut *installed);
        let mut built = HashMap::with_capacity(subscribers.len());
        let mut routes = Vec::with_capacity(subscribers.len());
        for s in subscribers {
            let (name, (s, route)) = match before.remove_entry(&s.name) {
                Some((name, (prev, route))) if prev == s => (name, (prev, route)),
                _ => {
                    let route = self.checked_route(&s);
                    (s.name.clone(), (s, route))
                }
            };
            routes.extend(route.iter().cloned());
            built.insert(name, (s, route));
        }
        match self.manifests.with_subscribers(routes) {
            Ok(registry) => {
                *installed = built;
                self.install(registry, version);
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

    /// Applies one change to the table: the subscriber `name` is now `now`
    /// (`None`: deleted), as the stored subscribers at `version` have it. Costs
    /// that one subscriber's route, whatever the number of the others. Returns
    /// false, changing nothing, when the table cannot be brought to `version` by
    /// that change alone — another change (another instance's) came between —
    /// and then the caller reloads all ([`Self::reload_at`]).
    ///
    /// On a shared store, `version` must be one after the table's and `name`
    /// must differ from the table's copy: then the one statement between them was
    /// the change to `name`. Version 0 is a store that one instance owns (its
    /// versions never change): every change there passes through this instance,
    /// so the name's stored state is all that can differ for it.
    pub fn apply(
        &self,
        name: &str,
        now: Option<Subscriber>,
        version: u64,
    ) -> Result<bool, RegistryError> {
        let mut installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
        let (table, at) = self.versioned();
        if version != 0 && version == at {
            // Read after the table was built from this very version: in it.
            return Ok(true);
        }
        let unchanged = match (&now, installed.get(name)) {
            (Some(s), Some((i, _))) => s == i,
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            // Nothing to do on a store of one instance; on a shared one the
            // statement since the table's version was another name's (ours was
            // in the table already), which only reading everything finds.
            return Ok(version == 0);
        }
        if version != 0 && version != at + 1 {
            // More than one statement since the table's version.
            return Ok(false);
        }
        let route = now.as_ref().and_then(|s| self.checked_route(s));
        self.install(table.with_subscriber(name, route.clone())?, version);
        match now {
            Some(s) => installed.insert(name.to_owned(), (s, route)),
            None => installed.remove(name),
        };
        Ok(true)
    }

    /// A subscriber's route, shared; `None` (said in the log) when it no longer
    /// validates (say, `ALLOWED_TARGETS` changed).
    fn checked_route(&self, s: &Subscriber) -> Option<Arc<Route>> {
        self.route_of(s)
            .inspect_err(|e| tracing::warn!(subscriber = %s.name, error = %e, "subscriber skipped"))
            .ok()
            .map(Arc::new)
    }

    fn install(&self, table: Registry, version: u64) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (Arc::new(table), version);
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
        crate::signing::warn_if_short(&secrets, &s.name);
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
            // A subscriber is an `http` destination (SPEC §4: it behaves exactly as
            // a `kind = "http"` manifest), and `GET /destinations` says so.
            kind: "http".to_owned(),
            target: http::display_url(&url),
            active: s.active,
            flow,
            filter,
            http: Some(target),
            metrics: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn live() -> LiveRegistry {
        let guard = Arc::new(TargetGuard::new(vec!["127.0.0.0/8".parse().expect("net")]));
        let manifests = Registry::builder()
            .route("audit.*", crate::registry::handler_fn(|_| async { Ok(()) }))
            .build()
            .expect("manifests");
        let client = http::client(guard.clone()).expect("client");
        LiveRegistry::new(manifests, client, guard, crate::registry::default_policy())
    }

    fn subscriber(name: &str, event_type: &str) -> Subscriber {
        Subscriber {
            name: name.into(),
            event_types: vec![event_type.into()],
            url: format!("http://127.0.0.1:9/{name}"),
            secret: None,
            ordering_key: None,
            max_attempts: None,
            backoff: None,
            max_in_flight: None,
            rate_limit: None,
            disable_after: None,
            filter: None,
            transform: None,
            active: true,
            created_at: Timestamp::now(),
            updated_at: Timestamp::now(),
        }
    }

    /// Each route's name and what it reaches, in the table's order.
    fn table(live: &LiveRegistry) -> Vec<(String, String)> {
        live.current()
            .routes()
            .iter()
            .map(|r| (r.name.clone(), r.target.clone()))
            .collect()
    }

    /// One change at a time gives the table that reading everything gives.
    #[test]
    fn applied_changes_make_the_table_a_reload_makes() {
        let (one, all) = (live(), live());
        let mut stored = Vec::new();
        for name in ["m", "b", "z", "a"] {
            let s = subscriber(name, "order.created");
            assert!(one.apply(name, Some(s.clone()), 0).expect("apply"));
            stored.push(s);
        }
        let mut changed = subscriber("b", "order.paid");
        changed.url = "http://127.0.0.1:9/elsewhere".into();
        assert!(one.apply("b", Some(changed.clone()), 0).expect("apply"));
        stored[1] = changed;
        assert!(one.apply("z", None, 0).expect("apply"));
        stored.remove(2);
        assert!(one.apply("nobody", None, 0).expect("apply"));
        all.reload_at(stored, 0).expect("reload");
        assert_eq!(table(&one), table(&all));
        let names: Vec<_> = table(&one).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["audit.*", "a", "b", "m"]);
        let routes = one.current();
        assert!(routes.get("b").expect("b").matches("order.paid"));
        assert!(routes.get("z").is_none());
        assert!(routes.get("audit.*").is_some());
    }

    /// A change that is not the only one since the table's version is refused
    /// (the caller reads everything); one the table already has is a no-op.
    #[test]
    fn a_gap_in_the_versions_asks_for_a_reload() {
        let live = live();
        live.reload_at(vec![subscriber("a", "x")], 4)
            .expect("reload");
        let before = table(&live);
        assert!(
            !live
                .apply("b", Some(subscriber("b", "x")), 6)
                .expect("apply")
        );
        assert_eq!((table(&live), live.versioned().1), (before.clone(), 4));
        assert!(
            live.apply("a", Some(subscriber("a", "x")), 4)
                .expect("apply")
        );
        assert_eq!((table(&live), live.versioned().1), (before, 4));
        assert!(
            live.apply("b", Some(subscriber("b", "x")), 5)
                .expect("apply")
        );
        assert_eq!(live.versioned().1, 5);
        assert!(live.current().get("b").is_some());
        // "b" as the table has it, one version later: the change was another
        // subscriber's, which only reading everything finds.
        let b = live.installed.lock().expect("installed")["b"].0.clone();
        assert!(!live.apply("b", Some(b), 6).expect("apply"));
        assert_eq!(live.versioned().1, 5);
        assert!(!live.apply("nobody", None, 6).expect("apply"));
    }

    /// A subscriber cannot take a manifest handler's name, and one that no
    /// longer validates is left out of the table but remembered.
    #[test]
    fn manifest_names_and_invalid_subscribers() {
        let live = live();
        let taken = live.apply("audit.*", Some(subscriber("audit.*", "x")), 0);
        assert!(matches!(taken, Err(RegistryError::DuplicateName(_))));
        let mut outside = subscriber("far", "x");
        outside.url = "http://10.0.0.1/".into();
        assert!(live.apply("far", Some(outside.clone()), 0).expect("apply"));
        assert!(live.current().get("far").is_none());
        assert!(!live.reload_if_changed(vec![outside], 0).expect("same"));
    }
}
