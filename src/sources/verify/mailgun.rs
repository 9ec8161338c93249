//! Mailgun: the body's `/signature/{timestamp, token, signature}`, the hex
//! HMAC-SHA256 (keyed with the webhook signing key) of `{timestamp}{token}`, the
//! timestamp held to the source's tolerance, and a token seen before refused
//! (tokens are remembered for the tolerance window, per instance; with the
//! tolerance off, for [`UNTIMED_WINDOW`]).
//!
//! A token is remembered when its request verifies and forgotten again when that
//! request is not accepted after all ([`forget`]: a body that does not parse, a
//! transform that throws, a store that is away), so that the sender's retry — or
//! an operator's retry from the rejected log — is not refused as a replay.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Algorithm, Incoming, Rejection, any_matches, check_timestamp, from_hex};
use crate::config::Secret;

/// How long a token is remembered when the source checks no timestamp
/// (`tolerance = "0s"`): a bound on the memory, since nothing else ends a
/// token's life then.
pub(crate) const UNTIMED_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The tokens seen: each with when it may be forgotten (unix seconds), and the
/// same ordered by that time, so that forgetting the expired ones reads only them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<Tokens>>);

#[derive(Debug, Default)]
struct Tokens {
    until: HashMap<String, i64>,
    by_time: BTreeSet<(i64, String)>,
}

impl Tokens {
    /// Forgets the tokens whose time ended before `now`.
    fn expire(&mut self, now: i64) {
        while let Some((until, _)) = self.by_time.first() {
            if *until >= now {
                break;
            }
            if let Some((_, token)) = self.by_time.pop_first() {
                self.until.remove(&token);
            }
        }
    }

    /// Remembers `token` until `until`; false when it was seen already.
    fn insert(&mut self, token: String, until: i64) -> bool {
        if self.until.contains_key(&token) {
            return false;
        }
        self.by_time.insert((until, token.clone()));
        self.until.insert(token, until);
        true
    }

    fn remove(&mut self, token: &str) {
        if let Some(until) = self.until.remove(token) {
            self.by_time.remove(&(until, token.to_owned()));
        }
    }
}

/// The body's `/signature/{timestamp, token, signature}`, as text.
fn signature_parts(body: &[u8]) -> Result<(String, String, String), Rejection> {
    let missing = || Rejection::Missing("body's /signature".into());
    let body: serde_json::Value = serde_json::from_slice(body).map_err(|_| missing())?;
    let part = |name: &str| {
        body["signature"][name]
            .as_str()
            .map(str::to_owned)
            .or_else(|| body["signature"][name].as_i64().map(|n| n.to_string()))
            .ok_or_else(missing)
    };
    Ok((part("timestamp")?, part("token")?, part("signature")?))
}

/// Verifies the body's signature, its age, and that its token is new.
pub(crate) fn verify(
    req: &Incoming<'_>,
    secrets: &[Secret],
    tolerance: Option<Duration>,
    seen: &Seen,
) -> Result<(), Rejection> {
    let (ts, token, sig) = signature_parts(req.body)?;
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
    let window = i64::try_from(tolerance.unwrap_or(UNTIMED_WINDOW).as_secs()).unwrap_or(i64::MAX);
    // A request with this token passes the timestamp check until `signed_at +
    // window` (one dated ahead, later than `now + window`).
    let until = signed_at.max(req.now).saturating_add(window);
    let mut tokens = seen.0.lock().unwrap_or_else(|e| e.into_inner());
    tokens.expire(req.now);
    if !tokens.insert(token, until) {
        return Err(Rejection::Mismatch(
            "body's /signature/token (seen before)".into(),
        ));
    }
    Ok(())
}

/// Forgets the token of `req`, which verified but was not accepted.
pub(crate) fn forget(req: &Incoming<'_>, seen: &Seen) {
    if let Ok((_, token, _)) = signature_parts(req.body) {
        seen.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&token);
    }
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

    #[test]
    fn a_forgotten_token_verifies_again_and_old_ones_expire() {
        let h = http::HeaderMap::new();
        let seen = Seen::default();
        let key = [Secret::new("key-mailgun")];
        let at = |body: &Vec<u8>, now| -> Result<(), Rejection> {
            let req = Incoming {
                headers: &h,
                body,
                now,
            };
            verify(&req, &key, None, &seen)
        };
        let first = body(1_700_000_000, "tok-1", "key-mailgun");
        assert_eq!(at(&first, 1_700_000_000), Ok(()));
        assert!(at(&first, 1_700_000_001).is_err(), "a replay");
        // Verified, then not accepted (the store was away): the retry passes.
        let req = Incoming {
            headers: &h,
            body: &first,
            now: 1_700_000_001,
        };
        forget(&req, &seen);
        assert_eq!(at(&first, 1_700_000_002), Ok(()));
        // Without a tolerance a token is kept for UNTIMED_WINDOW, not forever.
        let day = i64::try_from(UNTIMED_WINDOW.as_secs()).unwrap();
        let later = body(1_700_000_000 + day + 10, "tok-2", "key-mailgun");
        assert_eq!(at(&later, 1_700_000_000 + day + 10), Ok(()));
        let tokens = seen.0.lock().unwrap();
        assert!(!tokens.until.contains_key("tok-1"), "expired");
        assert_eq!(tokens.by_time.len(), 1);
    }
}
