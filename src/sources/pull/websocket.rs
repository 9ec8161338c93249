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
/// Most messages committed in one transaction.
pub(super) const MAX_GROUP: usize = 4096;

/// What the reader hands over.
enum Read {
    /// A message's text.
    Text(String),
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
            Err(error) => {
                if !a.fail(backoff, &error, None).await {
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

/// Connects (with the manifest's headers) and subscribes from `cursor`.
async fn connect(
    a: &Adapter,
    url: &url::Url,
    subscribe: Option<&str>,
    cursor: Option<&str>,
) -> Result<Ws, String> {
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("bad WebSocket request: {e}"))?;
    for (name, value) in &a.spec.headers {
        request.headers_mut().insert(name.clone(), value.clone());
    }
    let (mut ws, _) =
        tokio::time::timeout(REQUEST_TIMEOUT, tokio_tungstenite::connect_async(request))
            .await
            .map_err(|_| "connecting timed out".to_owned())?
            .map_err(|e| format!("connecting failed: {e}"))?;
    if let Some(template) = subscribe {
        let message = subscribe_message(template, cursor);
        ws.send(Message::text(message))
            .await
            .map_err(|e| format!("sending the subscribe message failed: {e}"))?;
    }
    Ok(ws)
}

/// Reads messages into `tx` until the connection ends or `stop`.
async fn read(mut ws: Ws, tx: mpsc::Sender<Read>, stop: CancellationToken) {
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => break,
            next = ws.next() => next,
        };
        let read = match next {
            Some(Ok(Message::Text(text))) => Read::Text(text.as_str().to_owned()),
            Some(Ok(Message::Binary(bytes))) => {
                Read::Text(String::from_utf8_lossy(&bytes).into_owned())
            }
            Some(Ok(Message::Close(frame))) => Read::Ended(match frame {
                Some(f) => format!(
                    "the upstream closed the connection ({} {})",
                    f.code, f.reason
                ),
                None => "the upstream closed the connection".to_owned(),
            }),
            Some(Ok(_)) => continue,
            Some(Err(e)) => Read::Ended(format!("reading failed: {e}")),
            None => Read::Ended("the connection ended".to_owned()),
        };
        let ended = matches!(read, Read::Ended(_));
        let sent = tokio::select! {
            () = stop.cancelled() => break,
            sent = tx.send(read) => sent,
        };
        if ended || sent.is_err() {
            break;
        }
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
            n = rx.recv_many(&mut buf, MAX_GROUP) => {
                if n == 0 {
                    return Closed::Failed("the connection ended".into());
                }
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
    let fetched: Vec<Fetched> = reads
        .into_iter()
        .filter_map(|r| match r {
            Read::Text(text) => Some(a.read(text)),
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
    Ok((committed, ended))
}
