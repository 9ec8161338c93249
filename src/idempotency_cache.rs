//! A bounded, sharded map of recently retried idempotency keys: what intake's
//! idempotency layer answers a retry from without asking the database.
//!
//! [`IdempotencyCache`] maps a key to the event that holds it (its id and a value,
//! for hookbox the event's summary with its current status). It is bounded: each
//! of its [`SHARDS`] shards holds at most `capacity / SHARDS` keys and, when full,
//! evicts by the clock algorithm (an approximation of least recently used: a key
//! read since the hand last passed it gets a second chance). A key it has
//! forgotten is simply asked of the table again.
//!
//! Entries are dropped by event id ([`IdempotencyCache::invalidate`]), which is
//! what a status change knows, so the map keeps an index from ids to keys.
//!
//! The cache is only as current as its writer keeps it: hookbox's SQLite store
//! fills and invalidates it from its one writer task, in commit order
//! (docs/architecture.md, "Idempotency keys"), so a reader never sees a status
//! older than the last commit. Readers only read.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};

use uuid::Uuid;

/// Number of shards (independent locks).
pub(crate) const SHARDS: usize = 64;

/// A bounded map from idempotency keys to the events holding them.
pub(crate) struct IdempotencyCache<V> {
    /// Entries, by the hash of their key.
    shards: Box<[Mutex<Shard<V>>]>,
    /// Which key each event id holds, by the hash of the id.
    ids: Box<[Mutex<IdIndex>]>,
    /// Most keys per shard.
    per_shard: usize,
    hasher: RandomState,
}

/// One shard of the index from event ids to the keys they hold.
type IdIndex = HashMap<Uuid, Arc<str>>;

/// One shard: its slots, an index from key to slot, and the clock hand.
struct Shard<V> {
    index: HashMap<Arc<str>, usize>,
    slots: Vec<Slot<V>>,
    hand: usize,
}

struct Slot<V> {
    key: Arc<str>,
    id: Uuid,
    value: V,
    /// Read since the clock hand last passed: spared once.
    referenced: bool,
}

/// Takes a lock even if a thread panicked while holding it: every operation leaves
/// the map consistent before anything that could panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<V: Clone> IdempotencyCache<V> {
    /// A cache of at most `capacity` keys (at least one per shard).
    pub(crate) fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        index: HashMap::new(),
                        slots: Vec::new(),
                        hand: 0,
                    })
                })
                .collect(),
            ids: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard,
            hasher: RandomState::new(),
        }
    }

    /// The most keys it holds.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    fn shard_of(&self, key: &str) -> &Mutex<Shard<V>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        &self.shards[i]
    }

    fn ids_of(&self, id: &Uuid) -> &Mutex<IdIndex> {
        let i = (self.hasher.hash_one(id) as usize) % SHARDS;
        &self.ids[i]
    }

    /// The value of `key`, if it is held (and marks it recently used).
    pub(crate) fn get(&self, key: &str) -> Option<V> {
        let mut shard = lock(self.shard_of(key));
        let i = *shard.index.get(key)?;
        let slot = &mut shard.slots[i];
        slot.referenced = true;
        Some(slot.value.clone())
    }

    /// Holds `value` for `key`, the key of event `id`, replacing what the key held;
    /// when the shard is full, evicts one key (clock).
    pub(crate) fn insert(&self, key: &str, id: Uuid, value: V) {
        let mut shard = lock(self.shard_of(key));
        let Shard { index, slots, hand } = &mut *shard;
        let key: Arc<str> = match index.get(key) {
            Some(&i) => {
                let slot = &mut slots[i];
                let old = std::mem::replace(&mut slot.id, id);
                slot.value = value;
                if old != id {
                    lock(self.ids_of(&old)).remove(&old);
                }
                slot.key.clone()
            }
            None => {
                let key: Arc<str> = Arc::from(key);
                let slot = Slot {
                    key: key.clone(),
                    id,
                    value,
                    referenced: false,
                };
                if slots.len() < self.per_shard {
                    index.insert(key.clone(), slots.len());
                    slots.push(slot);
                } else {
                    let victim = clock_victim(slots, hand);
                    let old = std::mem::replace(&mut slots[victim], slot);
                    index.remove(&old.key);
                    lock(self.ids_of(&old.id)).remove(&old.id);
                    index.insert(key.clone(), victim);
                }
                key
            }
        };
        lock(self.ids_of(&id)).insert(id, key);
    }

    /// Forgets the key of event `id`, if it is held.
    pub(crate) fn invalidate(&self, id: Uuid) {
        let Some(key) = lock(self.ids_of(&id)).remove(&id) else {
            return;
        };
        let mut shard = lock(self.shard_of(&key));
        let Shard { index, slots, hand } = &mut *shard;
        let Some(&i) = index.get(&key) else { return };
        if slots[i].id != id {
            return;
        }
        index.remove(&key);
        slots.swap_remove(i);
        if let Some(moved) = slots.get(i) {
            index.insert(moved.key.clone(), i);
        }
        if *hand >= slots.len() {
            *hand = 0;
        }
    }

    /// Forgets every key.
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.index.clear();
            shard.slots.clear();
            shard.hand = 0;
        }
        for ids in self.ids.iter() {
            lock(ids).clear();
        }
    }

    /// How many keys it holds now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).slots.len()).sum()
    }

    /// True when it holds no key.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The slot the clock hand stops at: the first not read since the hand last passed
