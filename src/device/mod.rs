//! `LunDevice`: byte-addressed, concurrent, cached async I/O on a block
//! device — the layer the FUSE and NBD front ends stand on.
//!
//! [`LunDevice`] turns `read_at(offset, len)`, `write_at(offset, data)`,
//! `flush`, `discard` and `write_zeroes` on arbitrary byte ranges into SCSI
//! block commands on a [`BlockBackend`] (a remote [`crate::client::Lun`], or
//! [`MemBackend`] in tests):
//!
//! - Requests are split into commands of at most the LUN's maximum transfer
//!   length, all issued at once, so one large request keeps many commands in
//!   flight; independent requests run fully in parallel.
//! - Unaligned writes become read-modify-write of their first and last
//!   block. Every WRITE to the target holds an exclusive lock on its block
//!   range (see `rangelock`), so two writers of different bytes in the same
//!   block are serialized and neither update is lost.
//! - Writes to a read-only LUN fail with [`DeviceError::ReadOnly`] before
//!   anything is sent; out-of-range requests with [`DeviceError::OutOfRange`].
//!   [`DeviceError::to_errno`] is the one errno mapping for front ends.
//!
//! # The page cache
//!
//! [`CacheMode`] picks how much is cached:
//!
//! | mode | reads | writes complete when |
//! | --- | --- | --- |
//! | `none` | every read goes to the target | the target acknowledged them |
//! | `write-through` (default) | cached, read-ahead | the target acknowledged them (the cache is updated too) |
//! | `write-back` | cached, read-ahead | they are in local memory; a background flusher writes them later |
//!
//! **Page size.** The default page is 4 KiB (or the block size if larger,
//! or the LUN's OPTIMAL TRANSFER LENGTH GRANULARITY if that is a power of
//! two up to 64 KiB). Small pages keep 4 KiB random reads cheap: with 64 KiB
//! pages every random 4 KiB miss would read 64 KiB from the target (16× the
//! bytes, several times the latency on a loaded link). Large sequential I/O
//! does not need large pages: read-ahead fetches up to 4 MiB windows in
//! commands of up to 1 MiB, and the flusher merges neighbouring dirty pages
//! into WRITEs of up to the maximum transfer length. Each page tracks which
//! of its blocks are valid and which are dirty, so whole-block writes never
//! read first, and a fetch never overwrites newer data.
//!
//! **Memory.** The cache's memory is a [`CacheBudget`] (see `budget`), one
//! per process and shared by every device made with it (the commands make
//! one from `--cache-size`; a device made with `budget: None` gets its own
//! of `cache_size`). 7/8 of it (at least `size - 256 MiB`) holds pages,
//! each charged its size plus a fixed per-page overhead whether clean,
//! dirty or still being fetched, each a chunk of one page-aligned region
//! reserved when the first cached device starts (registered like the I/O
//! buffer pool, so an iSER connection registers it once); the rest bounds
//! the buffers of READs and WRITEs in flight for the caches (fetch data
//! before it is copied into pages, write-back data being sent). When pages
//! are needed, clean pages are evicted from the LRU end (of this device,
//! or of another device of the budget: idle ones first, a device below its
//! fair share takes from the one holding the most); when everything is
//! dirty, writers (and readers) wait for the flushers instead of
//! allocating more. What is not counted: the caller's own buffers (the
//! `Bytes` passed in and returned), the single blocks read for a
//! read-modify-write, and the process's base. Every copy into or out of a
//! page is counted in [`crate::stats`] `cache_copied_bytes`.
//!
//! **Read-ahead** watches a small table of recent streams (see `readahead`):
//! a read continuing one of them starts a read-ahead window of 128 KiB that
//! doubles each time the reader catches up, to 4 MiB; random reads start
//! none. Concurrent readers of a page that is being fetched wait for that one
//! fetch (single flight).
//!
//! **Streaming reads bypass the cache.** A read of at least `bypass_min`
//! bytes (default 128 KiB) that continues a sequential stream while another
//! such read of the stream is still in flight comes from a client that keeps
//! its own reads far ahead (nbdcopy, `qemu-img convert`, the kernel's
//! read-ahead on `/dev/nbdN`). When none of its pages is resident it is read
//! straight from the target into the reply, like `--cache none`: no page is
//! filled, nothing is evicted for data read once, no read-ahead is issued
//! and nothing is copied. A page that is resident (valid, dirty or being
//! fetched) sends the read through the cache as usual, so dirty data in
//! write-back mode is always seen: a page leaves the cache only clean, after
//! its data reached the target. A sequential reader that waits for each
//! read (queue depth 1) keeps read-ahead. `bypassed_reads` counts them.
//!
//! **Write-back and its data-loss window.** In `write-back` mode a write
//! completes as soon as its bytes are in local memory. Until the flusher
//! has written them (at the latest `writeback_delay` after the page first
//! became dirty, sooner under memory pressure) and the target has made them
//! durable, they exist only in this process: if the process dies, the
//! machine crashes or the target becomes unreachable for good, **writes that
//! completed up to `writeback_delay` (plus the time to write them) ago are
//! lost**, and a filesystem above may be left inconsistent. Only
//! [`LunDevice::flush`] (which writes every dirty page, then sends
//! SYNCHRONIZE CACHE) and FUA writes ([`LunDevice::write_at_fua`], which are
//! written with FUA before they complete) give durability. Dropping a
//! `LunDevice` without [`LunDevice::close`] or `flush` discards dirty data.
//! When write-back fails, the data stays dirty and is retried; `flush`
//! reports the failure.
//!
//! `discard` and `write_zeroes` keep the cache coherent: the affected
//! blocks are dropped from the cache (dirty data in them too) before the
//! command is sent, under the same exclusive range lock as a write.
//!
//! **Locking.** No lock is held across network I/O except the block range
//! lock (shared for cache fills, exclusive for writes), which serializes
//! only conflicting commands on the same blocks. The page table and each
//! page have std mutexes held for a lookup or a memcpy.

mod backend;
mod budget;
mod cache;
mod mem;
mod rangelock;
mod readahead;
#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use thiserror::Error;
use tokio::sync::{watch, Notify, Semaphore};
use tracing::{debug, info, warn};

