//! `POST /webhooks`: validate, route, commit, enqueue, answer.
//!
//! Parsing happens once: the idempotency layer's store ([`EventsIdempotency`]) parses
//! the body to learn the key and fingerprint and leaves the [`Submission`] in the
//! request's extensions for [`intake`]. A retry of a key retried lately (its
//! second request on) is answered by that store from the store's recent keys,
//! without reaching the database's writer (docs/architecture.md, "Idempotency
//! keys"). The body goes straight to the payload's canonical text
//! ([`crate::json`]), with no tree of values: numbers are kept digit for digit, and
//! an object with a key twice is a 400 `invalid_body`.
//!
//! Besides the table of docs/api.md ("Intake"), in detail:
//!
//! | case | answer |
//! |---|---|
//! | the body has not fully arrived [`body_read_timeout`] (30 s) after the headers | 408 `request_timeout`, connection closed |
//! | an idempotency key (from the body) containing NUL | 422 `invalid_idempotency_key` |
//! | a routed handler's ordering value (its `ordering_key` pointer into the payload) is a string containing NUL | 422 `invalid_ordering_value` |
//!
//! NUL is refused because PostgreSQL cannot store it in text; SQLite could, but both
//! backends answer alike. The commit and the hand-off to processing go through
//! [`crate::inbox`], so they complete even when the client hangs up.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::BoxError;

use crate::api::problem::{Problem, ProblemCode};
use crate::inbox::{
    EventType, Fingerprint, IdempotencyKey, Inbox, Origin, Outcome, Payload, Refusal, Submission,
};
use crate::json;
use crate::layers::idempotency::{
    self, Begin, BoxFuture, CachedResponse, IdempotencyStore, Identity,
};
use crate::model::Timestamp;
use crate::sources::live::Sources;
use crate::state::{AppState, IntakeSettings};
use crate::store::{EventSummary, Store};
use crate::telemetry::names;

/// How long intake waits for a request's whole body before it answers 408
/// `request_timeout`: [`idempotency::BODY_READ_TIMEOUT`] (30 s), or the milliseconds
/// in `HOOKBOX_BODY_READ_TIMEOUT_MS` — not a documented setting: it is there so
/// that tests need not wait 30 s.
pub(crate) fn body_read_timeout() -> Duration {
    std::env::var("HOOKBOX_BODY_READ_TIMEOUT_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(idempotency::BODY_READ_TIMEOUT, Duration::from_millis)
}

/// Validates an intake request: content type, JSON shape, event type, key. The body
/// is read once, straight into the payload's canonical text (no tree of values).
pub(crate) fn parse(
    headers: &HeaderMap,
    body: &[u8],
    require_key: bool,
) -> Result<Submission, Problem> {
    check_content_type(headers)?;
    let not_json = |e: &dyn std::fmt::Display| {
        Problem::invalid_body(format!("the body is not valid JSON: {e}"))
    };
    let text = std::str::from_utf8(body).map_err(|e| not_json(&e))?;
    let members = json::canonical_members(text)
        .map_err(|e| not_json(&e))?
        .ok_or_else(|| Problem::invalid_body("the body must be a JSON object"))?;
    let (mut event_type, mut body_key, mut payload) = (None, None, None);
    for (name, value) in members {
        match name.as_str() {
            "event_type" => event_type = Some(value),
            "idempotency_key" => body_key = Some(value),
            "payload" => payload = Some(value),
            _ => {}
        }
    }
    let event_type = event_type
        .ok_or_else(|| Problem::invalid_body("event_type is required"))
        .and_then(|t| {
            json::string_value(&t)
                .ok_or_else(|| Problem::invalid_body("event_type must be a string"))
        })?;
    let event_type = checked_event_type(event_type)?;
    let key = idempotency_key(headers, body_key.as_deref())?;
    if require_key && key.is_none() {
        return Err(
            Problem::new(StatusCode::BAD_REQUEST, "missing_idempotency_key")
                .detail("an Idempotency-Key header is required (REQUIRE_IDEMPOTENCY_KEY)"),
        );
    }
    Ok(Submission {
        event_type,
        key,
        payload: Payload::new(payload.unwrap_or_else(|| "null".to_owned())),
        origin: Origin::Webhooks,
        trace: Some(trace_of(headers)),
    })
}

/// The request's W3C trace context: its `traceparent` (and `tracestate`) when
/// valid, else a new trace.
pub(crate) fn trace_of(headers: &HeaderMap) -> crate::trace_context::TraceContext {
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    crate::trace_context::TraceContext::accept(text(&TRACEPARENT), text(&TRACESTATE))
}

// The headers intake reads on every request, as names: looking one up by `&str`
// parses the name each time.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static X_IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("x-idempotency-key");

fn check_content_type(headers: &HeaderMap) -> Result<(), Problem> {
    if crate::guard::says_json(headers) {
        Ok(())
    } else {
        Err(
            Problem::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
                .detail("send the event as Content-Type: application/json"),
        )
    }
}

/// Refuses an event type that is empty, over 255 bytes or outside
/// `[A-Za-z0-9._:/-]`: 422 `invalid_event_type`.
pub(crate) fn checked_event_type(t: String) -> Result<EventType, Problem> {
    EventType::new(t).map_err(|detail| {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event_type").detail(detail)
    })
}

/// The key from the headers, else from the body's `idempotency_key` (its canonical
/// JSON text).
fn idempotency_key(
    headers: &HeaderMap,
    body_key: Option<&str>,
) -> Result<Option<IdempotencyKey>, Problem> {
    let from_header = headers
        .get(&IDEMPOTENCY_KEY)
        .or_else(|| headers.get(&X_IDEMPOTENCY_KEY))
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|_| invalid_key("the idempotency key must be visible ASCII"))
        })
        .transpose()?;
    let key = match (from_header, body_key) {
        (Some(k), _) => k,
        (None, None | Some("null")) => return Ok(None),
        (None, Some(text)) => json::string_value(text)
            .ok_or_else(|| Problem::invalid_body("idempotency_key must be a string"))?,
    };
    IdempotencyKey::new(key).map(Some).map_err(invalid_key)
}

