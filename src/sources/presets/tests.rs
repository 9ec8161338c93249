//! Each preset against a request signed here, independently of the engine: the
//! signed string built as the provider's documentation writes it, the MAC taken
//! with the hmac crate directly. For each: the signature verifies, a changed body
//! or another secret does not, and (timestamped kinds) a stale timestamp does not.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;

use super::*;
use crate::config::Secret;
use crate::sources::verify::Incoming;

const SECRET: &str = "provider-secret-0123456789";
const NOW: i64 = 1_764_000_000;
const URL: &str = "https://hooks.example.com/ingest/x";

fn sha256(key: &str, data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn sha1(key: &str, data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The headers a provider sends for `body` at time `ts` (unix seconds), signed
/// with `key`, as its documentation describes.
fn signed(kind: &str, key: &str, ts: i64, body: &str) -> Vec<(&'static str, String)> {
    let b = body.as_bytes();
    let cat = |parts: &[&[u8]]| parts.concat();
    match kind {
        "intercom" => vec![("x-hub-signature", format!("sha1={}", hex(&sha1(key, b))))],
        "meta" => vec![(
            "x-hub-signature-256",
            format!("sha256={}", hex(&sha256(key, b))),
        )],
        "paddle" => {
            let sig = hex(&sha256(key, &cat(&[ts.to_string().as_bytes(), b":", b])));
            vec![("paddle-signature", format!("ts={ts};h1={sig}"))]
        }
        "zoom" => {
            let msg = format!("v0:{ts}:{body}");
            vec![
                ("x-zm-request-timestamp", ts.to_string()),
                (
                    "x-zm-signature",
                    format!("v0={}", hex(&sha256(key, msg.as_bytes()))),
                ),
            ]
        }
        "linear" => vec![("linear-signature", hex(&sha256(key, b)))],
        "zendesk" => {
            let at = chrono::DateTime::from_timestamp(ts, 0)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let sig = B64.encode(sha256(key, &cat(&[at.as_bytes(), b])));
            vec![
                ("x-zendesk-webhook-signature-timestamp", at),
                ("x-zendesk-webhook-signature", sig),
            ]
        }
        "typeform" => vec![(
            "typeform-signature",
            format!("sha256={}", B64.encode(sha256(key, b))),
        )],
        "calendly" => {
            let sig = hex(&sha256(key, format!("{ts}.{body}").as_bytes()));
            vec![("calendly-webhook-signature", format!("t={ts},v1={sig}"))]
        }
        "workos" => {
            let ms = ts * 1000;
            let sig = hex(&sha256(key, format!("{ms}.{body}").as_bytes()));
            vec![("workos-signature", format!("t={ms}, v1={sig}"))]
        }
        "vercel" => vec![("x-vercel-signature", hex(&sha1(key, b)))],
        "bitbucket" | "jira" => vec![(
            "x-hub-signature",
            format!("sha256={}", hex(&sha256(key, b))),
        )],
        "woocommerce" => vec![("x-wc-webhook-signature", B64.encode(sha256(key, b)))],
        "sentry" => vec![("sentry-hook-signature", hex(&sha256(key, b)))],
        "pagerduty" => vec![(
            "x-pagerduty-signature",
            format!("v1=00ff,v1={}", hex(&sha256(key, b))),
        )],
        "hubspot" => {
            let ms = ts * 1000;
            let msg = format!("POST{URL}{body}{ms}");
            vec![
                ("x-hubspot-request-timestamp", ms.to_string()),
                (
                    "x-hubspot-signature-v3",
                    B64.encode(sha256(key, msg.as_bytes())),
                ),
            ]
        }
        "square" => vec![(
            "x-square-hmacsha256-signature",
            B64.encode(sha256(key, format!("{URL}{body}").as_bytes())),
        )],
        other => panic!("no signer for {other}"),
    }
}

/// A body for `kind` at time `ts` (Linear signs its timestamp inside the body).
fn body(kind: &str, ts: i64, n: u32) -> String {
    match kind {
        "linear" => format!(
            r#"{{"type":"Issue","webhookTimestamp":{},"n":{n}}}"#,
            ts * 1000
        ),
        _ => format!(r#"{{"type":"thing","n":{n}}}"#),
    }
}

fn check(
    kind: &str,
    headers: &[(&'static str, String)],
    body: &str,
    now: i64,
) -> Result<(), crate::sources::verify::Rejection> {
    let p = preset(kind, Some(Duration::from_secs(300)), Some(URL)).expect(kind);
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, v.parse().unwrap());
    }
    let req = Incoming {
        headers: &h,
        body: body.as_bytes(),
        now,
    };
    p.verifier.verify(&req, &[Secret::new(SECRET)])
}

const TIMESTAMPED: &[&str] = &[
    "paddle", "zoom", "linear", "zendesk", "calendly", "workos", "hubspot",
];

#[test]
fn every_preset_verifies_a_request_signed_as_its_provider_documents() {
    for kind in KINDS {
        let good = body(kind, NOW, 1);
        let headers = signed(kind, SECRET, NOW, &good);
        assert_eq!(check(kind, &headers, &good, NOW), Ok(()), "{kind}");
        let changed = body(kind, NOW, 2);
        assert!(
            check(kind, &headers, &changed, NOW).is_err(),
            "{kind}: a changed body"
        );
        let wrong = signed(kind, "another-secret-987654321", NOW, &good);
        assert_eq!(
            check(kind, &wrong, &good, NOW).map_err(|e| e.reason()),
            Err("signature"),
            "{kind}: another secret"
        );
        assert_eq!(
            check(kind, &[], &good, NOW).map_err(|e| e.reason()),
            Err("signature"),
            "{kind}: no signature"
        );
        if TIMESTAMPED.contains(kind) {
            let old = NOW - 3600;
            let stale_body = body(kind, old, 1);
            let stale = signed(kind, SECRET, old, &stale_body);
            assert_eq!(
                check(kind, &stale, &stale_body, NOW).map_err(|e| e.reason()),
                Err("timestamp"),
                "{kind}: an hour old"
            );
        }
    }
}

#[test]
fn the_url_signing_kinds_sign_the_public_url() {
    for kind in SIGN_URL.iter().filter(|k| KINDS.contains(k)) {
        let good = body(kind, NOW, 1);
        let headers = signed(kind, SECRET, NOW, &good);
        let p = preset(
            kind,
            Some(Duration::from_secs(300)),
            Some("https://elsewhere.example.com/x"),
        )
        .unwrap();
        let mut h = HeaderMap::new();
        for (k, v) in &headers {
            h.insert(*k, v.parse().unwrap());
        }
        let req = Incoming {
            headers: &h,
            body: good.as_bytes(),
            now: NOW,
        };
        assert!(
            p.verifier.verify(&req, &[Secret::new(SECRET)]).is_err(),
            "{kind}: another URL"
        );
    }
}

/// Verifies a request to a `public_url` source of `kind` with `secret`.
fn published(kind: &str, url: &str, secret: &str, headers: &[(&str, &str)], body: &str) -> bool {
    let p = preset(kind, None, Some(url)).expect(kind);
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let req = Incoming {
        headers: &h,
        body: body.as_bytes(),
        now: NOW,
    };
    p.verifier.verify(&req, &[Secret::new(secret)]).is_ok()
}

/// HubSpot's published v1 and v2 examples (its "Validating the v1/v2 request
/// signature" pages): a SHA-256 of secret + body, and of secret + method + URI +
/// body, told apart by `X-HubSpot-Signature-Version`.
#[test]
fn hubspots_published_v1_and_v2_vectors_verify() {
    let secret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy";
    let v1_body = r#"[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]"#;
    let v1 = "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de";
    let url = "https://www.example.com/webhook_uri";
    let headers = |version: &'static str, sig: &'static str| {
        vec![
            ("x-hubspot-signature-version", version),
            ("x-hubspot-signature", sig),
        ]
    };
    assert!(published(
        "hubspot",
        url,
        secret,
        &headers("v1", v1),
        v1_body
    ));
    assert!(
        !published("hubspot", url, secret, &headers("v2", v1), v1_body),
        "v1 read as v2"
    );
    assert!(!published(
        "hubspot",
        url,
        "another",
        &headers("v1", v1),
        v1_body
    ));
    let v2_body = r#"{"example_field":"example_value"}"#;
    let v2 = "9569219f8ba981ffa6f6f16aa0f48637d35d728c7e4d93d0d52efaa512af7900";
    assert!(published(
        "hubspot",
        url,
        secret,
        &headers("v2", v2),
        v2_body
    ));
    assert!(!published(
        "hubspot",
        "https://www.example.com/other",
        secret,
        &headers("v2", v2),
        v2_body
    ));
    assert!(!published("hubspot", url, secret, &headers("v2", v2), "{}"));
}

/// Square's published example ("Validate notifications"): key `asdf1234`, URL
/// `https://example.com/webhook`, body `{"hello":"world"}`.
#[test]
fn squares_published_vector_verifies() {
    let sig = [(
        "x-square-hmacsha256-signature",
        "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=",
    )];
    let url = "https://example.com/webhook";
    assert!(published(
        "square",
        url,
        "asdf1234",
        &sig,
        r#"{"hello":"world"}"#
    ));
    assert!(!published(
        "square",
        url,
        "asdf1234",
        &sig,
        r#"{"hello":"World"}"#
    ));
    assert!(!published(
        "square",
        "https://example.com/webhook2",
        "asdf1234",
        &sig,
        r#"{"hello":"world"}"#
    ));
}

/// HubSpot's batch default: a HubSpot source splits.
#[test]
fn hubspot_splits_by_default() {
    let p = preset("hubspot", None, Some(URL)).unwrap();
    assert_eq!(
        p.split,
        Some(Split {
            pointer: String::new(),
            id: Some("/eventId".into())
        })
    );
    assert!(preset("square", None, Some(URL)).unwrap().split.is_none());
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(crate::test_cases::cases(64))]

        /// For any secret and body, every kind accepts what the independent signer
        /// above built, and refuses the same request with any one byte of the body
        /// changed.
        #[test]
        fn verify_accepts_the_signer_and_refuses_any_one_byte_change(
            secret in "[ -~]{8,64}",
            n in any::<u32>(),
            extra in "[ -~]{0,200}",
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            for kind in KINDS {
                let mut body = body(kind, NOW, n);
                // Extra text inside the JSON object, so that every kind still reads it.
                body.insert_str(body.len() - 1, &format!(",\"x\":{}", serde_json::Value::String(extra.clone())));
                let headers = signed(kind, &secret, NOW, &body);
                let p = preset(kind, Some(Duration::from_secs(300)), Some(URL)).unwrap();
                let mut h = HeaderMap::new();
                for (k, v) in &headers {
                    h.insert(*k, v.parse().unwrap());
                }
                let req = Incoming { headers: &h, body: body.as_bytes(), now: NOW };
                prop_assert_eq!(p.verifier.verify(&req, &[Secret::new(secret.clone())]), Ok(()), "{}", kind);
                let mut changed = body.clone().into_bytes();
                let i = at.index(changed.len());
                changed[i] ^= flip;
                let req = Incoming { headers: &h, body: &changed, now: NOW };
                prop_assert!(p.verifier.verify(&req, &[Secret::new(secret.clone())]).is_err(), "{}: byte {} changed", kind, i);
            }
        }
    }
}
