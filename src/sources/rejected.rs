//! What the rejected log keeps of a refused request, and how it is shown.
//!
//! A refused request ([`entry`]) is kept with its raw body and its headers, but
//! never a credential: `Authorization`, `Cookie` and the header a `token` or
//! `gitlab` source compares to its secret are kept as `[redacted]`, and so is any
//! header whose value holds one of the source's secrets. A request whose proof was
//! redacted, or whose body was not kept whole, cannot be verified again: it is not
//! `retryable`.
//!
//! A listing ([`RejectedRequest::shown`]) shows the first [`BODY_PREVIEW_BYTES`]
//! of each body as text, with any of the source's secrets masked *before* the cut,
//! so no fragment of one survives at the edge.
//!
//! ```
//! use hookbox::sources::rejected::Reason;
//!
//! assert_eq!(Reason::InvalidBody.as_str(), "invalid_body");
//! // The metric's label keeps SPEC §6's three values.
//! assert_eq!(Reason::InvalidBody.label(), "other");
//! ```

use http::HeaderMap;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Source;
use super::verify::{Rejection, Verifier};
use crate::config::Secret;
use crate::model::Timestamp;
use crate::store::rejected::{Class, RejectedRow};

/// How much of a rejected request's body a listing shows, in bytes.
pub const BODY_PREVIEW_BYTES: usize = 1024;
/// Read beyond the preview so that a secret crossing its edge is masked whole.
pub const MASK_MARGIN: usize = 256;
/// What a credential header's value is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// Why a request was refused: the log's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The signature (or token) is missing or matches no secret.
    Signature,
    /// The signed timestamp is outside the tolerance.
    Timestamp,
    /// A verified body that does not parse.
    InvalidBody,
    /// Anything else: a malformed signature header, no event type, a delivery id
    /// reused for another body, a body too large.
    Other,
}

impl Reason {
    /// As the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signature => "signature",
            Self::Timestamp => "timestamp",
            Self::InvalidBody => "invalid_body",
            Self::Other => "other",
        }
    }

    /// The `reason` label of `hookbox_source_rejected_total` (signature,
    /// timestamp, other).
    pub fn label(self) -> &'static str {
        match self {
            Self::InvalidBody => "other",
            other => other.as_str(),
        }
    }

    /// The reason of a verifier's rejection.
    pub fn of(rejection: &Rejection) -> Self {
        match rejection.reason() {
            "signature" => Self::Signature,
            "timestamp" => Self::Timestamp,
            _ => Self::Other,
        }
    }

    /// The reason of a refusal after verification, by its problem code.
    pub fn of_code(code: &str) -> Self {
        match code {
            "invalid_body" => Self::InvalidBody,
            _ => Self::Other,
        }
    }
}

/// What a refused request was answered, and why.
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'a> {
    /// Why.
    pub reason: Reason,
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
    /// Its id (`POST /sources/{name}/rejected/{id}/retry`).
    pub id: uuid::Uuid,
    /// When it arrived.
    pub received_at: Timestamp,
    /// `signature`, `timestamp`, `invalid_body` or `other`.
    pub reason: String,
    /// The answer's status (401, 400, 413, 422).
    pub status: u16,
    /// The answer's problem code.
    pub code: String,
    /// What was wrong (never a secret or a signature value).
    pub detail: String,
    /// Its headers, credentials `[redacted]` (a repeated header's values joined
    /// with `, `).
    pub headers: Map<String, Value>,
    /// The body's size in bytes.
    pub body_bytes: u64,
    /// Its first [`BODY_PREVIEW_BYTES`], as text (invalid UTF-8 replaced, secrets
    /// masked).
    pub body: String,
    /// Whether it can be verified again (false when its proof was redacted or its
    /// body not kept whole).
    pub retryable: bool,
}

impl RejectedRequest {
    /// How a listing shows `row` (whose body holds at least its first
    /// [`BODY_PREVIEW_BYTES`] + [`MASK_MARGIN`] bytes) of a source with `secrets`.
    pub fn shown(row: RejectedRow, secrets: &[Secret]) -> Self {
        let mut headers = Map::new();
        for (name, value) in row.headers {
            match headers.get_mut(&name) {
                Some(Value::String(joined)) => {
                    joined.push_str(", ");
                    joined.push_str(&value);
                }
                _ => {
                    headers.insert(name, Value::String(value));
                }
            }
        }
        Self {
            id: row.id,
            received_at: row.received_at,
            reason: row.reason,
            status: row.status,
            code: row.code,
            detail: row.detail,
            headers,
            body_bytes: row.body_bytes,
            body: preview(&row.body, secrets),
            retryable: row.retryable,
        }
    }
}

