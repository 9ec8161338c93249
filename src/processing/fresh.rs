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
//! before its intake (the sum is what counts). Memory is one entry per key with
//! fresh work, dropped when its count returns to zero.
//!
//! ```ignore
//! let mut counts = FreshCounts::default();
//! counts.add("ledger", Some("acct-1"), 3); // three deliveries of one key
//! counts.add("mailer", None, 2);
//! assert_eq!(counts.held(|_| None), 2); // two wait behind acct-1's first
//! ```

use std::collections::HashMap;

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
    /// Per ordering value, for a handler that orders.
    keys: HashMap<String, i64>,
    /// The sum over `keys` of `n - 1` (each key's deliveries but one).
    behind: i64,
}

impl LaneCount {
    fn add_key(&mut self, key: &str, n: i64) {
        let before = self.keys.get(key).copied().unwrap_or(0);
        let after = before + n;
        self.behind += (after - 1).max(0) - (before - 1).max(0);
        if after == 0 {
            self.keys.remove(key);
        } else if let Some(count) = self.keys.get_mut(key) {
            *count = after;
        } else {
            self.keys.insert(key.to_owned(), after);
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
            lane.add_key(key, n);
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

    /// Replaces every count with what the table holds: `(handler, ordering
    /// value, fresh deliveries)`, one entry per handler without a value and per
    /// handler and value with one.
    pub(crate) fn replace(
        &mut self,
        counts: impl IntoIterator<Item = (String, Option<String>, u64)>,
    ) {
        self.lanes.clear();
        for (handler, key, n) in counts {
            self.add(
                &handler,
                key.as_deref(),
                i64::try_from(n).unwrap_or(i64::MAX),
            );
        }
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
    fn replace_takes_the_tables_counts() {
        let mut counts = FreshCounts::default();
        counts.add("old", None, 9);
        counts.replace([
            ("ledger".to_owned(), Some("a".to_owned()), 3),
            ("ledger".to_owned(), None, 2),
        ]);
        assert_eq!(counts.total(), 5);
        assert_eq!(counts.held(|_| None), 2);
    }
}
