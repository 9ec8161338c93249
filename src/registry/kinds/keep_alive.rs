//! Kept-alive HTTP/1 connections to plain `http://` targets: [`KeepAlive`].
//!
//! What hyper-util's pooled client did for these targets, without the costs it
//! pays per request for generality: a spawned task per request that waits to put
//! the connection back once the answer's body is read, a boxed future and a
//! service layer around each call, and the pool key built and hashed twice. Here
//! a connection goes back to its origin's idle list when the delivery has read
//! the answer to its end ([`Leased::chunk`]), on the delivery's own task; one
//! whose answer is not read to the end is closed instead.
//!
//! The rest is as the pooled client had it: names resolve through the
//! [`TargetGuard`] (every address DNS returns is checked, and an IP literal is
//! checked too), a connection opens within [`CONNECT_TIMEOUT`] with `TCP_NODELAY`,
//! idle connections are kept [`POOL_IDLE`] at most, the request goes out in origin
//! form with a `host` header (with the port when it is not 80), and a request
//! that a reused connection closed before sending is sent again on another one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

use crate::ssrf::TargetGuard;

use super::outbound::{BoxError, CONNECT_TIMEOUT, POOL_IDLE};

/// One connection's sending half.
type Sender = SendRequest<Full<Bytes>>;

/// How often idle connections past [`POOL_IDLE`] are closed when nothing else
/// touches the pool.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Idle connections by origin (`host:port`), shared by every plain delivery.
///
/// ```ignore
/// // `guard`: the instance's address guard (`crate::ssrf::TargetGuard`).
/// let pool = KeepAlive::new(guard);
/// let req = http::Request::post("http://127.0.0.1:9000/hook").body(Full::default())?;
/// let mut answer = pool.send(req).await?;
/// while answer.chunk().await.is_some() {} // read to the end: the connection is kept
/// ```
pub struct KeepAlive {
    guard: Arc<TargetGuard>,
    idle: Mutex<Idle>,
}

/// The idle lists, and whether a sweeper task runs.
#[derive(Default)]
struct Idle {
    by_origin: HashMap<Authority, Vec<(Sender, Instant)>>,
    sweeping: bool,
}

impl KeepAlive {
    /// An empty pool whose connections go only where `guard` allows.
    pub fn new(guard: Arc<TargetGuard>) -> Arc<Self> {
        Arc::new(Self {
            guard,
            idle: Mutex::new(Idle::default()),
        })
    }

