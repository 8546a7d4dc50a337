//! The FUSE front end: each LUN of a target as a regular file.
//!
//! `rlun mount` builds a [`LunFs`] (one [`LunFile`] per export of an
//! [`ExportSet`], each over its own [`LunDevice`]) and hands a [`FuseFs`] adapter to the
//! `fuser` crate, which mounts it through `fusermount3` (no libfuse link)
//! and runs the `/dev/fuse` read loop on its own thread.
//!
//! # Layout
//!
//! The root directory (inode 1) holds one regular file per LUN, named
//! `lun<N>` after its LUN number (`lun1`, `lun2`…), inode `2 + index`. The
//! file's size is the LUN's capacity; its owner, group and permission bits
//! come from the mount options; a write-protected LUN (or `--read-only`)
//! has no write bits and answers `EROFS` to writes. Nothing can be created,
//! removed or renamed (`EPERM`).
//!
//! # Requests
//!
//! The `fuser` thread only decodes a request and spawns it onto the Tokio
//! runtime; the task does the I/O and sends the reply itself, so requests
//! run in parallel and no lock is held across network I/O (the device's
//! own block range locks aside). Reads and writes of up to [`MAX_IO`]
//! bytes arrive in one request (`max_write`, `max_pages`; fuser asks for
//! `FUSE_MAX_PAGES` and derives `max_pages` from `max_write`), reads
//! asynchronously (`FUSE_ASYNC_READ`), and `O_DIRECT` AIO with
//! `FUSE_ASYNC_DIO` keeps a whole queue depth in flight. A read reply is
//! one `writev` of fuser's header and rlun's data buffer (no copy in user
//! space; the kernel copies it into the page cache or the caller's
//! buffer).
//!
//! Every rule about the LUNs themselves — which LUNs, clipping at the end,
//! `ENOSPC`, unmap-or-zero, FUA, flush, capacity changes, shutdown — lives
//! in the export layer ([`crate::export`]), shared with the NBD front end;
//! this module maps FUSE requests onto it and its errors onto errno
//! ([`ExportError::to_errno`]), and adds what only a filesystem has:
//! inodes, attributes, open flags and the kernel's read-ahead.
//!
//! | request | what rlun does |
//! | --- | --- |
//! | read | [`Export::read`]: clipped at the end of the LUN |
//! | write | [`Export::write`] (with FUA for `O_SYNC`/`O_DSYNC` files), in [`WRITE_SPLIT`] pieces at once when larger; a write past the end is short, one at the end gets `ENOSPC` |
//! | fsync, fdatasync | [`Export::flush`]: dirty pages, then SYNCHRONIZE CACHE (SBC-4 §5.26) |
//! | fallocate `PUNCH_HOLE\|KEEP_SIZE` | [`Export::write_zeroes`] with [`ZeroMode::MayUnmap`]: UNMAP when the LUN reports LBPU and LBPRZ (unmapped blocks read as zeros), else WRITE SAME of zeros: the range always reads back as zeros, as `fallocate(2)` promises |
//! | fallocate `ZERO_RANGE` | [`Export::write_zeroes`] with [`ZeroMode::Allocate`] (WRITE SAME, SBC-4 §5.50, falling back to writing zeros) |
//! | fallocate mode 0 / `KEEP_SIZE` | nothing to do inside the LUN (`EFBIG` past its end without `KEEP_SIZE`) |
//! | truncate, `O_TRUNC` | ignored, as for a block device (`EFBIG` to grow past the LUN) |
//! | getattr | size from the device; [`Export::refresh_capacity`] first, so a capacity change shows |
//! | statfs | the LUNs' total size, nothing free |
//!
//! # Caching
//!
//! By default files are opened with `FOPEN_KEEP_CACHE`: the kernel page
//! cache serves repeated reads and mmap works, and it stays coherent
//! because every write goes through this mount (rlun assumes it is the LUN's
//! only writer). `--direct-io` opens them with `FOPEN_DIRECT_IO` instead:
//! every read and write reaches rlun with the caller's own size, which is
//! what a LUN shared with other initiators needs (together with
//! `--cache none`). Under either, the [`LunDevice`] cache mode applies;
//! `rlun mount` defaults to `none` over the page cache (a second copy costs
//! memory and a copy per read: sequential reads measured about twice as
//! fast without it) and to `write-through` with `--direct-io`. It also
//! raises the kernel's read-ahead window on the mount from 128 KiB to
//! [`KERNEL_READAHEAD`] (8 MiB, `/sys/class/bdi/<dev>/read_ahead_kb`): the
//! kernel sends a window as 1 MiB requests all at once, so a sequential
//! reader keeps up to eight in flight (at 1 MiB it kept at most two).
//!
//! # Write-back caching in the kernel (`--writeback-cache on`)
//!
//! Off by default. Without it every buffered `write(2)` is one request that
//! rlun completes before the call returns: a writer such as `dd` has one
//! write in flight. With it (`FUSE_WRITEBACK_CACHE`) writes complete in the
//! page cache and the kernel writes them back as 1 MiB requests, dozens at
//! once. What stays guaranteed: `fsync`/`fdatasync` write the file's dirty
//! pages back, wait for them, then reach [`Export::flush`] (SYNCHRONIZE
//! CACHE); `close` writes the dirty pages back and waits before it returns,
//! and reports a failure; unmounting (`rlun umount`, SIGTERM) writes them
//! back before rlun logs out. What changes: until one of those, written
//! data exists only in the kernel's memory, so if rlun dies (SIGKILL, a
//! crash) it is lost although `write(2)` succeeded; the application learns
//! it only from a failing `fsync` or `close`. The kernel also keeps the
//! file size itself: a write past the end of the LUN fails at write-back
//! (`fsync`/`close`) instead of at `write(2)`, and a capacity change of the
//! LUN shows only after a remount. `--direct-io` and read-only mounts never
//! use it.
//!
//! # Counters
//!
//! [`FuseStats`] counts what the kernel sends (reads and writes, their
//! largest size, most in flight at once); `rlun mount` logs it at unmount.
//!
//! # Capacity changes
//!
//! A file's getattr asks the export to follow a capacity change
//! ([`Export::refresh_capacity`]); the kernel learns the new size at the
//! next getattr ([`ATTR_TTL`]).

