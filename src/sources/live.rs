//! The sources of a running instance: each [`Source`] with its counters and its
//! log of rejected requests.
//!
//! Both are **per instance and in memory**: they count and keep what this process
//! saw since it started (several instances sharing PostgreSQL each have their own),
//! and a restart empties them. The rejected log keeps the newest
//! [`REJECTED_LOG_SIZE`] requests per source — when each arrived, why it was
//! refused, its headers without the secret-bearing ones ([`is_secret_header`]), its
//! size and the first [`BODY_PREVIEW_BYTES`] of its body — so an operator can see
//! why a sender's webhooks fail (a rotated secret, a clock off by minutes).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::HeaderMap;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Source;
use super::pull::status::{PullStatus, PullView};
use super::verify::{self, Verifier, github, shopify, slack, standard_webhooks, stripe};
use crate::model::Timestamp;
use crate::store::pull::{CursorRow, PullStore};
use crate::telemetry::names;

/// Rejected requests kept per source (the newest).
pub(crate) const REJECTED_LOG_SIZE: usize = 1000;
/// How much of a rejected request's body is kept, in bytes.
pub(crate) const BODY_PREVIEW_BYTES: usize = 1024;

/// Every configured source, by name.
#[derive(Default)]
pub struct Sources {
    all: Vec<Arc<LiveSource>>,
    by_name: HashMap<String, Arc<LiveSource>>,
    /// Where pull sources keep their cursors (set by the app).
    cursors: Option<Arc<dyn PullStore>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("all", &self.all)
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// The sources a manifest folder gave (names are unique there).
    pub fn new(sources: Vec<Source>) -> Self {
        let all: Vec<Arc<LiveSource>> = sources
            .into_iter()
            .map(|source| Arc::new(LiveSource::new(source)))
            .collect();
        let by_name = all
            .iter()
            .map(|s| (s.source.name.clone(), s.clone()))
            .collect();
        Self {
            all,
            by_name,
            cursors: None,
        }
    }

    /// With the store where pull sources keep their cursors.
    pub fn with_cursors(mut self, store: Arc<dyn PullStore>) -> Self {
        self.cursors = Some(store);
        self
    }

    /// The store where pull sources keep their cursors, if set.
    pub fn cursors(&self) -> Option<&Arc<dyn PullStore>> {
        self.cursors.as_ref()
    }

    /// The pull sources.
    pub fn pull(&self) -> impl Iterator<Item = &Arc<LiveSource>> {
        self.all.iter().filter(|s| s.source.pull.is_some())
    }

    /// The source of this name.
    pub fn get(&self, name: &str) -> Option<&Arc<LiveSource>> {
        self.by_name.get(name)
    }

    /// Every source, in manifest order.
    pub fn all(&self) -> &[Arc<LiveSource>] {
        &self.all
    }

    /// Every source's view, a pull source's with its committed cursor (one read
    /// of the cursors, when there is a pull source): what `GET /sources` and the
    /// console's Sources page show.
    pub async fn views(&self) -> Result<Vec<SourceView>, crate::store::StoreError> {
        let cursors = match self.cursors() {
            Some(store) if self.pull().next().is_some() => store.cursors().await?,
            _ => Default::default(),
        };
        Ok(self
            .all()
            .iter()
            .map(|s| s.view_with(cursors.get(&s.source.name)))
            .collect())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// One source and what this instance saw of it.
pub struct LiveSource {
    /// The manifest.
    pub source: Source,
    accepted: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
    /// Milliseconds since the epoch; 0 = never.
    last_accepted: AtomicI64,
    last_rejected: AtomicI64,
    log: Mutex<VecDeque<RejectedRequest>>,
    /// A pull source's adapter status; `None` for a push source.
    pub pull: Option<PullStatus>,
}

impl std::fmt::Debug for LiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSource")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why a request was refused: the `reason` label and log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The signature (or token) is missing or matches no secret.
    Signature,
    /// The signed timestamp is outside the tolerance.
    Timestamp,
    /// Anything else: a malformed signature header, a body that does not parse, no
    /// event type, a delivery id reused for another body, a body too large.
    Other,
}

impl Reason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signature => "signature",
            Self::Timestamp => "timestamp",
            Self::Other => "other",
        }
    }

    /// The reason of a verifier's rejection.
    pub fn of(rejection: &super::verify::Rejection) -> Self {
        match rejection.reason() {
            "signature" => Self::Signature,
            "timestamp" => Self::Timestamp,
            _ => Self::Other,
        }
    }
}

