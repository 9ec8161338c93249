//! The clients http handlers send through: [`Outbound`].
//!
//! A plain `http://` target without credentials goes through hyper directly, on
//! connections kept alive by [`KeepAlive`]; every other one (`https://`, a URL
//! with a user or password, one with a fragment) through reqwest, which brings
//! TLS and turns the URL's credentials into basic auth. Both refuse redirects (hyper never follows one),
//! use no proxy, resolve names through the `TargetGuard` (every address DNS
//! returns is checked), connect within [`CONNECT_TIMEOUT`], keep idle
//! connections for [`POOL_IDLE`] and send the same `user-agent` and `accept`.
//!
//! Why two: reqwest parses each request's URL twice more (for its response and
//! for its redirect policy, even with redirects off) and wraps the call in its
//! redirect and retry layers — about 25,000 instructions a delivery, a tenth of
//! a whole delivery's (callgrind over `MODES=drain scripts/bench-instructions.sh`).
//! A local receiver (`http://127.0.0.1:…`) is the common target and the one the
//! benchmarks measure.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use http_body_util::Full;
use reqwest::Url;

pub use super::keep_alive::{BoxError, CONNECT_TIMEOUT, POOL_IDLE};
use super::keep_alive::{KeepAlive, Leased};
use crate::ssrf::TargetGuard;

/// The `user-agent` of every delivery.
const AGENT: &str = concat!("hookbox/", env!("CARGO_PKG_VERSION"));

/// The two clients every http handler shares (cheap to clone).
///
/// Which client a URL goes through:
///
/// ```
/// use hookbox::registry::kinds::outbound::Outbound;
/// let url = |s: &str| s.parse::<reqwest::Url>().expect("url");
/// assert!(Outbound::plain_uri(&url("http://127.0.0.1:9/hook")).is_some()); // hyper
/// assert!(Outbound::plain_uri(&url("https://example.com/hook")).is_none()); // reqwest
/// assert!(Outbound::plain_uri(&url("http://u:p@example.com/")).is_none()); // basic auth
/// ```
#[derive(Clone)]
pub struct Outbound {
    tls: reqwest::Client,
    plain: Arc<KeepAlive>,
}

impl Outbound {
    /// Builds both clients over `guard`. Only reqwest's builder can fail (its TLS
    /// set-up).
    pub fn new(guard: Arc<TargetGuard>) -> Result<Self, reqwest::Error> {
        let tls = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE)
            .user_agent(AGENT)
            .dns_resolver(guard.clone())
            .build()?;
        let plain = KeepAlive::new(guard);
        Ok(Self { tls, plain })
    }

    /// The URI `url` is sent to through hyper directly, when it is one for it:
    /// `http://`, no user or password, no fragment.
    pub fn plain_uri(url: &Url) -> Option<Uri> {
        let plain = url.scheme() == "http"
            && url.username().is_empty()
            && url.password().is_none()
            && url.fragment().is_none();
        plain.then(|| Uri::try_from(url.as_str()).ok()).flatten()
    }

    /// Sends one request: to `plain` (see [`Outbound::plain_uri`]) when given,
    /// else to `url` through reqwest. `headers` are sent as they are (every value
    /// of a repeated name), with `user-agent` and `accept` added where absent.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        plain: Option<Uri>,
        headers: HeaderMap,
        body: String,
    ) -> Result<Answer, BoxError> {
        let Some(uri) = plain else {
            let res = self
                .tls
                .request(method, url)
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| Box::new(e.without_url()) as BoxError)?;
            return Ok(Answer::Tls(res));
        };
        let mut req = http::Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        // As reqwest adds its defaults: only where the request has none.
        let sent = req.headers_mut();
        sent.entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(AGENT));
        sent.entry(ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        Ok(Answer::Plain(self.plain.send(req).await?))
    }
}

/// An answer from either client.
pub enum Answer {
    /// From reqwest.
    Tls(reqwest::Response),
    /// From hyper, on a kept-alive connection.
    Plain(Leased),
}

