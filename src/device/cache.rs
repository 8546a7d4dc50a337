//! Page table, LRU and memory accounting of the page cache.
//!
//! A [`Page`] holds `page_size` bytes of the LUN plus two block bitmaps:
//! `valid` (the block holds current data) and `dirty` (newer than the
//! target; write-back only). A page may be partly valid: a write of whole
//! blocks needs no read, and a fetch fills only the blocks still invalid, so
//! it can never overwrite newer data written while the READ was in flight.
//!
//! Resident pages live in exactly one of two places: `clean` (an
//! [`LruCache`], the only place eviction looks; a hit moves a page to the
//! MRU end only once it is in the older half of the list, see `lookup`)
//! or `dirty` (a `BTreeMap` in
//! LBA order, which is what the flusher walks to build large contiguous
//! WRITEs). Every page costs `page_size` + [`PAGE_OVERHEAD`] bytes against
//! the shared `CacheBudget` (see `budget`) from the moment it is
//! allocated, whether clean, dirty or still being fetched, and its buffer is
//! a chunk of the budget's reserved page memory (an [`IoBuf`] that returns
//! there when the page is evicted): a page never uses heap memory.
//!
//! Locks: `Cache::state` (a std mutex, never held across an await) may be
//! taken first and a page's own mutex second, never the other way round.
//! A page in use is pinned (`pins > 0`); pins are only added under the state
//! lock (or on an already pinned page), so eviction, which runs under it,
//! never frees a page someone is using.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use lru::LruCache;
use tokio::sync::watch;

use super::backend::BackendError;
use super::budget::{BudgetInner, Tenant};
use rlun_iscsi::iobuf::IoBuf;

/// Bytes charged per page on top of its buffer: the `Page` struct, its
/// `Arc`, and its entry in the LRU list or the dirty map.
pub(crate) const PAGE_OVERHEAD: u64 = 256;

/// How many LRU-end pages eviction looks at before giving up (pages at the
/// end that are pinned or being fetched are skipped).
const EVICT_SCAN: usize = 64;

/// The outcome of a fetch, published to everyone waiting for it.
pub(crate) type FetchState = Option<Result<(), Arc<BackendError>>>;

/// `bits(from, to)`: a mask with bits `from..to` set (at most 128 bits).
pub(crate) fn bits(from: u64, to: u64) -> u128 {
    if to <= from {
        return 0;
    }
    let n = to - from;
    let m = if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    };
    m << from
}

/// Call `f(from, to)` for every run of consecutive set bits of `mask`.
pub(crate) fn for_each_run(mask: u128, mut f: impl FnMut(u64, u64)) {
    let mut m = mask;
    while m != 0 {
        let from = m.trailing_zeros() as u64;
        let ones = (m >> from).trailing_ones() as u64;
        f(from, from + ones);
        if from + ones >= 128 {
            break;
        }
        m &= !bits(from, from + ones);
    }
}

/// Put `page` at the MRU end of `clean`, stamped with the tick.
fn push_clean(st: &mut State, page: Arc<Page>) {
    page.stamp.store(st.tick, Ordering::Relaxed);
    st.tick += 1;
    st.clean.push(page.idx, page);
}

/// Resident page `idx` (clean or dirty) for a reader. A clean page goes
/// back to the MRU end only when it has fallen into the older half of the
/// LRU list (more pages went to the MRU end since it last did than half
/// the list): every hit still keeps a page far from eviction, but a hot
/// set re-read at random does not relink list nodes — scattered cache
/// lines — on every hit.
///
/// `f` is given the page: a hit that needs no promotion costs one hash
/// lookup.
fn lookup<R>(st: &mut State, idx: u64, f: impl FnOnce(&Arc<Page>) -> R) -> Option<R> {
    match st.clean.peek(&idx) {
        Some(p) => {
            let age = st.tick - p.stamp.load(Ordering::Relaxed);
            if age.saturating_mul(2) <= st.clean.len() as u64 {
                return Some(f(p));
            }
        }
        None => return st.dirty.get(&idx).map(f),
    }
    st.clean.promote(&idx);
    let tick = st.tick;
    st.tick += 1;
    let p = st.clean.peek(&idx)?;
    p.stamp.store(tick, Ordering::Relaxed);
    Some(f(p))
}

