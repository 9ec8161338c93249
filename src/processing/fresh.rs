//! Fresh deliveries counted per destination and per ordering key: the parts of
//! SQLite's pending backlog that backpressure weighs (`QUEUE_MAXSIZE`, SPEC §1).
//!
//! A fresh delivery (never tried, replayed, or running its first attempt) is due
//! work unless something holds it back: its own destination (paused, failing,
//! disabled, at its limits: [`FreshCounts::held`] asks the lanes), or an older
//! delivery of its handler and ordering value. Of a key's fresh deliveries at
//! most one can run, so the others (`n - 1` of `n`) are counted as *behind*
//! their key. (When the key's head is a retry waiting for its time, all `n` are
//! behind it; counted as `n - 1`, one too many is counted as due for that key.)
//!
//! Counts are kept by intake, replay, outcomes and erasure as they happen, so they
//! are exact at request time; they are signed, since an outcome may be counted
//! before its intake (the sum is what counts).
//!
//! Memory stays bounded whatever the backlog (docs/architecture.md): keys are
//! counted in [`BUCKETS`] buckets per destination by a hash of their value, an
//! entry per bucket with fresh work. Keys that share a bucket count as one key,
//! so with many keys a few deliveries more count as behind (as not due) than
//! are: about `k² / 2·BUCKETS` of `k` keys' first deliveries (0.8 % at 10,000
//! keys).
//!
//! ```ignore
//! let mut counts = FreshCounts::default();
//! counts.add("ledger", Some("acct-1"), 3); // three deliveries of one key
//! counts.add("mailer", None, 2);
//! assert_eq!(counts.held(|_| None), 2); // two wait behind acct-1's first
//! ```

use std::collections::HashMap;

/// Buckets of ordering values per destination (see the module docs).
const BUCKETS: usize = 1 << 16;

/// The bucket of an ordering value (FNV-1a, folded to [`BUCKETS`]).
fn bucket(key: &str) -> u16 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let folded = (hash ^ (hash >> 16) ^ (hash >> 32) ^ (hash >> 48)) % BUCKETS as u64;
    u16::try_from(folded).unwrap_or_default()
}

/// Fresh deliveries per destination, with what waits behind an ordering key.
#[derive(Debug, Default)]
pub(crate) struct FreshCounts {
    lanes: HashMap<String, LaneCount>,
}

/// One destination's fresh deliveries.
#[derive(Debug, Default)]
struct LaneCount {
    /// All of them.
    fresh: i64,
    /// Per bucket of ordering values, for a handler that orders.
    keys: HashMap<u16, i64>,
    /// The sum over `keys` of `n - 1` (each bucket's deliveries but one).
    behind: i64,
}

impl LaneCount {
    fn add_key(&mut self, key: u16, n: i64) {
        let before = self.keys.get(&key).copied().unwrap_or(0);
        let after = before + n;
        self.behind += (after - 1).max(0) - (before - 1).max(0);
        if after == 0 {
            self.keys.remove(&key);
        } else {
            self.keys.insert(key, after);
        }
    }
}

impl FreshCounts {
    /// Counts `n` fresh deliveries (negative: no longer fresh) of `handler`, with
    /// ordering value `key` if its handler orders.
    pub(crate) fn add(&mut self, handler: &str, key: Option<&str>, n: i64) {
        let lane = match self.lanes.get_mut(handler) {
            Some(lane) => lane,
            None => self.lanes.entry(handler.to_owned()).or_default(),
        };
        lane.fresh += n;
        if let Some(key) = key {
            lane.add_key(bucket(key), n);
        }
    }

    /// Fresh deliveries that are not due: all of a destination's that
    /// `holds_back` (which answers the attempts it runs, which still count), and
    /// otherwise those behind an older delivery of their ordering key.
    pub(crate) fn held(&self, holds_back: impl Fn(&str) -> Option<u32>) -> i64 {
        self.lanes
            .iter()
            .filter(|(_, lane)| lane.fresh > 0)
            .map(|(name, lane)| match holds_back(name) {
                Some(running) => (lane.fresh - i64::from(running)).max(0),
                None => lane.behind.clamp(0, lane.fresh),
            })
            .sum()
    }

    /// Fresh deliveries in all.
    #[cfg(test)]
    fn total(&self) -> i64 {
        self.lanes.values().map(|lane| lane.fresh).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_deliveries_but_one_are_behind_it() {
        let mut counts = FreshCounts::default();
        counts.add("ledger", Some("a"), 1);
        assert_eq!(counts.held(|_| None), 0, "one delivery of a key is due");
        counts.add("ledger", Some("a"), 4);
        counts.add("ledger", Some("b"), 2);
        counts.add("mailer", None, 7);
        assert_eq!(counts.held(|_| None), 4 + 1);
        // The head's outcome: the next of its key becomes due.
        counts.add("ledger", Some("a"), -1);
        assert_eq!(counts.held(|_| None), 3 + 1);
        assert_eq!(counts.total(), 4 + 2 + 7);
    }

    #[test]
    fn a_destination_that_holds_back_holds_all_but_what_runs() {
        let mut counts = FreshCounts::default();
        counts.add("ledger", Some("a"), 5);
        counts.add("mailer", None, 7);
        let held = counts.held(|name| (name == "mailer").then_some(2));
        assert_eq!(
            held,
            5 + 4,
            "ledger's 4 behind their key, mailer's 7 less 2 running"
        );
        let held = counts.held(|name| (name == "ledger").then_some(1));
        assert_eq!(held, 4, "a held-back lane is not counted twice");
    }

    #[test]
    fn an_outcome_counted_before_its_intake_sums_right() {
        let mut counts = FreshCounts::default();
        counts.add("ledger", Some("a"), -1);
        counts.add("ledger", Some("a"), 2);
        assert_eq!(counts.held(|_| None), 0, "one fresh delivery of the key");
        counts.add("ledger", Some("a"), -1);
        assert!(
            counts.lanes["ledger"].keys.is_empty(),
            "a key at zero is dropped"
        );
        assert_eq!(counts.lanes["ledger"].behind, 0);
    }

    #[test]
    fn memory_is_a_bucket_per_key_at_most() {
        let mut counts = FreshCounts::default();
        for k in 0..200_000 {
            counts.add("ledger", Some(&format!("customer-{k}")), 2);
        }
        let lane = &counts.lanes["ledger"];
        assert!(lane.keys.len() <= BUCKETS, "{}", lane.keys.len());
        // Shared buckets count as one key: a little more is behind than is.
        let behind = counts.held(|_| None);
        assert!((200_000..400_000).contains(&behind), "{behind}");
        for k in 0..200_000 {
            counts.add("ledger", Some(&format!("customer-{k}")), -2);
        }
        assert!(counts.lanes["ledger"].keys.is_empty());
        assert_eq!(counts.held(|_| None), 0);
    }

    #[test]
    fn few_keys_seldom_share_a_bucket() {
        let mut counts = FreshCounts::default();
        for k in 0..1_000 {
            counts.add("ledger", Some(&format!("order-{k}")), 1);
        }
        // ~1000² / 2·65536 ≈ 8 expected to share.
        assert!(counts.held(|_| None) < 40, "{}", counts.held(|_| None));
    }
}
