//! Discord interactions: `X-Signature-Ed25519` (hex) over
//! `{X-Signature-Timestamp}{body}`, checked with the application's public key
//! (hex, the source's secret), the timestamp held to the source's tolerance.
//!
//! A verified PING (`{"type": 1}`) is answered `{"type": 1}` and not stored; other
//! interactions are events `interaction.{type}` keyed by their `/id`.

use std::time::Duration;

use ed25519_dalek::{Signature, VerifyingKey};

use super::{Incoming, Rejection, from_hex, timestamped_signature};

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-signature-ed25519";
/// The signed timestamp's header.
pub(crate) const TIMESTAMP: &str = "x-signature-timestamp";

/// Parses the application public keys (hex of 32 bytes, space separated).
pub(crate) fn keys(text: &str) -> Result<Vec<VerifyingKey>, String> {
    text.split_whitespace()
        .enumerate()
        .map(|(n, item)| {
            from_hex(item)
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .and_then(|b| VerifyingKey::from_bytes(&b).ok())
                .ok_or_else(|| {
                    format!(
                        "secret number {} is not the hex of an ed25519 public key",
                        n + 1
                    )
                })
        })
        .collect()
}

/// Verifies the signature with every key, then the timestamp.
pub(crate) fn verify(
    req: &Incoming<'_>,
    keys: &[VerifyingKey],
    tolerance: Option<Duration>,
) -> Result<(), Rejection> {
    let decode = |hex: &str| from_hex(hex).and_then(|b| Signature::from_slice(&b).ok());
    timestamped_signature(
        req,
        (SIGNATURE, TIMESTAMP),
        tolerance,
        (decode, "a hex ed25519 signature"),
        // Every key is tried: the time taken does not tell which one matched.
        |signed, sig| {
            keys.iter().fold(false, |found, k| {
                found | k.verify_strict(signed, sig).is_ok()
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;

    /// Signed with ed25519-dalek's own signer, as Discord signs.
    #[test]
    fn a_signed_interaction_verifies_and_a_changed_one_does_not() {
        let app = SigningKey::from_bytes(&[3u8; 32]);
        let hex: String = app
            .verifying_key()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let keys = keys(&hex).unwrap();
        let body = br#"{"type":1}"#;
        let sig = app.sign(&[b"1700000000".as_slice(), body].concat());
        let sig_hex: String = sig.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let mut h = http::HeaderMap::new();
        h.insert(TIMESTAMP, "1700000000".parse().unwrap());
        h.insert(SIGNATURE, sig_hex.parse().unwrap());
        let tol = Some(Duration::from_secs(300));
        let req = Incoming {
            headers: &h,
            body,
            now: 1_700_000_000,
        };
        assert_eq!(verify(&req, &keys, tol), Ok(()));
        let changed = Incoming {
            body: br#"{"type":2}"#,
            ..req
        };
        assert_eq!(
            verify(&changed, &keys, tol),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
        let late = Incoming {
            now: 1_700_000_000 + 3600,
            ..req
        };
        assert_eq!(verify(&late, &keys, tol).unwrap_err().reason(), "timestamp");
        assert!(super::keys("zz").is_err());
    }
}
