//! [`Inner`]: the state a `LunDevice` shares with its requests and its
//! background tasks — geometry, settings, page cache, range locks, the
//! stream table, counters and the flusher's signals — set up from the
//! backend and the configuration ([`Inner::new`]), plus what every path
//! below uses: the commands to the backend (READ and WRITE split by the
//! maximum transfer and issued at once), the dirty-byte accounting and the
//! statistics.
//!
//! The request paths extend `Inner` in their own files: `read` (cache hits,
//! fills, read-ahead, single flight), `write` (write-through, write into the
//! cache, discard, write zeroes) and `writeback` (the flusher).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, info};

use super::backend::{BackendError, BlockBackend};
use super::budget::CacheBudget;
use super::cache::{Cache, PAGE_OVERHEAD};
use super::config::{CacheMode, DeviceConfig};
use super::counters::{add, Counters, Stats};
use super::error::DeviceError;
use super::rangelock::RangeLock;
use super::readahead::Streams;

/// Sizes derived from the backend and the configuration.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    pub bs: u64,
    pub blocks: u64,
    pub size: u64,
    pub page: u64,
    /// Blocks per page.
    pub bpp: u64,
    pub max_xfer_blocks: u64,
    /// Pages per fetch command.
    pub fetch_pages: u64,
    /// Blocks per write-back run.
    pub wb_blocks: u64,
    /// Pages one request pins at a time.
    pub chunk_pages: u64,
}

impl Geometry {
    /// Blocks that exist in page `idx` (the last page may be partial).
    pub(super) fn page_blocks(&self, idx: u64) -> u64 {
        self.blocks.saturating_sub(idx * self.bpp).min(self.bpp)
    }
}

/// Largest single fetch command.
pub(super) const MAX_FETCH_BYTES: u64 = 1 << 20;

/// What the request paths return: a backend error is shared by every
/// waiter of the command that failed.
pub(super) type BResult<T> = Result<T, Arc<BackendError>>;

/// What the device tells its write-back flusher (see `writeback`).
#[derive(Debug, Default)]
pub(super) struct FlusherSignals {
    /// Write back now (memory pressure, dirty data above the background
    /// threshold, a caller waiting for memory).
    pub kick: Notify,
    /// The device is gone: stop.
    pub shutdown: AtomicBool,
}

/// What a `LunDevice` shares with its requests and background tasks.
pub(super) struct Inner<B> {
    pub backend: B,
    pub geo: Geometry,
    pub cfg: DeviceConfig,
    pub cache: Arc<Cache>,
    pub budget: CacheBudget,
    /// Block range locks: shared for cache fills, exclusive for writes.
    pub locks: Arc<RangeLock>,
    /// Bytes of cache I/O in flight (the budget's I/O reserve).
    pub io: Arc<Semaphore>,
    /// The stream table of read-ahead and the streaming bypass.
    pub streams: Mutex<Streams>,
    pub c: Counters,
    pub signals: Arc<FlusherSignals>,
    /// Dirty bytes (of every device of the budget) above which the
    /// flushers write regardless of age.
    pub dirty_background: u64,
    /// Write-back failures so far; with `last_wb_error`, how a caller
    /// waiting for memory learns that dirty pages cannot become clean.
    pub wb_failures: AtomicU64,
    pub last_wb_error: Mutex<Option<Arc<BackendError>>>,
}

/// Poll every future until all are done; outputs in input order.
pub(super) async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
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
pub(super) fn split(start: u64, end: u64, max: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut a = start;
    while a < end {
        let n = (end - a).min(max);
        v.push((a, n));
        a += n;
    }
    v
}

impl<B: BlockBackend> Inner<B> {
    /// Check `cfg` against `backend`, derive the geometry and set up the
    /// cache over its budget. Spawns nothing.
    pub(super) fn new(backend: B, cfg: DeviceConfig) -> Result<Arc<Inner<B>>, DeviceError> {
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
            let min = 4 * (page + PAGE_OVERHEAD);
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
            signals: Arc::new(FlusherSignals::default()),
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
        Ok(inner)
    }

