//! `kind = "http"`: delivers the event over HTTP, Standard Webhooks style.
//!
//! POSTs `{id, event_type, payload, created_at}` with `webhook-id` (the event id, the
//! same on every attempt), `webhook-timestamp`, `webhook-signature` (when secrets are
//! set) and `Content-Type: application/json`. The answer decides: 2xx done; 408, 429,
//! 5xx, 3xx, 410 (which disables the destination), a timeout or a connection error retry (a `Retry-After` in seconds or as
//! an HTTP date is honoured); any other 4xx dead-letters. `last_error` gets the status
//! and the first 1 KB of the answer's body, with the URL's credentials and the
//! signing secrets hidden should the receiver repeat them. Redirects are not
//! followed.
//!
//! The answer's status is also left on the attempt's [`Event`] for the worker
//! running it, for its row in the attempt history.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use super::super::{BoxHandler, Event, HandlerError, handler_fn};
use super::outbound::{Answer, Outbound};
use super::shaped::{self, Request, Shaped};
use crate::config::MAX_DURATION;
use crate::redact::Redactions;
use crate::signing::{self, Secret};
use crate::ssrf::{TargetError, TargetGuard};

/// How much of an answer's body is kept: in `last_error` for an error, in the
/// attempt history for every answer.
pub const ERROR_BODY_BYTES: usize = 1024;

/// How long a successful answer's body is waited for (for the attempt history):
/// a 2xx whose body never ends is still a success.
const SUCCESS_BODY_WAIT: Duration = Duration::from_millis(200);

/// Where and how one handler delivers.
#[derive(Clone)]
pub struct HttpTarget {
    /// The endpoint.
    pub url: Url,
    /// Signing secrets (empty: unsigned).
    pub secrets: Vec<Secret>,
    /// Reshapes each attempt's request first ([`super::shaped`]).
    pub transform: Option<Arc<crate::transform::Transform>>,
}

/// Builds the shared clients ([`Outbound`]): pooled keep-alive connections, no
/// redirects, a resolver that refuses forbidden addresses (see `TargetGuard`), and
/// no proxy: `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are ignored
/// (docs/handlers.md, "Outbound safety"), since a proxy would resolve and reach
/// the target itself, past the guard.
pub fn client(guard: Arc<TargetGuard>) -> Result<Outbound, reqwest::Error> {
    Outbound::new(guard)
}

/// A handler that delivers to `target` with `client`.
pub fn handler(client: Outbound, guard: Arc<TargetGuard>, target: HttpTarget) -> BoxHandler {
    let hidden = Arc::new(Redactions::of_url(&target.url).and(Redactions::new(
        target.secrets.iter().map(crate::signing::Secret::base64),
    )));
    // Parsed once: the URI an untransformed attempt goes to through hyper.
    let plain = Arc::new(Outbound::plain_uri(&target.url));
    let target = Arc::new(target);
    handler_fn(move |event: Event| {
        let (client, guard, target) = (client.clone(), guard.clone(), target.clone());
        let (hidden, plain) = (hidden.clone(), plain.clone());
        async move {
            let to = To {
                client: &client,
                guard: &guard,
                target: &target,
                plain: &plain,
            };
            deliver(to, &event, &hidden)
                .await
                .map_err(|e| hide(e, &hidden))
        }
    })
}

/// Where an attempt goes and through what.
#[derive(Clone, Copy)]
struct To<'a> {
    client: &'a Outbound,
    guard: &'a TargetGuard,
    target: &'a HttpTarget,
    /// The target's URL as hyper's URI, when it goes through hyper.
    plain: &'a Option<http::Uri>,
}

/// The error with every hidden value replaced.
fn hide(e: HandlerError, hidden: &Redactions) -> HandlerError {
    let clean = |m: String| match hidden.apply(&m) {
        std::borrow::Cow::Borrowed(_) => m,
        std::borrow::Cow::Owned(clean) => clean,
    };
    match e {
        HandlerError::Retry(m) => HandlerError::Retry(clean(m)),
        HandlerError::RetryAfter { after, message } => HandlerError::RetryAfter {
            after,
            message: clean(message),
        },
        HandlerError::Permanent(m) => HandlerError::Permanent(clean(m)),
    }
}

