//! Kept-alive HTTP/1 connections to plain `http://` targets: [`KeepAlive`].
//!
//! What hyper-util's pooled client did for these targets, without the costs it
//! pays per request for generality: a spawned task per request that waits to put
//! the connection back once the answer's body is read, a boxed future and a
//! service layer around each call, and the pool key built and hashed twice. Here
//! a connection goes back to its origin's idle list when the delivery is done with
//! its answer ([`Leased`]), on the delivery's own task, and the next delivery to
//! that origin waits briefly for it to be ready ([`READY_WAIT`]: hyper drains a
//! body left unread when the rest has arrived, and closes the connection
//! otherwise), else takes another or opens one.
//!
//! The rest is as the pooled client had it: names resolve through the
//! [`TargetGuard`] (every address DNS returns is checked, and an IP literal is
//! checked too), a connection opens within [`CONNECT_TIMEOUT`] with `TCP_NODELAY`
//! (a name's addresses in turn, each family started [`HAPPY_EYEBALLS`] after the
//! first), idle connections are kept [`POOL_IDLE`] at most, the request goes out
//! in origin form with a `host` header (with the port when it is not 80), and a
//! request that a reused connection closed before sending is sent again on
//! another one.

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
use tokio::net::TcpStream;

use crate::ssrf::TargetGuard;

/// How long a connection may take to open (both delivery clients').
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle connection is kept (both delivery clients').
pub const POOL_IDLE: Duration = Duration::from_secs(90);

/// A boxed error, as both delivery clients' sources are.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One connection's sending half.
type Sender = SendRequest<Full<Bytes>>;

/// How often idle connections past [`POOL_IDLE`] are closed when nothing else
/// touches the pool.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// How long a reused connection may take to be ready for the next request (its
/// last answer drained, its last request written) before it is closed and
/// another one taken: at once when all went well.
pub const READY_WAIT: Duration = Duration::from_millis(100);

/// How long a name's addresses of the first family are tried alone before the
/// other family's are tried beside them (RFC 8305; hyper's connector's value).
pub const HAPPY_EYEBALLS: Duration = Duration::from_millis(300);

/// Idle connections by origin (`host:port`), shared by every plain delivery.
///
/// ```ignore
/// // `guard`: the instance's address guard (`crate::ssrf::TargetGuard`).
/// let pool = KeepAlive::new(guard);
/// let req = http::Request::post("http://127.0.0.1:9000/hook").body(Full::default())?;
/// let mut answer = pool.send(req).await?;
/// while answer.chunk().await.is_some() {} // read it; then the connection goes back
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
    /// until the answer is dropped.
    pub async fn send(self: &Arc<Self>, mut req: Request<Full<Bytes>>) -> Result<Leased, BoxError> {
        let origin = origin_form(&mut req)?;
        while let Some(mut sender) = self.checkout(&origin) {
            // The server may have closed it while it waited, or it may still be
            // busy with its last exchange: then it is let go.
            match tokio::time::timeout(READY_WAIT, sender.ready()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => continue,
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
            .find(usable)
            .map(|(sender, _)| sender);
        if list.is_empty() {
            idle.by_origin.remove(origin);
        }
        found
    }

    /// Puts a connection back in its origin's list, unless it is closed.
    fn give_back(&self, sender: Sender, origin: Authority) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.by_origin
            .entry(origin)
            .or_default()
            .push((sender, Instant::now()));
    }

    /// A new connection to `origin`, its addresses checked by the guard, its
    /// driving task spawned (and the sweeper, if none runs).
    async fn connect(self: &Arc<Self>, origin: &Authority) -> Result<Sender, BoxError> {
        let host = origin.host();
        let ips = match host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => {
                self.guard.check_ip(ip)?;
                vec![ip]
            }
            Err(_) => {
                let addrs = self.guard.allowed_addrs(host).await?;
                addrs.iter().map(SocketAddr::ip).collect()
            }
        };
        let port = origin.port_u16().unwrap_or(80);
        let addrs = ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        let stream = first_to_answer(addrs).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the server closes or the pool lets the sender go.
            let _ = conn.await;
        });
        self.start_sweeping();
        Ok(sender)
    }

    /// Spawns the sweeper unless one runs.
    fn start_sweeping(self: &Arc<Self>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if !idle.sweeping {
            idle.sweeping = true;
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
    }

    /// Closes the idle connections past [`POOL_IDLE`] or already closed; false
    /// when none is left (the sweeper then stops).
    fn sweep_once(&self) -> bool {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.by_origin.retain(|_, list| {
            list.retain(usable);
            !list.is_empty()
        });
        let more = !idle.by_origin.is_empty();
        idle.sweeping = more;
        more
    }
}

/// An idle connection that may serve again: open, and idle less than
/// [`POOL_IDLE`].
fn usable((sender, since): &(Sender, Instant)) -> bool {
    !sender.is_closed() && since.elapsed() < POOL_IDLE
}

