//! The answer a layer gives when it does not call the inner service: an RFC 9457
//! problem (`application/problem+json`) that the layer builds itself, so no
//! `HandleErrorLayer` is needed and the layer keeps the inner service's error type.
//!
//! ```
//! use hookbox_layers::rejection::{ProblemCode, Rejection};
//! use http::StatusCode;
//!
//! let res = Rejection::new(StatusCode::TOO_MANY_REQUESTS, "overloaded")
//!     .detail("try again soon")
//!     .retry_after(2)
//!     .into_response();
//! assert_eq!(res.status(), 429);
//! assert_eq!(res.headers()["content-type"], "application/problem+json");
//! assert_eq!(res.headers()["retry-after"], "2");
//! // Outer layers can read the code without parsing the body.
//! assert_eq!(res.extensions().get::<ProblemCode>().unwrap().0, "overloaded");
//! ```
//!
//! The body is `{"type","title","status","detail","code"}`, with `type`
//! `urn:hookbox:problem:<code>` and `title` the status's reason phrase.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde::Serialize;

/// The media type of a rejection.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The prefix of a rejection's `type` URI; the code follows it.
pub const TYPE_PREFIX: &str = "urn:hookbox:problem:";

/// Marks a response as a problem, with its stable code, so that outer layers (metrics,
/// rejection counters) can read it without parsing the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemCode(pub &'static str);

/// A problem answer: status, stable machine-readable code, a human-readable detail
/// and, optionally, `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`overloaded`, `payload_too_large`, …).
    pub code: &'static str,
    /// What went wrong with this request.
    pub detail: String,
    /// Seconds for a `Retry-After` header, if any.
    pub retry_after: Option<u64>,
}

/// The body, in the member order clients see.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    code: &'a str,
}

impl Rejection {
    /// A rejection whose detail is the status's reason phrase until [`Rejection::detail`]
    /// sets one.
    pub fn new(status: StatusCode, code: &'static str) -> Self {
        Self {
            status,
            code,
            detail: reason(status).to_owned(),
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

    /// The problem+json response, carrying [`ProblemCode`] in its extensions.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let body = Body {
            kind: format!("{TYPE_PREFIX}{}", self.code),
            title: reason(self.status),
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut res = Response::new(Full::new(Bytes::from(bytes)));
        *res.status_mut() = self.status;
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res.extensions_mut().insert(ProblemCode(self.code));
        res
    }
}

/// The status's reason phrase, or `Error`.
fn reason(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_problem_members_in_order() {
        let res = Rejection::new(StatusCode::CONFLICT, "busy").into_response();
        let body = res.into_body();
        let bytes = futures_ready(body);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"type":"urn:hookbox:problem:busy","title":"Conflict","status":409,"detail":"Conflict","code":"busy"}"#
        );
    }

    /// A `Full` body's one frame, without a runtime.
    fn futures_ready(body: Full<Bytes>) -> Bytes {
        use http_body::Body as _;
        let mut body = std::pin::pin!(body);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match body.as_mut().poll_frame(&mut cx) {
            std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap(),
            _ => Bytes::new(),
        }
    }
}
