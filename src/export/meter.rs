//! [`Meter`]: what each export counts of the requests front ends make —
//! how many, how many bytes, how many failed, how many are in flight and
//! how long they took — for `rlun stats` and the control socket.
//!
//! Every front end goes through [`super::Export`], so this is the one place
//! that sees a request from the front end's point of view (a cache hit
//! included). The request path pays a few relaxed atomic adds and two
//! clock reads per request, and takes no lock: latencies go into fixed
//! log-linear buckets of atomic counters ([`Buckets`]: 16 per power of
//! two, so a bucket is at most 6.25% wide), which a reader copies out and
//! turns into percentiles later (with HDR histograms, in `rlun stats`).
//! Memory per export is fixed: three [`OpMeter`]s of [`BUCKETS`] counters
//! and a counter per [`ErrorClass`], about 14 KiB.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Sub-buckets per power of two (2^`SUB_BITS`).
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// The largest power of two with buckets of its own; longer latencies
/// (over 2^40 ns, 18 minutes) count in the last bucket.
const TOP_EXP: u32 = 39;
/// Buckets per [`OpMeter`].
pub const BUCKETS: usize = ((TOP_EXP - SUB_BITS + 2) as usize) * SUB as usize;

/// The bucket of a latency of `ns` nanoseconds.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = (63 - ns.leading_zeros()).min(TOP_EXP + 1);
    if exp > TOP_EXP {
        return BUCKETS - 1;
    }
    let sub = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as usize) * SUB as usize + sub as usize
}

/// The lowest latency (ns) bucket `index` holds, and its width.
pub fn bucket_range(index: usize) -> (u64, u64) {
    let i = index as u64;
    if i < SUB {
        return (i, 1);
    }
    let exp = (i / SUB) as u32 + SUB_BITS - 1;
    let sub = i % SUB;
    let width = 1u64 << (exp - SUB_BITS);
    ((SUB + sub) * width, width)
}

/// Latency buckets of atomic counters (see the module docs).
#[derive(Debug)]
pub struct Buckets(Box<[AtomicU64]>);

impl Default for Buckets {
    fn default() -> Self {
        Buckets((0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }
}

/// The kinds of request an export counts apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    /// Flushes, zeroing, trims.
    Other,
}

/// Why a request failed, as `rlun stats` and the metrics count errors
/// ([`super::ExportError::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The target could not be reached (connection lost past the
    /// replacement timeout, session closed).
    Unreachable,
    /// The target refused or failed the command (a SCSI error: medium
    /// error, hardware error, a short transfer…).
    Target,
    /// A write to a read-only LUN or export.
    ReadOnly,
    /// No space: a thin pool out of space, a write past the end.
    NoSpace,
    /// A range past the end of the LUN.
    OutOfRange,
    /// The LUN was removed, or resized under cached data that was lost.
    Removed,
    /// Anything else (shutting down…).
    Other,
}

impl ErrorClass {
    /// Every class, in the order of [`ErrorClass::index`].
    pub const ALL: [ErrorClass; 7] = [
        ErrorClass::Unreachable,
        ErrorClass::Target,
        ErrorClass::ReadOnly,
        ErrorClass::NoSpace,
        ErrorClass::OutOfRange,
        ErrorClass::Removed,
        ErrorClass::Other,
    ];

    /// The name in `rlun stats --json` and the `kind` label of the metrics.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Unreachable => "unreachable",
            ErrorClass::Target => "target",
            ErrorClass::ReadOnly => "read_only",
            ErrorClass::NoSpace => "no_space",
            ErrorClass::OutOfRange => "out_of_range",
            ErrorClass::Removed => "removed",
            ErrorClass::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The counters of one kind of request.
#[derive(Debug, Default)]
pub struct OpMeter {
    /// Requests completed (failed ones too).
    count: AtomicU64,
    /// Bytes read or written by the requests that succeeded.
    bytes: AtomicU64,
    errors: AtomicU64,
    in_flight: AtomicU64,
    /// The sum of the latencies, nanoseconds (for Prometheus' `_sum`).
    latency_sum: AtomicU64,
    latency: Buckets,
}

/// What an [`OpMeter`] counted, copied out: what the control socket sends.
/// `latency` holds the non-empty buckets as `[index, count]` pairs
/// ([`bucket_range`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    pub count: u64,
    pub bytes: u64,
    pub errors: u64,
    pub in_flight: u64,
    /// Nanoseconds, all requests counted.
    #[serde(default)]
    pub latency_sum: u64,
    pub latency: Vec<(u32, u64)>,
}

