//! `POST /ingest/{name}`: a provider's webhook as the provider sends it (docs/sources.md).
//!
//! In order: the source by name (404 `not_found`); the body, read whole up to
//! `MAX_BODY_BYTES` (413); the signature, verified over the raw bytes before
//! anything is parsed (401 `invalid_signature`, whose detail says which check
//! failed — never a secret); the payload, the body's JSON, a form body's fields (a
//! Slack interaction's `payload` field), or any other body kept whole with its
//! content type ([`identify::payload`]), as canonical text exactly as `POST /webhooks` keeps a payload ([`crate::json`]:
//! numbers as sent; 400 `invalid_body` when it does not parse or has a key twice); Slack's `url_verification`, answered with its challenge
//! and not stored; the event type where the kind finds it, prefixed (422
//! `invalid_event_type`); the delivery id, whose `{name}:{id}` is the idempotency
//! key (422 `invalid_idempotency_key` when the sender gave none or it is over 255
//! bytes). Then the event goes through [`Inbox::accept`](crate::inbox::Inbox::accept),
//! the one path in of `POST /webhooks` too, answered alike ([`intake::answer`]): 202 new, 200 a redelivery (its `received_count` grows), 422
//! `idempotency_key_reused` for a delivery id sent again with another body. The
//! route sits behind the same backpressure layer as `POST /webhooks` (429 before
//! the body is read, nothing stored).
//!
//! Every refusal of a known source's request (401, and 400/413/422) is counted
//! and kept in its rejected log ([`crate::sources::live`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::api::intake::{self, Intake};
use crate::api::problem::Problem;
use crate::inbox::{self, IdempotencyKey, Origin, Outcome, Payload, Submission};
use crate::json;
use crate::layers::idempotency;
use crate::model::Timestamp;
use crate::registry::kinds::shaped;
use crate::sources::identify;
use crate::sources::live::LiveSource;
use crate::sources::rejected::{self, Reason, Refusal};
use crate::sources::verify::{Incoming, Verifier};
use crate::store::EventSummary;