pub use backend::{BackendError, BlockBackend, LunBackend};
pub use budget::CacheBudget;
pub use mem::{MemBackend, MemCommand, MemCounts, MemOp};

use cache::{bits, for_each_run, Cache, Claim, FetchState, Pinned};
use rangelock::RangeLock;
use readahead::{Advice, Streams, Ticket};

/// What [`LunDevice::read_now`] could do without waiting.
#[derive(Debug)]
pub enum ReadNow {
    /// The read's result.
    Done(Result<Bytes, DeviceError>),
    /// It must wait (for the target, a fetch, memory): finish it with
    /// [`LunDevice::read_wait`].
    Wait(PendingRead),
}

/// A read [`LunDevice::read_now`] started but could not complete; holds
/// nothing that needs returning, so it may simply be dropped.
#[derive(Debug)]
pub struct PendingRead {
    offset: u64,
    len: usize,
    /// The stream table's advice, when read_now already asked for it.
    advice: Option<Advice>,
}

/// Reply buffers of cached reads are carved from a per-thread arena of
/// this size: one allocation serves many small reads (a 4 KiB hit would
/// otherwise cost a malloc and a free of its own). A slice keeps its arena
/// block alive until dropped, so the block is kept small.
const ARENA: usize = 64 << 10;

thread_local! {
    static ARENA_BUF: std::cell::RefCell<bytes::BytesMut> =
        std::cell::RefCell::new(bytes::BytesMut::new());
}

/// An empty buffer with room for `len` bytes: the thread's arena when
/// `len` is small (give it back with [`arena_put`]), else its own.
fn arena_take(len: usize) -> bytes::BytesMut {
    if len > ARENA / 4 {
        return bytes::BytesMut::with_capacity(len);
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
fn arena_put(mut buf: bytes::BytesMut) -> Bytes {
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

/// A bypass-sized read in flight on its stream; returns its ticket on drop.
struct InFlight<'a>(&'a Mutex<Streams>, Ticket);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .done(self.1);
    }
}

use rlun_iscsi::iobuf::IoBuf;
use rlun_iscsi::scsi::sense::errno;

/// How [`LunDevice`] caches; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// No cache: every read and write goes to the target.
    None,
    /// Reads are cached; writes complete when the target has them.
    #[default]
    WriteThrough,
    /// Writes complete in memory and are written back later.
    WriteBack,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteBack => "write-back",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CacheMode {
    type Err = DeviceError;
    fn from_str(s: &str) -> Result<CacheMode, DeviceError> {
        match s {
            "none" => Ok(CacheMode::None),
            "write-through" | "writethrough" => Ok(CacheMode::WriteThrough),
            "write-back" | "writeback" => Ok(CacheMode::WriteBack),
            other => Err(DeviceError::Config(format!(
                "unknown cache mode {other:?} (none, write-through, write-back)"
            ))),
        }
    }
}

/// Settings of a [`LunDevice`].
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub mode: CacheMode,
    /// Cap on the cache's memory in bytes (default 256 MiB): the size of
    /// the private budget made when `budget` is `None`.
    pub cache_size: u64,
    /// The memory this device's cache shares with other devices (one per
    /// process: every LUN of a `mount`, `serve` or `attach`). `None`: a
    /// budget of `cache_size` for this device alone.
    pub budget: Option<CacheBudget>,
    /// Page size in bytes; `None` picks one (see the module docs). Must be a
    /// power of two, a multiple of the block size, at most 128 blocks.
    pub page_size: Option<u32>,
    /// Read ahead of sequential streams.
    pub readahead: bool,
    /// First read-ahead window in bytes (default 128 KiB).
    pub readahead_min: u64,
    /// Largest read-ahead window in bytes (default 4 MiB).
    pub readahead_max: u64,
    /// Reads at least this long that stream (see the module docs) bypass
    /// the cache when none of their pages is resident (default 128 KiB;
    /// 0: never).
    pub bypass_min: u64,
    /// Other bypass-sized reads of the stream that must be in flight for a
    /// read to bypass (default 1; 0: every sequential read of at least
    /// `bypass_min` bypasses).
    pub bypass_depth: u32,
    /// Longest time dirty data waits before the flusher writes it (default 1 s).
    pub writeback_delay: Duration,
    /// Write-back commands in flight at once (default 4).
    pub writeback_depth: usize,
    /// Log a `tracing::info!` line with the counters this often.
    pub stats_interval: Option<Duration>,
}

impl Default for DeviceConfig {
    fn default() -> DeviceConfig {
        DeviceConfig {
            mode: CacheMode::WriteThrough,
            cache_size: 256 << 20,
            budget: None,
            page_size: None,
            readahead: true,
            readahead_min: 128 << 10,
            readahead_max: 4 << 20,
            bypass_min: 128 << 10,
            bypass_depth: 1,
            writeback_delay: Duration::from_secs(1),
            writeback_depth: 4,
            stats_interval: None,
        }
    }
}

/// The operation a [`DeviceError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::WriteZeroes => "write zeroes",
        })
    }
}

/// Errors of [`LunDevice`], each with the operation and byte range.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("{op} of {len} bytes at offset {offset}: the LUN is read-only")]
    ReadOnly { op: Op, offset: u64, len: u64 },
    #[error("{op} of {len} bytes at offset {offset} is outside the device ({size} bytes)")]
    OutOfRange {
        op: Op,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{op} of {len} bytes at offset {offset} failed")]
    Io {
        op: Op,
        offset: u64,
        len: u64,
        #[source]
        source: Arc<BackendError>,
    },
    #[error("invalid device configuration: {0}")]
    Config(String),
    #[error("LunDevice must be created inside a Tokio runtime (it runs background tasks)")]
    NoRuntime,
    #[error("{op}: the device is shut down")]
    Closed { op: Op },
}

impl DeviceError {
    /// The Linux errno for this error: `EROFS` for read-only, `EINVAL` for
    /// out of range or bad settings, the SCSI error's own mapping
    /// ([`rlun_iscsi::scsi::ScsiError::to_errno`], e.g. `ENOSPC` for a full thin
    /// pool), `EIO` for a lost connection or anything else.
    pub fn to_errno(&self) -> i32 {
        match self {
            DeviceError::ReadOnly { .. } => errno::EROFS,
            DeviceError::OutOfRange { .. } | DeviceError::Config(_) => errno::EINVAL,
            DeviceError::Io { source, .. } => source.to_errno(),
            DeviceError::NoRuntime | DeviceError::Closed { .. } => errno::EIO,
        }
    }
}

