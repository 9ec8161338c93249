//! The built-in kinds that are an HMAC of a signed string, as data over the one
//! engine ([`verify::hmac::Scheme`]): adding such a provider is one entry here
//! plus its test vector. Each entry follows the provider's own webhook
//! documentation (named in docs/sources.md): the signature header, algorithm,
//! encoding, what is signed, the timestamp, and where the event type and delivery
//! id are.

use std::time::Duration;

use http::HeaderName;

use super::Split;
use super::identify::Locator;
use super::verify::hmac::{Part, Scheme, Stamp, StampAt, StampFormat};
use super::verify::{Algorithm, Encoding, Verifier};

/// A built-in kind: how it verifies and where its events' type and id are.
pub(crate) struct Preset {
    /// How a request is verified.
    pub(crate) verifier: Verifier,
    /// Where the event type is.
    pub(crate) event_type: Locator,
    /// Where the delivery id is.
    pub(crate) delivery_id: Locator,
    /// Split batched bodies by default (HubSpot).
    pub(crate) split: Option<Split>,
}

/// The kinds of this table.
pub(crate) const KINDS: &[&str] = &[
    "intercom",
    "meta",
    "paddle",
    "zoom",
    "linear",
    "zendesk",
    "typeform",
    "calendly",
    "workos",
    "vercel",
    "bitbucket",
    "jira",
    "woocommerce",
    "sentry",
    "pagerduty",
    "hubspot",
    "square",
];

/// The kinds that sign the URL the provider was given (`public_url` required).
pub(crate) const SIGN_URL: &[&str] = &["hubspot", "square", "twilio"];

fn h(name: &'static str) -> HeaderName {
    HeaderName::from_static(name)
}

fn ptr(p: &str) -> Locator {
    Locator::Pointer(p.to_owned())
}

fn header(name: &'static str) -> Locator {
    Locator::Header(h(name))
}

/// `locator`, else the SHA-256 of the body (a provider whose id is optional).
fn or_hash(locator: Locator) -> Locator {
    Locator::FirstOf(vec![locator, Locator::BodyHash])
}

fn text(t: &str) -> Part {
    Part::Text(t.to_owned())
}

