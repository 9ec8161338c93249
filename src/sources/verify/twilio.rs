//! Twilio: `X-Twilio-Signature`, the base64 HMAC-SHA1 (keyed with the auth token)
//! of the URL Twilio was given (`public_url`) followed by every form field sorted
//! by name, each as `{name}{value}`.
//!
//! Events are `message.{MessageStatus}` or `call.{CallStatus}`, keyed by
//! `I-Twilio-Idempotency-Token`, else the `MessageSid` / `CallSid`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Algorithm, Incoming, Rejection, any_matches};
use crate::config::Secret;

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-twilio-signature";

/// Verifies the signature against every secret.
pub(crate) fn verify(req: &Incoming<'_>, url: &str, secrets: &[Secret]) -> Result<(), Rejection> {
    let sig = req.require(SIGNATURE)?;
    let given = STANDARD
        .decode(sig.trim())
        .map_err(|_| Rejection::Malformed(format!("{SIGNATURE} is not base64")))?;
    let mut fields: Vec<(String, String)> =
        serde_urlencoded::from_bytes(req.body).unwrap_or_default();
    fields.sort();
    let mut signed = url.as_bytes().to_vec();
    for (name, value) in &fields {
        signed.extend_from_slice(name.as_bytes());
        signed.extend_from_slice(value.as_bytes());
    }
    if any_matches(Algorithm::Sha1, secrets, &[&signed], &[given]) {
        Ok(())
    } else {
        Err(Rejection::Mismatch(SIGNATURE.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twilio's published example ("Validating signatures from Twilio"): auth
    /// token `12345`, URL `https://mycompany.com/myapp.php?foo=1&bar=2`, five
    /// fields, signature `0/KCTR6DLpKmkAf8muzZqo1nDgQ=`.
    #[test]
    fn twilios_published_example_verifies() {
        let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
        let body = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
        let mut h = http::HeaderMap::new();
        h.insert(SIGNATURE, "0/KCTR6DLpKmkAf8muzZqo1nDgQ=".parse().unwrap());
        let req = Incoming {
            headers: &h,
            body,
            now: 0,
        };
        assert_eq!(verify(&req, url, &[Secret::new("12345")]), Ok(()));
        assert!(verify(&req, "https://mycompany.com/other", &[Secret::new("12345")]).is_err());
        assert!(verify(&req, url, &[Secret::new("54321")]).is_err());
    }
}