    pub(super) fn stats(&self) -> Stats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            hits: l(&self.c.hits),
            misses: l(&self.c.misses),
            readahead_hits: l(&self.c.readahead_hits),
            readahead_pages: l(&self.c.readahead_pages),
            readahead_wasted: l(&self.cache.readahead_wasted),
            bypassed_reads: l(&self.c.bypassed_reads),
            evictions: l(&self.cache.evictions),
            cached_bytes: self.cache.charged(),
            cache_size: if self.cfg.mode == CacheMode::None {
                0
            } else {
                self.budget.size()
            },
            dirty_bytes: l(&self.c.dirty_blocks) * self.geo.bs,
            dirty_age_ms: self
                .cache
                .oldest_dirty()
                .map_or(0, |t| t.elapsed().as_millis() as u64),
            flushes: l(&self.c.flushes),
            writebacks: l(&self.c.writebacks),
            bytes_read: l(&self.c.bytes_read),
            bytes_written: l(&self.c.bytes_written),
            read_commands: l(&self.c.read_commands),
            write_commands: l(&self.c.write_commands),
        }
    }

    pub(super) fn dirty_bytes(&self) -> u64 {
        self.c.dirty_blocks.load(Ordering::Relaxed) * self.geo.bs
    }

    pub(super) fn cached(&self) -> bool {
        self.cfg.mode != CacheMode::None
    }

    pub(super) fn dirty_add(&self, blocks: u64) {
        add(&self.c.dirty_blocks, blocks);
        add(&self.budget.inner.dirty, blocks * self.geo.bs);
    }

    pub(super) fn dirty_sub(&self, blocks: u64) {
        self.c.dirty_blocks.fetch_sub(blocks, Ordering::Relaxed);
        self.budget
            .inner
            .dirty
            .fetch_sub(blocks * self.geo.bs, Ordering::Relaxed);
    }

    /// Dirty bytes of every device of the budget.
    pub(super) fn budget_dirty(&self) -> u64 {
        self.budget.inner.dirty.load(Ordering::Relaxed)
    }

    // ---- commands to the backend ------------------------------------------

    /// READ blocks `b0..b1`, split by the maximum transfer, concurrently.
    pub(super) async fn read_blocks(&self, b0: u64, b1: u64) -> BResult<Bytes> {
        add(&self.c.bytes_read, (b1 - b0) * self.geo.bs);
        let want = ((b1 - b0) * self.geo.bs) as usize;
        let out = if b1 > b0 && b1 - b0 <= self.geo.max_xfer_blocks {
            // One command, the common case: awaited in place. Going through
            // `join_all` would box the command's future and collect two
            // vectors around it (about 1,400 instructions per read).
            add(&self.c.read_commands, 1);
            self.backend
                .read_blocks(b0, (b1 - b0) as u32)
                .await
                .map_err(Arc::new)?
        } else {
            let pieces = split(b0, b1, self.geo.max_xfer_blocks);
            add(&self.c.read_commands, pieces.len() as u64);
            let results = join_all(
                pieces
                    .iter()
                    .map(|&(lba, n)| self.backend.read_blocks(lba, n as u32))
                    .collect(),
            )
            .await;
            let mut v = Vec::with_capacity(want);
            for r in results {
                v.extend_from_slice(&r.map_err(Arc::new)?);
            }
            Bytes::from(v)
        };
        if out.len() != want {
            return Err(Arc::new(BackendError::ShortTransfer {
                op: "READ",
                got: out.len(),
                expected: want,
            }));
        }
        Ok(out)
    }

    /// WRITE `data` (whole blocks) at `lba`, split, concurrently.
    pub(super) async fn write_blocks(&self, lba: u64, data: Bytes, fua: bool) -> BResult<()> {
        let bs = self.geo.bs;
        let blocks = data.len() as u64 / bs;
        add(&self.c.bytes_written, data.len() as u64);
        if blocks > 0 && blocks <= self.geo.max_xfer_blocks {
            // One command: awaited in place (see `read_blocks`).
            add(&self.c.write_commands, 1);
            return self
                .backend
                .write_blocks(lba, data, fua)
                .await
                .map_err(Arc::new);
        }
        let pieces = split(lba, lba + blocks, self.geo.max_xfer_blocks);
        add(&self.c.write_commands, pieces.len() as u64);
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

    /// Send the blocks under `len` bytes at `offset` to the backend, when
    /// one command carries them: their first block and count, and the
    /// started read ([`BlockBackend::start_read`]). Counted as
    /// [`Inner::read_blocks`] counts.
    pub(super) fn send_direct(
        &self,
        offset: u64,
        len: usize,
    ) -> Option<(u64, u32, B::StartedRead)> {
        let bs = self.geo.bs;
        let b0 = offset / bs;
        let b1 = (offset + len as u64).div_ceil(bs);
        if b1 <= b0 || b1 - b0 > self.geo.max_xfer_blocks {
            return None;
        }
        add(&self.c.bytes_read, (b1 - b0) * bs);
        add(&self.c.read_commands, 1);
        let blocks = (b1 - b0) as u32;
        Some((b0, blocks, self.backend.start_read(b0, blocks)))
    }

    /// READ the blocks under bytes `offset..offset + len`, past the cache,
    /// and slice the range out of them.
    pub(super) async fn read_direct(&self, offset: u64, len: usize) -> BResult<Bytes> {
        let bs = self.geo.bs;
        let end = offset + len as u64;
        let b0 = offset / bs;
        let data = self.read_blocks(b0, end.div_ceil(bs)).await?;
        let skip = (offset - b0 * bs) as usize;
        Ok(data.slice(skip..skip + len))
    }
}

/// Logs the counters every `every` (`DeviceConfig::stats_interval`).
/// Holds only a weak reference, so it ends when the device is dropped.
pub(super) async fn stats_logger<B: BlockBackend>(weak: Weak<Inner<B>>, every: Duration) {
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
