//! Where each provider puts the event type and the delivery id, and how a verified
//! body becomes the event's payload.
//!
//! A [`Locator`] reads one value from a header, from a JSON pointer into the body,
//! or (delivery ids only) is the SHA-256 of the raw body — what identifies a
//! delivery whose sender gives it no id: a byte-identical resend is the same event.
//!
//! The payload is kept as its canonical JSON text (`crate::json`: keys sorted,
//! numbers exactly as sent, a key sent twice refused), which is what is stored;
//! pointers read that text without building a tree of values.

use http::HeaderMap;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::json;
use crate::model::hex;

/// Where one value is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Locator {
    /// A request header.
    Header(http::HeaderName),
    /// A JSON pointer into the body (a string or a number there).
    Pointer(String),
    /// The hex SHA-256 of the raw body.
    BodyHash,
    /// `value` when the body has something at `pointer`.
    WhenPresent {
        /// Where to look.
        pointer: String,
        /// What to answer.
        value: &'static str,
    },
    /// The first of these that finds something.
    FirstOf(Vec<Locator>),
    /// What `inner` finds, after `prefix` (`message.` + `/MessageStatus`).
    Prefixed {
        /// Written first.
        prefix: &'static str,
        /// Where the rest is.
        inner: Box<Locator>,
    },
}

impl Locator {
    /// Parses a manifest's `"header:NAME"` or `"/json/pointer"`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("header:") {
            return http::HeaderName::from_bytes(name.trim().as_bytes())
                .map(Self::Header)
                .map_err(|_| format!("{name:?} is not a header name"));
        }
        if text.is_empty() || text.starts_with('/') {
            return Ok(Self::Pointer(text.to_owned()));
        }
        Err(format!(
            "{text:?}: use a JSON pointer (\"/type\") or \"header:NAME\""
        ))
    }

    /// Where it looks, for an error's detail ("the X-GitHub-Event header").
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Header(name) => format!("the {name} header"),
            Self::Pointer(p) => format!("the body's {p}"),
            Self::BodyHash => "the body's SHA-256".to_owned(),
            Self::WhenPresent { pointer, .. } => format!("the body's {pointer}"),
            Self::FirstOf(all) => all
                .iter()
                .map(Self::describe)
                .collect::<Vec<_>>()
                .join(", or "),
            Self::Prefixed { inner, .. } => inner.describe(),
        }
    }

    /// The value, if the request has it (non-empty). `payload` is the body's
    /// canonical JSON text ([`payload`]), `raw` the body as received.
    pub(crate) fn read(&self, headers: &HeaderMap, payload: &str, raw: &[u8]) -> Option<String> {
        let found = match self {
            Self::Header(name) => headers.get(name)?.to_str().ok()?.trim().to_owned(),
            Self::Pointer(p) => {
                let literal = json::pointer(payload, p)?;
                match literal.as_bytes().first()? {
                    b'"' => json::string_value(literal)?,
                    b'-' | b'0'..=b'9' => literal.to_owned(),
                    _ => return None,
                }
            }
            Self::BodyHash => hex(&Sha256::digest(raw)),
            Self::WhenPresent { pointer, value } => {
                json::pointer(payload, pointer)?;
                (*value).to_owned()
            }
            Self::FirstOf(all) => return all.iter().find_map(|l| l.read(headers, payload, raw)),
            Self::Prefixed { prefix, inner } => {
                format!("{prefix}{}", inner.read(headers, payload, raw)?)
            }
        };
        (!found.is_empty()).then_some(found)
    }
}

/// Why a body could not become a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BodyError(pub String);

/// The body as the event's payload, as canonical JSON text (docs/sources.md, "Any
/// body"): a JSON body (`application/json`, `…+json`, or no `Content-Type`) as sent;
/// an `application/x-www-form-urlencoded` body as an object of its fields (a field
/// given twice keeps its last value); anything else (XML, text, NDJSON, bytes) as
/// `{"content_type": …, "body": "<the text>"}`, or `"body_base64"` when the body is
/// not UTF-8.
pub(crate) fn payload(headers: &HeaderMap, raw: &[u8]) -> Result<String, BodyError> {
    match media_type(headers) {
        None => json_payload(raw),
        Some(m) if is_json(&m) => json_payload(raw),
        Some(m) if m == "application/x-www-form-urlencoded" => form_payload(raw),
        Some(_) => Ok(wrapped(headers, raw)),
    }
}

/// A JSON body's canonical text (numbers as sent; a key twice is refused).
fn json_payload(raw: &[u8]) -> Result<String, BodyError> {
    let not_json =
        |e: &dyn std::fmt::Display| BodyError(format!("the body is not valid JSON: {e}"));
    let text = std::str::from_utf8(raw).map_err(|e| not_json(&e))?;
    json::canonical(text).map_err(|e| not_json(&e))
}

/// A form body as an object of its fields.
fn form_payload(raw: &[u8]) -> Result<String, BodyError> {
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(raw)
        .map_err(|e| BodyError(format!("the form body does not parse: {e}")))?;
    let object: Map<String, Value> = fields
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    // serde_json's map sorts its keys and writes strings as the canonical form
    // does: this is the object's canonical text.
    Ok(Value::Object(object).to_string())
}

/// Any other body, kept whole with its content type as sent.
fn wrapped(headers: &HeaderMap, raw: &[u8]) -> String {
    use base64::Engine as _;
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let mut object = Map::new();
    object.insert(
        "content_type".into(),
        content_type.map_or(Value::Null, Value::String),
    );
    match std::str::from_utf8(raw) {
        Ok(text) => object.insert("body".into(), Value::String(text.to_owned())),
        Err(_) => object.insert(
            "body_base64".into(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(raw)),
        ),
    };
    Value::Object(object).to_string()
}

