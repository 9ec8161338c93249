//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "{id}.{timestamp}.{body}">`, keyed with the base64 part of a `whsec_` secret.
//! Several secrets (during rotation) give several space-separated signatures.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A signing key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Why a secret was refused (the secret itself is never part of the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a signing secret must be whsec_ followed by base64 (or base64 of 24 bytes or more)")]
pub struct InvalidSecret;

/// Fewer key bytes than the Standard Webhooks specification recommends (24): such a
/// secret is accepted — a sender may have chosen it — and a warning says so.
pub(crate) const RECOMMENDED_KEY_BYTES: usize = 24;

impl Secret {
    /// Parses `whsec_<base64>`. Any key of one byte or more is taken, as the
    /// Standard Webhooks libraries take it: a source verifies with whatever its
    /// sender chose; [`Secret::is_short`] tells a key under the recommended 24
    /// bytes. Without the `whsec_` prefix the base64 must hold 24 bytes or more.
    /// `whsec_c2hvcnQ=` (five bytes) parses and is short; `c2hvcnQ=`, `whsec_`
    /// and text that is not base64 do not parse.
    pub fn parse(text: &str) -> Result<Self, InvalidSecret> {
        let text = text.trim();
        let (b64, prefixed) = match text.strip_prefix("whsec_") {
            Some(b64) => (b64, true),
            None => (text, false),
        };
        let key = STANDARD.decode(b64).map_err(|_| InvalidSecret)?;
        // Without the prefix only a real key's length is taken, so that a
        // placeholder (`test`, `changeme`: base64 too) is not a key by accident.
        let least = if prefixed { 1 } else { RECOMMENDED_KEY_BYTES };
        if key.len() < least {
            return Err(InvalidSecret);
        }
        Ok(Self(key))
    }

    /// Whether the key is shorter than [`RECOMMENDED_KEY_BYTES`].
    pub fn is_short(&self) -> bool {
        self.0.len() < RECOMMENDED_KEY_BYTES
    }

    /// The key as its `whsec_` text carries it (base64), to hide it wherever a
    /// receiver's answer repeats it.
    pub(crate) fn base64(&self) -> String {
        STANDARD.encode(&self.0)
    }

    /// A new secret of 32 random bytes, as its `whsec_` text.
    pub(crate) fn generate() -> Result<String, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        Ok(format!("whsec_{}", STANDARD.encode(key)))
    }

    /// Parses a space-separated list (secret rotation).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, InvalidSecret> {
        let list: Vec<Self> = text
            .split_whitespace()
            .map(Self::parse)
            .collect::<Result<_, _>>()?;
        if list.is_empty() {
            return Err(InvalidSecret);
        }
        Ok(list)
    }

    /// The raw HMAC-SHA256 of `{id}.{timestamp}.{body}` under this key (what a
    /// `v1` signature encodes), for verifying a sender's signature.
    pub fn mac_bytes(&self, id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else {
            unreachable!("HMAC takes keys of any length")
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().to_vec()
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        STANDARD.encode(self.mac_bytes(id, timestamp, body))
    }
}

/// Logs one warning when hookbox would sign with a key shorter than the
/// recommended 24 bytes; `whose` names where it came from (a subscriber, a
/// manifest's `secret_env` variable), never the key.
pub(crate) fn warn_if_short(secrets: &[Secret], whose: &str) {
    if secrets.iter().any(Secret::is_short) {
        tracing::warn!(
            whose,
            "a signing secret is shorter than the 24 bytes Standard Webhooks recommends"
        );
    }
}