/// The first [`BODY_PREVIEW_BYTES`] of `body` as text, every secret masked first.
pub(crate) fn preview(body: &[u8], secrets: &[Secret]) -> String {
    let read = &body[..body.len().min(BODY_PREVIEW_BYTES + MASK_MARGIN)];
    let mut text = String::from_utf8_lossy(read).into_owned();
    for secret in secrets {
        let secret = secret.expose();
        if !secret.is_empty() && text.contains(secret) {
            text = text.replace(secret, "***");
        }
    }
    let mut cut = text.len().min(BODY_PREVIEW_BYTES);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

/// An entry's id: a UUID v7 of the millisecond the request arrived, so that the
/// log, listed by id, is newest first by `received_at` too (an id taken when the
/// entry is written would order requests that overlapped by when they ended).
/// Within one millisecond the entries this process writes keep their order: the
/// 74 bits after the version hold a 42-bit sequence number, then 32 random bits
/// (ids of several instances stay apart).
fn id_at(received_at: Timestamp) -> uuid::Uuid {
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let ms = u128::from(u64::try_from(received_at.millis()).unwrap_or(0)) & ((1 << 48) - 1);
    let seq =
        u128::from(SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) & ((1 << 42) - 1);
    let random = uuid::Uuid::new_v4().as_u128() & 0xFFFF_FFFF;
    let (rand_a, rand_b) = (seq >> 30, ((seq & ((1 << 30) - 1)) << 32) | random);
    uuid::Uuid::from_u128(ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b)
}

/// What the log keeps of a request `source` refused: `verified` says whether it
/// passed verification (its quota), `whole` whether `body` is all of it.
pub fn entry(
    source: &Source,
    received_at: Timestamp,
    refusal: Refusal<'_>,
    headers: &HeaderMap,
    body: &[u8],
    verified: bool,
) -> RejectedRow {
    let proof = proof_header(&source.verifier);
    let mut proof_redacted = false;
    let mut kept = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        let name = name.as_str();
        let redact = is_credential(name, proof) || holds_secret(&source.secrets, &value);
        if redact {
            proof_redacted |= proof.is_some_and(|p| p.eq_ignore_ascii_case(name));
        }
        let value = if redact {
            REDACTED.to_owned()
        } else {
            value.into_owned()
        };
        kept.push((name.to_owned(), value));
    }
    let whole = refusal.status != 413;
    RejectedRow {
        id: id_at(received_at),
        source: source.name.clone(),
        class: if verified {
            Class::Verified
        } else {
            Class::Unverified
        },
        received_at,
        reason: refusal.reason.as_str().to_owned(),
        status: refusal.status,
        code: refusal.code.to_owned(),
        detail: refusal.detail.to_owned(),
        headers: kept,
        body: if whole { body.to_vec() } else { Vec::new() },
        body_bytes: body.len() as u64,
        retryable: whole && !proof_redacted,
        delivery_id: None,
    }
}

/// The header a kind compares to a secret, if any: never kept.
fn proof_header(verifier: &Verifier) -> Option<&str> {
    match verifier {
        Verifier::Token(scheme) => Some(
            scheme
                .header
                .as_ref()
                .map_or("authorization", http::HeaderName::as_str),
        ),
        Verifier::Gitlab { .. } => Some("x-gitlab-token"),
        _ => None,
    }
}

/// Credentials never kept: `Authorization`, `Proxy-Authorization`, `Cookie`, and
/// the kind's `proof` header.
fn is_credential(name: &str, proof: Option<&str>) -> bool {
    const ALWAYS: &[&str] = &["authorization", "proxy-authorization", "cookie"];
    ALWAYS.iter().any(|h| h.eq_ignore_ascii_case(name))
        || proof.is_some_and(|p| p.eq_ignore_ascii_case(name))
}

