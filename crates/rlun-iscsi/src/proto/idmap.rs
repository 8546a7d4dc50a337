//! Tables keyed by identifiers rlun allocates itself: Initiator Task
//! Tags, task ids, request ids.
//!
//! [`SlotTable`] is direct-mapped (an id that counts up lives in slot
//! `id % len`): the recovery machine keeps its per-command records in one,
//! so a command costs no hashing there. [`IdMap`] is the hash map for the
//! rarer requests (text, ping, task management).
//!
//! Every I/O inserts into, looks up and removes from several such maps (the
//! core's task table, the recovery machine's records, the driver's waiters).
//! The standard library's SipHash is built to resist keys an attacker
//! chooses; these keys are chosen by rlun (a target can only *look up* a tag,
//! it cannot insert one), so a multiply-rotate hash is enough and costs a
//! fraction of SipHash. Sequential ids spread over the table because the
//! multiplier is odd (a bijection on the low bits that pick the bucket).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map for rlun-allocated integer ids (see the module docs).
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Multiply-rotate hasher for small integer keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

/// An odd constant with well-mixed bits (2^64 / golden ratio).
const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(K);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A direct-mapped table for ids that count up: the entry for `id` lives
/// in slot `id % len`, so a look-up is an index and a compare, and an
/// insert or removal costs no hashing and no allocation. The allocator of
/// the ids skips an id whose slot is taken ([`SlotTable::is_free`]), so
/// one long-lived entry never forces the table to grow; the table doubles
/// before it is half full. (The connection core's ITT table works the same
/// way.)
#[derive(Debug)]
pub struct SlotTable<V> {
    slots: Vec<Option<(u64, V)>>,
    len: usize,
}

