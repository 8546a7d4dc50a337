//! [`Stats`], a snapshot of a device's counters, and the atomic counters
//! the request paths bump (relaxed adds, no lock).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A snapshot of the device's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Page lookups served from the cache.
    pub hits: u64,
    /// Page lookups that had to wait for the target (not read-ahead).
    pub misses: u64,
    /// Pages first used after read-ahead brought (or was bringing) them in.
    pub readahead_hits: u64,
    /// Pages read ahead.
    pub readahead_pages: u64,
    /// Pages read ahead and evicted before any read used them.
    #[serde(default)]
    pub readahead_wasted: u64,
    /// Streaming reads served straight from the target, past the cache.
    pub bypassed_reads: u64,
    /// Clean pages dropped to make room.
    pub evictions: u64,
    /// Memory charged to resident pages now.
    pub cached_bytes: u64,
    /// Configured cap.
    pub cache_size: u64,
    /// Bytes written into the cache and not yet to the target.
    pub dirty_bytes: u64,
    /// How long the oldest of them has waited, milliseconds (0 when
    /// nothing is dirty): the write-back age.
    #[serde(default)]
    pub dirty_age_ms: u64,
    /// `flush` calls (each ends with SYNCHRONIZE CACHE).
    pub flushes: u64,
    /// WRITE commands carrying write-back data.
    pub writebacks: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_commands: u64,
    pub write_commands: u64,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub readahead_hits: AtomicU64,
    pub readahead_pages: AtomicU64,
    pub bypassed_reads: AtomicU64,
    pub flushes: AtomicU64,
    pub writebacks: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_commands: AtomicU64,
    pub write_commands: AtomicU64,
    pub dirty_blocks: AtomicU64,
}

/// Bump a counter (relaxed: counters order nothing).
#[inline]
pub(super) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
