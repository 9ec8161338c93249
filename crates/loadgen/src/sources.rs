//! Posting as a provider to a `kind = "github"` source: the payload alone as the body,
//! signed in `X-Hub-Signature-256`.

use bytes::Bytes;
use hyper::header::HeaderValue;

use crate::BoxError;
use crate::post::event_body;

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `body`): GitHub's signature header.
pub(crate) fn github_signature(secret: &str, body: &[u8]) -> Result<HeaderValue, BoxError> {
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .map_err(|e| format!("HMAC key: {e}"))?;
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(HeaderValue::from_str(&format!("sha256={hex}"))?)
}

/// The body a provider sends: the payload alone (`event_body`'s `payload`).
pub(crate) fn provider_body(run_id: &str, payload_bytes: usize) -> Result<Bytes, BoxError> {
    let envelope: serde_json::Value =
        serde_json::from_slice(&event_body("-", run_id, payload_bytes)?)?;
    Ok(Bytes::from(serde_json::to_vec(&envelope["payload"])?))
}