/// What a refused request was answered: the parts of its problem that the log
/// keeps (the HTTP layer builds it from its own problem type, so this module needs
/// none).
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'a> {
    /// The answer's status (401, 400, 413, 422).
    pub status: u16,
    /// The answer's problem code.
    pub code: &'static str,
    /// What was wrong (never a secret or a signature value).
    pub detail: &'a str,
}

/// One refused request, as `GET /sources/{name}/rejected` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RejectedRequest {
    /// When it arrived.
    pub received_at: Timestamp,
    /// `signature`, `timestamp` or `other`.
    pub reason: Reason,
    /// The answer's status (401, 400, 413, 422).
    pub status: u16,
    /// The answer's problem code.
    pub code: &'static str,
    /// What was wrong (never a secret or a signature value).
    pub detail: String,
    /// Its headers, without the secret-bearing ones (a repeated header's values
    /// joined with `, `).
    pub headers: Map<String, Value>,
    /// The body's size in bytes.
    pub body_bytes: usize,
    /// Its first [`BODY_PREVIEW_BYTES`], as text (invalid UTF-8 replaced).
    pub body: String,
}

/// A source's counters as `GET /sources` shows them (this instance, since start).
#[derive(Debug, Clone, Serialize)]
pub struct SourceView {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// The URL path senders post to (`null` for a pull source).
    pub path: Option<String>,
    /// Prepended to the provider's event types.
    pub event_type_prefix: String,
    /// New events accepted (202).
    pub accepted: u64,
    /// Redeliveries answered with the stored event (200).
    pub duplicates: u64,
    /// Requests refused (401, and 400/413/422 of verified ones).
    pub rejected: u64,
    /// The latest 202 or 200.
    pub last_accepted_at: Option<Timestamp>,
    /// The latest refusal.
    pub last_rejected_at: Option<Timestamp>,
    /// A pull source's URL, cursor, state, last error and lag.
    #[serde(flatten)]
    pub pull: Option<PullView>,
}

impl LiveSource {
    fn new(source: Source) -> Self {
        Self {
            pull: source.pull.as_ref().map(|_| PullStatus::new(&source.name)),
            source,
            accepted: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_accepted: AtomicI64::new(0),
            last_rejected: AtomicI64::new(0),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// Counts a new event (202).
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.last_accepted
            .store(Timestamp::now().millis(), Ordering::Relaxed);
        self.count("accepted");
    }

    /// Counts a redelivery answered 200.
    pub fn duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
        self.last_accepted
            .store(Timestamp::now().millis(), Ordering::Relaxed);
        self.count("duplicate");
    }

    fn count(&self, outcome: &'static str) {
        metrics::counter!(names::SOURCE_REQUESTS, "source" => self.source.name.clone(), "outcome" => outcome)
            .increment(1);
    }

