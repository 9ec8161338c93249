//! What an `http` handler's transform makes of a delivery (SPEC §12).
//!
//! The transform gets `{event_type, payload, url, method, headers}`: `payload` is
//! the body hookbox would post (`{id, event_type, payload, created_at}`), `url` the
//! handler's URL without its credentials, `method` `POST`, `headers` empty
//! (hookbox's own are added afterwards). Its answer decides the request: the body
//! posted is exactly its `payload` (an unchanged one posts the original text, byte
//! for byte), `url` (http or https; another URL than the handler's passes the
//! address guard or the delivery fails for good), `method`, `headers`; or
//! `cancel: true` skips the delivery.
//!
//! ```
//! # use hookbox::registry::kinds::shaped::{input, shape, Shaped};
//! let url = reqwest::Url::parse("https://user:pw@billing.example.com/hook").unwrap();
//! let body = r#"{"id":"e1","event_type":"a","payload":{},"created_at":"t"}"#;
//! let mut webhook = input("a", body, &url);
//! assert_eq!(webhook["url"], "https://billing.example.com/hook");
//! webhook["headers"]["x-tenant"] = "7".into();
//! let Ok(Shaped::Send(req)) = shape(&webhook, body, &url) else { panic!() };
//! assert_eq!((req.url.as_str(), req.body.as_str()), (url.as_str(), body));
//! assert_eq!(req.headers[0].0, "x-tenant");
//! ```

use std::sync::Arc;

pub use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::shown::display_url;
use crate::transform::{Transform, TransformError};

/// A request as a transform shaped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Where it goes.
    pub url: Url,
    /// Its method.
    pub method: reqwest::Method,
    /// The transform's headers (hookbox's own are added when it is sent).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body posted.
    pub body: String,
}

/// What a transform decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shaped {
    /// `cancel: true`: nothing is sent; the delivery completes.
    Cancelled,
    /// This request is sent.
    Send(Request),
}

/// Headers a transform may not set: hookbox sets them itself.
const OWN: &[&str] = &[
    "content-type",
    "content-length",
    "host",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "transfer-encoding",
    "connection",
    "traceparent",
    "tracestate",
];

/// The transform's argument for a delivery whose body is `body` to `url`.
pub fn input(event_type: &str, body: &str, url: &Url) -> Value {
    json!({
        "event_type": event_type,
        "payload": serde_json::from_str::<Value>(body).unwrap_or(Value::Null),
        "url": display_url(url),
        "method": "POST",
        "headers": {},
    })
}

/// The request a transform's `answer` asks for (`body` and `url` as they were
/// before it); an error says what in the answer is wrong.
pub fn shape(answer: &Value, body: &str, url: &Url) -> Result<Shaped, String> {
    if answer.get("cancel").and_then(Value::as_bool) == Some(true) {
        return Ok(Shaped::Cancelled);
    }
    let payload = answer.get("payload").ok_or("the answer has no payload")?;
    let unchanged =
        serde_json::from_str::<Value>(body).is_ok_and(|before| same_in_js(&before, payload));
    let body = if unchanged {
        body.to_owned()
    } else {
        serde_json::to_string(payload).map_err(|e| e.to_string())?
    };
    let url = match answer.get("url") {
        None => url.clone(),
        Some(Value::String(u)) if *u == display_url(url) => url.clone(),
        Some(Value::String(u)) => {
            let parsed = Url::parse(u).map_err(|e| format!("url {u:?}: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("url {u:?}: must be http or https"));
            }
            parsed
        }
        Some(_) => return Err("url must be a string".into()),
    };
    let method = match answer.get("method") {
        None => reqwest::Method::POST,
        Some(Value::String(m)) => reqwest::Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("method {m:?} is not an HTTP method"))?,
        Some(_) => return Err("method must be a string".into()),
    };
    Ok(Shaped::Send(Request {
        url,
        method,
        headers: headers(answer.get("headers"))?,
        body,
    }))
}

/// Whether `after` (a value back from JavaScript) is `before` as JavaScript
/// sees it: numbers are doubles there, so `1.0` comes back as `1`, `1e2` as `100`
/// and an integer past 2^53 rounded; objects' keys may come back in another
/// order. Such a payload is unchanged, and the original text is posted (or, by
/// a source's transform, stored).
pub(crate) fn same_in_js(before: &Value, after: &Value) -> bool {
    match (before, after) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_in_js(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, a)| b.get(k).is_some_and(|b| same_in_js(a, b)))
        }
        (a, b) => a == b,
    }
}

fn headers(value: Option<&Value>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = value.as_object().ok_or("headers must be an object")?;
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        if OWN.contains(&name.as_str()) {
            continue;
        }
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            _ => return Err(format!("header {name}: the value must be a string")),
        };
        let value = HeaderValue::from_str(&text)
            .map_err(|_| format!("header {name}: the value is not valid"))?;
        out.push((name, value));
    }
    Ok(out)
}

