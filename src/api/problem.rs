//! RFC 9457 problem details: every error hookbox answers is one of these.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;

/// An RFC 9457 problem with hookbox's extra `code` member.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`urn:hookbox:problem:<code>`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind (the status's reason phrase).
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// Stable machine-readable code (`invalid_body`, `overloaded`, …).
    pub code: &'static str,
    #[serde(skip)]
    retry_after: Option<u64>,
}

use crate::inbox::InboxError;
use crate::store::StoreError;
/// Marks a response as a problem, with its code, so that layers (metrics) can read it
/// without parsing the body; the layers' own rejections carry the same marker.
pub(crate) use hookbox_layers::rejection::ProblemCode;
use hookbox_layers::rejection::Rejection;

impl Problem {
    /// A problem with the status's reason phrase as title and detail.
    pub fn new(status: StatusCode, code: &'static str) -> Self {
        let title = status.canonical_reason().unwrap_or("Error").to_owned();
        Self {
            kind: format!("urn:hookbox:problem:{code}"),
            detail: title.clone(),
            title,
            status: status.as_u16(),
            code,
            retry_after: None,
        }
    }

    /// Sets the human-readable explanation.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Adds a `Retry-After: <seconds>` header to the answer.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// 400 `invalid_body`.
    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_body").detail(detail)
    }

    /// 404 `not_found`.
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found").detail(format!("{what} not found"))
    }

    /// 503 `unavailable`: the store could not be reached; nothing was accepted.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            .detail(detail)
            .retry_after(1)
    }

    /// 500 `internal`, logging the cause (which is never shown to the caller).
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal")
            .detail("internal error; see the server log")
    }
}

/// A store's failure as a 503 `unavailable`: the database's text goes to the log,
/// never to the caller (it may name tables, columns or the server's address).
impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "the store failed; answering 503");
        Self::unavailable("the database is unavailable; retry")
    }
}

/// The inbox's failure: the store's as [`From<StoreError>`]; anything else (the
/// routing table could not be rebuilt, the commit task ended abnormally) as 500.
impl From<InboxError> for Problem {
    fn from(e: InboxError) -> Self {
        match e {
            InboxError::Store(e) => e.into(),
            other => Self::internal(&other),
        }
    }
}

/// A layer's rejection as hookbox's problem: the same status, code, detail and
/// `Retry-After`, so it renders the same bytes.
impl From<Rejection> for Problem {
    fn from(r: Rejection) -> Self {
        let problem = Self::new(r.status, r.code).detail(r.detail);
        match r.retry_after {
            Some(secs) => problem.retry_after(secs),
            None => problem,
        }
    }
}

/// A problem as a layer's rejection (what an idempotency store answers with).
impl From<Problem> for Rejection {
    fn from(p: Problem) -> Self {
        let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let rejection = Self::new(status, p.code).detail(p.detail);
        match p.retry_after {
            Some(secs) => rejection.retry_after(secs),
            None => rejection,
        }
    }
}

/// Rendered by the layers' [`Rejection`], so that both answer the same bytes.
impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        Rejection::from(self)
            .into_response()
            .map(axum::body::Body::new)
    }
}

impl From<crate::guard::Refusal> for Problem {
    fn from(r: crate::guard::Refusal) -> Self {
        let problem = Self::new(r.status, r.code).detail(r.detail);
        match r.retry_after {
            Some(seconds) => problem.retry_after(seconds),
            None => problem,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookbox_layers::rejection::Rejection;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::api::problem::Problem;
        use axum::response::IntoResponse;
        use http::StatusCode;

        let res = Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event_type")
            .detail("event_type must not be empty")
            .into_response();
        assert_eq!(res.status(), 422);
        assert_eq!(res.headers()["content-type"], "application/problem+json");
    }

    async fn rendered(res: Response) -> (StatusCode, Vec<(String, String)>, Vec<u8>) {
        let status = res.status();
        let mut headers: Vec<_> = res
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        headers.sort();
        let code = res.extensions().get::<ProblemCode>().copied();
        assert!(code.is_some(), "the code marker is set");
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, headers, body.to_vec())
    }

    /// The layers' rejections (hookbox-layers) and hookbox's problems must be
    /// indistinguishable to a client: same status, headers and body bytes.
    #[tokio::test]
    async fn a_layer_rejection_renders_exactly_like_the_problem() {
        let cases = [
            Rejection::new(StatusCode::TOO_MANY_REQUESTS, "overloaded")
                .detail("the work queue is full; nothing was stored — retry later")
                .retry_after(2),
            Rejection::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
                .detail("the request body is larger than 10 bytes"),
            Rejection::new(StatusCode::CONFLICT, "idempotency_key_in_flight"),
            Rejection::new(StatusCode::BAD_REQUEST, "invalid_body").detail("a \"quoted\"\n\u{1}"),
        ];
        for rejection in cases {
            let layer = rejection.clone().into_response().map(axum::body::Body::new);
            let problem = Problem::from(rejection.clone()).into_response();
            assert_eq!(rendered(layer).await, rendered(problem).await);
            let round = Rejection::from(Problem::from(rejection.clone()));
            assert_eq!(round, rejection);
        }
    }
}