impl OpMeter {
    /// The counters now.
    pub fn counts(&self) -> OpCounts {
        OpCounts {
            count: self.count.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            latency_sum: self.latency_sum.load(Relaxed),
            latency: self
                .latency
                .0
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let c = c.load(Relaxed);
                    (c > 0).then_some((i as u32, c))
                })
                .collect(),
        }
    }
}

/// What one export counts: reads, writes and the other requests apart.
#[derive(Debug, Default)]
pub struct Meter {
    pub read: OpMeter,
    pub write: OpMeter,
    pub other: OpMeter,
    /// Failed requests of every kind by [`ErrorClass`].
    errors: [AtomicU64; ErrorClass::ALL.len()],
}

impl Meter {
    fn op(&self, op: Op) -> &OpMeter {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
            Op::Other => &self.other,
        }
    }

    /// Failed requests by class name ([`ErrorClass::name`]), the classes
    /// with a count only.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        ErrorClass::ALL
            .iter()
            .filter_map(|c| {
                let n = self.errors[c.index()].load(Relaxed);
                (n > 0).then(|| (c.name().to_string(), n))
            })
            .collect()
    }

    /// A request of kind `op` starts: it is in flight until the returned
    /// timer is finished ([`Timer::done`]) or dropped (a request whose
    /// caller went away counts as neither done nor failed).
    #[inline]
    pub fn start(self: &Arc<Self>, op: Op) -> Timer {
        self.op(op).in_flight.fetch_add(1, Relaxed);
        Timer {
            meter: self.clone(),
            op,
            start: Instant::now(),
        }
    }
}

/// One request being timed ([`Meter::start`]).
#[derive(Debug)]
pub struct Timer {
    meter: Arc<Meter>,
    op: Op,
    start: Instant,
}

impl Timer {
    /// The request ended: `Ok(bytes)` when it succeeded, the class of
    /// its error when it failed.
    #[inline]
    pub fn done(self, result: Result<u64, ErrorClass>) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let m = self.meter.op(self.op);
        m.count.fetch_add(1, Relaxed);
        match result {
            Ok(b) => m.bytes.fetch_add(b, Relaxed),
            Err(class) => {
                self.meter.errors[class.index()].fetch_add(1, Relaxed);
                m.errors.fetch_add(1, Relaxed)
            }
        };
        m.latency.0[bucket_of(ns)].fetch_add(1, Relaxed);
        m.latency_sum.fetch_add(ns, Relaxed);
        // `self` drops here: no longer in flight.
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.meter.op(self.op).in_flight.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_latency_in_order_and_at_most_one_sixteenth_wide() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, 1 << 30, (1 << 40) - 1]) {
            let b = bucket_of(ns);
            let (low, width) = bucket_range(b);

            assert!(b >= last, "bucket order at {ns}");
            assert!(
                low <= ns && ns < low + width,
                "{ns} not in bucket {b}: {low}+{width}"
            );
            assert!(
                width == 1 || width * 16 <= low,
                "bucket {b} too wide: {low}+{width}"
            );
            last = b;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of(1 << 40), BUCKETS - 1);
    }

    #[test]
    fn a_timed_request_counts_once_and_leaves_flight() {
        let m = Arc::new(Meter::default());
        let t = m.start(Op::Read);
        let failed = m.start(Op::Write);
        let dropped = m.start(Op::Write);

        assert_eq!(m.read.counts().in_flight, 1);
        t.done(Ok(4096));
        failed.done(Err(ErrorClass::ReadOnly));
        drop(dropped);

        let r = m.read.counts();
        let w = m.write.counts();
        assert_eq!((r.count, r.bytes, r.errors, r.in_flight), (1, 4096, 0, 0));
        assert_eq!(r.latency.iter().map(|(_, c)| c).sum::<u64>(), 1);
        assert_eq!((w.count, w.bytes, w.errors, w.in_flight), (1, 0, 1, 0));
        assert_eq!(
            m.errors().into_iter().collect::<Vec<_>>(),
            vec![("read_only".to_string(), 1)]
        );
    }
}
