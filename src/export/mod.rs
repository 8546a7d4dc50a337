//! The export layer: a target's LUNs as byte-addressed exports, with the
//! rules every front end needs — the FUSE mount, the NBD server and the
//! kernel attach over it.
//!
//! An [`ExportSet`] holds one [`Export`] per disk LUN, each over its own
//! [`LunDevice`] (page cache, read-ahead, write-back). Front ends translate
//! their requests into the calls below and their answers back; they do not
//! talk to [`LunDevice`] or SCSI themselves. An export's LUN is any
//! [`LunBackend`]: the client's remote `Lun` (its implementation is in
//! [`crate::remote`]), or an in-memory one in the tests.
//!
//! # Which LUNs
//!
//! [`open_luns`] picks what a URL names: a LUN URL gives that LUN; a target
//! URL gives every LUN REPORT LUNS lists that is a disk (peripheral device
//! type 0, SBC). Other device types are left out — notably the RAID
//! controller that tgtd (and others) put at LUN 0 — and so are LUNs that
//! vanish between REPORT LUNS and INQUIRY. Each export is named `lun<N>`
//! after its LUN number ([`export_name`]).
//!
//! # Requests
//!
//! | call | what happens |
//! | --- | --- |
//! | [`Export::read`] | [`LunDevice::read_at`], clipped at the end of the LUN (empty at or past it) |
//! | [`Export::write`] | [`LunDevice::write_at`], or [`LunDevice::write_at_fua`] with `fua`; short across the end of the LUN, [`ExportError::NoSpace`] at or past it |
//! | [`Export::flush`] | dirty pages, then SYNCHRONIZE CACHE (SBC-4 §5.26) |
//! | [`Export::write_zeroes`] | [`ZeroMode::Allocate`]: WRITE SAME of zeros (SBC-4 §5.50, falling back to writing zeros); [`ZeroMode::MayUnmap`]: UNMAP (SBC-4 §5.30) of the whole blocks when the LUN reports LBPU and LBPRZ (unmapped blocks read as zeros), zeros for the partial blocks at the ends — or, when the LUN cannot or the target refuses UNMAP, WRITE SAME of zeros. Either way the range reads back as zeros. |
//! | [`Export::trim`] | UNMAP of the whole blocks inside the range when the LUN supports it, else nothing (a trim is advisory) |
//! | [`Export::prefetch`] | reads the range into the page cache (nothing with `--cache none`) |
//! | [`Export::refresh_capacity`] | re-reads the capacity when the session saw a capacity change |
//!
//! Front ends that must refuse a request reaching past the end instead of
//! clipping it (NBD: `EINVAL` for reads and trims, `ENOSPC` for writes)
//! ask [`Export::check_range`] first. Writes, zeroing and trims of a
//! read-only export fail with [`ExportError::ReadOnly`] before anything is
//! sent. Every error is an [`ExportError`]; [`ExportError::to_errno`] is
//! the one mapping to a Linux errno, from which each front end derives its
//! own codes.
//!
//! # Capacity changes
//!
//! The session counts capacity-change reports (UNIT ATTENTION 2A/09). When
//! [`Export::refresh_capacity`] sees the count move, it re-reads the
//! capacity (READ CAPACITY) and, if it changed, swaps in a new
//! [`LunDevice`] of the new size; the old one is flushed and closed once its
//! last request ends.
//!
//! # Stopping and lost data
//!
//! [`ExportSet::shut_down`] makes every later request fail with
//! [`ExportError::ShutDown`] (a front end that is being cut off).
//! [`ExportSet::finish`] then writes back and flushes each export that has
//! something to make durable and returns a [`ShutdownReport`]: data counts
//! as lost when an export had cached data that could not be written, or had
//! writes since its last successful flush and the final flush failed (the
//! target acknowledged them but may hold them only in a volatile cache;
//! FUA writes do not count: they are durable when they complete). An
//! export nothing was written to is not flushed at all, so a session whose
//! target is gone for good does not make a read-only user's exit fail.
//!
//! Before data counts as lost, the target gets a fresh chance: the session
//! may have given up (the replacement timeout passed) and its next attempt
//! on the back-off may be seconds away, while the target is already back.
//! So a failed final flush is followed by [`LunBackend::reconnect`] (a
//! login at once, bounded by the connect and login timeouts; 1 s pause if
//! it failed too) and tried again, [`FINAL_FLUSH_ROUNDS`] times in all. The
//! error reported is the last round's, made after a login tried just now.
//! With the target gone for good this adds at most two logins and 2 s to
//! stopping, for each export with data to write.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tracing::{debug, error, info, trace, warn};

use crate::device::{DeviceConfig, DeviceError, LunDevice, PendingRead, ReadNow, SentRead};
use rlun_iscsi::error_chain;

pub use crate::device::LunBackend;
use meter::{Meter, Op, Timer};

/// The name of the export of LUN `number`: `lun<N>`.
pub fn export_name(number: u64) -> String {
    format!("lun{number}")
}

/// The kind of request [`Export::check_range`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Write zeroes (with or without unmapping).
    Zero,
    Trim,
}

/// How [`Export::write_zeroes`] may make a range read as zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroMode {
    /// Write zeros; the blocks stay allocated (fallocate `ZERO_RANGE`, NBD
    /// `WRITE_ZEROES` with `NO_HOLE`).
    Allocate,
    /// Unmap whole blocks where they then read as zeros (LBPRZ), zero the
    /// rest (fallocate `PUNCH_HOLE`, NBD `WRITE_ZEROES`).
    MayUnmap,
}

/// What an export is and can do, for a front end's size and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    /// Logical block size of the LUN.
    pub block_size: u32,
    /// The unit I/O is most efficient in: the cache page (at least a block,
    /// the LUN's optimal granularity when it states one).
    pub preferred_size: u32,
    /// Largest transfer of one SCSI command; larger requests are split.
    pub max_transfer: u64,
    /// Writes are refused.
    pub read_only: bool,
    /// [`Export::trim`] unmaps (the LUN supports UNMAP).
    pub can_trim: bool,
    /// [`ZeroMode::MayUnmap`] can unmap: unmapped blocks read as zeros.
    pub fast_zero: bool,
}

/// A run of bytes of an export and whether the target has storage for it
/// ([`Export::allocation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    /// Deallocated (or anchored) on the target.
    pub hole: bool,
    /// Reads as zeros (a hole on an LBPRZ LUN).
    pub zero: bool,
}

