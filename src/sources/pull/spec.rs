//! A pull source's manifest sections, `[poll]` and `[websocket]`, checked.
//!
//! ```toml
//! [poll]
//! url = "https://api.example.com/v1/events"   # GET
//! cursor_param = "after"        # the query parameter carrying the cursor (left out while none)
//! interval = "5s"               # the wait after an empty page (default 5s)
//! items = "/data"               # JSON pointer to the array of items (default: the answer)
//! id = "/id"                    # pointers inside each item (defaults /id, /type, the id's)
//! event_type = "/type"
//! cursor = "/id"
//! sequence = "/seq"             # optional
//! emitted_at = "/created_at"    # optional
//! headers = { Authorization = "env:LEDGER_API_AUTH" }   # "env:NAME": from the environment
//!
//! [websocket]
//! url = "wss://stream.example.com/events"
//! subscribe = '{"op": "subscribe", "after": {cursor}}'   # sent after each connect
//! # id, event_type, cursor, sequence, emitted_at, headers: as in [poll]
//! ```
//!
//! A header value `env:NAME` is read from the environment at startup (and by
//! `hookbox sources check`); it must be set and not blank. Its value is a
//! [`Secret`]: never logged, shown or kept in a rejected log.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use url::Url;

use super::item::Fields;
use crate::config::{Secret, parse_duration};

/// The wait after an empty page unless `interval` says otherwise.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The longest `interval` accepted.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(30 * 86_400);

/// `[poll]` or `[websocket]` as written (each kind refuses the other's fields).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Section {
    url: String,
    cursor_param: Option<String>,
    interval: Option<String>,
    items: Option<String>,
    subscribe: Option<String>,
    id: Option<String>,
    event_type: Option<String>,
    cursor: Option<String>,
    sequence: Option<String>,
    emitted_at: Option<String>,
    headers: Option<BTreeMap<String, String>>,
}

/// How a pull source fetches.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// GET pages of items.
    Poll {
        /// The URL (its own query parameters kept).
        url: Url,
        /// The query parameter carrying the cursor.
        cursor_param: Option<String>,
        /// The wait after an empty page.
        interval: Duration,
        /// Pointer to the array of items in an answer.
        items: String,
    },
    /// Read text messages from a WebSocket.
    WebSocket {
        /// `ws://` or `wss://`.
        url: Url,
        /// Sent after each connect, `{cursor}` replaced by the cursor's JSON.
        subscribe: Option<String>,
    },
}

/// A pull source's settings.
#[derive(Clone)]
pub(crate) struct PullSpec {
    /// Poll or WebSocket, and where.
    pub transport: Transport,
    /// Where each item's values are.
    pub fields: Fields,
    /// Headers sent with every request or connect (values may be secrets).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The environment variables the header values came from (shown; never their
    /// values).
    pub header_envs: Vec<String>,
}

impl std::fmt::Debug for PullSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSpec")
            .field("url", &self.shown_url())
            .field("fields", &self.fields)
            .field("header_envs", &self.header_envs)
            .finish_non_exhaustive()
    }
}

impl PullSpec {
    /// The upstream URL.
    pub(crate) fn url(&self) -> &Url {
        match &self.transport {
            Transport::Poll { url, .. } | Transport::WebSocket { url, .. } => url,
        }
    }

    /// The URL as shown: scheme, host, port and path — no credentials, no query
    /// (either may carry a token).
    pub(crate) fn shown_url(&self) -> String {
        let url = self.url();
        let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
        if let Some(port) = url.port() {
            shown.push_str(&format!(":{port}"));
        }
        shown.push_str(url.path());
        shown
    }
}