    /// Counts a refused request and keeps it in the log (the oldest entry goes
    /// when the log is full).
    pub fn rejected(&self, request: RejectedRequest) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.last_rejected
            .store(request.received_at.millis(), Ordering::Relaxed);
        self.count("rejected");
        metrics::counter!(names::SOURCE_REJECTED, "source" => self.source.name.clone(), "reason" => request.reason.as_str())
            .increment(1);
        tracing::warn!(
            source = %self.source.name,
            reason = request.reason.as_str(),
            status = request.status,
            detail = %request.detail,
            "source request refused"
        );
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= REJECTED_LOG_SIZE {
            log.pop_front();
        }
        log.push_back(request);
    }

    /// The rejected log, newest first.
    pub fn rejected_log(&self) -> Vec<RejectedRequest> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().rev().cloned().collect()
    }

    /// The counters, and for a pull source its committed cursor `row`.
    pub fn view_with(&self, row: Option<&CursorRow>) -> SourceView {
        let at = |t: &AtomicI64| match t.load(Ordering::Relaxed) {
            0 => None,
            ms => chrono::DateTime::from_timestamp_millis(ms).map(Timestamp),
        };
        SourceView {
            name: self.source.name.clone(),
            kind: self.source.kind.clone(),
            path: self.source.pull.is_none().then(|| self.source.path()),
            event_type_prefix: self.source.event_type_prefix.clone(),
            accepted: self.accepted.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            last_accepted_at: at(&self.last_accepted),
            last_rejected_at: at(&self.last_rejected),
            pull: match (&self.pull, &self.source.pull) {
                (Some(status), Some(spec)) => Some(status.view(spec.shown_url(), row)),
                _ => None,
            },
        }
    }

    /// Counts a pulled item that could not be stored and keeps it in the rejected
    /// log (no headers: the adapter's own requests carry only its credentials).
    pub fn refused_item(&self, code: &'static str, detail: String, item: &str) {
        let mut preview = item.to_owned();
        if preview.len() > BODY_PREVIEW_BYTES {
            let mut cut = BODY_PREVIEW_BYTES;
            while !preview.is_char_boundary(cut) {
                cut -= 1;
            }
            preview.truncate(cut);
        }
        self.rejected(RejectedRequest {
            received_at: Timestamp::now(),
            reason: Reason::Other,
            status: 422,
            code,
            detail,
            headers: Map::new(),
            body_bytes: item.len(),
            body: preview,
        });
    }

    /// A log entry for a refused request (`answer`: what it was answered): its headers without the secret-bearing
    /// ones, and its body's first bytes (any of the source's secrets found in them
    /// is masked as well).
    pub fn entry(
        &self,
        received_at: Timestamp,
        reason: Reason,
        answer: Refusal<'_>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> RejectedRequest {
        let mut kept = Map::new();
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            if is_secret_header(&self.source.verifier, name.as_str()) || self.holds_secret(&value) {
                continue;
            }
            match kept.get_mut(name.as_str()) {
                Some(Value::String(joined)) => {
                    joined.push_str(", ");
                    joined.push_str(&value);
                }
                _ => {
                    kept.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
                }
            }
        }
        let mut preview =
            String::from_utf8_lossy(&body[..body.len().min(BODY_PREVIEW_BYTES)]).into_owned();
        for secret in &self.source.secrets {
            let secret = secret.expose();
            if !secret.is_empty() && preview.contains(secret) {
                preview = preview.replace(secret, "***");
            }
        }
        RejectedRequest {
            received_at,
            reason,
            status: answer.status,
            code: answer.code,
            detail: answer.detail.to_owned(),
            headers: kept,
            body_bytes: body.len(),
            body: preview,
        }
    }

    fn holds_secret(&self, value: &str) -> bool {
        self.source
            .secrets
            .iter()
            .any(|s| !s.expose().is_empty() && value.contains(s.expose()))
    }
}