/// Every [`SWEEP_EVERY`], closes what [`KeepAlive::sweep_once`] finds, until the
/// pool is gone or holds nothing (the next new connection starts it again).
async fn sweep(pool: Weak<KeepAlive>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        match pool.upgrade() {
            Some(pool) if pool.sweep_once() => {}
            _ => return,
        }
    }
}

/// A connection to the first of `addrs` that accepts one: those of
/// the first address's family in turn, and [`HAPPY_EYEBALLS`] later those of
/// the other family beside them (as hyper's connector raced them); each
/// family's addresses share [`CONNECT_TIMEOUT`], so that one that never answers
/// leaves time for the next.
async fn first_to_answer(addrs: Vec<SocketAddr>) -> Result<TcpStream, BoxError> {
    let family = addrs.first().map(SocketAddr::is_ipv6);
    let (first, other): (Vec<_>, Vec<_>) =
        addrs.into_iter().partition(|a| Some(a.is_ipv6()) == family);
    let first = in_turn(first);
    if other.is_empty() {
        return first.await;
    }
    tokio::pin!(first);
    tokio::select! {
        done = &mut first => return match done {
            Ok(stream) => Ok(stream),
            Err(_) => in_turn(other).await,
        },
        () = tokio::time::sleep(HAPPY_EYEBALLS) => {}
    }
    let second = in_turn(other);
    tokio::pin!(second);
    tokio::select! {
        done = &mut first => match done {
            Ok(stream) => Ok(stream),
            Err(_) => second.await,
        },
        done = &mut second => match done {
            Ok(stream) => Ok(stream),
            Err(_) => first.await,
        },
    }
}

/// The first of `addrs` that accepts a connection, tried in order, each within
/// its share of [`CONNECT_TIMEOUT`]; the first error when none does.
async fn in_turn(addrs: Vec<SocketAddr>) -> Result<TcpStream, BoxError> {
    let share = CONNECT_TIMEOUT / u32::try_from(addrs.len().max(1)).unwrap_or(u32::MAX);
    let mut first: Option<BoxError> = None;
    for addr in addrs {
        let failed: BoxError = match tokio::time::timeout(share, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => Box::new(e),
            Err(_) => format!("connecting to {addr} timed out").into(),
        };
        first.get_or_insert(failed);
    }
    Err(first.unwrap_or_else(|| "no address to connect to".into()))
}