/// Mutable state of one page (behind the page's mutex).
#[derive(Debug)]
pub(crate) struct PageState {
    pub buf: IoBuf,
    pub valid: u128,
    pub dirty: u128,
    /// Blocks a write-back command is writing right now.
    pub wb: u128,
    /// Set while a fetch for this page is in flight.
    pub loading: Option<watch::Receiver<FetchState>>,
    /// Brought in by read-ahead and not read yet.
    pub readahead: bool,
    /// When the page last went from clean to dirty.
    pub dirty_since: Option<Instant>,
    /// The page sits in `dirty` (not `clean`); changed only under the state lock.
    pub in_dirty: bool,
}

impl PageState {
    /// The in-flight fetch to wait for, if its task is still running.
    pub(crate) fn live_loading(&self) -> Option<watch::Receiver<FetchState>> {
        self.loading
            .as_ref()
            .filter(|rx| rx.has_changed().is_ok())
            .cloned()
    }
}

#[derive(Debug)]
pub(crate) struct Page {
    pub idx: u64,
    pins: AtomicU32,
    /// `State::tick` when the page last went to the MRU end of `clean`
    /// (changed only under the state lock).
    stamp: AtomicU64,
    st: Mutex<PageState>,
}

impl Page {
    pub(crate) fn lock(&self) -> MutexGuard<'_, PageState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A page that cannot be evicted while this value lives.
#[derive(Debug)]
pub(crate) struct Pinned {
    page: Arc<Page>,
    cache: Arc<Cache>,
}

impl Deref for Pinned {
    type Target = Page;
    fn deref(&self) -> &Page {
        &self.page
    }
}

impl Clone for Pinned {
    fn clone(&self) -> Pinned {
        // Already pinned by `self`, so it cannot be evicted meanwhile.
        self.page.pins.fetch_add(1, Ordering::AcqRel);
        Pinned {
            page: self.page.clone(),
            cache: self.cache.clone(),
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.page.pins.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.cache.budget.mem_changed.notify_waiters();
        }
    }
}

#[derive(Debug)]
struct State {
    clean: LruCache<u64, Arc<Page>>,
    dirty: BTreeMap<u64, Arc<Page>>,
    /// This cache's share of the budget's charge.
    charged: u64,
    /// Pages put at the MRU end of `clean` so far (see [`lookup`]).
    tick: u64,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Cache {
    state: Mutex<State>,
    /// Shared with every cache of the same budget (memory, signals).
    pub budget: Arc<BudgetInner>,
    pub page_size: usize,
    pub page_cost: u64,
    pub evictions: AtomicU64,
    /// Pages read ahead and evicted before any read used them.
    pub readahead_wasted: AtomicU64,
    charged: AtomicU64,
    /// When this cache last needed a new page (budget clock, ms).
    pub last_alloc: AtomicU64,
}

impl Drop for Cache {
    fn drop(&mut self) {
        // The pages go with the cache (their chunks return on their own).
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        self.budget.uncharge(st.charged);
        st.charged = 0;
        self.budget.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Tenant for Cache {
    fn charged(&self) -> u64 {
        Cache::charged(self)
    }

    fn last_alloc_ms(&self) -> u64 {
        self.last_alloc.load(Ordering::Relaxed)
    }

    /// Evict one page for another cache of the same budget.
    fn evict_for_other(&self) -> bool {
        let mut st = self.lock();
        let done = self.evict_one(&mut st);
        drop(st);
        if done {
            self.budget.mem_changed.notify_waiters();
        }
        done
    }
}

/// Result of [`Cache::claim`].
pub(crate) enum Claim {
    Created(Pinned),
    Exists,
    NoMemory,
}

impl Cache {
    pub(crate) fn new(page_size: usize, budget: Arc<BudgetInner>) -> Arc<Cache> {
        budget.reserve();
        let cache = Arc::new(Cache {
            state: Mutex::new(State {
                clean: LruCache::unbounded(),
                dirty: BTreeMap::new(),
                charged: 0,
                tick: 0,
            }),
            budget,
            page_size,
            page_cost: page_size as u64 + PAGE_OVERHEAD,
            evictions: AtomicU64::new(0),
            readahead_wasted: AtomicU64::new(0),
            charged: AtomicU64::new(0),
            last_alloc: AtomicU64::new(0),
        });
        cache.budget.add_tenant(&cache);
        cache
    }

    fn uncharge(&self, st: &mut State, pages: u64) {
        st.charged -= pages * self.page_cost;
        self.budget.uncharge(pages * self.page_cost);
        self.charged.store(st.charged, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes charged to resident pages.
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    fn pin(self: &Arc<Self>, page: &Arc<Page>) -> Pinned {
        page.pins.fetch_add(1, Ordering::AcqRel);
        Pinned {
            page: page.clone(),
            cache: self.clone(),
        }
    }

    /// Give the buffer of an evicted page (out of the table, unpinned)
    /// back, counting it as wasted read-ahead if no read used it.
    fn release(&self, page: &Page) {
        let mut s = page.lock();
        if std::mem::take(&mut s.readahead) {
            self.readahead_wasted.fetch_add(1, Ordering::Relaxed);
        }
        drop(std::mem::replace(&mut s.buf, IoBuf::empty()));
    }

    /// When the oldest data in the cache that the target does not have yet
    /// was written (the earliest `dirty_since` of a dirty page); `None`
    /// when nothing is dirty. Walks the dirty pages: for `rlun stats`, not
    /// for the request path.
    pub(crate) fn oldest_dirty(&self) -> Option<Instant> {
        let st = self.lock();
        st.dirty
            .values()
            .filter_map(|p| {
                let s = p.lock();
                (s.dirty != 0).then_some(s.dirty_since).flatten()
            })
            .min()
    }

    /// Evict one clean, unused page from the LRU end. Returns false when
    /// none of the pages looked at can go.
    fn evict_one(&self, st: &mut State) -> bool {
        let victim = st
            .clean
            .iter()
            .rev()
            .take(EVICT_SCAN)
            .find(|(_, p)| {
                p.pins.load(Ordering::Acquire) == 0 && {
                    let s = p.lock();
                    s.dirty == 0 && s.wb == 0 && !s.in_dirty && s.live_loading().is_none()
                }
            })
            .map(|(k, _)| *k);
        match victim {
            Some(k) => {
                if let Some(p) = st.clean.pop(&k) {
                    // Unpinned and out of the table: nobody else can reach
                    // it, so its memory goes back to the budget now.
                    self.release(&p);
                }
                self.uncharge(st, 1);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Charge a new page and take its buffer, evicting this cache's clean
    /// pages while the budget or the page memory is exhausted.
    fn make_room(&self, st: &mut State, evict: bool) -> Option<IoBuf> {
        loop {
            if self.budget.try_charge(self.page_cost) {
                if let Some(buf) = self.budget.page_buf(self.page_size) {
                    return Some(buf);
                }
                self.budget.uncharge(self.page_cost);
            }
            if !evict || !self.evict_one(st) {
                return None;
            }
        }
    }

    fn insert_new(self: &Arc<Self>, st: &mut State, idx: u64, buf: IoBuf) -> Arc<Page> {
        // A reused chunk holds stale bytes; no block of it is valid, so
        // nothing reads them before a fetch or a write replaces them.
        let page = Arc::new(Page {
            idx,
            pins: AtomicU32::new(0),
            stamp: AtomicU64::new(0),
            st: Mutex::new(PageState {
                buf,
                valid: 0,
                dirty: 0,
                wb: 0,
                loading: None,
                readahead: false,
                dirty_since: None,
                in_dirty: false,
            }),
        });
        push_clean(st, page.clone());
        st.charged += self.page_cost;
        self.charged.store(st.charged, Ordering::Relaxed);
        page
    }

    /// Take a new page's memory when the budget is full: a cache holding
    /// less than its fair share (the pages' share divided by the caches
    /// of the budget that needed a page within the last second: idle
    /// caches give theirs up) takes it from the cache holding the most
    /// (idle ones first), else from
    /// its own LRU end, else from another cache (with no lock held while
    /// evicting elsewhere). On success the state lock is held again and
    /// the charge is made. `Err(true)`: the page exists now.
    fn room(self: &Arc<Self>, idx: u64) -> Result<(MutexGuard<'_, State>, IoBuf), bool> {
        let alone = self.budget.live.load(Ordering::Acquire) <= 1;
        if !alone {
            self.last_alloc
                .store(self.budget.now_ms(), Ordering::Relaxed);
        }
        // Decided only once the budget is full.
        let mut own_first = None;
        for _ in 0..8 {
            let mut st = self.lock();
            if st.clean.contains(&idx) || st.dirty.contains_key(&idx) {
                return Err(true);
            }
            if let Some(buf) = self.make_room(&mut st, false) {
                return Ok((st, buf));
            }
            let evict = *own_first
                .get_or_insert_with(|| alone || self.charged() >= self.budget.fair_share());
            if evict {
                if let Some(buf) = self.make_room(&mut st, true) {
                    return Ok((st, buf));
                }
            }
            drop(st);
            if alone || !self.budget.reclaim_elsewhere(&**self) {
                if evict {
                    break;
                }
                own_first = Some(true);
            }
        }
        Err(false)
    }

    /// Pin page `idx`, allocating it (empty, nothing valid) when absent.
    /// `None` when the budget is exhausted and nothing can be evicted.
    pub(crate) fn pin_or_alloc(self: &Arc<Self>, idx: u64) -> Option<Pinned> {
        loop {
            {
                let mut st = self.lock();
                if let Some(p) = lookup(&mut st, idx, |p| self.pin(p)) {
                    return Some(p);
                }
            }
            match self.room(idx) {
                Ok((mut st, buf)) => {
                    let page = self.insert_new(&mut st, idx, buf);
                    return Some(self.pin(&page));
                }
                // Someone else created it meanwhile: look again.
                Err(true) => continue,
                Err(false) => return None,
            }
        }
    }

    /// Pin page `idx` if it is resident (clean or dirty), never allocating.
    pub(crate) fn pin_present(self: &Arc<Self>, idx: u64) -> Option<Pinned> {
        let mut st = self.lock();
        lookup(&mut st, idx, |p| self.pin(p))
    }

    /// For read-ahead: allocate page `idx` only when absent, already marked
    /// as being fetched through `loading`.
    pub(crate) fn claim(self: &Arc<Self>, idx: u64, loading: &watch::Sender<FetchState>) -> Claim {
        let (mut st, buf) = match self.room(idx) {
            Ok(x) => x,
            Err(true) => return Claim::Exists,
            Err(false) => return Claim::NoMemory,
        };
        let page = self.insert_new(&mut st, idx, buf);
        {
            let mut s = page.lock();
            s.loading = Some(loading.subscribe());
            s.readahead = true;
        }
        Claim::Created(self.pin(&page))
    }

    /// Pin the resident pages with index in `first..last`, in index order,
    /// without changing their LRU position.
    pub(crate) fn present(self: &Arc<Self>, first: u64, last: u64) -> Vec<Pinned> {
        let st = self.lock();
        let resident = (st.clean.len() + st.dirty.len()) as u64;
        let mut out: Vec<Pinned> = if last.saturating_sub(first) <= resident {
            (first..last)
                .filter_map(|i| st.clean.peek(&i).or_else(|| st.dirty.get(&i)))
                .map(|p| self.pin(p))
                .collect()
        } else {
            st.clean
                .iter()
                .filter(|(k, _)| (first..last).contains(*k))
                .map(|(_, p)| p)
                .chain(st.dirty.range(first..last).map(|(_, p)| p))
                .map(|p| self.pin(p))
                .collect()
        };
        out.sort_by_key(|p| p.idx);
        out
    }

    /// Whether any page with index in `first..last` is resident (valid,
    /// dirty or being fetched), without pinning it or changing the LRU.
    pub(crate) fn any_present(&self, first: u64, last: u64) -> bool {
        let st = self.lock();
        let resident = (st.clean.len() + st.dirty.len()) as u64;
        if resident == 0 {
            return false;
        }
        if last.saturating_sub(first) <= resident {
            (first..last).any(|i| st.clean.contains(&i) || st.dirty.contains_key(&i))
        } else {
            st.dirty.range(first..last).next().is_some()
                || st.clean.iter().any(|(k, _)| (first..last).contains(k))
        }
    }

    /// Move a page that just got dirty blocks from `clean` to `dirty`.
    pub(crate) fn mark_dirty(&self, page: &Pinned) {
        let mut st = self.lock();
        let mut s = page.lock();
        if !s.in_dirty && s.dirty != 0 {
            st.clean.pop(&page.idx);
            st.dirty.insert(page.idx, page.page.clone());
            s.in_dirty = true;
        }
    }

    /// Move pages without dirty blocks (and no write-back in flight) back
    /// to the MRU end of `clean`, then wake whoever waits for memory once.
    pub(crate) fn settle(&self, pages: &[Pinned]) {
        let mut moved = false;
        {
            let mut st = self.lock();
            for page in pages {
                let mut s = page.lock();
                if s.in_dirty && s.dirty == 0 && s.wb == 0 {
                    st.dirty.remove(&page.idx);
                    push_clean(&mut st, page.page.clone());
                    s.in_dirty = false;
                    s.dirty_since = None;
                    moved = true;
                }
            }
        }
        if moved {
            self.budget.mem_changed.notify_waiters();
        }
    }

    /// `(index, mask, dirty_since)` of every page in `dirty`, in index
    /// order; `mask` is its dirty blocks, plus those being written back when
    /// `include_wb`.
    pub(crate) fn dirty_masks(&self, include_wb: bool) -> Vec<(u64, u128, Option<Instant>)> {
        let st = self.lock();
        st.dirty
            .iter()
            .map(|(&i, p)| {
                let s = p.lock();
                let m = if include_wb { s.dirty | s.wb } else { s.dirty };
                (i, m, s.dirty_since)
            })
            .filter(|(_, m, _)| *m != 0)
            .collect()
    }

    /// Evict every clean page not in use (like `echo 1 > drop_caches`).
    pub(crate) fn drop_clean(&self) -> u64 {
        let mut st = self.lock();
        let mut n = 0;
        let keys: Vec<u64> = st.clean.iter().map(|(k, _)| *k).collect();
        for k in keys {
            let evictable = st.clean.peek(&k).is_some_and(|p| {
                p.pins.load(Ordering::Acquire) == 0 && {
                    let s = p.lock();
                    s.dirty == 0 && s.wb == 0 && s.live_loading().is_none()
                }
            });
            if evictable {
                if let Some(p) = st.clean.pop(&k) {
                    self.release(&p);
                }
                self.uncharge(&mut st, 1);
                n += 1;
            }
        }
        self.evictions.fetch_add(n, Ordering::Relaxed);
        drop(st);
        self.budget.mem_changed.notify_waiters();
        n
    }

    /// Remove a page that holds nothing (no valid block) and is not in use,
    /// e.g. after its fetch failed.
    pub(crate) fn remove_if_empty(&self, idx: u64) {
        let mut st = self.lock();
        let empty = st.clean.peek(&idx).is_some_and(|p| {
            p.pins.load(Ordering::Acquire) == 0 && {
                let s = p.lock();
                s.valid == 0 && s.dirty == 0 && s.wb == 0 && s.live_loading().is_none()
            }
        });
        if empty {
            if let Some(p) = st.clean.pop(&idx) {
                drop(std::mem::replace(&mut p.lock().buf, IoBuf::empty()));
            }
            self.uncharge(&mut st, 1);
        }
    }

    #[cfg(test)]
    pub(crate) fn resident(&self) -> (usize, usize) {
        let st = self.lock();
        (st.clean.len(), st.dirty.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::budget::CacheBudget;

    fn budget(pages: u64) -> Arc<BudgetInner> {
        CacheBudget::exact(pages, 64 << 10).inner
    }

    #[test]
    fn bits_builds_masks_including_the_full_width() {
        assert_eq!(bits(0, 0), 0);
        assert_eq!(bits(0, 3), 0b111);
        assert_eq!(bits(2, 4), 0b1100);
        assert_eq!(bits(0, 128), u128::MAX);
        assert_eq!(bits(127, 128), 1u128 << 127);
    }

    #[test]
    fn for_each_run_reports_maximal_runs() {
        let mut runs = Vec::new();
        for_each_run(0b1110_0110 | (1u128 << 127), |a, b| runs.push((a, b)));
        assert_eq!(runs, vec![(1, 3), (5, 8), (127, 128)]);
        let mut all = Vec::new();
        for_each_run(u128::MAX, |a, b| all.push((a, b)));
        assert_eq!(all, vec![(0, 128)]);
    }

    #[test]
    fn allocation_evicts_the_least_recently_used_clean_page() {
        let cache = Cache::new(4096, budget(3 * (4096 + PAGE_OVERHEAD)));
        for i in 0..3 {
            drop(cache.pin_or_alloc(i).unwrap());
        }
        drop(cache.pin_or_alloc(0)); // touch 0: page 1 is now the LRU page
        drop(cache.pin_or_alloc(3).unwrap());
        let kept: Vec<u64> = cache.present(0, 4).iter().map(|p| p.idx).collect();
        assert_eq!(kept, vec![0, 2, 3]);
        assert_eq!(cache.evictions.load(Ordering::Relaxed), 1);
        assert_eq!(cache.charged(), 3 * (4096 + PAGE_OVERHEAD));
    }

    #[test]
    fn a_hit_relinks_a_page_only_from_the_older_half_of_the_lru_list() {
        let cache = Cache::new(4096, budget(4 * (4096 + PAGE_OVERHEAD)));
        for i in 0..4 {
            drop(cache.pin_or_alloc(i).unwrap());
        }
        let order =
            |c: &Arc<Cache>| -> Vec<u64> { c.lock().clean.iter().map(|(k, _)| *k).collect() };
        assert_eq!(order(&cache), vec![3, 2, 1, 0], "MRU first");
        drop(cache.pin_present(2)); // newer half: stays where it is
        assert_eq!(order(&cache), vec![3, 2, 1, 0]);
        drop(cache.pin_present(1)); // older half: to the MRU end
        assert_eq!(order(&cache), vec![1, 3, 2, 0]);
        drop(cache.pin_or_alloc(0)); // the LRU page: to the MRU end
        assert_eq!(order(&cache), vec![0, 1, 3, 2]);
        drop(cache.pin_or_alloc(4).unwrap());
        let kept: Vec<u64> = cache.present(0, 5).iter().map(|p| p.idx).collect();
        assert_eq!(kept, vec![0, 1, 3, 4], "the least recently used page went");
        assert!(cache.pin_present(2).is_none());
    }

    #[test]
    fn pinned_and_dirty_pages_are_never_evicted() {
        let cache = Cache::new(512, budget(2 * (512 + PAGE_OVERHEAD)));
        let pinned = cache.pin_or_alloc(0).unwrap();
        let dirty = cache.pin_or_alloc(1).unwrap();
        dirty.lock().dirty = 1;
        cache.mark_dirty(&dirty);
        drop(dirty);
        assert!(cache.pin_or_alloc(2).is_none(), "over budget must fail");
        drop(pinned);
        assert!(cache.pin_or_alloc(2).is_some(), "page 0 is evictable now");
        assert_eq!(cache.resident(), (1, 1));
    }

    #[test]
    fn settle_returns_a_cleaned_page_to_the_lru() {
        let cache = Cache::new(512, budget(4 * (512 + PAGE_OVERHEAD)));
        let p = cache.pin_or_alloc(7).unwrap();
        p.lock().dirty = 0b1;
        cache.mark_dirty(&p);
        assert_eq!(cache.dirty_masks(false), vec![(7, 1, None)]);
        p.lock().dirty = 0;
        cache.settle(std::slice::from_ref(&p));
        assert_eq!(cache.resident(), (1, 0));
        assert!(cache.dirty_masks(true).is_empty());
    }
}