/// A problem: `(field, message)`.
pub(crate) type Problem = (&'static str, String);

/// Checks `[poll]`.
pub(crate) fn poll(s: &Section, env: &dyn Fn(&str) -> Option<String>) -> Result<PullSpec, Problem> {
    let url = url(&s.url, &["http", "https"])?;
    if s.subscribe.is_some() {
        return Err((
            "subscribe",
            "[poll] takes no subscribe (a [websocket] field)".into(),
        ));
    }
    let interval = match s.interval.as_deref() {
        None => DEFAULT_INTERVAL,
        Some(text) => parse_duration(text).filter(|d| *d <= MAX_INTERVAL).ok_or((
            "interval",
            format!("{text:?} is not a duration of at most 30 days"),
        ))?,
    };
    if let Some(param) = &s.cursor_param {
        if param.trim().is_empty() {
            return Err(("cursor_param", "must not be empty".into()));
        }
    }
    let items = pointer("items", s.items.as_deref().unwrap_or(""))?;
    let (fields, headers, header_envs) = common(s, env)?;
    Ok(PullSpec {
        transport: Transport::Poll {
            url,
            cursor_param: s.cursor_param.clone(),
            interval,
            items,
        },
        fields,
        headers,
        header_envs,
    })
}

/// Checks `[websocket]`.
pub(crate) fn websocket(
    s: &Section,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PullSpec, Problem> {
    let url = url(&s.url, &["ws", "wss"])?;
    for (field, given) in [
        ("cursor_param", s.cursor_param.is_some()),
        ("interval", s.interval.is_some()),
        ("items", s.items.is_some()),
    ] {
        if given {
            return Err((
                field,
                format!("[websocket] takes no {field} (a [poll] field)"),
            ));
        }
    }
    let (fields, headers, header_envs) = common(s, env)?;
    Ok(PullSpec {
        transport: Transport::WebSocket {
            url,
            subscribe: s.subscribe.clone(),
        },
        fields,
        headers,
        header_envs,
    })
}

fn url(text: &str, schemes: &[&str]) -> Result<Url, Problem> {
    let url = Url::parse(text).map_err(|e| ("url", format!("{text:?} is not a URL: {e}")))?;
    if !schemes.contains(&url.scheme()) || url.host_str().is_none() {
        return Err((
            "url",
            format!("{text:?}: expected a {} URL", schemes.join(" or ")),
        ));
    }
    Ok(url)
}

fn pointer(field: &'static str, text: &str) -> Result<String, Problem> {
    if text.is_empty() || text.starts_with('/') {
        Ok(text.to_owned())
    } else {
        Err((
            field,
            format!("{text:?} is not a JSON pointer (\"/type\", or \"\" for the whole value)"),
        ))
    }
}

type Headers = (Fields, Vec<(HeaderName, HeaderValue)>, Vec<String>);

fn common(c: &Section, env: &dyn Fn(&str) -> Option<String>) -> Result<Headers, Problem> {
    let defaults = Fields::default();
    let id = pointer("id", c.id.as_deref().unwrap_or(&defaults.id))?;
    let fields = Fields {
        cursor: pointer("cursor", c.cursor.as_deref().unwrap_or(&id))?,
        id,
        event_type: pointer(
            "event_type",
            c.event_type.as_deref().unwrap_or(&defaults.event_type),
        )?,
        sequence: c
            .sequence
            .as_deref()
            .map(|p| pointer("sequence", p))
            .transpose()?,
        emitted_at: c
            .emitted_at
            .as_deref()
            .map(|p| pointer("emitted_at", p))
            .transpose()?,
    };
    let mut headers = Vec::new();
    let mut envs = Vec::new();
    for (name, value) in c.headers.iter().flatten() {
        let header = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| ("headers", format!("{name:?} is not a header name")))?;
        let text = match value.strip_prefix("env:") {
            Some(var) => {
                let var = var.trim();
                envs.push(var.to_owned());
                let secret = env(var).filter(|v| !v.trim().is_empty()).ok_or((
                    "headers",
                    format!("header {name}: the environment variable {var} is not set"),
                ))?;
                Secret::new(secret)
            }
            None => Secret::new(value.clone()),
        };
        let mut value = HeaderValue::from_str(text.expose()).map_err(|_| {
            (
                "headers",
                format!("header {name}: the value is not a valid header value"),
            )
        })?;
        value.set_sensitive(true);
        headers.push((header, value));
    }
    Ok((fields, headers, envs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "Bearer t0ps3cret".to_owned())
    }

    fn poll_of(text: &str) -> Result<PullSpec, Problem> {
        let s: Section = toml::from_str(text).expect("parses");
        poll(&s, &env)
    }

    #[test]
    fn poll_defaults_and_headers_from_env() {
        let spec = poll_of(
            "url = \"https://api.example.com/v1/events?limit=50\"\ncursor_param = \"after\"\n\
             headers = { Authorization = \"env:TOKEN\", X-Client = \"hookbox\" }",
        )
        .expect("valid");
        let Transport::Poll {
            interval, items, ..
        } = &spec.transport
        else {
            panic!("a poll source");
        };
        assert_eq!((*interval, items.as_str()), (DEFAULT_INTERVAL, ""));
        assert_eq!(spec.fields, Fields::default());
        assert_eq!(spec.header_envs, ["TOKEN"]);
        assert_eq!(spec.shown_url(), "https://api.example.com/v1/events");
        let shown = format!("{spec:?}");
        assert!(!shown.contains("t0ps3cret"), "{shown}");
    }

    #[test]
    fn each_problem_names_its_field() {
        let field = |text: &str| poll_of(text).expect_err("refused").0;
        assert_eq!(field("url = \"ftp://x/y\""), "url");
        assert_eq!(field("url = \"http://x\"\ninterval = \"soon\""), "interval");
        assert_eq!(field("url = \"http://x\"\nitems = \"data\""), "items");
        assert_eq!(
            field("url = \"http://x\"\nheaders = { A = \"env:UNSET\" }"),
            "headers"
        );
        let s: Section = toml::from_str("url = \"https://x\"").expect("parses");
        assert_eq!(websocket(&s, &env).expect_err("refused").0, "url");
        let s: Section = toml::from_str("url = \"ws://x\"\ninterval = \"1s\"").expect("parses");
        assert_eq!(websocket(&s, &env).expect_err("refused").0, "interval");
    }
}
