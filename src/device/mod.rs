//! `LunDevice`: byte-addressed, concurrent, cached async I/O on a block
//! device — the layer the export layer, and through it the FUSE and NBD
//! front ends, stand on.
//!
//! [`LunDevice`] turns `read_at(offset, len)`, `write_at(offset, data)`,
//! `flush`, `discard` and `write_zeroes` on arbitrary byte ranges into SCSI
//! block commands on a [`BlockBackend`]: a remote LUN (the trait is
//! implemented for the client's `Lun` in the `remote` module, the layer
//! above this one: the device layer names no client or session type), or
//! [`MemBackend`] in tests. A backend reports its own failures as a
//! [`CommandFailure`] that already says which errno they mean and whether
//! the command is unsupported.
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
//! When write-back fails, the data stays dirty and is retried (back-off up
//! to 5 s), without limit: a target unreachable past the session's
//! replacement timeout fails the I/O waiting for it, but the session keeps
//! logging in again on its back-off, so held data reaches a target that
//! comes back, with no `flush` needed. `flush` reports the failure (an
//! fsync gets EIO) and leaves the data dirty. Memory stays bounded
//! meanwhile: held dirty pages keep their place in the budget, and a
//! request that needs a page when none can be freed fails with the
//! write-back's error as soon as a retry fails, rather than waiting for the
//! target. The last word on data still dirty when a device is stopped is
//! the export layer's final write-back (`ExportSet::finish`), which tries a
//! fresh login before it declares the data lost.
//!
//! `discard` and `write_zeroes` keep the cache coherent: the affected
//! blocks are dropped from the cache (dirty data in them too) before the
//! command is sent, under the same exclusive range lock as a write.
//!
//! **Locking.** No lock is held across network I/O except the block range
//! lock (shared for cache fills, exclusive for writes), which serializes
//! only conflicting commands on the same blocks. The page table and each
//! page have std mutexes held for a lookup or a memcpy.
//!
//! # Files
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`LunDevice`], the public API: checks, the cache-hit fast path ([`LunDevice::read_now`]), the streaming bypass decision, detached writes |
//! | `inner.rs` | the state a device shares with its requests and tasks, its set-up from backend and settings, the commands to the backend, the statistics log |
//! | `read.rs` | cache hits (reply buffers from a per-thread arena), fills with single flight, read-ahead, waiting for memory |
//! | `write.rs` | write-through and write into the cache, discard, write zeroes |
//! | `writeback.rs` | the flusher and its WRITEs |
//! | `cache.rs` | page table, LRU, per-page block bitmaps |
//! | `budget.rs` | [`CacheBudget`]: the process's cache memory and how devices share it |
//! | `readahead.rs` | the stream table: read-ahead windows, large reads in flight |
//! | `rangelock.rs` | block range locks |
//! | `backend.rs` | [`BlockBackend`], [`LunBackend`], [`BackendError`] |
//! | `config.rs`, `error.rs`, `counters.rs` | [`DeviceConfig`] and [`CacheMode`], [`DeviceError`], [`Stats`] |
//! | `mem.rs` | [`MemBackend`], the in-memory backend of the tests |

mod backend;
mod budget;
mod cache;
mod config;
mod counters;
mod error;
mod inner;
mod mem;
mod rangelock;
mod read;
mod readahead;
#[cfg(test)]
mod tests;
mod write;
mod writeback;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;

pub use backend::{BackendError, BlockBackend, CommandFailure, LunBackend};
pub use budget::CacheBudget;
pub use config::{CacheMode, DeviceConfig};
pub use counters::Stats;
pub use error::{DeviceError, Op};
pub use mem::{MemBackend, MemCommand, MemCounts, MemOp};

use counters::add;
use inner::{stats_logger, Inner};
use readahead::{Advice, LargeReadGuard};
use writeback::flusher;

/// What [`LunDevice::read_now`] could do without waiting.
#[derive(Debug)]
pub enum ReadNow<B: BlockBackend> {
    /// The read's result.
    Done(Result<Bytes, DeviceError>),
    /// Sent to the backend as it is (no cache: one command): await it.
    Sent(SentRead<B>),
    /// It must wait (for the target, a fetch, memory): finish it with
    /// [`LunDevice::read_wait`].
    Wait(PendingRead),
}

