//! Posting as a provider to a source (`ingest --source NAME --kind KIND`): the
//! provider's own body, signed as the provider signs it.
//!
//! - `github` (HMAC-SHA256): one body, signed once; each request's delivery id is
//!   its own `X-GitHub-Delivery` header.
//! - `discord` (ed25519) and `sendgrid` (ECDSA P-256): the delivery id is in the
//!   body, which the signature covers, so each request has a body and signature
//!   of its own — made before the run ([`presign`]), so that signing costs the
//!   measured run nothing. The keys are fixed ([`source_keys`] prints the public
//!   halves for hookbox's manifests).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hyper::HeaderMap;
use hyper::header::HeaderValue;

use crate::BoxError;
use crate::post::event_body;

/// The seed of the ed25519 key loadgen signs Discord requests with.
const DISCORD_SEED: [u8; 32] = [7; 32];
/// The scalar of the P-256 key loadgen signs SendGrid requests with.
const SENDGRID_SCALAR: [u8; 32] = [9; 32];

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `body`): GitHub's signature header.
pub(crate) fn github_signature(secret: &str, body: &[u8]) -> Result<HeaderValue, BoxError> {
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .map_err(|e| format!("HMAC key: {e}"))?;
    mac.update(body);
    Ok(HeaderValue::from_str(&format!(
        "sha256={}",
        hex(&mac.finalize().into_bytes())
    ))?)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The body a provider sends: the payload alone (`event_body`'s `payload`).
pub(crate) fn provider_body(run_id: &str, payload_bytes: usize) -> Result<Bytes, BoxError> {
    let envelope: serde_json::Value =
        serde_json::from_slice(&event_body("-", run_id, payload_bytes)?)?;
    Ok(Bytes::from(serde_json::to_vec(&envelope["payload"])?))
}

/// `BENCH_DISCORD_KEY=…` and `BENCH_SENDGRID_KEY=…` lines: the public keys of
/// loadgen's signers, as those kinds' `secret_env` values.
pub(crate) fn source_keys() -> Result<String, BoxError> {
    use p256::pkcs8::EncodePublicKey;
    let discord = ed25519_dalek::SigningKey::from_bytes(&DISCORD_SEED).verifying_key();
    let sendgrid = p256::ecdsa::SigningKey::from_slice(&SENDGRID_SCALAR)?;
    let der = sendgrid.verifying_key().to_public_key_der()?;
    Ok(format!(
        "BENCH_DISCORD_KEY={}\nBENCH_SENDGRID_KEY={}\n",
        hex(discord.as_bytes()),
        STANDARD.encode(der.as_bytes())
    ))
}

/// `count` bodies of about `payload_bytes`, each with its own delivery id, and
/// their signature headers as `kind` signs them (timestamp: now).
pub(crate) fn presign(
    kind: &str,
    run_id: &str,
    payload_bytes: usize,
    count: usize,
) -> Result<(Vec<Bytes>, Vec<HeaderMap>), BoxError> {
    let padding = "x".repeat(payload_bytes.saturating_sub(120));
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        .to_string();
    let mut bodies = Vec::with_capacity(count);
    let mut headers = Vec::with_capacity(count);
    for i in 0..count {
        let id = format!("{run_id}-{i}");
        let (body, signature) = match kind {
            "discord" => {
                use ed25519_dalek::Signer;
                let body = serde_json::json!({"type": 2, "id": id, "data": {"padding": padding}});
                let body = serde_json::to_vec(&body)?;
                let key = ed25519_dalek::SigningKey::from_bytes(&DISCORD_SEED);
                let sig = key.sign(&[ts.as_bytes(), &body].concat());
                (body, hex(&sig.to_bytes()))
            }
            "sendgrid" => {
                use p256::ecdsa::signature::Signer;
                let body = serde_json::json!([{"event": "delivered", "sg_event_id": id, "padding": padding}]);
                let body = serde_json::to_vec(&body)?;
                let key = p256::ecdsa::SigningKey::from_slice(&SENDGRID_SCALAR)?;
                let sig: p256::ecdsa::Signature = key.sign(&[ts.as_bytes(), &body].concat());
                (body, STANDARD.encode(sig.to_der().as_bytes()))
            }
            other => {
                return Err(format!("--kind {other}: expected github, discord or sendgrid").into());
            }
        };
        let (sig_header, ts_header) = match kind {
            "discord" => ("x-signature-ed25519", "x-signature-timestamp"),
            _ => (
                "x-twilio-email-event-webhook-signature",
                "x-twilio-email-event-webhook-timestamp",
            ),
        };
        let mut h = HeaderMap::new();
        h.insert(sig_header, HeaderValue::from_str(&signature)?);
        h.insert(ts_header, HeaderValue::from_str(&ts)?);
        bodies.push(Bytes::from(body));
        headers.push(h);
    }
    Ok((bodies, headers))
}
