//! Anti-forgery: every console POST carries its session's token in a form field
//! named `csrf`. The check runs before any handler, so no action can forget it: a
//! POST without the right token is answered 403 and reaches nothing.
//!
//! The token is random per session ([`super::session::Session::csrf`]) and
//! compared in constant time. Another site cannot read it (the pages are not
//! readable cross-origin and cannot be framed), and the `SameSite=Strict` cookie is
//! not sent with its requests anyway: two locks on one door.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use subtle::ConstantTimeEq;

/// Console forms are small; a larger body is refused before it is read whole.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// The form fields of a urlencoded body.
pub(crate) type Fields = Vec<(String, String)>;

/// The value of `name` in `fields` (the first one).
pub(crate) fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// True when `fields` carry `expected` as `csrf`, compared in constant time.
pub(crate) fn matches(fields: &Fields, expected: &str) -> bool {
    field(fields, "csrf")
        .is_some_and(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

/// Reads a request's form body (at most [`MAX_FORM_BYTES`]) and gives back the
/// request with the same bytes, for the handler to read again.
pub(crate) async fn read_form(req: Request) -> Result<(Request, Fields), ()> {
    let (parts, body) = req.into_parts();
    let bytes: Bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(drop)?;
    let fields: Fields = serde_urlencoded::from_bytes(&bytes).map_err(drop)?;
    Ok((Request::from_parts(parts, Body::from(bytes)), fields))
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_matches_example() {
        use crate::console::csrf::matches;
        let fields = vec![("csrf".to_owned(), "abc".to_owned())];
        assert!(matches(&fields, "abc"));
        assert!(!matches(&fields, "abd"));
        assert!(!matches(&vec![], "abc"));
    }
}
