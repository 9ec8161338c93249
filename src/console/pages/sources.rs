//! `/console/sources`: each source as `GET /sources` lists it — where senders post
//! (or, for a pull source, where it reads, its state and cursor), its counts — with
//! its newest rejected requests (why a sender's webhooks fail).

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::render;
use crate::console::layout::{Nav, age, ago, empty};
use crate::console::{Console, Visitor};
use crate::model::Timestamp;
use crate::sources::live::{RejectedRequest, SourceView};
use crate::sources::pull::status::{PullView, State as PullState};

/// A pull adapter's state as `GET /sources` writes it.
fn state_word(state: PullState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Rejected requests shown per source (the API keeps up to 1,000).
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
    let cursor = match &pull.cursor {
        Value::Null => "— (from the beginning)".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
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

/// The newest rejected requests of one source.
fn rejected(log: &[RejectedRequest]) -> Markup {
    html! {
        h3 { "Rejected requests" span.muted { " (" (log.len()) ")" } }
        @if log.is_empty() {
            (empty("None refused."))
        }
        @for r in log.iter().take(REJECTED_SHOWN) {
            details.rejected {
                summary {
                    time datetime=(r.received_at.to_rfc3339()) { (r.received_at.to_rfc3339()) }
                    " · " (r.status) " " code { (r.code) } " · " (r.detail)
                }
                p.label { "Headers (secret-bearing ones removed)" }
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
    let now = Timestamp::now();
    let body = html! {
        h1 { "Sources" }
        p.muted { "Counts are this instance's since it started (GET /sources)." }
        @if sources.is_empty() {
            (empty("No sources configured (SOURCES_DIR): events arrive through POST /webhooks only."))
        }
        @for (src, view) in sources.iter().zip(&views) {
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
                (rejected(&src.rejected_log()))
            }
        }
    };
    render(&console, &s, Nav::Sources, "Sources", body)
}
