//! The routes: `POST /webhooks` (parse, queue for the writer, answer after its
//! commit) and `GET /ready`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use crate::writer::{Outcome, Pending, Queue, Row};

/// The body's members this server reads; any other member is ignored.
#[derive(Deserialize)]
struct Envelope<'a> {
    /// Required, a string.
    event_type: String,
    /// Optional, any JSON value, kept as sent.
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

/// The two routes, with the writer's queue as state.
pub(crate) fn router(queue: Queue) -> Router {
    Router::new()
        .route("/webhooks", post(post_webhook))
        .route("/ready", get(|| async { StatusCode::OK }))
        .with_state(queue)
}

/// `POST /webhooks`: 400 for a body that is not an event, else the writer's
/// outcome once its transaction has ended.
async fn post_webhook(State(queue): State<Queue>, headers: HeaderMap, body: Bytes) -> Response {
    let row = match parse(&headers, &body) {
        Ok(row) => row,
        Err(reason) => {
            return json(
                StatusCode::BAD_REQUEST,
                format!(r#"{{"error":"{reason}"}}"#),
            );
        }
    };
    let id = row.id.clone();
    let (reply, answer) = oneshot::channel();
    if queue.send(Pending { row, reply }).await.is_err() {
        return unavailable();
    }
    match answer.await {
        Ok(Outcome::Created) => json(StatusCode::ACCEPTED, status_body(&id, "pending")),
        Ok(Outcome::Duplicate(stored)) => json(StatusCode::OK, status_body(&stored, "duplicate")),
        Ok(Outcome::Failed) | Err(_) => unavailable(),
    }
}

/// The row for a request: a new UUID v7, the `Idempotency-Key` header (or the
/// id), the body's `event_type` and `payload`. The reason is a fixed text.
fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Row, &'static str> {
    // serde's derived struct also accepts an array of the members in order.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err("the body is not a JSON object");
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body)
        .map_err(|_| "the body is not a JSON object with a string event_type")?;
    let id = uuid::Uuid::now_v7().to_string();
    let key = match headers.get("idempotency-key").map(HeaderValue::to_str) {
        None => id.clone(),
        Some(Ok(key)) => key.to_owned(),
        Some(Err(_)) => return Err("the Idempotency-Key header is not ASCII text"),
    };
    let payload = envelope.payload.map_or("null", RawValue::get).to_owned();
    Ok(Row {
        id,
        key,
        event_type: envelope.event_type,
        payload,
    })
}

/// `{"id":"…","status":"…"}` (a UUID and a fixed word: nothing to escape).
fn status_body(id: &str, status: &str) -> String {
    format!(r#"{{"id":"{id}","status":"{status}"}}"#)
}

/// 503: the event was not stored.
fn unavailable() -> Response {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        r#"{"error":"not stored"}"#.to_owned(),
    )
}

/// A JSON response.
fn json(status: StatusCode, body: String) -> Response {
    let content_type = [(header::CONTENT_TYPE, "application/json")];
    (status, content_type, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_needs_an_object_with_a_string_event_type() {
        let headers = HeaderMap::new();
        let bad_bodies = [
            &b"not json"[..],
            br#"["a.b"]"#,
            b"{}",
            br#"{"event_type": 7}"#,
            b"{",
        ];
        for bad in bad_bodies {
            assert!(parse(&headers, bad).is_err(), "{bad:?}");
        }
        let row = parse(
            &headers,
            br#"{"event_type": "a.b", "payload": {"x": [1, 2]}}"#,
        )
        .unwrap();
        assert_eq!(row.event_type, "a.b");
        assert_eq!(row.payload, r#"{"x": [1, 2]}"#);
        assert_eq!(row.key, row.id);
    }

    #[test]
    fn the_key_comes_from_the_header_and_the_payload_defaults_to_null() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        let row = parse(&headers, br#"{"event_type": "a"}"#).unwrap();
        assert_eq!((row.key.as_str(), row.payload.as_str()), ("k-1", "null"));
    }
}
