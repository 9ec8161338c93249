//! Standard Webhooks: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>[ v1a,<base64>…]` — or the same three under the
//! `svix-` prefix, as Svix-based senders (Clerk, Resend, Brex, Replicate…) post them.
//!
//! `v1` is the HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed with the
//! base64-decoded part of a `whsec_` secret; `v1a` is an ed25519 signature of the
//! same string, checked with a `whpk_` public key (base64 of its 32 bytes). A
//! source's list may mix both forms. The event type is the body's `/type` and the
//! delivery id the `webhook-id` (or `svix-id`) header.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};

use super::{Incoming, Rejection, check_timestamp, same};
use crate::signing::Secret;

/// The message id header (also the delivery id).
pub(crate) const ID: &str = "webhook-id";
/// The signed timestamp's header.
pub(crate) const TIMESTAMP: &str = "webhook-timestamp";
/// The signature list's header.
pub(crate) const SIGNATURE: &str = "webhook-signature";

/// The header families, tried in this order: a request carries one of them.
const FAMILIES: [[&str; 3]; 2] = [
    [ID, TIMESTAMP, SIGNATURE],
    ["svix-id", "svix-timestamp", "svix-signature"],
];

/// The keys of a `standard-webhooks` source: symmetric (`whsec_`) for `v1`
/// signatures, public (`whpk_`) for `v1a`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    /// `whsec_` secrets.
    pub(crate) symmetric: Vec<Secret>,
    /// `whpk_` ed25519 public keys.
    pub(crate) public: Vec<VerifyingKey>,
}

/// Why a source's secret list does not parse (never showing a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidKey {
    /// A `whpk_` value that is not base64 of 32 bytes of a valid point.
    #[error("secret number {0} is a whpk_ value but not base64 of an ed25519 public key")]
    Public(usize),
    /// Anything else that is not a `whsec_` secret.
    #[error(
        "secret number {0} is not a whsec_ secret (whsec_ and base64, or base64 of 24 bytes or more) nor a whpk_ public key"
    )]
    Symmetric(usize),
    /// No value at all.
    #[error("no secret")]
    Empty,
}

impl Keys {
    /// Parses a space-separated list mixing `whsec_` secrets and `whpk_` keys.
    pub(crate) fn parse(text: &str) -> Result<Self, InvalidKey> {
        let mut keys = Self::default();
        for (n, item) in text.split_whitespace().enumerate() {
            if let Some(b64) = item.strip_prefix("whpk_") {
                let key = STANDARD
                    .decode(b64)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .and_then(|b| VerifyingKey::from_bytes(&b).ok())
                    .ok_or(InvalidKey::Public(n + 1))?;
                keys.public.push(key);
            } else {
                let key = Secret::parse(item).map_err(|_| InvalidKey::Symmetric(n + 1))?;
                keys.symmetric.push(key);
            }
        }
        if keys.symmetric.is_empty() && keys.public.is_empty() {
            return Err(InvalidKey::Empty);
        }
        Ok(keys)
    }
}

