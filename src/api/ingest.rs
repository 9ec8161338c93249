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
use crate::sources::identify;
use crate::sources::live::{LiveSource, Reason, Refusal};
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
    let refuse = |reason: Reason, problem: Problem, body: &[u8]| {
        let answer = Refusal {
            status: problem.status,
            code: problem.code,
            detail: &problem.detail,
        };
        let entry = source.entry(received_at, reason, answer, &parts.headers, body);
        source.rejected(entry);
        problem.into_response()
    };
    let read = idempotency::buffer(
        &parts.headers,
        body,
        app.settings.max_body_bytes,
        intake::body_read_timeout(),
    );
    let body = match read.await {
        Ok(body) => body,
        Err(rejection) => return refuse(Reason::Other, rejection.into(), b""),
    };
    let incoming = Incoming {
        headers: &parts.headers,
        body: &body,
        now: received_at.millis().div_euclid(1000),
    };
    if let Err(rejection) = source
        .source
        .verifier
        .verify(&incoming, &source.source.secrets)
    {
        let problem = Problem::new(StatusCode::UNAUTHORIZED, "invalid_signature")
            .detail(rejection.to_string());
        return refuse(Reason::of(&rejection), problem, &body);
    }
    match identify_event(&source, &parts.headers, &body) {
        Err(problem) => refuse(Reason::Other, problem, &body),
        Ok(Identified::Handshake(answer)) => (StatusCode::OK, Json(answer)).into_response(),
        Ok(Identified::Batch(submissions)) => {
            match accept_batch(&app, &source, submissions).await {
                Ok(res) => res,
                Err((problem, true)) => refuse(Reason::Other, problem, &body),
                Err((problem, false)) => problem.into_response(),
            }
        }
        Ok(Identified::Event(submission)) => {
            let outcome = match app.inbox.accept(submission).await {
                Ok(outcome) => outcome,
                Err(e) => return Problem::from(e).into_response(),
            };
            // What the sender sent wrong goes to the rejected log; shutting down
            // is not the sender's fault.
            let logged = match &outcome {
                Outcome::Accepted(_) => {
                    source.accepted();
                    false
                }
                Outcome::Duplicate(_) => {
                    source.duplicate();
                    false
                }
                Outcome::KeyReused(_) => true,
                Outcome::Refused(refusal) => *refusal != inbox::Refusal::Draining,
            };
            match intake::answer(outcome) {
                Ok(res) => res,
                Err(problem) if logged => refuse(Reason::Other, problem, &body),
                Err(problem) => problem.into_response(),
            }
        }
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
        (status = 404, description = "`not_found`: no meta source of that name", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn subscription_check(
    State(app): State<Intake>,
    Path(name): Path<String>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let Some(token) = app
        .sources
        .get(&name)
        .and_then(|s| s.source.verify_token.clone())
    else {
        return Problem::not_found("source").into_response();
    };
    let given = query
        .get("hub.verify_token")
        .map(String::as_str)
        .unwrap_or_default();
    let subscribe = query.get("hub.mode").is_some_and(|m| m == "subscribe");
    if !subscribe || !crate::sources::verify::same(given.as_bytes(), token.expose().as_bytes()) {
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
/// (the ones before it stay committed: the sender's retry finds them duplicates),
/// and whether it goes to the rejected log (the sender's fault, not a shutdown).
async fn accept_batch(
    app: &Intake,
    source: &LiveSource,
    submissions: Vec<Submission>,
) -> Result<Response, (Problem, bool)> {
    let (mut accepted, mut duplicates) = (0u64, 0u64);
    let mut events = Vec::with_capacity(submissions.len());
    for submission in submissions {
        match app
            .inbox
            .accept(submission)
            .await
            .map_err(|e| (Problem::from(e), false))?
        {
            Outcome::Accepted(event) => {
                source.accepted();
                accepted += 1;
                events.push(event.id);
            }
            Outcome::Duplicate(event) => {
                source.duplicate();
                metrics::counter!(crate::telemetry::names::EVENTS_DUPLICATE).increment(1);
                duplicates += 1;
                events.push(event.id);
            }
            refused => {
                let logged = !matches!(refused, Outcome::Refused(inbox::Refusal::Draining));
                return match intake::answer(refused) {
                    Err(problem) => Err((problem, logged)),
                    Ok(res) => Ok(res),
                };
            }
        }
    }
    let status = if accepted > 0 {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let answer = json!({ "accepted": accepted, "duplicates": duplicates, "events": events });
    Ok((status, Json(answer)).into_response())
}

/// What a verified request is.
enum Identified {
    /// A provider's handshake (Slack's `url_verification`, Discord's PING, Zoom's
    /// `endpoint.url_validation`): answered with this, nothing stored.
    Handshake(Value),
    /// An event to commit.
    Event(Submission),
    /// A batched body's events (`split`), in body order.
    Batch(Vec<Submission>),
}

/// The payload, the prefixed event type and the key of a verified request (of
/// each of its events, for a source that splits a batched body).
fn identify_event(
    source: &LiveSource,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Identified, Problem> {
    let s = &source.source;
    let invalid = |e: identify::BodyError| Problem::invalid_body(e.to_string());
    let mut payload = identify::payload(headers, body).map_err(invalid)?;
    if matches!(s.verifier, Verifier::Slack { .. }) && identify::is_form(headers) {
        payload = identify::slack_interaction(payload).map_err(invalid)?;
    }
    if let Some(answer) = handshake(source, &payload) {
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
    submission(source, headers, payload, body, &s.delivery_id).map(Identified::Event)
}

/// The answer to a verified handshake, if `payload` is one (docs/sources.md).
fn handshake(source: &LiveSource, payload: &str) -> Option<Value> {
    let s = &source.source;
    let at = |pointer: &str| json::pointer(payload, pointer);
    match &s.verifier {
        Verifier::Slack { .. } if at("/type") == Some("\"url_verification\"") => {
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
            let secret = s.secrets.first()?;
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
        payload: Payload::new(payload),
        origin: Origin::Source(s.name.clone()),
    })
}
