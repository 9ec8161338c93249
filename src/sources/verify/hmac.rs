//! The HMAC engine: `kind = "hmac"`, and every built-in kind that is an HMAC of
//! some signed string ([`super::presets`]), as data over one [`Scheme`].
//!
//! ```toml
//! [hmac]
//! header = "X-Signature"
//! algorithm = "sha256"              # sha1 | sha256 | sha512
//! encoding = "hex"                  # hex | base64
//! prefix = "sha256="                # stripped from each signature first (optional)
//! signed = "{timestamp}.{body}"     # default {body}; also {url} {method} {header:NAME} {id}
//! timestamp = "header:X-Timestamp"  # or "field:t" (from a t=…,v1=… list) or "/pointer"
//! timestamp_format = "unix"         # unix | unix_ms | iso8601
//! signature_field = "v1"            # the header is a list of key=value pairs
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderName;

use super::{Algorithm, Encoding, Incoming, Rejection, any_matches, check_timestamp, from_hex};
use crate::config::Secret;

/// One part of the signed string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Text as written in the template.
    Text(String),
    /// The raw body.
    Body,
    /// The timestamp, as the sender wrote it.
    Timestamp,
    /// The source's `public_url`.
    Url,
    /// The request's method (`POST`: the only one a source is posted with).
    Method,
    /// A header's value (`{header:NAME}`; `{id}` when the id is a header).
    Header(HeaderName),
}

/// Parses a template such as `"v0:{timestamp}:{body}"`; `id_header` is what
/// `{id}` names (the delivery id's header), if anything.
pub(crate) fn template(text: &str, id_header: Option<&HeaderName>) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_owned()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("{text:?}: a {{ without its }}"))?;
        let name = &rest[open + 1..open + close];
        parts.push(match name {
            "body" => Part::Body,
            "timestamp" => Part::Timestamp,
            "url" => Part::Url,
            "method" => Part::Method,
            "id" => Part::Header(
                id_header
                    .cloned()
                    .ok_or_else(|| "{id} needs id = \"header:NAME\"".to_owned())?,
            ),
            _ => match name.strip_prefix("header:") {
                Some(h) => Part::Header(
                    HeaderName::from_bytes(h.trim().as_bytes())
                        .map_err(|_| format!("{{{name}}}: not a header name"))?,
                ),
                None => return Err(format!("{{{name}}} is not one of {{body}} {{timestamp}} {{url}} {{method}} {{id}} {{header:NAME}}")),
            },
        });
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_owned()));
    }
    Ok(parts)
}

/// Where the signed timestamp is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StampAt {
    /// A header of its own.
    Header(HeaderName),
    /// A key of the signature header's `key=value` list (`t` of `t=…,v1=…`).
    Field(String),
    /// A JSON pointer into the body.
    Body(String),
}

/// How the timestamp is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StampFormat {
    /// Unix seconds.
    Unix,
    /// Unix milliseconds.
    UnixMs,
    /// ISO-8601 / RFC 3339 (`2026-11-27T10:00:00Z`).
    Iso8601,
}

/// The signed timestamp: where, how written, and how far from now it may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Where it is.
    pub(crate) at: StampAt,
    /// How it is written.
    pub(crate) format: StampFormat,
    /// Allowed |now − t|; `None` turns the check off.
    pub(crate) tolerance: Option<std::time::Duration>,
}

/// An HMAC scheme: a generic source's `[hmac]` section, or a built-in kind.
#[derive(Debug, Clone)]
pub(crate) struct Scheme {
    /// The header carrying the signature (lower case).
    pub header: HeaderName,
    /// The hash.
    pub algorithm: Algorithm,
    /// How the signature is written.
    pub encoding: Encoding,
    /// Stripped from each signature before decoding.
    pub prefix: String,
    /// The key of the signatures when the header is a `key=value` list.
    pub signature_field: Option<String>,
    /// What is signed, in order.
    pub signed: Vec<Part>,
    /// The signed timestamp, if the scheme has one.
    pub timestamp: Option<Stamp>,
    /// The URL the provider was given (`public_url`), for `{url}`.
    pub url: Option<String>,
    /// Applies only when this header has this value (a provider's signature
    /// version: `X-HubSpot-Signature-Version: v2`).
    pub only_if: Option<(HeaderName, &'static str)>,
    /// The older scheme tried when this one does not apply (its header absent, or
    /// `only_if` not met): a provider that signs with several versions.
    pub otherwise: Option<Box<Scheme>>,
}

impl Scheme {
    /// A scheme signing the raw body in `header`.
    pub(crate) fn body(
        header: HeaderName,
        algorithm: Algorithm,
        encoding: Encoding,
        prefix: &str,
    ) -> Self {
        Self {
            header,
            algorithm,
            encoding,
            prefix: prefix.to_owned(),
            signature_field: None,
            signed: vec![Part::Body],
            timestamp: None,
            url: None,
            only_if: None,
            otherwise: None,
        }
    }

