//! `/console/sources`: each source as `GET /sources` lists it — its counts, and for
//! a pull source its state and cursor — with its newest rejected requests (why a
//! sender's webhooks fail). The fields are shown as `GET /sources` names them, so
//! whatever that listing gains appears here too.

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::render;
use crate::console::layout::{Nav, empty};
use crate::console::{Console, Visitor};

/// Rejected requests shown per source (the API keeps up to 1,000).
const REJECTED_SHOWN: usize = 20;

/// Fields shown in the card's title rather than in its table.
const TITLE_FIELDS: [&str; 3] = ["name", "kind", "path"];

/// A JSON value as short text: strings bare, null as a dash, the rest as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn facts(view: &Value) -> Markup {
    html! {
        dl.facts {
            @if let Value::Object(fields) = view {
                @for (k, v) in fields.iter().filter(|(k, _)| !TITLE_FIELDS.contains(&k.as_str())) {
                    dt { (k.replace('_', " ")) }
                    dd class=[(k == "state" || k == "cursor").then_some("strong")] { code { (shown(v)) } }
                }
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
    let body = html! {
        h1 { "Sources" }
        p.muted { "Counts are this instance's since it started (GET /sources)." }
        @if sources.is_empty() {
            (empty("No sources configured (SOURCES_DIR): events arrive through POST /webhooks only."))
        }
        @for (src, view) in sources.iter().zip(&views) {
            @let view = serde_json::to_value(view).unwrap_or(Value::Null);
            @let rejected = src.rejected_log();
            article.card.source id={ "source-" (src.source.name) } {
                header {
                    strong { (shown(&view["name"])) } " "
                    span.badge { (shown(&view["kind"])) } " "
                    code { (shown(&view["path"])) }
                }
                (facts(&view))
                h3 { "Rejected requests" span.muted { " (" (rejected.len()) ")" } }
                @if rejected.is_empty() {
                    (empty("None refused."))
                }
                @for r in rejected.iter().take(REJECTED_SHOWN) {
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
    };
    render(&console, &s, Nav::Sources, "Sources", body)
}
