//! What keeps other web pages and guessers away from the admin routes and the
//! console (SPEC §2), before the token is even looked at:
//!
//! - **Cross-origin**: a request whose `Origin` is not the origin it was sent to
//!   (scheme aside: its host and port against `Host`), or is `null`, is refused with
//!   403 `forbidden` — a page the operator visits cannot drive the API.
//! - **DNS rebinding**: without `ADMIN_TOKEN`, only a `Host` that is an IP literal,
//!   `localhost`, or a name in `ALLOWED_HOSTS` is served (421
//!   `misdirected_request` otherwise): a page whose name was re-pointed at 127.0.0.1
//!   is not answered.
//! - **JSON only**: an admin request with a body must say `application/json` (415
//!   `unsupported_media_type`): a cross-site `<form>` or `text/plain` `fetch` cannot
//!   send one. (Console forms carry their own `csrf` field instead.)
//! - **Throttling**: wrong tokens and failed console logins are counted per client
//!   address; past 20 in a minute the address gets 429 with `Retry-After` until the
//!   minute is over.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderMap, StatusCode, header};

/// A refusal, as the HTTP layer answers it (a problem with this status, code,
/// detail and, for 429, `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The status.
    pub(crate) status: StatusCode,
    /// The problem code.
    pub(crate) code: &'static str,
    /// What is wrong.
    pub(crate) detail: String,
    /// Seconds to wait, for 429.
    pub(crate) retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            retry_after: None,
        }
    }
}

/// Failures a client address may make in one window.
pub(crate) const MAX_FAILURES: u32 = 20;
/// The window.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most (the oldest windows go first past it).
const MAX_TRACKED: usize = 100_000;

/// The client's address, set on each request by the front door.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) IpAddr);

/// The request checks and the failure counts.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    /// `ALLOWED_HOSTS`, lower case.
    pub(crate) allowed_hosts: Vec<String>,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Guard {
    /// A guard serving these host names (besides IP literals and `localhost`).
    pub(crate) fn new(allowed_hosts: Vec<String>) -> Self {
        Self {
            allowed_hosts: allowed_hosts
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            failures: Mutex::default(),
        }
    }

    /// The origin and host checks of a request (`token_set`: `ADMIN_TOKEN` is set).
    pub(crate) fn check(&self, headers: &HeaderMap, token_set: bool) -> Result<(), Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("null");
            if !same_origin(origin, host) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "a request from another origin (a web page elsewhere) is refused",
                ));
            }
        }
        if !token_set && !host_allowed(host, &self.allowed_hosts) {
            return Err(Refusal::new(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                "without ADMIN_TOKEN only an IP address, localhost or a name in ALLOWED_HOSTS \
                 may be used as Host",
            ));
        }
        Ok(())
    }

    /// 429 with `Retry-After` while `client` is over its failures.
    pub(crate) fn admit(&self, client: Option<IpAddr>) -> Result<(), Refusal> {
        let Some(ip) = client else { return Ok(()) };
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match failures.get(&ip) {
            Some((since, n)) if *n >= MAX_FAILURES && since.elapsed() < WINDOW => {
                let left = WINDOW.saturating_sub(since.elapsed()).as_secs().max(1);
                Err(Refusal {
                    retry_after: Some(left),
                    ..Refusal::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "too_many_requests",
                        format!(
                            "more than {MAX_FAILURES} failed logins or wrong tokens from this \
                             address in a minute"
                        ),
                    )
                })
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed login or a wrong token from `client`.
    pub(crate) fn failed(&self, client: Option<IpAddr>) {
        let Some(ip) = client else { return };
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_TRACKED {
            failures.retain(|_, (since, _)| since.elapsed() < WINDOW);
        }
        let entry = failures.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// Whether `host` (a `Host` header: name or address, maybe a port) is served
/// without a token.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = strip_port(host).to_ascii_lowercase();
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok() || name == "localhost" || allowed.contains(&name)
}

/// `host` without its `:port`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Whether `origin` (`scheme://host[:port]`) names the authority `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(origin) else {
        return false; // `null`, or garbage
    };
    let Some(name) = url.host_str() else {
        return false;
    };
    let authority = match url.port() {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    };
    let host = host.to_ascii_lowercase();
    authority == host
        || url
            .port_or_known_default()
            .is_some_and(|port| format!("{name}:{port}") == host)
}

/// A request with a body must say JSON (415 otherwise).
pub(crate) fn json_only(headers: &HeaderMap) -> Result<(), Refusal> {
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|n| n.trim() != "0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    if !has_body {
        return Ok(());
    }
    if says_json(headers) {
        Ok(())
    } else {
        Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "an admin request's body must be Content-Type: application/json",
        ))
    }
}

