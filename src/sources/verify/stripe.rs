//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 of
//! `{t}.{body}` keyed with the whole secret string (`whsec_…` as it is).
//!
//! Schemes other than `v1` (Stripe's test-mode `v0`) are ignored: a header with only
//! those has no signature to check. Several `v1` entries appear while Stripe rolls
//! an endpoint secret; any may match. The event type is the body's `/type` and the
//! delivery id its `/id` (`evt_…`).

use std::time::Duration;

use super::hmac::{Part, Scheme, Stamp, StampAt, StampFormat};
use super::{Algorithm, Encoding};

/// The signature header.
pub(crate) const SIGNATURE: &str = "stripe-signature";

/// Stripe's scheme in the engine's terms: the `v1` values of the header's list,
/// hex, over `{t}.{body}`, `t` held to `tolerance` (checked after the signature,
/// so a forged timestamp cannot probe the clock).
pub(crate) fn scheme(tolerance: Option<Duration>) -> Scheme {
    Scheme {
        signature_field: Some("v1".into()),
        signed: vec![Part::Timestamp, Part::Text(".".into()), Part::Body],
        timestamp: Some(Stamp {
            at: StampAt::Field("t".into()),
            format: StampFormat::Unix,
            tolerance,
        }),
        ..Scheme::body(
            http::HeaderName::from_static(SIGNATURE),
            Algorithm::Sha256,
            Encoding::Hex,
            "",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::sources::verify::{Incoming, Rejection};

    // Expected values computed independently with Python's hmac module:
    // hmac.new(b"whsec_test_secret", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    const BODY: &[u8] = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
    const V1: &str = "c0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672";

    fn check(header: &str, body: &[u8], now: i64) -> Result<(), Rejection> {
        let mut h = http::HeaderMap::new();
        h.insert(SIGNATURE, header.parse().unwrap());
        let req = Incoming {
            headers: &h,
            body,
            now,
        };
        scheme(Some(Duration::from_secs(300))).verify(
            &req,
            &[Secret::new("whsec_other"), Secret::new("whsec_test_secret")],
        )
    }

    #[test]
    fn v1_verifies_among_other_schemes_and_rolled_signatures() {
        assert!(check(&format!("t=1700000000,v1={V1}"), BODY, 1_700_000_000).is_ok());
        assert!(
            check(
                &format!("t=1700000000,v0=00,v1={},v1={V1}", "ab".repeat(32)),
                BODY,
                1_700_000_100
            )
            .is_ok()
        );
    }

    #[test]
    fn refuses_v0_only_changed_bodies_and_old_or_future_timestamps() {
        assert_eq!(
            check(&format!("t=1700000000,v0={V1}"), BODY, 1_700_000_000)
                .unwrap_err()
                .reason(),
            "signature",
            "other schemes are ignored: no v1 is no signature"
        );
        assert_eq!(
            check(&format!("t=1700000000,v1={V1}"), b"{}", 1_700_000_000)
                .unwrap_err()
                .reason(),
            "signature"
        );
        assert_eq!(
            check(&format!("t=1700000001,v1={V1}"), BODY, 1_700_000_000)
                .unwrap_err()
                .reason(),
            "signature"
        );
        assert_eq!(
            check(&format!("t=1700000000,v1={V1}"), BODY, 1_700_000_301)
                .unwrap_err()
                .reason(),
            "timestamp"
        );
        assert_eq!(
            check(&format!("t=1700000000,v1={V1}"), BODY, 1_699_999_699)
                .unwrap_err()
                .reason(),
            "timestamp"
        );
    }
}
