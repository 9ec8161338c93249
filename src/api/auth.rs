//! Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant
//! time. Without `ADMIN_TOKEN` the admin routes are open (a single-machine default;
//! set a token before exposing hookbox).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::api::problem::Problem;
use crate::state::{AdminToken, AppState};

/// Ok when no token is configured or the request carries it.
pub(crate) fn require_admin(admin: &AdminToken, headers: &HeaderMap) -> Result<(), Problem> {
    let Some(token) = admin.secret() else {
        return Ok(());
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    match presented {
        Some(p) if bool::from(p.as_bytes().ct_eq(token.expose().as_bytes())) => Ok(()),
        Some(_) => {
            Err(Problem::new(StatusCode::FORBIDDEN, "forbidden").detail("wrong admin token"))
        }
        None => Err(Problem::new(StatusCode::UNAUTHORIZED, "unauthorized")
            .detail("this route needs Authorization: Bearer <ADMIN_TOKEN>")),
    }
}

/// Middleware for routes that are admin-only as a whole: the guard's origin, host
/// and JSON checks ([`super::guard`]), then the token; a wrong token counts
/// against the client's address, and an address past its failures gets 429.
pub(crate) async fn admin_only(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, Problem> {
    admitted(&app, client_of(&req), req.headers())?;
    Ok(next.run(req).await)
}

/// Every check of an admin route ([`admin_only`]'s): the guard's origin and host,
/// a JSON body, then the token with its throttle. For a handler whose route is
/// open for some requests and admin for others (`GET /webhooks`: a key's lookup
/// is open, the listing is admin).
pub(crate) fn admitted(
    app: &AppState,
    client: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), Problem> {
    app.guard
        .check(headers, app.admin_token.secret().is_some())?;
    crate::guard::json_only(headers)?;
    checked(app, client, headers)
}

/// Whether an open read may show content (SPEC §2): yes without `ADMIN_TOKEN`, or
/// with the token; no without one. A wrong token counts against the client's
/// address as on an admin route — else an open read would answer guesses
/// unthrottled, its full view telling the right token from a wrong one — and an
/// address past its failures gets 429.
pub(crate) fn sees_content(
    app: &AppState,
    client: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<bool, Problem> {
    if app.admin_token.secret().is_none() {
        return Ok(true);
    }
    if !headers.contains_key(header::AUTHORIZATION) {
        return Ok(false);
    }
    match checked(app, client, headers) {
        Ok(()) => Ok(true),
        Err(p) if p.status == StatusCode::TOO_MANY_REQUESTS.as_u16() => Err(p),
        Err(_) => Ok(false),
    }
}

/// [`require_admin`] with the throttle of wrong tokens: 429 while `client` is over
/// its failures; a wrong (not missing) token counts one.
pub(crate) fn checked(
    app: &AppState,
    client: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), Problem> {
    if app.admin_token.secret().is_none() {
        return Ok(());
    }
    app.guard.admit(client)?;
    require_admin(&app.admin_token, headers).inspect_err(|p| {
        if p.status == StatusCode::FORBIDDEN.as_u16() {
            app.guard.failed(client);
        }
    })
}

/// The client's address, as the front door recorded it.
pub(crate) fn client_of<B>(req: &axum::http::Request<B>) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<crate::guard::ClientAddr>()
        .map(|c| c.0)
}
