//! The operations console: server-rendered HTML pages at `/console` for a browser
//! (docs/operating.md). No JavaScript and nothing fetched from elsewhere: the
//! pages, the stylesheet (`assets/console.css`, built into the binary) and the
//! chart (inline SVG drawn here) all come from hookbox itself, and every action is
//! an HTML form.
//!
//! - [`session`]: with `ADMIN_TOKEN` set, `/console/login` exchanges the token for
//!   a session cookie; without one, every visitor gets a session on the first
//!   page (the console is open, and a banner says so).
//! - [`csrf`]: every POST carries its session's token in a field `csrf`, checked
//!   by [`gate`] before any handler runs (403 otherwise, and nothing changes).
//! - [`headers`]: `Content-Security-Policy` with no script source at all,
//!   `frame-ancestors 'none'`, `X-Frame-Options: DENY`, `Cache-Control: no-store`.
//! - [`pages`]: one module per page; [`layout`] the shared frame; [`chart`] the SVG.

pub(crate) mod chart;
pub(crate) mod csrf;
pub(crate) mod layout;
pub(crate) mod pages;
pub(crate) mod pretty;
pub(crate) mod session;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state, map_response};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

use crate::state::AppState;
use crate::store::overview::Overview;
use session::{Session, Sessions};

/// How long the overview's database counts are reused (they scan the tables).
pub(crate) const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(5);

/// What the console's handlers share.
pub(crate) struct Inner {
    /// The application's state (store, inbox, registry, sources, admin token).
    pub app: AppState,
    /// The admin API, called in-process for the subscriber actions, so that they
    /// validate and answer exactly as `POST|PATCH|DELETE /subscribers` do.
    pub api: Router,
    /// The sessions.
    pub sessions: Sessions,
    overview: tokio::sync::Mutex<Option<(Instant, Arc<Overview>)>>,
}

/// The console's axum state: cheap to clone.
#[derive(Clone)]
pub(crate) struct Console(Arc<Inner>);

impl std::ops::Deref for Console {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Console {
    /// True when no `ADMIN_TOKEN` is set.
    pub(crate) fn is_open(&self) -> bool {
        self.app.admin_token.secret().is_none()
    }

    /// The overview's counts, computed at most once per [`OVERVIEW_MAX_AGE`].
    pub(crate) async fn overview(&self) -> Result<Arc<Overview>, crate::store::StoreError> {
        let mut cached = self.overview.lock().await;
        if let Some((at, o)) = &*cached {
            if at.elapsed() < OVERVIEW_MAX_AGE {
                return Ok(o.clone());
            }
        }
        let fresh = Arc::new(
            self.app
                .store
                .overview(crate::model::Timestamp::now())
                .await?,
        );
        *cached = Some((Instant::now(), fresh.clone()));
        Ok(fresh)
    }
}

/// The console's routes, under `/console`, for the application `app`.
/// `GET /`: a browser goes to the console; anything else gets the API's 404.
async fn root(headers: http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    let browser = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if browser {
        Redirect::to("/console").into_response()
    } else {
        crate::api::problem::Problem::not_found("route").into_response()
    }
}

pub(crate) fn router(app: AppState) -> Router {
    let console = Console(Arc::new(Inner {
        api: crate::api::router(app.clone()),
        app,
        sessions: Sessions::default(),
        overview: Default::default(),
    }));
    let gated = Router::new()
        .route("/console", get(pages::overview::page))
        .route("/console/", get(|| async { Redirect::to("/console") }))
        .route("/console/events", get(pages::events::list))
        .route("/console/events/test", post(pages::events::send_test))
        .route("/console/events/{id}", get(pages::event::page))
        .route("/console/events/{id}/replay", post(pages::event::replay))
        .route("/console/dead-letters", get(pages::dead_letters::list))
        .route(
            "/console/dead-letters/replay",
            get(pages::dead_letters::confirm).post(pages::dead_letters::replay_all),
        )
        .route(
            "/console/subscribers",
            get(pages::subscribers::list).post(pages::subscribers::create),
        )
        .route(
            "/console/subscribers/{name}/active",
            post(pages::subscribers::set_active),
        )
        .route(
            "/console/subscribers/{name}/edit",
            post(pages::subscribers::edit),
        )
        .route(
            "/console/subscribers/{name}/delete",
            post(pages::subscribers::delete),
        )
        .route("/console/destinations", get(pages::destinations::list))
        .route(
            "/console/destinations/{name}",
            get(pages::destinations::page),
        )
        .route(
            "/console/destinations/{name}/test",
            post(pages::destinations::test),
        )
        .route(
            "/console/destinations/{name}/{action}",
            post(pages::destinations::act),
        )
        .route("/console/sources", get(pages::sources::list))
        .route(
            "/console/sources/{name}/rejected/retry",
            post(pages::sources::retry),
        )
        .route("/console/logout", post(pages::login::logout))
        .route_layer(from_fn_with_state(console.clone(), gate));
    Router::new()
        .merge(gated)
        .route(
            "/console/login",
            get(pages::login::form).post(pages::login::submit),
        )
        .route("/console/assets/console.css", get(stylesheet))
        .route("/", get(root))
        // One `layer` call (see `crate::api::router`), outermost first.
        .layer(
            tower::ServiceBuilder::new()
                .layer(crate::layers::trace::request_tracing())
                .layer(crate::layers::metrics::HttpMetricsLayer::new())
                .layer(map_response(headers)),
        )
        .with_state(console)
}

/// The stylesheet, built into the binary.
async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../../assets/console.css"),
    )
        .into_response()
}

