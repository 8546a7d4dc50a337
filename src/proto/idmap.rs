//! Hash maps keyed by identifiers rlun allocates itself: Initiator Task
//! Tags, task ids, request ids.
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

#[cfg(test)]
mod tests {
    use super::*;
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
