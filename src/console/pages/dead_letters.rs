//! `/console/dead-letters`: failed deliveries newest first, filtered by
//! `event_type`, `handler` and `before` (events received before an RFC 3339
//! time) — the filter of `POST /dead-letters/replay`. Each can be replayed; all
//! that the filter selects can be replayed at once after a confirmation page that
//! says how many (`GET /console/dead-letters/replay`).

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use maud::html;

use super::{done, given, query, render};
use crate::console::csrf::{Fields, field};
use crate::console::layout::{Nav, ago, csrf, empty, number};
use crate::console::{Console, Visitor};
use crate::model::Timestamp;
use crate::store::ReplayFilter;

/// Dead letters per page.
const PAGE_SIZE: u32 = 50;

/// The filter as given (texts, for the form and links) and as parsed.
struct Filter {
    event_type: Option<String>,
    handler: Option<String>,
    before: Option<String>,
    parsed: ReplayFilter,
}

impl Filter {
    fn read(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let (event_type, handler, before) = (get("event_type"), get("handler"), get("before"));
        let at = before
            .as_deref()
            .map(|b| {
                Timestamp::parse(b).ok_or_else(|| {
                    format!("before must be an RFC 3339 time like 2026-11-25T22:44:57Z, not {b:?}")
                })
            })
            .transpose()?;
        Ok(Self {
            parsed: ReplayFilter {
                event: None,
                event_type: event_type.clone(),
                handler: handler.clone(),
                before: at,
            },
            event_type,
            handler,
            before,
        })
    }

    fn pairs(&self) -> [(&'static str, Option<&str>); 3] {
        [
            ("event_type", self.event_type.as_deref()),
            ("handler", self.handler.as_deref()),
            ("before", self.before.as_deref()),
        ]
    }

    /// `n` dead letters (one: "dead letter") and what the filter selects.
    fn describe(&self, n: u64) -> String {
        let noun = if n == 1 {
            "dead letter"
        } else {
            "dead letters"
        };
        let mut parts = Vec::new();
        if let Some(t) = &self.event_type {
            parts.push(format!("of type {t}"));
        }
        if let Some(h) = &self.handler {
            parts.push(format!("of handler {h}"));
        }
        if let Some(b) = &self.before {
            parts.push(format!("received before {b}"));
        }
        if parts.is_empty() {
            noun.into()
        } else {
            format!("{noun} {}", parts.join(", "))
        }
    }

    fn hidden(&self) -> maud::Markup {
        html! {
            @for (k, v) in self.pairs() {
                @if let Some(v) = v { input type="hidden" name=(k) value=(v); }
            }
        }
    }
}

/// `GET /console/dead-letters`.
pub(crate) async fn list(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let filter = match Filter::read(|k| given(params.get(k).map(String::as_str))) {
        Ok(f) => f,
        Err(why) => {
            return super::problem(
                &console,
                &s,
                Nav::DeadLetters,
                StatusCode::BAD_REQUEST,
                &why,
            );
        }
    };
    let before = match given(params.get("cursor").map(String::as_str))
        .map(|c| c.parse::<uuid::Uuid>())
    {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            let why = "that cursor is not one this page gave";
            return super::problem(&console, &s, Nav::DeadLetters, StatusCode::BAD_REQUEST, why);
        }
    };
    let store = &console.app.store;
    let (page, count) = match tokio::join!(
        store.dead_letters_where(&filter.parsed, PAGE_SIZE, before),
        store.count_dead_letters(&filter.parsed)
    ) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => return super::unavailable(&console, &s, Nav::DeadLetters, &e),
    };
    let now = Timestamp::now();
    let older = page.next_cursor.as_deref().map(|next| {
        let mut pairs = filter.pairs().to_vec();
        pairs.push(("cursor", Some(next)));
        format!("/console/dead-letters{}", query(&pairs))
    });
    let here = format!("/console/dead-letters{}", query(&filter.pairs()));
    let body = html! {
        h1 { "Dead letters" }
        form.filters method="get" action="/console/dead-letters" {
            label { "Type" input name="event_type" value=[filter.event_type.as_deref()] placeholder="order.created"; }
            label { "Handler" input name="handler" value=[filter.handler.as_deref()] placeholder="billing-sync"; }
            label { "Received before" input name="before" value=[filter.before.as_deref()] placeholder="2026-11-25T22:44:57Z"; }
            div.actions {
                button type="submit" { "Filter" }
                a href="/console/dead-letters" { "Clear" }
            }
        }
        p.summary {
            strong #dead-count { (number(count)) } " " (filter.describe(count))
            @if count > 0 {
                " · "
                a.button.primary #replay-all href={ "/console/dead-letters/replay" (query(&filter.pairs())) } {
                    "Replay all " (number(count)) "…"
                }
            }
        }
        @if page.items.is_empty() {
            (empty("No dead letters match: nothing is stuck."))
        }
        @for d in &page.items {
            article.card.delivery {
                header {
                    code.handler { (d.handler) } " · "
                    a href={ "/console/events/" (d.event.id) } { code { (d.event.event_type) } }
                    span.muted { " · " (d.attempts) (if d.attempts == 1 { " attempt" } else { " attempts" }) " · dead since " (ago(d.updated_at, now)) }
                }
                p.muted.key { "event " code { (d.event.id) } " · key " code { (d.event.idempotency_key) } }
                @if let Some(err) = &d.last_error {
                    pre.answer { (err) }
                }
                form.inline method="post" action={ "/console/events/" (d.event.id) "/replay" } {
                    (csrf(&s))
                    input type="hidden" name="handler" value=(d.handler);
                    input type="hidden" name="back" value=(here);
                    button type="submit" { "Replay" }
                }
            }
        }
        nav.pager {
            @if before.is_some() { a href=(here) { "← Newest" } }
            @if let Some(href) = &older { a href=(href) rel="next" { "Older →" } }
        }
    };
    render(&console, &s, Nav::DeadLetters, "Dead letters", body)
}

