//! What the inbox admits, and what it answers: the input every entry point builds
//! at its edge, and the typed outcome it turns into an HTTP answer or a source's
//! counters.
//!
//! An entry point validates what it read into a [`Submission`] — an
//! [`EventType`] and an [`IdempotencyKey`] that can only be made valid, the
//! payload's canonical text — and hands it to [`Inbox::accept`](super::Inbox::accept).
//! Routing, the key rules, the payload's hash, building the event, the commit and
//! the re-route when the subscribers changed meanwhile happen there, once, for
//! `POST /webhooks`, `POST /ingest/{name}`, the pull sources and hookbox's own
//! operator events.

use std::collections::HashSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::model::{NewDelivery, NewEvent, Timestamp, hex};
use crate::registry::live::LiveRegistry;
use crate::registry::{MAX_NAME_BYTES, event_type_error};
use crate::store::{EventSummary, Inserted};

/// An event type that passed the registry's rule: 1–255 bytes of
/// `A-Z a-z 0-9 . _ : / -`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventType(String);

impl EventType {
    /// Checks `name`; the error says what is wrong with it.
    pub fn new(name: impl Into<String>) -> Result<Self, &'static str> {
        let name = name.into();
        match event_type_error(&name) {
            Some(why) => Err(why),
            None => Ok(Self(name)),
        }
    }

    /// The type as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An idempotency key that can be stored on both backends: 1–255 bytes, no NUL
/// (PostgreSQL cannot store NUL in text; SQLite could, but both answer alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Checks `key`; the error says what is wrong with it.
    pub fn new(key: impl Into<String>) -> Result<Self, &'static str> {
        let key = key.into();
        if key.is_empty() {
            Err("the idempotency key must not be empty")
        } else if key.len() > MAX_NAME_BYTES {
            Err("the idempotency key must be at most 255 bytes")
        } else if key.contains('\0') {
            Err("the idempotency key must not contain NUL")
        } else {
            Ok(Self(key))
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The source whose namespace (`{name}:…`) the key is in, if it has one.
    fn namespace(&self) -> Option<&str> {
        self.0.split_once(':').map(|(name, _)| name)
    }
}

/// Where a submission comes from: decides its key rules and its `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `POST /webhooks`: a key must not be in a source's namespace.
    Webhooks,
    /// A push or pull source, by name: its key is `{name}:{delivery id}`.
    Source(String),
    /// hookbox's own event about a destination (`hookbox.destination.*`,
    /// `hookbox.delivery.dead_lettered`): never delivered to that destination, and
    /// accepted while shutting down.
    Operator {
        /// The destination it is about.
        about: String,
    },
}

/// The source that [`Origin::Operator`] events carry, and their keys' namespace.
pub(crate) const OPERATOR_SOURCE: &str = "hookbox";

/// An event as an entry point read and validated it.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Its type.
    pub event_type: EventType,
    /// The caller's key; `None` makes one (the event's id, or for
    /// [`Origin::Operator`] `hookbox:{type}:{destination}:{n}`, `n` the id as
    /// an integer).
    pub key: Option<IdempotencyKey>,
    /// Its payload.
    pub payload: Payload,
    /// Where it comes from.
    pub origin: Origin,
    /// The sender's trace context (`None`: a new trace is started).
    pub trace: Option<crate::trace_context::TraceContext>,
}

impl Submission {
    /// What identifies the request's content: its type and its payload's hash (a
    /// key sent again with another fingerprint is [`Outcome::KeyReused`]).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.event_type.as_str(), &self.payload.sha256)
    }
}

/// A payload's canonical JSON text ([`crate::json`]: object keys sorted, numbers as
/// sent), stored and delivered as it is, with its SHA-256 (computed once, here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    text: String,
    sha256: String,
}

impl Payload {
    /// A payload from its canonical text (as [`crate::json::canonical`] or
    /// [`crate::json::canonical_members`] make it).
    pub fn new(canonical: String) -> Self {
        let sha256 = hex(&Sha256::digest(canonical.as_bytes()));
        Self {
            text: canonical,
            sha256,
        }
    }