/// 422 `invalid_idempotency_key`, saying why.
pub(crate) fn invalid_key(detail: &str) -> Problem {
    Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_idempotency_key").detail(detail)
}

/// The idempotency store of intake: the events table, with the store's recent keys
/// in front ([`Store::recent_key`]).
///
/// A retry of a key retried recently (its second request on) is answered here,
/// without a round trip to the database's writer: 200 with the event's current
/// status, or 422 `idempotency_key_reused` for another type or payload — what the
/// table would answer, after the same checks [`commit`] makes first (a request
/// those refuse, or one arriving while shutting down, goes on to the handler, which
/// answers it).
/// The retry is still counted in `received_count` ([`Store::count_retry`]). Any
/// other key goes on to [`intake`], where the table's UNIQUE key settles it.
pub(crate) struct EventsIdempotency {
    /// Where events live, and their recent keys.
    pub store: Arc<dyn Store>,
    /// What the handler checks before the table (and `REQUIRE_IDEMPOTENCY_KEY`).
    pub intake: Intake,
}

impl EventsIdempotency {
    /// The answer to a retry of a key retried lately, or `None` when the table
    /// must answer.
    async fn known(&self, parts: &http::request::Parts, key: &str, asked: &str) -> Option<Begin> {
        let parsed = parts.extensions.get::<Submission>()?;
        let stored = self.store.recent_key(key)?;
        if self.intake.inbox.refusal(parsed).is_some() {
            return None; // the handler answers it
        }
        if Fingerprint::of_event(&stored).as_str() != asked {
            metrics::counter!(names::IDEMPOTENCY_CACHE_HITS).increment(1);
            return Some(Begin::Mismatch);
        }
        // Counted before the answer; on failure the table answers (and counts).
        self.store
            .count_retry(stored.id, Timestamp::now())
            .await
            .ok()?;
        metrics::counter!(names::EVENTS_DUPLICATE).increment(1);
        metrics::counter!(names::IDEMPOTENCY_CACHE_HITS).increment(1);
        let res = accepted(StatusCode::OK, &stored);
        let mut headers = res.headers().clone();
        headers.remove(header::CONTENT_LENGTH);
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .ok()?;
        Some(Begin::Replay(CachedResponse {
            status: StatusCode::OK,
            headers,
            body,
        }))
    }
}

impl IdempotencyStore for EventsIdempotency {
    fn identify(&self, parts: &mut http::request::Parts, body: &Bytes) -> Identity {
        let require_key = self.intake.settings.require_idempotency_key;
        match parse(&parts.headers, body, require_key) {
            Err(problem) => Identity::Reject(problem.into()),
            Ok(parsed) => {
                let identity = match &parsed.key {
                    Some(key) => Identity::Keyed {
                        key: key.as_str().to_owned(),
                        fingerprint: parsed.fingerprint().as_str().to_owned(),
                    },
                    None => Identity::Anonymous,
                };
                parts.extensions.insert(parsed);
                identity
            }
        }
    }

