//! How long a pull adapter waits after a failure: exponential from
//! [`FIRST`] (100 ms) to [`LAST`] (5 s), with jitter, and never less than the
//! upstream's `Retry-After`.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The first wait.
pub(crate) const FIRST: Duration = Duration::from_millis(100);
/// The longest wait (unless `Retry-After` asks for more).
pub(crate) const LAST: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Consecutive failures so far.
#[derive(Debug, Default, Clone)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    /// A success: the next failure waits [`FIRST`] again.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    /// The wait after one more failure: `FIRST · 2^n` capped at [`LAST`], jittered
    /// down by up to a half (never under `FIRST`), and at least `retry_after`.
    pub(crate) fn next(&mut self, retry_after: Option<Duration>) -> Duration {
        let exp = FIRST.saturating_mul(1 << self.failures.min(10)).min(LAST);
        self.failures = self.failures.saturating_add(1);
        let jittered = exp.mul_f64(0.5 + fastrand::f64() * 0.5).max(FIRST);
        match retry_after {
            Some(asked) => jittered.max(asked.min(MAX_RETRY_AFTER)),
            None => jittered,
        }
    }
}

/// An answer's `Retry-After`: seconds, or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::pull::backoff::{Backoff, FIRST, LAST};
        use std::time::Duration;

        let mut b = Backoff::default();
        let first = b.next(None);
        assert!(first >= FIRST && first <= FIRST * 2);
        for _ in 0..20 {
            assert!(b.next(None) <= LAST);
        }
        assert!(b.next(Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        b.reset();
        assert!(b.next(None) <= FIRST * 2);
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(60);
        h.insert(
            http::header::RETRY_AFTER,
            httpdate::fmt_http_date(later).parse().unwrap(),
        );
        let d = retry_after(&h).expect("a date");
        assert!(
            d > Duration::from_secs(55) && d <= Duration::from_secs(60),
            "{d:?}"
        );
        h.insert(http::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn waits_grow_to_five_seconds() {
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..12).map(|_| b.next(None)).collect();
        assert!(waits.iter().all(|w| *w >= FIRST && *w <= LAST), "{waits:?}");
        assert!(waits[11] >= LAST / 2, "{waits:?}");
    }
}