/// The body's media type, lower case, without parameters (`None` without a
/// readable `Content-Type`).
fn media_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty())
}

/// `application/json`, `text/json` and any `…+json` type.
fn is_json(media: &str) -> bool {
    media == "application/json" || media == "text/json" || media.ends_with("+json")
}

/// A Slack interaction (a block action, a view submission…) arrives as a form
/// whose one `payload` field is JSON: that JSON is the payload (its `/type` the
/// event type). Any other form is kept as it is.
pub(crate) fn slack_interaction(form: String) -> Result<String, BodyError> {
    match json::pointer(&form, "/payload").and_then(|p| serde_json::from_str::<String>(p).ok()) {
        Some(inner) => json::canonical(&inner)
            .map_err(|e| BodyError(format!("the form's payload field is not valid JSON: {e}"))),
        None => Ok(form),
    }
}

/// True for a form-encoded body.
pub(crate) fn is_form(headers: &HeaderMap) -> bool {
    media_type(headers).is_some_and(|m| m == "application/x-www-form-urlencoded")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::identify::{Locator, payload};

        let headers = http::HeaderMap::new();
        let body = payload(
            &headers,
            br#"{"type": "charge.succeeded", "id": "evt_1", "n": 1.50}"#,
        )
        .unwrap();
        assert_eq!(body, r#"{"id":"evt_1","n":1.50,"type":"charge.succeeded"}"#);
        assert_eq!(
            Locator::Pointer("/type".into())
                .read(&headers, &body, b"")
                .as_deref(),
            Some("charge.succeeded")
        );
    }

    #[test]
    fn form_bodies_become_objects_of_their_fields() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        let v = payload(&h, b"text=now+please&command=%2Fdeploy").unwrap();
        assert_eq!(v, r#"{"command":"/deploy","text":"now please"}"#);
        assert_eq!(crate::json::canonical(&v).unwrap(), v, "canonical already");
    }

    #[test]
    fn a_slack_interaction_is_its_payload_field() {
        let form = payload(
            &{
                let mut h = HeaderMap::new();
                h.insert(
                    http::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded".parse().unwrap(),
                );
                h
            },
            b"payload=%7B%22type%22%3A%22block_actions%22%2C%22trigger_id%22%3A%2213.4%22%7D",
        )
        .unwrap();
        assert_eq!(
            slack_interaction(form).unwrap(),
            r#"{"trigger_id":"13.4","type":"block_actions"}"#
        );
        let command = r#"{"command":"/deploy"}"#.to_owned();
        assert_eq!(slack_interaction(command.clone()).unwrap(), command);
        assert!(slack_interaction(r#"{"payload":"{not json"}"#.into()).is_err());
    }

    #[test]
    fn other_bodies_are_kept_whole_with_their_content_type() {
        let typed = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
            h
        };
        let xml = payload(&typed("application/xml"), b"<a n=\"1\"/>").unwrap();
        assert_eq!(
            xml,
            r#"{"body":"<a n=\"1\"/>","content_type":"application/xml"}"#
        );
        let ndjson = payload(&typed("application/x-ndjson"), b"{\"a\":1}\n{\"a\":2}\n").unwrap();
        let v: Value = serde_json::from_str(&ndjson).unwrap();
        assert_eq!(v["body"], "{\"a\":1}\n{\"a\":2}\n");
        let bytes = payload(&typed("application/octet-stream"), b"\xff\x00\x01").unwrap();
        let v: Value = serde_json::from_str(&bytes).unwrap();
        assert_eq!(v["body_base64"], "/wAB");
        assert!(v.get("body").is_none());
        // JSON types are parsed (and must parse), whatever their parameters.
        assert_eq!(
            payload(
                &typed("application/vnd.api+json; charset=utf-8"),
                b"{\"b\": 1}"
            )
            .unwrap(),
            r#"{"b":1}"#
        );
        assert!(payload(&typed("Application/JSON"), b"<a/>").is_err());
        assert!(is_form(&typed(
            "Application/X-WWW-Form-Urlencoded; charset=utf-8"
        )));
    }

    #[test]
    fn json_bodies_keep_their_numbers_and_refuse_a_key_twice() {
        let h = HeaderMap::new();
        assert_eq!(
            payload(&h, br#"{"b": 12345678901234567890123, "a": 1.0}"#).unwrap(),
            r#"{"a":1.0,"b":12345678901234567890123}"#
        );
        assert!(payload(&h, br#"{"a": 1, "a": 2}"#).is_err());
        assert!(payload(&h, b"not json").is_err());
        assert!(payload(&h, b"\xff").is_err());
    }

    #[test]
    fn locators_read_headers_pointers_and_fall_back_in_order() {
        let mut h = HeaderMap::new();
        h.insert("x-delivery", "d-1".parse().unwrap());
        let body = r#"{"event":{"type":"message"},"n":7,"o":{}}"#;
        assert_eq!(
            Locator::parse("header:X-Delivery")
                .unwrap()
                .read(&h, body, b""),
            Some("d-1".into())
        );
        assert_eq!(
            Locator::parse("/n").unwrap().read(&h, body, b""),
            Some("7".into())
        );
        assert_eq!(
            Locator::parse("/event/type").unwrap().read(&h, body, b""),
            Some("message".into())
        );
        assert_eq!(Locator::parse("/o").unwrap().read(&h, body, b""), None);
        assert!(Locator::parse("type").is_err());
        let chain = Locator::FirstOf(vec![
            Locator::Pointer("/event_id".into()),
            Locator::BodyHash,
        ]);
        assert_eq!(chain.read(&h, body, b"abc").map(|s| s.len()), Some(64));
    }
}
