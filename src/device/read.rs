//! The read path of a cached device: cache hits copied out under each
//! page's lock ([`Inner::read_hit`], no allocation beyond the reply's arena
//! slice), misses filled by READs that concurrent readers share (single
//! flight: a page being fetched carries the fetch's channel, and whoever
//! finds it waits for that one fetch), a whole-request miss answered with
//! the READ's own data (no copy out of the pages), read-ahead windows
//! fetched in background tasks ([`Inner::readahead`]), and the wait for
//! memory when no page can be had. The stream table's advice (read-ahead
//! window, streaming bypass) comes from `readahead`. Reply buffers of
//! small hits are carved from a per-thread arena (no allocation of their
//! own).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;
use tracing::debug;

use super::backend::BlockBackend;
use super::cache::{bits, for_each_run, Claim, FetchState, Pinned};
use super::counters::add;
use super::inner::{join_all, BResult, Inner};
use super::readahead::Advice;

/// Reply buffers of cached reads are carved from a per-thread arena of
/// this size: one allocation serves many small reads (a 4 KiB hit would
/// otherwise cost a malloc and a free of its own). A slice keeps its arena
/// block alive until dropped, so the block is kept small.
const ARENA: usize = 64 << 10;

thread_local! {
    static ARENA_BUF: std::cell::RefCell<BytesMut> =
        std::cell::RefCell::new(BytesMut::new());
}

/// An empty buffer with room for `len` bytes: the thread's arena when
/// `len` is small (give it back with [`arena_put`]), else its own.
#[inline]
fn arena_take(len: usize) -> BytesMut {
    if len > ARENA / 4 {
        return BytesMut::with_capacity(len);
    }
    let mut b = ARENA_BUF.with(|a| std::mem::take(&mut *a.borrow_mut()));
    if b.capacity() < len {
        // Reuses the old block when no reply holds a slice of it any more.
        b.reserve(ARENA);
    }
    b
}

/// Split the filled part off `buf` as the reply; the room left goes back
/// to the thread's arena (unless it holds more already).
#[inline]
fn arena_put(mut buf: BytesMut) -> Bytes {
    let data = buf.split().freeze();
    if buf.capacity() > 0 {
        ARENA_BUF.with(|a| {
            let mut a = a.borrow_mut();
            if a.capacity() < buf.capacity() {
                *a = buf;
            }
        });
    }
    data
}

/// Fetch of a run of consecutive pages by one READ.
pub(super) struct Run {
    pub first: u64,
    pub pages: Vec<Pinned>,
    /// Publishes the fetch's outcome to everyone waiting for its pages.
    pub tx: watch::Sender<FetchState>,
    pub readahead: bool,
}

impl Run {
    pub fn new(first: u64, readahead: bool) -> Run {
        Run {
            first,
            pages: Vec::new(),
            tx: watch::Sender::new(None),
            readahead,
        }
    }
    pub fn next_idx(&self) -> u64 {
        self.first + self.pages.len() as u64
    }
}

impl<B: BlockBackend> Inner<B> {
    /// What the stream table advises for a cached read (see `readahead`):
    /// a window to read ahead (only with read-ahead on), whether to bypass
    /// the cache, and for a bypass-sized read its stream token.
    pub(super) fn advise(&self, offset: u64, len: u64) -> Advice {
        let large = self.cfg.bypass_min > 0 && len >= self.cfg.bypass_min;
        if !self.cfg.readahead && !large {
            return Advice::default();
        }
        let mut a = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(offset, len, large, self.cfg.bypass_depth);
        if !self.cfg.readahead {
            a.ahead = None;
        }
        a
    }