/// The security headers of every console answer.
pub(crate) async fn headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    let set = |h: &mut http::HeaderMap, name: &'static str, value: &'static str| {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    };
    set(
        h,
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(h, "x-frame-options", "DENY");
    set(h, "x-content-type-options", "nosniff");
    // same-origin, not no-referrer: under no-referrer a browser sends `Origin: null`
    // with the console's own form posts, which the guard refuses as cross-origin.
    set(h, "referrer-policy", "same-origin");
    set(h, "cache-control", "no-store");
    res
}

/// Lets a request through only with a session (and, for a POST, its anti-forgery
/// token); hands the session to the handler as an extension.
///
/// With `ADMIN_TOKEN`: no session → a GET is sent to the login form, anything
/// else is 403. Without: a visitor with no session gets a new one on a GET.
pub(crate) async fn gate(State(console): State<Console>, req: Request, next: Next) -> Response {
    let token_set = console.app.admin_token.secret().is_some();
    if let Err(refused) = console.app.guard.check(req.headers(), token_set) {
        return crate::api::problem::Problem::from(refused).into_response();
    }
    let mut created = None;
    let session = match console.sessions.find(req.headers()) {
        Some(s) => s,
        None if req.method() == Method::GET && console.is_open() => {
            match console.sessions.create() {
                Ok(s) => {
                    created = Some(s.id.clone());
                    s
                }
                Err(_) => {
                    return pages::failure(StatusCode::INTERNAL_SERVER_ERROR, "no randomness");
                }
            }
        }
        None if req.method() == Method::GET => {
            let next_page = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "/console".into());
            let target = format!(
                "/console/login?next={}",
                url::form_urlencoded::byte_serialize(next_page.as_bytes()).collect::<String>()
            );
            return Redirect::to(&target).into_response();
        }
        None => return forbidden("this action needs a console session: log in again"),
    };
    let secure = session::behind_https(req.headers());
    let mut req = req;
    if req.method() == Method::POST {
        let Ok((checked, fields)) = csrf::read_form(req).await else {
            return forbidden("unreadable form");
        };
        if !csrf::matches(&fields, &session.csrf) {
            return forbidden("the form's anti-forgery token (csrf) is missing or wrong");
        }
        req = checked;
    }
    req.extensions_mut().insert(session);
    let mut res = next.run(req).await;
    if let Some(id) = created {
        res.headers_mut()
            .append(header::SET_COOKIE, session::set_cookie(&id, secure));
    }
    res
}

fn forbidden(why: &str) -> Response {
    pages::failure(StatusCode::FORBIDDEN, why)
}

/// The session the [`gate`] let through.
pub(crate) type Visitor = axum::Extension<Session>;
