//! Write-back: the background flusher of a `write-back` device and the
//! WRITEs it issues. It merges neighbouring dirty blocks into runs of up to
//! the maximum transfer, writes those whose page has been dirty for
//! `writeback_delay` (all of them under memory pressure or at `flush`),
//! `writeback_depth` at a time, each from a buffer of the registered I/O
//! pool, under an exclusive range lock; a failed run stays dirty and is
//! retried with back-off (50 ms doubling to [`MAX_RETRY`], warned of once
//! per failing streak, its end logged). The data-loss window this leaves
//! is described in the `device` module docs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use super::backend::BlockBackend;
use super::cache::{bits, for_each_run};
use super::config::CacheMode;
use super::counters::add;
use super::inner::{join_all, split, BResult, FlusherSignals, Inner};
use rlun_iscsi::iobuf::IoBuf;

impl<B: BlockBackend> Inner<B> {
    /// FUA in write-back: write blocks `b0..b1` (just written into the
    /// cache) with FUA. Blocks no longer resident were written back by the
    /// flusher meanwhile, without FUA: SYNCHRONIZE CACHE covers them.
    pub(super) async fn write_back_fua(self: &Arc<Self>, b0: u64, b1: u64) -> BResult<()> {
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

    pub(super) async fn flush(self: &Arc<Self>) -> BResult<()> {
        if self.cfg.mode == CacheMode::WriteBack {
            let runs = self.collect_runs(true, true);
            self.write_runs(runs).await?;
        }
        add(&self.c.flushes, 1);
        self.backend.flush().await.map_err(Arc::new)
    }
}

/// The longest pause between the flusher's retries of failed write-back.
/// The session keeps logging in again on its own back-off (at most 5 s
/// apart) for as long as the device is open, also past the replacement
/// timeout, so data held for a target that went away reaches it within
/// about twice this of its return, without an fsync.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The background write-back task (write-back mode only). Holds only a weak
/// reference, so it ends when the device is dropped.
pub(super) async fn flusher<B: BlockBackend>(weak: Weak<Inner<B>>, signals: Arc<FlusherSignals>) {
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
            Ok(()) => {
                if !backoff.is_zero() {
                    info!("write-back resumed: the data held since it failed reached the target");
                }
                backoff = Duration::ZERO;
            }
            Err(e) => {
                let first = backoff.is_zero();
                backoff = (backoff * 2).clamp(Duration::from_millis(50), MAX_RETRY);
                if first {
                    warn!(error = %e, "write-back failed; the data stays dirty and is retried (every {MAX_RETRY:?} at most) until it reaches the target");
                } else {
                    debug!(error = %e, retry_in = ?backoff, "write-back failed again");
                }
            }
        }
    }
}
