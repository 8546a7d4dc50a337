//! [`CacheBudget`]: the page cache's memory, one per process, shared by
//! every `LunDevice` made with it.
//!
//! A budget of `size` bytes is split once:
//!
//! - **pages**: `size` minus the I/O reserve. Page memory is one region
//!   reserved when the first cached device starts (see
//!   [`rlun_iscsi::iobuf::Pool::reserved`]): page-aligned, never freed, never
//!   grown, and registered as arenas of the process so an iSER connection
//!   registers it once, like the I/O buffer pool. Every resident page of
//!   every device of the budget is charged its size plus a fixed overhead
//!   (`cache::PAGE_OVERHEAD`) against the pages'
//!   share, and its buffer is a chunk of that region: when either runs
//!   out, clean pages are evicted (the device's own first, then other
//!   devices'), or the caller waits for the flusher; nothing is allocated
//!   instead.
//! - **I/O reserve**: 1/8 of `size`, at most 256 MiB: bounds the buffers
//!   of cache READs and write-back WRITEs in flight, of all devices
//!   together (a semaphore of bytes).
//!
//! Each device's page cache registers with its budget as a [`Tenant`]:
//! what the budget needs of a cache to share memory fairly (how much it
//! holds, when it last needed a page, evicting one of its clean pages for
//! another cache). The budget knows caches only through that trait, so the
//! cache (`cache.rs`) depends on the budget and not the other way round;
//! the calls through it happen only when the budget is full and a cache
//! must take memory from another.
//!
//! So whatever the number of LUNs a `mount`, `serve` or `attach` opens,
//! the cache holds at most `size` bytes. What is not counted: the caller's
//! own buffers (the `Bytes` passed in and handed back), the single blocks
//! read for a read-modify-write, and the process's base.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use tokio::sync::{Notify, Semaphore};

use rlun_iscsi::iobuf::{IoBuf, Pool, ARENA_LEN};

/// A page cache sharing a budget (see the module docs).
pub(crate) trait Tenant: Send + Sync {
    /// Bytes charged to the cache's resident pages.
    fn charged(&self) -> u64;
    /// When the cache last needed a new page ([`BudgetInner::now_ms`]).
    fn last_alloc_ms(&self) -> u64;
    /// Evict one clean, unused page for another cache of the budget;
    /// false when none can go.
    fn evict_for_other(&self) -> bool;
}

/// Largest share of a budget reserved for in-flight I/O buffers.
pub(crate) const MAX_IO_RESERVE: u64 = 256 << 20;

/// Memory shared by the page caches of one process (see the module docs).
/// Cloning shares it.
#[derive(Clone)]
pub struct CacheBudget {
    pub(crate) inner: Arc<BudgetInner>,
}

impl std::fmt::Debug for CacheBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheBudget")
            .field("size", &self.inner.size)
            .field("pages", &self.inner.pages)
            .field("charged", &self.charged())
            .finish()
    }
}

pub(crate) struct BudgetInner {
    size: u64,
    /// Bytes pages may be charged in all.
    pub pages: u64,
    pub io_reserve: u64,
    charged: AtomicU64,
    pool: OnceLock<&'static Pool>,
    /// In-flight cache I/O, in bytes.
    pub io: Arc<Semaphore>,
    /// Signalled when memory may have become available anywhere.
    pub mem_changed: Notify,
    /// Wakes every device's flusher (memory pressure somewhere).
    pub kick: Notify,
    /// Dirty bytes of all devices.
    pub dirty: AtomicU64,
    /// Callers waiting for memory, of all devices.
    pub mem_waiters: AtomicUsize,
    caches: Mutex<Vec<Weak<dyn Tenant>>>,
    /// Caches alive now.
    pub live: AtomicUsize,
    cursor: AtomicUsize,
    epoch: Instant,
}

/// A cache that needed no new page for this long counts as idle.
const IDLE_MS: u64 = 1000;

impl CacheBudget {
    /// A budget of `size` bytes. Nothing is allocated until a cached device
    /// uses it.
    pub fn new(size: u64) -> CacheBudget {
        let io_reserve = (size / 8).clamp(8 << 10, MAX_IO_RESERVE);
        let io_reserve = io_reserve.min(size / 2);
        let pages = size.saturating_sub(io_reserve);
        CacheBudget {
            inner: Arc::new(BudgetInner {
                size,
                pages,
                io_reserve,
                charged: AtomicU64::new(0),
                pool: OnceLock::new(),
                io: Arc::new(Semaphore::new(io_reserve as usize)),
                mem_changed: Notify::new(),
                kick: Notify::new(),
                dirty: AtomicU64::new(0),
                mem_waiters: AtomicUsize::new(0),
                caches: Mutex::new(Vec::new()),
                live: AtomicUsize::new(0),
                cursor: AtomicUsize::new(0),
                epoch: Instant::now(),
            }),
        }
    }

