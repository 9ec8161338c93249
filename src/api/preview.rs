//! `POST /destinations/{name}/test` (admin): what a destination would be sent for
//! an event — routed? filtered out? what does its transform make of it? — without
//! sending anything (SPEC §12; docs/handlers.md, "Trying a filter or transform").
//!
//! The body names a stored event (`{"event_id": …}`) or gives one
//! (`{"event_type": …, "payload": …}`, optionally `"source"`). The answer is
//! `{matched, request, cancelled, error}`: `matched` when the destination's
//! patterns route the type and its filter matches; `request` (`url`, `method`,
//! `headers`, `payload`) only when matched, not cancelled and without error —
//! the headers are the transform's plus `content-type`; hookbox adds `webhook-id`,
//! `webhook-timestamp` and `webhook-signature` when it really sends.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::problem::Problem;
use crate::model::Timestamp;
use crate::registry::kinds::http::{self, display_url};
use crate::registry::kinds::shaped::{self, Shaped};
use crate::registry::live::LiveRegistry;
use crate::registry::{Event, Route, filter};
use crate::ssrf::TargetGuard;
use crate::store::Store;

/// The body: a stored event, or one given here.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Try {
    /// A stored event's id.
    event_id: Option<uuid::Uuid>,
    /// Else: the event's type…
    event_type: Option<String>,
    /// …its payload…
    payload: Option<Value>,
    /// …and the source it came from (null: `POST /webhooks`).
    source: Option<String>,
}

/// What the destination would be sent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Preview {
    /// Routed by its patterns and matched by its filter.
    pub matched: bool,
    /// `{url, method, headers, payload}`: what would be sent.
    pub request: Option<Value>,
    /// Its transform cancelled the delivery.
    pub cancelled: bool,
    /// Its transform failed (threw, hit a limit, answered something else).
    pub error: Option<String>,
}

/// An event to try.
struct Sample {
    id: uuid::Uuid,
    event_type: String,
    source: Option<String>,
    payload: String,
    created_at: Timestamp,
}

/// The handler.
#[utoipa::path(
    post,
    path = "/destinations/{name}/test",
    tag = "operating",
    params(("name" = String, Path, description = "The destination's (handler's) name")),
    request_body(content = Try, description = "`{\"event_id\": …}` or `{\"event_type\": …, \"payload\": …}`"),
    responses(
        (status = 200, description = "What would be sent; nothing is", body = Preview),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`: no such destination or event", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn test(
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Preview>, Problem> {
    let table = registry.current();
    let route = table
        .get(&name)
        .ok_or_else(|| Problem::not_found("destination"))?;
    let tried: Try = serde_json::from_slice(&body).map_err(|e| {
        Problem::invalid_body(format!(
            "expected {{\"event_id\"}} or {{\"event_type\", \"payload\"}}: {e}"
        ))
    })?;
    let sample = sample(&*store, tried).await?;
    Ok(Json(preview(route, registry.guard(), &sample).await))
}

async fn sample(store: &dyn Store, tried: Try) -> Result<Sample, Problem> {
    if let Some(id) = tried.event_id {
        let (event, payload) =
            tokio::try_join!(store.event(id), store.payload(id)).map_err(Problem::from)?;
        let event = event.ok_or_else(|| Problem::not_found("event"))?;
        return Ok(Sample {
            id,
            event_type: event.event_type,
            source: event.source,
            payload: payload.unwrap_or_else(|| "null".into()),
            created_at: event.created_at,
        });
    }
    let event_type = tried
        .event_type
        .ok_or_else(|| Problem::invalid_body("give event_id, or event_type and payload"))?;
    crate::inbox::EventType::new(event_type.as_str()).map_err(Problem::invalid_body)?;
    Ok(Sample {
        id: uuid::Uuid::now_v7(),
        event_type,
        source: tried.source,
        payload: tried.payload.unwrap_or(Value::Null).to_string(),
        created_at: Timestamp::now(),
    })
}

/// What `route` would be sent for `sample`; a transform's URL passes `guard` as a
/// delivery's would.
async fn preview(route: &Route, guard: &TargetGuard, sample: &Sample) -> Preview {
    let mut answer = Preview {
        matched: false,
        request: None,
        cancelled: false,
        error: None,
    };
    // Routed: an inactive subscriber gets no new deliveries (SPEC §4).
    answer.matched = route.matches(&sample.event_type)
        && route.filter.as_ref().is_none_or(|f| {
            f.matches(&filter::document(
                &sample.event_type,
                sample.source.as_deref(),
                &sample.payload,
            ))
        });
    if !answer.matched {
        return answer;
    }
    let event = Event::new(
        sample.id,
        uuid::Uuid::nil(),
        String::new(),
        sample.event_type.clone(),
        Arc::from(sample.payload.as_str()),
        sample.created_at,
        1,
    );
    let body = http::body(&event);
    let Some(target) = &route.http else {
        // exec, log, Rust: the event as they get it.
        answer.request =
            Some(json!({"url": null, "method": null, "headers": {}, "payload": parsed(&body)}));
        return answer;
    };
    let shaped = match &target.transform {
        None => Ok(Shaped::Send(shaped::Request {
            url: target.url.clone(),
            method: reqwest::Method::POST,
            headers: Vec::new(),
            body,
        })),
        // As a delivery runs it: a throw, a limit, a malformed answer or a URL
        // the guard refuses is the error the attempt would fail with.
        Some(transform) => http::transformed(transform, guard, target, &event, body)
            .await
            .map_err(|e| e.to_string()),
    };
    match shaped {
        Err(e) => answer.error = Some(e),
        Ok(Shaped::Cancelled) => answer.cancelled = true,
        Ok(Shaped::Send(r)) => {
            let mut headers = serde_json::Map::new();
            for (name, value) in &r.headers {
                headers.insert(
                    name.to_string(),
                    Value::String(String::from_utf8_lossy(value.as_bytes()).into_owned()),
                );
            }
            headers.insert("content-type".into(), "application/json".into());
            answer.request = Some(json!({
                "url": display_url(&r.url),
                "method": r.method.as_str(),
                "headers": headers,
                "payload": parsed(&r.body),
            }));
        }
    }
    answer
}

fn parsed(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or(Value::Null)
}
