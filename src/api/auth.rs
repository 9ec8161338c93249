//! Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant
//! time. Without `ADMIN_TOKEN` the admin routes are open (a single-machine default;
//! set a token before exposing hookbox).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::api::problem::Problem;
use crate::state::AdminToken;

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

/// Middleware for routes that are admin-only as a whole.
pub(crate) async fn admin_only(
    State(admin): State<AdminToken>,
    req: Request,
    next: Next,
) -> Result<Response, Problem> {
    require_admin(&admin, req.headers())?;
    Ok(next.run(req).await)
}
