//! [`FuseStats`]: what the kernel sent over the mount — reads and writes,
//! their sizes and how many at once — and [`FuseCounters`], a snapshot of
//! it for the log at unmount.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the kernel sent: how many reads and writes, how large and how many
/// at once. Logged when the mount ends; tests read it from the log to check
/// that the negotiated limits hold (large requests, several in flight).
#[derive(Debug, Default)]
pub struct FuseStats {
    reads: OpStats,
    writes: OpStats,
}

#[derive(Debug, Default)]
struct OpStats {
    count: AtomicU64,
    bytes: AtomicU64,
    largest: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// A snapshot of [`FuseStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FuseCounters {
    pub reads: u64,
    pub read_bytes: u64,
    /// Largest read request, bytes.
    pub largest_read: u64,
    /// Most read requests rlun was serving at once.
    pub max_reads_in_flight: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub largest_write: u64,
    pub max_writes_in_flight: u64,
}

impl std::fmt::Display for FuseCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reads={} read_bytes={} largest_read={} max_reads_in_flight={} writes={} \
             write_bytes={} largest_write={} max_writes_in_flight={}",
            self.reads,
            self.read_bytes,
            self.largest_read,
            self.max_reads_in_flight,
            self.writes,
            self.write_bytes,
            self.largest_write,
            self.max_writes_in_flight
        )
    }
}

impl FuseStats {
    pub fn counters(&self) -> FuseCounters {
        let r = &self.reads;
        let w = &self.writes;
        FuseCounters {
            reads: r.count.load(Relaxed),
            read_bytes: r.bytes.load(Relaxed),
            largest_read: r.largest.load(Relaxed),
            max_reads_in_flight: r.max_in_flight.load(Relaxed),
            writes: w.count.load(Relaxed),
            write_bytes: w.bytes.load(Relaxed),
            largest_write: w.largest.load(Relaxed),
            max_writes_in_flight: w.max_in_flight.load(Relaxed),
        }
    }

    /// Count a request of `size` bytes; it is in flight until the guard
    /// drops (after the reply).
    pub(super) fn start(self: &Arc<Self>, write: bool, size: u64) -> CountedRequest {
        let op = if write { &self.writes } else { &self.reads };
        op.count.fetch_add(1, Relaxed);
        op.bytes.fetch_add(size, Relaxed);
        op.largest.fetch_max(size, Relaxed);
        let now = op.in_flight.fetch_add(1, Relaxed) + 1;
        op.max_in_flight.fetch_max(now, Relaxed);
        CountedRequest {
            stats: self.clone(),
            write,
        }
    }
}

/// One request counted in flight ([`FuseStats::start`]) until dropped.
pub(super) struct CountedRequest {
    stats: Arc<FuseStats>,
    write: bool,
}

impl Drop for CountedRequest {
    fn drop(&mut self) {
        let op = if self.write {
            &self.stats.writes
        } else {
            &self.stats.reads
        };
        op.in_flight.fetch_sub(1, Relaxed);
    }
}
