//! `/console/events/{id}`: one event — what it is, its payload, its deliveries
//! with every attempt of each (oldest first, with its answer), and a replay button
//! where a delivery failed; and
//! `POST /console/events/{id}/replay` (optionally one `handler`'s delivery only).

use axum::Form;
use axum::extract::{Path, State};
use axum::response::Response;
use http::StatusCode;
use maud::{Markup, html};

use super::{console_path, done, given, render_with};
use crate::console::csrf::{Fields, field};
use crate::console::layout::{Nav, ago, csrf, status};
use crate::console::{Console, Visitor, pretty};
use crate::model::{Attempt, Status, Timestamp};
use crate::store::ReplayFilter;

/// `GET /console/events/{id}`.
pub(crate) async fn page(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(id): Path<String>,
) -> Response {
    let not_found =
        |why: &str| super::problem(&console, &s, Nav::Events, StatusCode::NOT_FOUND, why);
    let Ok(id) = id.parse::<uuid::Uuid>() else {
        return not_found("that is not an event id");
    };
    let store = &console.app.store;
    let (event, payload, attempts) =
        match tokio::join!(store.event(id), store.payload(id), store.list_attempts(id)) {
            (Ok(Some(e)), Ok(p), Ok(a)) => (e, p.unwrap_or_default(), a),
            (Ok(None), _, _) => {
                return not_found("no event has that id (retention may have deleted it)");
            }
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                return super::unavailable(&console, &s, Nav::Events, &e);
            }
        };
    let now = Timestamp::now();
    let back = format!("/console/events/{id}");
    let failed = event.deliveries.iter().any(|d| d.status == Status::Failed);
    let body = html! {
        p.crumbs { a href="/console/events" { "Events" } " / " code { (event.id) } }
        h1 { code { (event.event_type) } " " (status(event.status)) }
        @if failed {
            form.inline method="post" action={ "/console/events/" (event.id) "/replay" } {
                (csrf(&s))
                input type="hidden" name="back" value=(back);
                button.primary type="submit" { "Replay failed deliveries" }
            }
        }
        section.card {
            dl.facts {
                dt { "Id" } dd { code { (event.id) } }
                dt { "Idempotency key" } dd { code { (event.idempotency_key) } }
                dt { "Source" } dd { (event.source.as_deref().unwrap_or("POST /webhooks")) }
                dt { "Received" } dd { (ago(event.created_at, now)) " · " (event.created_at.to_rfc3339()) }
                dt { "Receipts" } dd { (event.received_count) " (last " (ago(event.last_received_at, now)) ")" }
                dt { "Last change" } dd { (ago(event.updated_at, now)) }
                dt { "Attempts" } dd { (event.attempts) }
            }
        }
        section.card {
            h2 { "Deliveries" }
            @if event.deliveries.is_empty() {
                p.empty { "No handler matched this event type: it was completed at once (unrouted)." }
            }
            @for d in &event.deliveries {
                article.delivery {
                    header {
                        code.handler { (d.handler) } " " (status(d.status))
                        span.muted { " · " (d.attempts) " attempt" @if d.attempts != 1 { "s" } }
                        @if let Some(at) = d.retry_after.filter(|_| d.status == Status::Pending) {
                            span.muted { " · next try " time datetime=(at.to_rfc3339()) { (at.to_rfc3339()) } }
                        }
                        span.muted { " · " (ago(d.updated_at, now)) }
                    }
                    @if let Some(err) = &d.last_error {
                        p.label { "Last answer" }
                        pre.answer { (err) }
                    }
                    (attempt_rows(attempts.iter().filter(|a| a.handler == d.handler)))
                    @if d.status == Status::Failed {
                        form.inline method="post" action={ "/console/events/" (event.id) "/replay" } {
                            (csrf(&s))
                            input type="hidden" name="back" value=(back);
                            input type="hidden" name="handler" value=(d.handler);
                            button type="submit" { "Replay " (d.handler) }
                        }
                    }
                }
            }
        }
        section.card {
            h2 { "Payload" }
            pre.payload { (pretty::json(&payload)) }
        }
    };
    let refresh = (!event.status.is_terminal()).then_some(3);
    render_with(&console, &s, Nav::Events, "Event", body, refresh)
}

/// Every attempt of one delivery, oldest first: number, start, duration, outcome,
/// HTTP status and the error or, for a success, the answer's body (already stripped
/// of credentials).
fn attempt_rows<'a>(attempts: impl Iterator<Item = &'a Attempt>) -> Markup {
    let attempts: Vec<&Attempt> = attempts.collect();
    html! {
        @if !attempts.is_empty() {
            table.rows.attempts {
                thead { tr {
                    th { "#" } th { "Started" } th { "Took" } th { "Outcome" }
                    th { "Status" } th { "Answer" }
                } }
                tbody {
                    @for a in &attempts {
                        tr.attempt {
                            td data-label="#" { (a.attempt) }
                            td data-label="Started" {
                                time datetime=(a.started_at.to_rfc3339()) { (a.started_at.format("%Y-%m-%d %H:%M:%S%.3fZ")) }
                            }
                            td data-label="Took" { (a.duration_ms) " ms" }
                            td data-label="Outcome" { (a.outcome.as_str()) }
                            td data-label="Status" {
                                @if let Some(code) = a.response_status { (code) } @else { "—" }
                            }
                            td data-label="Answer" {
                                // A failure's error holds its answer; a success shows what the receiver said.
                                @if let Some(said) = a.error.as_ref().or(a.response_body.as_ref()) {
                                    pre.answer { (said) }
                                } @else { "—" }
                                @if let Some(sent) = &a.request {
                                    details.sent {
                                        summary { "Sent (after its transform)" }
                                        pre.request { (pretty::json(sent)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `POST /console/events/{id}/replay` (fields: `handler` to replay only that
/// delivery, `back` the page to return to).
pub(crate) async fn replay(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(id): Path<String>,
    Form(fields): Form<Fields>,
) -> Response {
    let back = console_path(field(&fields, "back").unwrap_or("/console/dead-letters")).to_owned();
    let Ok(id) = id.parse::<uuid::Uuid>() else {
        return done(&console, &s, &back, true, "That is not an event id.".into());
    };
    let handler = given(field(&fields, "handler"));
    let filter = ReplayFilter {
        event: Some(id),
        handler: handler.clone(),
        ..ReplayFilter::default()
    };
    match console.app.inbox.replay(filter).await {
        Ok(r) if r.is_empty() => done(
            &console,
            &s,
            &back,
            true,
            "Nothing to replay: no failed delivery (already replayed?).".into(),
        ),
        Ok(r) => done(
            &console,
            &s,
            &back,
            false,
            format!(
                "Replayed {} deliver{} of event {id}.",
                r.len(),
                if r.len() == 1 { "y" } else { "ies" }
            ),
        ),
        Err(e) => done(&console, &s, &back, true, format!("Replay failed: {e}")),
    }
}