use std::ffi::OsStr;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tracing::debug;

#[cfg(doc)]
use crate::device::LunDevice;
use crate::device::{DeviceConfig, DeviceError};
pub use crate::export::LunBackend;
use crate::export::{Export, ExportError, ExportSet, ZeroMode};

/// Largest read or write one FUSE request carries (`max_write`, and
/// `max_pages` for reads).
pub const MAX_IO: u32 = 1 << 20;
/// The kernel read-ahead window `rlun mount` sets on its mount
/// (`/sys/class/bdi/<dev>/read_ahead_kb`): the kernel splits a window into
/// requests of [`MAX_IO`] and sends them all at once (`FUSE_ASYNC_READ`),
/// so a sequential reader keeps up to eight 1 MiB reads in flight, the
/// queue depth of the `rlun bench --bs 1M --qd 8` reference. A 1 MiB
/// window kept at most two in flight and read about half as fast.
pub const KERNEL_READAHEAD: u32 = 8 * MAX_IO;
/// A write request larger than this goes to the LUN as several commands
/// at once, split on multiples of it ([`LunFs::write`]): a buffered writer
/// such as `dd` has only one request in flight, and a 1 MiB SCSI WRITE
/// moves its data burst after burst (one R2T each), while four 256 KiB
/// WRITEs move theirs in parallel.
pub const WRITE_SPLIT: usize = 256 << 10;
/// How long the kernel may cache attributes and directory entries.
pub const ATTR_TTL: Duration = Duration::from_secs(1);
/// Background requests (read-ahead, async direct I/O) the kernel keeps in
/// flight before it throttles.
const MAX_BACKGROUND: u16 = 128;

/// Inode of the first LUN file.
const FIRST_FILE_INO: u64 = 2;

/// `fallocate(2)` mode bits (linux/falloc.h).
pub mod falloc {
    pub const KEEP_SIZE: i32 = 0x01;
    pub const PUNCH_HOLE: i32 = 0x02;
    pub const ZERO_RANGE: i32 = 0x10;
}

/// `open(2)` flags that ask for synchronous writes (asm-generic/fcntl.h:
/// `O_DSYNC`, and `O_SYNC` = `__O_SYNC | O_DSYNC`).
const O_DSYNC: i32 = 0o010000;

/// How the files look: owner, permissions, caching.
#[derive(Debug, Clone)]
pub struct FsOptions {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits of a writable LUN file (write bits are removed for
    /// read-only ones).
    pub mode: u16,
    /// Refuse writes to every LUN.
    pub read_only: bool,
    /// Open files with `FOPEN_DIRECT_IO` (bypass the kernel page cache).
    pub direct_io: bool,
    /// Ask the kernel for write-back caching (`FUSE_WRITEBACK_CACHE`):
    /// buffered writes complete in the page cache and reach rlun as large
    /// write-back requests, several at once. Ignored with `direct_io` and
    /// for read-only mounts.
    pub writeback_cache: bool,
}

impl Default for FsOptions {
    fn default() -> FsOptions {
        FsOptions {
            uid: 0,
            gid: 0,
            mode: 0o600,
            read_only: false,
            direct_io: false,
            writeback_cache: false,
        }
    }
}

/// The file name of LUN `number` (its export name).
pub fn lun_file_name(number: u64) -> String {
    crate::export::export_name(number)
}

/// One LUN shown as a file: an export and its inode.
pub struct LunFile<B: LunBackend> {
    export: Arc<Export<B>>,
    ino: u64,
}

impl<B: LunBackend> LunFile<B> {
    pub fn name(&self) -> &str {
        self.export.name()
    }
    pub fn number(&self) -> u64 {
        self.export.number()
    }
    pub fn ino(&self) -> u64 {
        self.ino
    }
    /// The export behind the file.
    pub fn export(&self) -> &Arc<Export<B>> {
        &self.export
    }
    /// Writes are refused (write-protected LUN or `--read-only`).
    pub fn read_only(&self) -> bool {
        self.export.read_only()
    }
    pub fn size(&self) -> u64 {
        self.export.size()
    }
}

/// The filesystem: a root directory of LUN files. Its methods do the work
/// of each request and return an [`Errno`] on failure; [`FuseFs`] wires them
/// to the kernel.
pub struct LunFs<B: LunBackend> {
    set: ExportSet<B>,
    files: Vec<LunFile<B>>,
    opts: FsOptions,
    mounted_at: SystemTime,
}

/// Errno for an export error ([`ExportError::to_errno`]).
fn errno(e: &ExportError) -> Errno {
    Errno::from_i32(e.to_errno())
}

impl<B: LunBackend> LunFs<B> {
    /// Build the filesystem from `(lun number, backend)` pairs, each given
    /// a [`LunDevice`] with `cfg`. Must run inside a Tokio runtime.
    pub fn new(
        luns: Vec<(u64, B)>,
        cfg: &DeviceConfig,
        opts: FsOptions,
    ) -> Result<LunFs<B>, DeviceError> {
        let set = ExportSet::new(luns, cfg, opts.read_only)?;
        Ok(LunFs::from_exports(set, opts))
    }