    /// Whether the request carries this scheme's signature.
    fn applies(&self, req: &Incoming<'_>) -> bool {
        let present = req
            .header(self.header.as_str())
            .is_some_and(|v| !v.trim().is_empty());
        present
            && self.only_if.as_ref().is_none_or(|(h, want)| {
                req.header(h.as_str())
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
            })
    }

    /// Verifies the signature against every secret, then the timestamp.
    pub(crate) fn verify(&self, req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
        if let Some(older) = self.otherwise.as_ref().filter(|_| !self.applies(req)) {
            return older.verify(req, secrets);
        }
        let name = self.header.as_str();
        let Some(value) = req.header(name).filter(|v| !v.trim().is_empty()) else {
            return Err(Rejection::Missing(name.to_owned()));
        };
        let given = self.signatures(value.trim())?;
        let stamp = self
            .timestamp
            .as_ref()
            .map(|s| stamp_text(s, value, req))
            .transpose()?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(self.signed.len());
        for part in &self.signed {
            parts.push(match part {
                Part::Text(t) => t.as_bytes(),
                Part::Body => req.body,
                Part::Timestamp => stamp.as_deref().unwrap_or_default().as_bytes(),
                Part::Url => self.url.as_deref().unwrap_or_default().as_bytes(),
                Part::Method => b"POST",
                Part::Header(h) => req
                    .header(h.as_str())
                    .ok_or_else(|| Rejection::Missing(h.as_str().to_owned()))?
                    .as_bytes(),
            });
        }
        if !any_matches(self.algorithm, secrets, &parts, &given) {
            return Err(Rejection::Mismatch(name.to_owned()));
        }
        match (&self.timestamp, stamp) {
            (Some(s), Some(text)) => check_stamp(s, &text, req.now),
            _ => Ok(()),
        }
    }