impl Answer {
    /// Its status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Tls(r) => r.status(),
            Self::Plain(r) => r.response().status(),
        }
    }

    /// Its headers.
    pub fn headers(&self) -> &HeaderMap {
        match self {
            Self::Tls(r) => r.headers(),
            Self::Plain(r) => r.response().headers(),
        }
    }

    /// The next piece of its body; `None` at its end or on an error.
    pub async fn chunk(&mut self) -> Option<Bytes> {
        match self {
            Self::Tls(r) => r.chunk().await.ok().flatten(),
            Self::Plain(r) => r.chunk().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A receiver on 127.0.0.1 that answers one request `204` and hands back the
    /// request's head as it arrived on the wire.
    async fn receiver() -> (SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let head = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.expect("accept");
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.expect("read");
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                .await
                .expect("write");
            String::from_utf8_lossy(&seen).to_lowercase()
        });
        (addr, head)
    }

    fn allowing_loopback() -> Outbound {
        let net = "127.0.0.0/8".parse().expect("net");
        Outbound::new(Arc::new(TargetGuard::new(vec![net]))).expect("clients")
    }

    fn custom() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.append("x-one", HeaderValue::from_static("1"));
        headers
    }

    #[tokio::test]
    async fn a_plain_target_gets_the_agent_accept_and_the_given_headers() {
        let (addr, head) = receiver().await;
        let url: Url = format!("http://{addr}/hook").parse().expect("url");
        let uri = Outbound::plain_uri(&url);
        assert!(uri.is_some(), "a plain http target goes through hyper");
        let answer = allowing_loopback()
            .send(Method::POST, url, uri, custom(), "{}".into())
            .await
            .expect("sent");
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
        let head = head.await.expect("head");
        assert!(head.starts_with("post /hook http/1.1\r\n"), "{head}");
        for line in [
            concat!("user-agent: hookbox/", env!("CARGO_PKG_VERSION")),
            "accept: */*",
            "x-one: 1",
            "content-length: 2",
        ] {
            assert!(
                head.contains(&format!("\r\n{line}\r\n")),
                "{line} in {head}"
            );
        }
    }

    #[tokio::test]
    async fn a_plain_target_gets_every_value_and_the_callers_own_agent_once() {
        let (addr, head) = receiver().await;
        let url: Url = format!("http://{addr}/hook").parse().expect("url");
        let mut headers = custom();
        headers.append("x-one", HeaderValue::from_static("2"));
        headers.append(USER_AGENT, HeaderValue::from_static("theirs"));
        let uri = Outbound::plain_uri(&url);
        allowing_loopback()
            .send(Method::POST, url, uri, headers, "{}".into())
            .await
            .expect("sent");
        let head = head.await.expect("head");
        assert!(head.contains("\r\nx-one: 1\r\n"), "{head}");
        assert!(head.contains("\r\nx-one: 2\r\n"), "{head}");
        assert_eq!(head.matches("\r\nuser-agent: ").count(), 1, "{head}");
        assert!(head.contains("\r\nuser-agent: theirs\r\n"), "{head}");
    }

    #[tokio::test]
    async fn a_url_with_credentials_goes_through_reqwest_as_basic_auth() {
        let (addr, head) = receiver().await;
        let url: Url = format!("http://user:pass@{addr}/hook")
            .parse()
            .expect("url");
        assert!(Outbound::plain_uri(&url).is_none());
        allowing_loopback()
            .send(Method::POST, url, None, custom(), "{}".into())
            .await
            .expect("sent");
        let head = head.await.expect("head");
        // base64("user:pass"), computed independently: dXNlcjpwYXNz.
        assert!(
            head.contains("\r\nauthorization: basic dxnlcjpwyxnz\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\naccept: */*\r\n"), "{head}");
    }

    #[tokio::test]
    async fn a_name_resolving_only_to_refused_addresses_fails_with_the_guards_refusal() {
        // No network allowed: localhost's addresses are all refused by the resolver
        // (the URL check is the handler's, not the client's, so it is not asked).
        let outbound = Outbound::new(Arc::new(TargetGuard::default())).expect("clients");
        let url: Url = "http://localhost:9/hook".parse().expect("url");
        let uri = Outbound::plain_uri(&url);
        let Err(e) = outbound
            .send(Method::POST, url, uri, HeaderMap::new(), String::new())
            .await
        else {
            panic!("a refused name was reached");
        };
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
        let mut refused = false;
        while let Some(s) = source {
            refused |= matches!(
                s.downcast_ref::<crate::ssrf::TargetError>(),
                Some(crate::ssrf::TargetError::ForbiddenName(name)) if name == "localhost"
            );
            source = s.source();
        }
        assert!(refused, "not the guard's refusal: {e}");
    }
}
