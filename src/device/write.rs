//! The write paths: write-through (and `--cache none`) writes WRITE now
//! under an exclusive block range lock, with read-modify-write of partial
//! blocks, and update resident pages after; write-back writes copy into
//! pages and mark their blocks dirty (the flusher, in `writeback`, writes
//! them later; a FUA write is written at once). `discard` and
//! `write_zeroes` drop the affected blocks from the cache, dirty data too,
//! under the same exclusive lock before their command is sent.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tracing::debug;

use super::backend::BlockBackend;
use super::cache::bits;
use super::config::CacheMode;
use super::counters::add;
use super::inner::{split, BResult, Inner, MAX_FETCH_BYTES};
use super::read::Run;
use rlun_iscsi::iobuf::IoBuf;

impl<B: BlockBackend> Inner<B> {
    pub(super) async fn write(
        self: &Arc<Self>,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> BResult<()> {
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

    pub(super) async fn discard(&self, b0: u64, b1: u64) -> BResult<()> {
        let _excl = self.locks.acquire(b0, b1, true).await;
        self.invalidate(b0, b1);
        self.backend.unmap(b0, b1 - b0).await.map_err(Arc::new)
    }

    pub(super) async fn write_zeroes(self: &Arc<Self>, offset: u64, len: u64) -> BResult<()> {
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
