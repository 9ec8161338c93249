//! `/subscribers`: http handlers registered at run time (docs/api.md and
//! docs/handlers.md, "Subscribers"), stored in the
//! database and effective at once. The secret is write-only: answers say only
//! whether one is set; a URL's embedded credentials (`https://user:pass@…`) are
//! kept for delivery but never shown.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Deserialize;

use crate::api::problem::Problem;
use crate::inbox::Inbox;
use crate::model::{Subscriber, Timestamp};
use crate::registry::kinds::http::display_url;
use crate::registry::live::{LiveRegistry, SubscriberError};
use crate::store::{Store, StoreError};

/// The body of `POST /subscribers`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Create {
    /// Unique among manifests and subscribers.
    name: String,
    /// Exact names or trailing-`*` prefixes.
    event_types: Vec<String>,
    /// Where deliveries go.
    url: String,
    /// `whsec_…` signing secret(s), space-separated (write-only).
    secret: Option<String>,
    /// JSON pointer into the payload: FIFO per value.
    ordering_key: Option<String>,
    /// Overrides `MAX_ATTEMPTS`.
    max_attempts: Option<u32>,
    /// Explicit backoff schedule (`["5s", "30s"]`).
    backoff: Option<Vec<String>>,
    /// Attempts running at once for this destination (default 8).
    max_in_flight: Option<u32>,
    /// Attempts started per second, minute or hour (`"50/s"`), spread evenly.
    rate_limit: Option<String>,
    /// Failing without a success for this long disables it (`"72h"`).
    disable_after: Option<String>,
    /// Only events matching this filter are delivered (docs/handlers.md).
    filter: Option<serde_json::Value>,
    /// JavaScript reshaping each attempt's request (docs/handlers.md).
    transform: Option<String>,
    /// Default true.
    active: Option<bool>,
}

/// The body of `PATCH /subscribers/{name}`: every field optional; `null` clears
/// the optional ones.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Patch {
    /// Replaces the patterns.
    event_types: Option<Vec<String>>,
    /// Replaces the URL.
    url: Option<String>,
    /// Replaces (or, with `null`, removes) the secret.
    #[serde(default, with = "double_option")]
    secret: Option<Option<String>>,
    /// Replaces or removes the ordering key.
    #[serde(default, with = "double_option")]
    ordering_key: Option<Option<String>>,
    /// Replaces or removes the attempts override.
    #[serde(default, with = "double_option")]
    max_attempts: Option<Option<u32>>,
    /// Replaces or removes the backoff schedule.
    #[serde(default, with = "double_option")]
    backoff: Option<Option<Vec<String>>>,
    /// Replaces or removes (default 8) the attempts at once.
    #[serde(default, with = "double_option")]
    max_in_flight: Option<Option<u32>>,
    /// Replaces or removes the rate limit.
    #[serde(default, with = "double_option")]
    rate_limit: Option<Option<String>>,
    /// Replaces or removes `disable_after`.
    #[serde(default, with = "double_option")]
    disable_after: Option<Option<String>>,
    /// Replaces or removes the filter.
    #[serde(default, with = "double_option")]
    filter: Option<Option<serde_json::Value>>,
    /// Replaces or removes the transform.
    #[serde(default, with = "double_option")]
    transform: Option<Option<String>>,
    /// Activates or deactivates it.
    active: Option<bool>,
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
mod double_option {
    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        T: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(body)
        .map_err(|e| Problem::invalid_body(format!("invalid subscriber: {e}")))
}

/// A subscriber as answers show it: no secret (only whether one is set), and its
/// URL without the user name and password it may embed (the stored URL keeps them,
/// for delivery).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct SubscriberView {
    /// The subscriber (its `secret` is never shown).
    #[serde(flatten)]
    pub subscriber: Subscriber,
    /// True when a signing secret is set.
    pub secret_set: bool,
}

/// The answer of `GET /subscribers`: a page of subscribers by name.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Subscribers {
    /// Subscribers, by name.
    pub items: Vec<SubscriberView>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

/// The page of subscribers after the name `after` (by name, in byte order whatever
/// the database's collation), at most `limit` long, and the cursor of the next
/// page; one page read, not every subscriber.
pub(crate) async fn page_of(
    store: &dyn Store,
    after: Option<&str>,
    limit: u32,
) -> Result<(Vec<Subscriber>, Option<String>), StoreError> {
    let mut page = store
        .subscribers_page(after, limit.saturating_add(1))
        .await?;
    let limit = limit as usize;
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|s| s.name.clone())
    });
    Ok((page, next.flatten()))
}