    /// Sends `req` (an absolute `http://` URI) on an idle connection to its
    /// origin, or on a new one; the answer's head, with the connection lent
    /// until its body is read.
    pub async fn send(self: &Arc<Self>, mut req: Request<Full<Bytes>>) -> Result<Leased, BoxError> {
        let origin = origin_form(&mut req)?;
        while let Some(mut sender) = self.checkout(&origin) {
            // The server may have closed it while it waited.
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(res) => return Ok(self.lease(res, sender, origin)),
                Err(mut e) => match e.take_message() {
                    // Closed before the request went out: try another.
                    Some(unsent) => req = unsent,
                    None => return Err(Box::new(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(&origin).await?;
        sender.ready().await?;
        let res = sender.send_request(req).await?;
        Ok(self.lease(res, sender, origin))
    }

    fn lease(
        self: &Arc<Self>,
        res: Response<Incoming>,
        sender: Sender,
        origin: Authority,
    ) -> Leased {
        Leased {
            res,
            back: Some((Arc::clone(self), sender, origin)),
        }
    }

    /// The most recently idle connection to `origin` that is still open and
    /// young enough; the stale ones are dropped (which closes them).
    fn checkout(&self, origin: &Authority) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.by_origin.get_mut(origin)?;
        let found = std::iter::from_fn(|| list.pop())
            .find(|(sender, since)| !sender.is_closed() && since.elapsed() < POOL_IDLE)
            .map(|(sender, _)| sender);
        if list.is_empty() {
            idle.by_origin.remove(origin);
        }
        found
    }

    /// Puts a connection whose answer was read to its end back in its list.
    fn give_back(self: &Arc<Self>, sender: Sender, origin: Authority) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.by_origin
            .entry(origin)
            .or_default()
            .push((sender, Instant::now()));
        if !idle.sweeping {
            idle.sweeping = true;
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
    }

    /// A new connection to `origin`, its addresses checked by the guard, its
    /// driving task spawned.
    async fn connect(&self, origin: &Authority) -> Result<Sender, BoxError> {
        let port = origin.port_u16().unwrap_or(80);
        let host = origin.host();
        let addrs = match host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => {
                self.guard.check_ip(ip)?;
                vec![SocketAddr::new(ip, port)]
            }
            Err(_) => self.guard.allowed_addrs(host).await?,
        };
        let stream = first_to_answer(addrs, port).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the server closes or the pool lets the sender go.
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Closes the idle connections past [`POOL_IDLE`] or already closed.
    fn sweep_once(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.by_origin.retain(|_, list| {
            list.retain(|(sender, since)| !sender.is_closed() && since.elapsed() < POOL_IDLE);
            !list.is_empty()
        });
    }
}

/// Every [`SWEEP_EVERY`], closes what [`KeepAlive::sweep_once`] finds, until the
/// pool is gone.
async fn sweep(pool: Weak<KeepAlive>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        match pool.upgrade() {
            Some(pool) => pool.sweep_once(),
            None => return,
        }
    }
}

/// The first of `addrs` that accepts a TCP connection on `port`, tried in order,
/// each within its share of [`CONNECT_TIMEOUT`] (as hyper's connector divided it),
/// so that an address that never answers leaves time for the next.
async fn first_to_answer(
    addrs: Vec<SocketAddr>,
    port: u16,
) -> Result<tokio::net::TcpStream, BoxError> {
    let share = CONNECT_TIMEOUT / u32::try_from(addrs.len().max(1)).unwrap_or(u32::MAX);
    let mut last: BoxError = "no address to connect to".into();
    for mut addr in addrs {
        addr.set_port(port);
        match tokio::time::timeout(share, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = Box::new(e),
            Err(_) => last = format!("connecting to {addr} timed out").into(),
        }
    }
    Err(last)
}

/// Turns `req`'s absolute URI into origin form (`/path?query`) and adds a `host`
/// header where it has none (the port only when it is not 80, as hyper's
/// client wrote it); the origin its connection is kept under.
fn origin_form(req: &mut Request<Full<Bytes>>) -> Result<Authority, BoxError> {
    let uri = req.uri();
    let origin = uri
        .authority()
        .cloned()
        .ok_or_else(|| format!("no host in {uri}"))?;
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    if !req.headers().contains_key(HOST) {
        let host = match origin.port_u16() {
            Some(port) if port != 80 => format!("{}:{port}", origin.host()),
            _ => origin.host().to_owned(),
        };
        req.headers_mut().insert(HOST, HeaderValue::try_from(host)?);
    }
    *req.uri_mut() = Uri::from(path);
    Ok(origin)
}

/// An answer's head, and its connection until the body has been read to its end.
pub struct Leased {
    res: Response<Incoming>,
    back: Option<(Arc<KeepAlive>, Sender, Authority)>,
}

impl Leased {
    /// The answer.
    pub fn response(&self) -> &Response<Incoming> {
        &self.res
    }

    /// The next piece of the body; `None` at its end (the connection then goes
    /// back to the pool) or on an error (it is closed).
    pub async fn chunk(&mut self) -> Option<Bytes> {
        loop {
            match self.res.body_mut().frame().await {
                None => {
                    if let Some((pool, sender, origin)) = self.back.take() {
                        pool.give_back(sender, origin);
                    }
                    return None;
                }
                Some(Err(_)) => {
                    self.back = None;
                    return None;
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(data);
                    } // trailers: read on
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// How the test receiver answers each request.
    #[derive(Clone, Copy)]
    enum Answering {
        /// `204`, the connection kept open.
        KeepOpen,
        /// `204`, then the connection closed (as an idle timeout would).
        ThenClose,
        /// `200` with a five-byte body.
        WithBody,
    }

    /// A receiver on 127.0.0.1: the connections it accepted, and every request
    /// head it read, in order.
    struct Receiver {
        addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
        heads: Arc<Mutex<Vec<String>>>,
    }

    async fn receiver(answering: Answering) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (accepted.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer_each(conn, answering, seen.clone()));
            }
        });
        Receiver {
            addr,
            accepted,
            heads,
        }
    }

    /// Answers every request head read from `conn` (the tests send no body).
    async fn answer_each(
        mut conn: tokio::net::TcpStream,
        answering: Answering,
        heads: Arc<Mutex<Vec<String>>>,
    ) {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
                continue;
            };
            let head: Vec<u8> = seen.drain(..end + 4).collect();
            heads
                .lock()
                .expect("heads")
                .push(String::from_utf8_lossy(&head).to_lowercase());
            let answer: &[u8] = match answering {
                Answering::WithBody => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
                _ => b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n",
            };
            if conn.write_all(answer).await.is_err() {
                return;
            }
            if let Answering::ThenClose = answering {
                return;
            }
        }
    }

    fn allowing_loopback() -> Arc<KeepAlive> {
        let net = "127.0.0.0/8".parse().expect("net");
        KeepAlive::new(Arc::new(TargetGuard::new(vec![net])))
    }

    fn post(to: &Receiver, path: &str) -> Request<Full<Bytes>> {
        Request::post(format!("http://{}{path}", to.addr))
            .body(Full::default())
            .expect("request")
    }

    /// Sends `req` and reads its answer to the end; its status and body.
    async fn deliver(pool: &Arc<KeepAlive>, req: Request<Full<Bytes>>) -> (u16, Vec<u8>) {
        let mut answer = pool.send(req).await.expect("sent");
        let status = answer.response().status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await {
            body.extend_from_slice(&chunk);
        }
        (status, body)
    }

    #[tokio::test]
    async fn requests_in_turn_share_one_connection_in_origin_form_with_a_host() {
        let to = receiver(Answering::KeepOpen).await;
        let pool = allowing_loopback();
        for path in ["/hook?a=1", "/other"] {
            assert_eq!(deliver(&pool, post(&to, path)).await.0, 204);
        }
        assert_eq!(to.accepted.load(Ordering::SeqCst), 1);
        let heads = to.heads.lock().expect("heads").clone();
        assert!(
            heads[0].starts_with("post /hook?a=1 http/1.1\r\n"),
            "{heads:?}"
        );
        assert!(
            heads[1].starts_with("post /other http/1.1\r\n"),
            "{heads:?}"
        );
        let host = format!("\r\nhost: 127.0.0.1:{}\r\n", to.addr.port());
        assert!(heads.iter().all(|h| h.contains(&host)), "{heads:?}");
    }

    #[tokio::test]
    async fn a_connection_the_receiver_closed_is_not_used_again() {
        let to = receiver(Answering::ThenClose).await;
        let pool = allowing_loopback();
        assert_eq!(deliver(&pool, post(&to, "/one")).await.0, 204);
        // Time for the close to arrive: the idle connection is then seen closed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(deliver(&pool, post(&to, "/two")).await.0, 204);
        assert_eq!(to.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_answer_read_to_its_end_keeps_its_connection_and_one_left_unread_does_not() {
        let to = receiver(Answering::WithBody).await;
        let pool = allowing_loopback();
        assert_eq!(
            deliver(&pool, post(&to, "/read")).await,
            (200, b"hello".to_vec())
        );
        assert_eq!(deliver(&pool, post(&to, "/read")).await.1, b"hello");
        assert_eq!(
            to.accepted.load(Ordering::SeqCst),
            1,
            "read to the end: kept"
        );

        let unread = pool.send(post(&to, "/unread")).await.expect("sent");
        drop(unread);
        assert_eq!(deliver(&pool, post(&to, "/after")).await.1, b"hello");
        assert_eq!(to.accepted.load(Ordering::SeqCst), 2, "left unread: closed");
    }

    #[tokio::test]
    async fn an_ip_literal_the_guard_refuses_is_never_connected_to() {
        let to = receiver(Answering::KeepOpen).await;
        let pool = KeepAlive::new(Arc::new(TargetGuard::default()));
        let Err(e) = pool.send(post(&to, "/hook")).await else {
            panic!("a refused address was reached");
        };
        assert!(
            e.downcast_ref::<crate::ssrf::TargetError>().is_some(),
            "not the guard's refusal: {e}"
        );
        assert_eq!(to.accepted.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn origin_form_keeps_the_path_and_names_the_port_only_when_it_is_not_80() {
        let cases = [
            ("http://example.com/a/b?c=1", "/a/b?c=1", "example.com"),
            ("http://example.com:80/", "/", "example.com"),
            ("http://example.com:8080", "/", "example.com:8080"),
            ("http://[::1]:9000/x", "/x", "[::1]:9000"),
        ];
        for (uri, path, host) in cases {
            let mut req = Request::post(uri).body(Full::default()).expect("request");
            let origin = origin_form(&mut req).expect("origin");
            assert_eq!(req.uri(), path, "{uri}");
            assert_eq!(req.headers()[HOST], host, "{uri}");
            assert_eq!(
                origin.as_str(),
                uri.trim_start_matches("http://")
                    .split('/')
                    .next()
                    .unwrap_or("")
            );
        }
        let mut theirs = Request::post("http://example.com:8080/")
            .header(HOST, "theirs.example")
            .body(Full::default())
            .expect("request");
        origin_form(&mut theirs).expect("origin");
        assert_eq!(theirs.headers().get_all(HOST).iter().count(), 1);
        assert_eq!(theirs.headers()[HOST], "theirs.example");
    }
}