    /// Answers a key retried lately from memory; any other key proceeds: the
    /// events table's UNIQUE key settles it inside the commit itself ([`intake`]
    /// answers 200 or 422 from what the insert found), which is race-free under
    /// any concurrency and spares every new event a read.
    fn begin<'a>(
        &'a self,
        parts: &'a http::request::Parts,
        key: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<Begin, BoxError>> {
        Box::pin(async move {
            Ok(self
                .known(parts, key, fingerprint)
                .await
                .unwrap_or(Begin::Proceed))
        })
    }

    fn finish(&self, _: String, _: String, _: Option<CachedResponse>) -> BoxFuture<'_, ()> {
        // The event row written by the handler is the record; nothing else to keep.
        Box::pin(std::future::ready(()))
    }

    /// The event row is the record: the layer need not copy each response.
    fn keeps_responses(&self) -> bool {
        false
    }
}

/// The 202/200 answer: the event's summary with `Location`.
fn accepted(status: StatusCode, event: &EventSummary) -> Response {
    let mut buffer = uuid::Uuid::encode_buffer();
    let id = event.id.hyphenated().encode_lower(&mut buffer);
    let json = HeaderValue::from_static("application/json");
    let mut res = (
        status,
        [(header::CONTENT_TYPE, json)],
        summary_json(event, id),
    )
        .into_response();
    if let Ok(location) = HeaderValue::from_str(&["/webhooks/", id].concat()) {
        res.headers_mut().insert(header::LOCATION, location);
    }
    res
}

/// The bytes of [`summary_json`] besides its key and type: 140 of names,
/// punctuation, id, longest status and time, 4 quotes, and room for a few escapes,
/// so that a summary is written without growing its buffer.
const SUMMARY_ROOM: usize = 160;

/// `event` as JSON, byte for byte what `serde_json` writes for it (its `Serialize`),
/// put together in one buffer: through `axum::Json` the answer cost about 4,700
/// instructions a request (a growing `BytesMut`, a write call per token, the id and
/// the time formatted through `core::fmt`). `id` is the event's id, hyphenated.
fn summary_json(event: &EventSummary, id: &str) -> Vec<u8> {
    let key = &event.idempotency_key;
    let mut out = Vec::with_capacity(SUMMARY_ROOM + key.len() + event.event_type.len());
    out.extend_from_slice(b"{\"id\":\"");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\",\"idempotency_key\":");
    json_string(&mut out, key);
    out.extend_from_slice(b",\"event_type\":");
    json_string(&mut out, &event.event_type);
    out.extend_from_slice(b",\"status\":\"");
    out.extend_from_slice(event.status.as_str().as_bytes());
    out.extend_from_slice(b"\",\"created_at\":\"");
    // RFC 3339 text: digits, `-`, `:`, `.`, `T`, `Z`, `+`: nothing to escape.
    out.extend_from_slice(event.created_at.to_rfc3339().as_bytes());
    out.extend_from_slice(b"\"}");
    out
}

/// Appends `text` as a JSON string, quoted and escaped by `serde_json`.
fn json_string(out: &mut Vec<u8>, text: &str) {
    // Writing a string into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// The answer to an outcome of [`Inbox::accept`]: 202 new (with `Location`), 200
/// the event that holds the key (`Idempotent-Replayed: true`), 422 the key with
/// another type or payload, or the refusal's problem.
pub(crate) fn answer(outcome: Outcome) -> Result<Response, Problem> {
    match outcome {
        Outcome::Accepted(event) => Ok(accepted(StatusCode::ACCEPTED, &event)),
        Outcome::Duplicate(event) => {
            metrics::counter!(names::EVENTS_DUPLICATE).increment(1);
            let mut res = accepted(StatusCode::OK, &event);
            res.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(res)
        }
        Outcome::KeyReused(_) => Err(idempotency::reused().into()),
        Outcome::Refused(refusal) => Err(refused(&refusal)),
    }
}

/// The problem a refusal answers with.
fn refused(refusal: &Refusal) -> Problem {
    let detail = refusal.to_string();
    match refusal {
        Refusal::Draining => Problem::unavailable(detail),
        Refusal::KeyOfSource { .. } => invalid_key(&detail),
        Refusal::OrderingValueNul { .. } => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_ordering_value").detail(detail)
        }
    }
}