    /// The decoded signatures of the header's value.
    fn signatures(&self, value: &str) -> Result<Vec<Vec<u8>>, Rejection> {
        let name = self.header.as_str();
        let texts: Vec<&str> = match &self.signature_field {
            Some(field) => list(value)
                .filter(|(k, _)| k == field)
                .map(|(_, v)| v)
                .collect(),
            None => vec![value],
        };
        if let (Some(field), true) = (&self.signature_field, texts.is_empty()) {
            // Other schemes only (Stripe's `v0`): no signature of this one, which
            // is a signature failure, not a malformed header.
            return Err(Rejection::Mismatch(format!("{name} (it has no {field}=)")));
        }
        let decoded: Vec<Vec<u8>> = texts
            .into_iter()
            .filter_map(|t| t.trim().strip_prefix(self.prefix.as_str()))
            .filter_map(|t| match self.encoding {
                Encoding::Hex => from_hex(t),
                Encoding::Base64 => STANDARD.decode(t.trim()).ok(),
            })
            .collect();
        if decoded.is_empty() {
            return Err(Rejection::Malformed(format!(
                "{name} holds no signature in the expected form"
            )));
        }
        Ok(decoded)
    }
}

/// The `key=value` pairs of a list separated by `,` or `;` (`t=1,v1=ab; v1=cd`).
fn list(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value
        .split([',', ';'])
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// The timestamp as the sender wrote it.
fn stamp_text(stamp: &Stamp, signature: &str, req: &Incoming<'_>) -> Result<String, Rejection> {
    let found = match &stamp.at {
        StampAt::Header(h) => req.header(h.as_str()).map(|v| v.trim().to_owned()),
        StampAt::Field(key) => list(signature)
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.to_owned()),
        StampAt::Body(pointer) => std::str::from_utf8(req.body)
            .ok()
            .and_then(|text| crate::json::pointer(text, pointer))
            .map(|v| v.trim_matches('"').to_owned()),
    };
    found.filter(|t| !t.is_empty()).ok_or_else(|| {
        Rejection::Missing(match &stamp.at {
            StampAt::Header(h) => h.as_str().to_owned(),
            StampAt::Field(k) => format!("{k}= field of the signature"),
            StampAt::Body(p) => format!("body's {p}"),
        })
    })
}

/// Checks the timestamp against now within the tolerance.
fn check_stamp(stamp: &Stamp, text: &str, now: i64) -> Result<(), Rejection> {
    let seconds = match stamp.format {
        StampFormat::Unix => text.to_owned(),
        StampFormat::UnixMs => text
            .parse::<i64>()
            .map(|ms| ms.div_euclid(1000).to_string())
            .map_err(|_| {
                Rejection::Timestamp(format!("the signed timestamp {text:?} is not a number"))
            })?,
        StampFormat::Iso8601 => chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| t.timestamp().to_string())
            .map_err(|_| {
                Rejection::Timestamp(format!("the signed timestamp {text:?} is not ISO-8601"))
            })?,
    };
    check_timestamp(&seconds, now, stamp.tolerance).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"type":"build.done"}"#;

    fn scheme(algorithm: Algorithm, encoding: Encoding, prefix: &str) -> Scheme {
        Scheme::body(
            http::HeaderName::from_static("x-signature"),
            algorithm,
            encoding,
            prefix,
        )
    }

    fn check(s: &Scheme, value: &str, body: &[u8]) -> Result<(), Rejection> {
        let mut h = http::HeaderMap::new();
        h.insert("x-signature", value.parse().unwrap());
        s.verify(
            &Incoming {
                headers: &h,
                body,
                now: 0,
            },
            &[Secret::new("k")],
        )
    }

    /// Expected values from Python's hmac module with key b"k".
    #[test]
    fn each_algorithm_and_encoding_verifies() {
        let sha1 = scheme(Algorithm::Sha1, Encoding::Hex, "sha1=");
        assert!(check(&sha1, "sha1=c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e", BODY).is_ok());
        assert!(check(&sha1, "sha1=C81EBC3501AA6C899C4D5BA2C7CF301D52C3EF3E", BODY).is_ok());
        assert!(check(&sha1, "c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e", BODY).is_err());
        assert!(
            check(
                &sha1,
                "sha1=c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e",
                b"{}"
            )
            .is_err()
        );
        let sha512 = scheme(Algorithm::Sha512, Encoding::Base64, "");
        let sig = "opq+BhR3EqK2T94cAF2792rRu0A0h+dsLt94zCnl+CxoOo+pBNtLlajnZh+2B5ASznu8CzOsckbPNeQX6QOwXA==";
        assert!(check(&sha512, sig, BODY).is_ok());
        assert_eq!(
            check(&sha512, "AAAA", BODY).unwrap_err().reason(),
            "signature"
        );
    }

    #[test]
    fn templates_parse_every_placeholder_and_refuse_unknown_ones() {
        let id = http::HeaderName::from_static("x-id");
        assert_eq!(
            template("v0:{timestamp}:{body}", None).unwrap(),
            vec![
                Part::Text("v0:".into()),
                Part::Timestamp,
                Part::Text(":".into()),
                Part::Body
            ]
        );
        assert_eq!(
            template("{method}{url}{id}{header:X-Other}", Some(&id)).unwrap(),
            vec![
                Part::Method,
                Part::Url,
                Part::Header(id.clone()),
                Part::Header(http::HeaderName::from_static("x-other"))
            ]
        );
        assert!(
            template("{id}", None).is_err(),
            "{{id}} without an id header"
        );
        assert!(template("{nonce}", None).is_err());
        assert!(template("{body", None).is_err());
    }

    /// A Stripe-like scheme written as data (`t=…,v1=…`, `{timestamp}.{body}`),
    /// against a signature computed here with the hmac crate.
    #[test]
    fn a_listed_timestamped_signature_verifies_and_its_age_is_checked() {
        use ::hmac::{Hmac, KeyInit, Mac};
        let scheme = Scheme {
            signature_field: Some("v1".into()),
            signed: template("{timestamp}.{body}", None).unwrap(),
            timestamp: Some(Stamp {
                at: StampAt::Field("t".into()),
                format: StampFormat::Unix,
                tolerance: Some(std::time::Duration::from_secs(300)),
            }),
            ..scheme(Algorithm::Sha256, Encoding::Hex, "")
        };
        let mut m = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(b"k").unwrap();
        m.update(b"1000.");
        m.update(BODY);
        let sig: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let value = format!("t=1000,v1=00,v1={sig}");
        let at = |now: i64| {
            let mut h = http::HeaderMap::new();
            h.insert("x-signature", value.parse().unwrap());
            scheme.verify(
                &Incoming {
                    headers: &h,
                    body: BODY,
                    now,
                },
                &[Secret::new("k")],
            )
        };
        assert_eq!(at(1000), Ok(()));
        assert_eq!(at(2000).unwrap_err().reason(), "timestamp");
        // Only another scheme's signature (Stripe's v0): a signature failure.
        let mut h = http::HeaderMap::new();
        h.insert("x-signature", format!("t=1000,v0={sig}").parse().unwrap());
        let only_v0 = scheme.verify(
            &Incoming {
                headers: &h,
                body: BODY,
                now: 1000,
            },
            &[Secret::new("k")],
        );
        assert_eq!(only_v0.unwrap_err().reason(), "signature");
    }
}
