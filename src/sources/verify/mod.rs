//! Verifying a sender's signature over the raw request, before anything is parsed.
//!
//! Each provider has a module of its own with one function,
//! `verify(&Incoming, &[Secret], …) -> Result<(), Rejection>`; [`Verifier`] picks the
//! one a source's manifest names. Every comparison is constant-time, every secret of
//! the source's list is tried (rotation), and a provider that signs a timestamp is
//! held to the source's tolerance in both directions (a signature from the future is
//! as suspect as a stale one).

pub(crate) mod discord;
pub(crate) mod github;
pub(crate) mod hmac;
pub(crate) mod mailgun;
pub(crate) mod sendgrid;
pub(crate) mod shopify;
pub(crate) mod slack;
pub(crate) mod standard_webhooks;
pub(crate) mod stripe;
pub(crate) mod token;
pub(crate) mod twilio;

use std::time::Duration;

use ::hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::config::Secret;

/// A request as a verifier sees it: headers, the raw body, and the time it arrived.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Incoming<'a> {
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The body exactly as received.
    pub body: &'a [u8],
    /// Arrival time, Unix seconds.
    pub now: i64,
}

impl Incoming<'_> {
    /// A header's value as text, if present and visible ASCII.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header that must be there.
    fn require(&self, name: &'static str) -> Result<&str, Rejection> {
        self.header(name)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| Rejection::Missing(name.to_owned()))
    }
}

/// Why a request was refused. Its text names the header and the cause, never a
/// secret or a signature value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The signature header (or another header the scheme needs) is absent.
    #[error("the {0} header is missing")]
    Missing(String),
    /// A signature is present but none matches any secret.
    #[error("no signature in {0} matches")]
    Mismatch(String),
    /// The signed timestamp is unreadable or outside the tolerance.
    #[error("{0}")]
    Timestamp(String),
    /// The header is there but not in the scheme's format.
    #[error("{0}")]
    Malformed(String),
}

impl Rejection {
    /// The `reason` label of `hookbox_source_rejected_total`: `signature`,
    /// `timestamp` or `other`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing(_) | Self::Mismatch(_) => "signature",
            Self::Timestamp(_) => "timestamp",
            Self::Malformed(_) => "other",
        }
    }
}

/// The algorithm of a generic `hmac` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// HMAC-SHA1 (older senders).
    Sha1,
    /// HMAC-SHA256.
    Sha256,
    /// HMAC-SHA512.
    Sha512,
    /// A plain SHA-256 of the secret followed by the signed string (not an HMAC:
    /// HubSpot's v1 and v2 signatures).
    SecretSha256,
}

/// How a generic `hmac` source's signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Lower- or upper-case hex.
    Hex,
    /// Standard base64.
    Base64,
}

