//! `websocket`: a WebSocket upstream for a hookbox pull source. It listens on
//! `--listen`; when hookbox connects and subscribes it sends `--messages` small
//! text messages as fast as it can, then polls `GET /sources` until the source's
//! committed cursor is the last message's, and reports messages per second from the
//! subscribe to that commit.
//!
//! hookbox must have a source for it, e.g. `sources/bench-ws.toml`:
//!
//! ```toml
//! kind = "websocket"
//! [websocket]
//! url = "ws://127.0.0.1:9100"
//! subscribe = '{"op": "subscribe", "after": {cursor}}'
//! cursor = "/pos"
//! sequence = "/seq"
//! ```
//!
//! Each run has its own id: message ids (`<run>-<n>`) and cursors (`"<run>:<n>"`)
//! are new every run, so every run stores new events; a reconnect in the middle of a
//! run resumes after the cursor it names.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hyper::Method;
use hyper::header::HeaderValue;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

use crate::BoxError;
use crate::admin::Admin;
use crate::cli::WebsocketArgs;
use crate::conn::{Connection, Target, check_reachable};

/// How often `GET /sources` is polled while waiting for the last commit.
const POLL: Duration = Duration::from_millis(50);
/// Messages written before a flush.
const FLUSH_EVERY: u64 = 256;

/// When the first subscribe arrived.
static SUBSCRIBED: OnceLock<Instant> = OnceLock::new();

/// Runs the upstream and waits for hookbox to commit every message.
pub(crate) async fn run_websocket(args: WebsocketArgs) -> Result<ExitCode, BoxError> {
    let target = Arc::new(Target::resolve(&args.url).await?);
    check_reachable(&target).await?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let total = args.messages;
    eprintln!(
        "loadgen: WebSocket upstream on ws://{}: waiting for hookbox's source {:?} to subscribe",
        args.listen, args.source
    );
    let upstream_run = run.clone();
    tokio::spawn(async move { serve(listener, upstream_run, total).await });
    let mut admin = Admin {
        target: target.clone(),
        conn: Connection::new(target.clone()),
        authorization: args
            .admin_token
            .as_deref()
            .map(|t| HeaderValue::from_str(&format!("Bearer {t}")))
            .transpose()?,
    };
    let deadline = Instant::now() + args.timeout;
    let last = format!("{run}:{total}");
    let started = loop {
        if let Some(at) = SUBSCRIBED.get() {
            break *at;
        }
        if Instant::now() > deadline {
            return Err(
                "hookbox never subscribed: is its source's url this --listen address?".into(),
            );
        }
        tokio::time::sleep(POLL).await;
    };
    loop {
        let (status, text) = admin.send(Method::GET, "/sources", None).await?;
        if !status.is_success() {
            return Err(format!("GET /sources answered {status}: {}", text.trim()).into());
        }
        let list: serde_json::Value = serde_json::from_str(&text)?;
        let entry = list["items"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == args.source.as_str()))
            .ok_or_else(|| format!("hookbox has no source {:?}", args.source))?;
        if entry["cursor"] == last.as_str() {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("loadgen: timed out; the source says {entry}");
            return Ok(ExitCode::FAILURE);
        }
        tokio::time::sleep(POLL).await;
    }
    let elapsed = started.elapsed();
    let rate = total as f64 / elapsed.as_secs_f64();
    println!("| mode | messages | seconds | committed msg/s |");
    println!("|---|---|---|---|");
    println!(
        "| websocket | {total} | {:.2} | {rate:.0} |",
        elapsed.as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// Accepts connections; each gets the messages after the cursor it subscribes from.
async fn serve(listener: TcpListener, run: String, total: u64) {
    while let Ok((tcp, _)) = listener.accept().await {
        let run = run.clone();
        tokio::spawn(async move {
            if let Err(e) = stream(tcp, &run, total).await {
                eprintln!("loadgen: upstream connection: {e}");
            }
        });
    }
}

async fn stream(tcp: tokio::net::TcpStream, run: &str, total: u64) -> Result<(), BoxError> {
    let _ = tcp.set_nodelay(true);
    let mut ws = tokio_tungstenite::accept_async(tcp).await?;
    let Some(Ok(Message::Text(subscribe))) = ws.next().await else {
        return Err("no subscribe message".into());
    };
    let subscribe: serde_json::Value = serde_json::from_str(subscribe.as_str())?;
    let after = subscribe["after"]
        .as_str()
        .and_then(|c| c.strip_prefix(run))
        .and_then(|c| c.strip_prefix(':'))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let _ = SUBSCRIBED.set(Instant::now());
    for n in (after + 1)..=total {
        let text = format!(
            r#"{{"id":"{run}-{n}","type":"tick","pos":"{run}:{n}","seq":{n},"price":{}.{:02}}}"#,
            100 + n % 50,
            n % 100
        );
        ws.feed(Message::text(text)).await?;
        if n % FLUSH_EVERY == 0 {
            ws.flush().await?;
        }
    }
    ws.flush().await?;
    while let Some(Ok(_)) = ws.next().await {}
    Ok(())
}
