//! `kind = "websocket"`: connect, send `subscribe` with `{cursor}` replaced by the
//! JSON of the committed cursor, read text messages, commit them in groups, and
//! reconnect (resubscribing from the last committed cursor) when the connection
//! drops.
//!
//! A reader task reads ahead into a bounded channel while the adapter commits what
//! is already read, all of it at once (group commit: a burst is a few commits, not
//! one per message). While the queue is full the adapter takes nothing from the
//! channel; once the channel is full the reader stops reading the socket, and the
//! upstream's sends wait in TCP's buffers — nothing fetched is dropped. On shutdown
//! the reader stops first, and what it read is committed.
//!
//! What is read ahead is bounded in bytes as well as in messages: each message
//! holds its size against [`READ_AHEAD_BYTES`] until it is committed, and the
//! reader waits for room before it reads on (a message larger than the whole
//! budget takes all of it). A connection that stays silent is probed: a Ping every
//! [`PING_INTERVAL`] while nothing arrives, and when nothing at all (no message, no
//! Pong) has arrived for [`SILENCE_LIMIT`] the connection counts as dropped — the
//! source fails, backs off and reconnects, so a frozen upstream does not stay
//! `running`.

use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

use super::REQUEST_TIMEOUT;
use super::adapter::{Adapter, Committed, End, Fetched, Session};
use super::backoff::Backoff;
use super::item::subscribe_message;
use super::spec::Transport;

/// Messages read ahead of the commits.
pub(super) const READ_AHEAD: usize = 8192;
/// Bytes of messages read ahead of the commits.
pub(super) const READ_AHEAD_BYTES: usize = 16 << 20;
/// How long a silent connection waits before it is pinged.
pub(super) const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(20);
/// How long a connection may stay silent (not even a Pong) before it counts as
/// dropped.
pub(super) const SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often the lag gauge is refreshed while no message comes.
const LAG_TICK: std::time::Duration = std::time::Duration::from_secs(1);
/// Most messages committed in one transaction.
pub(super) const MAX_GROUP: usize = 4096;

/// What the reader hands over.
enum Read {
    /// A message's text, holding its bytes of the read-ahead budget.
    Text(String, tokio::sync::OwnedSemaphorePermit),
    /// The connection ended: why.
    Ended(String),
}

/// How one connection ended.
enum Closed {
    Stopped,
    /// A reset: reconnect at once from the new cursor.
    Reset,
    /// Dropped or failed: back off, then reconnect.
    Failed(String),
    /// The lease or the store failed.
    Lost(String),
}

