//! `/console/sources`: each source as `GET /sources` lists it — where senders post
//! (or, for a pull source, where it reads, its state and cursor), its counts — with
//! its newest rejected requests (why a sender's webhooks fail), each with a retry
//! button once the cause is fixed; and the retries
//! (`POST /console/sources/{name}/rejected/retry`, one entry with an `id` field).

use axum::Form;
use axum::extract::{FromRef, Path, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::{done, render};
use crate::api::intake::Intake;
use crate::api::rejected;
use crate::console::csrf::{Fields, field};
use crate::console::layout::{Nav, age, ago, csrf, empty};
use crate::console::session::Session;
use crate::console::{Console, Visitor};
use crate::model::Timestamp;
use crate::sources::live::SourceView;
use crate::sources::pull::status::{PullView, State as PullState};
use crate::sources::rejected::RejectedRequest;

/// A pull adapter's state as `GET /sources` writes it.
fn state_word(state: PullState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Rejected requests shown per source and quota (refused before verification,
/// and after it: junk cannot push a real sender's refusals off the page); the
/// API lists up to 1,000 of each.
const REJECTED_SHOWN: usize = 20;

/// The counts of one source, as tiles.
fn counts(view: &SourceView, now: Timestamp) -> Markup {
    html! {
        section.tiles aria-label="Counts" {
            div.tile {
                span.label { "Accepted" }
                span.value.accepted { (view.accepted) }
                span.note { @if let Some(t) = view.last_accepted_at { "last " (ago(t, now)) } @else { "none yet" } }
            }
            div.tile {
                span.label { "Duplicates" }
                span.value.duplicates { (view.duplicates) }
                span.note { "redeliveries answered 200" }
            }
            div.tile.bad[view.rejected > 0] {
                span.label { "Rejected" }
                span.value.rejected { (view.rejected) }
                span.note { @if let Some(t) = view.last_rejected_at { "last " (ago(t, now)) } @else { "none" } }
            }
        }
    }
}

/// Where a pull source reads from and how far it got.
fn pull_facts(pull: &PullView, now: Timestamp) -> Markup {
    let raw = pull.cursor.get();
    let cursor = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Null) => "— (from the beginning)".to_owned(),
        Ok(Value::String(s)) => s,
        _ => raw.to_owned(), // numbers and the rest exactly as committed
    };
    html! {
        dl.facts {
            dt { "Pulls from" } dd { code { (pull.url) } }
            dt { "Cursor" } dd.strong { code.cursor { (cursor) } }
            dt { "Cursor committed" } dd { @if let Some(t) = pull.cursor_updated_at { (ago(t, now)) } @else { "never" } }
            dt { "Last success" } dd { @if let Some(t) = pull.last_success_at { (ago(t, now)) } @else { "never" } }
            @if let Some(lag) = pull.cursor_lag_seconds {
                dt { "Behind the source" } dd { (age((lag * 1000.0) as i64)) }
            }
            @if let Some(e) = &pull.last_error {
                dt { "Last error" }
                dd { @if let Some(t) = pull.last_error_at { (ago(t, now)) ": " } code { (e) } }
            }
        }
    }
}

/// The newest rejected requests of one push source, with retry buttons.
fn rejected(s: &Session, name: &str, log: &[RejectedRequest]) -> Markup {
    let action = format!("/console/sources/{name}/rejected/retry");
    html! {
        h3 { "Rejected requests" span.muted { " (newest " (log.len().min(REJECTED_SHOWN)) ")" } }
        @if log.is_empty() {
            (empty("None refused."))
        } @else {
            form.inline method="post" action=(action) {
                (csrf(s))
                button type="submit" { "Retry all" }
                span.muted { " — verifies each again with the current secrets, as of when it came" }
            }
        }
        @for r in log {
            details.rejected {
                summary {
                    time datetime=(r.received_at.to_rfc3339()) { (r.received_at.to_rfc3339()) }
                    " · " (r.status) " " code { (r.code) } " · " (r.reason) " · " (r.detail)
                }
                @if r.retryable {
                    form.inline method="post" action=(action) {
                        (csrf(s))
                        input type="hidden" name="id" value=(r.id);
                        button type="submit" { "Retry" }
                    }
                } @else {
                    p.muted { "Not retryable: what proved it (a credential header, or a body too large) was not kept." }
                }
                p.label { "Headers (credentials redacted)" }
                pre { (serde_json::to_string_pretty(&r.headers).unwrap_or_default()) }
                p.label { "Body (" (r.body_bytes) " bytes; first 1 KB)" }
                pre { (r.body) }
            }
        }
    }
}

/// `GET /console/sources`.
pub(crate) async fn list(State(console): State<Console>, axum::Extension(s): Visitor) -> Response {
    let sources = console.app.sources.all();
    let views = match console.app.sources.views().await {
        Ok(views) => views,
        Err(e) => return super::unavailable(&console, &s, Nav::Sources, &e),
    };
    let mut logs = Vec::with_capacity(sources.len());
    for src in sources {
        match src.rejected_log(REJECTED_SHOWN as u32).await {
            Ok(log) => logs.push(log),
            Err(e) => return super::unavailable(&console, &s, Nav::Sources, &e),
        }
    }
    let now = Timestamp::now();
    let body = html! {
        h1 { "Sources" }
        p.muted { "Counts are this instance's since it started (GET /sources); rejected requests are every instance's, kept 7 days." }
        @if sources.is_empty() {
            (empty("No sources configured (SOURCES_DIR): events arrive through POST /webhooks only."))
        }
        @for (view, log) in views.iter().zip(&logs) {
            article.card.source id={ "source-" (view.name) } {
                header {
                    strong { (view.name) } " "
                    span.badge { (view.kind) }
                    @if let Some(pull) = &view.pull {
                        " " span.badge.state { (state_word(pull.state)) }
                    }
                }
                @match (&view.path, &view.pull) {
                    (_, Some(pull)) => { (pull_facts(pull, now)) }
                    (Some(path), None) => {
                        dl.facts {
                            dt { "Senders post to" } dd { code { (path) } }
                        }
                    }
                    (None, None) => {}
                }
                @if !view.event_type_prefix.is_empty() {
                    p.muted { "Event types start with " code { (view.event_type_prefix) } }
                }
                (counts(view, now))
                (rejected(&s, &view.name, log))
            }
        }
    };
    render(&console, &s, Nav::Sources, "Sources", body)
}

/// `POST /console/sources/{name}/rejected/retry`: one entry (field `id`) or every
/// retryable one; the outcome as a flash message.
pub(crate) async fn retry(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
    Form(fields): Form<Fields>,
) -> Response {
    let back = "/console/sources";
    let app = Intake::from_ref(&console.app);
    let Some(source) = app.sources.get(&name).cloned() else {
        return done(&console, &s, back, true, format!("No source {name:?}."));
    };
    let (error, text) = match field(&fields, "id").map(str::parse::<uuid::Uuid>) {
        Some(Ok(id)) => retry_one(&app, &source, id).await,
        Some(Err(_)) => (true, "That is not an entry id.".to_owned()),
        None => match rejected::retry_all(&app, &source).await {
            Ok(t) => (
                t.still_rejected > 0,
                format!(
                    "Retried: {} accepted, {} duplicates, {} still rejected.",
                    t.accepted, t.duplicates, t.still_rejected
                ),
            ),
            Err(e) => (true, format!("Retry failed: {e}")),
        },
    };
    done(&console, &s, back, error, text)
}

/// Retries one entry: whether it failed, and what to say.
async fn retry_one(
    app: &Intake,
    source: &crate::sources::live::LiveSource,
    id: uuid::Uuid,
) -> (bool, String) {
    match rejected::retry_entry(app, source, id).await {
        Ok(Ok(_)) => (
            false,
            "It verifies now: ingested, and out of the log.".into(),
        ),
        Ok(Err(refused)) => (true, format!("Refused again: {}", refused.problem.detail)),
        Err(rejected::NotRetried::NotRetryable) => {
            (true, "Not retryable: its proof was not kept.".into())
        }
        Err(rejected::NotRetried::Missing) => (true, "No such entry (retried already?).".into()),
        Err(rejected::NotRetried::Store(e)) => (true, format!("Retry failed: {e}")),
    }
}
