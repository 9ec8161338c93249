//! `/console/subscribers`: the http handlers registered at run time — list,
//! create, edit, deactivate (or activate), delete — and the manifests' handlers,
//! read only. Changes go through the admin API in-process (`POST /subscribers`,
//! `PATCH` and `DELETE /subscribers/{name}`), so they are validated and refused
//! exactly as there, and the problem's detail is shown.

use axum::Form;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::{Method, StatusCode, header};
use maud::html;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{done, given, render};
use crate::console::csrf::{Fields, field};
use crate::console::layout::{Nav, csrf, empty};
use crate::console::{Console, Visitor};
use crate::registry::kinds::http::display_url;

/// Calls the admin API in-process; the answer's status and JSON body.
pub(crate) async fn call_api(
    console: &Console,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), String> {
    // In-process: the console's own request passed the guard's origin and host
    // checks already.
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost");
    if let Some(token) = console.app.admin_token.secret() {
        req = req.header(header::AUTHORIZATION, format!("Bearer {}", token.expose()));
    }
    let req = match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .map_err(|e| e.to_string())?;
    let res = console
        .api
        .clone()
        .oneshot(req)
        .await
        .map_err(|e| e.to_string())?;
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// `/subscribers/{name}` with the name percent-encoded as one path segment.
fn api_path(name: &str) -> String {
    format!("/subscribers/{}", super::segment(name))
}

/// The detail of a problem answer, or a generic line.
pub(crate) fn detail(status: StatusCode, body: &Value) -> String {
    body["detail"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("the API answered {status}"))
}

/// Splits a list typed into one field: commas and whitespace separate items.
pub(crate) fn items(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Subscribers on one page of the console.
const PAGE: u32 = 100;

/// `GET /console/subscribers` (`?cursor=`: the page after that name).
pub(crate) async fn list(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Query(params): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let after = params.get("cursor").map(String::as_str);
    let page = crate::api::subscribers::page_of(&*console.app.store, after, PAGE).await;
    let (subscribers, next) = match page {
        Ok(page) => page,
        Err(e) => {
            let why = format!("the database did not answer: {e}");
            return super::problem(
                &console,
                &s,
                Nav::Subscribers,
                StatusCode::SERVICE_UNAVAILABLE,
                &why,
            );
        }
    };
    let registry = console.app.registry.current();
    let manifests: Vec<_> = registry
        .routes()
        .iter()
        .filter(|r| console.app.registry.is_manifest(&r.name))
        .collect();
    let body = html! {
        h1 { "Subscribers" }
        @if subscribers.is_empty() && after.is_none() {
            (empty("No subscribers yet: create one below, or with POST /subscribers."))
        }
        div.grid {
            @for sub in &subscribers {
                article.card.subscriber id={ "subscriber-" (sub.name) } {
                    header {
                        strong { (sub.name) }
                        @if sub.active { span.badge.completed { "active" } }
                        @else { span.badge.pending { "inactive" } }
                    }
                    dl.facts {
                        dt { "URL" }
                        dd { code { (reqwest::Url::parse(&sub.url).map(|u| display_url(&u)).unwrap_or_default()) } }
                        dt { "Event types" } dd { code { (sub.event_types.join(", ")) } }
                        dt { "Signing" } dd { (if sub.secret.as_deref().is_some_and(|x| !x.is_empty()) { "secret set" } else { "unsigned" }) }
                        @if let Some(k) = &sub.ordering_key { dt { "Ordering key" } dd { code { (k) } } }
                        @if let Some(n) = sub.max_attempts { dt { "Max attempts" } dd { (n) } }
                        @if let Some(b) = &sub.backoff { dt { "Backoff" } dd { (b.join(", ")) } }
                        @if let Some(n) = sub.max_in_flight { dt { "Max in flight" } dd { (n) } }
                        @if let Some(r) = &sub.rate_limit { dt { "Rate limit" } dd { code { (r) } } }
                        @if let Some(d) = &sub.disable_after { dt { "Disable after" } dd { (d) } }
                    }
                    (edit_form(&s, sub))
                    div.actions {
                        form.inline method="post" action={ "/console/subscribers/" (super::segment(&sub.name)) "/active" } {
                            (csrf(&s))
                            input type="hidden" name="active" value=(if sub.active { "false" } else { "true" });
                            button type="submit" { (if sub.active { "Deactivate" } else { "Activate" }) }
                        }
                        form.inline method="post" action={ "/console/subscribers/" (super::segment(&sub.name)) "/delete" } {
                            (csrf(&s))
                            button.danger type="submit" { "Delete" }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &next {
            nav.pager {
                a href={ "/console/subscribers?cursor=" (super::segment(next)) } rel="next" { "Next " (PAGE) " →" }
            }
        }
        section.card {
            h2 { "New subscriber" }
            form.stack #new-subscriber method="post" action="/console/subscribers" {
                (csrf(&s))
                label { "Name" input name="name" required placeholder="billing-sync"; }
                label { "Event types" input name="event_types" required placeholder="order.*, invoice.paid"; }
                label { "URL" input name="url" type="url" required placeholder="https://billing.example.com/hooks"; }
                label { "Secret (optional, whsec_…)" input name="secret" type="password" autocomplete="off"; }
                label { "Ordering key (optional JSON pointer)" input name="ordering_key" placeholder="/customer_id"; }
                label { "Max attempts (optional)" input name="max_attempts" type="number" min="1"; }
                label { "Backoff (optional)" input name="backoff" placeholder="5s, 30s, 300s"; }
                label { "Max in flight (optional, default 8)" input name="max_in_flight" type="number" min="1"; }
                label { "Rate limit (optional)" input name="rate_limit" placeholder="50/s"; }
                label { "Disable after (optional)" input name="disable_after" placeholder="72h"; }
                label.check { input name="active" type="checkbox" value="true" checked; " Active" }
                div.actions { button.primary type="submit" { "Create subscriber" } }
            }
        }
        @if !manifests.is_empty() {
            section.card {
                h2 { "Handlers from manifests" }
                p.muted { "Read at startup from HANDLERS_DIR; change them there." }
                div.scroll {
                    table.rows {
                        thead { tr { th { "Name" } th { "Kind" } th { "Event types" } th { "Target" } } }
                        tbody {
                            @for r in &manifests {
                                tr {
                                    td data-label="Name" { code { (r.name) } }
                                    td data-label="Kind" { (r.kind) }
                                    td data-label="Event types" {
                                        code { (r.patterns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")) }
                                    }
                                    td data-label="Target" { code { (r.target) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    render(&console, &s, Nav::Subscribers, "Subscribers", body)
}

/// `POST /console/subscribers`: creates one from the form.
pub(crate) async fn create(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Form(fields): Form<Fields>,
) -> Response {
    let name = given(field(&fields, "name")).unwrap_or_default();
    let mut body = match settings(&fields, false) {
        Ok(body) => body,
        Err(why) => return done(&console, &s, "/console/subscribers", true, why),
    };
    body["name"] = json!(name);
    body["active"] = json!(field(&fields, "active").is_some());
    let (to, error, message) =
        match call_api(&console, Method::POST, "/subscribers", Some(body)).await {
            Ok((StatusCode::CREATED, _)) => (
                "/console/subscribers",
                false,
                format!("Subscriber {name} created: it receives new events at once."),
            ),
            Ok((status, answer)) => (
                "/console/subscribers",
                true,
                format!("Not created: {}", detail(status, &answer)),
            ),
            Err(e) => ("/console/subscribers", true, format!("Not created: {e}")),
        };
    done(&console, &s, to, error, message)
}

/// A subscriber's settings from a create or edit form, as the API's JSON. Creating,
/// an empty optional field is left out; editing, it removes the setting (`null`),
/// except the secret, which an empty field keeps (`unsigned` removes it), and the
/// URL, which is sent only when changed from the one shown (shown without its
/// credentials, so an unchanged field keeps them).
fn settings(fields: &Fields, editing: bool) -> Result<Value, String> {
    let text = |k: &str| given(field(fields, k));
    let mut body = json!({ "event_types": items(&text("event_types").unwrap_or_default()) });
    let url = text("url").unwrap_or_default();
    if !editing || field(fields, "url_shown") != Some(url.as_str()) {
        body["url"] = json!(url);
    }
    if let Some(secret) = text("secret") {
        body["secret"] = json!(secret);
    } else if editing && field(fields, "unsigned").is_some() {
        body["secret"] = Value::Null;
    }
    let mut optional = |key: &str, value: Option<Value>| match value {
        Some(v) => body[key] = v,
        None if editing => body[key] = Value::Null,
        None => {}
    };
    optional("ordering_key", text("ordering_key").map(|k| json!(k)));
    optional(
        "max_attempts",
        number(&text("max_attempts"), "Max attempts")?,
    );
    optional("backoff", text("backoff").map(|b| json!(items(&b))));
    optional(
        "max_in_flight",
        number(&text("max_in_flight"), "Max in flight")?,
    );
    optional("rate_limit", text("rate_limit").map(|r| json!(r)));
    optional("disable_after", text("disable_after").map(|d| json!(d)));
    Ok(body)
}

/// A whole number typed into the field called `label`, if any.
fn number(text: &Option<String>, label: &str) -> Result<Option<Value>, String> {
    text.as_ref()
        .map(|n| {
            n.parse::<u32>()
                .map(|n| json!(n))
                .map_err(|_| format!("{label} must be a whole number, not {n:?}."))
        })
        .transpose()
}

/// The form that edits one subscriber, filled with its settings (its secret never
/// shown: an empty field keeps it).
fn edit_form(s: &crate::console::session::Session, sub: &crate::model::Subscriber) -> maud::Markup {
    let shown = reqwest::Url::parse(&sub.url)
        .map(|u| display_url(&u))
        .unwrap_or_default();
    let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
    html! {
        details.edit {
            summary { "Edit" }
            form.stack.edit-subscriber method="post" action={ "/console/subscribers/" (super::segment(&sub.name)) "/edit" } {
                (csrf(s))
                input type="hidden" name="url_shown" value=(shown);
                label { "Event types" input name="event_types" required value=(sub.event_types.join(", ")); }
                label { "URL" input name="url" type="url" required value=(shown); }
                label { "New secret (empty: keep the current one)" input name="secret" type="password" autocomplete="off"; }
                label.check { input name="unsigned" type="checkbox" value="true"; " Remove the secret (unsigned)" }
                label { "Ordering key" input name="ordering_key" value=(sub.ordering_key.clone().unwrap_or_default()); }
                label { "Max attempts" input name="max_attempts" type="number" min="1" value=(number(sub.max_attempts)); }
                label { "Backoff" input name="backoff" value=(sub.backoff.as_ref().map(|b| b.join(", ")).unwrap_or_default()); }
                label { "Max in flight" input name="max_in_flight" type="number" min="1" value=(number(sub.max_in_flight)); }
                label { "Rate limit" input name="rate_limit" value=(sub.rate_limit.clone().unwrap_or_default()); }
                label { "Disable after" input name="disable_after" value=(sub.disable_after.clone().unwrap_or_default()); }
                div.actions { button.primary type="submit" { "Save changes" } }
            }
        }
    }
}

/// `POST /console/subscribers/{name}/edit`: changes it with `PATCH`.
pub(crate) async fn edit(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
    Form(fields): Form<Fields>,
) -> Response {
    let body = match settings(&fields, true) {
        Ok(body) => body,
        Err(why) => return done(&console, &s, "/console/subscribers", true, why),
    };
    let answer = call_api(&console, Method::PATCH, &api_path(&name), Some(body)).await;
    let (error, message) = match answer {
        Ok((StatusCode::OK, _)) => (
            false,
            format!("Subscriber {name} changed: its next attempts use the new settings."),
        ),
        Ok((status, body)) => (true, format!("Not changed: {}", detail(status, &body))),
        Err(e) => (true, format!("Not changed: {e}")),
    };
    done(&console, &s, "/console/subscribers", error, message)
}

/// `POST /console/subscribers/{name}/active` with `active` = `true` or `false`.
pub(crate) async fn set_active(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
    Form(fields): Form<Fields>,
) -> Response {
    let active = field(&fields, "active") == Some("true");
    let answer = call_api(
        &console,
        Method::PATCH,
        &api_path(&name),
        Some(json!({ "active": active })),
    )
    .await;
    let (error, message) = match answer {
        Ok((StatusCode::OK, _)) if active => (false, format!("Subscriber {name} is active again.")),
        Ok((StatusCode::OK, _)) => (
            false,
            format!("Subscriber {name} is inactive: it gets no new deliveries."),
        ),
        Ok((status, body)) => (true, format!("Not changed: {}", detail(status, &body))),
        Err(e) => (true, format!("Not changed: {e}")),
    };
    done(&console, &s, "/console/subscribers", error, message)
}

/// `POST /console/subscribers/{name}/delete`.
pub(crate) async fn delete(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
) -> Response {
    let (error, message) = match call_api(&console, Method::DELETE, &api_path(&name), None).await {
        Ok((StatusCode::NO_CONTENT, _)) => (
            false,
            format!(
                "Subscriber {name} deleted. Its unfinished deliveries dead-letter when their \
                 turn comes; re-create it and replay them if that was a mistake."
            ),
        ),
        Ok((status, body)) => (true, format!("Not deleted: {}", detail(status, &body))),
        Err(e) => (true, format!("Not deleted: {e}")),
    };
    done(&console, &s, "/console/subscribers", error, message)
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_items_example() {
        use crate::console::pages::subscribers::items;
        assert_eq!(
            items("order.*, invoice.paid  refund.*"),
            ["order.*", "invoice.paid", "refund.*"]
        );
    }
}
