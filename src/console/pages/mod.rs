//! One module per console page, and what they share: rendering inside the frame,
//! error pages, redirects after an action (post/redirect/get) with a one-time
//! message, and form values.

pub(crate) mod dead_letters;
pub(crate) mod destinations;
pub(crate) mod event;
pub(crate) mod events;
pub(crate) mod login;
pub(crate) mod overview;
pub(crate) mod sources;
pub(crate) mod subscribers;

use axum::response::{Html, IntoResponse, Redirect, Response};
use http::StatusCode;
use maud::{Markup, html};

use super::Console;
use super::layout::{self, Frame, Nav};
use super::session::Session;

/// A page of section `nav` inside the frame, with the session's pending message.
pub(crate) fn render(
    console: &Console,
    session: &Session,
    nav: Nav,
    title: &str,
    body: Markup,
) -> Response {
    render_with(console, session, nav, title, body, None)
}

/// [`render`], reloading every `refresh` seconds when given.
pub(crate) fn render_with(
    console: &Console,
    session: &Session,
    nav: Nav,
    title: &str,
    body: Markup,
    refresh: Option<u32>,
) -> Response {
    let frame = Frame {
        title,
        nav,
        session: Some(session),
        open: console.is_open(),
        flash: console.sessions.take_flash(&session.id),
        refresh,
    };
    Html(layout::page(frame, body).into_string()).into_response()
}

/// A bare error page (no session needed).
pub(crate) fn failure(status: StatusCode, why: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let frame = Frame {
        title,
        nav: Nav::Login,
        session: None,
        open: false,
        flash: None,
        refresh: None,
    };
    let body = html! {
        h1 { (status.as_u16()) " " (title) }
        p { (why) }
        p { a href="/console" { "Back to the console" } }
    };
    (status, Html(layout::page(frame, body).into_string())).into_response()
}

/// A page of the console's own with an error status (the database did not answer,
/// an unknown event).
pub(crate) fn problem(
    console: &Console,
    session: &Session,
    nav: Nav,
    status: StatusCode,
    why: &str,
) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = html! {
        h1 { (title) }
        p.flash.error { (why) }
    };
    (status, render(console, session, nav, title, body)).into_response()
}

/// The page when the store failed: 503, with the database's text in the log and
/// not on the page.
pub(crate) fn unavailable(
    console: &Console,
    session: &Session,
    nav: Nav,
    e: &dyn std::fmt::Display,
) -> Response {
    tracing::warn!(error = %e, "the store failed; the console answers 503");
    problem(
        console,
        session,
        nav,
        StatusCode::SERVICE_UNAVAILABLE,
        "the database did not answer; retry",
    )
}

/// After an action: a message for the next page, and a 303 to `to`.
pub(crate) fn done(
    console: &Console,
    session: &Session,
    to: &str,
    error: bool,
    text: String,
) -> Response {
    console.sessions.flash(&session.id, error, text);
    Redirect::to(to).into_response()
}

/// `to` if it is a console page (so that a form's `back` field cannot send the
/// browser elsewhere), else `/console`.
pub(crate) fn console_path(to: &str) -> &str {
    let inside = to == "/console" || to.starts_with("/console/") || to.starts_with("/console?");
    if inside && !to.contains('\\') {
        to
    } else {
        "/console"
    }
}

/// A form or query value with surrounding blanks removed; `None` when empty.
pub(crate) fn given(v: Option<&str>) -> Option<String> {
    v.map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Builds a query string of the non-empty `pairs` (`?a=1&b=2`, or empty).
pub(crate) fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (k, v) in pairs {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            s.append_pair(k, v);
            any = true;
        }
    }
    if any {
        format!("?{}", s.finish())
    } else {
        String::new()
    }
}

/// Percent-encodes `text` as one URL path segment (everything but `A–Z a–z 0–9 - . _ ~`).
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_console_path_example() {
        use crate::console::pages::console_path;
        assert_eq!(
            console_path("/console/events?status=failed"),
            "/console/events?status=failed"
        );
        assert_eq!(console_path("https://evil.example/"), "/console");
        assert_eq!(console_path("//evil.example/console"), "/console");
        assert_eq!(console_path("/consoleevil"), "/console");
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_query_example() {
        use crate::console::pages::query;
        assert_eq!(
            query(&[
                ("status", Some("failed")),
                ("key", None),
                ("q", Some("a b&c"))
            ]),
            "?status=failed&q=a+b%26c"
        );
        assert_eq!(query(&[("key", None)]), "");
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_segment_example() {
        assert_eq!(crate::console::pages::segment("a b/c"), "a%20b%2Fc");
        assert_eq!(
            crate::console::pages::segment("billing-sync.v2"),
            "billing-sync.v2"
        );
    }
}
