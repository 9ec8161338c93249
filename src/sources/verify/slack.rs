//! Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">` with the
//! timestamp in `X-Slack-Request-Timestamp`, keyed with the app's signing secret.
//!
//! The event type is the body's `/event/type` (Events API), else `/type`
//! (`url_verification`, interactivity), else `slash_command` for a form body with a
//! `command` field; the delivery id `/event_id`, else `/trigger_id`, else the SHA-256
//! of the body.

use std::time::Duration;

use super::hmac::{Part, Scheme, Stamp, StampAt, StampFormat};
use super::{Algorithm, Encoding};

/// The signature header.
pub(crate) const SIGNATURE: &str = "x-slack-signature";
/// The signed timestamp's header.
pub(crate) const TIMESTAMP: &str = "x-slack-request-timestamp";

/// Slack's scheme in the engine's terms: `v0=` and hex, over `v0:{ts}:{body}`,
/// the timestamp header held to `tolerance`.
pub(crate) fn scheme(tolerance: Option<Duration>) -> Scheme {
    Scheme {
        signed: vec![
            Part::Text("v0:".into()),
            Part::Timestamp,
            Part::Text(":".into()),
            Part::Body,
        ],
        timestamp: Some(Stamp {
            at: StampAt::Header(http::HeaderName::from_static(TIMESTAMP)),
            format: StampFormat::Unix,
            tolerance,
        }),
        ..Scheme::body(
            http::HeaderName::from_static(SIGNATURE),
            Algorithm::Sha256,
            Encoding::Hex,
            "v0=",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::sources::verify::{Incoming, Rejection};

    fn verify(
        req: &Incoming<'_>,
        secrets: &[Secret],
        tolerance: Option<Duration>,
    ) -> Result<(), Rejection> {
        scheme(tolerance).verify(req, secrets)
    }

    /// The worked example of Slack's "Verifying requests from Slack" page.
    #[test]
    fn slacks_published_example_verifies() {
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let mut h = http::HeaderMap::new();
        h.insert(TIMESTAMP, "1531420618".parse().unwrap());
        h.insert(
            SIGNATURE,
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
                .parse()
                .unwrap(),
        );
        let secret = [Secret::new("8f742231b10e8888abcd99yyyzzz85a5")];
        let at = |now| Incoming {
            headers: &h,
            body,
            now,
        };
        assert!(verify(&at(1_531_420_618), &secret, Some(Duration::from_secs(300))).is_ok());
        assert_eq!(
            verify(
                &at(1_531_420_618 + 301),
                &secret,
                Some(Duration::from_secs(300))
            )
            .unwrap_err()
            .reason(),
            "timestamp"
        );
        assert!(verify(&at(2_000_000_000), &secret, None).is_ok());
        let changed = Incoming {
            body: &body[1..],
            ..at(1_531_420_618)
        };
        assert_eq!(
            verify(&changed, &secret, None),
            Err(Rejection::Mismatch(SIGNATURE.into()))
        );
    }
}