/// it (clearing the marks it passes). `slots` is not empty.
fn clock_victim<V>(slots: &mut [Slot<V>], hand: &mut usize) -> usize {
    loop {
        if *hand >= slots.len() {
            *hand = 0;
        }
        let i = *hand;
        *hand += 1;
        if std::mem::take(&mut slots[i].referenced) {
            continue;
        }
        return i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_reads_replaces_and_invalidates_by_id() {
        let cache = IdempotencyCache::new(1000);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        cache.insert("k1", a, "pending");
        cache.insert("k2", b, "completed");
        assert_eq!(cache.get("k1"), Some("pending"));
        assert_eq!(cache.get("k3"), None);
        cache.insert("k1", a, "processing");
        assert_eq!(cache.get("k1"), Some("processing"));
        cache.invalidate(a);
        assert_eq!(cache.get("k1"), None);
        assert_eq!(cache.get("k2"), Some("completed"));
        cache.invalidate(a); // twice is fine
        assert_eq!(cache.len(), 1);
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.get("k2"), None);
    }

    #[test]
    fn a_key_moved_to_another_event_forgets_the_old_id() {
        let cache = IdempotencyCache::new(10);
        let (old, new) = (Uuid::now_v7(), Uuid::now_v7());
        cache.insert("k", old, 1);
        cache.insert("k", new, 2);
        // The old event's status change must not drop the new event's entry.
        cache.invalidate(old);
        assert_eq!(cache.get("k"), Some(2));
        cache.invalidate(new);
        assert_eq!(cache.get("k"), None);
    }

    #[test]
    fn stays_within_its_bound_and_spares_what_was_read() {
        let cache = IdempotencyCache::new(SHARDS * 4);
        assert_eq!(cache.capacity(), SHARDS * 4);
        let ids: Vec<Uuid> = (0..SHARDS * 40).map(|_| Uuid::now_v7()).collect();
        for (n, id) in ids.iter().enumerate() {
            cache.insert(&format!("key-{n}"), *id, n);
            // "hot" is read after every insert: the clock always spares it.
            if n == 0 {
                continue;
            }
            assert_eq!(cache.get("key-0"), Some(0), "evicted the hot key at {n}");
        }
        assert!(cache.len() <= cache.capacity());
        let ids_held: usize = cache.ids.iter().map(|m| lock(m).len()).sum();
        assert_eq!(ids_held, cache.len(), "the id index follows evictions");
        let held = (0..SHARDS * 40)
            .filter(|n| cache.get(&format!("key-{n}")).is_some())
            .count();
        assert_eq!(held, cache.len());
        // Invalidating an evicted event's id is harmless.
        cache.invalidate(ids[1]);
        assert!(cache.len() <= cache.capacity());
    }
}
