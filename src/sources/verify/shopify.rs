//! Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the body>`.
//!
//! The event type is the `X-Shopify-Topic` header (`orders/create`) and the delivery
//! id the `X-Shopify-Webhook-Id` header.

use super::hmac::Scheme;
use super::{Algorithm, Encoding};

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-shopify-hmac-sha256";

/// The scheme in the engine's terms: the generic HMAC one over the body.
pub(crate) fn scheme() -> Scheme {
    Scheme::body(
        http::HeaderName::from_static(SIGNATURE),
        Algorithm::Sha256,
        Encoding::Base64,
        "",
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

    /// Expected value from Python:
    /// base64.b64encode(hmac.new(b"shpss_secret", BODY, hashlib.sha256).digest())
    #[test]
    fn verifies_the_base64_mac_of_the_body() {
        let body = br#"{"id":1,"topic":"orders/create"}"#;
        let mut h = http::HeaderMap::new();
        h.insert(
            SIGNATURE,
            "7CJMkwk95NxCIZ/lDNFtYTXok569L4I5Jub461+LJGU="
                .parse()
                .unwrap(),
        );
        let req = Incoming {
            headers: &h,
            body,
            now: 0,
        };
        assert!(verify(&req, &[Secret::new("shpss_secret")]).is_ok());
        assert_eq!(
            verify(&req, &[Secret::new("other")]),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
        let changed = Incoming { body: b"{}", ..req };
        assert!(verify(&changed, &[Secret::new("shpss_secret")]).is_err());
    }
}