/// What [`Export::read_now`] could do without waiting.
pub enum ExportRead<B: LunBackend> {
    Done(Result<Bytes, ExportError>),
    /// Sent to the target as it is (no cache): finish it with
    /// [`Export::read_sent`], whose future is a small one.
    Sent(SentExportRead<B>),
    Wait(PendingExportRead<B>),
}

/// A read [`Export::read_now`] sent to the target; finish it with
/// [`Export::read_sent`] (or drop it: it holds nothing to give back).
pub struct SentExportRead<B: LunBackend> {
    read: SentRead<B>,
    offset: u64,
    len: usize,
    /// In flight until finished or dropped.
    timer: Option<Timer>,
}

impl<B: LunBackend> SentExportRead<B> {
    /// [`Export::read_sent`] by hand, for a front end's job that would
    /// rather not carry that future: `export` is the export that sent it.
    /// Not polled again after `Ready`.
    pub fn poll_read(
        &mut self,
        export: &Export<B>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Bytes, ExportError>> {
        let r = std::task::ready!(std::future::Future::poll(
            std::pin::Pin::new(&mut self.read),
            cx
        ))
        .map_err(|e| export.read_error(self.offset, self.len, e));
        if let Some(timer) = self.timer.take() {
            timer.done(
                r.as_ref()
                    .map(|b| b.len() as u64)
                    .map_err(ExportError::class),
            );
        }
        std::task::Poll::Ready(r)
    }
}

/// A read [`Export::read_now`] started; finish it with
/// [`Export::read_wait`] (or drop it: it holds nothing to give back).
pub struct PendingExportRead<B: LunBackend> {
    /// `None`: not started yet (a capacity change was swapping devices).
    started: Option<(Arc<LunDevice<B>>, PendingRead)>,
    offset: u64,
    len: usize,
    /// In flight until finished or dropped.
    timer: Timer,
}

/// One LUN as an export.
pub struct Export<B: LunBackend> {
    name: String,
    number: u64,
    /// Swapped when the capacity changes; the lock is held only to clone.
    device: RwLock<Arc<LunDevice<B>>>,
    seen_generation: AtomicU64,
    refresh: tokio::sync::Mutex<()>,
    /// A capacity change is swapping devices: requests wait for
    /// `swapped` (see [`Export::live_device`]).
    swapping: AtomicBool,
    swapped: tokio::sync::Notify,
    /// The target no longer reports the LUN.
    gone: AtomicBool,
    /// Devices replaced by a capacity change, being written back and
    /// closed ([`retire`]); the final write-back waits for them.
    retiring: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Bytes of cached data a replaced device could not write.
    lost_in_resize: Arc<AtomicU64>,
    cfg: DeviceConfig,
    read_only: bool,
    shut: AtomicBool,
    /// Modifying requests (but FUA writes, durable when they complete), and
    /// how many of them the last successful flush covered: writes since
    /// are not known to be durable.
    writes: AtomicU64,
    synced: AtomicU64,
    /// What `rlun stats` reports ([`Meter`]).
    meter: Arc<Meter>,
}

impl<B: LunBackend> Export<B> {
    fn new(
        number: u64,
        backend: B,
        cfg: &DeviceConfig,
        read_only: bool,
    ) -> Result<Export<B>, DeviceError> {
        let generation = backend.capacity_generation();
        let device = LunDevice::new(backend, cfg.clone())?;
        Ok(Export {
            name: export_name(number),
            number,
            read_only: read_only || device.read_only(),
            device: RwLock::new(Arc::new(device)),
            seen_generation: AtomicU64::new(generation),
            refresh: tokio::sync::Mutex::new(()),
            swapping: AtomicBool::new(false),
            swapped: tokio::sync::Notify::new(),
            gone: AtomicBool::new(false),
            retiring: std::sync::Mutex::new(Vec::new()),
            lost_in_resize: Arc::new(AtomicU64::new(0)),
            cfg: cfg.clone(),
            shut: AtomicBool::new(false),
            writes: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            meter: Arc::default(),
        })
    }