/// Counts refused intake requests in `hookbox_events_rejected_total{reason}` by their
/// problem code (the outermost layer of the intake route, so 429s count too).
/// Generic over the body, so that it can sit on the layers beneath it unboxed.
pub(crate) async fn count_rejections<B>(res: http::Response<B>) -> http::Response<B> {
    if let Some(ProblemCode(code)) = res.extensions().get::<ProblemCode>() {
        metrics::counter!(names::EVENTS_REJECTED, "reason" => *code).increment(1);
    }
    res
}

/// What the intake routes (`POST /webhooks`, `POST /ingest/{name}`) use of the
/// app's state: a [`FromRef`] sub-state of [`AppState`].
#[derive(Clone)]
pub(crate) struct Intake {
    /// Admits, commits and hands the event to processing.
    pub inbox: Inbox,
    /// The push sources (`POST /ingest/{name}`).
    pub sources: Arc<Sources>,
    /// `REQUIRE_IDEMPOTENCY_KEY` and `MAX_BODY_BYTES`.
    pub settings: IntakeSettings,
}

impl FromRef<AppState> for Intake {
    fn from_ref(app: &AppState) -> Self {
        Self {
            inbox: app.inbox.clone(),
            sources: app.sources.clone(),
            settings: IntakeSettings::from_ref(app),
        }
    }
}

/// The body of `POST /webhooks`, as [`parse`] reads it (straight from the bytes, so
/// this type is the document's description of that shape).
#[derive(Debug, utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "only the OpenAPI document reads it: parse() reads the bytes"
)]
pub(crate) struct IntakeBody {
    /// What kind of event this is (1–255 bytes of `A-Z a-z 0-9 . _ : / -`);
    /// handlers route on it.
    pub event_type: String,
    /// Any JSON value (default `null`), stored as sent (object keys sorted).
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<serde_json::value::RawValue>>,
    /// Used when neither `Idempotency-Key` nor `X-Idempotency-Key` is sent.
    pub idempotency_key: Option<String>,
}

