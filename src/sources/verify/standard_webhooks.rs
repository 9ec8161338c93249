//! Standard Webhooks: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>[ v1,<base64>…]`, HMAC-SHA256 of
//! `{id}.{timestamp}.{body}` keyed with the base64-decoded part of a `whsec_` secret.
//!
//! Other schemes in the signature list (`v1a`, asymmetric) are ignored. The event type
//! is the body's `/type` and the delivery id the `webhook-id` header.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Incoming, Rejection, check_timestamp, same};
use crate::signing::Secret;

/// The message id header (also the delivery id).
pub(crate) const ID: &str = "webhook-id";
/// The signed timestamp's header.
pub(crate) const TIMESTAMP: &str = "webhook-timestamp";
/// The signature list's header.
pub(crate) const SIGNATURE: &str = "webhook-signature";

/// Verifies the timestamp and the `v1` signatures against every key.
pub(crate) fn verify(
    req: &Incoming<'_>,
    keys: &[Secret],
    tolerance: Option<Duration>,
) -> Result<(), Rejection> {
    let id = req.require(ID)?;
    let ts_text = req.require(TIMESTAMP)?;
    let header = req.require(SIGNATURE)?;
    let ts: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| Rejection::Timestamp(format!("{TIMESTAMP} is not a number")))?;
    let given: Vec<Vec<u8>> = header
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    if given.is_empty() {
        return Err(Rejection::Malformed(format!(
            "{SIGNATURE} has no v1 signature"
        )));
    }
    let mut found = false;
    for key in keys {
        let expected = key.mac_bytes(id, ts, req.body);
        for g in &given {
            found |= same(&expected, g);
        }
    }
    if !found {
        return Err(Rejection::Mismatch(SIGNATURE.into()));
    }
    check_timestamp(ts_text, req.now, tolerance).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector of the Standard Webhooks reference libraries.
    #[test]
    fn the_reference_vector_verifies() {
        let key = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let mut h = http::HeaderMap::new();
        h.insert(ID, "msg_p5jXN8AQM9LWM0D4loKWxJek".parse().unwrap());
        h.insert(TIMESTAMP, "1614265330".parse().unwrap());
        h.insert(
            SIGNATURE,
            "v1a,ignored v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
                .parse()
                .unwrap(),
        );
        let body = br#"{"test": 2432232314}"#;
        let req = Incoming {
            headers: &h,
            body,
            now: 1_614_265_330,
        };
        let tol = Some(Duration::from_secs(300));
        assert!(verify(&req, std::slice::from_ref(&key), tol).is_ok());
        let later = Incoming {
            now: 1_614_265_330 + 600,
            ..req
        };
        assert_eq!(
            verify(&later, std::slice::from_ref(&key), tol)
                .unwrap_err()
                .reason(),
            "timestamp"
        );
        let earlier = Incoming {
            now: 1_614_265_330 - 600,
            ..req
        };
        assert_eq!(
            verify(&earlier, std::slice::from_ref(&key), tol)
                .unwrap_err()
                .reason(),
            "timestamp"
        );
        let changed = Incoming {
            body: br#"{"test": 2432232315}"#,
            ..req
        };
        assert_eq!(
            verify(&changed, &[key], tol),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
    }
}