    /// Claim the pages of bytes `a..b` that are not resident (right away,
    /// so a reader arriving there waits for them instead of fetching them
    /// again) and fetch them in background tasks. Never waits for memory:
    /// read-ahead only takes what eviction of clean pages can give.
    pub(super) fn readahead(self: &Arc<Self>, a: u64, b: u64) {
        let ps = self.geo.page;
        let mut run: Option<Run> = None;
        let mut claimed = 0;
        for idx in a / ps..b.div_ceil(ps) {
            let r = match run.take() {
                Some(r) if r.next_idx() == idx && (r.pages.len() as u64) < self.geo.fetch_pages => {
                    r
                }
                other => {
                    if let Some(done) = other.filter(|r| !r.pages.is_empty()) {
                        tokio::spawn(self.clone().fetch(done));
                    }
                    Run::new(idx, true)
                }
            };
            let mut r = r;
            match self.cache.claim(idx, &r.tx) {
                Claim::Created(p) => {
                    r.pages.push(p);
                    claimed += 1;
                    run = Some(r);
                }
                Claim::Exists => {
                    if r.pages.is_empty() {
                        // Nothing claimed yet: the same (unused) run
                        // starts at the next page, rather than a new run
                        // and its watch channel per resident page.
                        r.first = idx + 1;
                        run = Some(r);
                    } else {
                        tokio::spawn(self.clone().fetch(r));
                    }
                }
                Claim::NoMemory => {
                    if !r.pages.is_empty() {
                        tokio::spawn(self.clone().fetch(r));
                    }
                    break;
                }
            }
        }
        if let Some(r) = run.filter(|r| !r.pages.is_empty()) {
            tokio::spawn(self.clone().fetch(r));
        }
        add(&self.c.readahead_pages, claimed);
    }

    /// READ the pages of `run` and fill their invalid blocks; publish the
    /// outcome to everyone waiting. Returns the data read (all the run's
    /// blocks) when it succeeded.
    pub(super) async fn fetch(self: Arc<Self>, run: Run) -> Option<Bytes> {
        let g = self.geo;
        let lba = run.first * g.bpp;
        let end = (lba + run.pages.len() as u64 * g.bpp).min(g.blocks);
        let marker = run.tx.subscribe();
        let result = async {
            let _permits = self
                .io
                .clone()
                .acquire_many_owned(((end - lba) * g.bs) as u32)
                .await
                .ok();
            let _shared = self.locks.acquire(lba, end, false).await;
            let data = self.read_blocks(lba, end).await;
            for p in &run.pages {
                let mut s = p.lock();
                if let Ok(data) = &data {
                    let full = bits(0, g.page_blocks(p.idx));
                    let base = ((p.idx - run.first) * g.page) as usize;
                    let bs = g.bs as usize;
                    for_each_run(full & !s.valid, |x, y| {
                        let (x, y) = (x as usize * bs, y as usize * bs);
                        s.buf[x..y].copy_from_slice(&data[base + x..base + y]);
                        crate::stats::add_cache_copied((y - x) as u64);
                    });
                    s.valid |= full;
                }
                if s.loading
                    .as_ref()
                    .is_some_and(|rx| rx.same_channel(&marker))
                {
                    s.loading = None;
                }
            }
            data
        }
        .await;
        let (result, data) = match result {
            Ok(d) => (Ok(()), Some(d)),
            Err(e) => (Err(e), None),
        };
        if result.is_err() {
            let idxs: Vec<u64> = run.pages.iter().map(|p| p.idx).collect();
            drop(run.pages);
            for i in idxs {
                self.cache.remove_if_empty(i);
            }
        }
        if let Err(e) = &result {
            debug!(lba, blocks = end - lba, readahead = run.readahead, error = %e, "cache fill failed");
        }
        run.tx.send_replace(Some(result));
        data
    }

    /// Pin up to `want` pages from `idx`; at least one, waiting for memory
    /// (without holding any pin) if none can be had.
    async fn pin_range(&self, idx: u64, want: u64) -> BResult<Vec<Pinned>> {
        loop {
            let mut pins = Vec::new();
            for i in idx..idx + want {
                match self.cache.pin_or_alloc(i) {
                    Some(p) => pins.push(p),
                    None => break,
                }
            }
            if !pins.is_empty() {
                return Ok(pins);
            }
            self.wait_for_memory().await?;
        }
    }

