//! `/console/events`: events newest first, filtered by the query parameters
//! `status`, `event_type`, `source` and `key` (an exact idempotency key), 50 a
//! page with a cursor (`cursor`, the last id of the previous page).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use maud::{Markup, html};

use super::{given, query, render};
use crate::console::layout::{Nav, ago, empty, status};
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
