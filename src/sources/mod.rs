//! Sources: webhooks as providers send them (`POST /ingest/{name}`).
//!
//! A source is one `*.toml` in `SOURCES_DIR` ([`manifest`]): a name, a kind
//! (`github`, `stripe`, `shopify`, `slack`, `standard-webhooks`, `hmac`, `token`,
//! `none`), the environment variable holding its secrets, and the prefix its event
//! types get. A request is verified (`verify/`) over its raw bytes first; only then is
//! the body parsed and identified (`identify.rs`): the provider's event type (prefixed)
//! and delivery id, whose `{name}:{id}` is the event's idempotency key.
//!
//! A pull source (`poll`, `websocket`: `pull/`) fetches its events instead, and
//! keeps a cursor committed beside them.

pub(crate) mod identify;
pub(crate) mod live;
pub mod manifest;
pub(crate) mod presets;
pub(crate) mod pull;
pub mod rejected;
pub(crate) mod verify;

use crate::config::Secret;
use identify::Locator;
use verify::Verifier;

/// One configured source: a push source (`POST /ingest/{name}`), or a pull source
/// when its `pull` spec is set.
#[derive(Clone)]
pub struct Source {
    /// Unique, `[A-Za-z0-9._-]`; the last segment of its URL.
    pub name: String,
    /// The manifest's `kind`, as written.
    pub kind: String,
    /// How requests are verified.
    pub(crate) verifier: Verifier,
    /// The secrets any of which verifies (empty for `none`).
    pub(crate) secrets: Vec<Secret>,
    /// The variable the secrets came from (shown; its value never is).
    pub(crate) secret_env: Option<String>,
    /// Prepended to the provider's event type.
    pub(crate) event_type_prefix: String,
    /// Where the provider's event type is.
    pub(crate) event_type: Locator,
    /// Where the provider's delivery id is.
    pub(crate) delivery_id: Locator,
    /// A pull source's settings (kinds `poll`, `websocket`); `None` for a push
    /// source.
    pub(crate) pull: Option<std::sync::Arc<pull::PullSpec>>,
    /// Where a batched body's events are (`split`), if the source splits.
    pub(crate) split: Option<Split>,
    /// Meta's verify token (`[meta] verify_token_env`), which its GET
    /// subscription challenge must carry.
    pub(crate) verify_token: Option<Secret>,
    /// Reshapes each verified event before it is committed (`transform`).
    pub(crate) transform: Option<std::sync::Arc<crate::transform::Transform>>,
    /// How long its terminal events are kept, when shorter than `RETENTION_DAYS`
    /// (`retention`).
    pub(crate) retention: Option<std::time::Duration>,
}

/// How a push source splits a batched body into events (`split`, `split_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    /// The JSON pointer to the array of events (`""` for the body itself).
    pub(crate) pointer: String,
    /// Each item's delivery id (a JSON pointer into the item); `None`: the SHA-256
    /// of the item.
    pub(crate) id: Option<String>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secret_env", &self.secret_env)
            .field("event_type_prefix", &self.event_type_prefix)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// The top-level body members its kind's sender writes afresh into every
    /// delivery (a signature block, a send time): left out of the payload's
    /// identity, so that a redelivery is a duplicate (200), not a reused key.
    pub(crate) fn volatile_members(&self) -> &'static [&'static str] {
        match self.kind.as_str() {
            "mailgun" => &["signature"],
            "linear" => &["webhookTimestamp"],
            _ => &[],
        }
    }

    /// The URL path a sender posts to.
    pub fn path(&self) -> String {
        format!("/ingest/{}", self.name)
    }

    /// The idempotency key of a delivery: `{name}:{delivery id}`.
    pub fn key(&self, delivery_id: &str) -> String {
        format!("{}:{delivery_id}", self.name)
    }
}

/// True for a valid source name: 1–100 of `[A-Za-z0-9._-]`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::manifest::load_str;

        let env = |name: &str| (name == "GH_SECRET").then(|| "s3cret".to_owned());
        let source = load_str(
            "gh.toml",
            "kind = \"github\"\nsecret_env = \"GH_SECRET\"\n",
            &env,
        )
        .unwrap();
        assert_eq!(source.name, "gh");
        assert_eq!(source.event_type_prefix, "gh.");
        assert_eq!(source.path(), "/ingest/gh");
    }
}