/// The handler.
#[utoipa::path(
    post,
    path = "/ingest/{name}",
    tag = "sources",
    description = "A provider's webhook as it sends it (GitHub, Stripe, Shopify, Slack, \
                   Standard Webhooks, HMAC, token), verified over the raw bytes by the \
                   source's kind before anything is stored (docs/sources.md).",
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = serde_json::Value, description = "The provider's own body: JSON, \
                 a form (`application/x-www-form-urlencoded`, stored as an object), or any \
                 other body (stored as `{content_type, body}` or `{content_type, body_base64}`)"),
    responses(
        (status = 202, description = "Verified and new: committed. A source that splits a \
                                       batched body (`split`) answers `{accepted, duplicates, events}`", body = EventSummary),
        (status = 200, description = "The same delivery again (its `received_count` grows), \
                                      or Slack's `{\"challenge\": …}`", body = EventSummary),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 401, description = "`invalid_signature`: nothing stored", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such source", content_type = "application/problem+json", body = Problem),
        (status = 413, description = "`payload_too_large`", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "`invalid_event_type`, `idempotency_key_reused`", content_type = "application/problem+json", body = Problem),
        (status = 429, description = "`overloaded`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn ingest(
    State(app): State<Intake>,
    Path(name): Path<String>,
    request: axum::extract::Request,
) -> Response {
    // A pull source fetches its events: nothing may be posted to it.
    let Some(source) = app
        .sources
        .get(&name)
        .filter(|s| s.source.pull.is_none())
        .cloned()
    else {
        return Problem::not_found("source").into_response();
    };
    let received_at = Timestamp::now();
    let (parts, body) = request.into_parts();
    let read = idempotency::buffer(
        &parts.headers,
        body,
        app.settings.max_body_bytes,
        intake::body_read_timeout(),
    );
    let (body, refused) = match read.await {
        Ok(body) => {
            let result = receive(&app, &source, &parts.headers, &body, received_at).await;
            match result {
                Ok(passed) => return passed.response,
                Err(refused) => (body, refused),
            }
        }
        Err(rejection) => {
            // A 5xx (the body budget spent) is hookbox's state, not the sender's
            // fault: not kept in the rejected log.
            let ours = rejection.status.is_server_error();
            let mut refused = Refused::unverified(Reason::Other, rejection.into());
            refused.logged = !ours;
            (Default::default(), refused)
        }
    };
    if refused.logged {
        let mut row = rejected::entry(
            &source.source,
            received_at,
            refused.refusal(),
            &parts.headers,
            &body,
            refused.verified,
        );
        row.delivery_id = delivery_of(&source.source, &parts.headers, &body);
        source.rejected(row).await;
    }
    refused.problem.into_response()
}

/// The sender's delivery id of a request, when it can be read (best effort: a
/// refused request's body may not parse): erasing an event finds the rejected
/// copies of its delivery by it.
fn delivery_of(s: &crate::sources::Source, headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let payload = identify::payload(headers, body).ok()?;
    s.delivery_id.read(headers, &payload, body)
}

/// A verified request's answer, with how many new events and redeliveries it
/// brought.
pub(crate) struct Passed {
    /// New events committed.
    pub accepted: u64,
    /// Redeliveries answered with the stored event.
    pub duplicates: u64,
    /// The event's id, for one event.
    pub event: Option<uuid::Uuid>,
    /// What the sender is answered.
    pub response: Response,
}

/// A refused request: why, what it is answered, and whether the rejected log
/// keeps it.
pub(crate) struct Refused {
    /// Why.
    pub reason: Reason,
    /// The answer.
    pub problem: Problem,
    /// Whether it passed verification (the log's quota it counts against).
    pub verified: bool,
    /// False when the refusal is not the sender's fault (shutting down).
    pub logged: bool,
}

impl Refused {
    fn unverified(reason: Reason, problem: Problem) -> Self {
        Self {
            reason,
            problem,
            verified: false,
            logged: true,
        }
    }

    fn verified(problem: Problem, logged: bool) -> Self {
        Self {
            reason: Reason::of_code(problem.code),
            problem,
            verified: true,
            logged,
        }
    }

    /// What the rejected log keeps of the answer.
    pub(crate) fn refusal(&self) -> Refusal<'_> {
        Refusal {
            reason: self.reason,
            status: self.problem.status,
            code: self.problem.code,
            detail: &self.problem.detail,
        }
    }
}

/// Verifies a request `source` received at `received_at` (its timestamp judged
/// against then) and ingests it: what `POST /ingest/{name}` does once the body is
/// read, and what a retry of a rejected request does again.
pub(crate) async fn receive(
    app: &Intake,
    source: &LiveSource,
    headers: &HeaderMap,
    body: &[u8],
    received_at: Timestamp,
) -> Result<Passed, Refused> {
    let incoming = Incoming {
        headers,
        body,
        now: received_at.millis().div_euclid(1000),
    };
    if let Err(rejection) = source
        .source
        .verifier
        .verify(&incoming, &source.source.secrets)
    {
        let problem = Problem::new(StatusCode::UNAUTHORIZED, "invalid_signature")
            .detail(rejection.to_string());
        return Err(Refused::unverified(Reason::of(&rejection), problem));
    }
    let answer = accept_verified(app, source, &incoming).await;
    if answer.is_err() {
        // Not accepted: what verifying remembered (a Mailgun token) is let go,
        // or the sender's retry would be refused as a replay.
        source.source.verifier.forget(&incoming);
    }
    answer
}

/// Identifies a verified request's events, reshapes and accepts them.
async fn accept_verified(
    app: &Intake,
    source: &LiveSource,
    incoming: &Incoming<'_>,
) -> Result<Passed, Refused> {
    let headers = incoming.headers;
    match identify_event(source, incoming).map_err(|p| Refused::verified(p, true))? {
        Identified::Handshake(answer) => Ok(Passed {
            accepted: 0,
            duplicates: 0,
            event: None,
            response: (StatusCode::OK, Json(answer)).into_response(),
        }),
        Identified::Batch(submissions) => {
            let mut reshaped = Vec::with_capacity(submissions.len());
            for submission in submissions {
                reshaped.push(reshape(source, headers, submission).await?);
            }
            accept_batch(app, source, reshaped).await
        }
        Identified::Event(submission) => {
            let submission = reshape(source, headers, *submission).await?;
            accept_one(app, source, submission).await
        }
    }
}