    pub(super) async fn pin_one(&self, idx: u64) -> BResult<Pinned> {
        loop {
            if let Some(p) = self.cache.pin_or_alloc(idx) {
                return Ok(p);
            }
            self.wait_for_memory().await?;
        }
    }

    /// Wait (briefly) for pages to become evictable: kick the flusher and
    /// wait for a signal. Fails when write-back keeps failing meanwhile,
    /// since dirty pages then cannot become clean.
    async fn wait_for_memory(&self) -> BResult<()> {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let failures = self.wb_failures.load(Ordering::Acquire);
        let b = &self.budget.inner;
        b.mem_waiters.fetch_add(1, Ordering::AcqRel);
        let _w = Waiting(&b.mem_waiters);
        self.signals.kick.notify_one();
        // Other devices' dirty pages may hold the memory: their flushers too.
        b.kick.notify_waiters();
        let changed = b.mem_changed.notified();
        let _ = tokio::time::timeout(Duration::from_millis(50), changed).await;
        if self.wb_failures.load(Ordering::Acquire) != failures {
            if let Some(e) = self
                .last_wb_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// A read all of whose pages are resident with valid data for the
    /// range: copied out under each page's lock, counted as `fill` counts a
    /// hit. `None` as soon as a page is absent or not valid for its part;
    /// then only the read-ahead hits of the pages already copied are
    /// counted (their flag cleared, so `fill` does not count them again).
    #[inline]
    pub(super) fn read_hit(&self, offset: u64, len: usize) -> Option<Bytes> {
        let g = self.geo;
        let end = offset + len as u64;
        let mut out = arena_take(len);
        let mut idx = offset / g.page;
        let mut pages = 0;
        while idx * g.page < end {
            let pstart = idx * g.page;
            let a = offset.max(pstart);
            let b = end.min(pstart + g.page);
            let mask = bits((a - pstart) / g.bs, (b - pstart).div_ceil(g.bs));
            let hit = self.cache.pin_present(idx).is_some_and(|p| {
                let mut s = p.lock();
                if s.valid & mask != mask {
                    return false;
                }
                out.extend_from_slice(&s.buf[(a - pstart) as usize..(b - pstart) as usize]);
                if s.readahead {
                    s.readahead = false;
                    add(&self.c.readahead_hits, 1);
                }
                true
            });
            if !hit {
                out.clear();
                arena_put(out);
                return None;
            }
            pages += 1;
            idx += 1;
        }
        add(&self.c.hits, pages);
        crate::stats::add_cache_copied(len as u64);
        Some(arena_put(out))
    }

    pub(super) async fn read_cached(self: &Arc<Self>, offset: u64, len: usize) -> BResult<Bytes> {
        // From the thread's arena when small; zeroed only when pages
        // arrive out of order (a later page valid before an earlier one).
        let mut out = arena_take(len);
        let ps = self.geo.page;
        let last = (offset + len as u64 - 1) / ps;
        let first = offset / ps;
        let mut idx = first;
        while idx <= last {
            let pins = self
                .pin_range(idx, (last - idx + 1).min(self.geo.chunk_pages))
                .await?;
            let whole = idx == first && pins.len() as u64 == last - first + 1;
            if let Some(b) = self.fill(&pins, offset, len, &mut out, whole).await? {
                arena_put(out);
                return Ok(b);
            }
            idx += pins.len() as u64;
        }
        Ok(arena_put(out))
    }

    /// Copy the part of the reply (`len` bytes at `offset`, in `out`) that
    /// `pins` cover, fetching what is not valid; concurrent readers share
    /// one fetch. When `whole` (the pins cover the whole request) and none
    /// of them is valid or being fetched, they are fetched by one READ
    /// whose data *is* the reply: returned, with no copy out of the pages.
    async fn fill(
        self: &Arc<Self>,
        pins: &[Pinned],
        offset: u64,
        len: usize,
        out: &mut BytesMut,
        whole: bool,
    ) -> BResult<Option<Bytes>> {
        let g = self.geo;
        let end = offset + len as u64;
        let mut pending: Vec<usize> = (0..pins.len()).collect();
        let mut first_look = true;
        // Some block of the request is valid (maybe dirty, newer than the
        // target): the fetched data cannot be the reply.
        let mut any_valid = false;
        loop {
            let mut waits = Vec::new();
            let mut runs: Vec<Run> = Vec::new();
            let mut still = Vec::new();
            for &i in &pending {
                let p = &pins[i];
                let pstart = p.idx * g.page;
                let a = offset.max(pstart);
                let b = end.min(pstart + g.page);
                let mask = bits((a - pstart) / g.bs, (b - pstart).div_ceil(g.bs));
                let mut s = p.lock();
                if s.valid & mask == mask {
                    let src = &s.buf[(a - pstart) as usize..(b - pstart) as usize];
                    let at = (a - offset) as usize;
                    if out.len() == at {
                        // In order (all of a hit): appended, never zeroed first.
                        out.reserve(len - at);
                        out.extend_from_slice(src);
                    } else {
                        if out.len() < len {
                            out.resize(len, 0);
                        }
                        out[at..at + src.len()].copy_from_slice(src);
                    }
                    crate::stats::add_cache_copied(b - a);
                    if first_look {
                        add(&self.c.hits, 1);
                    }
                    if s.readahead {
                        s.readahead = false;
                        add(&self.c.readahead_hits, 1);
                    }
                    continue;
                }
                still.push(i);
                any_valid |= s.valid & mask != 0;
                if first_look {
                    if s.readahead {
                        s.readahead = false;
                        add(&self.c.readahead_hits, 1);
                    } else {
                        add(&self.c.misses, 1);
                    }
                }
                if let Some(rx) = s.live_loading() {
                    waits.push(rx);
                    continue;
                }
                let run = match runs.last_mut() {
                    Some(r) if r.next_idx() == p.idx && (r.pages.len() as u64) < g.fetch_pages => r,
                    _ => {
                        runs.push(Run::new(p.idx, false));
                        runs.last_mut().expect("just pushed")
                    }
                };
                s.loading = Some(run.tx.subscribe());
                run.pages.push(p.clone());
            }
            if still.is_empty() {
                return Ok(None);
            }
            // The whole request missed and is ours to fetch in one READ:
            // its data is the reply.
            if first_look
                && whole
                && !any_valid
                && waits.is_empty()
                && runs.len() == 1
                && runs[0].pages.len() == pins.len()
            {
                let run = runs.pop().expect("one run");
                let base = run.first * g.page;
                let mut rx = run.tx.subscribe();
                if let Some(data) = self.clone().fetch(run).await {
                    let skip = (offset - base) as usize;
                    if data.len() >= skip + len {
                        return Ok(Some(data.slice(skip..skip + len)));
                    }
                }
                // Failed: report what the fetch published.
                if let Ok(v) = rx.wait_for(|v| v.is_some()).await {
                    if let Some(Err(e)) = v.as_ref() {
                        return Err(e.clone());
                    }
                }
                pending = still;
                first_look = false;
                continue;
            }
            first_look = false;
            // Our own fetches run inside this task (one scheduler hop less
            // per miss); a dropped reader drops them, which only leaves the
            // pages unfetched for the next reader.
            let mut mine = Vec::with_capacity(runs.len());
            for run in runs {
                waits.push(run.tx.subscribe());
                mine.push(self.clone().fetch(run));
            }
            join_all(mine).await;
            for mut rx in waits {
                let failed = match rx.wait_for(|v| v.is_some()).await {
                    Ok(v) => v.as_ref().and_then(|r| r.as_ref().err().cloned()),
                    Err(_) => None, // the fetch task went away: look again
                };
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            pending = still;
        }
    }
}
