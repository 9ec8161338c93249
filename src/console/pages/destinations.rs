//! `/console/destinations`: every destination (handler) with its state, places in
//! use, backlog and last error, and a form to pause or resume each; and
//! `/console/destinations/{name}`: one destination with a form to try an event on
//! it (a stored event's id, or a type and an ad-hoc payload) and, beside it, what
//! it would be sent. Reads and actions go through the admin API in-process
//! (`GET /destinations`, `POST /destinations/{name}/pause|resume|test`), so they
//! answer exactly as there.

use axum::Form;
use axum::extract::{Path, State};
use axum::response::Response;
use http::{Method, StatusCode};
use maud::{Markup, html};
use serde_json::{Value, json};

use crate::console::csrf::{Fields, field};

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
                            td.keep data-label="Name" { a href={ "/console/destinations/" (super::segment(&name)) } { code { (name) } } }
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

/// `GET /console/destinations/{name}`: the destination and its "Try it" form.
pub(crate) async fn page(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
) -> Response {
    tried(&console, &s, &name, &Fields::default(), None).await
}

/// `POST /console/destinations/{name}/test` (fields `event_id`, or `event_type`
/// and `payload`): the page again, with what would be sent beside the form.
pub(crate) async fn test(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    Path(name): Path<String>,
    Form(fields): Form<Fields>,
) -> Response {
    let given = |k: &str| field(&fields, k).map(str::trim).filter(|v| !v.is_empty());
    let body = match (given("event_id"), given("event_type")) {
        (Some(id), _) => Ok(json!({ "event_id": id })),
        (None, Some(t)) => serde_json::from_str::<Value>(given("payload").unwrap_or("{}"))
            .map(|payload| json!({ "event_type": t, "payload": payload }))
            .map_err(|e| format!("The payload is not JSON: {e}")),
        (None, None) => Err("Give an event id, or an event type and a payload.".to_owned()),
    };
    let path = format!("/destinations/{}/test", super::segment(&name));
    let result = match body {
        Err(why) => Err(why),
        Ok(body) => match call_api(&console, Method::POST, &path, Some(body)).await {
            Ok((StatusCode::OK, answer)) => Ok(answer),
            Ok((status, answer)) => Err(detail(status, &answer)),
            Err(e) => Err(e),
        },
    };
    tried(&console, &s, &name, &fields, Some(result)).await
}

/// The destination's page, with the form filled from `fields` and, after a try,
/// its `result` (the API's answer, or why there is none).
async fn tried(
    console: &Console,
    s: &crate::console::session::Session,
    name: &str,
    fields: &Fields,
    result: Option<Result<Value, String>>,
) -> Response {
    let path = format!("/destinations/{}", super::segment(name));
    let d = match call_api(console, Method::GET, &path, None).await {
        Ok((StatusCode::OK, body)) => body,
        Ok((status, body)) => {
            return super::problem(
                console,
                s,
                Nav::Destinations,
                status,
                &detail(status, &body),
            );
        }
        Err(e) => return super::unavailable(console, s, Nav::Destinations, &e),
    };
    let value = |k: &str| field(fields, k).unwrap_or_default().to_owned();
    let body = html! {
        p.crumbs { a href="/console/destinations" { "Destinations" } " / " code { (name) } }
        h1 { code { (name) } " " span class={ "badge " (badge(d["state"].as_str().unwrap_or_default())) } { (d["state"].as_str().unwrap_or_default()) } }
        section.card {
            dl.facts {
                dt { "Kind" } dd { (d["kind"].as_str().unwrap_or_default()) }
                dt { "In flight" } dd { (d["in_flight"]) " / " (d["max_in_flight"]) }
                dt { "Pending" } dd { (d["pending"]) }
                dt { "Last error" } dd { (d["last_error"].as_str().unwrap_or("—")) }
            }
        }
        section.card #try {
            h2 { "Try an event" }
            p.muted { "What this destination would be sent — its filter and transform applied — without sending anything." }
            form method="post" action={ "/console/destinations/" (super::segment(name)) "/test" } {
                (csrf(s))
                label { "A stored event's id " input type="text" name="event_id" value=(value("event_id")) placeholder="0192…"; }
                p.muted { "or" }
                label { "Event type " input type="text" name="event_type" value=(value("event_type")) placeholder="order.created"; }
                label { "Payload (JSON)" textarea name="payload" rows="8" { (value("payload")) } }
                button.primary type="submit" { "Try it" }
            }
            @if let Some(result) = &result { (outcome(result)) }
        }
    };
    super::render(console, s, Nav::Destinations, name, body)
}

/// What a try answered, beside the form.
fn outcome(result: &Result<Value, String>) -> Markup {
    html! {
        div.result #try-result {
            @match result {
                Err(why) => { p.error { (why) } }
                Ok(a) if a["matched"] != json!(true) => { p { strong { "Not matched" } ": its event types or its filter leave this event out: no delivery." } }
                Ok(a) if a["cancelled"] == json!(true) => { p { strong { "Cancelled" } " by its transform: nothing would be sent." } }
                Ok(a) if !a["error"].is_null() => { p.error { (a["error"].as_str().unwrap_or_default()) } }
                Ok(a) => {
                    p { strong { "Would send" } }
                    pre.payload { (serde_json::to_string_pretty(&a["request"]).unwrap_or_default()) }
                }
            }
        }
    }
}
