//! Mailgun: the body's `/signature/{timestamp, token, signature}`, the hex
//! HMAC-SHA256 (keyed with the webhook signing key) of `{timestamp}{token}`, the
//! timestamp held to the source's tolerance, and a token seen before refused
//! (tokens are remembered for the tolerance window, per instance).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Algorithm, Incoming, Rejection, any_matches, check_timestamp, from_hex};
use crate::config::Secret;

/// The tokens seen, with when they were signed (unix seconds).
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<HashMap<String, i64>>>);

/// Verifies the body's signature, its age, and that its token is new.
pub(crate) fn verify(
    req: &Incoming<'_>,
    secrets: &[Secret],
    tolerance: Option<Duration>,
    seen: &Seen,
) -> Result<(), Rejection> {
    let missing = || Rejection::Missing("body's /signature".into());
    let body: serde_json::Value = serde_json::from_slice(req.body).map_err(|_| missing())?;
    let part = |name: &str| {
        body["signature"][name]
            .as_str()
            .map(str::to_owned)
            .or_else(|| body["signature"][name].as_i64().map(|n| n.to_string()))
            .ok_or_else(missing)
    };
    let (ts, token, sig) = (part("timestamp")?, part("token")?, part("signature")?);
    let given = from_hex(&sig)
        .ok_or_else(|| Rejection::Malformed("/signature/signature is not hex".into()))?;
    if !any_matches(
        Algorithm::Sha256,
        secrets,
        &[ts.as_bytes(), token.as_bytes()],
        &[given],
    ) {
        return Err(Rejection::Mismatch("body's /signature/signature".into()));
    }
    let signed_at = check_timestamp(&ts, req.now, tolerance)?;
    let window = tolerance.map_or(i64::MAX, |t| i64::try_from(t.as_secs()).unwrap_or(i64::MAX));
    let mut tokens = seen.0.lock().unwrap_or_else(|e| e.into_inner());
    tokens.retain(|_, at| req.now.saturating_sub(*at) <= window);
    if tokens.insert(token, signed_at).is_some() {
        return Err(Rejection::Mismatch(
            "body's /signature/token (seen before)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, KeyInit, Mac};

    use super::*;

    fn body(ts: i64, token: &str, key: &str) -> Vec<u8> {
        let mut m = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
        m.update(format!("{ts}{token}").as_bytes());
        let sig: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        serde_json::json!({
            "signature": {"timestamp": ts.to_string(), "token": token, "signature": sig},
            "event-data": {"event": "delivered", "id": "e1"}
        })
        .to_string()
        .into_bytes()
    }

    /// Signed here with the hmac crate, as Mailgun documents it.
    #[test]
    fn a_signed_event_verifies_once() {
        let h = http::HeaderMap::new();
        let seen = Seen::default();
        let tol = Some(Duration::from_secs(300));
        let key = [Secret::new("key-mailgun")];
        let ok = body(1_700_000_000, "tok-1", "key-mailgun");
        let req = Incoming {
            headers: &h,
            body: &ok,
            now: 1_700_000_010,
        };
        assert_eq!(verify(&req, &key, tol, &seen), Ok(()));
        assert_eq!(
            verify(&req, &key, tol, &seen).unwrap_err().reason(),
            "signature",
            "a replay"
        );
        let other = body(1_700_000_000, "tok-2", "another-key");
        let req = Incoming {
            headers: &h,
            body: &other,
            now: 1_700_000_010,
        };
        assert!(verify(&req, &key, tol, &seen).is_err());
        let old = body(1_699_990_000, "tok-3", "key-mailgun");
        let req = Incoming {
            headers: &h,
            body: &old,
            now: 1_700_000_010,
        };
        assert_eq!(
            verify(&req, &key, tol, &seen).unwrap_err().reason(),
            "timestamp"
        );
    }
}