/// Whether `Content-Type` is `application/json` or `application/*+json`.
pub(crate) fn says_json(headers: &HeaderMap) -> bool {
    let Some(Ok(value)) = headers.get(header::CONTENT_TYPE).map(|v| v.to_str()) else {
        return false;
    };
    // Compared without case and without a copy: this runs on every intake request.
    let bytes = value.as_bytes();
    let end = bytes.iter().position(|b| *b == b';').unwrap_or(bytes.len());
    let mime = bytes[..end].trim_ascii();
    let starts = |p: &[u8]| mime.len() >= p.len() && mime[..p.len()].eq_ignore_ascii_case(p);
    let ends =
        |s: &[u8]| mime.len() >= s.len() && mime[mime.len() - s.len()..].eq_ignore_ascii_case(s);
    mime.eq_ignore_ascii_case(b"application/json") || (starts(b"application/") && ends(b"+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn hosts_served_without_a_token() {
        assert!(host_allowed("127.0.0.1:8000", &[]));
        assert!(host_allowed("[::1]:8000", &[]));
        assert!(host_allowed("localhost:8000", &[]));
        assert!(!host_allowed("evil.example:8000", &[]));
        assert!(!host_allowed("127.0.0.1.evil.example", &[]));
        assert!(host_allowed(
            "hooks.example.com",
            &["hooks.example.com".into()]
        ));
    }

    #[test]
    fn origins_must_match_the_host() {
        let g = Guard::default();
        let ok = [
            headers(&[("host", "127.0.0.1:8000")]),
            headers(&[
                ("host", "127.0.0.1:8000"),
                ("origin", "http://127.0.0.1:8000"),
            ]),
            headers(&[("host", "localhost"), ("origin", "http://localhost")]),
            headers(&[("host", "localhost:80"), ("origin", "http://localhost")]),
        ];
        for h in ok {
            assert!(g.check(&h, false).is_ok(), "{h:?}");
        }
        for origin in ["http://evil.example", "null", "http://127.0.0.1:9999"] {
            let h = headers(&[("host", "127.0.0.1:8000"), ("origin", origin)]);
            assert_eq!(
                g.check(&h, true).unwrap_err().status,
                StatusCode::FORBIDDEN,
                "{origin}"
            );
        }
    }

    #[test]
    fn without_a_token_only_known_hosts_are_served() {
        let g = Guard::new(vec!["Hooks.Example.com".into()]);
        assert_eq!(
            g.check(&headers(&[("host", "rebound.example:8000")]), false)
                .unwrap_err()
                .status,
            421
        );
        assert!(
            g.check(&headers(&[("host", "rebound.example:8000")]), true)
                .is_ok(),
            "a token protects"
        );
        assert!(
            g.check(&headers(&[("host", "hooks.example.com:443")]), false)
                .is_ok()
        );
        assert!(g.check(&headers(&[("host", "[::1]:8000")]), false).is_ok());
    }

    #[test]
    fn json_media_types_are_recognised_without_case() {
        let says = |v: &str| says_json(&headers(&[("content-type", v)]));
        for yes in [
            "application/json",
            "Application/JSON",
            " application/json ; charset=utf-8",
            "application/cloudevents+json",
            "APPLICATION/VND.API+JSON;q=1",
        ] {
            assert!(says(yes), "{yes}");
        }
        for no in [
            "text/json",
            "application/jsonx",
            "application/xml",
            "json",
            "",
            "text/plain+json",
        ] {
            assert!(!says(no), "{no}");
        }
        assert!(!says_json(&headers(&[])));
    }

    #[test]
    fn bodies_must_be_json() {
        assert!(json_only(&headers(&[])).is_ok());
        assert!(
            json_only(&headers(&[
                ("content-length", "0"),
                ("content-type", "text/plain")
            ]))
            .is_ok()
        );
        assert!(
            json_only(&headers(&[
                ("content-length", "2"),
                ("content-type", "application/json; charset=utf-8")
            ]))
            .is_ok()
        );
        assert_eq!(
            json_only(&headers(&[
                ("content-length", "2"),
                ("content-type", "text/plain")
            ]))
            .unwrap_err()
            .status,
            415
        );
        assert_eq!(
            json_only(&headers(&[("transfer-encoding", "chunked")]))
                .unwrap_err()
                .status,
            415
        );
    }

    #[test]
    fn twenty_failures_a_minute_then_429() {
        let g = Guard::default();
        let ip = Some(IpAddr::from([10, 0, 0, 7]));
        for _ in 0..MAX_FAILURES {
            assert!(g.admit(ip).is_ok());
            g.failed(ip);
        }
        let e = g.admit(ip).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            g.admit(Some(IpAddr::from([10, 0, 0, 8]))).is_ok(),
            "per address"
        );
    }
}