/// Verifies the timestamp and the `v1` / `v1a` signatures against every key.
pub(crate) fn verify(
    req: &Incoming<'_>,
    keys: &Keys,
    tolerance: Option<Duration>,
) -> Result<(), Rejection> {
    // The family whose signature header is there (else the specification's, to
    // name what is missing).
    let [id_name, ts_name, sig_name] = FAMILIES
        .into_iter()
        .find(|f| req.header(f[2]).is_some())
        .unwrap_or(FAMILIES[0]);
    let id = req.require(id_name)?;
    let ts_text = req.require(ts_name)?;
    let header = req.require(sig_name)?;
    let ts: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| Rejection::Timestamp(format!("{ts_name} is not a number")))?;
    let decoded = |scheme: &str| -> Vec<Vec<u8>> {
        header
            .split_whitespace()
            .filter_map(|s| s.strip_prefix(scheme))
            .filter_map(|b64| STANDARD.decode(b64).ok())
            .collect()
    };
    let (v1, v1a) = (decoded("v1,"), decoded("v1a,"));
    if v1.is_empty() && v1a.is_empty() {
        return Err(Rejection::Malformed(format!(
            "{sig_name} has no v1 or v1a signature"
        )));
    }
    let mut found = false;
    for key in &keys.symmetric {
        let expected = key.mac_bytes(id, ts, req.body);
        for given in &v1 {
            found |= same(&expected, given);
        }
    }
    if !keys.public.is_empty() && !v1a.is_empty() {
        let signed = [
            id.as_bytes(),
            b".",
            ts.to_string().as_bytes(),
            b".",
            req.body,
        ]
        .concat();
        for key in &keys.public {
            for given in &v1a {
                found |= Signature::from_slice(given)
                    .is_ok_and(|sig| key.verify_strict(&signed, &sig).is_ok());
            }
        }
    }
    if !found {
        return Err(Rejection::Mismatch(sig_name.into()));
    }
    check_timestamp(ts_text, req.now, tolerance).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector of the Standard Webhooks reference libraries.
    #[test]
    fn the_reference_vector_verifies() {
        let keys = Keys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
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
        assert!(verify(&req, &keys, tol).is_ok());
        let later = Incoming {
            now: 1_614_265_330 + 600,
            ..req
        };
        assert_eq!(
            verify(&later, &keys, tol).unwrap_err().reason(),
            "timestamp"
        );
        let earlier = Incoming {
            now: 1_614_265_330 - 600,
            ..req
        };
        assert_eq!(
            verify(&earlier, &keys, tol).unwrap_err().reason(),
            "timestamp"
        );
        let changed = Incoming {
            body: br#"{"test": 2432232315}"#,
            ..req
        };
        assert_eq!(
            verify(&changed, &keys, tol),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
    }

    /// The reference vector again, under Svix's header names (what Clerk or Resend
    /// post): the same signature verifies.
    #[test]
    fn the_reference_vector_verifies_under_svix_headers() {
        let keys = Keys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let mut h = http::HeaderMap::new();
        h.insert("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".parse().unwrap());
        h.insert("svix-timestamp", "1614265330".parse().unwrap());
        h.insert(
            "svix-signature",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
                .parse()
                .unwrap(),
        );
        let req = Incoming {
            headers: &h,
            body: br#"{"test": 2432232314}"#,
            now: 1_614_265_330,
        };
        let tol = Some(Duration::from_secs(300));
        assert!(verify(&req, &keys, tol).is_ok());
        let changed = Incoming {
            body: br#"{"test": 2432232315}"#,
            ..req
        };
        assert_eq!(
            verify(&changed, &keys, tol),
            Err(Rejection::Mismatch("svix-signature".into()))
        );
        // Neither family: the specification's header is named as missing.
        let none = http::HeaderMap::new();
        let bare = Incoming {
            headers: &none,
            ..req
        };
        assert_eq!(
            verify(&bare, &keys, tol),
            Err(Rejection::Missing(ID.into()))
        );
    }

    /// `v1a`: an ed25519 signature made with ed25519-dalek's own signing (not the
    /// code under test) verifies with the `whpk_` key, in a list that mixes a
    /// `whsec_` secret; a changed body, another key or a `v1a` given as `v1` fail.
    #[test]
    fn a_v1a_signature_verifies_with_its_public_key() {
        use ed25519_dalek::{Signer, SigningKey};
        let signer = SigningKey::from_bytes(&[7u8; 32]);
        let other = SigningKey::from_bytes(&[8u8; 32]);
        let whpk =
            |k: &SigningKey| format!("whpk_{}", STANDARD.encode(k.verifying_key().as_bytes()));
        let keys = Keys::parse(&format!(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw {}",
            whpk(&signer)
        ))
        .unwrap();
        let body = br#"{"type":"user.created"}"#;
        let sig = STANDARD.encode(
            signer
                .sign(b"msg_1.1700000000.{\"type\":\"user.created\"}")
                .to_bytes(),
        );
        let headers = |list: String| {
            let mut h = http::HeaderMap::new();
            h.insert(ID, "msg_1".parse().unwrap());
            h.insert(TIMESTAMP, "1700000000".parse().unwrap());
            h.insert(SIGNATURE, list.parse().unwrap());
            h
        };
        let tol = Some(Duration::from_secs(300));
        let good = headers(format!("v1,bm9wZQ== v1a,{sig}"));
        let req = Incoming {
            headers: &good,
            body,
            now: 1_700_000_000,
        };
        assert!(verify(&req, &keys, tol).is_ok());
        let changed = Incoming {
            body: br#"{"type":"user.deleted"}"#,
            ..req
        };
        assert!(verify(&changed, &keys, tol).is_err());
        let others = Keys::parse(&whpk(&other)).unwrap();
        assert!(verify(&req, &others, tol).is_err());
        let as_v1 = headers(format!("v1,{sig}"));
        assert!(
            verify(
                &Incoming {
                    headers: &as_v1,
                    ..req
                },
                &keys,
                tol
            )
            .is_err()
        );
    }

    #[test]
    fn a_bad_key_list_names_the_item_not_the_value() {
        assert_eq!(
            Keys::parse("whpk_bm9wZQ==").unwrap_err(),
            InvalidKey::Public(1)
        );
        assert_eq!(
            Keys::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw short").unwrap_err(),
            InvalidKey::Symmetric(2)
        );
        assert_eq!(Keys::parse("  ").unwrap_err(), InvalidKey::Empty);
        // A sender's short key is its choice: taken (`dGlueQ==` is "tiny").
        assert_eq!(
            Keys::parse("whsec_dGlueQ==").map(|k| k.symmetric.len()),
            Ok(1)
        );
    }
}
