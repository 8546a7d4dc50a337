//! A fair shared/exclusive lock over ranges of logical blocks.
//!
//! Holders of overlapping ranges exclude each other unless both are shared.
//! Requests are granted in arrival order among conflicting ones (a waiting
//! exclusive request holds back later overlapping shared ones), so a stream
//! of readers cannot starve a writer. Non-overlapping ranges never wait for
//! each other. The guard owns an `Arc` of the lock, so it can move into a
//! spawned task; dropping a guard (or a future still waiting) releases it.
//!
//! This is the only lock the device holds across network I/O: a target READ
//! that fills the cache holds its range shared, a WRITE (or UNMAP, WRITE
//! SAME, write-back of dirty pages) holds its range exclusive. That keeps
//! the cache and the target in agreement without any global lock.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

#[derive(Debug)]
struct Entry {
    id: u64,
    start: u64,
    end: u64,
    exclusive: bool,
    held: bool,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// In arrival order; held and waiting requests alike.
    entries: Vec<Entry>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct RangeLock {
    state: Mutex<State>,
    released: Notify,
}

/// A granted (or, while [`RangeLock::acquire`] is pending, waiting) range.
#[derive(Debug)]
pub(crate) struct RangeGuard {
    lock: Arc<RangeLock>,
    id: u64,
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        let mut st = self.lock.lock_state();
        if let Some(pos) = st.entries.iter().position(|e| e.id == self.id) {
            st.entries.remove(pos);
        }
        drop(st);
        self.lock.released.notify_waiters();
    }
}

fn overlaps(a: &Entry, b: &Entry) -> bool {
    a.start < b.end && b.start < a.end
}

impl RangeLock {
    pub(crate) fn new() -> Arc<RangeLock> {
        Arc::new(RangeLock::default())
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this mutex cannot leave the Vec inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until blocks `start..end` can be held (shared or exclusive).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> RangeGuard {
        let guard = {
            let mut st = self.lock_state();
            let id = st.next_id;
            st.next_id += 1;
            st.entries.push(Entry {
                id,
                start,
                end,
                exclusive,
                held: false,
            });
            RangeGuard {
                lock: self.clone(),
                id,
            }
        };
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.try_grant(guard.id) {
                return guard;
            }
            released.await;
        }
    }

    /// Grant `id` if no earlier request (held or waiting) conflicts with it.
    fn try_grant(&self, id: u64) -> bool {
        let mut st = self.lock_state();
        let Some(pos) = st.entries.iter().position(|e| e.id == id) else {
            return false;
        };
        let me = &st.entries[pos];
        let blocked = st.entries[..pos]
            .iter()
            .any(|e| overlaps(e, me) && (e.exclusive || me.exclusive));
        if blocked {
            return false;
        }
        st.entries[pos].held = true;
        true
    }

    /// Number of held ranges (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock_state().entries.iter().filter(|e| e.held).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn granted_within(
        lock: &Arc<RangeLock>,
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<RangeGuard> {
        tokio::time::timeout(
            Duration::from_millis(50),
            lock.acquire(start, end, exclusive),
        )
        .await
        .ok()
    }

    #[tokio::test]
    async fn shared_holders_of_overlapping_ranges_do_not_wait() {
        let lock = RangeLock::new();
        let _a = lock.acquire(0, 10, false).await;
        let b = granted_within(&lock, 5, 15, false).await;
        assert!(b.is_some());
        assert_eq!(lock.held(), 2);
    }

    #[tokio::test]
    async fn exclusive_waits_for_overlapping_holder_and_gets_it_on_release() {
        let lock = RangeLock::new();
        let a = lock.acquire(0, 10, false).await;
        assert!(granted_within(&lock, 9, 12, true).await.is_none());
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move {
                let _g = lock.acquire(9, 12, true).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("granted after release")
            .unwrap();
        assert_eq!(lock.held(), 0);
    }

    #[tokio::test]
    async fn disjoint_exclusive_ranges_are_independent() {
        let lock = RangeLock::new();
        let _a = lock.acquire(0, 10, true).await;
        assert!(granted_within(&lock, 10, 20, true).await.is_some());
    }

    #[tokio::test]
    async fn waiting_exclusive_holds_back_later_shared_requests() {
        let lock = RangeLock::new();
        let a = lock.acquire(0, 10, false).await;
        let writer = tokio::spawn({
            let lock = lock.clone();
            async move {
                let _g = lock.acquire(0, 10, true).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        // A new reader must queue behind the waiting writer.
        assert!(granted_within(&lock, 0, 1, false).await.is_none());
        drop(a);
        writer.await.unwrap();
        assert!(granted_within(&lock, 0, 1, false).await.is_some());
    }

    #[tokio::test]
    async fn dropped_waiter_does_not_block_others() {
        let lock = RangeLock::new();
        let a = lock.acquire(0, 10, true).await;
        // This waiter gives up (its future is dropped by the timeout).
        assert!(granted_within(&lock, 0, 10, true).await.is_none());
        drop(a);
        assert!(granted_within(&lock, 0, 10, false).await.is_some());
    }
}