/// `GET /console/dead-letters/replay`: how many the filter selects, and the form
/// that replays them.
pub(crate) async fn confirm(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let filter = match Filter::read(|k| given(params.get(k).map(String::as_str))) {
        Ok(f) => f,
        Err(why) => {
            return super::problem(
                &console,
                &s,
                Nav::DeadLetters,
                StatusCode::BAD_REQUEST,
                &why,
            );
        }
    };
    let count = match console.app.store.count_dead_letters(&filter.parsed).await {
        Ok(c) => c,
        Err(e) => return super::unavailable(&console, &s, Nav::DeadLetters, &e),
    };
    let body = html! {
        h1 { "Replay dead letters" }
        section.card.confirm {
            p {
                "This resets " strong #confirm-count { (number(count)) } " " (filter.describe(count))
                " to pending; each gets one more attempt (their attempts and last error are kept)."
            }
            form method="post" action="/console/dead-letters/replay" {
                (csrf(&s))
                (filter.hidden())
                div.actions {
                    button.primary #confirm-replay type="submit" disabled[count == 0] {
                        "Replay " (number(count))
                    }
                    a href={ "/console/dead-letters" (query(&filter.pairs())) } { "Cancel" }
                }
            }
        }
    };
    render(&console, &s, Nav::DeadLetters, "Replay dead letters", body)
}

/// `POST /console/dead-letters/replay` with the filter's fields.
pub(crate) async fn replay_all(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Form(fields): Form<Fields>,
) -> Response {
    let filter = match Filter::read(|k| given(field(&fields, k))) {
        Ok(f) => f,
        Err(why) => return done(&console, &s, "/console/dead-letters", true, why),
    };
    let back = format!("/console/dead-letters{}", query(&filter.pairs()));
    match console.app.inbox.replay(filter.parsed.clone()).await {
        Ok(r) => done(
            &console,
            &s,
            &back,
            false,
            format!(
                "Replayed {} {}.",
                r.len(),
                filter.describe(u64::try_from(r.len()).unwrap_or(u64::MAX))
            ),
        ),
        Err(e) => done(&console, &s, &back, true, format!("Replay failed: {e}")),
    }
}