/// Which scheme a source verifies, with its settings.
#[derive(Debug, Clone)]
pub(crate) enum Verifier {
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`
    /// (or `svix-*`).
    StandardWebhooks {
        /// Allowed |now − ts|; `None` turns the check off.
        tolerance: Option<Duration>,
        /// The decoded `whsec_` and `whpk_` keys (parsed once, when the manifest is
        /// loaded).
        keys: standard_webhooks::Keys,
    },
    /// An HMAC scheme of the one engine: GitHub, Stripe, Shopify, Slack, the
    /// presets (Paddle, HubSpot, …) and the generic `hmac` kind — each a
    /// [`hmac::Scheme`] built once, when the manifest is loaded.
    Hmac(hmac::Scheme),
    /// GitLab: `X-Gitlab-Token` equals a secret, or Standard Webhooks headers
    /// verified with the list's `whsec_` secrets.
    Gitlab {
        /// The `whsec_` secrets of the list, if any.
        keys: Option<standard_webhooks::Keys>,
        /// For the Standard Webhooks timestamp.
        tolerance: Option<Duration>,
    },
    /// Discord: ed25519 with the application's public keys.
    Discord {
        /// The public keys.
        keys: Vec<ed25519_dalek::VerifyingKey>,
        /// Allowed |now − ts|.
        tolerance: Option<Duration>,
    },
    /// SendGrid: ECDSA P-256 with the verification keys.
    Sendgrid {
        /// The public keys.
        keys: Vec<p256::ecdsa::VerifyingKey>,
        /// Allowed |now − ts|.
        tolerance: Option<Duration>,
    },
    /// Twilio: HMAC-SHA1 of the URL and the sorted form fields.
    Twilio {
        /// The URL Twilio was given.
        url: String,
    },
    /// Mailgun: the body's signature, once per token.
    Mailgun {
        /// Allowed |now − ts|.
        tolerance: Option<Duration>,
        /// The tokens seen.
        seen: mailgun::Seen,
    },
    /// A header that must equal one of the secrets.
    Token(token::Scheme),
    /// Nothing to verify (senders on a private network).
    None,
}

impl Verifier {
    /// Checks `req` against `secrets` (the source's space-separated list).
    pub(crate) fn verify(&self, req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
        match self {
            Self::StandardWebhooks { tolerance, keys } => {
                standard_webhooks::verify(req, keys, *tolerance)
            }
            Self::Hmac(scheme) => scheme.verify(req, secrets),
            Self::Gitlab { keys, tolerance } => match keys {
                Some(keys) if req.header(standard_webhooks::SIGNATURE).is_some() => {
                    standard_webhooks::verify(req, keys, *tolerance)
                }
                _ => token::Scheme {
                    header: Some(http::HeaderName::from_static("x-gitlab-token")),
                }
                .verify(req, secrets),
            },
            Self::Discord { keys, tolerance } => discord::verify(req, keys, *tolerance),
            Self::Sendgrid { keys, tolerance } => sendgrid::verify(req, keys, *tolerance),
            Self::Twilio { url } => twilio::verify(req, url, secrets),
            Self::Mailgun { tolerance, seen } => mailgun::verify(req, secrets, *tolerance, seen),
            Self::Token(scheme) => scheme.verify(req, secrets),
            Self::None => Ok(()),
        }
    }

    /// Undoes what [`Verifier::verify`] remembered of `req` (a Mailgun token),
    /// when the verified request was not accepted after all: the sender's retry
    /// of it must not be refused as a replay.
    pub(crate) fn forget(&self, req: &Incoming<'_>) {
        if let Self::Mailgun { seen, .. } = self {
            mailgun::forget(req, seen);
        }
    }
}

/// The raw MAC of `parts` (concatenated) under `key`.
pub(crate) fn mac(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let Ok(mut m) = <M as KeyInit>::new_from_slice(key) else {
            unreachable!("HMAC takes keys of any length")
        };
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match algorithm {
        Algorithm::Sha1 => run::<Hmac<Sha1>>(key, parts),
        Algorithm::Sha256 => run::<Hmac<Sha256>>(key, parts),
        Algorithm::Sha512 => run::<Hmac<Sha512>>(key, parts),
        Algorithm::SecretSha256 => {
            let mut digest = <Sha256 as sha2::Digest>::new();
            sha2::Digest::update(&mut digest, key);
            for p in parts {
                sha2::Digest::update(&mut digest, p);
            }
            sha2::Digest::finalize(digest).to_vec()
        }
    }
}

/// Constant-time equality of two byte strings (lengths are not secret).
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// Decodes hex (either case); `None` when it is not hex.
pub(crate) fn from_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim().as_bytes();
    if text.len() % 2 != 0 {
        return None;
    }
    text.chunks(2)
        .map(|pair| {
            let digit = |c: u8| (c as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

/// True when one of `candidates` (decoded signatures) equals the MAC of `parts`
/// under one of `secrets`.
pub(crate) fn any_matches(
    algorithm: Algorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> bool {
    // Every secret and candidate is compared, with no early exit, so the time
    // taken does not tell which secret matched.
    let mut found = false;
    for secret in secrets {
        let expected = mac(algorithm, secret.expose().as_bytes(), parts);
        for c in candidates {
            found |= same(&expected, c);
        }
    }
    found
}

/// A public-key scheme over `{timestamp}{body}` (Discord, SendGrid): the
/// signature in `sig_header`, decoded by `decode` (else `form` says what it
/// should be), checked by `verifies` (any of the source's keys), then the
/// timestamp of `ts_header` held to `tolerance`.
pub(crate) fn timestamped_signature<S>(
    req: &Incoming<'_>,
    (sig_header, ts_header): (&'static str, &'static str),
    tolerance: Option<Duration>,
    (decode, form): (impl Fn(&str) -> Option<S>, &str),
    verifies: impl Fn(&[u8], &S) -> bool,
) -> Result<(), Rejection> {
    let ts = req.require(ts_header)?;
    let sig = decode(req.require(sig_header)?.trim())
        .ok_or_else(|| Rejection::Malformed(format!("{sig_header} is not {form}")))?;
    if !verifies(&[ts.as_bytes(), req.body].concat(), &sig) {
        return Err(Rejection::Mismatch(sig_header.into()));
    }
    check_timestamp(ts, req.now, tolerance).map(drop)
}

/// Checks a signed Unix timestamp (text) against `now` within `tolerance`.
pub(crate) fn check_timestamp(
    text: &str,
    now: i64,
    tolerance: Option<Duration>,
) -> Result<i64, Rejection> {
    let ts: i64 = text.trim().parse().map_err(|_| {
        Rejection::Timestamp(format!("the signed timestamp {text:?} is not a number"))
    })?;
    let Some(tolerance) = tolerance else {
        return Ok(ts);
    };
    let allowed = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    let skew = now.saturating_sub(ts);
    if skew > allowed {
        return Err(Rejection::Timestamp(format!(
            "the signature is {skew} s old, over the tolerance of {allowed} s"
        )));
    }
    if -skew > allowed {
        return Err(Rejection::Timestamp(format!(
            "the signature is dated {} s in the future, over the tolerance of {allowed} s",
            -skew
        )));
    }
    Ok(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::config::Secret;
        use crate::sources::verify::{Incoming, Verifier};

        let secrets = [Secret::new("It's a Secret to Everybody")];
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
                .parse()
                .unwrap(),
        );
        let ok = Incoming {
            headers: &headers,
            body: b"Hello, World!",
            now: 0,
        };
        let github = Verifier::Hmac(github::scheme());
        assert!(github.verify(&ok, &secrets).is_ok());
        let changed = Incoming {
            body: b"Hello, World?",
            ..ok
        };
        assert_eq!(
            github.verify(&changed, &secrets).unwrap_err().reason(),
            "signature"
        );
    }

    #[test]
    fn timestamps_are_held_to_the_tolerance_both_ways() {
        let t = Some(Duration::from_secs(300));
        assert!(check_timestamp("1000", 1300, t).is_ok());
        assert!(check_timestamp("1000", 700, t).is_ok());
        assert_eq!(
            check_timestamp("1000", 1301, t).unwrap_err().reason(),
            "timestamp"
        );
        assert_eq!(
            check_timestamp("1000", 699, t).unwrap_err().reason(),
            "timestamp"
        );
        assert!(check_timestamp("1000", 1_000_000, None).is_ok());
        assert!(check_timestamp("soon", 1000, None).is_err());
        assert!(check_timestamp("-9223372036854775808", i64::MAX, t).is_err());
    }

    #[test]
    fn hex_decodes_both_cases_and_refuses_garbage() {
        assert_eq!(from_hex("0aFf"), Some(vec![0x0a, 0xff]));
        assert_eq!(from_hex("0g"), None);
        assert_eq!(from_hex("abc"), None);
    }
}