/// How the attempt history keeps a shaped request: JSON text of its `method`, `url`
/// (without credentials), `headers` (a value whose name speaks of a credential —
/// `authorization`, `cookie`, `token`, `secret`, `key`, `signature` — as
/// `[redacted]`) and the first KB of its `body`.
pub fn recorded(request: &Request) -> String {
    const CREDENTIAL: &[&str] = &[
        "authorization",
        "cookie",
        "token",
        "secret",
        "key",
        "signature",
    ];
    let mut headers = serde_json::Map::new();
    for (name, value) in &request.headers {
        let shown = if CREDENTIAL.iter().any(|w| name.as_str().contains(w)) {
            "[redacted]".to_owned()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        headers.insert(name.to_string(), Value::String(shown));
    }
    let mut cut = request.body.len().min(1024);
    while !request.body.is_char_boundary(cut) {
        cut -= 1;
    }
    json!({
        "method": request.method.as_str(),
        "url": display_url(&request.url),
        "headers": headers,
        "body": &request.body[..cut],
    })
    .to_string()
}

/// Runs `transform` on `input` on a blocking thread (a run blocks for up to
/// [`crate::transform::TIME_LIMIT`]).
pub async fn run(transform: Arc<Transform>, input: Value) -> Result<Value, TransformError> {
    tokio::task::spawn_blocking(move || transform.run(&input))
        .await
        .unwrap_or_else(|e| Err(TransformError::Threw(format!("the run failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> Url {
        Url::parse("https://u:p@example.com/a").unwrap()
    }

    const BODY: &str =
        r#"{"id":"1","event_type":"t","payload":{"n":12345678901234567890123},"created_at":"c"}"#;

    #[test]
    fn an_unchanged_webhook_sends_the_original_bytes() {
        let w = input("t", BODY, &url());
        assert_eq!(
            shape(&w, BODY, &url()),
            Ok(Shaped::Send(Request {
                url: url(),
                method: reqwest::Method::POST,
                headers: Vec::new(),
                body: BODY.into()
            }))
        );
    }

    /// Through the real JavaScript engine: numbers are doubles there, so `1.0`,
    /// `12.50`, `1e2` and an integer past 2^53 come back as other numbers or
    /// other text; a transform that changes only the headers still posts the
    /// original body byte for byte (SPEC §12), in the envelope's own key order.
    #[test]
    fn a_webhook_back_from_javascript_unchanged_sends_the_original_bytes() {
        let js = Transform::compile(
            "t",
            "function handler(w) { w.headers['x-tenant'] = 'acme'; return w; }",
        )
        .expect("compiles");
        let body = r#"{"id":"1","event_type":"t","payload":{"f":1.0,"price":12.50,"e":1e2,"big":9007199254740993,"huge":12345678901234567890123,"z":[0.10,{"b":2,"a":1}]},"created_at":"c"}"#;
        let answer = js.run(&input("t", body, &url())).expect("runs");
        let Ok(Shaped::Send(r)) = shape(&answer, body, &url()) else {
            panic!("{answer}")
        };
        assert_eq!(r.body, body);
        assert_eq!(r.headers.len(), 1);
        // A real change is posted as JavaScript returned it.
        let js = Transform::compile(
            "t",
            "function handler(w) { w.payload.payload.f = 2; return w; }",
        )
        .expect("compiles");
        let answer = js.run(&input("t", body, &url())).expect("runs");
        let Ok(Shaped::Send(r)) = shape(&answer, body, &url()) else {
            panic!("{answer}")
        };
        assert_ne!(r.body, body);
        let sent: Value = serde_json::from_str(&r.body).expect("json");
        assert_eq!(sent["payload"]["f"], 2);
    }

    #[test]
    fn changes_apply_and_bad_answers_are_refused() {
        let mut w = input("t", BODY, &url());
        w["payload"] = json!({"only": 1});
        w["method"] = "put".into();
        w["url"] = "https://other.example.com/b".into();
        w["headers"] = json!({"X-A": "1", "webhook-id": "forged", "x-n": 2});
        let Ok(Shaped::Send(r)) = shape(&w, BODY, &url()) else {
            panic!()
        };
        assert_eq!(r.body, r#"{"only":1}"#);
        assert_eq!(r.method, reqwest::Method::PUT);
        assert_eq!(r.url.as_str(), "https://other.example.com/b");
        let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-a", "x-n"], "hookbox's own headers are its own");
        assert_eq!(
            shape(&json!({"cancel": true}), BODY, &url()),
            Ok(Shaped::Cancelled)
        );
        for bad in [
            json!({}),
            json!({"payload": 1, "url": "ftp://x/"}),
            json!({"payload": 1, "url": 3}),
            json!({"payload": 1, "method": "NO WAY"}),
            json!({"payload": 1, "headers": {"bad name": "x"}}),
            json!({"payload": 1, "headers": {"x": {"nested": 1}}}),
        ] {
            assert!(shape(&bad, BODY, &url()).is_err(), "{bad}");
        }
    }
}