/// A snapshot of the device's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Page lookups served from the cache.
    pub hits: u64,
    /// Page lookups that had to wait for the target (not read-ahead).
    pub misses: u64,
    /// Pages first used after read-ahead brought (or was bringing) them in.
    pub readahead_hits: u64,
    /// Pages read ahead.
    pub readahead_pages: u64,
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
    /// `flush` calls (each ends with SYNCHRONIZE CACHE).
    pub flushes: u64,
    /// WRITE commands carrying write-back data.
    pub writebacks: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_commands: u64,
    pub write_commands: u64,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    readahead_hits: AtomicU64,
    readahead_pages: AtomicU64,
    bypassed_reads: AtomicU64,
    flushes: AtomicU64,
    writebacks: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    read_commands: AtomicU64,
    write_commands: AtomicU64,
    dirty_blocks: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Sizes derived from the backend and the configuration.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    bs: u64,
    blocks: u64,
    size: u64,
    page: u64,
    /// Blocks per page.
    bpp: u64,
    max_xfer_blocks: u64,
    /// Pages per fetch command.
    fetch_pages: u64,
    /// Blocks per write-back run.
    wb_blocks: u64,
    /// Pages one request pins at a time.
    chunk_pages: u64,
}

impl Geometry {
    /// Blocks that exist in page `idx` (the last page may be partial).
    fn page_blocks(&self, idx: u64) -> u64 {
        self.blocks.saturating_sub(idx * self.bpp).min(self.bpp)
    }
}

/// Largest single fetch command.
const MAX_FETCH_BYTES: u64 = 1 << 20;

type BResult<T> = Result<T, Arc<BackendError>>;

#[derive(Debug, Default)]
struct Signals {
    kick: Notify,
    shutdown: AtomicBool,
}

struct Inner<B> {
    backend: B,
    geo: Geometry,
    cfg: DeviceConfig,
    cache: Arc<Cache>,
    budget: CacheBudget,
    locks: Arc<RangeLock>,
    io: Arc<Semaphore>,
    streams: Mutex<Streams>,
    c: Counters,
    signals: Arc<Signals>,
    /// Dirty bytes (of every device of the budget) above which the
    /// flushers write regardless of age.
    dirty_background: u64,
    wb_failures: AtomicU64,
    last_wb_error: Mutex<Option<Arc<BackendError>>>,
}

/// Fetch of a run of consecutive pages by one READ.
struct Run {
    first: u64,
    pages: Vec<Pinned>,
    tx: watch::Sender<FetchState>,
    readahead: bool,
}

impl Run {
    fn new(first: u64, readahead: bool) -> Run {
        Run {
            first,
            pages: Vec::new(),
            tx: watch::Sender::new(None),
            readahead,
        }
    }
    fn next_idx(&self) -> u64 {
        self.first + self.pages.len() as u64
    }
}

/// Poll every future until all are done; outputs in input order.
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// `(lba, blocks)` pieces of `start..end` of at most `max` blocks.
fn split(start: u64, end: u64, max: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut a = start;
    while a < end {
        let n = (end - a).min(max);
        v.push((a, n));
        a += n;
    }
    v
}

/// Run `fut` as its own task, so that a caller dropping its future cannot
/// cut a write off between taking its locks and finishing its bookkeeping.
async fn detached<T: Send + 'static>(
    op: Op,
    fut: impl Future<Output = Result<T, DeviceError>> + Send + 'static,
) -> Result<T, DeviceError> {
    match tokio::spawn(fut).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(DeviceError::Closed { op }),
    }
}

/// See the module docs.
pub struct LunDevice<B: BlockBackend> {
    inner: Arc<Inner<B>>,
}

impl<B: BlockBackend> Drop for LunDevice<B> {
    fn drop(&mut self) {
        self.inner.signals.shutdown.store(true, Ordering::Release);
        self.inner.signals.kick.notify_one();
    }
}