/// The `webhook-signature` header value: one `v1,<sig>` per secret.
pub(crate) fn sign(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| format!("v1,{}", s.mac(id, timestamp, body)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// True when one of the header's `v1` signatures matches (constant-time compare).
#[cfg(test)]
pub(crate) fn verify(secret: &Secret, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    use subtle::ConstantTimeEq;
    let expected = secret.mac(id, timestamp, body);
    header
        .split_whitespace()
        .filter_map(|sig| sig.strip_prefix("v1,"))
        .any(|sig| bool::from(sig.as_bytes().ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::signing::{Secret, sign, verify};

        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("valid");
        let header = sign(
            std::slice::from_ref(&secret),
            "msg_1",
            1_700_000_000,
            b"{\"a\":1}",
        );
        assert!(header.starts_with("v1,"));
        assert!(verify(
            &secret,
            "msg_1",
            1_700_000_000,
            b"{\"a\":1}",
            &header
        ));
        assert!(!verify(
            &secret,
            "msg_1",
            1_700_000_000,
            b"{\"a\":2}",
            &header
        ));
    }

    /// A sender's short key is taken (and told apart); nothing at all is not.
    #[test]
    fn any_key_of_a_byte_or_more_parses() {
        let short = Secret::parse("whsec_c2hvcnQ=").expect("five bytes parse");
        assert!(short.is_short());
        assert!(
            !Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .expect("24 bytes")
                .is_short()
        );
        assert_eq!(Secret::parse("whsec_"), Err(InvalidSecret));
        assert_eq!(
            Secret::parse("c2hvcnQ="),
            Err(InvalidSecret),
            "no prefix: a key's length"
        );
        assert_eq!(Secret::parse("test"), Err(InvalidSecret), "a placeholder");
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert_eq!(Secret::parse("not base64!"), Err(InvalidSecret));
        assert_eq!(Secret::parse_list("  "), Err(InvalidSecret));
    }

    /// Standard Webhooks verification written here from the specification with the
    /// hmac, sha2 and base64 crates, not with this module's code: base64 of
    /// HMAC-SHA256 keyed with the decoded secret over `{id}.{timestamp}.{body}`.
    fn expected_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut signed = format!("{id}.{timestamp}.").into_bytes();
        signed.extend_from_slice(body);
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
        Mac::update(&mut mac, &signed);
        STANDARD.encode(mac.finalize().into_bytes())
    }

    fn independent_verify(
        whsec: &str,
        id: &str,
        timestamp: i64,
        body: &[u8],
        header: &str,
    ) -> bool {
        let key = STANDARD
            .decode(whsec.strip_prefix("whsec_").expect("whsec_ prefix"))
            .expect("base64");
        let expected = format!("v1,{}", expected_signature(&key, id, timestamp, body));
        header.split(' ').any(|sig| sig == expected)
    }

    proptest! {

        #![proptest_config(crate::test_cases::cases(256))]
        /// What `sign` produces, an independent verifier accepts, for every secret
        /// of a rotation; and `verify` agrees.
        #[test]
        fn independent_verification_accepts_every_signature(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 24..64), 1..4),
            id in "[ -~]{1,40}",
            timestamp in any::<i64>(),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let texts: Vec<String> = keys.iter().map(|k| format!("whsec_{}", STANDARD.encode(k))).collect();
            let secrets: Vec<Secret> = texts.iter().map(|t| Secret::parse(t).expect("valid")).collect();
            let header = sign(&secrets, &id, timestamp, &body);
            prop_assert_eq!(header.split(' ').count(), secrets.len());
            for (text, secret) in texts.iter().zip(&secrets) {
                prop_assert!(independent_verify(text, &id, timestamp, &body, &header));
                prop_assert!(verify(secret, &id, timestamp, &body, &header));
            }
        }

        /// A changed body, id or timestamp, or another secret, fails verification.
        #[test]
        fn any_change_fails_verification(
            key in proptest::collection::vec(any::<u8>(), 24..64),
            other_key in proptest::collection::vec(any::<u8>(), 24..64),
            id in "[a-z0-9_]{1,20}",
            timestamp in 0i64..4_000_000_000,
            body in proptest::collection::vec(any::<u8>(), 1..256),
            flip in any::<usize>(),
        ) {
            let text = format!("whsec_{}", STANDARD.encode(&key));
            let secret = Secret::parse(&text).expect("valid");
            let header = sign(std::slice::from_ref(&secret), &id, timestamp, &body);
            let mut changed = body.clone();
            let i = flip % changed.len();
            changed[i] ^= 0x01;
            prop_assert!(!independent_verify(&text, &id, timestamp, &changed, &header));
            prop_assert!(!verify(&secret, &id, timestamp, &changed, &header));
            prop_assert!(!verify(&secret, &id, timestamp + 1, &body, &header));
            let other_id = format!("{id}x");
            prop_assert!(!verify(&secret, &other_id, timestamp, &body, &header));
            if other_key != key {
                let other = Secret::parse(&format!("whsec_{}", STANDARD.encode(&other_key))).expect("valid");
                prop_assert!(!verify(&other, &id, timestamp, &body, &header));
            }
        }
    }
}