    /// The filesystem of an export set: one file per export, in order.
    pub fn from_exports(set: ExportSet<B>, opts: FsOptions) -> LunFs<B> {
        let files = set
            .exports()
            .iter()
            .enumerate()
            .map(|(i, e)| LunFile {
                export: e.clone(),
                ino: FIRST_FILE_INO + i as u64,
            })
            .collect();
        LunFs {
            set,
            files,
            opts,
            mounted_at: SystemTime::now(),
        }
    }

    pub fn files(&self) -> &[LunFile<B>] {
        &self.files
    }

    /// The exports behind the files (flush, shutdown, lost-data report).
    pub fn exports(&self) -> &ExportSet<B> {
        &self.set
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Every LUN is read-only (the mount can be `ro`).
    pub fn all_read_only(&self) -> bool {
        self.set.all_read_only()
    }

    /// The file with inode `ino`.
    pub fn file(&self, ino: u64) -> Option<&LunFile<B>> {
        let idx = ino.checked_sub(FIRST_FILE_INO)?;
        self.files.get(usize::try_from(idx).ok()?)
    }

    /// The file called `name` in the root directory.
    pub fn lookup(&self, name: &OsStr) -> Option<&LunFile<B>> {
        self.files.iter().find(|f| OsStr::new(f.name()) == name)
    }

    /// Attributes of the root directory.
    pub fn root_attr(&self) -> FileAttr {
        // Whoever may read a LUN file may list the directory.
        let m = self.opts.mode;
        let perm =
            0o700 | if m & 0o040 != 0 { 0o050 } else { 0 } | if m & 0o004 != 0 { 0o005 } else { 0 };
        FileAttr {
            ino: INodeNo::ROOT,
            size: 0,
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: FileType::Directory,
            perm,
            nlink: 2,
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Attributes of a LUN file: size = capacity, write bits only when
    /// writable.
    pub fn file_attr(&self, f: &LunFile<B>) -> FileAttr {
        let info = f.export.info();
        let mut perm = self.opts.mode & 0o7777;
        if info.read_only {
            perm &= !0o222;
        }
        FileAttr {
            ino: INodeNo(f.ino),
            size: info.size,
            blocks: info.size.div_ceil(512),
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: FileType::RegularFile,
            perm,
            nlink: 1,
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
            blksize: info.preferred_size,
            flags: 0,
        }
    }

    /// Open flags for the kernel: direct I/O or keep the page cache, and
    /// parallel direct writes (the device orders overlapping ones itself).
    pub fn open_flags(&self) -> FopenFlags {
        let base = if self.opts.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        };
        base | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
    }

    /// Check an open: writing a read-only LUN is `EROFS`.
    pub fn check_open(&self, f: &LunFile<B>, flags: OpenFlags) -> Result<(), Errno> {
        let writes = flags.acc_mode() != OpenAccMode::O_RDONLY;
        if writes && f.read_only() {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    /// Refuse every later read, write, fsync and fallocate with `EIO`
    /// (the mount is going away while files are still open).
    pub fn shut_down(&self) {
        self.set.shut_down();
    }

    /// Read up to `size` bytes at `offset` (fewer at the end of the LUN).
    pub async fn read(&self, f: &LunFile<B>, offset: u64, size: u32) -> Result<Bytes, Errno> {
        f.export
            .read(offset, size as usize)
            .await
            .map_err(|e| errno(&e))
    }

    /// Write `data` at `offset`; returns the bytes written (short at the
    /// end of the LUN, `ENOSPC` at or past it). `sync` writes with FUA.
    ///
    /// More than [`WRITE_SPLIT`] bytes go out as several writes at once,
    /// cut on multiples of `WRITE_SPLIT` (so no two share a block). All of
    /// them have finished when this returns. The count is that of the
    /// leading pieces written in full: a piece cut short at the end of the
    /// LUN, or failing after others were written, ends it (a short write,
    /// as `write(2)` reports a partial one); a failure of the first piece
    /// is the error.
    pub async fn write(
        &self,
        f: &LunFile<B>,
        offset: u64,
        data: Bytes,
        sync: bool,
    ) -> Result<u32, Errno> {
        if data.len() <= WRITE_SPLIT {
            return f
                .export
                .write(offset, data, sync)
                .await
                .map_err(|e| errno(&e));
        }
        let split = WRITE_SPLIT as u64;
        let mut pieces = Vec::with_capacity(data.len().div_ceil(WRITE_SPLIT) + 1);
        let mut pos = 0;
        while pos < data.len() {
            let at = offset.saturating_add(pos as u64);
            let room = split - at % split;
            let len = usize::try_from(room).map_or(data.len() - pos, |r| r.min(data.len() - pos));
            let piece = data.slice(pos..pos + len);
            let export = f.export.clone();
            let task = tokio::spawn(async move { export.write(at, piece, sync).await });
            pieces.push((len, task));
            pos += len;
        }
        let mut written: u32 = 0;
        let mut first_error = None;
        let mut ended = false;
        for (len, task) in pieces {
            // Wait for every piece, also after a failure: none may still
            // be writing when the kernel hears back.
            let r = task.await;
            if ended {
                continue;
            }
            match r {
                Ok(Ok(n)) => {
                    written += n;
                    ended = n as usize != len;
                }
                Ok(Err(e)) => {
                    if written == 0 {
                        first_error = Some(errno(&e));
                    }
                    ended = true;
                }
                Err(_) => {
                    if written == 0 {
                        first_error = Some(Errno::EIO);
                    }
                    ended = true;
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// fsync / fdatasync: write back dirty data, then SYNCHRONIZE CACHE.
    pub async fn fsync(&self, f: &LunFile<B>) -> Result<(), Errno> {
        f.export.flush().await.map_err(|e| errno(&e))
    }

    /// `fallocate(2)` with `mode` on `offset..offset+len`; see the module
    /// docs for what each mode does.
    pub async fn fallocate(
        &self,
        f: &LunFile<B>,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        use falloc::*;
        let size = f.size();
        let keep = mode & KEEP_SIZE != 0;
        let Some(end) = offset.checked_add(len) else {
            return Err(Errno::EFBIG);
        };
        if end > size && !keep {
            return Err(Errno::EFBIG);
        }
        let op = mode & !KEEP_SIZE;
        let zero = match op {
            // Every block of a LUN is already there to be written.
            0 => return Ok(()),
            PUNCH_HOLE if keep => ZeroMode::MayUnmap,
            ZERO_RANGE => ZeroMode::Allocate,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        f.export
            .write_zeroes(offset, len, zero)
            .await
            .map_err(|e| errno(&e))
    }

    /// Re-read the capacity when the session reported a change since the
    /// last look ([`Export::refresh_capacity`]).
    pub async fn refresh_capacity(&self, f: &LunFile<B>) {
        f.export.refresh_capacity().await;
    }

    /// Flush every LUN (dirty write-back data, then SYNCHRONIZE CACHE).
    /// Returns the first failure after trying all.
    pub async fn flush_all(&self) -> Result<(), ExportError> {
        self.set.flush_all().await
    }

    /// Bytes written into caches and not yet to the targets.
    pub fn dirty_bytes(&self) -> u64 {
        self.set.dirty_bytes()
    }
}

/// What the kernel sent: how many reads and writes, how large and how many
/// at once. Logged when the mount ends; tests read it from the log to check
/// that the negotiated limits hold (large requests, several in flight).
#[derive(Debug, Default)]
pub struct FuseStats {
    reads: OpStats,
    writes: OpStats,
}

#[derive(Debug, Default)]
struct OpStats {
    count: AtomicU64,
    bytes: AtomicU64,
    largest: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// A snapshot of [`FuseStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FuseCounters {
    pub reads: u64,
    pub read_bytes: u64,
    /// Largest read request, bytes.
    pub largest_read: u64,
    /// Most read requests rlun was serving at once.
    pub max_reads_in_flight: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub largest_write: u64,
    pub max_writes_in_flight: u64,
}

impl std::fmt::Display for FuseCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reads={} read_bytes={} largest_read={} max_reads_in_flight={} writes={} \
             write_bytes={} largest_write={} max_writes_in_flight={}",
            self.reads,
            self.read_bytes,
            self.largest_read,
            self.max_reads_in_flight,
            self.writes,
            self.write_bytes,
            self.largest_write,
            self.max_writes_in_flight
        )
    }
}

impl FuseStats {
    pub fn counters(&self) -> FuseCounters {
        let r = &self.reads;
        let w = &self.writes;
        FuseCounters {
            reads: r.count.load(Relaxed),
            read_bytes: r.bytes.load(Relaxed),
            largest_read: r.largest.load(Relaxed),
            max_reads_in_flight: r.max_in_flight.load(Relaxed),
            writes: w.count.load(Relaxed),
            write_bytes: w.bytes.load(Relaxed),
            largest_write: w.largest.load(Relaxed),
            max_writes_in_flight: w.max_in_flight.load(Relaxed),
        }
    }

    /// Count a request of `size` bytes; it is in flight until the guard
    /// drops (after the reply).
    fn start(self: &Arc<Self>, write: bool, size: u64) -> InFlight {
        let op = if write { &self.writes } else { &self.reads };
        op.count.fetch_add(1, Relaxed);
        op.bytes.fetch_add(size, Relaxed);
        op.largest.fetch_max(size, Relaxed);
        let now = op.in_flight.fetch_add(1, Relaxed) + 1;
        op.max_in_flight.fetch_max(now, Relaxed);
        InFlight {
            stats: self.clone(),
            write,
        }
    }
}

/// One request in flight ([`FuseStats::start`]).
struct InFlight {
    stats: Arc<FuseStats>,
    write: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let op = if self.write {
            &self.stats.writes
        } else {
            &self.stats.reads
        };
        op.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The `fuser` adapter: decodes requests, spawns the work of each onto the
/// Tokio runtime and replies from the task.
pub struct FuseFs<B: LunBackend> {
    fs: Arc<LunFs<B>>,
    rt: tokio::runtime::Handle,
    stats: Arc<FuseStats>,
}

impl<B: LunBackend> FuseFs<B> {
    pub fn new(fs: Arc<LunFs<B>>, rt: tokio::runtime::Handle) -> FuseFs<B> {
        FuseFs {
            fs,
            rt,
            stats: Arc::default(),
        }
    }

    /// The request counters (shared: still readable once the session owns
    /// the adapter).
    pub fn stats(&self) -> Arc<FuseStats> {
        self.stats.clone()
    }

    /// Whether to ask the kernel for write-back caching.
    fn wants_writeback_cache(&self) -> bool {
        let o = &self.fs.opts;
        o.writeback_cache && !o.direct_io && !self.fs.all_read_only()
    }

    /// Run `work` on the runtime with the file of `ino`; `ENOENT` (or
    /// `EISDIR` for the root) when there is no such file.
    fn with_file<R, F, Fut>(&self, ino: INodeNo, reply: R, fail: fn(R, Errno), work: F)
    where
        R: Send + 'static,
        F: FnOnce(Arc<LunFs<B>>, usize, R) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if ino == INodeNo::ROOT {
            return fail(reply, Errno::EISDIR);
        }
        let Some(idx) = ino
            .0
            .checked_sub(FIRST_FILE_INO)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < self.fs.files.len())
        else {
            return fail(reply, Errno::ENOENT);
        };
        self.rt.spawn(work(self.fs.clone(), idx, reply));
    }
}

impl<B: LunBackend> Filesystem for FuseFs<B> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(nearest) = config.set_max_write(MAX_IO) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(nearest);
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        // Async direct I/O: AIO on O_DIRECT keeps its queue depth in flight.
        // Async reads: the kernel sends a whole read-ahead window at once.
        let mut wanted = InitFlags::FUSE_ASYNC_DIO | InitFlags::FUSE_ASYNC_READ;
        if self.wants_writeback_cache() {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let supported = config.capabilities() & wanted;
        if config.add_capabilities(supported).is_err() {
            debug!("kernel refused FUSE capabilities {supported:?}");
        }
        if supported != wanted {
            debug!(
                "the kernel lacks FUSE capabilities {:?}",
                wanted.difference(supported)
            );
        }
        debug!(
            kernel_abi = %config.kernel_abi(),
            max_pages_flag = config.capabilities().contains(InitFlags::FUSE_MAX_PAGES),
            writeback_cache = supported.contains(InitFlags::FUSE_WRITEBACK_CACHE),
            "FUSE connection initialised"
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        match self.fs.lookup(name) {
            Some(f) => reply.entry(&ATTR_TTL, &self.fs.file_attr(f), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            return reply.attr(&ATTR_TTL, &self.fs.root_attr());
        }
        self.with_file(ino, reply, ReplyAttr::error, |fs, idx, reply| async move {
            let f = &fs.files[idx];
            f.export.refresh_capacity().await;
            reply.attr(&ATTR_TTL, &fs.file_attr(f));
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if mode.is_some() || uid.is_some() || gid.is_some() {
            // Owner and mode come from the mount options.
            return reply.error(Errno::EPERM);
        }
        if ino == INodeNo::ROOT {
            return reply.attr(&ATTR_TTL, &self.fs.root_attr());
        }
        let Some(f) = self.fs.file(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        match size {
            Some(_) if f.read_only() => reply.error(Errno::EROFS),
            // Like a block device: truncation is ignored, growth impossible.
            Some(s) if s > f.size() => reply.error(Errno::EFBIG),
            _ => reply.attr(&ATTR_TTL, &self.fs.file_attr(f)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino == INodeNo::ROOT {
            return reply.error(Errno::EISDIR);
        }
        let Some(f) = self.fs.file(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        match self.fs.check_open(f, flags) {
            Ok(()) => reply.opened(FileHandle(0), self.fs.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let in_flight = self.stats.start(false, u64::from(size));
        self.with_file(
            ino,
            reply,
            ReplyData::error,
            move |fs, idx, reply| async move {
                let _in_flight = in_flight;
                match fs.read(&fs.files[idx], offset, size).await {
                    Ok(data) => reply.data(&data),
                    Err(e) => reply.error(e),
                }
            },
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The request buffer is reused by the next request: one copy, into
        // a registered pool buffer when an iSER transport runs, so the
        // target fetches the data from there (`rlun_iscsi::iobuf`).
        let data = rlun_iscsi::iobuf::IoBuf::copy_from_slice(data).into_bytes();
        let sync = flags.0 & O_DSYNC != 0;
        let in_flight = self.stats.start(true, data.len() as u64);
        self.with_file(
            ino,
            reply,
            ReplyWrite::error,
            move |fs, idx, reply| async move {
                let _in_flight = in_flight;
                match fs.write(&fs.files[idx], offset, data, sync).await {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(e),
                }
            },
        );
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): durability is fsync's job (and unmount's), as for a
        // block device.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.with_file(ino, reply, ReplyEmpty::error, |fs, idx, reply| async move {
            match fs.fsync(&fs.files[idx]).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino == INodeNo::ROOT {
            reply.opened(FileHandle(0), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOTDIR);
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let mut entries: Vec<(INodeNo, FileType, &str)> = vec![
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
        ];
        for f in &self.fs.files {
            entries.push((INodeNo(f.ino), FileType::RegularFile, f.name()));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BSIZE: u64 = 4096;
        let total: u64 = self.fs.files.iter().map(|f| f.size()).sum();
        let files = self.fs.files.len() as u64;
        reply.statfs(
            total.div_ceil(BSIZE),
            0,
            0,
            files + 1,
            0,
            BSIZE as u32,
            255,
            BSIZE as u32,
        );
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.with_file(
            ino,
            reply,
            ReplyEmpty::error,
            move |fs, idx, reply| async move {
                match fs.fallocate(&fs.files[idx], offset, length, mode).await {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                }
            },
        );
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EPERM);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EPERM);
    }

    // The rest: answered quietly (fuser's defaults log a warning each time).
    // ENOSYS tells the kernel not to ask again where it can remember that.

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM);
    }

    fn readlink(&self, _req: &Request, _ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::EINVAL);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel's generic lseek: SEEK_DATA/SEEK_HOLE see one extent.
        reply.error(Errno::ENOSYS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The kernel falls back to reads and writes.
        reply.error(Errno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }
}

/// One line of `/proc/self/mountinfo` (proc(5)), the fields rlun uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the filesystem (for FUSE, minor = connection number).
    pub major: u32,
    pub minor: u32,
    /// The mount point, with `\040`-style escapes decoded.
    pub mount_point: String,
    /// Filesystem type, e.g. `fuse.rlun`.
    pub fstype: String,
    /// Mount source, e.g. `rlun:iqn.2026-11.org.example:disk1`.
    pub source: String,
}

/// Decode the octal escapes (`\040` for space…) the kernel uses in mountinfo.
fn unescape_mount_field(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0')));
        match octal {
            Some(v) if v <= 0xff => {
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse one mountinfo line: `id parent major:minor root mountpoint
/// options [optional fields...] - fstype source superoptions`.
pub fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    let (major, minor) = l.get(2)?.split_once(':')?;
    Some(MountEntry {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point: unescape_mount_field(l.get(4)?),
        fstype: (*r.first()?).to_string(),
        source: unescape_mount_field(r.get(1)?),
    })
}

/// The last (topmost) mount at `path` in mountinfo text.
pub fn find_mount(mountinfo: &str, path: &str) -> Option<MountEntry> {
    mountinfo
        .lines()
        .filter_map(parse_mountinfo_line)
        .rfind(|m| m.mount_point == path)
}

/// Whether a mount entry is one of rlun's FUSE mounts.
pub fn is_rlun_mount(m: &MountEntry) -> bool {
    m.fstype == "fuse.rlun" || (m.fstype.starts_with("fuse") && m.source.starts_with("rlun:"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CacheMode, MemBackend};
    use crate::export::testing::TestLun;
    use std::sync::atomic::Ordering;

    const MIB: usize = 1 << 20;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 511) as u8).collect()
    }

    fn fs_with(luns: Vec<(u64, TestLun)>, mode: CacheMode, opts: FsOptions) -> LunFs<TestLun> {
        let cfg = DeviceConfig {
            mode,
            cache_size: 16 << 20,
            ..DeviceConfig::default()
        };
        LunFs::new(luns, &cfg, opts).expect("filesystem")
    }

    fn one_lun(mem: MemBackend) -> (LunFs<TestLun>, TestLun) {
        let lun = TestLun::new(mem);
        (
            fs_with(
                vec![(3, lun.clone())],
                CacheMode::WriteThrough,
                FsOptions::default(),
            ),
            lun,
        )
    }

    #[tokio::test]
    async fn luns_are_files_named_by_number_with_capacity_as_size() {
        let fs = fs_with(
            vec![
                (1, TestLun::new(MemBackend::new(512, 2048))),
                (7, TestLun::new(MemBackend::new(4096, 16))),
            ],
            CacheMode::None,
            FsOptions {
                uid: 1000,
                gid: 100,
                mode: 0o640,
                ..FsOptions::default()
            },
        );

        let f = fs.lookup(OsStr::new("lun7")).expect("lun7 exists");
        let attr = fs.file_attr(f);

        assert_eq!(f.ino(), 3);
        assert_eq!(attr.size, 16 * 4096);
        assert_eq!(attr.blocks, 16 * 4096 / 512);
        assert_eq!(attr.perm, 0o640);
        assert_eq!((attr.uid, attr.gid), (1000, 100));
        assert_eq!(attr.kind, FileType::RegularFile);
        assert!(fs.lookup(OsStr::new("lun2")).is_none());
        assert_eq!(fs.file(2).map(|f| f.name()), Some("lun1"));
        assert!(fs.file(4).is_none() && fs.file(1).is_none() && fs.file(0).is_none());
    }

    #[tokio::test]
    async fn read_only_lun_has_no_write_bits_and_refuses_writes_with_erofs() {
        let (fs, _) = one_lun(MemBackend::new(512, 64).read_only(true));
        let f = &fs.files()[0];

        let attr = fs.file_attr(f);
        let open_rw = fs.check_open(f, OpenFlags(0o2));
        let write = fs.write(f, 0, Bytes::from_static(b"x"), false).await;
        let punch = fs
            .fallocate(f, 0, 512, falloc::PUNCH_HOLE | falloc::KEEP_SIZE)
            .await;

        assert_eq!(attr.perm, 0o400);
        assert_eq!(open_rw, Err(Errno::EROFS));
        assert_eq!(fs.check_open(f, OpenFlags(0)), Ok(()));
        assert_eq!(write, Err(Errno::EROFS));
        assert_eq!(punch, Err(Errno::EROFS));
        assert!(fs.all_read_only());
    }

    #[tokio::test]
    async fn read_only_option_makes_a_writable_lun_read_only() {
        let lun = TestLun::new(MemBackend::new(512, 64));
        let fs = fs_with(
            vec![(1, lun)],
            CacheMode::None,
            FsOptions {
                read_only: true,
                mode: 0o666,
                ..FsOptions::default()
            },
        );

        let f = &fs.files()[0];

        assert_eq!(fs.file_attr(f).perm, 0o444);
        assert_eq!(
            fs.write(f, 0, Bytes::from_static(b"x"), false).await,
            Err(Errno::EROFS)
        );
    }

    #[tokio::test]
    async fn reads_are_clipped_at_the_end_of_the_lun() {
        let bytes = data(64 * 512);
        let (fs, _) = one_lun(MemBackend::from_data(512, bytes.clone()));
        let f = &fs.files()[0];

        let tail = fs.read(f, 64 * 512 - 100, 4096).await.expect("read");
        let past = fs.read(f, 64 * 512, 4096).await.expect("read at end");

        assert_eq!(&tail[..], &bytes[64 * 512 - 100..]);
        assert!(past.is_empty());
    }

    #[tokio::test]
    async fn unaligned_write_lands_and_reads_back() {
        let (fs, lun) = one_lun(MemBackend::new(512, 4096));
        let f = &fs.files()[0];
        let payload = data(MIB + 3);

        let n = fs
            .write(f, 1001, Bytes::from(payload.clone()), false)
            .await
            .expect("write");
        let back = fs.read(f, 1001, (MIB + 3) as u32).await.expect("read");

        assert_eq!(n as usize, MIB + 3);
        assert_eq!(&back[..], &payload[..]);
        assert_eq!(lun.mem.bytes_at(1001, MIB + 3), payload);
    }

    #[tokio::test]
    async fn large_write_goes_out_as_several_commands_split_on_aligned_offsets() {
        let (fs, lun) = one_lun(MemBackend::new(512, 8192));
        let f = &fs.files()[0];
        let payload = data(MIB + 3);
        let at = 3 * WRITE_SPLIT as u64 - 1000;

        let n = fs
            .write(f, at, Bytes::from(payload.clone()), true)
            .await
            .expect("write");

        assert_eq!(n as usize, MIB + 3);
        assert_eq!(lun.mem.bytes_at(at, MIB + 3), payload);
        let writes: Vec<_> = lun
            .mem
            .log()
            .into_iter()
            .filter(|c| c.op == crate::device::MemOp::Write)
            .collect();
        // Five pieces: 1000 bytes up to a multiple of WRITE_SPLIT, three
        // whole ones and the rest; each with FUA.
        assert!(writes.len() >= 5, "several commands: {writes:?}");
        assert!(writes.iter().all(|c| c.fua), "FUA on every piece");
    }

    #[tokio::test]
    async fn large_write_across_the_end_is_short_and_past_it_enospc() {
        let (fs, lun) = one_lun(MemBackend::new(512, 2048));
        let f = &fs.files()[0];
        let at = (MIB / 2 + 100) as u64;

        let short = fs.write(f, at, Bytes::from(vec![4u8; MIB]), false).await;
        let past = fs
            .write(f, MIB as u64, Bytes::from(vec![4u8; MIB]), false)
            .await;

        assert_eq!(short, Ok((MIB / 2 - 100) as u32));
        assert_eq!(
            lun.mem.bytes_at(at, MIB / 2 - 100),
            vec![4u8; MIB / 2 - 100]
        );
        assert_eq!(past, Err(Errno::ENOSPC));
    }

    #[tokio::test]
    async fn large_write_failing_in_its_first_piece_is_an_error() {
        let (fs, lun) = one_lun(MemBackend::new(512, 8192));
        let f = &fs.files()[0];

        lun.mem.fail_next(crate::device::MemOp::Write, 1, 5);
        let first = fs.write(f, 0, Bytes::from(vec![1u8; MIB]), false).await;

        assert_eq!(first, Err(Errno::EIO));
    }

    #[tokio::test]
    async fn write_across_the_end_is_short_and_at_the_end_is_enospc() {
        let (fs, lun) = one_lun(MemBackend::new(512, 8));
        let f = &fs.files()[0];

        let short = fs.write(f, 4000, Bytes::from(vec![9u8; 200]), false).await;
        let at_end = fs.write(f, 4096, Bytes::from(vec![9u8; 1]), false).await;

        assert_eq!(short, Ok(96));
        assert_eq!(lun.mem.bytes_at(4000, 96), vec![9u8; 96]);
        assert_eq!(at_end, Err(Errno::ENOSPC));
    }

    #[tokio::test]
    async fn sync_writes_use_fua_and_fsync_sends_synchronize_cache() {
        let (fs, lun) = one_lun(MemBackend::new(512, 64));
        let f = &fs.files()[0];

        fs.write(f, 0, Bytes::from(vec![1u8; 512]), true)
            .await
            .expect("write");
        fs.fsync(f).await.expect("fsync");

        let log = lun.mem.log();
        assert!(
            log.iter()
                .any(|c| c.op == crate::device::MemOp::Write && c.fua),
            "FUA write in {log:?}"
        );
        assert_eq!(lun.mem.counts().flushes, 1);
    }

    #[tokio::test]
    async fn write_back_data_reaches_the_lun_on_fsync() {
        let lun = TestLun::new(MemBackend::new(512, 256));
        let fs = fs_with(
            vec![(1, lun.clone())],
            CacheMode::WriteBack,
            FsOptions::default(),
        );
        let f = &fs.files()[0];

        fs.write(f, 512, Bytes::from(vec![5u8; 4096]), false)
            .await
            .expect("write");
        let before = lun.mem.bytes_at(512, 4096);
        fs.fsync(f).await.expect("fsync");

        assert_ne!(before, vec![5u8; 4096], "write-back kept it in memory");
        assert_eq!(lun.mem.bytes_at(512, 4096), vec![5u8; 4096]);
    }

    #[tokio::test]
    async fn punch_hole_without_lbprz_writes_zeros_over_unaligned_range() {
        let (fs, lun) = one_lun(MemBackend::from_data(512, vec![0xAA; 64 * 512]));
        let f = &fs.files()[0];

        fs.fallocate(f, 300, 2000, falloc::PUNCH_HOLE | falloc::KEEP_SIZE)
            .await
            .expect("punch");

        assert_eq!(lun.mem.bytes_at(300, 2000), vec![0u8; 2000]);
        assert_eq!(lun.mem.bytes_at(299, 1), vec![0xAA]);
        assert_eq!(lun.mem.bytes_at(2300, 1), vec![0xAA]);
        assert_eq!(lun.mem.counts().unmaps, 0);
        assert!(lun.mem.counts().write_zeroes >= 1);
        assert_eq!(&fs.read(f, 300, 2000).await.unwrap()[..], &[0u8; 2000][..]);
    }

    #[tokio::test]
    async fn punch_hole_with_lbprz_unmaps_whole_blocks_and_zeroes_the_edges() {
        let mut lun = TestLun::new(MemBackend::from_data(512, vec![0xAA; 64 * 512]));
        lun.lbprz = true;
        let fs = fs_with(
            vec![(1, lun.clone())],
            CacheMode::WriteThrough,
            FsOptions::default(),
        );
        let f = &fs.files()[0];

        fs.fallocate(f, 300, 2000, falloc::PUNCH_HOLE | falloc::KEEP_SIZE)
            .await
            .expect("punch");

        assert_eq!(lun.mem.bytes_at(300, 2000), vec![0u8; 2000]);
        assert_eq!(lun.mem.bytes_at(299, 1), vec![0xAA]);
        assert_eq!(lun.mem.bytes_at(2300, 1), vec![0xAA]);
        assert_eq!(lun.mem.counts().unmaps, 1, "blocks 1..4 unmapped");
    }

    #[tokio::test]
    async fn zero_range_and_keep_size_clip_at_the_end() {
        let (fs, lun) = one_lun(MemBackend::from_data(512, vec![0xAA; 8 * 512]));
        let f = &fs.files()[0];

        let past_end = fs.fallocate(f, 4000, 1000, falloc::ZERO_RANGE).await;
        fs.fallocate(f, 4000, 1000, falloc::ZERO_RANGE | falloc::KEEP_SIZE)
            .await
            .expect("zero range");

        assert_eq!(past_end, Err(Errno::EFBIG));
        assert_eq!(lun.mem.bytes_at(4000, 96), vec![0u8; 96]);
        assert_eq!(lun.mem.bytes_at(3999, 1), vec![0xAA]);
    }

    #[tokio::test]
    async fn other_fallocate_modes_are_refused_and_plain_allocation_is_a_no_op() {
        let (fs, lun) = one_lun(MemBackend::new(512, 8));
        let f = &fs.files()[0];
        const COLLAPSE_RANGE: i32 = 0x08;

        assert_eq!(fs.fallocate(f, 0, 4096, 0).await, Ok(()));
        assert_eq!(fs.fallocate(f, 0, 8192, 0).await, Err(Errno::EFBIG));
        assert_eq!(
            fs.fallocate(f, 0, 512, COLLAPSE_RANGE).await,
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            fs.fallocate(f, 0, 512, falloc::PUNCH_HOLE).await,
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(lun.mem.counts().writes, 0);
    }

    #[tokio::test]
    async fn capacity_change_is_picked_up_on_refresh() {
        let (fs, lun) = one_lun(MemBackend::new(512, 64));
        let f = &fs.files()[0];
        *lun.resized.lock().unwrap() = Some(Arc::new(MemBackend::new(512, 128)));

        fs.refresh_capacity(f).await;
        let unchanged = fs.file_attr(f).size;
        lun.generation.fetch_add(1, Ordering::SeqCst);
        fs.refresh_capacity(f).await;

        assert_eq!(unchanged, 64 * 512, "no report, no re-read");
        assert_eq!(fs.file_attr(f).size, 128 * 512);
        fs.write(f, 100 * 512, Bytes::from(vec![3u8; 512]), false)
            .await
            .expect("write in the new space");
    }

    #[tokio::test]
    async fn after_shut_down_io_fails_with_eio_but_data_written_before_stays() {
        let (fs, lun) = one_lun(MemBackend::new(512, 64));
        let f = &fs.files()[0];
        fs.write(f, 0, Bytes::from(vec![7u8; 512]), false)
            .await
            .expect("write");

        fs.shut_down();

        assert_eq!(fs.read(f, 0, 512).await, Err(Errno::EIO));
        assert_eq!(
            fs.write(f, 0, Bytes::from(vec![1u8; 512]), false).await,
            Err(Errno::EIO)
        );
        assert_eq!(fs.fsync(f).await, Err(Errno::EIO));
        assert!(fs.flush_all().await.is_ok());
        assert_eq!(lun.mem.bytes_at(0, 512), vec![7u8; 512]);
    }

    #[tokio::test]
    async fn device_errors_map_to_errno() {
        let (fs, lun) = one_lun(MemBackend::new(512, 64));
        let f = &fs.files()[0];
        lun.mem.fail_next(crate::device::MemOp::Read, 1, 5);

        assert_eq!(fs.read(f, 0, 512).await, Err(Errno::EIO));
    }

    #[test]
    fn mountinfo_lines_parse_with_optional_fields_and_escapes() {
        let text = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
98 22 0:55 / /tmp/my\\040mnt rw,nosuid,nodev shared:5 master:1 - fuse.rlun rlun:iqn.2026-11.org.example:disk1 rw,user_id=0,group_id=0
";
        let m = find_mount(text, "/tmp/my mnt").expect("found");

        assert_eq!((m.major, m.minor), (0, 55));
        assert_eq!(m.fstype, "fuse.rlun");
        assert_eq!(m.source, "rlun:iqn.2026-11.org.example:disk1");
        assert!(is_rlun_mount(&m));
        assert!(!is_rlun_mount(&find_mount(text, "/proc").unwrap()));
        assert!(find_mount(text, "/nowhere").is_none());
        assert!(parse_mountinfo_line("garbage").is_none());
    }
}
