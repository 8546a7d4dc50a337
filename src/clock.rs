//! The monotonic clock, read once per driver turn and shared.
//!
//! Under software emulation (the VM lab) `clock_gettime` is a real system
//! call, and per-I/O clock reads were the most frequent system call of the
//! data path. The session driver reads the clock once per turn with
//! [`now`], which also publishes the reading; code that needs "the time of
//! the driver turn that completed my I/O" — `rlun bench`'s latency samples —
//! takes it from [`recent`] without a system call of its own.
//!
//! [`recent`] never goes backwards and is never earlier than a reading
//! published before it was called. A completion is handed out after the
//! turn that handled it published its reading (the hand-over through a
//! channel orders the two), so a caller that wakes up with its completion
//! sees at least that turn's time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What [`recent`] counts from.
static BASE: OnceLock<Instant> = OnceLock::new();
/// The latest published reading, in nanoseconds after [`BASE`].
static RECENT: AtomicU64 = AtomicU64::new(0);

fn base() -> Instant {
    *BASE.get_or_init(Instant::now)
}

/// Read the clock and publish the reading for [`recent`].
pub fn now() -> Instant {
    let b = base();
    let t = Instant::now();
    let ns = u64::try_from(t.saturating_duration_since(b).as_nanos()).unwrap_or(u64::MAX);
    RECENT.fetch_max(ns, Ordering::Release);
    t
}

/// The latest reading published by [`now`] (in this process, by any
/// thread), without reading the clock; the first call's time before any.
pub fn recent() -> Instant {
    base() + Duration::from_nanos(RECENT.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_is_the_latest_published_reading_and_never_goes_back() {
        let a = now();
        let r = recent();
        assert!(r >= a, "recent {r:?} before now {a:?}");
        // Without a new reading, recent stays where it was (other tests in
        // this process may publish later readings, never earlier ones).
        let r2 = recent();
        assert!(r2 >= r);
        std::thread::sleep(Duration::from_millis(5));
        let b = now();
        assert!(b >= a + Duration::from_millis(5));
        assert!(recent() >= b);
    }
}