/// Headers never kept in the rejected log: credentials (`Authorization`, `Cookie`,
/// …), the kind's signature headers, and any header whose name contains
/// `signature`, `token`, `secret`, `hmac` or `auth`.
pub(crate) fn is_secret_header(verifier: &Verifier, name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    const WORDS: &[&str] = &["signature", "token", "secret", "hmac", "auth", "cookie"];
    if WORDS.iter().any(|w| name.contains(w)) {
        return true;
    }
    let kind_header = match verifier {
        Verifier::Github => Some(github::SIGNATURE),
        Verifier::Stripe { .. } => Some(stripe::SIGNATURE),
        Verifier::Shopify => Some(shopify::SIGNATURE),
        Verifier::Slack { .. } => Some(slack::SIGNATURE),
        Verifier::StandardWebhooks { .. } => Some(standard_webhooks::SIGNATURE),
        Verifier::Hmac(scheme) => Some(scheme.header.as_str()),
        Verifier::Gitlab { .. } => Some("x-gitlab-token"),
        Verifier::Discord { .. } => Some(verify::discord::SIGNATURE),
        Verifier::Sendgrid { .. } => Some(verify::sendgrid::SIGNATURE),
        Verifier::Twilio { .. } => Some(verify::twilio::SIGNATURE),
        Verifier::Mailgun { .. } => None,
        Verifier::Token(scheme) => scheme.header.as_ref().map(http::HeaderName::as_str),
        Verifier::None => None,
    };
    kind_header.is_some_and(|h| h.eq_ignore_ascii_case(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::manifest::load_str;

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::live::Sources;
        use crate::sources::manifest::load_str;

        let env = |_: &str| None;
        let sources = Sources::new(vec![load_str("lan.toml", "kind = \"none\"", &env).unwrap()]);
        let lan = sources.get("lan").unwrap();
        lan.accepted();
        assert_eq!(lan.view_with(None).accepted, 1);
        assert!(sources.get("other").is_none());
    }

    fn source(text: &str) -> LiveSource {
        let env = |name: &str| (name == "S").then(|| "hunter2-secret".to_owned());
        LiveSource::new(load_str("src.toml", text, &env).expect("valid"))
    }

    #[test]
    fn the_log_keeps_the_newest_thousand_without_secret_headers() {
        let s = source("kind = \"token\"\nsecret_env = \"S\"\n[token]\nheader = \"X-Api-Key\"");
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "hunter2-secret".parse().unwrap());
        h.insert("authorization", "Basic abc".parse().unwrap());
        h.insert("x-custom-token", "t".parse().unwrap());
        h.insert("x-forwarded", "hunter2-secret".parse().unwrap());
        h.append("x-trace", "a".parse().unwrap());
        h.append("x-trace", "b".parse().unwrap());
        let problem = Refusal {
            status: 401,
            code: "invalid_signature",
            detail: "",
        };
        for i in 0..(REJECTED_LOG_SIZE + 5) {
            let body = format!("{{\"n\": {i}, \"leak\": \"hunter2-secret\"}}");
            let e = s.entry(
                Timestamp::now(),
                Reason::Signature,
                problem,
                &h,
                body.as_bytes(),
            );
            s.rejected(e);
        }
        let log = s.rejected_log();
        assert_eq!(log.len(), REJECTED_LOG_SIZE);
        assert!(log[0].body.starts_with("{\"n\": 1004"), "{}", log[0].body);
        let shown = serde_json::to_string(&log[0]).unwrap();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("Basic abc") && !shown.contains("x-custom-token"));
        assert_eq!(log[0].headers["x-trace"], "a, b");
        assert_eq!(s.view_with(None).rejected, (REJECTED_LOG_SIZE + 5) as u64);
    }

    #[test]
    fn the_body_preview_is_cut_at_one_kilobyte() {
        let s = source("kind = \"none\"");
        let problem = Refusal {
            status: 400,
            code: "invalid_body",
            detail: "x",
        };
        let body = "é".repeat(2000);
        let e = s.entry(
            Timestamp::now(),
            Reason::Other,
            problem,
            &HeaderMap::new(),
            body.as_bytes(),
        );
        assert_eq!(e.body_bytes, 4000);
        assert!(e.body.len() <= BODY_PREVIEW_BYTES + 3);
    }
}
