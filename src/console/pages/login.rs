//! `/console/login`: the form that exchanges `ADMIN_TOKEN` for a session, and
//! `POST /console/logout`. Without a token there is nothing to log in to: the
//! form sends the visitor on to the console.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use http::StatusCode;
use http::header::SET_COOKIE;
use maud::html;
use subtle::ConstantTimeEq;

use super::console_path;
use crate::console::layout::{self, Frame, Nav};
use crate::console::{Console, Visitor, session};

fn page(next: &str, error: Option<&str>) -> String {
    let frame = Frame {
        title: "Log in",
        nav: Nav::Login,
        session: None,
        open: false,
        flash: None,
        refresh: None,
    };
    let body = html! {
        section.card.login {
            h1 { "Log in" }
            p.muted { "Enter the admin token (ADMIN_TOKEN) this hookbox was started with." }
            @if let Some(e) = error {
                p.flash.error role="alert" { (e) }
            }
            form method="post" action="/console/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "Admin token" }
                input #token type="password" name="token" autocomplete="current-password"
                    required autofocus;
                button type="submit" { "Log in" }
            }
        }
    };
    layout::page(frame, body).into_string()
}

/// `GET /console/login`.
pub(crate) async fn form(
    State(console): State<Console>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let next = console_path(params.get("next").map_or("/console", String::as_str));
    if console.is_open() {
        return Redirect::to(next).into_response();
    }
    Html(page(next, None)).into_response()
}

/// `POST /console/login` with `token` (and `next`, the page asked for): a session
/// cookie and a 303 to that page, or the form again with 401.
pub(crate) async fn submit(
    State(console): State<Console>,
    client: Option<axum::Extension<crate::guard::ClientAddr>>,
    headers: HeaderMap,
    Form(fields): Form<HashMap<String, String>>,
) -> Response {
    let next = console_path(fields.get("next").map_or("/console", String::as_str)).to_owned();
    let Some(expected) = console.app.admin_token.secret() else {
        return Redirect::to(&next).into_response();
    };
    let client = client.map(|c| c.0.0);
    if let Err(refused) = console.app.guard.check(&headers, true) {
        return crate::api::problem::Problem::from(refused).into_response();
    }
    if let Err(throttled) = console.app.guard.admit(client) {
        return crate::api::problem::Problem::from(throttled).into_response();
    }
    let given = fields.get("token").map(|t| t.trim()).unwrap_or_default();
    if !bool::from(given.as_bytes().ct_eq(expected.expose().as_bytes())) {
        console.app.guard.failed(client);
        tracing::warn!("console login with a wrong admin token");
        return (
            StatusCode::UNAUTHORIZED,
            Html(page(&next, Some("That is not the admin token."))),
        )
            .into_response();
    }
    let Ok(s) = console.sessions.create() else {
        return super::failure(StatusCode::INTERNAL_SERVER_ERROR, "no randomness");
    };
    let mut res = Redirect::to(&next).into_response();
    res.headers_mut().insert(
        SET_COOKIE,
        session::set_cookie(&s.id, session::behind_https(&headers)),
    );
    res
}

/// `POST /console/logout`: ends the session.
pub(crate) async fn logout(
    State(console): State<Console>,
    axum::Extension(s): Visitor,
    headers: HeaderMap,
) -> Response {
    console.sessions.remove(&s.id);
    let mut res = Redirect::to("/console/login").into_response();
    res.headers_mut().insert(
        SET_COOKIE,
        session::clear_cookie(session::behind_https(&headers)),
    );
    res
}