    /// The canonical text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// A payload whose identity leaves out members a sender puts in every
    /// delivery's body afresh (Mailgun's `/signature`, Linear's
    /// `/webhookTimestamp`): its hash is of the text without the top-level
    /// members `volatile` names, so a redelivery of the same event is a duplicate,
    /// not another body. The text is kept whole.
    pub fn identified_without(canonical: String, volatile: &[&str]) -> Self {
        let mut identity: Option<String> = None;
        for name in volatile {
            let text = identity.as_deref().unwrap_or(&canonical);
            if let Some(rest) = crate::json::without_member(text, name) {
                identity = Some(rest);
            }
        }
        let sha256 = hex(&Sha256::digest(
            identity.as_deref().unwrap_or(&canonical).as_bytes(),
        ));
        Self {
            text: canonical,
            sha256,
        }
    }

    /// Hex SHA-256 of what identifies the payload: the text, unless
    /// [`Payload::identified_without`] left members out of it.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

/// An event's type and its payload's SHA-256: what must match for a key sent again
/// to be the same event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of a type and a payload hash (hex).
    pub fn of(event_type: &str, payload_sha256: &str) -> Self {
        Self(format!("{event_type}\n{payload_sha256}"))
    }

    /// The fingerprint of a stored event.
    pub fn of_event(event: &EventSummary) -> Self {
        Self::of(&event.event_type, &event.payload_sha256)
    }

    /// As text (what the idempotency layer compares).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`Inbox::accept`](super::Inbox::accept) did with a submission.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A new event, committed and handed to processing.
    Accepted(EventSummary),
    /// Its key was taken by the same event (type and payload): nothing new; the
    /// stored event's `received_count` grew.
    Duplicate(EventSummary),
    /// Its key was taken by another event (another type or payload); nothing stored.
    KeyReused(EventSummary),
    /// Not admitted; nothing stored.
    Refused(Refusal),
}

impl Outcome {
    /// The stored event it is about (`None` when refused).
    pub fn event(&self) -> Option<&EventSummary> {
        match self {
            Self::Accepted(e) | Self::Duplicate(e) | Self::KeyReused(e) => Some(e),
            Self::Refused(_) => None,
        }
    }

    /// The HTTP status intake answers it with: 202 new, 200 a duplicate, 422 a
    /// key reused or an ordering value with NUL, 503 while shutting down.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Accepted(_) => 202,
            Self::Duplicate(_) => 200,
            Self::Refused(Refusal::Draining) => 503,
            Self::KeyReused(_) | Self::Refused(_) => 422,
        }
    }
}

/// Why a submission was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Shutdown has begun (pushed events only; pull sources and operator events
    /// commit what they have).
    #[error("shutting down; retry on another instance")]
    Draining,
    /// A `POST /webhooks` key in a source's namespace.
    #[error("keys starting \"{name}:\" belong to the source {name:?} (POST /ingest/{name})")]
    KeyOfSource {
        /// The source that owns the namespace.
        name: String,
    },
    /// A routed handler's ordering value (its pointer into the payload) is a
    /// string with NUL, which PostgreSQL cannot store.
    #[error("the payload's ordering value for handler {handler:?} contains NUL")]
    OrderingValueNul {
        /// The handler whose value it is.
        handler: String,
    },
}

/// The rules of admission that need more than the submission: the sources'
/// namespaces and whether shutdown has begun.
pub(crate) struct Rules {
    /// Names of the sources, whose keys (`{name}:…`) `POST /webhooks` may not use.
    pub(crate) namespaces: HashSet<String>,
    /// Shutdown has begun: pushed events are refused.
    pub(crate) lifecycle: Arc<crate::lifecycle::Lifecycle>,
}