fn view(s: &Subscriber) -> SubscriberView {
    let mut shown = s.clone();
    if let Ok(url) = reqwest::Url::parse(&s.url) {
        shown.url = display_url(&url);
    }
    SubscriberView {
        secret_set: s.secret.as_deref().is_some_and(|x| !x.is_empty()),
        subscriber: shown,
    }
}

/// A subscriber's `filter` as stored: the JSON object, also when it was sent as
/// a string holding it (as a manifest may write it).
fn filter_object(filter: serde_json::Value) -> Result<serde_json::Value, Problem> {
    match filter {
        serde_json::Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_filter")
                .detail(format!("filter: not JSON: {e}"))
        }),
        other => Ok(other),
    }
}

fn rejected(e: &SubscriberError) -> Problem {
    let code = if e.forbidden_target {
        "forbidden_target"
    } else if e.field == "filter" {
        "invalid_filter"
    } else if e.field == "transform" {
        "invalid_transform"
    } else {
        "invalid_subscriber"
    };
    Problem::new(StatusCode::UNPROCESSABLE_ENTITY, code).detail(e.to_string())
}

/// Checks a subscriber before it is stored: no NUL byte in any text (PostgreSQL
/// refuses them, which would turn a typo into a 503 on every attempt), and a valid
/// route.
fn validate(registry: &LiveRegistry, s: &Subscriber) -> Result<(), Problem> {
    let texts = [
        Some(&s.name),
        Some(&s.url),
        s.secret.as_ref(),
        s.ordering_key.as_ref(),
        s.rate_limit.as_ref(),
        s.disable_after.as_ref(),
        s.transform.as_ref(),
    ]
    .into_iter()
    .flatten()
    .chain(&s.event_types)
    .chain(s.backoff.iter().flatten());
    if texts.into_iter().any(|t| t.contains('\0')) {
        return Err(
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_subscriber")
                .detail("a subscriber's fields may not contain a NUL byte"),
        );
    }
    registry.route_of(s).map(drop).map_err(|e| rejected(&e))
}

fn taken(name: &str) -> Problem {
    Problem::new(StatusCode::CONFLICT, "name_taken")
        .detail(format!("a handler or subscriber is already named {name:?}"))
}

/// Runs a change to the stored subscribers through the inbox, which reloads the
/// routing table after the commit even if the client hangs up.
async fn change<F>(
    inbox: &Inbox,
    name: &str,
    write: impl FnOnce(Arc<dyn Store>) -> F,
) -> Result<bool, Problem>
where
    F: Future<Output = Result<bool, StoreError>> + Send + 'static,
{
    inbox
        .change_subscribers(name, write)
        .await
        .map_err(Problem::from)
}

/// `POST /subscribers` → 201.
#[utoipa::path(
    post,
    path = "/subscribers",
    tag = "operating",
    request_body(content = Create, content_type = "application/json"),
    responses(
        (status = 201, description = "Stored; routes new events at once, on every instance", body = SubscriberView,
         headers(("Location" = String, description = "/subscribers/{name}"))),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 409, description = "`name_taken`", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "`invalid_subscriber`, `forbidden_target`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn create(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    body: Bytes,
) -> Result<Response, Problem> {
    let c: Create = parse(&body)?;
    let now = Timestamp::now();
    let s = Subscriber {
        name: c.name,
        event_types: c.event_types,
        url: c.url,
        secret: c.secret,
        ordering_key: c.ordering_key,
        max_attempts: c.max_attempts,
        backoff: c.backoff,
        max_in_flight: c.max_in_flight,
        rate_limit: c.rate_limit,
        disable_after: c.disable_after,
        filter: c.filter.map(filter_object).transpose()?,
        transform: c.transform,
        active: c.active.unwrap_or(true),
        created_at: now,
        updated_at: now,
    };
    validate(&registry, &s)?;
    if registry.is_manifest(&s.name) {
        return Err(taken(&s.name));
    }
    let stored = s.clone();
    if !change(&inbox, &s.name, |store| async move {
        store.insert_subscriber(stored).await
    })
    .await?
    {
        return Err(taken(&s.name));
    }
    let mut res = (StatusCode::CREATED, Json(view(&s))).into_response();
    if let Ok(loc) = http::HeaderValue::from_str(&format!("/subscribers/{}", s.name)) {
        res.headers_mut().insert(http::header::LOCATION, loc);
    }
    Ok(res)
}