impl<B: BlockBackend> LunDevice<B> {
    /// Wrap `backend`. Must be called inside a Tokio runtime: write-back and
    /// the statistics log run as background tasks.
    pub fn new(backend: B, cfg: DeviceConfig) -> Result<LunDevice<B>, DeviceError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| DeviceError::NoRuntime)?;
        let bad = |m: String| Err(DeviceError::Config(m));
        let bs = backend.block_size() as u64;
        if bs == 0 || !bs.is_power_of_two() {
            return bad(format!("block size {bs} is not a power of two"));
        }
        let blocks = backend.blocks();
        let Some(size) = blocks.checked_mul(bs) else {
            return bad(format!("{blocks} blocks of {bs} bytes overflow"));
        };
        let max_xfer_blocks = (backend.max_transfer_bytes() / bs).max(1);
        let page = match cfg.page_size {
            Some(p) => p as u64,
            None => {
                let mut p = bs.max(4096);
                let g = backend.optimal_granularity_bytes();
                if g.is_power_of_two() && g.is_multiple_of(bs) && g <= 64 << 10 {
                    p = p.max(g);
                }
                p.min(bs * 128)
            }
        };
        if !page.is_power_of_two() || page % bs != 0 || page / bs > 128 {
            return bad(format!(
                "page size {page} must be a power of two, a multiple of the {bs}-byte block and at most 128 blocks"
            ));
        }
        let bpp = page / bs;
        if page > rlun_iscsi::iobuf::ARENA_LEN as u64 {
            return bad(format!("page size {page} is larger than 4 MiB"));
        }
        let budget = match &cfg.budget {
            Some(b) if cfg.mode != CacheMode::None => b.clone(),
            _ => CacheBudget::new(cfg.cache_size),
        };
        let (io_reserve, io) = if cfg.mode == CacheMode::None {
            (page * 2, Arc::new(Semaphore::new((page * 2) as usize)))
        } else {
            let b = &budget.inner;
            let min = 4 * (page + cache::PAGE_OVERHEAD);
            if b.pages < min || b.io_reserve < 2 * page {
                return bad(format!(
                    "cache size {} is too small for {page}-byte pages (at least {})",
                    budget.size(),
                    8 * min
                ));
            }
            (b.io_reserve / bs * bs, b.io.clone())
        };
        if cfg.readahead_min == 0 || cfg.readahead_max < cfg.readahead_min {
            return bad("read-ahead window sizes must satisfy 0 < min <= max".into());
        }
        let fetch_pages = (MAX_FETCH_BYTES.min(io_reserve / 2) / page).max(1);
        let wb_blocks = ((max_xfer_blocks * bs).min(io_reserve / 2) / bs).max(bpp);
        let geo = Geometry {
            bs,
            blocks,
            size,
            page,
            bpp,
            max_xfer_blocks,
            fetch_pages,
            wb_blocks,
            chunk_pages: fetch_pages * 4,
        };
        let inner = Arc::new(Inner {
            geo,
            cache: if cfg.mode == CacheMode::None {
                Cache::new(page as usize, CacheBudget::new(0).inner)
            } else {
                Cache::new(page as usize, budget.inner.clone())
            },
            dirty_background: budget.inner.pages / 2,
            budget,
            locks: RangeLock::new(),
            io,
            streams: Mutex::new(Streams::new(cfg.readahead_min, cfg.readahead_max, size)),
            c: Counters::default(),
            signals: Arc::new(Signals::default()),
            wb_failures: AtomicU64::new(0),
            last_wb_error: Mutex::new(None),
            cfg,
            backend,
        });
        debug!(
            mode = %inner.cfg.mode,
            page_size = page,
            cache_size = inner.budget.size(),
            page_budget = inner.budget.inner.pages,
            io_reserve,
            "LunDevice ready"
        );
        if inner.cfg.mode == CacheMode::WriteBack {
            handle.spawn(flusher(Arc::downgrade(&inner), inner.signals.clone()));
        }
        if let Some(every) = inner.cfg.stats_interval {
            handle.spawn(stats_logger(Arc::downgrade(&inner), every));
        }
        Ok(LunDevice { inner })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.geo.size
    }
    pub fn block_size(&self) -> u32 {
        self.inner.geo.bs as u32
    }
    pub fn page_size(&self) -> u32 {
        self.inner.geo.page as u32
    }
    pub fn read_only(&self) -> bool {
        self.inner.backend.read_only()
    }
    pub fn mode(&self) -> CacheMode {
        self.inner.cfg.mode
    }
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Drop every clean page not in use; returns how many.
    pub fn drop_clean_pages(&self) -> u64 {
        self.inner.cache.drop_clean()
    }

    fn check(&self, op: Op, offset: u64, len: u64) -> Result<(), DeviceError> {
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(DeviceError::OutOfRange {
                op,
                offset,
                len,
                size: self.size(),
            });
        }
        if op != Op::Read && op != Op::Flush && self.read_only() {
            return Err(DeviceError::ReadOnly { op, offset, len });
        }
        Ok(())
    }

    /// Read `len` bytes at `offset`.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<Bytes, DeviceError> {
        match self.read_now(offset, len) {
            ReadNow::Done(r) => r,
            ReadNow::Wait(w) => self.read_wait(w).await,
        }
    }

    /// Start a read of `len` bytes at `offset` without waiting: its result
    /// when it needs no waiting — an error found up front, an empty read,
    /// or a read every page of which is resident and valid (a cache hit,
    /// copied out right here) — else a [`PendingRead`] to finish with
    /// [`LunDevice::read_wait`]. A hit this way costs no future, task or
    /// page-list allocation; what it returns, and the read-ahead and
    /// counters it drives, are exactly those of [`LunDevice::read_at`].
    pub fn read_now(&self, offset: u64, len: usize) -> ReadNow {
        if let Err(e) = self.check(Op::Read, offset, len as u64) {
            return ReadNow::Done(Err(e));
        }
        if len == 0 {
            return ReadNow::Done(Ok(Bytes::new()));
        }
        let mut w = PendingRead {
            offset,
            len,
            advice: None,
        };
        // Large reads take a stream ticket (returned when they end) and
        // may bypass the cache: they go the waiting way whole.
        if self.mode() == CacheMode::None
            || (self.inner.cfg.bypass_min > 0 && len as u64 >= self.inner.cfg.bypass_min)
        {
            return ReadNow::Wait(w);
        }
        let advice = self.inner.advise(offset, len as u64);
        debug_assert!(advice.ticket.is_none() && !advice.bypass);
        if let Some((a, b)) = advice.ahead {
            self.inner.readahead(a, b);
        }
        w.advice = Some(advice);
        match self.inner.read_hit(offset, len) {
            Some(data) => ReadNow::Done(Ok(data)),
            None => ReadNow::Wait(w),
        }
    }

    /// Finish a read [`LunDevice::read_now`] could not complete at once.
    pub async fn read_wait(&self, w: PendingRead) -> Result<Bytes, DeviceError> {
        let PendingRead {
            offset,
            len,
            advice,
        } = w;
        let ctx = |source| DeviceError::Io {
            op: Op::Read,
            offset,
            len: len as u64,
            source,
        };
        if self.mode() == CacheMode::None {
            return self.inner.read_direct(offset, len).await.map_err(ctx);
        }
        // Advised (and its read-ahead started) by read_now already: the
        // stream table must see each read once.
        if advice.is_some() {
            return self.inner.read_cached(offset, len).await.map_err(ctx);
        }
        let advice = self.inner.advise(offset, len as u64);
        // Counted as in flight on its stream until it completes or is dropped.
        let _in_flight = advice.ticket.map(|t| InFlight(&self.inner.streams, t));
        if advice.bypass {
            let ps = self.inner.geo.page;
            let (first, last) = (offset / ps, (offset + len as u64).div_ceil(ps));
            if !self.inner.cache.any_present(first, last) {
                add(&self.inner.c.bypassed_reads, 1);
                return self.inner.read_direct(offset, len).await.map_err(ctx);
            }
        }
        if let Some((a, b)) = advice.ahead {
            self.inner.readahead(a, b);
        }
        self.inner.read_cached(offset, len).await.map_err(ctx)
    }

    /// Write `data` at `offset`; completes per the cache mode.
    pub async fn write_at(&self, offset: u64, data: Bytes) -> Result<(), DeviceError> {
        self.write(offset, data, false).await
    }

    /// Write `data` at `offset` with Force Unit Access: it is on durable
    /// media of the target when this completes, in every mode.
    pub async fn write_at_fua(&self, offset: u64, data: Bytes) -> Result<(), DeviceError> {
        self.write(offset, data, true).await
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        let len = data.len() as u64;
        self.check(Op::Write, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let inner = self.inner.clone();
        detached(Op::Write, async move {
            inner
                .write(offset, data, fua)
                .await
                .map_err(|source| DeviceError::Io {
                    op: Op::Write,
                    offset,
                    len,
                    source,
                })
        })
        .await
    }

    /// Write every dirty page to the target, then SYNCHRONIZE CACHE.
    pub async fn flush(&self) -> Result<(), DeviceError> {
        let inner = self.inner.clone();
        detached(Op::Flush, async move {
            inner.flush().await.map_err(|source| DeviceError::Io {
                op: Op::Flush,
                offset: 0,
                len: inner.geo.size,
                source,
            })
        })
        .await
    }

    /// Tell the target the bytes are no longer needed (UNMAP of the whole
    /// blocks inside the range; partial blocks at its ends are left alone).
    /// Their contents afterwards are what the target returns.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.check(Op::Discard, offset, len)?;
        let bs = self.inner.geo.bs;
        let (b0, b1) = (offset.div_ceil(bs), (offset + len) / bs);
        if b0 >= b1 {
            return Ok(());
        }
        let inner = self.inner.clone();
        detached(Op::Discard, async move {
            inner
                .discard(b0, b1)
                .await
                .map_err(|source| DeviceError::Io {
                    op: Op::Discard,
                    offset,
                    len,
                    source,
                })
        })
        .await
    }

    /// Make `len` bytes at `offset` read as zeros (WRITE SAME for whole
    /// blocks, falling back to writing zeros if the target lacks it).
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.check(Op::WriteZeroes, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let inner = self.inner.clone();
        detached(Op::WriteZeroes, async move {
            inner
                .write_zeroes(offset, len)
                .await
                .map_err(|source| DeviceError::Io {
                    op: Op::WriteZeroes,
                    offset,
                    len,
                    source,
                })
        })
        .await
    }

    /// Flush and stop the background tasks.
    pub async fn close(self) -> Result<(), DeviceError> {
        self.flush().await
        // Drop stops the flusher.
    }
}

