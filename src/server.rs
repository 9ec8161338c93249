//! The HTTP front door: accepts TCP connections and serves the router on each with
//! hyper's HTTP/1.1 server, within limits that keep slow, idle or oversized clients
//! from holding the service (issue 9):
//!
//! - **header read timeout** ([`HEADER_READ_TIMEOUT`], 10 s): a client must send a
//!   request's whole header section within this long of connecting; a connection
//!   that has not is closed without an answer;
//! - **idle keep-alive timeout** (the same 10 s): hyper restarts the header read
//!   timer whenever a keep-alive connection goes idle after a response, so a
//!   connection that sends no next request within 10 s is closed too;
//! - **header size** ([`MAX_HEADER_BYTES`], 16 KiB for the request line and all
//!   headers): a larger header section gets `431 Request Header Fields Too Large`
//!   and the connection is closed; more than 100 headers get 431 as well;
//! - **open connections** (`MAX_CONNECTIONS`, docs/configuration.md): each
//!   connection holds one
//!   permit of a semaphore until it closes; while none is free the server accepts
//!   nothing, and further clients wait in the kernel's listen backlog;
//! - **bytes of unfinished request bodies** ([`BODY_BUDGET_BYTES`], 64 MiB, or four
//!   times `MAX_BODY_BYTES` if that is more): all bodies still arriving hold what
//!   they have delivered against one budget until they are whole; a chunk that
//!   does not fit fails its request with 503 `unavailable` and `Retry-After: 1`
//!   ([`hookbox_layers::body_budget`]), so stalled uploads on many connections
//!   cannot hold more memory than that;
//! - **graceful shutdown**: when `shutdown` resolves the listener is closed, idle
//!   connections are closed, and requests in flight are answered before their
//!   connections close.
//!
//! The request body's other limits (size, time) are the router's business.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hookbox_layers::body_budget::BodyBudget;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, error};

/// How long a client may take to send a request's header section, counted from
/// the accept or from the end of the previous response (so also the idle
/// keep-alive timeout).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request header section (request line and headers) served; a larger
/// one gets 431.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The most one connection's read buffer holds (hyper's default grows to about
/// 400 KB per connection while a large body streams in, which many connections
/// multiply); header sections ([`MAX_HEADER_BYTES`]) fit well within it.
pub(crate) const MAX_READ_BUFFER: usize = 64 * 1024;

/// The bytes that request bodies still arriving may hold in all (at least four
/// bodies of `MAX_BODY_BYTES`).
pub(crate) const BODY_BUDGET_BYTES: usize = 64 << 20;

/// The front door's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Open connections at most (`MAX_CONNECTIONS`).
    pub max_connections: usize,
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`MAX_HEADER_BYTES`].
    pub max_header_bytes: usize,
    /// See [`BODY_BUDGET_BYTES`].
    pub body_budget: usize,
}

impl Limits {
    /// The default timeouts and sizes with at most `max_connections` connections
    /// and request bodies of at most `max_body_bytes`.
    pub(crate) fn new(max_connections: usize, max_body_bytes: usize) -> Self {
        Self {
            max_connections,
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_header_bytes: MAX_HEADER_BYTES,
            body_budget: BODY_BUDGET_BYTES.max(max_body_bytes.saturating_mul(4)),
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then
/// closes the listener and returns once every open connection has finished (see the
/// module docs).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let http = builder(&limits);
    let permits = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let budget = BodyBudget::new(limits.body_budget);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, permit) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted?,
        };
        let client = crate::guard::ClientAddr(peer(&stream));
        let budget = budget.clone();
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(client);
                req.map(|body| budget.wrap(body))
            },
        ));
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The connection's peer address (unspecified when the socket cannot say).
fn peer(stream: &TcpStream) -> std::net::IpAddr {
    stream
        .peer_addr()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |a| a.ip())
}

/// hyper's HTTP/1.1 connection settings for `limits`.
fn builder(limits: &Limits) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(MAX_READ_BUFFER)
        .keep_alive(true);
    http
}

/// Waits for a free connection permit, then for a connection.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> io::Result<(TcpStream, OwnedSemaphorePermit)> {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| io::Error::other("the connection limit was closed"))?;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return Ok((stream, permit)),
            Err(e) => accept_error(e).await,
        }
    }
}

/// A failed accept: a connection reset before it was accepted is the client's
/// business; anything else (out of file descriptors, most likely) is logged and
/// retried after a second, as hyper's and axum's servers do.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
