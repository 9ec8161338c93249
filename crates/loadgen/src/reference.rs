//! The reference hookbox's HTTP delivery is measured against (issue 28, item 2): a
//! bare reqwest client — the library hookbox delivers with — posting requests shaped
//! like hookbox's deliveries (the same JSON envelope, `content-type`, `webhook-id`
//! and `webhook-timestamp`) to the same built-in receiver, `in_flight` at once, with
//! nothing around them: no database, no queue, no retries, no signatures.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::BoxError;

/// What one reference run did.
pub(crate) struct ReferenceRun {
    /// Requests answered 2xx.
    pub(crate) delivered: u64,
    /// From the first request sent to the last answer read.
    pub(crate) elapsed: Duration,
}

/// Posts `total` deliveries to `http://{receiver}/reference`, `in_flight` at once,
/// each body a delivery envelope around a payload of about `payload_bytes`.
pub(crate) async fn run_reference(
    receiver: SocketAddr,
    total: u64,
    in_flight: u64,
    payload_bytes: usize,
) -> Result<ReferenceRun, BoxError> {
    let client = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("http://{receiver}/reference");
    let body = envelope(payload_bytes)?;
    let next = Arc::new(AtomicU64::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..in_flight.max(1))
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            let (next, delivered) = (Arc::clone(&next), Arc::clone(&delivered));
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return;
                    }
                    if post(&client, &url, &body, n).await {
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    Ok(ReferenceRun {
        delivered: delivered.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    })
}

/// One delivery as hookbox makes it (headers and body), the answer read whole;
/// true for a 2xx.
async fn post(client: &reqwest::Client, url: &str, body: &bytes::Bytes, n: u64) -> bool {
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", format!("reference-{n}"))
        .header("webhook-timestamp", timestamp.to_string())
        .body(body.clone())
        .send()
        .await;
    match sent {
        Ok(res) => {
            let ok = res.status().is_success();
            ok && res.bytes().await.is_ok()
        }
        Err(_) => false,
    }
}

/// `{"id", "event_type", "payload", "created_at"}` as hookbox's http handlers send
/// it, around loadgen's usual payload.
fn envelope(payload_bytes: usize) -> Result<bytes::Bytes, BoxError> {
    let event = crate::post::event_body("bench.reference", "reference", payload_bytes)?;
    let event: serde_json::Value = serde_json::from_slice(&event)?;
    let body = serde_json::json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "event_type": "bench.reference",
        "payload": event["payload"],
        "created_at": "2026-11-28T00:00:00.000000+00:00",
    });
    Ok(bytes::Bytes::from(serde_json::to_vec(&body)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::{Tally, start_receiver};

    #[tokio::test]
    async fn every_reference_request_reaches_the_receiver_once() -> Result<(), BoxError> {
        let tally = Arc::new(Tally::default());
        let receiver = start_receiver(Arc::clone(&tally)).await?;
        let run = run_reference(receiver, 300, 8, 256).await?;
        assert_eq!(run.delivered, 300);
        assert_eq!(tally.unique.load(Ordering::Relaxed), 300);
        assert_eq!(tally.requests.load(Ordering::Relaxed), 300);
        assert_eq!(tally.lock().per_path.get("/reference"), Some(&300));
        Ok(())
    }
}
