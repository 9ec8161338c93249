//! Strict per-key ordering on one instance (SQLite): a delivery with an ordering
//! key value runs only when it is the oldest unfinished delivery of its handler and
//! value. The table decides (an index of the unfinished deliveries of each key,
//! migration 0008): the window's refill skips a delivery that an older one holds
//! back, and a worker checks again before it starts one. What the table cannot
//! know yet is an event still being committed: intake *lines up* its ordered
//! deliveries here before its commit and leaves the line after it, so that a
//! younger delivery of the same key does not start meanwhile.
//!
//! A delivery held back is not kept in memory: it waits in the table, and the
//! window brings it back when the older one's outcome is terminal
//! ([`Window`](crate::processing::window::Window)). Ids are UUID v7, so their
//! order is creation order. (`tests::the_younger_waits_while_the_older_commits`
//! shows it.)

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use uuid::Uuid;

/// The ordered deliveries of events being committed, by (handler, value).
#[derive(Default)]
pub(crate) struct OrderingGate {
    committing: Mutex<HashMap<(String, String), BTreeSet<Uuid>>>,
}

impl OrderingGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), BTreeSet<Uuid>>> {
        self.committing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `delivery` of `handler` and `value` is about to be committed.
    pub(crate) fn line_up(&self, handler: &str, value: &str, delivery: Uuid) {
        self.lock()
            .entry((handler.to_owned(), value.to_owned()))
            .or_default()
            .insert(delivery);
    }

    /// `delivery` was committed (the table knows it now) or will never be.
    pub(crate) fn leave(&self, handler: &str, value: &str, delivery: Uuid) {
        let mut keys = self.lock();
        let id = (handler.to_owned(), value.to_owned());
        if let Some(line) = keys.get_mut(&id) {
            line.remove(&delivery);
            if line.is_empty() {
                keys.remove(&id);
            }
        }
    }

    /// True when an older delivery of `handler` and `value` than `delivery` is
    /// being committed.
    pub(crate) fn older_committing(&self, handler: &str, value: &str, delivery: Uuid) -> bool {
        self.lock()
            .get(&(handler.to_owned(), value.to_owned()))
            .and_then(|line| line.first())
            .is_some_and(|first| *first < delivery)
    }

    /// How many keys have deliveries being committed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_younger_waits_while_the_older_commits() {
        let gate = OrderingGate::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        gate.line_up("billing", "cust-1", a);
        assert!(
            gate.older_committing("billing", "cust-1", b),
            "b waits for a"
        );
        assert!(!gate.older_committing("billing", "cust-1", a));
        assert!(
            !gate.older_committing("billing", "cust-2", b),
            "keys are apart"
        );
        assert!(
            !gate.older_committing("shipping", "cust-1", b),
            "handlers too"
        );
        gate.leave("billing", "cust-1", a);
        assert!(!gate.older_committing("billing", "cust-1", b));
        assert_eq!(gate.len(), 0, "an empty line is forgotten");
    }

    #[test]
    fn order_is_by_id_not_by_arrival() {
        let gate = OrderingGate::default();
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        gate.line_up("h", "k", ids[2]);
        gate.line_up("h", "k", ids[1]);
        assert!(!gate.older_committing("h", "k", ids[0]));
        assert!(gate.older_committing("h", "k", ids[2]));
        gate.leave("h", "k", ids[1]);
        assert!(!gate.older_committing("h", "k", ids[2]), "only itself left");
        gate.leave("h", "k", ids[2]);
        gate.leave("h", "k", ids[2]);
        assert_eq!(gate.len(), 0);
    }
}
