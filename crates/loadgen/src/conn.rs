//! Where requests go and the HTTP/1.1 keep-alive connections that carry them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::BoxError;

/// Limit for one request, from send to the end of the response body.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit for opening one TCP connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where requests go: a resolved address plus what goes into `Host` and paths.
#[derive(Debug)]
pub(crate) struct Target {
    /// Address to connect to.
    pub(crate) addr: SocketAddr,
    /// Value of the `Host` header.
    pub(crate) host: HeaderValue,
    /// Path prefix from the base URL, without a trailing slash (usually empty).
    pub(crate) base_path: String,
}

impl Target {
    /// Parses a base URL such as `http://127.0.0.1:8000` and resolves its host.
    pub(crate) async fn resolve(url: &str) -> Result<Self, BoxError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid --url {url:?}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("--url {url:?}: only http:// URLs are supported").into());
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("--url {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = tokio::net::lookup_host((authority.host(), port))
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", authority.host()))?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", authority.host()))?;
        Ok(Self {
            addr,
            host: HeaderValue::from_str(authority.as_str())?,
            base_path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// Full request path for an endpoint such as `/webhooks`.
    pub(crate) fn path(&self, endpoint: &str) -> String {
        format!("{}{endpoint}", self.base_path)
    }
}

/// One HTTP/1.1 keep-alive connection that reopens itself when it was closed.
pub(crate) struct Connection {
    pub(crate) target: Arc<Target>,
    pub(crate) sender: Option<SendRequest<Full<Bytes>>>,
    /// How many TCP connections this has opened so far.
    pub(crate) opened: u64,
}

impl Connection {
    /// A connection that opens lazily, on the first request.
    pub(crate) fn new(target: Arc<Target>) -> Self {
        Self {
            target,
            sender: None,
            opened: 0,
        }
    }

    /// Sends one request and reads the whole response body.
    ///
    /// On any error the connection is dropped and the next call reconnects.
    pub(crate) async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Bytes>, BoxError> {
        let result = tokio::time::timeout(REQUEST_TIMEOUT, self.send_inner(req)).await;
        let result = result.unwrap_or_else(|_| Err("request timed out".into()));
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    pub(crate) async fn send_inner(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Bytes>, BoxError> {
        let sender = self.ready_sender().await?;
        let response = sender.send_request(req).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Response::from_parts(parts, body))
    }

    /// The current sender if it is still usable, else a freshly opened one.
    pub(crate) async fn ready_sender(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, BoxError> {
        if let Some(sender) = self.sender.as_mut() {
            // A keep-alive connection the server closed while idle is not an
            // error: it just gets replaced below.
            if sender.ready().await.is_err() {
                self.sender = None;
            }
        }
        if self.sender.is_none() {
            self.sender = Some(open_connection(self.target.addr).await?);
            self.opened += 1;
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "connection vanished".into())
    }
}

/// Opens a TCP connection (with `TCP_NODELAY`) and performs the HTTP/1.1 handshake.
pub(crate) async fn open_connection(
    addr: SocketAddr,
) -> Result<SendRequest<Full<Bytes>>, BoxError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr} timed out"))?
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // A broken connection also fails the pending `send_request`, which is
        // where it gets counted; nothing more to do with the error here.
        let _ = connection.await;
    });
    Ok(sender)
}

/// Builds a GET request for `path`.
pub(crate) fn get_request(target: &Target, path: &str) -> Result<Request<Full<Bytes>>, BoxError> {
    Ok(Request::builder()
        .method(Method::GET)
        .uri(target.path(path))
        .header(HOST, target.host.clone())
        .body(Full::new(Bytes::new()))?)
}

/// Fails early, with one clear line, when nothing listens at the target.
pub(crate) async fn check_reachable(target: &Target) -> Result<(), BoxError> {
    open_connection(target.addr).await.map(drop)
}