impl<V> Default for SlotTable<V> {
    fn default() -> Self {
        SlotTable {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> SlotTable<V> {
    const MIN_SLOTS: usize = 64;

    fn slot(&self, id: u64) -> usize {
        id as usize & (self.slots.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when an entry for `id` could be inserted now (its slot is
    /// free); makes room first when the table is half full.
    pub fn is_free(&mut self, id: u64) -> bool {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(None);
        }
        let i = self.slot(id);
        self.slots[i].is_none()
    }

    /// Double the table (at least) until every entry, and `extra` if
    /// given, has a slot of its own.
    fn grow(&mut self, extra: Option<u64>) {
        let entries: Vec<(u64, V)> = std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .collect();
        let mut n = (self.len * 4).max(Self::MIN_SLOTS).next_power_of_two();
        loop {
            let mut taken = vec![false; n];
            let clash = entries
                .iter()
                .map(|(id, _)| *id)
                .chain(extra)
                .any(|id| std::mem::replace(&mut taken[id as usize & (n - 1)], true));
            if !clash {
                break;
            }
            n *= 2;
        }
        self.slots.resize_with(n, || None);
        for (id, v) in entries {
            let i = self.slot(id);
            self.slots[i] = Some((id, v));
        }
    }

    /// Insert `v` under `id`, replacing an entry with the same id. An id
    /// whose slot [`SlotTable::is_free`] did not find free makes the table
    /// grow until it fits.
    pub fn insert(&mut self, id: u64, v: V) {
        if self.slots.is_empty() {
            self.grow(Some(id));
        }
        let mut i = self.slot(id);
        if self.slots[i].as_ref().is_some_and(|(k, _)| *k != id) {
            self.grow(Some(id));
            i = self.slot(id);
        }
        // Assigned in place (the old value, if any, dropped where it is)
        // rather than `replace`d: a value can be large (a connection's
        // task), and `replace` would move the old one out as well.
        let slot = &mut self.slots[i];
        if slot.is_none() {
            self.len += 1;
        }
        *slot = Some((id, v));
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        match &self.slots[self.slot(id)] {
            Some((k, v)) if *k == id => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        if self.slots.is_empty() {
            return None;
        }
        let i = self.slot(id);
        match &mut self.slots[i] {
            Some((k, v)) if *k == id => Some(v),
            _ => None,
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<V> {
        if self.slots.is_empty() {
            return None;
        }
        let i = self.slot(id);
        if self.slots[i].as_ref().is_some_and(|(k, _)| *k == id) {
            self.len -= 1;
            self.slots[i].take().map(|(_, v)| v)
        } else {
            None
        }
    }

    /// The ids in the table, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().flatten().map(|(k, _)| *k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots.iter_mut().flatten().map(|(_, v)| v)
    }

    /// Take every entry out, in no particular order.
    pub fn drain(&mut self) -> Vec<(u64, V)> {
        self.len = 0;
        self.slots.iter_mut().filter_map(Option::take).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_table_keeps_a_long_lived_entry_while_ids_pass_it_without_growing() {
        let mut t: SlotTable<u64> = SlotTable::default();
        assert!(t.is_free(0));
        t.insert(0, 100);
        let mut next = 1u64;
        let mut alloc = |t: &mut SlotTable<u64>| loop {
            let id = next;
            next += 1;
            if t.is_free(id) {
                return id;
            }
        };
        for _ in 0..100_000 {
            let a = alloc(&mut t);
            t.insert(a, a);
            let b = alloc(&mut t);
            t.insert(b, b);
            assert_eq!(t.remove(a), Some(a));
            assert_eq!(t.remove(b), Some(b));
            assert_eq!(t.get(a), None, "a removed id is not found");
        }
        assert_eq!(t.get(0), Some(&100), "the long-lived entry is still there");
        assert_eq!(t.len(), 1);
        assert_eq!(t.slots.len(), SlotTable::<u64>::MIN_SLOTS, "never grew");
    }

    #[test]
    fn slot_table_finds_only_the_id_in_a_slot_not_another_with_the_same_slot() {
        let mut t: SlotTable<&str> = SlotTable::default();
        t.insert(5, "five");
        let n = t.slots.len() as u64;
        assert_eq!(t.get(5 + n), None);
        assert_eq!(t.remove(5 + n), None);
        // Inserting a clashing id anyway grows the table; both stay.
        t.insert(5 + n, "other");
        assert_eq!(t.get(5), Some(&"five"));
        assert_eq!(t.get(5 + n), Some(&"other"));
        assert_eq!(t.len(), 2);
        let mut all = t.drain();
        all.sort();
        assert_eq!(all, vec![(5, "five"), (5 + n, "other")]);
        assert!(t.is_empty());
        assert_eq!(t.get(5), None);
    }

    #[test]
    fn slot_table_grows_before_half_full_and_keeps_every_entry() {
        let mut t: SlotTable<u64> = SlotTable::default();
        for id in 0..1000u64 {
            assert!(t.is_free(id), "sequential ids never clash");
            t.insert(id, id * 2);
            assert!(t.len() * 2 <= t.slots.len());
        }
        for id in 0..1000u64 {
            assert_eq!(t.get(id), Some(&(id * 2)));
        }
        let mut keys: Vec<u64> = t.keys().collect();
        keys.sort();
        assert_eq!(keys, (0..1000).collect::<Vec<_>>());
    }
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: T) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(v)
    }

    #[test]
    fn sequential_ids_get_distinct_buckets_and_control_bytes() {
        // hashbrown takes the bucket from the low bits and a 7-bit tag from
        // the top bits: both must vary over a run of sequential ids.
        let low: std::collections::HashSet<u64> = (0u64..1024).map(|i| hash(i) & 1023).collect();
        assert_eq!(
            low.len(),
            1024,
            "low 10 bits must be a bijection on 1024 ids"
        );
        let top: std::collections::HashSet<u64> = (0u64..1024).map(|i| hash(i) >> 57).collect();
        assert!(
            top.len() > 100,
            "only {} distinct top-7-bit tags",
            top.len()
        );
    }

    #[test]
    fn map_behaves_like_a_map() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        for i in 0..10_000u32 {
            m.insert(i.wrapping_mul(7919), i);
        }
        for i in (0..10_000u32).step_by(2) {
            assert_eq!(m.remove(&i.wrapping_mul(7919)), Some(i));
        }
        assert_eq!(m.len(), 5_000);
        assert_eq!(m.get(&7919), Some(&1));
        assert_eq!(m.get(&0), None);
    }
}