/// Turns `req`'s absolute `http://` URI into origin form (`/path?query`) and
/// adds a `host` header where it has none (the port only when it is not 80, as
/// hyper's client wrote it); the origin its connection is kept under.
fn origin_form(req: &mut Request<Full<Bytes>>) -> Result<Authority, BoxError> {
    let uri = req.uri();
    if uri.scheme_str() != Some("http") {
        return Err(format!("not an http:// URI: {uri}").into());
    }
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

/// An answer's head, and its connection until the answer is dropped: then it
/// goes back to the pool (hyper drains what is left of the body if it has
/// arrived, or closes the connection), unless reading the body failed.
pub struct Leased {
    res: Response<Incoming>,
    back: Option<(Arc<KeepAlive>, Sender, Authority)>,
}

impl Leased {
    /// The answer.
    pub fn response(&self) -> &Response<Incoming> {
        &self.res
    }

    /// The next piece of the body; `None` at its end or on an error (the
    /// connection is then closed, not reused).
    pub async fn chunk(&mut self) -> Option<Bytes> {
        loop {
            match self.res.body_mut().frame().await {
                None => return None,
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

impl Drop for Leased {
    fn drop(&mut self) {
        if let Some((pool, sender, origin)) = self.back.take() {
            pool.give_back(sender, origin);
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
        /// `204`, then the connection closed without a word (as an idle
        /// timeout closes it).
        ThenClose,
        /// `204` with `connection: close`, then closed.
        SayingClose,
        /// `200` with a five-byte body.
        WithBody,
        /// `200` announcing 100,000 bytes, of which it sends ten, then waits.
        Stalling,
    }

    impl Answering {
        fn answer(self) -> &'static [u8] {
            match self {
                Self::KeepOpen | Self::ThenClose => {
                    b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
                }
                Self::SayingClose => {
                    b"HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
                }
                Self::WithBody => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
                Self::Stalling => b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n0123456789",
            }
        }
    }

    /// A receiver on 127.0.0.1: the connections it accepted, and every request
    /// head it read, in order.
    struct Receiver {
        addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
        heads: Arc<Mutex<Vec<String>>>,
    }

    impl Receiver {
        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
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
            if conn.write_all(answering.answer()).await.is_err() {
                return;
            }
            if let Answering::ThenClose | Answering::SayingClose = answering {
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
        assert_eq!(to.accepted(), 1);
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
    async fn requests_at_once_take_a_connection_each_and_keep_both() {
        let to = receiver(Answering::KeepOpen).await;
        let pool = allowing_loopback();
        let (one, two) = tokio::join!(pool.send(post(&to, "/one")), pool.send(post(&to, "/two")));
        drop((one.expect("one"), two.expect("two")));
        assert_eq!(to.accepted(), 2);
        for path in ["/three", "/four", "/five"] {
            assert_eq!(deliver(&pool, post(&to, path)).await.0, 204);
        }
        assert_eq!(to.accepted(), 2, "both kept, one reused in turn");
    }

    #[tokio::test]
    async fn a_connection_the_answer_closes_is_not_used_again() {
        let to = receiver(Answering::SayingClose).await;
        let pool = allowing_loopback();
        for path in ["/one", "/two", "/three"] {
            assert_eq!(deliver(&pool, post(&to, path)).await.0, 204);
        }
        assert_eq!(to.accepted(), 3);
    }

    #[tokio::test]
    async fn a_connection_the_receiver_closed_while_idle_is_not_used_again() {
        let to = receiver(Answering::ThenClose).await;
        let pool = allowing_loopback();
        assert_eq!(deliver(&pool, post(&to, "/one")).await.0, 204);
        // Time for the close to arrive (on loopback, at once): the idle
        // connection is then seen closed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(deliver(&pool, post(&to, "/two")).await.0, 204);
        assert_eq!(to.accepted(), 2);
    }

    #[tokio::test]
    async fn a_body_read_or_arrived_keeps_its_connection_and_one_still_coming_does_not() {
        let to = receiver(Answering::WithBody).await;
        let pool = allowing_loopback();
        assert_eq!(
            deliver(&pool, post(&to, "/read")).await,
            (200, b"hello".to_vec())
        );
        // Left unread but all arrived: hyper drains it and the connection stays.
        drop(pool.send(post(&to, "/unread")).await.expect("sent"));
        assert_eq!(deliver(&pool, post(&to, "/after")).await.1, b"hello");
        assert_eq!(to.accepted(), 1);

        let stalling = receiver(Answering::Stalling).await;
        let mut answer = pool.send(post(&stalling, "/big")).await.expect("sent");
        assert_eq!(answer.chunk().await.as_deref(), Some(&b"0123456789"[..]));
        drop(answer);
        // The next one does not wait for the rest: a new connection.
        let next =
            tokio::time::timeout(Duration::from_secs(5), pool.send(post(&stalling, "/next")));
        assert_eq!(
            next.await
                .expect("in time")
                .expect("sent")
                .response()
                .status(),
            200
        );
        assert_eq!(stalling.accepted(), 2);
    }

    #[tokio::test]
    async fn an_ip_literal_the_guard_refuses_is_never_connected_to() {
        let to = receiver(Answering::KeepOpen).await;
        let pool = KeepAlive::new(Arc::new(TargetGuard::default()));
        let Err(e) = pool.send(post(&to, "/hook")).await else {
            panic!("a refused address was reached");
        };
        assert!(
            matches!(
                e.downcast_ref::<crate::ssrf::TargetError>(),
                Some(crate::ssrf::TargetError::Forbidden(ip)) if *ip == to.addr.ip()
            ),
            "not the guard's refusal of the address: {e}"
        );
        assert_eq!(to.accepted(), 0);
    }

    #[tokio::test]
    async fn the_next_address_is_tried_when_one_refuses_and_the_first_error_is_kept() {
        let to = receiver(Answering::KeepOpen).await;
        let port = to.addr.port();
        // Nothing listens on 127.0.0.2 at that port: refused.
        let dead = SocketAddr::from(([127, 0, 0, 2], port));
        let stream = first_to_answer(vec![dead, to.addr])
            .await
            .expect("connected");
        assert_eq!(stream.peer_addr().expect("peer"), to.addr);
        let Err(e) = in_turn(vec![dead, SocketAddr::from(([127, 0, 0, 3], port))]).await else {
            panic!("connected to nothing");
        };
        let io = e.downcast_ref::<std::io::Error>().expect("an io error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn origin_form_keeps_the_path_and_names_the_port_only_when_it_is_not_80() {
        let cases = [
            (
                "http://example.com/a/b?c=1",
                "/a/b?c=1",
                "example.com",
                "example.com",
            ),
            (
                "http://example.com:80/",
                "/",
                "example.com",
                "example.com:80",
            ),
            (
                "http://example.com:8080",
                "/",
                "example.com:8080",
                "example.com:8080",
            ),
            ("http://[::1]:9000/x", "/x", "[::1]:9000", "[::1]:9000"),
        ];
        for (uri, path, host, origin) in cases {
            let mut req = Request::post(uri).body(Full::default()).expect("request");
            assert_eq!(origin_form(&mut req).expect("origin").as_str(), origin);
            assert_eq!(req.uri(), path, "{uri}");
            assert_eq!(req.headers()[HOST], host, "{uri}");
        }
        let mut theirs = Request::post("http://example.com:8080/")
            .header(HOST, "theirs.example")
            .body(Full::default())
            .expect("request");
        origin_form(&mut theirs).expect("origin");
        assert_eq!(theirs.headers().get_all(HOST).iter().count(), 1);
        assert_eq!(theirs.headers()[HOST], "theirs.example");
        for other in ["https://example.com/", "/relative"] {
            let mut req = Request::post(other).body(Full::default()).expect("request");
            assert!(origin_form(&mut req).is_err(), "{other}");
        }
    }
}
