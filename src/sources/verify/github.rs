//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
//!
//! The event type is the `X-GitHub-Event` header and the delivery id the
//! `X-GitHub-Delivery` header (a redelivery keeps its id).

use super::hmac::Scheme;
use super::{Algorithm, Encoding};

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-hub-signature-256";

/// The scheme in the engine's terms: the generic HMAC one over the body.
pub(crate) fn scheme() -> Scheme {
    Scheme::body(
        http::HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Hex,
        "sha256=",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::sources::verify::{Incoming, Rejection};

    fn verify(req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
        scheme().verify(req, secrets)
    }

    fn incoming<'a>(headers: &'a http::HeaderMap, body: &'a [u8]) -> Incoming<'a> {
        Incoming {
            headers,
            body,
            now: 0,
        }
    }

    /// The example of GitHub's "Validating webhook deliveries" page.
    #[test]
    fn githubs_published_example_verifies() {
        let mut h = http::HeaderMap::new();
        h.insert(
            SIGNATURE,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
                .parse()
                .unwrap(),
        );
        let secret = Secret::new("It's a Secret to Everybody");
        assert!(
            verify(
                &incoming(&h, b"Hello, World!"),
                std::slice::from_ref(&secret)
            )
            .is_ok()
        );
        // Rotation: a wrong secret first, the right one second.
        assert!(
            verify(
                &incoming(&h, b"Hello, World!"),
                &[Secret::new("old"), secret.clone()]
            )
            .is_ok()
        );
        assert_eq!(
            verify(
                &incoming(&h, b"Hello, World! "),
                std::slice::from_ref(&secret)
            ),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
        assert_eq!(
            verify(
                &incoming(&http::HeaderMap::new(), b"Hello, World!"),
                &[secret]
            ),
            Err(Rejection::Missing(SIGNATURE.into()))
        );
    }

    #[test]
    fn sha1_header_alone_is_not_enough() {
        let mut h = http::HeaderMap::new();
        h.insert("x-hub-signature", "sha1=0123".parse().unwrap());
        assert_eq!(
            verify(&incoming(&h, b"x"), &[Secret::new("s")])
                .unwrap_err()
                .reason(),
            "signature"
        );
    }
}
