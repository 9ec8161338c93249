//! `/console/events`: events newest first, filtered by the query parameters
//! `status`, `event_type`, `source` and `key` (an exact idempotency key), 50 a
//! page with a cursor (`cursor`, the last id of the previous page).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use maud::{Markup, html};

use super::subscribers::call_api;
use super::{done, given, query, render};
use crate::console::csrf::{Fields, field};
use crate::console::layout::{Nav, ago, csrf, empty, status};
use crate::console::{Console, Visitor};
use crate::model::{EventView, Status, Timestamp};
use crate::store::{ListQuery, Page};

/// Events per page.
pub(crate) const PAGE_SIZE: u32 = 50;

/// `GET /console/events`.
pub(crate) async fn list(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let param = |k: &str| given(params.get(k).map(String::as_str));
    let (status_filter, event_type, source, key) = (
        param("status"),
        param("event_type"),
        param("source"),
        param("key"),
    );
    let bad =
        |why: String| super::problem(&console, &s, Nav::Events, StatusCode::BAD_REQUEST, &why);
    let wanted = match status_filter.as_deref().map(|v| (v, Status::parse(v))) {
        None => None,
        Some((_, Some(st))) => Some(st),
        Some((v, None)) => return bad(format!("unknown status {v:?}")),
    };
    let before = match param("cursor").map(|c| c.parse::<uuid::Uuid>()) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return bad("that cursor is not one this page gave".into()),
    };
    let page = match &key {
        // A key names at most one event; the other filters still apply to it.
        Some(k) => console.app.store.event_by_key(k).await.map(|found| Page {
            items: found
                .into_iter()
                .filter(|e| wanted.is_none_or(|w| e.status == w))
                .filter(|e| event_type.as_ref().is_none_or(|t| &e.event_type == t))
                .filter(|e| source.as_ref().is_none_or(|x| e.source.as_ref() == Some(x)))
                .collect(),
            next_cursor: None,
        }),
        None => {
            let q = ListQuery {
                status: wanted,
                event_type: event_type.clone(),
                source: source.clone(),
                limit: PAGE_SIZE,
                before,
            };
            console.app.store.list_events(&q).await
        }
    };
    let page = match page {
        Ok(p) => p,
        Err(e) => {
            return super::unavailable(&console, &s, Nav::Events, &e);
        }
    };
    let filters = [
        ("status", status_filter.as_deref()),
        ("event_type", event_type.as_deref()),
        ("source", source.as_deref()),
        ("key", key.as_deref()),
    ];
    let older = page.next_cursor.as_deref().map(|next| {
        let mut with_cursor = filters.to_vec();
        with_cursor.push(("cursor", Some(next)));
        format!("/console/events{}", query(&with_cursor))
    });
    let body = html! {
        h1 { "Events" }
        form.filters method="get" action="/console/events" {
            label { "Status"
                select name="status" {
                    option value="" { "any" }
                    @for st in [Status::Pending, Status::Processing, Status::Completed, Status::Failed] {
                        option value=(st.as_str()) selected[wanted == Some(st)] { (st.as_str()) }
                    }
                }
            }
            label { "Type" input name="event_type" value=[event_type.as_deref()] placeholder="order.created"; }
            label { "Source" input name="source" value=[source.as_deref()] placeholder="github"; }
            label { "Key" input name="key" value=[key.as_deref()] placeholder="idempotency key"; }
            div.actions {
                button type="submit" { "Filter" }
                a href="/console/events" { "Clear" }
            }
        }
        (test_event_form(&s))
        @if page.items.is_empty() {
            (empty("No events match."))
        } @else {
            (table(&page.items))
        }
        nav.pager {
            @if before.is_some() {
                a href={ "/console/events" (query(&filters)) } { "← Newest" }
            }
            @if let Some(href) = &older {
                a href=(href) rel="next" { "Older →" }
            }
        }
    };
    render(&console, &s, Nav::Events, "Events", body)
}

/// Events as rows (cards on a narrow screen).
pub(crate) fn table(events: &[EventView]) -> Markup {
    let now = Timestamp::now();
    html! {
        div.scroll {
            table.rows.events {
                thead { tr {
                    th { "Status" } th { "Type" } th { "Event" } th { "Source" }
                    th.num { "Attempts" } th { "Received" }
                } }
                tbody {
                    @for e in events {
                        tr {
                            td data-label="Status" { (status(e.status)) }
                            td data-label="Type" { code { (e.event_type) } }
                            td data-label="Event" {
                                a.event-link href={ "/console/events/" (e.id) } { code { (e.id) } }
                                @if e.idempotency_key != e.id.to_string() {
                                    br; span.muted.key { "key " (e.idempotency_key) }
                                }
                            }
                            td data-label="Source" { (e.source.as_deref().unwrap_or("—")) }
                            td.num data-label="Attempts" { (e.attempts) }
                            td data-label="Received" { (ago(e.created_at, now)) }
                        }
                    }
                }
            }
        }
    }
}

/// The type and payload a test event has unless the form says otherwise.
const TEST_TYPE: &str = "test.ping";
const TEST_PAYLOAD: &str = r#"{"hello": "world"}"#;

/// "Send a test event": a type and a JSON payload, sent through intake like any
/// event (`POST /webhooks`), so that it is routed and delivered as the real ones.
fn test_event_form(session: &crate::console::session::Session) -> Markup {
    html! {
        details.card.test-event {
            summary { "Send a test event" }
            form method="post" action="/console/events/test" {
                (csrf(session))
                label { "Type" input name="event_type" value=(TEST_TYPE) required; }
                label { "Payload (JSON)" textarea name="payload" rows="4" { (TEST_PAYLOAD) } }
                div.actions { button.primary type="submit" { "Send" } }
            }
        }
    }
}

/// `POST /console/events/test`: sends the form's event through `POST /webhooks`
/// and opens it.
pub(crate) async fn send_test(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    axum::Form(fields): axum::Form<Fields>,
) -> Response {
    let event_type = given(field(&fields, "event_type")).unwrap_or_else(|| TEST_TYPE.to_owned());
    let text = given(field(&fields, "payload")).unwrap_or_else(|| "null".to_owned());
    let payload: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            let why = format!("The payload is not JSON: {e}.");
            return done(&console, &s, "/console/events", true, why);
        }
    };
    let body = serde_json::json!({ "event_type": event_type, "payload": payload });
    match call_api(&console, http::Method::POST, "/webhooks", Some(body)).await {
        Ok((StatusCode::ACCEPTED, answer)) => {
            let id = answer["id"].as_str().unwrap_or_default().to_owned();
            let to = format!("/console/events/{}", super::segment(&id));
            let message = format!("Test event {event_type} accepted; it is routed like any event.");
            done(&console, &s, &to, false, message)
        }
        Ok((_, answer)) => {
            let why = format!(
                "Not sent: {}",
                answer["detail"].as_str().unwrap_or("intake refused it")
            );
            done(&console, &s, "/console/events", true, why)
        }
        Err(e) => done(
            &console,
            &s,
            "/console/events",
            true,
            format!("Not sent: {e}"),
        ),
    }
}