impl Rules {
    /// Refuses what the key rules, shutdown or the routed deliveries forbid;
    /// otherwise the event to commit, routed by the current table, and where it
    /// came from.
    pub(crate) fn admit(
        &self,
        registry: &LiveRegistry,
        submission: Submission,
    ) -> Result<(NewEvent, Origin), Refusal> {
        self.check(&submission)?;
        let (deliveries, version) = route(
            registry,
            submission.event_type.as_str(),
            submission.payload.text(),
            &submission.origin,
        )?;
        let origin = submission.origin.clone();
        let mut event = new_event(submission);
        event.deliveries = deliveries;
        event.routing_version = version;
        Ok((event, origin))
    }

    /// What [`Rules::admit`] would refuse `submission` for.
    pub(crate) fn refusal(
        &self,
        registry: &LiveRegistry,
        submission: &Submission,
    ) -> Option<Refusal> {
        self.check(submission).err().or_else(|| {
            route(
                registry,
                submission.event_type.as_str(),
                submission.payload.text(),
                &submission.origin,
            )
            .err()
        })
    }

    /// The rules that need no routing: shutdown, the sources' namespaces.
    fn check(&self, submission: &Submission) -> Result<(), Refusal> {
        let pushed = matches!(submission.origin, Origin::Webhooks | Origin::Source(_));
        if pushed && self.lifecycle.is_draining() {
            return Err(Refusal::Draining);
        }
        if submission.origin == Origin::Webhooks {
            if let Some(source) = submission
                .key
                .as_ref()
                .and_then(IdempotencyKey::namespace)
                .filter(|name| self.namespaces.contains(*name))
            {
                return Err(Refusal::KeyOfSource {
                    name: source.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// The event a submission stores, not yet routed.
fn new_event(s: Submission) -> NewEvent {
    let id = Uuid::now_v7();
    let event_type = s.event_type.0;
    let (idempotency_key, source) = match (s.key, s.origin) {
        (Some(key), Origin::Webhooks) => (key.0, None),
        (None, Origin::Webhooks) => (id.to_string(), None),
        (key, Origin::Source(name)) => (
            key.map_or_else(|| format!("{name}:{id}"), |k| k.0),
            Some(name),
        ),
        (key, Origin::Operator { about }) => (
            key.map_or_else(
                // `{n}` (SPEC §10) a number unique to the event: its UUID v7
                // as an integer, so increasing with time.
                || format!("{OPERATOR_SOURCE}:{event_type}:{about}:{}", id.as_u128()),
                |k| k.0,
            ),
            Some(OPERATOR_SOURCE.to_owned()),
        ),
    };
    NewEvent {
        id,
        idempotency_key,
        event_type,
        payload_sha256: s.payload.sha256,
        payload: s.payload.text,
        created_at: Timestamp::now(),
        source,
        trace: Some(
            s.trace
                .unwrap_or_else(|| crate::trace_context::TraceContext::accept(None, None)),
        ),
        deliveries: Vec::new(),
        routing_version: 0,
        claim_lease: None,
    }
}

/// The deliveries of an event by the current table (an operator event skips the
/// destination it is about) and the table's version; refuses an ordering value
/// with NUL.
pub(crate) fn route(
    registry: &LiveRegistry,
    event_type: &str,
    payload: &str,
    origin: &Origin,
) -> Result<(Vec<NewDelivery>, u64), Refusal> {
    let (table, version) = registry.versioned();
    let source = match origin {
        Origin::Webhooks => None,
        Origin::Source(name) => Some(name.as_str()),
        Origin::Operator { .. } => Some(OPERATOR_SOURCE),
    };
    let mut deliveries = table.deliveries(event_type, source, payload);
    if let Origin::Operator { about } = origin {
        deliveries.retain(|d| d.handler != *about);
    }
    check_ordering_values(&deliveries)?;
    Ok((deliveries, version))
}

fn check_ordering_values(deliveries: &[NewDelivery]) -> Result<(), Refusal> {
    match deliveries.iter().find(|d| {
        d.ordering_value
            .as_deref()
            .is_some_and(|v| v.contains('\0'))
    }) {
        None => Ok(()),
        Some(d) => Err(Refusal::OrderingValueNul {
            handler: d.handler.clone(),
        }),
    }
}

/// What a commit's result means for the event of type `event_type` and payload
/// hash `payload_sha256` that asked for it.
pub(crate) fn outcome(inserted: Inserted, event_type: &str, payload_sha256: &str) -> Outcome {
    let stored = &inserted.event;
    if inserted.created {
        Outcome::Accepted(inserted.event)
    } else if stored.event_type == event_type && stored.payload_sha256 == payload_sha256 {
        Outcome::Duplicate(inserted.event)
    } else {
        Outcome::KeyReused(inserted.event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::inbox::{EventType, IdempotencyKey};

        assert!(EventType::new("order.created").is_ok());
        assert!(EventType::new("no spaces").is_err());
        assert!(IdempotencyKey::new("").is_err());
        assert_eq!(IdempotencyKey::new("k-1").unwrap().as_str(), "k-1");
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_new_example() {
        let p = crate::inbox::Payload::new(crate::json::canonical(r#"{"b":1,"a":2}"#).unwrap());
        assert_eq!(p.text(), r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn keys_are_refused_with_their_reason() {
        assert!(IdempotencyKey::new("").is_err());
        assert!(IdempotencyKey::new("a".repeat(256)).is_err());
        assert!(IdempotencyKey::new("a\0b").is_err());
        assert!(IdempotencyKey::new("a".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::new("gh:1").unwrap().namespace(), Some("gh"));
        assert_eq!(IdempotencyKey::new("plain").unwrap().namespace(), None);
    }

    #[test]
    fn keys_in_a_source_namespace_belong_to_it() {
        let submission = |key: &str, origin: Origin| Submission {
            event_type: EventType::new("a").unwrap(),
            key: Some(IdempotencyKey::new(key).unwrap()),
            payload: Payload::new("null".into()),
            origin,
            trace: None,
        };
        let rules = |names: &[&str]| Rules {
            namespaces: names.iter().map(|n| (*n).to_owned()).collect(),
            lifecycle: Default::default(),
        };
        let gh = rules(&["gh"]);
        assert_eq!(
            gh.check(&submission("gh:123", Origin::Webhooks)),
            Err(Refusal::KeyOfSource { name: "gh".into() })
        );
        assert!(gh.check(&submission("ghx:123", Origin::Webhooks)).is_ok());
        assert!(gh.check(&submission("gh", Origin::Webhooks)).is_ok());
        assert!(
            gh.check(&submission("gh:123", Origin::Source("gh".into())))
                .is_ok()
        );
        assert!(
            rules(&[])
                .check(&submission("gh:1", Origin::Webhooks))
                .is_ok()
        );
    }

    #[test]
    fn event_types_follow_the_registry_rule() {
        assert!(EventType::new("a.b:c/d-e_f").is_ok());
        assert!(EventType::new("").is_err());
        assert!(EventType::new("a b").is_err());
        assert!(EventType::new("a".repeat(256)).is_err());
    }

    #[test]
    fn an_operator_event_makes_its_key_in_its_namespace() {
        let s = Submission {
            event_type: EventType::new("hookbox.destination.failing").unwrap(),
            key: None,
            payload: Payload::new("{}".into()),
            origin: Origin::Operator {
                about: "billing".into(),
            },
            trace: None,
        };
        let e = new_event(s);
        assert!(
            e.idempotency_key
                .starts_with("hookbox:hookbox.destination.failing:billing:"),
            "{}",
            e.idempotency_key
        );
        let n = e.idempotency_key.rsplit(':').next().unwrap_or_default();
        assert!(
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
            "{{n}} is a number: {}",
            e.idempotency_key
        );
        assert_eq!(n, e.id.as_u128().to_string());
        assert_eq!(e.source.as_deref(), Some(OPERATOR_SOURCE));
        // The payload's hash, computed independently: sha256("{}").
        assert_eq!(
            e.payload_sha256,
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