/// A read [`LunDevice::read_now`] sent to the backend in one command
/// ([`BlockBackend::start_read`]): a future of the read's result (or drop
/// it: it holds nothing to give back). It is a small one — the backend's
/// started read and the slicing of its blocks — where
/// [`LunDevice::read_wait`]'s carries every way a read can go.
pub struct SentRead<B: BlockBackend> {
    inner: Arc<Inner<B>>,
    offset: u64,
    len: usize,
    /// Where `offset` is in the first block.
    skip: usize,
    /// The blocks asked for.
    lba: u64,
    blocks: u32,
    started: B::StartedRead,
    /// The read run in full with `read_blocks`, when the backend says so.
    again: Option<BackendRead>,
}

/// A backend's `read_blocks`, boxed.
type BackendRead = Pin<Box<dyn Future<Output = Result<Bytes, BackendError>> + Send>>;

impl<B: BlockBackend> std::fmt::Debug for SentRead<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentRead")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<B: BlockBackend> Future for SentRead<B> {
    type Output = Result<Bytes, DeviceError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let r = loop {
            if let Some(again) = &mut this.again {
                break ready!(again.as_mut().poll(cx));
            }
            match ready!(this.inner.backend.poll_read(&mut this.started, cx)) {
                Some(r) => break r,
                None => {
                    let (inner, lba, blocks) = (this.inner.clone(), this.lba, this.blocks);
                    this.again = Some(Box::pin(async move {
                        inner.backend.read_blocks(lba, blocks).await
                    }));
                }
            }
        };
        let ctx = |source| DeviceError::Io {
            op: Op::Read,
            offset: this.offset,
            len: this.len as u64,
            source: Arc::new(source),
        };
        let want = this.blocks as usize * this.inner.geo.bs as usize;
        Poll::Ready(match r {
            Ok(data) if data.len() == want => Ok(data.slice(this.skip..this.skip + this.len)),
            Ok(data) => Err(ctx(BackendError::ShortTransfer {
                op: "READ",
                got: data.len(),
                expected: want,
            })),
            Err(e) => Err(ctx(e)),
        })
    }
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
        let inner = Inner::new(backend, cfg)?;
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

    /// The counters now. Walks the dirty pages for their age: not for a
    /// request path ([`LunDevice::dirty_bytes`] is cheap).
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Bytes written into the cache and not yet to the target.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.dirty_bytes()
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
            ReadNow::Sent(s) => s.await,
            ReadNow::Wait(w) => self.read_wait(w).await,
        }
    }

    /// Start a read of `len` bytes at `offset` without waiting: its result
    /// when it needs no waiting — an error found up front, an empty read,
    /// or a read every page of which is resident and valid (a cache hit,
    /// copied out right here); without a cache, the read sent to the
    /// backend when one command carries it (a [`SentRead`], a future);
    /// else a [`PendingRead`] to finish with [`LunDevice::read_wait`]. A
    /// hit this way costs no future, task or page-list allocation; what it returns, and the read-ahead and
    /// counters it drives, are exactly those of [`LunDevice::read_at`].
    pub fn read_now(&self, offset: u64, len: usize) -> ReadNow<B> {
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
        if self.mode() == CacheMode::None {
            return match self.inner.send_direct(offset, len) {
                Some((lba, blocks, started)) => ReadNow::Sent(SentRead {
                    inner: self.inner.clone(),
                    offset,
                    len,
                    skip: (offset - lba * self.inner.geo.bs) as usize,
                    lba,
                    blocks,
                    started,
                    again: None,
                }),
                None => ReadNow::Wait(w),
            };
        }
        // Large reads take a stream token (returned when they end) and
        // may bypass the cache: they go the waiting way whole.
        if self.inner.cfg.bypass_min > 0 && len as u64 >= self.inner.cfg.bypass_min {
            return ReadNow::Wait(w);
        }
        let advice = self.inner.advise(offset, len as u64);
        debug_assert!(advice.token.is_none() && !advice.bypass);
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
        let _large = advice
            .token
            .map(|t| LargeReadGuard::new(&self.inner.streams, t));
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