fn holds_secret(secrets: &[Secret], value: &str) -> bool {
    secrets
        .iter()
        .any(|s| !s.expose().is_empty() && value.contains(s.expose()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::manifest::load_str;

    fn source(text: &str) -> Source {
        let env = |name: &str| (name == "S").then(|| "hunter2-secret".to_owned());
        load_str("src.toml", text, &env).expect("valid")
    }

    fn refusal() -> Refusal<'static> {
        Refusal {
            reason: Reason::Signature,
            status: 401,
            code: "invalid_signature",
            detail: "",
        }
    }

    /// Entries written in another order than their requests arrived still list
    /// (by id) newest first by `received_at`.
    #[test]
    fn an_entry_id_orders_as_its_arrival() {
        let s = source("kind = \"github\"\nsecret_env = \"S\"");
        let early = Timestamp(chrono::DateTime::from_timestamp_millis(1_700_000_000_001).unwrap());
        let late = Timestamp(chrono::DateTime::from_timestamp_millis(1_700_000_000_002).unwrap());
        let h = HeaderMap::new();
        let second = entry(&s, late, refusal(), &h, b"{}", false);
        let first = entry(&s, early, refusal(), &h, b"{}", false);
        assert!(first.id < second.id, "written later, arrived earlier");
        assert_eq!(first.id.get_version_num(), 7);
        assert_eq!(first.id.get_variant(), uuid::Variant::RFC4122);
        let (secs, nanos) = first.id.get_timestamp().expect("v7").to_unix();
        assert_eq!((secs, nanos), (1_700_000_000, 1_000_000));
        // Arrived in one millisecond: the order they were written in.
        let ids: Vec<_> = (0..100)
            .map(|_| entry(&s, early, refusal(), &h, b"{}", false).id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
    }

    #[test]
    fn credentials_are_redacted_and_signatures_kept_for_a_retry() {
        let s = source("kind = \"github\"\nsecret_env = \"S\"");
        let mut h = HeaderMap::new();
        h.insert("x-hub-signature-256", "sha256=ab".parse().unwrap());
        h.insert("authorization", "Basic abc".parse().unwrap());
        h.insert("x-forwarded", "a hunter2-secret b".parse().unwrap());
        h.append("x-trace", "a".parse().unwrap());
        h.append("x-trace", "b".parse().unwrap());
        let row = entry(&s, Timestamp::now(), refusal(), &h, b"{}", false);
        assert!(row.retryable, "the signature header is kept");
        assert_eq!(row.class, Class::Unverified);
        let shown = RejectedRequest::shown(row, &s.secrets);
        assert_eq!(shown.headers["x-hub-signature-256"], "sha256=ab");
        assert_eq!(shown.headers["authorization"], REDACTED);
        assert_eq!(shown.headers["x-forwarded"], REDACTED);
        assert_eq!(shown.headers["x-trace"], "a, b");
    }

    #[test]
    fn a_token_kinds_proof_is_redacted_and_the_entry_not_retryable() {
        let s = source("kind = \"token\"\nsecret_env = \"S\"\n[token]\nheader = \"X-Api-Key\"");
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "wrong".parse().unwrap());
        let row = entry(&s, Timestamp::now(), refusal(), &h, b"{}", false);
        assert!(!row.retryable);
        assert_eq!(row.headers, vec![("x-api-key".into(), REDACTED.into())]);
    }

    #[test]
    fn a_body_too_large_is_not_kept_nor_retryable() {
        let s = source("kind = \"none\"");
        let r = Refusal {
            reason: Reason::Other,
            status: 413,
            code: "payload_too_large",
            detail: "",
        };
        let row = entry(&s, Timestamp::now(), r, &HeaderMap::new(), b"", false);
        assert!(!row.retryable && row.body.is_empty());
    }

    #[test]
    fn the_preview_masks_a_secret_across_the_cut_and_stays_within_a_kilobyte() {
        let s = source("kind = \"github\"\nsecret_env = \"S\"");
        let mut body = "x".repeat(BODY_PREVIEW_BYTES - 4).into_bytes();
        body.extend_from_slice(b"hunter2-secret and more");
        let shown = preview(&body, &s.secrets);
        assert!(shown.ends_with("*** "), "{}", &shown[shown.len() - 10..]);
        assert!(!shown.contains("hunt"));
        let wide = "é".repeat(2000);
        assert!(preview(wide.as_bytes(), &[]).len() <= BODY_PREVIEW_BYTES);
    }
}