/// `GET /subscribers`.
#[utoipa::path(
    get,
    path = "/subscribers",
    tag = "operating",
    params(
        ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 50)"),
        ("cursor" = Option<String>, Query, description = "The previous page's `next_cursor`"),
    ),
    responses(
        (status = 200, description = "A page of subscribers, by name", body = Subscribers),
        (status = 400, description = "`invalid_query`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn list(
    State(store): State<Arc<dyn Store>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, Problem> {
    let params = crate::api::status::given(params);
    let limit = crate::api::status::page_limit(&params)?;
    let cursor = params.get("cursor").map(String::as_str);
    let (page, next_cursor) = page_of(&*store, cursor, limit).await?;
    let items: Vec<_> = page.iter().map(view).collect();
    Ok(Json(Subscribers { items, next_cursor }).into_response())
}

async fn find(store: &dyn Store, name: &str) -> Result<Subscriber, Problem> {
    store
        .subscriber(name)
        .await?
        .ok_or_else(|| Problem::not_found("subscriber"))
}

/// `GET /subscribers/{name}`.
#[utoipa::path(
    get,
    path = "/subscribers/{name}",
    tag = "operating",
    params(("name" = String, Path, description = "The subscriber's name")),
    responses(
        (status = 200, description = "The subscriber", body = SubscriberView),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn read(
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> Result<Response, Problem> {
    Ok(Json(view(&find(&*store, &name).await?)).into_response())
}

/// `PATCH /subscribers/{name}`.
#[utoipa::path(
    patch,
    path = "/subscribers/{name}",
    tag = "operating",
    params(("name" = String, Path, description = "The subscriber's name")),
    request_body(content = Patch, content_type = "application/json"),
    responses(
        (status = 200, description = "The changed subscriber", body = SubscriberView),
        (status = 400, description = "`invalid_body`", content_type = "application/problem+json", body = Problem),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
        (status = 422, description = "`invalid_subscriber`, `forbidden_target`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn patch(
    State(inbox): State<Inbox>,
    State(registry): State<Arc<LiveRegistry>>,
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, Problem> {
    let p: Patch = parse(&body)?;
    let mut s = find(&*store, &name).await?;
    if let Some(v) = p.event_types {
        s.event_types = v;
    }
    if let Some(v) = p.url {
        s.url = v;
    }
    if let Some(v) = p.secret {
        s.secret = v;
    }
    if let Some(v) = p.ordering_key {
        s.ordering_key = v;
    }
    if let Some(v) = p.max_attempts {
        s.max_attempts = v;
    }
    if let Some(v) = p.backoff {
        s.backoff = v;
    }
    if let Some(v) = p.max_in_flight {
        s.max_in_flight = v;
    }
    if let Some(v) = p.rate_limit {
        s.rate_limit = v;
    }
    if let Some(v) = p.disable_after {
        s.disable_after = v;
    }
    if let Some(v) = p.filter {
        s.filter = v.map(filter_object).transpose()?;
    }
    if let Some(v) = p.transform {
        s.transform = v;
    }
    if let Some(v) = p.active {
        s.active = v;
    }
    s.updated_at = Timestamp::now();
    validate(&registry, &s)?;
    let stored = s.clone();
    if !change(&inbox, &s.name, |store| async move {
        store.update_subscriber(stored).await
    })
    .await?
    {
        return Err(Problem::not_found("subscriber"));
    }
    Ok(Json(view(&s)).into_response())
}

/// `DELETE /subscribers/{name}` → 204. Its unfinished deliveries dead-letter when
/// their turn comes ("no handler named …"); re-create it and replay them.
#[utoipa::path(
    delete,
    path = "/subscribers/{name}",
    tag = "operating",
    params(("name" = String, Path, description = "The subscriber's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`", content_type = "application/problem+json", body = Problem),
    )
)]
pub(crate) async fn delete(
    State(inbox): State<Inbox>,
    Path(name): Path<String>,
) -> Result<Response, Problem> {
    let deleted = name.clone();
    if !change(&inbox, &name, |store| async move {
        store.delete_subscriber(&deleted).await
    })
    .await?
    {
        return Err(Problem::not_found("subscriber"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