/// The intake handler (behind the backpressure and idempotency layers): parses,
/// then [`commit`]s.
///
/// It takes the [`Submission`] the idempotency layer left in the request's
/// extensions (moved out, not copied); without that layer in front it reads and
/// parses the body itself.
#[utoipa::path(
    post,
    path = "/webhooks",
    tag = "events",
    request_body(content = IntakeBody, content_type = "application/json"),
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Deduplicates retries (1–255 bytes)"),
        ("X-Idempotency-Key" = Option<String>, Header, description = "Read when `Idempotency-Key` is absent"),
    ),
    responses(
        (status = 202, description = "A new event, committed", body = EventSummary,
         headers(("Location" = String, description = "/webhooks/{id}"))),
        (status = 200, description = "A retry of the event holding this key: its current status", body = EventSummary),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 413, description = "`payload_too_large`: over `MAX_BODY_BYTES`", content_type = "application/problem+json", body = Problem),
        (status = 415, description = "`unsupported_media_type`: not JSON", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "`invalid_event_type`, `invalid_idempotency_key`, `idempotency_key_reused`", content_type = "application/problem+json", body = Problem),
        (status = 429, description = "`overloaded`: the queue is full; nothing stored",
         headers(("Retry-After" = u64, description = "Seconds")), content_type = "application/problem+json", body = Problem),
        (status = 503, description = "`unavailable`: shutting down or the database is away", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn intake(
    State(app): State<Intake>,
    request: axum::extract::Request,
) -> Result<Response, Problem> {
    let (mut parts, body) = request.into_parts();
    let parsed = match parts.extensions.remove::<Submission>() {
        Some(p) => {
            drop(body); // the raw bytes are not needed any more
            p
        }
        None => {
            let body = idempotency::buffer(
                &parts.headers,
                body,
                app.settings.max_body_bytes,
                body_read_timeout(),
            )
            .await?;
            parse(&parts.headers, &body, app.settings.require_idempotency_key)?
        }
    };
    commit(&app, parsed).await
}

/// Commits a validated event through [`Inbox::accept`] and [`answer`]s for it.
pub(crate) async fn commit(app: &Intake, submission: Submission) -> Result<Response, Problem> {
    let outcome = app.inbox.accept(submission).await?;
    answer(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;
    use proptest::prelude::*;

    proptest! {
        /// The answer's body is what `serde_json` writes for the summary, whatever
        /// its key and type hold (quotes, backslashes, control characters, any
        /// Unicode) and whatever its status and time.
        #[test]
        fn the_summary_is_serde_jsons_text(
            key in any::<String>(),
            event_type in any::<String>(),
            status in prop::sample::select(vec![
                Status::Pending, Status::Processing, Status::Completed, Status::Failed,
            ]),
            millis in 0i64..253_402_300_799_999,
            id in any::<u128>(),
        ) {
            let event = EventSummary {
                id: uuid::Uuid::from_u128(id),
                idempotency_key: key,
                event_type,
                status,
                created_at: Timestamp(
                    chrono::DateTime::from_timestamp_millis(millis).expect("in range"),
                ),
                payload_sha256: String::new(),
                received_count: 1,
            };
            let mut buffer = uuid::Uuid::encode_buffer();
            let hyphenated = event.id.hyphenated().encode_lower(&mut buffer).to_owned();
            prop_assert_eq!(
                String::from_utf8(summary_json(&event, &hyphenated)).expect("UTF-8"),
                serde_json::to_string(&event).expect("serializes")
            );
        }
    }

    /// A summary of plain text fits the buffer it starts with.
    #[test]
    fn the_summary_is_written_without_growing_its_buffer() {
        let event = EventSummary {
            id: uuid::Uuid::now_v7(),
            idempotency_key: "order-42-created".into(),
            event_type: "order.created".into(),
            status: Status::Processing,
            created_at: Timestamp::now(),
            payload_sha256: String::new(),
            received_count: 1,
        };
        let id = event.id.to_string();
        let out = summary_json(&event, &id);
        assert_eq!(out.capacity(), SUMMARY_ROOM + 16 + 13, "{}", out.len());
    }

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h
    }

    fn code(r: Result<Submission, Problem>) -> &'static str {
        r.expect_err("should be rejected").code
    }

    #[test]
    fn rejects_each_bad_shape_with_its_code() {
        let h = json_headers();
        assert_eq!(code(parse(&h, b"not json", false)), "invalid_body");
        assert_eq!(code(parse(&h, b"[1]", false)), "invalid_body");
        assert_eq!(code(parse(&h, b"{}", false)), "invalid_body");
        assert_eq!(
            code(parse(&h, br#"{"event_type": 5}"#, false)),
            "invalid_body"
        );
        assert_eq!(
            code(parse(&h, br#"{"event_type": ""}"#, false)),
            "invalid_event_type"
        );
        assert_eq!(
            code(parse(&h, br#"{"event_type": "a b"}"#, false)),
            "invalid_event_type"
        );
        let long = format!(r#"{{"event_type": "{}"}}"#, "a".repeat(256));
        assert_eq!(
            code(parse(&h, long.as_bytes(), false)),
            "invalid_event_type"
        );
        assert_eq!(
            code(parse(
                &h,
                br#"{"event_type": "a", "idempotency_key": ""}"#,
                false
            )),
            "invalid_idempotency_key"
        );
        assert_eq!(
            code(parse(&h, br#"{"event_type": "a"}"#, true)),
            "missing_idempotency_key"
        );
        assert_eq!(
            code(parse(&HeaderMap::new(), br#"{"event_type": "a"}"#, false)),
            "unsupported_media_type"
        );
    }

    #[test]
    fn header_key_wins_and_payload_is_canonical() {
        let mut h = json_headers();
        h.insert("x-idempotency-key", HeaderValue::from_static("hdr"));
        let p = parse(
            &h,
            br#"{"event_type":"a.b","idempotency_key":"body","payload":{"b":1,"a":2}}"#,
            false,
        )
        .expect("valid");
        assert_eq!(p.key.as_ref().map(IdempotencyKey::as_str), Some("hdr"));
        assert_eq!(p.payload.text(), r#"{"a":2,"b":1}"#);
        let q = parse(
            &h,
            br#"{"payload":{"a":2, "b":1},"event_type":"a.b"}"#,
            false,
        )
        .expect("valid");
        assert_eq!(p.fingerprint(), q.fingerprint());
    }

    #[test]
    fn accepts_json_suffix_media_types() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/cloudevents+json; charset=utf-8"),
        );
        assert!(parse(&h, br#"{"event_type":"a"}"#, false).is_ok());
    }
}
