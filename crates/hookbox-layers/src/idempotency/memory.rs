//! An in-memory [`IdempotencyStore`] that follows the IETF draft for any API.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;
use sha2::{Digest, Sha256};
use tower::BoxError;

use super::{Begin, BoxFuture, CachedResponse, IdempotencyStore, Identity};
use crate::rejection::Rejection;

/// Keys from the `Idempotency-Key` header, fingerprints from method, path and body,
/// answers kept in memory for `expiry` (publish it in your API's docs: after it, a
/// key may be reused).
pub struct MemoryStore {
    expiry: Duration,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    next_sweep: Option<Instant>,
}

impl Entries {
    /// Drops expired keys, at most once a minute (a sweep walks the whole map).
    fn sweep(&mut self, now: Instant) {
        if self.next_sweep.is_some_and(|t| t > now) {
            return;
        }
        self.map.retain(|_, e| e.expires > now);
        self.next_sweep = Some(now + Duration::from_secs(60));
    }
}

struct Entry {
    fingerprint: String,
    expires: Instant,
    answer: Option<CachedResponse>,
}

impl MemoryStore {
    /// Keeps keys for `expiry` after their first use.
    pub fn new(expiry: Duration) -> Self {
        Self {
            expiry,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl IdempotencyStore for MemoryStore {
    fn identify(&self, parts: &mut Parts, body: &Bytes) -> Identity {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Identity::Anonymous;
        };
        let key = match value.to_str() {
            Ok(k) if !k.is_empty() && k.len() <= 255 => k.to_owned(),
            _ => {
                return Identity::Reject(
                    Rejection::new(StatusCode::BAD_REQUEST, "invalid_idempotency_key")
                        .detail("Idempotency-Key must be 1 to 255 visible ASCII characters"),
                );
            }
        };
        let mut hash = Sha256::new();
        hash.update(parts.method.as_str());
        hash.update(b" ");
        hash.update(parts.uri.path());
        hash.update(b"\n");
        hash.update(body);
        Identity::Keyed {
            key,
            fingerprint: hex(&hash.finalize()),
        }
    }

    fn begin<'a>(
        &'a self,
        _parts: &'a Parts,
        key: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<Begin, BoxError>> {
        let now = Instant::now();
        let mut guard = self.lock();
        guard.sweep(now);
        let entries = &mut guard.map;
        if entries.get(key).is_some_and(|e| e.expires <= now) {
            entries.remove(key);
        }
        let begin = match entries.get(key) {
            None => {
                entries.insert(
                    key.to_owned(),
                    Entry {
                        fingerprint: fingerprint.to_owned(),
                        expires: now + self.expiry,
                        answer: None,
                    },
                );
                Begin::Proceed
            }
            Some(e) if e.fingerprint != fingerprint => Begin::Mismatch,
            Some(Entry { answer: None, .. }) => Begin::InFlight,
            Some(Entry {
                answer: Some(a), ..
            }) => Begin::Replay(a.clone()),
        };
        Box::pin(std::future::ready(Ok(begin)))
    }

    fn finish(
        &self,
        key: String,
        _fingerprint: String,
        response: Option<CachedResponse>,
    ) -> BoxFuture<'_, ()> {
        let mut guard = self.lock();
        let entries = &mut guard.map;
        match response {
            Some(answer) => {
                if let Some(e) = entries.get_mut(&key) {
                    e.answer = Some(answer);
                }
            }
            None => {
                entries.remove(&key);
            }
        }
        Box::pin(std::future::ready(()))
    }
}

/// Lower-case hex.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}