    /// The configured size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Bytes charged to resident pages of every device now.
    pub fn charged(&self) -> u64 {
        self.inner.charged.load(Ordering::Relaxed)
    }

    /// Bytes of page memory reserved so far (0 until a cached device
    /// starts; the pages' share rounded up to whole 4 MiB arenas after).
    pub fn reserved_bytes(&self) -> u64 {
        self.inner.pool.get().map_or(0, |p| p.capacity() as u64)
    }

    /// Page memory handed out now (whole chunks, also those of pages just
    /// evicted and not yet reused: 0 only when no page exists).
    pub fn pages_in_use(&self) -> u64 {
        self.inner.pool.get().map_or(0, |p| p.in_use() as u64)
    }

    /// Reserve the page memory now (else when the first cached device
    /// starts): an iSER connection made later registers it when it
    /// connects instead of at first use.
    pub fn reserve(&self) {
        self.inner.reserve();
    }

    /// Whether `self` and `other` are the same budget.
    pub fn same(&self, other: &CacheBudget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A budget of exactly `pages` bytes for pages and `io` for I/O (tests).
    #[cfg(test)]
    pub(crate) fn exact(pages: u64, io: u64) -> CacheBudget {
        let b = CacheBudget::new(pages + io);
        let mut inner = Arc::into_inner(b.inner).expect("not shared yet");
        inner.pages = pages;
        inner.io_reserve = io;
        inner.io = Arc::new(Semaphore::new(io as usize));
        CacheBudget {
            inner: Arc::new(inner),
        }
    }
}

impl std::fmt::Debug for BudgetInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetInner")
            .field("pages", &self.pages)
            .finish()
    }
}

impl BudgetInner {
    fn pool(&self) -> &'static Pool {
        self.pool.get_or_init(|| {
            let want = (self.pages as usize).max(ARENA_LEN);
            Pool::reserved(want)
        })
    }

    /// The page memory's arenas (none before a cached device started).
    #[cfg(test)]
    pub fn arenas(&self) -> Vec<rlun_iscsi::iobuf::Arena> {
        self.pool.get().map(|p| p.arenas()).unwrap_or_default()
    }

    /// Make sure the page memory exists (reserved at a cached device's start).
    pub fn reserve(&self) {
        if self.pages > 0 {
            self.pool();
        }
    }

    /// Charge `cost` bytes if they fit.
    pub fn try_charge(&self, cost: u64) -> bool {
        self.charged
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c + cost <= self.pages).then_some(c + cost)
            })
            .is_ok()
    }

    pub fn uncharge(&self, cost: u64) {
        self.charged.fetch_sub(cost, Ordering::AcqRel);
    }

    /// A page buffer of `len` bytes from the reserved memory, if one is free.
    pub fn page_buf(&self, len: usize) -> Option<IoBuf> {
        self.pool().try_alloc(len)
    }

    /// Register a cache that shares this budget (it counts as live until
    /// dropped; it must decrement `live` then).
    pub fn add_tenant<T: Tenant + 'static>(&self, cache: &Arc<T>) {
        let mut v = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        let weak: Weak<T> = Arc::downgrade(cache);
        v.push(weak);
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    /// Milliseconds since the budget was made.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn idle(&self, c: &dyn Tenant, now: u64) -> bool {
        now.saturating_sub(c.last_alloc_ms()) > IDLE_MS
    }

    /// The pages' share divided by the caches of the budget that are not
    /// idle.
    pub fn fair_share(&self) -> u64 {
        let now = self.now_ms();
        let n = self
            .caches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !self.idle(&**c, now))
            .count()
            .max(1);
        self.pages / n as u64
    }

    /// Evict one clean, unused page of a device other than `me`: of the
    /// one holding the most memory (ties taking turns). Called with no
    /// lock held.
    pub fn reclaim_elsewhere(&self, me: &dyn Tenant) -> bool {
        let mut others: Vec<Arc<dyn Tenant>> = {
            let v = self.caches.lock().unwrap_or_else(|p| p.into_inner());
            v.iter()
                .filter_map(Weak::upgrade)
                .filter(|c| !std::ptr::addr_eq(Arc::as_ptr(c), me))
                .collect()
        };
        if others.is_empty() {
            return false;
        }
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % others.len();
        others.rotate_left(start);
        // Idle ones first, then the largest (stable: ties keep the rotated
        // order).
        let now = self.now_ms();
        others.sort_by_key(|c| (!self.idle(&**c, now), std::cmp::Reverse(c.charged())));
        others.iter().any(|c| c.evict_for_other())
    }
}
