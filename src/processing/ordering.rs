//! Strict per-key ordering for one instance (SQLite): a delivery with an ordering
//! key value runs only when it is the oldest unfinished delivery of its handler and
//! value. Younger ones are parked here and pushed back to the queue when their turn
//! comes — when the older one completes or is dead-lettered. A failure holds back
//! only its own key.
//!
//! Deliveries are registered before their commit (intake), at recovery and at
//! replay; ids are UUID v7, so their order is creation order.
//! (`tests::the_younger_waits_for_the_older` shows it.)

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use uuid::Uuid;

/// The unfinished deliveries of every (handler, value) and the jobs waiting.
pub(crate) struct OrderingGate<J = crate::processing::job::Job> {
    keys: Mutex<HashMap<(String, String), Key<J>>>,
}

struct Key<J> {
    unfinished: BTreeSet<Uuid>,
    parked: HashMap<Uuid, J>,
}

impl<J> Default for OrderingGate<J> {
    fn default() -> Self {
        Self {
            keys: Mutex::new(HashMap::new()),
        }
    }
}

impl<J> OrderingGate<J> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Key<J>>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an unfinished delivery of `handler` and `value`.
    pub(crate) fn register(&self, handler: &str, value: &str, delivery: Uuid) {
        self.lock()
            .entry((handler.to_owned(), value.to_owned()))
            .or_insert_with(|| Key {
                unfinished: BTreeSet::new(),
                parked: HashMap::new(),
            })
            .unfinished
            .insert(delivery);
    }

    /// True when `delivery` may run now; otherwise `job` is kept until its turn.
    pub(crate) fn admit(&self, handler: &str, value: &str, delivery: Uuid, job: J) -> bool {
        let mut keys = self.lock();
        let key = keys
            .entry((handler.to_owned(), value.to_owned()))
            .or_insert_with(|| Key {
                unfinished: BTreeSet::new(),
                parked: HashMap::new(),
            });
        key.unfinished.insert(delivery);
        if key.unfinished.first() == Some(&delivery) {
            return true;
        }
        key.parked.insert(delivery, job);
        false
    }

    /// `delivery` will not run again (completed, dead-lettered, or never stored):
    /// returns the next one's job if it was waiting.
    pub(crate) fn finished(&self, handler: &str, value: &str, delivery: Uuid) -> Option<J> {
        let mut keys = self.lock();
        let id = (handler.to_owned(), value.to_owned());
        let key = keys.get_mut(&id)?;
        key.unfinished.remove(&delivery);
        key.parked.remove(&delivery);
        let next = key.unfinished.first().copied();
        let job = next.and_then(|n| key.parked.remove(&n));
        if key.unfinished.is_empty() {
            keys.remove(&id);
        }
        job
    }

    /// How many keys have unfinished deliveries.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs' example (a doc test while the gate was public).
    #[test]
    fn the_younger_waits_for_the_older() {
        let gate = OrderingGate::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        gate.register("billing", "cust-1", a);
        gate.register("billing", "cust-1", b);
        assert!(
            !gate.admit("billing", "cust-1", b, "job b"),
            "b waits for a"
        );
        assert!(gate.admit("billing", "cust-1", a, "job a"));
        assert_eq!(
            gate.finished("billing", "cust-1", a),
            Some("job b"),
            "a done: b's turn"
        );
    }

    #[test]
    fn keys_are_independent_and_order_is_by_id() {
        let gate = OrderingGate::<u32>::default();
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        // Registered out of order: the order of ids decides.
        gate.register("h", "k", ids[2]);
        gate.register("h", "k", ids[0]);
        gate.register("h", "k", ids[1]);
        gate.register("h", "other", Uuid::now_v7());
        assert!(!gate.admit("h", "k", ids[2], 2));
        assert!(!gate.admit("h", "k", ids[1], 1));
        assert!(gate.admit("h", "k", ids[0], 0));
        assert_eq!(gate.finished("h", "k", ids[0]), Some(1));
        assert!(
            gate.admit("h", "k", ids[1], 1),
            "the released one is the head now"
        );
        assert_eq!(gate.finished("h", "k", ids[1]), Some(2));
        assert_eq!(gate.finished("h", "k", ids[2]), None);
        assert_eq!(gate.len(), 1, "only the other key is left");
    }

    #[test]
    fn forgetting_the_head_releases_the_next() {
        let gate = OrderingGate::<&str>::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        gate.register("h", "k", a);
        assert!(!gate.admit("h", "k", b, "b"));
        assert_eq!(gate.finished("h", "k", a), Some("b"));
    }
}