/// Reads until stopped or the lease is lost.
pub(super) async fn run(a: &Adapter, s: &mut Session, backoff: &mut Backoff) -> End {
    let Transport::WebSocket { url, subscribe } = &a.spec.transport else {
        return End::Lost("not a websocket source".into());
    };
    loop {
        if a.reset_asked() {
            if let Err(e) = s.reload().await {
                return End::Lost(format!("cannot read the cursor: {e}"));
            }
        }
        if !a.wait_for_room().await {
            return End::Stopped;
        }
        let connected = tokio::select! {
            () = a.stop.cancelled() => return End::Stopped,
            c = connect(a, url, subscribe.as_deref(), s.cursor.as_deref()) => c,
        };
        let ws = match connected {
            Ok(ws) => ws,
            Err((error, retry_after)) => {
                if !a.fail(backoff, &error, retry_after).await {
                    return End::Stopped;
                }
                continue;
            }
        };
        a.status().succeeded();
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let stop_reading = CancellationToken::new();
        let reader = tokio::spawn(read(ws, tx, stop_reading.clone()));
        let closed = commit_loop(a, s, backoff, rx, &stop_reading).await;
        stop_reading.cancel();
        let _ = reader.await;
        match closed {
            Closed::Stopped => return End::Stopped,
            Closed::Reset => {}
            Closed::Lost(error) => return End::Lost(error),
            Closed::Failed(error) => {
                if !a.fail(backoff, &error, None).await {
                    return End::Stopped;
                }
            }
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects (with the manifest's headers) and subscribes from `cursor`; or why
/// not, with the `Retry-After` of an HTTP answer that refused the upgrade (a 429
/// or 503 asking to wait is honoured like a poll source's, SPEC §7).
async fn connect(
    a: &Adapter,
    url: &url::Url,
    subscribe: Option<&str>,
    cursor: Option<&str>,
) -> Result<Ws, (String, Option<std::time::Duration>)> {
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| (format!("bad WebSocket request: {e}"), None))?;
    for (name, value) in &a.spec.headers {
        request.headers_mut().insert(name.clone(), value.clone());
    }
    let (mut ws, _) =
        tokio::time::timeout(REQUEST_TIMEOUT, tokio_tungstenite::connect_async(request))
            .await
            .map_err(|_| ("connecting timed out".to_owned(), None))?
            .map_err(|e| {
                let wait = match &e {
                    tokio_tungstenite::tungstenite::Error::Http(answer) => {
                        super::backoff::retry_after(answer.headers())
                    }
                    _ => None,
                };
                (format!("connecting failed: {e}"), wait)
            })?;
    if let Some(template) = subscribe {
        let message = subscribe_message(template, cursor);
        ws.send(Message::text(message))
            .await
            .map_err(|e| (format!("sending the subscribe message failed: {e}"), None))?;
    }
    Ok(ws)
}

/// The ping interval and the silence limit: [`PING_INTERVAL`] and
/// [`SILENCE_LIMIT`], or (for tests, not a documented setting) a ping every
/// `HOOKBOX_WS_PING_MS` milliseconds and three times that as the limit.
fn probing() -> (std::time::Duration, std::time::Duration) {
    std::env::var("HOOKBOX_WS_PING_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or((PING_INTERVAL, SILENCE_LIMIT), |ms| {
            let every = std::time::Duration::from_millis(ms);
            (every, every * 3)
        })
}

/// Reads messages into `tx` until the connection ends, stays silent too long, or
/// `stop`.
async fn read(mut ws: Ws, tx: mpsc::Sender<Read>, stop: CancellationToken) {
    let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(READ_AHEAD_BYTES));
    let (ping_every, silence_limit) = probing();
    let mut heard = tokio::time::Instant::now();
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => break,
            next = ws.next() => next,
            () = tokio::time::sleep(ping_every) => {
                if heard.elapsed() >= silence_limit {
                    let why = format!(
                        "the upstream sent nothing, not even a Pong, for {}",
                        humantime::format_duration(silence_limit)
                    );
                    let _ = tx.send(Read::Ended(why)).await;
                    break;
                }
                if ws.send(Message::Ping(Default::default())).await.is_err() {
                    let _ = tx.send(Read::Ended("sending a Ping failed".into())).await;
                    break;
                }
                continue;
            }
        };
        heard = tokio::time::Instant::now();
        let text = match next {
            Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
            Some(Ok(Message::Binary(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
            Some(Ok(Message::Close(frame))) => {
                let why = match frame {
                    Some(f) => format!(
                        "the upstream closed the connection ({} {})",
                        f.code, f.reason
                    ),
                    None => "the upstream closed the connection".to_owned(),
                };
                let _ = tx.send(Read::Ended(why)).await;
                break;
            }
            Some(Ok(_)) => continue, // Ping (answered by the library), Pong, frames
            Some(Err(e)) => {
                let _ = tx.send(Read::Ended(format!("reading failed: {e}"))).await;
                break;
            }
            None => {
                let _ = tx.send(Read::Ended("the connection ended".into())).await;
                break;
            }
        };
        // Room for its bytes first: until then the socket is not read.
        let n = u32::try_from(text.len().clamp(1, READ_AHEAD_BYTES)).unwrap_or(u32::MAX);
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = budget.clone().acquire_many_owned(n) => permit,
        };
        let Ok(permit) = permit else { break };
        let sent = tokio::select! {
            () = stop.cancelled() => break,
            sent = tx.send(Read::Text(text, permit)) => sent,
        };
        if sent.is_err() {
            break;
        }
        // Silence counts from here: a wait for room (the queue full) is ours.
        heard = tokio::time::Instant::now();
    }
    let _ = ws.close(None).await;
}

/// Commits what the reader reads, in groups, until the connection ends, a reset,
/// or shutdown (then: stop reading, commit what was read).
async fn commit_loop(
    a: &Adapter,
    s: &mut Session,
    backoff: &mut Backoff,
    mut rx: mpsc::Receiver<Read>,
    stop_reading: &CancellationToken,
) -> Closed {
    let status = a.status();
    let mut buf = Vec::with_capacity(MAX_GROUP);
    loop {
        if !a.wait_for_room().await {
            stop_reading.cancel();
            rx.close();
            while let Some(r) = rx.recv().await {
                buf.push(r);
            }
            let _ = commit(a, s, std::mem::take(&mut buf)).await;
            return Closed::Stopped;
        }
        tokio::select! {
            biased;
            () = a.stop.cancelled() => {
                stop_reading.cancel();
                rx.close();
                while let Some(r) = rx.recv().await {
                    buf.push(r);
                }
                let _ = commit(a, s, std::mem::take(&mut buf)).await;
                return Closed::Stopped;
            }
            () = status.reset.notified() => {
                if let Err(e) = s.reload().await {
                    return Closed::Lost(format!("cannot read the cursor: {e}"));
                }
                return Closed::Reset;
            }
            n = rx.recv_many(&mut buf, a.room(MAX_GROUP)) => {
                if n == 0 {
                    return Closed::Failed("the connection ended".into());
                }
            }
            // A quiet stream: the lag gauge still follows the clock.
            () = tokio::time::sleep(LAG_TICK) => {
                status.update_lag();
                continue;
            }
        }
        match commit(a, s, std::mem::take(&mut buf)).await {
            Ok((_, Some(ended))) => return Closed::Failed(ended),
            Ok((Committed::Moved, None)) => return Closed::Reset,
            Ok((Committed::Done, None)) => {
                backoff.reset();
                status.succeeded();
                status.update_lag();
            }
            Err(e) => {
                let error = format!("commit failed: {e}");
                if s.lease_lost().await {
                    return Closed::Lost(error);
                }
                return Closed::Failed(error);
            }
        }
    }
}

/// Commits a group of reads; also says whether the connection ended after them.
async fn commit(
    a: &Adapter,
    s: &mut Session,
    reads: Vec<Read>,
) -> Result<(Committed, Option<String>), crate::store::StoreError> {
    let mut ended = None;
    // The messages' bytes stay held against the read-ahead until committed.
    let mut held = Vec::with_capacity(reads.len());
    let fetched: Vec<Fetched> = reads
        .into_iter()
        .filter_map(|r| match r {
            Read::Text(text, permit) => {
                held.push(permit);
                Some(a.read(text))
            }
            Read::Ended(why) => {
                ended = Some(why);
                None
            }
        })
        .collect();
    if fetched.is_empty() {
        return Ok((Committed::Done, ended));
    }
    let committed = a.commit(s, fetched).await?;
    drop(held);
    Ok((committed, ended))
}
