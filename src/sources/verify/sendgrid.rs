//! SendGrid's Event Webhook: `X-Twilio-Email-Event-Webhook-Signature`, an ECDSA
//! P-256 / SHA-256 signature (DER, base64) of `{timestamp}{body}`, with
//! `X-Twilio-Email-Event-Webhook-Timestamp`; the source's secret is the
//! verification key SendGrid shows (base64 of its DER public key). Its bodies are
//! arrays of events: a SendGrid source splits them by default.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;

use super::{Incoming, Rejection, timestamped_signature};

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-twilio-email-event-webhook-signature";
/// The signed timestamp's header.
pub(crate) const TIMESTAMP: &str = "x-twilio-email-event-webhook-timestamp";

/// Parses the verification keys (base64 DER public keys, space separated).
pub(crate) fn keys(text: &str) -> Result<Vec<VerifyingKey>, String> {
    text.split_whitespace()
        .enumerate()
        .map(|(n, item)| {
            STANDARD
                .decode(item)
                .ok()
                .and_then(|der| VerifyingKey::from_public_key_der(&der).ok())
                .ok_or_else(|| {
                    format!(
                        "secret number {} is not a base64 DER P-256 public key",
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
    let decode = |b64: &str| {
        STANDARD
            .decode(b64)
            .ok()
            .and_then(|der| Signature::from_der(&der).ok())
    };
    timestamped_signature(
        req,
        (SIGNATURE, TIMESTAMP),
        tolerance,
        (decode, "a base64 DER ECDSA signature"),
        |signed, sig| {
            keys.iter()
                .fold(false, |found, k| found | k.verify(signed, sig).is_ok())
        },
    )
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::EncodePublicKey;

    use super::*;

    /// Signed with the p256 crate's own signer, as SendGrid signs.
    #[test]
    fn a_signed_batch_verifies_and_a_changed_one_does_not() {
        let sender = SigningKey::from_slice(&[9u8; 32]).unwrap();
        let der = sender.verifying_key().to_public_key_der().unwrap();
        let keys = keys(&STANDARD.encode(der.as_bytes())).unwrap();
        let body = b"[{\"event\":\"delivered\",\"sg_event_id\":\"a\"}]\r\n";
        let sig: Signature = sender.sign(&[b"1700000000".as_slice(), body].concat());
        let mut h = http::HeaderMap::new();
        h.insert(TIMESTAMP, "1700000000".parse().unwrap());
        h.insert(
            SIGNATURE,
            STANDARD.encode(sig.to_der().as_bytes()).parse().unwrap(),
        );
        let tol = Some(Duration::from_secs(300));
        let req = Incoming {
            headers: &h,
            body,
            now: 1_700_000_000,
        };
        assert_eq!(verify(&req, &keys, tol), Ok(()));
        // Without the trailing CRLF the bytes differ: the signature covers them.
        let trimmed = Incoming {
            body: &body[..body.len() - 2],
            ..req
        };
        assert_eq!(
            verify(&trimmed, &keys, tol),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
        let late = Incoming {
            now: 1_700_000_000 + 3600,
            ..req
        };
        assert_eq!(verify(&late, &keys, tol).unwrap_err().reason(), "timestamp");
        assert!(super::keys("bm9wZQ==").is_err());
    }

    /// Verifies `body` as SendGrid sent it, with its published key and signature.
    fn published(key: &str, signature: &str, ts: &str, body: &[u8]) -> Result<(), Rejection> {
        let mut h = http::HeaderMap::new();
        h.insert(TIMESTAMP, ts.parse().unwrap());
        h.insert(SIGNATURE, signature.parse().unwrap());
        let req = Incoming {
            headers: &h,
            body,
            now: ts.parse().unwrap(),
        };
        verify(&req, &keys(key).unwrap(), Some(Duration::from_secs(300)))
    }

    /// SendGrid's published vectors (its libraries' test suites): the first
    /// signs a compact object; the second a real event batch as SendGrid posts it,
    /// which verifies only with the body's trailing CRLF.
    #[test]
    fn sendgrids_published_vectors_verify() {
        let first = published(
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==",
            "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=",
            "1588788367",
            br#"{"category":"example_payload","event":"test_event","message_id":"message_id"}"#,
        );
        assert_eq!(first, Ok(()));
        let key = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
        let sig = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
        let batch = concat!(
            r#"[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address","#,
            r#""sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","#,
            r#""sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","#,
            r#""smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]"#,
            "\r\n"
        );
        assert_eq!(published(key, sig, "1600112502", batch.as_bytes()), Ok(()));
        let trimmed = batch.trim_end().as_bytes();
        assert!(
            published(key, sig, "1600112502", trimmed).is_err(),
            "without the CRLF"
        );
        assert!(
            published(key, sig, "1600112503", batch.as_bytes()).is_err(),
            "another timestamp"
        );
    }
}
