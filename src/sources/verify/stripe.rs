//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 of
//! `{t}.{body}` keyed with the whole secret string (`whsec_…` as it is).
//!
//! Schemes other than `v1` (Stripe's test-mode `v0`) are ignored: a header with only
//! those has no signature to check. Several `v1` entries appear while Stripe rolls
//! an endpoint secret; any may match. The event type is the body's `/type` and the
//! delivery id its `/id` (`evt_…`).

use std::time::Duration;

use super::{Algorithm, Incoming, Rejection, any_matches, check_timestamp, from_hex};
use crate::config::Secret;

/// The signature header.
pub(crate) const SIGNATURE: &str = "stripe-signature";

/// Verifies the timestamp and the `v1` signatures against every secret.
pub(crate) fn verify(
    req: &Incoming<'_>,
    secrets: &[Secret],
    tolerance: Option<Duration>,
) -> Result<(), Rejection> {
    let header = req.require(SIGNATURE)?;
    let mut timestamp = None;
    let mut given = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", sig)) => given.extend(from_hex(sig)),
            _ => {} // v0 and any future scheme: not ours to check
        }
    }
    let t = timestamp.ok_or_else(|| Rejection::Malformed(format!("{SIGNATURE} has no t=")))?;
    if given.is_empty() {
        return Err(Rejection::Malformed(format!(
            "{SIGNATURE} has no v1 signature"
        )));
    }
    if !any_matches(
        Algorithm::Sha256,
        secrets,
        &[t.as_bytes(), b".", req.body],
        &given,
    ) {
        return Err(Rejection::Mismatch(SIGNATURE.into()));
    }
    // Checked after the signature, so a forged timestamp cannot probe the clock.
    check_timestamp(t, req.now, tolerance).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        verify(
            &req,
            &[Secret::new("whsec_other"), Secret::new("whsec_test_secret")],
            Some(Duration::from_secs(300)),
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
            "other"
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