/// The source's transform (if any) applied to one verified event: it gets
/// `{event_type, payload, headers}` (credentials left out) and its answer's
/// `event_type` and `payload` are stored (422 `transform_failed` when it throws,
/// hits a limit or answers something else).
async fn reshape(
    source: &LiveSource,
    headers: &HeaderMap,
    mut submission: Submission,
) -> Result<Submission, Refused> {
    let Some(transform) = &source.source.transform else {
        return Ok(submission);
    };
    let failed = |why: String| {
        let problem = Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "transform_failed")
            .detail(format!("the source's transform failed: {why}"));
        Refused::verified(problem, true)
    };
    let before: Value = serde_json::from_str(submission.payload.text()).unwrap_or(Value::Null);
    let input = json!({
        "event_type": submission.event_type.as_str(),
        "payload": before,
        "headers": shown_headers(headers, &source.source.secrets),
    });
    let answer = shaped::run(transform.clone(), input)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let event_type = answer
        .get("event_type")
        .and_then(Value::as_str)
        .ok_or_else(|| failed("its answer has no event_type string".into()))?;
    submission.event_type = crate::inbox::EventType::new(event_type)
        .map_err(|why| failed(format!("event_type {event_type:?}: {why}")))?;
    let payload = answer
        .get("payload")
        .ok_or_else(|| failed("its answer has no payload".into()))?;
    // Unchanged as JavaScript sees it (`1.0` came back as `1`): the text as sent.
    if !shaped::same_in_js(&before, payload) {
        let text = serde_json::to_string(payload).map_err(|e| failed(e.to_string()))?;
        let canonical = json::canonical(&text).map_err(|e| failed(e.to_string()))?;
        let volatile = source.source.volatile_members();
        submission.payload = Payload::identified_without(canonical, volatile);
    }
    Ok(submission)
}