/// The preset of `kind`, if it is one of [`KINDS`]; `tolerance` for the
/// timestamped ones, `url` the source's `public_url`.
pub(crate) fn preset(kind: &str, tolerance: Option<Duration>, url: Option<&str>) -> Option<Preset> {
    use Algorithm::{Sha1, Sha256};
    use Encoding::{Base64, Hex};
    let stamp = |at: StampAt, format: StampFormat| {
        Some(Stamp {
            at,
            format,
            tolerance,
        })
    };
    let body = |name: &'static str, algorithm, encoding, prefix: &str| {
        Scheme::body(h(name), algorithm, encoding, prefix)
    };
    let (scheme, event_type, delivery_id) = match kind {
        "intercom" => (
            body("x-hub-signature", Sha1, Hex, "sha1="),
            ptr("/topic"),
            or_hash(ptr("/id")),
        ),
        "meta" => (
            body("x-hub-signature-256", Sha256, Hex, "sha256="),
            ptr("/object"),
            Locator::BodyHash,
        ),
        "paddle" => (
            Scheme {
                signature_field: Some("h1".into()),
                signed: vec![Part::Timestamp, text(":"), Part::Body],
                timestamp: stamp(StampAt::Field("ts".into()), StampFormat::Unix),
                ..body("paddle-signature", Sha256, Hex, "")
            },
            ptr("/event_type"),
            or_hash(ptr("/event_id")),
        ),
        "zoom" => (
            Scheme {
                signed: vec![text("v0:"), Part::Timestamp, text(":"), Part::Body],
                timestamp: stamp(
                    StampAt::Header(h("x-zm-request-timestamp")),
                    StampFormat::Unix,
                ),
                ..body("x-zm-signature", Sha256, Hex, "v0=")
            },
            ptr("/event"),
            Locator::BodyHash,
        ),
        "linear" => (
            Scheme {
                timestamp: stamp(
                    StampAt::Body("/webhookTimestamp".into()),
                    StampFormat::UnixMs,
                ),
                ..body("linear-signature", Sha256, Hex, "")
            },
            ptr("/type"),
            or_hash(header("linear-delivery")),
        ),
        "zendesk" => (
            Scheme {
                signed: vec![Part::Timestamp, Part::Body],
                timestamp: stamp(
                    StampAt::Header(h("x-zendesk-webhook-signature-timestamp")),
                    StampFormat::Iso8601,
                ),
                ..body("x-zendesk-webhook-signature", Sha256, Base64, "")
            },
            ptr("/type"),
            or_hash(ptr("/id")),
        ),
        "typeform" => (
            body("typeform-signature", Sha256, Base64, "sha256="),
            ptr("/event_type"),
            or_hash(ptr("/event_id")),
        ),
        "calendly" | "workos" => {
            let (name, format) = if kind == "calendly" {
                ("calendly-webhook-signature", StampFormat::Unix)
            } else {
                ("workos-signature", StampFormat::UnixMs)
            };
            (
                Scheme {
                    signature_field: Some("v1".into()),
                    signed: vec![Part::Timestamp, text("."), Part::Body],
                    timestamp: stamp(StampAt::Field("t".into()), format),
                    ..body(name, Sha256, Hex, "")
                },
                ptr("/event"),
                or_hash(ptr("/id")),
            )
        }
        "vercel" => (
            body("x-vercel-signature", Sha1, Hex, ""),
            ptr("/type"),
            or_hash(ptr("/id")),
        ),
        "bitbucket" => (
            body("x-hub-signature", Sha256, Hex, "sha256="),
            header("x-event-key"),
            or_hash(header("x-request-uuid")),
        ),
        "jira" => (
            body("x-hub-signature", Sha256, Hex, "sha256="),
            ptr("/webhookEvent"),
            or_hash(header("x-atlassian-webhook-identifier")),
        ),
        "woocommerce" => (
            body("x-wc-webhook-signature", Sha256, Base64, ""),
            header("x-wc-webhook-topic"),
            or_hash(header("x-wc-webhook-delivery-id")),
        ),
        "sentry" => (
            body("sentry-hook-signature", Sha256, Hex, ""),
            header("sentry-hook-resource"),
            or_hash(header("request-id")),
        ),
        "pagerduty" => (
            Scheme {
                signature_field: Some("v1".into()),
                ..body("x-pagerduty-signature", Sha256, Hex, "")
            },
            ptr("/event/event_type"),
            or_hash(ptr("/event/id")),
        ),
        "hubspot" => (
            Scheme {
                signed: vec![Part::Method, Part::Url, Part::Body, Part::Timestamp],
                timestamp: stamp(
                    StampAt::Header(h("x-hubspot-request-timestamp")),
                    StampFormat::UnixMs,
                ),
                url: url.map(str::to_owned),
                otherwise: Some(Box::new(hubspot_v2(url))),
                ..body("x-hubspot-signature-v3", Sha256, Base64, "")
            },
            ptr("/subscriptionType"),
            or_hash(ptr("/eventId")),
        ),
        "square" => (
            Scheme {
                signed: vec![Part::Url, Part::Body],
                url: url.map(str::to_owned),
                ..body("x-square-hmacsha256-signature", Sha256, Base64, "")
            },
            ptr("/type"),
            or_hash(ptr("/event_id")),
        ),
        _ => return None,
    };
    let split = (kind == "hubspot").then(|| Split {
        pointer: String::new(),
        id: Some("/eventId".into()),
    });
    Some(Preset {
        verifier: Verifier::Hmac(scheme),
        event_type,
        delivery_id,
        split,
    })
}

/// HubSpot's older signatures, for apps that still send them: v2, a SHA-256 hex
/// digest of `{secret}{method}{url}{body}`, else v1, of `{secret}{body}` — both in
/// `X-HubSpot-Signature`, told apart by `X-HubSpot-Signature-Version`. Neither
/// signs a timestamp (HubSpot's v3 does).
fn hubspot_v2(url: Option<&str>) -> Scheme {
    let version = |v: &'static str| Some((h("x-hubspot-signature-version"), v));
    let digest = || {
        Scheme::body(
            h("x-hubspot-signature"),
            Algorithm::SecretSha256,
            Encoding::Hex,
            "",
        )
    };
    let v1 = Scheme {
        only_if: version("v1"),
        ..digest()
    };
    Scheme {
        signed: vec![Part::Method, Part::Url, Part::Body],
        url: url.map(str::to_owned),
        only_if: version("v2"),
        otherwise: Some(Box::new(v1)),
        ..digest()
    }
}

#[cfg(test)]
mod tests;