pub use super::shown::display_url;

/// The JSON body of a delivery (the payload is already canonical JSON text),
/// written into one buffer of its size.
pub fn body(event: &Event) -> String {
    let payload = event.payload();
    let created_at = event.created_at.to_rfc3339();
    let mut out = String::with_capacity(payload.len() + event.event_type.len() + 128);
    out.push_str(r#"{"id":""#);
    out.push_str(
        event
            .id
            .hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer()),
    );
    out.push_str(r#"","event_type":"#);
    crate::json::write_string(&mut out, &event.event_type);
    out.push_str(r#","payload":"#);
    out.push_str(payload);
    out.push_str(r#","created_at":""#);
    out.push_str(&created_at);
    out.push_str(r#""}"#);
    out
}

/// The Standard Webhooks headers, named once (a `&str` name is parsed again on
/// every request).
static WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
static WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
static WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

async fn deliver(to: To<'_>, event: &Event, hidden: &Redactions) -> Result<(), HandlerError> {
    let To { guard, target, .. } = to;
    guard.check_url(&target.url).map_err(|e| refused(&e))?;
    let body = body(event);
    let request = match &target.transform {
        None => Request {
            url: target.url.clone(),
            method: reqwest::Method::POST,
            headers: Vec::new(),
            body,
        },
        Some(transform) => match transformed(transform, guard, target, event, body).await? {
            Shaped::Cancelled => {
                event.cancelled();
                return Ok(());
            }
            Shaped::Send(request) => {
                event.sent(hidden.apply(&shaped::recorded(&request)).into_owned());
                request
            }
        },
    };
    let plain = if request.url == target.url {
        to.plain.clone()
    } else {
        Outbound::plain_uri(&request.url)
    };
    let Request {
        url,
        method,
        headers: shaped,
        body,
    } = request;
    let headers = headers(shaped, event, target, &body)
        .map_err(|e| HandlerError::Retry(format!("request failed: {e}")))?;
    let mut res = to
        .client
        .send(method, url, plain, headers, body)
        .await
        .map_err(|e| match guard_refusal(&*e) {
            Some(refusal) => refused(refusal),
            None => HandlerError::Retry(format!("request failed: {}", chain(&*e))),
        })?;
    let status = res.status();
    let retry_after = res.headers().get(RETRY_AFTER).and_then(parse_retry_after);
    let mut kept = Vec::new();
    if status.is_success() {
        // A success stays one even if its body never ends: wait only briefly.
        let _ = tokio::time::timeout(SUCCESS_BODY_WAIT, read_into(&mut res, &mut kept)).await;
    } else {
        read_into(&mut res, &mut kept).await;
    }
    let said = hidden.apply(&text(kept)).into_owned();
    let message = (!status.is_success()).then(|| format!("HTTP {}: {said}", status.as_u16()));
    event.answered(status.as_u16(), Some(said).filter(|s| !s.is_empty()));
    match message {
        None => Ok(()),
        Some(message) => Err(classify(status, retry_after, message)),
    }
}

/// An attempt's headers: the transform's (`shaped`), then the Standard Webhooks
/// ones, the trace context and the signature, in that order (appended: a name
/// the transform set is sent twice, as before). A value that cannot be a header
/// fails the attempt, as reqwest's builder did.
fn headers(
    shaped: Vec<(HeaderName, HeaderValue)>,
    event: &Event,
    target: &HttpTarget,
    body: &str,
) -> Result<HeaderMap, http::header::InvalidHeaderValue> {
    let mut headers = HeaderMap::with_capacity(shaped.len() + 6);
    for (name, value) in shaped {
        headers.append(name, value);
    }
    let id = event.id.to_string();
    let timestamp = unix_now();
    headers.append(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.append(&WEBHOOK_ID, HeaderValue::try_from(&id)?);
    headers.append(&WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
    if let Some(trace) = event.trace() {
        headers.append(&TRACEPARENT, HeaderValue::try_from(trace.traceparent())?);
        if let Some(state) = trace.tracestate() {
            headers.append(&TRACESTATE, HeaderValue::try_from(state)?);
        }
    }
    if !target.secrets.is_empty() {
        let signature = signing::sign(&target.secrets, &id, timestamp, body.as_bytes());
        headers.append(&WEBHOOK_SIGNATURE, HeaderValue::try_from(signature)?);
    }
    Ok(headers)
}

/// The request `target`'s transform makes of this attempt: a throw, a limit, a
/// malformed answer or a URL the guard refuses fails the delivery for good.
pub(crate) async fn transformed(
    transform: &Arc<crate::transform::Transform>,
    guard: &TargetGuard,
    target: &HttpTarget,
    event: &Event,
    body: String,
) -> Result<Shaped, HandlerError> {
    let failed = |why: String| HandlerError::Permanent(format!("transform failed: {why}"));
    let input = shaped::input(&event.event_type, &body, &target.url);
    let answer = shaped::run(transform.clone(), input)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let shaped = shaped::shape(&answer, &body, &target.url).map_err(failed)?;
    if let Shaped::Send(request) = &shaped {
        if request.url != target.url {
            guard
                .check_url(&request.url)
                .map_err(|e| failed(format!("its url is refused: {e}")))?;
        }
    }
    Ok(shaped)
}

/// The decision matrix for a non-2xx answer (docs/handlers.md, "http").
fn classify(status: StatusCode, retry_after: Option<Duration>, message: String) -> HandlerError {
    // 410 Gone is retried: it disables the destination (its lane), and nothing
    // is dropped while it is disabled.
    let retryable = status == StatusCode::GONE
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        || status.is_redirection();
    match (retryable, retry_after) {
        (false, _) => HandlerError::Permanent(message),
        (true, Some(after)) => HandlerError::RetryAfter { after, message },
        (true, None) => HandlerError::Retry(message),
    }
}

/// `Retry-After` as delta-seconds or an HTTP date (a past date is zero), capped at
/// [`MAX_DURATION`] (the retry policy caps it further).
pub fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    let after = if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        // All digits: too many of them is simply "very long".
        text.parse::<u64>()
            .map_or(MAX_DURATION, Duration::from_secs)
    } else {
        httpdate::parse_http_date(text)
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    };
    Some(after.min(MAX_DURATION))
}

/// Reads at most [`ERROR_BODY_BYTES`] of the answer into `kept` (never the whole
/// of a huge one): what the attempt history keeps of it.
async fn read_into(res: &mut Answer, kept: &mut Vec<u8>) {
    while kept.len() < ERROR_BODY_BYTES {
        match res.chunk().await {
            Some(chunk) => kept.extend_from_slice(&chunk),
            None => break,
        }
    }
}

/// The bytes kept of an answer as text (lossy), cut to [`ERROR_BODY_BYTES`].
fn text(mut kept: Vec<u8>) -> String {
    kept.truncate(ERROR_BODY_BYTES);
    String::from_utf8_lossy(&kept).into_owned()
}

/// A target the guard refused: retried like any failure (the operator may allow
/// it), and said at `warn`, with what to do, since it fails until someone acts.
fn refused(e: &TargetError) -> HandlerError {
    tracing::warn!(error = %e, "a delivery's target is refused by the address guard");
    HandlerError::Retry(e.to_string())
}

/// The guard's refusal, as a failed request's error or inside it (the guard
/// refused every address of the target's name, or its IP literal).
fn guard_refusal<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e TargetError> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(refusal) = s.downcast_ref::<TargetError>() {
            return Some(refusal);
        }
        source = s.source();
    }
    None
}

/// A failed request's error and its sources, `: `-separated (reqwest's without
/// its URL, which may carry credentials: see [`Outbound::send`]).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    mod envelope {
        use super::*;
        use crate::model::Timestamp;
        use proptest::prelude::*;

        proptest! {
            /// The body is the envelope serde_json makes of the same fields, byte for
            /// byte, whatever the event type holds (quotes, backslashes, controls,
            /// non-ASCII).
            #[test]
            fn the_body_is_the_envelope_serde_json_writes(event_type in "\\PC{0,24}|[\\x00-\\x7f]{0,24}") {
                let payload = r#"{"a":[1,"x\\"y"],"b":null}"#;
                let created = Timestamp::parse("2026-11-29T05:30:00.123Z").expect("time");
                let id = uuid::Uuid::now_v7();
                let event = Event::new(id, uuid::Uuid::now_v7(), "k".into(), event_type.clone(), payload.into(), created, 1);
                // The envelope as serde_json writes each member (the format before
                // the body was written into one buffer).
                let expected = format!(
                    r#"{{"id":"{id}","event_type":{},"payload":{payload},"created_at":"2026-11-29T05:30:00.123Z"}}"#,
                    serde_json::to_string(&event_type).expect("a string"),
                );
                prop_assert_eq!(body(&event), expected);
            }
        }
    }

    #[test]
    fn the_guards_refusal_is_found_as_the_error_or_inside_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapped(#[source] TargetError);
        let refusal = || TargetError::ForbiddenName("internal.example".into());
        let alone: Box<dyn std::error::Error + Send + Sync> = Box::new(refusal());
        let inside: Box<dyn std::error::Error + Send + Sync> = Box::new(Wrapped(refusal()));
        for e in [alone, inside] {
            assert!(
                matches!(guard_refusal(&*e), Some(TargetError::ForbiddenName(n)) if n == "internal.example"),
                "{e}"
            );
        }
        let other: Box<dyn std::error::Error + Send + Sync> = "connection refused".into();
        assert!(guard_refusal(&*other).is_none());
    }

    #[test]
    fn the_decision_matrix() {
        let permanent = |s: u16| {
            matches!(
                classify(
                    StatusCode::from_u16(s).expect("status"),
                    None,
                    String::new()
                ),
                HandlerError::Permanent(_)
            )
        };
        for s in [400, 401, 403, 404, 422] {
            assert!(permanent(s), "{s}");
        }
        for s in [408, 410, 429, 500, 502, 503, 504, 301] {
            assert!(!permanent(s), "{s}");
        }
        let e = classify(
            StatusCode::TOO_MANY_REQUESTS,
            Some(Duration::from_secs(1)),
            "x".into(),
        );
        assert_eq!(
            e,
            HandlerError::RetryAfter {
                after: Duration::from_secs(1),
                message: "x".into()
            }
        );
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("7")),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let d = parse_retry_after(&HeaderValue::from_str(&later).expect("header")).expect("date");
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(parse_retry_after(&HeaderValue::from_static("soon")), None);
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("99999999999999999999999")),
            Some(MAX_DURATION),
            "too many digits is long, not garbage"
        );
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO),
            "a past date means now"
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {

            #![proptest_config(crate::test_cases::cases(256))]
            /// Any header value: no panic, and never more than the cap.
            #[test]
            fn any_value_is_parsed_or_ignored_within_the_cap(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
                if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                    if let Some(d) = parse_retry_after(&value) {
                        prop_assert!(d <= MAX_DURATION);
                    }
                }
            }

            /// Delta-seconds are taken as they are, up to the cap.
            #[test]
            fn seconds_are_seconds_up_to_the_cap(secs in any::<u64>()) {
                let value = HeaderValue::from_str(&secs.to_string()).expect("digits");
                prop_assert_eq!(
                    parse_retry_after(&value),
                    Some(Duration::from_secs(secs).min(MAX_DURATION))
                );
            }

            /// An HTTP date `ahead` seconds from now waits about that long (the
            /// date has whole seconds, the clock moves), capped; a past one is zero.
            #[test]
            fn dates_wait_until_then(ahead in -1_000_000_000i64..5_000_000_000) {
                let now = SystemTime::now();
                let step = Duration::from_secs(ahead.unsigned_abs());
                let when = if ahead >= 0 { now + step } else { now - step };
                let value = HeaderValue::from_str(&httpdate::fmt_http_date(when)).expect("date");
                let d = parse_retry_after(&value).expect("an HTTP date parses");
                let expected = Duration::from_secs(u64::try_from(ahead).unwrap_or(0)).min(MAX_DURATION);
                prop_assert!(d <= expected, "{:?} > {:?}", d, expected);
                prop_assert!(
                    d + Duration::from_secs(2) >= expected,
                    "{:?} much shorter than {:?}", d, expected
                );
            }
        }
    }
}
