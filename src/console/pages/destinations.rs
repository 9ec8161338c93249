//! `/console/destinations`: every destination (handler) with its state, places in
//! use, backlog and last error, and a form to pause or resume each. Reads and
//! actions go through the admin API in-process (`GET /destinations`,
//! `POST /destinations/{name}/pause|resume`), so they answer exactly as there.

use axum::extract::{Path, State};
use axum::response::Response;
use http::{Method, StatusCode};
use maud::html;
use serde_json::Value;

use super::subscribers::{call_api, detail};
use super::{done, render_with};
use crate::console::layout::{Nav, csrf, empty};
use crate::console::{Console, Visitor};

/// `GET /console/destinations`.
pub(crate) async fn list(State(console): State<Console>, axum::Extension(s): Visitor) -> Response {
    let items = match call_api(&console, Method::GET, "/destinations", None).await {
        Ok((StatusCode::OK, body)) => body["items"].as_array().cloned().unwrap_or_default(),
        Ok((status, body)) => {
            let why = detail(status, &body);
            return super::problem(&console, &s, Nav::Destinations, status, &why);
        }
        Err(e) => {
            return super::unavailable(&console, &s, Nav::Destinations, &e);
        }
    };
    let text = |d: &Value, k: &str| d[k].as_str().map(str::to_owned).unwrap_or_default();
    let body = html! {
        h1 { "Destinations" }
        p.muted {
            "Every handler has a lane of its own: a slow, failing or paused destination delays only its own deliveries."
        }
        @if items.is_empty() {
            (empty("No handlers are registered."))
        }
        div.scroll {
            table.rows #destinations {
                thead { tr {
                    th { "Name" } th { "Kind" } th { "State" } th { "In flight" }
                    th { "Pending" } th { "Oldest (s)" } th { "Failures" } th { "Last error" } th { "" }
                } }
                tbody {
                    @for d in &items {
                        @let name = text(d, "name");
                        @let state = text(d, "state");
                        tr id={ "destination-" (name) } {
                            td.keep data-label="Name" { code { (name) } }
                            td data-label="Kind" { (text(d, "kind")) }
                            td.keep data-label="State" {
                                span class={ "badge " (badge(&state)) } { (state) }
                                @if let Some(until) = d["paused_until"].as_str() { " until " (until) }
                            }
                            td.keep data-label="In flight" { (d["in_flight"]) " / " (d["max_in_flight"]) }
                            td data-label="Pending" { (d["pending"]) }
                            td data-label="Oldest (s)" { (d["oldest_pending_age_seconds"]) }
                            td data-label="Failures" { (d["consecutive_failures"]) }
                            td data-label="Last error" { (text(d, "last_error")) }
                            td.keep {
                                @let action = if state == "healthy" { "pause" } else { "resume" };
                                form.inline method="post" action={ "/console/destinations/" (super::segment(&name)) "/" (action) } {
                                    (csrf(&s))
                                    button type="submit" { (if action == "pause" { "Pause" } else { "Resume" }) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    render_with(
        &console,
        &s,
        Nav::Destinations,
        "Destinations",
        body,
        Some(10),
    )
}

/// The badge class of a state.
fn badge(state: &str) -> &'static str {
    match state {
        "healthy" => "completed",
        "paused" => "pending",
        _ => "failed",
    }
}

/// `POST /console/destinations/{name}/pause` or `…/resume`.
pub(crate) async fn act(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let back = "/console/destinations";
    if action != "pause" && action != "resume" {
        return done(
            &console,
            &s,
            back,
            true,
            format!("Unknown action {action:?}."),
        );
    }
    let path = format!("/destinations/{}/{action}", super::segment(&name));
    let (error, message) = match call_api(&console, Method::POST, &path, None).await {
        Ok((StatusCode::OK, body)) => (
            false,
            format!(
                "Destination {name} is {} now.",
                body["state"].as_str().unwrap_or("changed")
            ),
        ),
        Ok((status, body)) => (true, format!("Not changed: {}", detail(status, &body))),
        Err(e) => (true, format!("Not changed: {e}")),
    };
    done(&console, &s, back, error, message)
}
