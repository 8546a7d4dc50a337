//! [`FuseFs`]: the `fuser::Filesystem` adapter — the kernel side of the
//! mount. It negotiates the connection (request sizes, background depth,
//! async reads and direct I/O, write-back caching), answers metadata at
//! once, and hands every request that does I/O to the mount's request task
//! on the Tokio runtime ([`InFlight`]), where it calls [`LunFs`] and sends
//! the reply. A read goes as far as it can first, on the FUSE thread: a
//! cache hit is answered there, and an uncached read is sent to the
//! target before its (small) future is handed on. What cannot exist
//! in a LUN directory (create, remove, rename, links, xattrs) is refused.

use std::ffi::OsStr;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use tracing::debug;

use super::counters::FuseStats;
use super::fs::{LunFile, LunFs};
use crate::export::inflight::InFlight;
use crate::export::{ExportRead, LunBackend};

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
/// How long the kernel may cache attributes and directory entries.
pub const ATTR_TTL: Duration = Duration::from_secs(1);
/// Background requests (read-ahead, async direct I/O) the kernel keeps in
/// flight before it throttles.
const MAX_BACKGROUND: u16 = 128;

/// `open(2)` flags that ask for synchronous writes (asm-generic/fcntl.h:
/// `O_DSYNC`, and `O_SYNC` = `__O_SYNC | O_DSYNC`).
const O_DSYNC: i32 = 0o010000;

/// The `fuser` adapter: decodes requests, hands the work of each to the
/// mount's request task on the Tokio runtime, which replies.
pub struct FuseFs<B: LunBackend> {
    fs: Arc<LunFs<B>>,
    rt: tokio::runtime::Handle,
    /// Where requests run: one executor task of the mount's
    /// ([`InFlight`]), not a task each (`started` on first use, on `rt`).
    requests: std::sync::OnceLock<InFlight>,
    stats: Arc<FuseStats>,
}

impl<B: LunBackend> FuseFs<B> {
    pub fn new(fs: Arc<LunFs<B>>, rt: tokio::runtime::Handle) -> FuseFs<B> {
        FuseFs {
            fs,
            rt,
            requests: std::sync::OnceLock::new(),
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
        let o = self.fs.options();
        o.writeback_cache && !o.direct_io && !self.fs.all_read_only()
    }

    /// Run `work` on the runtime with the file of `ino`; `ENOENT` (or
    /// `EISDIR` for the root) when there is no such file.
    fn with_file<R, F, Fut>(&self, ino: INodeNo, reply: R, fail: fn(R, Errno), work: F)
    where
        R: Send + 'static,
        F: FnOnce(Arc<LunFs<B>>, LunFile<B>, R) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if ino == INodeNo::ROOT {
            return fail(reply, Errno::EISDIR);
        }
        let Some(f) = self.fs.file(ino.0) else {
            return fail(reply, Errno::ENOENT);
        };
        self.run(Box::pin(work(self.fs.clone(), f, reply)));
    }

    /// Run `job` in the mount's request task.
    fn run(&self, job: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) {
        let requests = self.requests.get_or_init(|| InFlight::detached(&self.rt));
        if let Err(job) = requests.push(job) {
            // The executor task is gone (a request panicked, logged): this
            // request, and those after it, run in a task each.
            debug!("the mount's request task is gone; running the request in a task of its own");
            self.rt.spawn(job);
        }
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
            Some(f) => reply.entry(&ATTR_TTL, &self.fs.file_attr(&f), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            return reply.attr(&ATTR_TTL, &self.fs.root_attr());
        }
        self.with_file(ino, reply, ReplyAttr::error, |fs, f, reply| async move {
            f.export().refresh_capacity().await;
            reply.attr(&ATTR_TTL, &fs.file_attr(&f));
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
            _ => reply.attr(&ATTR_TTL, &self.fs.file_attr(&f)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino == INodeNo::ROOT {
            return reply.error(Errno::EISDIR);
        }
        let Some(f) = self.fs.file(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        match self.fs.check_open(&f, flags) {
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
        if ino == INodeNo::ROOT {
            return reply.error(Errno::EISDIR);
        }
        let Some(f) = self.fs.file(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let answer = |r: Result<Bytes, Errno>, reply: ReplyData| match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        };
        // As far as the read goes without waiting, here on the FUSE
        // thread: a cache hit is answered at once, and a read without a
        // cache is on its way to the target before its future exists,
        // which then holds only that read.
        let now = {
            let _rt = self.rt.enter();
            self.fs.read_now(&f, offset, size)
        };
        match now {
            ExportRead::Done(r) => answer(r.map_err(|e| Errno::from_i32(e.to_errno())), reply),
            ExportRead::Sent(mut p) => {
                // Holding the export and the read only: a small job.
                let export = f.export().clone();
                drop(f);
                self.run(Box::pin(async move {
                    let _in_flight = in_flight;
                    let r = std::future::poll_fn(|cx| p.poll_read(&export, cx)).await;
                    answer(r.map_err(|e| Errno::from_i32(e.to_errno())), reply)
                }))
            }
            ExportRead::Wait(p) => {
                let fs = self.fs.clone();
                self.run(Box::pin(async move {
                    let _in_flight = in_flight;
                    answer(fs.read_wait(&f, p).await, reply)
                }))
            }
        }
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
            move |fs, f, reply| async move {
                let _in_flight = in_flight;
                match fs.write(&f, offset, data, sync).await {
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
        self.with_file(ino, reply, ReplyEmpty::error, |fs, f, reply| async move {
            match fs.fsync(&f).await {
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
        let files = self.fs.files();
        let mut entries: Vec<(INodeNo, FileType, &str)> = vec![
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
        ];
        for f in &files {
            entries.push((INodeNo(f.ino()), FileType::RegularFile, f.name()));
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
        let files = self.fs.files();
        let total: u64 = files.iter().map(|f| f.size()).sum();
        let files = files.len() as u64;
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
            move |fs, f, reply| async move {
                match fs.fallocate(&f, offset, length, mode).await {
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
