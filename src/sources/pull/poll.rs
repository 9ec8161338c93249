//! `kind = "poll"`: GET the URL with the committed cursor in `cursor_param` (left out
//! while there is none), take the items at the `items` pointer, commit them with
//! the last item's cursor, and ask again at once; after a page without items (or
//! one whose items moved no cursor) wait `interval`.

use std::time::Duration;

use serde_json::value::RawValue;

use super::adapter::{Adapter, Committed, End, Session};
use super::backoff::{Backoff, retry_after};
use super::item::cursor_param;
use super::spec::Transport;
use crate::json;

/// The largest answer read, in bytes.
pub(super) const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// Most items committed in one transaction (a larger page is committed in chunks).
pub(super) const CHUNK_ITEMS: usize = 1_000;
/// Most items taken from one page; the rest are fetched again from the cursor of
/// the last one taken.
pub(super) const MAX_PAGE_ITEMS: usize = 20_000;

/// A failed fetch: what to log and show, and the upstream's `Retry-After`.
struct Failure {
    error: String,
    retry_after: Option<Duration>,
}

impl Failure {
    fn new(error: String) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// Polls until stopped or the lease is lost.
pub(super) async fn run(a: &Adapter, s: &mut Session, backoff: &mut Backoff) -> End {
    let Transport::Poll {
        url,
        cursor_param: param,
        interval,
        items,
    } = &a.spec.transport
    else {
        return End::Lost("not a poll source".into());
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
        let mut target = url.clone();
        if let (Some(param), Some(cursor)) = (param, &s.cursor) {
            target
                .query_pairs_mut()
                .append_pair(param, &cursor_param(cursor));
        }
        let mut request = a.client.get(target);
        for (name, value) in &a.spec.headers {
            request = request.header(name, value);
        }
        let answer = tokio::select! {
            () = a.stop.cancelled() => return End::Stopped,
            answer = fetch(request, items) => answer,
        };
        let texts = match answer {
            Ok(texts) => texts,
            Err(f) => {
                if !a.fail(backoff, &f.error, f.retry_after).await {
                    return End::Stopped;
                }
                continue;
            }
        };
        a.status().succeeded();
        a.status().update_lag();
        backoff.reset();
        if texts.is_empty() {
            if !wait(a, *interval).await {
                return End::Stopped;
            }
            continue;
        }
        let before = s.cursor.clone();
        match commit_page(a, s, texts).await {
            Ok(Committed::Moved) => continue,
            Ok(Committed::Done) if s.cursor == before => {
                // Items, but no cursor moved: asking again at once would fetch the
                // same page forever.
                if !wait(a, *interval).await {
                    return End::Stopped;
                }
            }
            Ok(Committed::Done) => {}
            Err(e) => {
                let error = format!("commit failed: {e}");
                if s.lease_lost().await {
                    return End::Lost(error);
                }
                if !a.fail(backoff, &error, None).await {
                    return End::Stopped;
                }
            }
        }
    }
}

/// Commits a page's items in chunks of [`CHUNK_ITEMS`] at most (and no more than
/// the queue has room for), each with the cursor of its last item (so a large page
/// holds the writer for one chunk at a time, and waits for room in the queue
/// between chunks); stops early when the cursor
/// moved meanwhile, or when shutdown begins (the rest is fetched again).
async fn commit_page(
    a: &Adapter,
    s: &mut Session,
    texts: Vec<String>,
) -> Result<Committed, crate::store::StoreError> {
    let mut texts = texts.into_iter().peekable();
    let mut last = Committed::Done;
    while texts.peek().is_some() {
        if !a.wait_for_room().await {
            break;
        }
        let chunk = texts
            .by_ref()
            .take(a.room(CHUNK_ITEMS))
            .map(|t| a.read(t))
            .collect();
        last = a.commit(s, chunk).await?;
        if matches!(last, Committed::Moved) {
            break;
        }
    }
    Ok(last)
}

/// Waits `interval` (or until a reset); false when stopped.
async fn wait(a: &Adapter, interval: Duration) -> bool {
    let status = a.status();
    tokio::select! {
        () = a.stop.cancelled() => false,
        () = tokio::time::sleep(interval) => true,
        () = status.reset.notified() => {
            // Seen here, consumed here: put it back for the loop's own check.
            status.reset.notify_one();
            true
        }
    }
}

/// One GET: the items' texts, or why not.
async fn fetch(request: reqwest::RequestBuilder, items: &str) -> Result<Vec<String>, Failure> {
    let mut res = request
        .send()
        .await
        .map_err(|e| Failure::new(format!("GET failed: {}", e.without_url())))?;
    let status = res.status();
    if !status.is_success() {
        return Err(Failure {
            error: format!("the upstream answered {status}"),
            retry_after: retry_after(res.headers()),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = res
        .chunk()
        .await
        .map_err(|e| Failure::new(format!("reading the answer failed: {}", e.without_url())))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Failure::new(format!(
                "the answer is larger than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    split(&body, items).map_err(Failure::new)
}

/// The texts of the items of an answer: the array at `items` (`""`: the answer),
/// its first [`MAX_PAGE_ITEMS`] at most.
fn split(body: &[u8], items: &str) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the answer is not UTF-8: {e}"))?;
    let canonical = json::canonical(text).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let array = json::pointer(&canonical, items)
        .filter(|a| a.starts_with('['))
        .ok_or_else(|| format!("the answer has no array at {items:?}"))?;
    let elements: Vec<&RawValue> =
        serde_json::from_str(array).map_err(|e| format!("the items do not parse: {e}"))?;
    Ok(elements
        .iter()
        .take(MAX_PAGE_ITEMS)
        .map(|e| e.get().to_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn items_are_found_by_pointer_with_their_numbers_kept() {
        let body = br#"{"data": [{"id": 1, "n": 1.50}, {"id": 2}], "next": null}"#;
        assert_eq!(
            split(body, "/data").expect("items"),
            [r#"{"id":1,"n":1.50}"#, r#"{"id":2}"#]
        );
        assert_eq!(split(b"[]", "").expect("empty"), Vec::<String>::new());
        assert!(split(br#"{"data": {}}"#, "/data").is_err());
        assert!(split(b"<html>", "/data").is_err());
    }
}