/// The request's headers for a transform: names in lower case, a repeated one's
/// values joined with `, `, credentials left out (`Authorization`, `Cookie`, and
/// any header holding one of the source's `secrets`, such as a token kind's).
fn shown_headers(headers: &HeaderMap, secrets: &[crate::config::Secret]) -> Value {
    let mut shown = serde_json::Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let secret = secrets
            .iter()
            .any(|s| !s.expose().is_empty() && value.contains(s.expose()));
        if secret
            || matches!(
                name.as_str(),
                "authorization" | "proxy-authorization" | "cookie"
            )
        {
            continue;
        }
        match shown.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => {
                shown.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    Value::Object(shown)
}

/// Commits one event: 202 new, 200 a redelivery, or the intake's refusal (kept in
/// the log when it is the sender's fault: not while shutting down).
async fn accept_one(
    app: &Intake,
    source: &LiveSource,
    submission: Submission,
) -> Result<Passed, Refused> {
    let outcome = app
        .inbox
        .accept(submission)
        .await
        .map_err(|e| Refused::verified(Problem::from(e), false))?;
    let (accepted, duplicates, event) = match &outcome {
        Outcome::Accepted(e) => {
            source.accepted();
            (1, 0, Some(e.id))
        }
        Outcome::Duplicate(e) => {
            source.duplicate();
            (0, 1, Some(e.id))
        }
        Outcome::KeyReused(_) | Outcome::Refused(_) => (0, 0, None),
    };
    let logged = !matches!(outcome, Outcome::Refused(inbox::Refusal::Draining));
    match intake::answer(outcome) {
        Ok(response) => Ok(Passed {
            accepted,
            duplicates,
            event,
            response,
        }),
        Err(problem) => Err(Refused::verified(problem, logged)),
    }
}

/// The handler of Meta's subscription check.
#[utoipa::path(
    get,
    path = "/ingest/{name}",
    tag = "sources",
    description = "Meta's webhook subscription check: the challenge echoed when the \
                   verify token is the source's `[meta] verify_token_env` value.",
    params(
        ("name" = String, Path, description = "The source's name (kind meta)"),
        ("hub.mode" = String, Query, description = "subscribe"),
        ("hub.verify_token" = String, Query, description = "The token given to Meta"),
        ("hub.challenge" = String, Query, description = "Echoed back"),
    ),
    responses(
        (status = 200, description = "The challenge, as text", body = String, content_type = "text/plain"),
        (status = 403, description = "`forbidden`: not subscribe, or another token", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no push source of that name", content_type = "application/problem+json", body = Problem),
        (status = 405, description = "`method_not_allowed`: a push source of another kind (POST only; `Allow: POST`)", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn subscription_check(
    State(app): State<Intake>,
    Path(name): Path<String>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    // A pull source takes no requests at all (404, as for a POST).
    let Some(source) = app.sources.get(&name).filter(|s| s.source.pull.is_none()) else {
        return Problem::not_found("source").into_response();
    };
    if source.source.kind != "meta" {
        // The source is there; only Meta's kind answers a GET.
        let mut answer = Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
            .detail("this source takes POST only (a GET is Meta's subscription check)")
            .into_response();
        answer
            .headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
        return answer;
    }
    // A meta source without `[meta] verify_token_env` confirms no subscription.
    let token = source.source.verify_token.clone();
    let given = query
        .get("hub.verify_token")
        .map(String::as_str)
        .unwrap_or_default();
    let subscribe = query.get("hub.mode").is_some_and(|m| m == "subscribe");
    let matches = token
        .as_ref()
        .is_some_and(|t| crate::sources::verify::same(given.as_bytes(), t.expose().as_bytes()));
    if !subscribe || !matches {
        return Problem::new(StatusCode::FORBIDDEN, "forbidden")
            .detail("hub.mode is not subscribe, or hub.verify_token is not this source's")
            .into_response();
    }
    let challenge = query.get("hub.challenge").cloned().unwrap_or_default();
    (
        [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        challenge,
    )
        .into_response()
}

/// Commits a batch's events in body order: 202 `{accepted, duplicates, events}`
/// (200 when none was new). An event refused stops the batch with its problem
/// (the ones before it stay committed: the sender's retry finds them duplicates).
async fn accept_batch(
    app: &Intake,
    source: &LiveSource,
    submissions: Vec<Submission>,
) -> Result<Passed, Refused> {
    let (mut accepted, mut duplicates) = (0u64, 0u64);
    let mut events = Vec::with_capacity(submissions.len());
    for submission in submissions {
        let passed = accept_one(app, source, submission).await?;
        accepted += passed.accepted;
        duplicates += passed.duplicates;
        events.extend(passed.event);
    }
    let status = if accepted > 0 {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let answer = json!({ "accepted": accepted, "duplicates": duplicates, "events": events });
    Ok(Passed {
        accepted,
        duplicates,
        event: None,
        response: (status, Json(answer)).into_response(),
    })
}

/// What a verified request is.
enum Identified {
    /// A provider's handshake (Slack's `url_verification`, Discord's PING, Zoom's
    /// `endpoint.url_validation`): answered with this, nothing stored.
    Handshake(Value),
    /// An event to commit (boxed: a submission is large beside the others).
    Event(Box<Submission>),
    /// A batched body's events (`split`), in body order.
    Batch(Vec<Submission>),
}

/// The payload, the prefixed event type and the key of a verified request (of
/// each of its events, for a source that splits a batched body).
fn identify_event(source: &LiveSource, incoming: &Incoming<'_>) -> Result<Identified, Problem> {
    let (headers, body) = (incoming.headers, incoming.body);
    let s = &source.source;
    let invalid = |e: identify::BodyError| Problem::invalid_body(e.to_string());
    let mut payload = identify::payload(headers, body).map_err(invalid)?;
    if s.kind == "slack" && identify::is_form(headers) {
        payload = identify::slack_interaction(payload).map_err(invalid)?;
    }
    if let Some(answer) = handshake(source, &payload, incoming) {
        return Ok(Identified::Handshake(answer));
    }
    if let Some(items) = s.split.as_ref().and_then(|split| batch(&payload, split)) {
        let id = match s.split.as_ref().and_then(|sp| sp.id.clone()) {
            Some(pointer) => identify::Locator::FirstOf(vec![
                identify::Locator::Pointer(pointer),
                identify::Locator::BodyHash,
            ]),
            None => identify::Locator::BodyHash,
        };
        return items
            .into_iter()
            .map(|item| {
                submission(
                    source,
                    headers,
                    item.get().to_owned(),
                    item.get().as_bytes(),
                    &id,
                )
            })
            .collect::<Result<_, _>>()
            .map(Identified::Batch);
    }
    submission(source, headers, payload, body, &s.delivery_id)
        .map(|s| Identified::Event(Box::new(s)))
}

/// The answer to a verified handshake, if `payload` (of `incoming`) is one
/// (docs/sources.md).
fn handshake(source: &LiveSource, payload: &str, incoming: &Incoming<'_>) -> Option<Value> {
    let s = &source.source;
    let at = |pointer: &str| json::pointer(payload, pointer);
    match &s.verifier {
        Verifier::Hmac(_) if s.kind == "slack" && at("/type") == Some("\"url_verification\"") => {
            let challenge = at("/challenge")
                .and_then(|c| serde_json::from_str(c).ok())
                .unwrap_or(Value::Null);
            Some(json!({ "challenge": challenge }))
        }
        Verifier::Discord { .. } if at("/type") == Some("1") => Some(json!({ "type": 1 })),
        Verifier::Hmac(_)
            if s.kind == "zoom" && at("/event") == Some("\"endpoint.url_validation\"") =>
        {
            let plain = at("/payload/plainToken").and_then(json::string_value)?;
            // Made with the secret that verified the request: mid-rotation the
            // sender signs with the new one, and an answer made with another
            // fails its validation (zoom's scheme remembers nothing: verifying
            // again has no effect beyond the answer).
            let secret = s
                .secrets
                .iter()
                .find(|secret| {
                    s.verifier
                        .verify(incoming, std::slice::from_ref(secret))
                        .is_ok()
                })
                .or(s.secrets.first())?;
            let mac = crate::sources::verify::mac(
                crate::sources::verify::Algorithm::Sha256,
                secret.expose().as_bytes(),
                &[plain.as_bytes()],
            );
            Some(json!({ "plainToken": plain, "encryptedToken": crate::model::hex(&mac) }))
        }
        _ => None,
    }
}

/// The items of a batched body: the array at the split's pointer (`None` when
/// the pointer finds no array: the body is one event).
fn batch<'p>(
    payload: &'p str,
    split: &crate::sources::Split,
) -> Option<Vec<&'p serde_json::value::RawValue>> {
    let array = json::pointer(payload, &split.pointer)?;
    serde_json::from_str(array).ok()
}

/// One event of a verified request: `payload` (canonical JSON), its type where
/// the source's kind finds it, its delivery id where `delivery_id` says.
fn submission(
    source: &LiveSource,
    headers: &HeaderMap,
    payload: String,
    raw: &[u8],
    delivery_id: &identify::Locator,
) -> Result<Submission, Problem> {
    let s = &source.source;
    let provider_type = s.event_type.read(headers, &payload, raw).ok_or_else(|| {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event_type").detail(format!(
            "no event type in {} (where a {} source finds it)",
            s.event_type.describe(),
            s.kind
        ))
    })?;
    let event_type = intake::checked_event_type(format!("{}{provider_type}", s.event_type_prefix))?;
    let delivery = delivery_id.read(headers, &payload, raw).ok_or_else(|| {
        intake::invalid_key(&format!(
            "no delivery id in {} (where a {} source finds it)",
            delivery_id.describe(),
            s.kind
        ))
    })?;
    let key = IdempotencyKey::new(s.key(&delivery)).map_err(|why| {
        intake::invalid_key(&format!(
            "{why} (the key is {{name}}:{{delivery id}}, the delivery id as the sender gave it)"
        ))
    })?;
    Ok(Submission {
        event_type,
        key: Some(key),
        payload: Payload::identified_without(payload, s.volatile_members()),
        origin: Origin::Source(s.name.clone()),
        trace: Some(intake::trace_of(headers)),
    })
}
