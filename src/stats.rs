//! Process-wide data-path counters, shared by every transport and the
//! protocol core, so the figure means the same over TCP and iSER.
//!
//! - `copied_bytes`: SCSI data bytes rlun copied between the network and a
//!   command's data buffer (the buffer a read hands back to its caller, or
//!   the write data the caller passed in). Over TCP each Data-In payload is
//!   read from the socket straight into the read buffer (writes go out with
//!   `writev` from the caller's buffer): 0, unless a PDU reaches the core
//!   some other way than the TCP receive path. Over iSER the target places read data by RDMA
//!   straight into the command's buffer and fetches write data from it, and
//!   immediate data is sent from the registered buffer itself, so it stays 0
//!   as long as the buffers come from the registered pool
//!   ([`rlun_iscsi::iobuf`]); a write from memory outside the pool has its
//!   immediate part copied into a send buffer, and that is counted here.
//!   Copies a front end or the page cache makes of its own (FUSE's request
//!   buffer, cache pages) are not network copies and are not counted here:
//!   the cache's are in `cache_copied_bytes`.
//! - `cache_copied_bytes`: bytes the page cache ([`crate::device`]) copied
//!   into or out of its pages: fetched data into pages (a cache fill reads
//!   into a buffer of its own and copies it into the pages: one copy per
//!   filled byte, over TCP and iSER alike), pages into a reader's reply
//!   buffer, a writer's data into pages (write-back and the write-through
//!   update of resident pages), dirty pages into write-back buffers, and
//!   cached blocks for a read-modify-write. A separate counter, not part of
//!   `copied_bytes`, because those copies are the cache's own cost (a
//!   cache hit *is* a copy out of the page; `--cache none` has none) and
//!   `copied_bytes` keeps one meaning for every mode and transport: what
//!   the network path copied. Both are 0 only with `--cache none` over iSER.
//! - `data_path_registrations`: iSER memory registrations made while a
//!   command was being sent (buffers from outside the registered pool).
//!   Registering a pool arena with a connection is counted under
//!   `pool_registrations` instead: that happens once per arena and
//!   connection, not per command.
//!
//! The counters are per process (a command runs one session; `serve` and
//! `mount` with several LUNs add theirs up).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

static COPIED_BYTES: AtomicU64 = AtomicU64::new(0);
static CACHE_COPIED_BYTES: AtomicU64 = AtomicU64::new(0);
static DATA_PATH_REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
static POOL_REGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// A snapshot of the counters (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPathStats {
    pub copied_bytes: u64,
    pub cache_copied_bytes: u64,
    pub data_path_registrations: u64,
    pub pool_registrations: u64,
}

impl DataPathStats {
    /// The counters now.
    pub fn now() -> DataPathStats {
        DataPathStats {
            copied_bytes: COPIED_BYTES.load(Ordering::Relaxed),
            cache_copied_bytes: CACHE_COPIED_BYTES.load(Ordering::Relaxed),
            data_path_registrations: DATA_PATH_REGISTRATIONS.load(Ordering::Relaxed),
            pool_registrations: POOL_REGISTRATIONS.load(Ordering::Relaxed),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &DataPathStats) -> DataPathStats {
        DataPathStats {
            copied_bytes: self.copied_bytes.saturating_sub(earlier.copied_bytes),
            cache_copied_bytes: self
                .cache_copied_bytes
                .saturating_sub(earlier.cache_copied_bytes),
            data_path_registrations: self
                .data_path_registrations
                .saturating_sub(earlier.data_path_registrations),
            pool_registrations: self
                .pool_registrations
                .saturating_sub(earlier.pool_registrations),
        }
    }
}

/// `n` bytes of SCSI data were copied between the network and a command's buffer.
pub fn add_copied(n: u64) {
    if n > 0 {
        COPIED_BYTES.fetch_add(n, Ordering::Relaxed);
    }
}

/// The page cache copied `n` bytes into or out of its pages.
pub fn add_cache_copied(n: u64) {
    if n > 0 {
        CACHE_COPIED_BYTES.fetch_add(n, Ordering::Relaxed);
    }
}

/// A buffer was registered with the RDMA device on the data path.
pub fn add_data_path_registration() {
    DATA_PATH_REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
}

/// A pool arena was registered with a connection.
pub fn add_pool_registration() {
    POOL_REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_each_counter() {
        let a = DataPathStats {
            copied_bytes: 10,
            cache_copied_bytes: 7,
            data_path_registrations: 1,
            pool_registrations: 2,
        };
        let b = DataPathStats {
            copied_bytes: 4106,
            cache_copied_bytes: 7,
            data_path_registrations: 1,
            pool_registrations: 5,
        };
        assert_eq!(
            b.since(&a),
            DataPathStats {
                copied_bytes: 4096,
                cache_copied_bytes: 0,
                data_path_registrations: 0,
                pool_registrations: 3
            }
        );
    }

    #[test]
    fn counters_only_grow() {
        let a = DataPathStats::now();
        add_copied(512);
        add_copied(0);
        add_data_path_registration();
        let d = DataPathStats::now().since(&a);
        // Other tests may count concurrently: at least ours.
        assert!(d.copied_bytes >= 512, "{d:?}");
        assert!(d.data_path_registrations >= 1, "{d:?}");
    }
}