    /// `lun<N>`.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The LUN number.
    pub fn number(&self) -> u64 {
        self.number
    }
    /// The current device (a new one after a capacity change).
    pub fn device(&self) -> Arc<LunDevice<B>> {
        self.device
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Writes are refused (write-protected LUN or read-only by option).
    pub fn read_only(&self) -> bool {
        self.read_only
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.device().size()
    }
    /// Size, block sizes, limits and capabilities.
    pub fn info(&self) -> ExportInfo {
        let dev = self.device();
        let backend = dev.backend();
        ExportInfo {
            size: dev.size(),
            block_size: dev.block_size(),
            preferred_size: dev.page_size().max(dev.block_size()),
            max_transfer: backend.max_transfer_bytes(),
            read_only: self.read_only,
            can_trim: !self.read_only && backend.can_unmap(),
            fast_zero: !self.read_only && backend.unmap_reads_zeros(),
        }
    }
    /// Wait for the devices a capacity change replaced to be written back;
    /// the bytes they could not write.
    async fn retired(&self) -> u64 {
        let tasks = std::mem::take(&mut *self.retiring.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        self.lost_in_resize.load(Ordering::Acquire)
    }

    /// The requests counted so far, their bytes, errors and latencies.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Bytes written into the cache and not yet to the target.
    pub fn dirty_bytes(&self) -> u64 {
        self.device().dirty_bytes()
    }

    fn error(&self, source: DeviceError) -> ExportError {
        ExportError::Device {
            export: self.name.clone(),
            source,
        }
    }

    fn check_live(&self) -> Result<(), ExportError> {
        if self.shut.load(Ordering::Acquire) {
            Err(ExportError::ShutDown {
                export: self.name.clone(),
            })
        } else if self.gone.load(Ordering::Acquire) {
            Err(ExportError::Gone {
                export: self.name.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// The target no longer reports this LUN.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The device a request runs on. While a capacity change swaps devices
    /// ([`Export::refresh_capacity`]) it waits for the new one, so that no
    /// request reaches the old device after its cache was written back:
    /// the swap first raises `swapping`, then waits until no request holds
    /// the old device; a request takes its reference first and looks at
    /// `swapping` after (both sequentially consistent), so either the swap
    /// sees the reference and waits for it, or the request sees the flag
    /// and lets go.
    async fn live_device(&self) -> Arc<LunDevice<B>> {
        loop {
            if let Some(dev) = self.device_now() {
                return dev;
            }
            let notified = self.swapped.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.swapping.load(Ordering::SeqCst) {
                notified.await;
            }
        }
    }

    /// The device, unless a swap is under way.
    fn device_now(&self) -> Option<Arc<LunDevice<B>>> {
        let dev = self.device();
        (!self.swapping.load(Ordering::SeqCst)).then_some(dev)
    }

    fn check_writable(&self) -> Result<(), ExportError> {
        if self.read_only {
            Err(ExportError::ReadOnly {
                export: self.name.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// Refuse a request that reaches past the end: a read or trim with
    /// [`ExportError::OutOfRange`], a write or zeroing with
    /// [`ExportError::NoSpace`]. For front ends that do not clip.
    pub fn check_range(&self, access: Access, offset: u64, len: u64) -> Result<(), ExportError> {
        let size = self.size();
        let fits = offset.checked_add(len).is_some_and(|end| end <= size);
        if fits {
            return Ok(());
        }
        Err(match access {
            Access::Write | Access::Zero => ExportError::NoSpace {
                export: self.name.clone(),
                offset,
                size,
            },
            Access::Read | Access::Trim => ExportError::OutOfRange {
                export: self.name.clone(),
                offset,
                len,
                size,
            },
        })
    }

    /// Read up to `len` bytes at `offset` (fewer at the end of the LUN,
    /// none at or past it).
    pub async fn read(&self, offset: u64, len: usize) -> Result<Bytes, ExportError> {
        let timer = self.meter.start(Op::Read);
        let r = self.read_unmetered(offset, len).await;
        timer.done(
            r.as_ref()
                .map(|b| b.len() as u64)
                .map_err(ExportError::class),
        );
        r
    }

    async fn read_unmetered(&self, offset: u64, len: usize) -> Result<Bytes, ExportError> {
        self.check_live()?;
        let dev = self.live_device().await;
        let end = dev.size();
        if offset >= end {
            return Ok(Bytes::new());
        }
        let len = (len as u64).min(end - offset) as usize;
        trace!(lun = self.number, offset, len, "read");
        dev.read_at(offset, len).await.map_err(|e| {
            debug!(lun = self.number, offset, len, error = %error_chain(&e), "read failed");
            self.error(e)
        })
    }

    /// [`Export::read`] without waiting when it can complete at once (an
    /// error found up front, a read at or past the end, a cache hit): its
    /// result; without a cache, the read sent to the target (finish it
    /// with [`Export::read_sent`]); else what to finish with
    /// [`Export::read_wait`]. Front ends that answer many small requests
    /// use it to serve cache hits without a future or task of their own,
    /// and to wait for uncached reads in a small one.
    pub fn read_now(&self, offset: u64, len: usize) -> ExportRead<B> {
        let timer = self.meter.start(Op::Read);
        match self.read_now_unmetered(offset, len, timer) {
            (ExportRead::Done(r), Some(timer)) => {
                timer.done(
                    r.as_ref()
                        .map(|b| b.len() as u64)
                        .map_err(ExportError::class),
                );
                ExportRead::Done(r)
            }
            (read, _) => read,
        }
    }

    /// [`Export::read_now`]; the timer comes back unless a pending read
    /// took it.
    fn read_now_unmetered(
        &self,
        offset: u64,
        len: usize,
        timer: Timer,
    ) -> (ExportRead<B>, Option<Timer>) {
        if let Err(e) = self.check_live() {
            return (ExportRead::Done(Err(e)), Some(timer));
        }
        let Some(dev) = self.device_now() else {
            let pending = PendingExportRead {
                started: None,
                offset,
                len,
                timer,
            };
            return (ExportRead::Wait(pending), None);
        };
        let end = dev.size();
        if offset >= end {
            return (ExportRead::Done(Ok(Bytes::new())), Some(timer));
        }
        let len = (len as u64).min(end - offset) as usize;
        trace!(lun = self.number, offset, len, "read");
        match dev.read_now(offset, len) {
            ReadNow::Done(r) => (
                ExportRead::Done(r.map_err(|e| self.read_error(offset, len, e))),
                Some(timer),
            ),
            ReadNow::Sent(read) => {
                let sent = SentExportRead {
                    read,
                    offset,
                    len,
                    timer: Some(timer),
                };
                (ExportRead::Sent(sent), None)
            }
            ReadNow::Wait(w) => {
                let pending = PendingExportRead {
                    started: Some((dev, w)),
                    offset,
                    len,
                    timer,
                };
                (ExportRead::Wait(pending), None)
            }
        }
    }

    /// Finish a read [`Export::read_now`] sent.
    pub async fn read_sent(&self, mut p: SentExportRead<B>) -> Result<Bytes, ExportError> {
        std::future::poll_fn(|cx| p.poll_read(self, cx)).await
    }

    /// Finish a read [`Export::read_now`] could not complete at once.
    pub async fn read_wait(&self, p: PendingExportRead<B>) -> Result<Bytes, ExportError> {
        let PendingExportRead {
            started,
            offset,
            len,
            timer,
        } = p;
        let r = match started {
            // Not started: a capacity change was swapping devices. Rare,
            // and boxed so that every read's future does not carry it.
            None => Box::pin(self.read_unmetered(offset, len)).await,
            Some((dev, read)) => dev
                .read_wait(read)
                .await
                .map_err(|e| self.read_error(offset, len, e)),
        };
        timer.done(
            r.as_ref()
                .map(|b| b.len() as u64)
                .map_err(ExportError::class),
        );
        r
    }

    fn read_error(&self, offset: u64, len: usize, e: DeviceError) -> ExportError {
        debug!(lun = self.number, offset, len, error = %error_chain(&e), "read failed");
        self.error(e)
    }

    /// Write `data` at `offset`; returns the bytes written: all of them, or
    /// fewer when the write crosses the end of the LUN;
    /// [`ExportError::NoSpace`] when it starts at or past the end. `fua`
    /// makes the data durable on the target before this returns.
    pub async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<u32, ExportError> {
        let timer = self.meter.start(Op::Write);
        let r = self.write_unmetered(offset, data, fua).await;
        timer.done(
            r.as_ref()
                .map(|n| u64::from(*n))
                .map_err(ExportError::class),
        );
        r
    }

    async fn write_unmetered(
        &self,
        offset: u64,
        mut data: Bytes,
        fua: bool,
    ) -> Result<u32, ExportError> {
        self.check_live()?;
        self.check_writable()?;
        let dev = self.live_device().await;
        let end = dev.size();
        if data.is_empty() {
            return Ok(0);
        }
        if offset >= end {
            return Err(ExportError::NoSpace {
                export: self.name.clone(),
                offset,
                size: end,
            });
        }
        let room = end - offset;
        if (data.len() as u64) > room {
            data.truncate(room as usize);
        }
        let n = data.len() as u32;
        trace!(lun = self.number, offset, len = n, fua, "write");
        let r = if fua {
            dev.write_at_fua(offset, data).await
        } else {
            dev.write_at(offset, data).await
        };
        // A FUA write that completed is durable; one that failed was
        // reported to its caller.
        if !fua {
            self.modified();
        }
        r.map_err(|e| {
            warn!(lun = self.number, offset, len = n, error = %error_chain(&e), "write failed");
            self.error(e)
        })?;
        Ok(n)
    }

    /// Write back dirty data, then SYNCHRONIZE CACHE.
    pub async fn flush(&self) -> Result<(), ExportError> {
        let timer = self.meter.start(Op::Other);
        let r = match self.check_live() {
            Ok(()) => self.flush_now().await,
            Err(e) => Err(e),
        };
        timer.done(r.as_ref().map(|()| 0).map_err(ExportError::class));
        r
    }

    /// [`Export::flush`] without the shut-down check (for stopping).
    async fn flush_now(&self) -> Result<(), ExportError> {
        let covered = self.writes.load(Ordering::Acquire);
        match self.live_device().await.flush().await {
            Ok(()) => {
                self.synced.fetch_max(covered, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                warn!(lun = self.number, error = %error_chain(&e), "flush failed");
                Err(self.error(e))
            }
        }
    }

    /// The final flush of [`ExportSet::finish`]: up to
    /// [`FINAL_FLUSH_ROUNDS`] flushes, each failed one followed by a fresh
    /// try at the LUN ([`LunBackend::reconnect`]: a login at once when the
    /// session is down, bounded by the connect and login timeouts) and, if
    /// that failed too, a pause of [`FINAL_FLUSH_PAUSE`]. So a target that
    /// came back after the replacement timeout, before the session's next
    /// attempt on its back-off, still gets the data, and what is reported
    /// when it did not is the error of an attempt made now.
    async fn finish_flush(&self) -> Result<(), ExportError> {
        let mut round = 1;
        loop {
            let err = match self.flush_now().await {
                Ok(()) => return Ok(()),
                Err(err) if round >= FINAL_FLUSH_ROUNDS => return Err(err),
                Err(err) => err,
            };
            round += 1;
            info!(
                lun = self.number,
                error = %error_chain(&err),
                "final write-back failed; trying the target again before giving up on the data"
            );
            if let Err(e) = self.device().backend().reconnect().await {
                debug!(lun = self.number, error = %error_chain(&e), "the target is still unreachable");
                tokio::time::sleep(FINAL_FLUSH_PAUSE).await;
            }
        }
    }

    /// Make `offset..offset+len` (clipped at the end of the LUN) read as
    /// zeros; see [`ZeroMode`] and the module docs. A front end that must
    /// make the zeros durable (NBD's FUA flag) follows with
    /// [`Export::flush`].
    pub async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        mode: ZeroMode,
    ) -> Result<(), ExportError> {
        let timer = self.meter.start(Op::Other);
        let r = self.write_zeroes_unmetered(offset, len, mode).await;
        timer.done(r.as_ref().map(|()| 0).map_err(ExportError::class));
        r
    }

    async fn write_zeroes_unmetered(
        &self,
        offset: u64,
        len: u64,
        mode: ZeroMode,
    ) -> Result<(), ExportError> {
        self.check_live()?;
        self.check_writable()?;
        let dev = self.live_device().await;
        let end = offset.saturating_add(len).min(dev.size());
        if offset >= end {
            return Ok(());
        }
        let len = end - offset;
        let r = if mode == ZeroMode::MayUnmap && dev.backend().unmap_reads_zeros() {
            punch_by_unmap(&dev, offset, len).await
        } else {
            dev.write_zeroes(offset, len).await
        };
        self.modified();
        r.map_err(|e| {
            warn!(lun = self.number, offset, len, ?mode, error = %error_chain(&e), "zeroing failed");
            self.error(e)
        })
    }

    /// Tell the target the range (clipped at the end) is no longer needed:
    /// UNMAP of the whole blocks inside it when the LUN supports UNMAP,
    /// otherwise nothing. What the range reads afterwards is up to the
    /// target (zeros on an LBPRZ LUN).
    pub async fn trim(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        let timer = self.meter.start(Op::Other);
        let r = self.trim_unmetered(offset, len).await;
        timer.done(r.as_ref().map(|()| 0).map_err(ExportError::class));
        r
    }

    async fn trim_unmetered(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.check_live()?;
        self.check_writable()?;
        let dev = self.live_device().await;
        let end = offset.saturating_add(len).min(dev.size());
        if offset >= end || !dev.backend().can_unmap() {
            return Ok(());
        }
        match dev.discard(offset, end - offset).await {
            Ok(()) => {
                self.modified();
                Ok(())
            }
            Err(DeviceError::Io { ref source, .. }) if source.is_unsupported() => {
                debug!(lun = self.number, "UNMAP refused; trim ignored");
                Ok(())
            }
            Err(e) => Err(self.error(e)),
        }
    }

    /// Read the range (clipped at the end) into the page cache, so later
    /// reads are served from memory. Nothing to do without a cache.
    pub async fn prefetch(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.check_live()?;
        let dev = self.live_device().await;
        if dev.mode() == crate::device::CacheMode::None {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(dev.size());
        let mut at = offset;
        // In pieces, so the caller's whole range is never one buffer.
        let piece = dev.backend().max_transfer_bytes().max(1);
        while at < end {
            let n = (end - at).min(piece);
            dev.read_at(at, n as usize)
                .await
                .map_err(|e| self.error(e))?;
            at += n;
        }
        Ok(())
    }

    /// The allocation of `offset..offset+len` (clipped at the end) on the
    /// target, from its GET LBA STATUS (SBC-4 §5.8): runs that cover the
    /// range from `offset` on, possibly fewer bytes than asked. Whatever
    /// cannot be told — a LUN that is not thin, a target that refuses the
    /// command or fails it, data still dirty in rlun's cache — is one
    /// allocated extent, which is always a correct answer.
    pub async fn allocation(&self, offset: u64, len: u64) -> Vec<Extent> {
        let dev = self.live_device().await;
        let end = offset.saturating_add(len).min(dev.size());
        if offset >= end {
            return Vec::new();
        }
        let whole = vec![Extent {
            len: end - offset,
            hole: false,
            zero: false,
        }];
        if dev.dirty_bytes() > 0 {
            return whole;
        }
        let bs = dev.block_size() as u64;
        let zeros = dev.backend().unmap_reads_zeros();
        let runs = match dev.backend().allocation(offset / bs).await {
            Ok(Some(r)) => r,
            Ok(None) => return whole,
            Err(e) => {
                debug!(lun = self.number, error = %error_chain(&e), "GET LBA STATUS failed; reporting allocated");
                return whole;
            }
        };
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        for r in runs {
            let (start, stop) = (r.lba * bs, (r.lba + r.blocks as u64) * bs);
            if start > at || stop <= at {
                break; // a gap, or not about this range: stop here
            }
            let stop = stop.min(end);
            let hole = matches!(
                r.status,
                rlun_iscsi::scsi::lba_status::Provisioning::Deallocated
                    | rlun_iscsi::scsi::lba_status::Provisioning::Anchored
            );
            let e = Extent {
                len: stop - at,
                hole,
                zero: hole && zeros,
            };
            match out.last_mut() {
                Some(last) if last.hole == e.hole && last.zero == e.zero => last.len += e.len,
                _ => out.push(e),
            }
            at = stop;
            if at >= end {
                break;
            }
        }
        if out.is_empty() {
            return whole;
        }
        out
    }

    fn modified(&self) {
        self.writes.fetch_add(1, Ordering::AcqRel);
    }

    /// Writes completed since the last successful flush (they may sit in
    /// the target's volatile cache, or in ours).
    pub fn unsynced(&self) -> bool {
        self.writes.load(Ordering::Acquire) > self.synced.load(Ordering::Acquire)
    }

    /// Re-read the capacity when the session reported a change since the
    /// last look, and swap in a device of the new size. Returns the new
    /// size when it changed. Failures are logged and retried at the next
    /// call.
    pub async fn refresh_capacity(&self) -> Option<u64> {
        let current = self.device().backend().capacity_generation();
        if current == self.seen_generation.load(Ordering::Acquire) {
            return None;
        }
        self.reread_capacity(false).await
    }

    /// Re-read the capacity now, whether or not the session saw a change
    /// (a rescan, a LUN inventory change: the LUN may have been replaced by
    /// another of the same number); as [`Export::refresh_capacity`]
    /// otherwise.
    pub async fn recheck_capacity(&self) -> Option<u64> {
        self.reread_capacity(true).await
    }

    async fn reread_capacity(&self, force: bool) -> Option<u64> {
        let _one_at_a_time = self.refresh.lock().await;
        let old = self.device();
        let generation = old.backend().capacity_generation();
        if !force && generation == self.seen_generation.load(Ordering::Acquire) {
            return None;
        }
        let backend = match old.backend().reread_capacity().await {
            Ok(b) => b,
            Err(e) => {
                warn!(lun = self.number, error = %error_chain(&e), "cannot re-read the capacity");
                return None;
            }
        };
        self.seen_generation.store(generation, Ordering::Release);
        let (old_size, new_size) = (old.size(), backend.blocks() * backend.block_size() as u64);
        if old_size == new_size && backend.block_size() == old.block_size() {
            return None;
        }
        let device = match LunDevice::new(backend, self.cfg.clone()) {
            Ok(d) => Arc::new(d),
            Err(e) => {
                warn!(lun = self.number, error = %e, "cannot use the new capacity");
                return None;
            }
        };
        info!(
            lun = self.number,
            old_size, new_size, "LUN capacity changed; the export follows"
        );
        // Hold new requests, let those on the old device finish, write its
        // cache back, then swap: no write can sit in the old cache unseen
        // by reads through the new one.
        self.swapping.store(true, Ordering::SeqCst);
        if !wait_unused(&old, SWAP_DRAIN_LIMIT).await {
            warn!(
                lun = self.number,
                "requests on the old device still running; swapping anyway"
            );
        }
        if let Err(e) = old.flush().await {
            let dirty = old.dirty_bytes();
            if new_size < old_size && dirty > 0 {
                error!(
                    lun = self.number,
                    dirty, old_size, new_size,
                    error = %error_chain(&e),
                    "the LUN shrank under cached data: what lies past the new end cannot be written and is lost"
                );
            } else {
                warn!(lun = self.number, error = %error_chain(&e), "writing back before the capacity change failed");
            }
        }
        *self.device.write().unwrap_or_else(|e| e.into_inner()) = device;
        self.swapping.store(false, Ordering::SeqCst);
        self.swapped.notify_waiters();
        // A request that lost the race with the swap flag may still hold
        // it; flush and close it after the last.
        let task = tokio::spawn(retire(old, self.number, self.lost_in_resize.clone()));
        self.retiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        Some(new_size)
    }
}

/// Punch a hole with UNMAP: whole blocks are unmapped (they read as zeros,
/// LBPRZ), partial blocks at either end are zeroed; a target that refuses
/// UNMAP gets WRITE SAME of zeros for the whole range instead.
async fn punch_by_unmap<B: LunBackend>(
    dev: &LunDevice<B>,
    offset: u64,
    len: u64,
) -> Result<(), DeviceError> {
    let bs = dev.block_size() as u64;
    let end = offset + len;
    let (b0, b1) = (offset.div_ceil(bs) * bs, end / bs * bs);
    if b0 >= b1 {
        return dev.write_zeroes(offset, len).await;
    }
    match dev.discard(b0, b1 - b0).await {
        Ok(()) => {}
        Err(DeviceError::Io { ref source, .. }) if source.is_unsupported() => {
            debug!("UNMAP refused; punching the hole with zeros");
            return dev.write_zeroes(offset, len).await;
        }
        Err(e) => return Err(e),
    }
    if offset < b0 {
        dev.write_zeroes(offset, b0 - offset).await?;
    }
    if b1 < end {
        dev.write_zeroes(b1, end - b1).await?;
    }
    Ok(())
}

/// How long a capacity change waits for the requests on the old device.
const SWAP_DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Wait until only the export's slot and the caller hold `dev` (no
/// request uses it), at most `limit`; false when the time ran out.
async fn wait_unused<B: LunBackend>(dev: &Arc<LunDevice<B>>, limit: Duration) -> bool {
    let start = tokio::time::Instant::now();
    while Arc::strong_count(dev) > 2 {
        if start.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// Flush and close a device that was replaced, once no request uses it.
/// Its write-back gets the rounds of the final one ([`FINAL_FLUSH_ROUNDS`],
/// a fresh login between them); what it still could not write is counted
/// in `lost` for the final report.
async fn retire<B: LunBackend>(mut old: Arc<LunDevice<B>>, lun: u64, lost: Arc<AtomicU64>) {
    loop {
        match Arc::try_unwrap(old) {
            Ok(dev) => {
                let mut round = 1;
                while let Err(e) = dev.flush().await {
                    if round >= FINAL_FLUSH_ROUNDS {
                        let dirty = dev.dirty_bytes();
                        error!(lun, dirty, error = %error_chain(&e), "cached data of the LUN's old size could not be written");
                        lost.fetch_add(dirty, Ordering::AcqRel);
                        return;
                    }
                    round += 1;
                    if dev.backend().reconnect().await.is_err() {
                        tokio::time::sleep(FINAL_FLUSH_PAUSE).await;
                    }
                }
                return;
            }
            Err(still_used) => {
                old = still_used;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

mod error;
pub mod inflight;
pub mod meter;
mod set;
pub use error::ExportError;
pub use set::{
    open_luns, DataLost, ExportSet, LostData, OpenError, ShutdownReport, FINAL_FLUSH_PAUSE,
    FINAL_FLUSH_ROUNDS,
};

/// Test backends for the export layer and the front ends above it.
#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::meter::ErrorClass;
    use super::testing::TestLun;
    use super::*;
    use crate::device::{CacheMode, MemBackend, MemOp};
    use rlun_iscsi::scsi::sense::errno;

    fn set_of(luns: Vec<(u64, TestLun)>, mode: CacheMode, read_only: bool) -> ExportSet<TestLun> {
        let cfg = DeviceConfig {
            mode,
            cache_size: 16 << 20,
            ..DeviceConfig::default()
        };
        ExportSet::new(luns, &cfg, read_only).expect("export set")
    }

    fn one(mem: MemBackend, mode: CacheMode) -> (ExportSet<TestLun>, TestLun) {
        let lun = TestLun::new(mem);
        (set_of(vec![(4, lun.clone())], mode, false), lun)
    }

    #[tokio::test]
    async fn exports_are_named_after_their_lun_numbers_in_order() {
        let set = set_of(
            vec![
                (2, TestLun::new(MemBackend::new(512, 8))),
                (0, TestLun::new(MemBackend::new(4096, 4))),
            ],
            CacheMode::None,
            false,
        );

        let exports = set.exports();
        let names: Vec<&str> = exports.iter().map(|e| e.name()).collect();

        assert_eq!(names, ["lun2", "lun0"]);
        assert_eq!(set.get("lun0").map(|e| e.size()), Some(4 * 4096));
        assert!(set.get("lun1").is_none());
    }

    #[tokio::test]
    async fn info_reports_size_blocks_and_capabilities() {
        let mut thin = TestLun::new(MemBackend::new(4096, 32).with_max_transfer(64 << 10));
        thin.lbprz = true;
        let set = set_of(
            vec![
                (1, thin),
                (2, TestLun::new(MemBackend::new(512, 64).read_only(true))),
            ],
            CacheMode::WriteThrough,
            false,
        );

        let thin = set.exports()[0].info();
        let ro = set.exports()[1].info();

        assert_eq!(thin.size, 32 * 4096);
        assert_eq!((thin.block_size, thin.preferred_size), (4096, 4096));
        assert_eq!(thin.max_transfer, 64 << 10);
        assert!(thin.can_trim && thin.fast_zero && !thin.read_only);
        assert_eq!(ro.block_size, 512);
        assert!(ro.read_only && !ro.can_trim && !ro.fast_zero);
        assert!(!set.all_read_only());
    }

    #[tokio::test]
    async fn write_across_the_end_is_short_and_at_the_end_is_no_space() {
        let (set, lun) = one(MemBackend::new(512, 8), CacheMode::WriteThrough);
        let e = &set.exports()[0];

        let short = e.write(4000, Bytes::from(vec![9u8; 200]), false).await;
        let at_end = e.write(4096, Bytes::from_static(b"x"), false).await;

        assert_eq!(short.expect("short write"), 96);
        assert_eq!(lun.mem.bytes_at(4000, 96), vec![9u8; 96]);
        let err = at_end.expect_err("no space");
        assert!(matches!(
            err,
            ExportError::NoSpace {
                offset: 4096,
                size: 4096,
                ..
            }
        ));
        assert_eq!(err.to_errno(), errno::ENOSPC);
    }

    #[tokio::test]
    async fn check_range_refuses_reads_and_trims_with_einval_writes_with_enospc() {
        let (set, _) = one(MemBackend::new(512, 8), CacheMode::None);
        let e = &set.exports()[0];

        let read = e.check_range(Access::Read, 4000, 200).unwrap_err();
        let trim = e.check_range(Access::Trim, u64::MAX, 2).unwrap_err();
        let write = e.check_range(Access::Write, 4000, 200).unwrap_err();
        let zero = e.check_range(Access::Zero, 4096, 1).unwrap_err();

        assert_eq!(read.to_errno(), errno::EINVAL);
        assert_eq!(trim.to_errno(), errno::EINVAL);
        assert_eq!(write.to_errno(), errno::ENOSPC);
        assert_eq!(zero.to_errno(), errno::ENOSPC);
        assert!(e.check_range(Access::Write, 0, 4096).is_ok());
        assert!(e.check_range(Access::Read, 4096, 0).is_ok());
    }

    #[tokio::test]
    async fn reads_are_clipped_and_read_only_refuses_every_change() {
        let bytes: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let (set, _) = one(MemBackend::from_data(512, bytes.clone()), CacheMode::None);
        let ro = set_of(
            vec![(1, TestLun::new(MemBackend::new(512, 8)))],
            CacheMode::None,
            true,
        );
        let r = &ro.exports()[0];

        let tail = set.exports()[0].read(4000, 1000).await.expect("read");
        let past = set.exports()[0].read(5000, 10).await.expect("read");

        assert_eq!(&tail[..], &bytes[4000..]);
        assert!(past.is_empty());
        for err in [
            r.write(0, Bytes::from_static(b"x"), false)
                .await
                .unwrap_err(),
            r.write_zeroes(0, 512, ZeroMode::Allocate)
                .await
                .unwrap_err(),
            r.trim(0, 512).await.unwrap_err(),
        ] {
            assert!(matches!(err, ExportError::ReadOnly { .. }), "{err:?}");
            assert_eq!(err.to_errno(), errno::EROFS);
        }
        assert!(ro.all_read_only());
    }

    #[tokio::test]
    async fn failed_requests_are_counted_by_kind() {
        let (set, lun) = one(MemBackend::new(512, 8), CacheMode::None);
        let e = &set.exports()[0];
        let ro = set_of(
            vec![(1, TestLun::new(MemBackend::new(512, 8)))],
            CacheMode::None,
            true,
        );

        lun.mem.fail_next(MemOp::Read, 1, errno::EIO);
        let target = e.read(0, 512).await.unwrap_err();
        lun.mem.fail_next(MemOp::Write, 1, errno::ENOSPC);
        let full = e
            .write(0, Bytes::from(vec![1u8; 512]), false)
            .await
            .unwrap_err();
        let past = e.write(8 * 512, Bytes::from(vec![1u8; 512]), false).await;
        let refused = ro.exports()[0].trim(0, 512).await.unwrap_err();
        e.read(0, 512).await.expect("the next read works");

        assert_eq!(target.class(), ErrorClass::Target);
        assert_eq!(full.class(), ErrorClass::NoSpace);
        assert_eq!(past.unwrap_err().class(), ErrorClass::NoSpace);
        assert_eq!(refused.class(), ErrorClass::ReadOnly);
        let counted: Vec<(String, u64)> = e.meter().errors().into_iter().collect();
        assert_eq!(
            counted,
            vec![("no_space".to_string(), 2), ("target".to_string(), 1)]
        );
        assert_eq!(
            ro.exports()[0]
                .meter()
                .errors()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![("read_only".to_string(), 1)]
        );
        let m = e.meter();
        assert_eq!((m.read.counts().errors, m.write.counts().errors), (1, 2));
    }

    #[tokio::test]
    async fn fua_writes_carry_fua_and_flush_sends_synchronize_cache() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];

        e.write(0, Bytes::from(vec![1u8; 512]), true).await.unwrap();
        e.flush().await.unwrap();

        assert!(lun.mem.log().iter().any(|c| c.op == MemOp::Write && c.fua));
        assert_eq!(lun.mem.counts().flushes, 1);
        assert!(!e.unsynced());
    }

    #[tokio::test]
    async fn zeroing_may_unmap_only_where_unmapped_blocks_read_as_zeros() {
        let mut thin = TestLun::new(MemBackend::from_data(512, vec![0xAA; 64 * 512]));
        thin.lbprz = true;
        let thick = TestLun::new(MemBackend::from_data(512, vec![0xAA; 64 * 512]));
        let set = set_of(
            vec![(1, thin.clone()), (2, thick.clone())],
            CacheMode::WriteThrough,
            false,
        );

        set.exports()[0]
            .write_zeroes(300, 2000, ZeroMode::MayUnmap)
            .await
            .unwrap();
        set.exports()[1]
            .write_zeroes(300, 2000, ZeroMode::MayUnmap)
            .await
            .unwrap();
        set.exports()[0]
            .write_zeroes(8192, 1024, ZeroMode::Allocate)
            .await
            .unwrap();

        for lun in [&thin, &thick] {
            assert_eq!(lun.mem.bytes_at(300, 2000), vec![0u8; 2000]);
            assert_eq!(lun.mem.bytes_at(299, 1), vec![0xAA]);
            assert_eq!(lun.mem.bytes_at(2300, 1), vec![0xAA]);
        }
        assert_eq!(thin.mem.counts().unmaps, 1, "blocks 1..4 unmapped once");
        assert_eq!(thick.mem.counts().unmaps, 0);
        assert_eq!(thin.mem.bytes_at(8192, 1024), vec![0u8; 1024]);
    }

    #[tokio::test]
    async fn trim_unmaps_whole_blocks_only_where_the_lun_can() {
        let mut thin = TestLun::new(MemBackend::new(512, 64));
        thin.lbpu = true;
        let thick = TestLun::new(MemBackend::new(512, 64));
        let set = set_of(
            vec![(1, thin.clone()), (2, thick.clone())],
            CacheMode::None,
            false,
        );

        set.exports()[0].trim(100, 2000).await.unwrap();
        set.exports()[1].trim(100, 2000).await.unwrap();

        assert_eq!(thin.mem.counts().unmaps, 1);
        assert_eq!(thick.mem.counts().unmaps, 0);
        assert_eq!(thick.mem.counts().writes, 0, "a trim never writes");
    }

    #[tokio::test]
    async fn prefetch_fills_the_cache_so_reads_hit() {
        let (set, lun) = one(MemBackend::new(512, 256), CacheMode::WriteThrough);
        let e = &set.exports()[0];

        e.prefetch(0, 64 << 10).await.unwrap();
        let reads_after_prefetch = lun.mem.counts().reads;
        e.read(4096, 4096).await.unwrap();

        assert!(reads_after_prefetch > 0);
        assert_eq!(
            lun.mem.counts().reads,
            reads_after_prefetch,
            "served from cache"
        );
        assert!(e.device().stats().hits > 0);
    }

    #[tokio::test]
    async fn capacity_change_swaps_in_a_device_of_the_new_size() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteThrough);
        let e = &set.exports()[0];

        let unreported = e.refresh_capacity().await;
        lun.resize(MemBackend::new(512, 128));
        let grown = e.refresh_capacity().await;
        let again = e.refresh_capacity().await;

        assert_eq!(unreported, None, "no report, no re-read");
        assert_eq!(grown, Some(128 * 512));
        assert_eq!(again, None);
        assert_eq!(e.size(), 128 * 512);
        assert_eq!(
            e.write(100 * 512, Bytes::from(vec![3u8; 512]), false)
                .await
                .unwrap(),
            512
        );
    }

    #[tokio::test]
    async fn capacity_change_writes_the_old_cache_back_before_the_swap() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = set.exports()[0].clone();
        e.write(0, Bytes::from(vec![7u8; 1024]), false)
            .await
            .unwrap();
        let old = lun.mem.clone();

        lun.resize(MemBackend::new(512, 128));
        let grown = e.refresh_capacity().await;

        assert_eq!(grown, Some(128 * 512));
        // On the old LUN before any request reaches the new device, not
        // later from a background task.
        assert_eq!(old.bytes_at(0, 1024), vec![7u8; 1024]);
        assert_eq!(e.dirty_bytes(), 0);
    }

    #[tokio::test]
    async fn data_a_shrink_leaves_unwritable_is_reported_lost_at_the_end() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = set.exports()[0].clone();
        e.write(60 * 512, Bytes::from(vec![9u8; 512]), false)
            .await
            .unwrap();
        // The target refuses writes past its new end (LBA out of range).
        lun.mem.fail_next(MemOp::Write, u32::MAX, errno::EINVAL);

        lun.resize(MemBackend::new(512, 32));
        let shrunk = e.refresh_capacity().await;
        let report = set.finish().await;

        assert_eq!(shrunk, Some(32 * 512));
        assert_eq!(report.lost.len(), 1, "{report:?}");
        assert!(matches!(
            report.lost[0].error,
            ExportError::LostInResize { .. }
        ));
        assert_eq!(report.lost[0].dirty_bytes, 512);
    }

    #[tokio::test]
    async fn a_removed_export_fails_with_enodev_and_its_cached_data_is_reported_lost() {
        let set = set_of(
            vec![
                (1, TestLun::new(MemBackend::new(512, 64))),
                (2, TestLun::new(MemBackend::new(512, 64))),
            ],
            CacheMode::WriteBack,
            false,
        );
        let two = set.get("lun2").unwrap();
        two.write(0, Bytes::from(vec![5u8; 512]), false)
            .await
            .unwrap();
        let before = set.generation();

        let removed = set.remove(2).map(|e| e.number());
        let read = two.read(0, 512).await.unwrap_err();
        let report = set.finish().await;

        assert_eq!(removed, Some(2));
        assert!(set.remove(2).is_none(), "once");
        assert!(set.generation() > before);
        assert!(set.get("lun2").is_none() && set.get("lun1").is_some());
        assert!(matches!(read, ExportError::Gone { .. }));
        assert_eq!(read.to_errno(), errno::ENODEV);
        assert_eq!(report.lost.len(), 1, "{report:?}");
        assert_eq!(
            (report.lost[0].export.as_str(), report.lost[0].dirty_bytes),
            ("lun2", 512)
        );
    }

    #[tokio::test]
    async fn an_added_export_joins_the_set_with_its_settings() {
        let set = set_of(
            vec![(1, TestLun::new(MemBackend::new(512, 64)))],
            CacheMode::WriteThrough,
            true,
        );
        let before = set.generation();

        let added = set.add(3, TestLun::new(MemBackend::new(4096, 8))).unwrap();

        assert!(set.generation() > before);
        let exports = set.exports();
        let names: Vec<&str> = exports.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["lun1", "lun3"]);
        assert_eq!(added.size(), 8 * 4096);
        assert!(added.read_only(), "the set's --read-only applies");
        assert!(set.by_number(3).is_some());
    }

    #[tokio::test]
    async fn shut_down_refuses_requests_and_finish_still_writes_back() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];
        e.write(0, Bytes::from(vec![7u8; 1024]), false)
            .await
            .unwrap();

        set.shut_down();
        let read = e.read(0, 512).await.unwrap_err();
        let report = set.finish().await;

        assert!(matches!(read, ExportError::ShutDown { .. }));
        assert_eq!(read.to_errno(), errno::EIO);
        assert!(!report.data_lost(), "{report:?}");
        assert_eq!(lun.mem.bytes_at(0, 1024), vec![7u8; 1024]);
    }

    #[tokio::test]
    async fn finish_reports_lost_data_when_write_back_fails() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];
        e.write(512, Bytes::from(vec![7u8; 4096]), false)
            .await
            .unwrap();
        lun.mem.fail_next(MemOp::Write, u32::MAX, errno::EIO);

        let report = set.finish().await;

        assert!(report.data_lost());
        assert_eq!(report.lost[0].export, "lun4");
        assert_eq!(report.lost[0].dirty_bytes, 4096);
        let msg = report.into_result().unwrap_err().to_string();
        assert!(
            msg.contains("lun4: 4096 bytes of cached data could not be written"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn finish_tries_the_target_again_before_declaring_cached_data_lost() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];
        e.write(512, Bytes::from(vec![7u8; 4096]), false)
            .await
            .unwrap();
        // The session gave up before the target came back: every command
        // fails until a fresh login.
        lun.mem.fail_next(MemOp::Write, u32::MAX, errno::EIO);
        lun.back_on_reconnect.store(true, Ordering::SeqCst);

        let report = set.finish().await;

        assert!(!report.data_lost(), "{report:?}");
        assert_eq!(lun.reconnects.load(Ordering::SeqCst), 1);
        assert_eq!(lun.mem.bytes_at(512, 4096), vec![7u8; 4096]);
    }

    #[tokio::test]
    async fn finish_gives_up_after_its_rounds_when_the_target_stays_away() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];
        e.write(0, Bytes::from(vec![7u8; 4096]), false)
            .await
            .unwrap();
        lun.mem.fail_next(MemOp::Write, u32::MAX, errno::EIO);

        let report = set.finish().await;

        assert!(report.data_lost());
        assert_eq!(report.lost[0].dirty_bytes, 4096, "still held, not dropped");
        assert_eq!(
            lun.reconnects.load(Ordering::SeqCst),
            u64::from(FINAL_FLUSH_ROUNDS - 1)
        );
    }

    #[tokio::test]
    async fn finish_reports_unsynced_writes_when_the_final_flush_fails() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteThrough);
        let e = &set.exports()[0];
        e.write(0, Bytes::from(vec![1u8; 512]), false)
            .await
            .unwrap();
        lun.mem.fail_next(MemOp::Flush, u32::MAX, errno::EIO);

        let report = set.finish().await;

        assert!(report.data_lost());
        assert_eq!(report.lost[0].dirty_bytes, 0);
        assert!(report
            .into_result()
            .unwrap_err()
            .to_string()
            .contains("could not be flushed to stable storage"));
    }

    #[tokio::test]
    async fn fua_writes_need_no_final_flush() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteBack);
        let e = &set.exports()[0];
        e.write(0, Bytes::from(vec![1u8; 512]), true).await.unwrap();
        lun.mem.fail_next(MemOp::Flush, u32::MAX, errno::EIO);

        let unsynced = e.unsynced();
        let report = set.finish().await;

        assert!(!unsynced);
        assert!(!report.data_lost(), "{report:?}");
        assert_eq!(lun.mem.bytes_at(0, 512), vec![1u8; 512]);
    }

    #[tokio::test]
    async fn finish_does_not_flush_exports_nothing_was_written_to() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::WriteThrough);
        let e = &set.exports()[0];
        e.read(0, 4096).await.unwrap();
        e.write(0, Bytes::from(vec![1u8; 512]), false)
            .await
            .unwrap();
        e.flush().await.unwrap();
        lun.mem.fail_next(MemOp::Flush, u32::MAX, errno::EIO);

        let report = set.finish().await;

        assert!(!report.data_lost(), "{report:?}");
        assert_eq!(lun.mem.counts().flushes, 1, "only the explicit flush");
    }

    #[tokio::test]
    async fn device_errors_keep_their_errno() {
        let (set, lun) = one(MemBackend::new(512, 64), CacheMode::None);
        lun.mem.fail_next(MemOp::Read, 1, errno::ENOSPC);

        let err = set.exports()[0].read(0, 512).await.unwrap_err();

        assert!(err.device().is_some());
        assert_eq!(err.to_errno(), errno::ENOSPC);
    }
}