impl<B: BlockBackend> Inner<B> {
    fn stats(&self) -> Stats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            hits: l(&self.c.hits),
            misses: l(&self.c.misses),
            readahead_hits: l(&self.c.readahead_hits),
            readahead_pages: l(&self.c.readahead_pages),
            bypassed_reads: l(&self.c.bypassed_reads),
            evictions: l(&self.cache.evictions),
            cached_bytes: self.cache.charged(),
            cache_size: if self.cfg.mode == CacheMode::None {
                0
            } else {
                self.budget.size()
            },
            dirty_bytes: l(&self.c.dirty_blocks) * self.geo.bs,
            flushes: l(&self.c.flushes),
            writebacks: l(&self.c.writebacks),
            bytes_read: l(&self.c.bytes_read),
            bytes_written: l(&self.c.bytes_written),
            read_commands: l(&self.c.read_commands),
            write_commands: l(&self.c.write_commands),
        }
    }

    fn cached(&self) -> bool {
        self.cfg.mode != CacheMode::None
    }

    fn dirty_add(&self, blocks: u64) {
        add(&self.c.dirty_blocks, blocks);
        add(&self.budget.inner.dirty, blocks * self.geo.bs);
    }

    fn dirty_sub(&self, blocks: u64) {
        self.c.dirty_blocks.fetch_sub(blocks, Ordering::Relaxed);
        self.budget
            .inner
            .dirty
            .fetch_sub(blocks * self.geo.bs, Ordering::Relaxed);
    }

    /// Dirty bytes of every device of the budget.
    fn budget_dirty(&self) -> u64 {
        self.budget.inner.dirty.load(Ordering::Relaxed)
    }

    // ---- commands to the backend ------------------------------------------

    /// READ blocks `b0..b1`, split by the maximum transfer, concurrently.
    async fn read_blocks(&self, b0: u64, b1: u64) -> BResult<Bytes> {
        let pieces = split(b0, b1, self.geo.max_xfer_blocks);
        add(&self.c.read_commands, pieces.len() as u64);
        add(&self.c.bytes_read, (b1 - b0) * self.geo.bs);
        let want = ((b1 - b0) * self.geo.bs) as usize;
        let results = join_all(
            pieces
                .iter()
                .map(|&(lba, n)| self.backend.read_blocks(lba, n as u32))
                .collect(),
        )
        .await;
        let mut parts = Vec::with_capacity(results.len());
        for r in results {
            parts.push(r.map_err(Arc::new)?);
        }
        let out = if parts.len() == 1 {
            parts.pop().unwrap_or_default()
        } else {
            let mut v = Vec::with_capacity(want);
            for p in &parts {
                v.extend_from_slice(p);
            }
            Bytes::from(v)
        };
        if out.len() != want {
            return Err(Arc::new(BackendError::Lun(
                crate::client::ClientError::ShortTransfer {
                    op: "READ",
                    got: out.len(),
                    expected: want,
                },
            )));
        }
        Ok(out)
    }

    /// WRITE `data` (whole blocks) at `lba`, split, concurrently.
    async fn write_blocks(&self, lba: u64, data: Bytes, fua: bool) -> BResult<()> {
        let bs = self.geo.bs;
        let blocks = data.len() as u64 / bs;
        let pieces = split(lba, lba + blocks, self.geo.max_xfer_blocks);
        add(&self.c.write_commands, pieces.len() as u64);
        add(&self.c.bytes_written, data.len() as u64);
        let results = join_all(
            pieces
                .iter()
                .map(|&(a, n)| {
                    let from = ((a - lba) * bs) as usize;
                    let part = data.slice(from..from + (n * bs) as usize);
                    self.backend.write_blocks(a, part, fua)
                })
                .collect(),
        )
        .await;
        for r in results {
            r.map_err(Arc::new)?;
        }
        Ok(())
    }

    async fn read_direct(&self, offset: u64, len: usize) -> BResult<Bytes> {
        let bs = self.geo.bs;
        let end = offset + len as u64;
        let b0 = offset / bs;
        let data = self.read_blocks(b0, end.div_ceil(bs)).await?;
        let skip = (offset - b0 * bs) as usize;
        Ok(data.slice(skip..skip + len))
    }

    // ---- the read path ----------------------------------------------------

    /// What the stream table advises for a cached read (see `readahead`):
    /// a window to read ahead (only with read-ahead on), whether to bypass
    /// the cache, and for a bypass-sized read its ticket.
    fn advise(&self, offset: u64, len: u64) -> Advice {
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
    fn readahead(self: &Arc<Self>, a: u64, b: u64) {
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
                    if !r.pages.is_empty() {
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
    async fn fetch(self: Arc<Self>, run: Run) -> Option<Bytes> {
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

    async fn pin_one(&self, idx: u64) -> BResult<Pinned> {
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
    fn read_hit(&self, offset: u64, len: usize) -> Option<Bytes> {
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

    async fn read_cached(self: &Arc<Self>, offset: u64, len: usize) -> BResult<Bytes> {
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
        out: &mut bytes::BytesMut,
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

    // ---- the write paths --------------------------------------------------

    async fn write(self: &Arc<Self>, offset: u64, data: Bytes, fua: bool) -> BResult<()> {
        match self.cfg.mode {
            CacheMode::WriteBack => {
                let len = data.len() as u64;
                self.write_cache(offset, data).await?;
                if fua {
                    let bs = self.geo.bs;
                    self.write_back_fua(offset / bs, (offset + len).div_ceil(bs))
                        .await?;
                } else if self.budget_dirty() > self.dirty_background {
                    self.signals.kick.notify_one();
                }
                Ok(())
            }
            CacheMode::WriteThrough | CacheMode::None => {
                self.write_through(offset, data, fua).await
            }
        }
    }

    /// The current content of block `b` for a read-modify-write, from the
    /// cache when valid there, else from the target. Called with `b` locked
    /// exclusively, so it must not wait for a fetch.
    async fn block_for_rmw(&self, b: u64) -> BResult<Bytes> {
        let g = self.geo;
        if self.cached() {
            let idx = b / g.bpp;
            if let Some(p) = self.cache.present(idx, idx + 1).pop() {
                let s = p.lock();
                let bit = b - idx * g.bpp;
                if s.valid & bits(bit, bit + 1) != 0 {
                    let at = (bit * g.bs) as usize;
                    crate::stats::add_cache_copied(g.bs);
                    return Ok(Bytes::copy_from_slice(&s.buf[at..at + g.bs as usize]));
                }
            }
        }
        self.read_blocks(b, b + 1).await
    }

    /// `none` and `write-through`: WRITE now (read-modify-write for partial
    /// blocks) under an exclusive lock, then update resident pages.
    async fn write_through(&self, offset: u64, data: Bytes, fua: bool) -> BResult<()> {
        let g = self.geo;
        let len = data.len() as u64;
        let end = offset + len;
        let (b0, b1) = (offset / g.bs, end.div_ceil(g.bs));
        let _excl = self.locks.acquire(b0, b1, true).await;
        let head = (offset % g.bs) as usize;
        let buf = if head == 0 && end.is_multiple_of(g.bs) {
            data
        } else {
            let bs = g.bs as usize;
            let mut v = IoBuf::with_len(((b1 - b0) * g.bs) as usize);
            if head != 0 {
                v[..bs].copy_from_slice(&self.block_for_rmw(b0).await?);
            }
            // The last block is partial, and is not the first block already read.
            let last_already_read = b1 - 1 == b0 && head != 0;
            if !end.is_multiple_of(g.bs) && !last_already_read {
                let at = v.len() - bs;
                v[at..].copy_from_slice(&self.block_for_rmw(b1 - 1).await?);
            }
            v[head..head + data.len()].copy_from_slice(&data);
            v.into_bytes()
        };
        self.write_blocks(b0, buf.clone(), fua).await?;
        if self.cached() {
            for p in self.cache.present(b0 / g.bpp, b1.div_ceil(g.bpp)) {
                let first = p.idx * g.bpp;
                let (lo, hi) = (b0.max(first), b1.min(first + g.page_blocks(p.idx)));
                let mut s = p.lock();
                let (x, y) = (
                    ((lo - first) * g.bs) as usize,
                    ((hi - first) * g.bs) as usize,
                );
                let from = ((lo - b0) * g.bs) as usize;
                s.buf[x..y].copy_from_slice(&buf[from..from + (y - x)]);
                crate::stats::add_cache_copied((y - x) as u64);
                s.valid |= bits(lo - first, hi - first);
            }
        }
        Ok(())
    }

    /// `write-back`: copy into pages (fetching a partially written block
    /// first if it is not valid) and mark the blocks dirty.
    async fn write_cache(self: &Arc<Self>, offset: u64, data: Bytes) -> BResult<()> {
        let g = self.geo;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let idx = pos / g.page;
            let pstart = idx * g.page;
            let (a, b) = (pos - pstart, end.min(pstart + g.page) - pstart);
            let (fb, lb) = (a / g.bs, b.div_ceil(g.bs));
            let mask = bits(fb, lb);
            let mut need = 0;
            if a % g.bs != 0 {
                need |= bits(fb, fb + 1);
            }
            if b % g.bs != 0 {
                need |= bits(lb - 1, lb);
            }
            let p = self.pin_one(idx).await?;
            loop {
                let mut rx = {
                    let mut s = p.lock();
                    if s.valid & need == need {
                        let src =
                            &data[(pstart + a - offset) as usize..(pstart + b - offset) as usize];
                        s.buf[a as usize..b as usize].copy_from_slice(src);
                        crate::stats::add_cache_copied(b - a);
                        s.valid |= mask;
                        let newly = mask & !s.dirty;
                        s.dirty |= mask;
                        self.dirty_add(newly.count_ones() as u64);
                        s.dirty_since.get_or_insert_with(Instant::now);
                        let listed = s.in_dirty;
                        drop(s);
                        if !listed {
                            self.cache.mark_dirty(&p);
                        }
                        break;
                    }
                    match s.live_loading() {
                        Some(rx) => rx,
                        None => {
                            let mut run = Run::new(idx, false);
                            let rx = run.tx.subscribe();
                            s.loading = Some(run.tx.subscribe());
                            run.pages.push(p.clone());
                            add(&self.c.misses, 1);
                            tokio::spawn(self.clone().fetch(run));
                            rx
                        }
                    }
                };
                let failed = match rx.wait_for(|v| v.is_some()).await {
                    Ok(v) => v.as_ref().and_then(|r| r.as_ref().err().cloned()),
                    Err(_) => None,
                };
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            pos = pstart + b;
        }
        Ok(())
    }

    /// FUA in write-back: write blocks `b0..b1` (just written into the
    /// cache) with FUA. Blocks no longer resident were written back by the
    /// flusher meanwhile, without FUA: SYNCHRONIZE CACHE covers them.
    async fn write_back_fua(self: &Arc<Self>, b0: u64, b1: u64) -> BResult<()> {
        let mut missing = false;
        for (a, n) in split(b0, b1, self.geo.wb_blocks) {
            missing |= self.write_back_run(a, a + n, true).await?;
        }
        if missing {
            self.backend.flush().await.map_err(Arc::new)?;
        }
        Ok(())
    }

    /// Write back blocks `b0..b1` under an exclusive lock: the dirty ones,
    /// or (`fua`) every valid one, with FUA. Returns whether some block was
    /// not resident (only meaningful with `fua`). On failure the blocks stay
    /// dirty.
    async fn write_back_run(&self, b0: u64, b1: u64, fua: bool) -> BResult<bool> {
        let g = self.geo;
        let _permits = self
            .io
            .clone()
            .acquire_many_owned(((b1 - b0) * g.bs) as u32)
            .await
            .ok();
        let _excl = self.locks.acquire(b0, b1, true).await;
        let pages = self.cache.present(b0 / g.bpp, b1.div_ceil(g.bpp));
        // Pass 1: choose the blocks and mark them as being written back.
        let mut taken = Vec::with_capacity(pages.len());
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut missing = false;
        let mut next = b0;
        for p in &pages {
            let first = p.idx * g.bpp;
            let (lo, hi) = (b0.max(first), b1.min(first + g.page_blocks(p.idx)));
            missing |= lo > next;
            next = hi;
            let mut s = p.lock();
            let cand = bits(lo - first, hi - first);
            let sel = if fua { s.valid & cand } else { s.dirty & cand };
            missing |= fua && sel != cand;
            for_each_run(sel, |x, y| match spans.last_mut() {
                Some((_, end)) if *end == first + x => *end = first + y,
                _ => spans.push((first + x, first + y)),
            });
            let cleaned = s.dirty & sel;
            s.dirty &= !sel;
            s.wb |= sel;
            self.dirty_sub(cleaned.count_ones() as u64);
            taken.push((sel, cleaned));
        }
        missing |= next < b1;
        // Pass 2: copy them into buffers of exactly the right size. Nothing
        // can invalidate them meanwhile (the range is locked); a writer may
        // change one again, which re-dirties it for a later write-back.
        // From the registered I/O pool over iSER (`rlun_iscsi::iobuf`), so the
        // target reads them without a registration per command.
        let mut runs: Vec<(u64, IoBuf, usize)> = spans
            .iter()
            .map(|&(a, b)| (a, IoBuf::with_len(((b - a) * g.bs) as usize), 0))
            .collect();
        let mut r = 0;
        for (p, &(sel, _)) in pages.iter().zip(&taken) {
            let first = p.idx * g.bpp;
            let s = p.lock();
            for_each_run(sel, |x, y| {
                while runs[r].0 + runs[r].2 as u64 / g.bs != first + x {
                    r += 1;
                }
                let (_, buf, filled) = &mut runs[r];
                let n = ((y - x) * g.bs) as usize;
                buf[*filled..*filled + n]
                    .copy_from_slice(&s.buf[(x * g.bs) as usize..(y * g.bs) as usize]);
                *filled += n;
                crate::stats::add_cache_copied(n as u64);
            });
        }
        if runs.is_empty() {
            return Ok(missing);
        }
        add(&self.c.writebacks, runs.len() as u64);
        let results = join_all(
            runs.into_iter()
                .map(|(lba, buf, _)| self.write_blocks(lba, buf.into_bytes(), fua))
                .collect(),
        )
        .await;
        let failed = results.into_iter().find_map(Result::err);
        for (p, (sel, cleaned)) in pages.iter().zip(taken) {
            let mut s = p.lock();
            s.wb &= !sel;
            if failed.is_some() {
                let back = cleaned & !s.dirty;
                s.dirty |= cleaned;
                self.dirty_add(back.count_ones() as u64);
                if s.dirty != 0 {
                    s.dirty_since.get_or_insert_with(Instant::now);
                }
            }
        }
        self.cache.settle(&pages);
        match failed {
            Some(e) => {
                *self.last_wb_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                self.wb_failures.fetch_add(1, Ordering::AcqRel);
                Err(e)
            }
            None => Ok(missing),
        }
    }

    /// Block ranges to write back: runs of consecutive dirty blocks (up to
    /// the write-back size) containing at least one page older than the
    /// delay, or all of them when `force`.
    fn collect_runs(&self, force: bool, include_wb: bool) -> Vec<(u64, u64)> {
        let g = self.geo;
        let now = Instant::now();
        let mut runs = Vec::new();
        let mut cur: Option<(u64, u64, bool)> = None;
        for (idx, mask, since) in self.cache.dirty_masks(include_wb) {
            let expired =
                force || since.is_some_and(|t| now.duration_since(t) >= self.cfg.writeback_delay);
            for_each_run(mask, |x, y| {
                let (s, e) = (idx * g.bpp + x, idx * g.bpp + y);
                match cur {
                    Some((cs, ce, ex)) if ce == s && e - cs <= g.wb_blocks => {
                        cur = Some((cs, e, ex || expired))
                    }
                    _ => {
                        if let Some((cs, ce, true)) = cur {
                            runs.push((cs, ce));
                        }
                        cur = Some((s, e, expired));
                    }
                }
            });
        }
        if let Some((cs, ce, true)) = cur {
            runs.push((cs, ce));
        }
        runs
    }

    /// Write back `runs`, `writeback_depth` at a time, each in its own task.
    async fn write_runs(self: &Arc<Self>, runs: Vec<(u64, u64)>) -> BResult<()> {
        let depth = Arc::new(Semaphore::new(self.cfg.writeback_depth.max(1)));
        let tasks: Vec<_> = runs
            .into_iter()
            .map(|(a, b)| {
                let inner = self.clone();
                let depth = depth.clone();
                tokio::spawn(async move {
                    let _slot = depth.acquire_owned().await.ok();
                    inner.write_back_run(a, b, false).await
                })
            })
            .collect();
        let mut first = None;
        for t in tasks {
            match t.await {
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                _ => {}
            }
        }
        first.map_or(Ok(()), Err)
    }

    async fn flush(self: &Arc<Self>) -> BResult<()> {
        if self.cfg.mode == CacheMode::WriteBack {
            let runs = self.collect_runs(true, true);
            self.write_runs(runs).await?;
        }
        add(&self.c.flushes, 1);
        self.backend.flush().await.map_err(Arc::new)
    }

    // ---- discard and write zeroes -----------------------------------------

    /// Drop blocks `b0..b1` from the cache (dirty data included). Called
    /// with the range locked exclusively.
    fn invalidate(&self, b0: u64, b1: u64) {
        if !self.cached() {
            return;
        }
        let g = self.geo;
        let pages = self.cache.present(b0 / g.bpp, b1.div_ceil(g.bpp));
        for p in &pages {
            let first = p.idx * g.bpp;
            let m = bits(b0.max(first) - first, b1.min(first + g.bpp) - first);
            let mut s = p.lock();
            self.dirty_sub((s.dirty & m).count_ones() as u64);
            s.valid &= !m;
            s.dirty &= !m;
        }
        self.cache.settle(&pages);
        let idxs: Vec<u64> = pages.iter().map(|p| p.idx).collect();
        drop(pages);
        for idx in idxs {
            self.cache.remove_if_empty(idx);
        }
    }

    async fn discard(&self, b0: u64, b1: u64) -> BResult<()> {
        let _excl = self.locks.acquire(b0, b1, true).await;
        self.invalidate(b0, b1);
        self.backend.unmap(b0, b1 - b0).await.map_err(Arc::new)
    }

    async fn write_zeroes(self: &Arc<Self>, offset: u64, len: u64) -> BResult<()> {
        let bs = self.geo.bs;
        let end = offset + len;
        let (b0, b1) = (offset.div_ceil(bs), end / bs);
        if b0 >= b1 {
            return self
                .write(offset, Bytes::from(vec![0u8; len as usize]), false)
                .await;
        }
        if offset < b0 * bs {
            let n = (b0 * bs - offset) as usize;
            self.write(offset, Bytes::from(vec![0u8; n]), false).await?;
        }
        if b1 * bs < end {
            let n = (end - b1 * bs) as usize;
            self.write(b1 * bs, Bytes::from(vec![0u8; n]), false)
                .await?;
        }
        let _excl = self.locks.acquire(b0, b1, true).await;
        self.invalidate(b0, b1);
        match self.backend.write_zeroes(b0, b1 - b0, false).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_unsupported() => {
                debug!(error = %e, "WRITE SAME refused; writing zero buffers instead");
                let chunk = self.geo.max_xfer_blocks.min(MAX_FETCH_BYTES / bs).max(1);
                let zeros = Bytes::from(vec![0u8; (chunk * bs) as usize]);
                for (lba, n) in split(b0, b1, chunk) {
                    self.write_blocks(lba, zeros.slice(..(n * bs) as usize), false)
                        .await?;
                }
                Ok(())
            }
            Err(e) => Err(Arc::new(e)),
        }
    }
}

/// The background write-back task (write-back mode only). Holds only a weak
/// reference, so it ends when the device is dropped.
async fn flusher<B: BlockBackend>(weak: Weak<Inner<B>>, signals: Arc<Signals>) {
    let tick = match weak.upgrade() {
        Some(i) => {
            (i.cfg.writeback_delay / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
        }
        None => return,
    };
    let mut backoff = Duration::ZERO;
    let budget = match weak.upgrade() {
        Some(i) => i.budget.clone(),
        None => return,
    };
    loop {
        tokio::select! {
            _ = signals.kick.notified() => {}
            _ = budget.inner.kick.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        if signals.shutdown.load(Ordering::Acquire) {
            break;
        }
        if !backoff.is_zero() {
            tokio::time::sleep(backoff).await;
        }
        let Some(inner) = weak.upgrade() else { break };
        let pressure = inner.budget_dirty() > inner.dirty_background
            || inner.budget.inner.mem_waiters.load(Ordering::Acquire) > 0;
        let runs = inner.collect_runs(pressure, false);
        if runs.is_empty() {
            continue;
        }
        match inner.write_runs(runs).await {
            Ok(()) => backoff = Duration::ZERO,
            Err(e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(5));
                warn!(error = %e, retry_in = ?backoff, "write-back failed; the data stays dirty and will be retried");
            }
        }
    }
}

async fn stats_logger<B: BlockBackend>(weak: Weak<Inner<B>>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = weak.upgrade() else { break };
        let s = inner.stats();
        let d = crate::stats::DataPathStats::now();
        info!(
            hits = s.hits,
            misses = s.misses,
            readahead_hits = s.readahead_hits,
            bypassed_reads = s.bypassed_reads,
            evictions = s.evictions,
            cached_bytes = s.cached_bytes,
            dirty_bytes = s.dirty_bytes,
            flushes = s.flushes,
            bytes_read = s.bytes_read,
            bytes_written = s.bytes_written,
            copied_bytes = d.copied_bytes,
            cache_copied_bytes = d.cache_copied_bytes,
            data_path_registrations = d.data_path_registrations,
            "cache"
        );
    }
}
