//! Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the body>`.
//!
//! The event type is the `X-Shopify-Topic` header (`orders/create`) and the delivery
//! id the `X-Shopify-Webhook-Id` header.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Algorithm, Incoming, Rejection, any_matches};
use crate::config::Secret;

/// The signature header.
pub const SIGNATURE: &str = "x-shopify-hmac-sha256";

/// Verifies the body's signature against every secret.
pub fn verify(req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
    let header = req.require(SIGNATURE)?;
    let given = STANDARD
        .decode(header.trim())
        .map_err(|_| Rejection::Malformed(format!("{SIGNATURE} is not base64")))?;
    if any_matches(Algorithm::Sha256, secrets, &[req.body], &[given]) {
        Ok(())
    } else {
        Err(Rejection::Mismatch(SIGNATURE.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
