//! Behaviour tests of `LunDevice` against `MemBackend`, a model-based
//! property test of the cache against a plain `Vec<u8>`, and concurrency
//! tests of overlapping unaligned writers, with the helpers they share.
//!
//! | file | what |
//! | --- | --- |
//! | `requests.rs` | construction and errors, splitting, single flight, overlapping writers |
//! | `cache.rs` | hits, read-ahead, the streaming bypass, write-through, write-back and the flusher, memory cap, discard and write zeroes |
//! | `model.rs` | the model-based property test |
//! | `budget.rs` | devices sharing a budget, its arena, copy counters |

mod budget;
mod cache;
mod model;
mod requests;

use super::*;

const KIB: u64 = 1024;

fn cfg(mode: CacheMode) -> DeviceConfig {
    DeviceConfig {
        mode,
        ..DeviceConfig::default()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

fn device(mem: MemBackend, c: DeviceConfig) -> LunDevice<MemBackend> {
    LunDevice::new(mem, c).expect("valid configuration")
}
