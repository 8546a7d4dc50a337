//! [`LunFs`]: the filesystem rlun mounts, without the kernel side — a root
//! directory of one [`LunFile`] per export, their inodes and attributes,
//! open flags, and each request's work over the export layer (reads,
//! writes split into [`WRITE_SPLIT`] pieces, fsync, the `fallocate` modes,
//! capacity refresh), with export errors mapped to errno.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo, OpenAccMode, OpenFlags};

#[cfg(doc)]
use crate::device::LunDevice;
use crate::device::{DeviceConfig, DeviceError};
use crate::export::{
    Export, ExportError, ExportRead, ExportSet, LunBackend, PendingExportRead, ZeroMode,
};

/// A write request larger than this goes to the LUN as several commands
/// at once, split on multiples of it ([`LunFs::write`]): a buffered writer
/// such as `dd` has only one request in flight, and a 1 MiB SCSI WRITE
/// moves its data burst after burst (one R2T each), while four 256 KiB
/// WRITEs move theirs in parallel.
pub const WRITE_SPLIT: usize = 256 << 10;

/// Inode of the first LUN file.
const FIRST_FILE_INO: u64 = 2;

/// `fallocate(2)` mode bits (linux/falloc.h).
pub mod falloc {
    pub const KEEP_SIZE: i32 = 0x01;
    pub const PUNCH_HOLE: i32 = 0x02;
    pub const ZERO_RANGE: i32 = 0x10;
}

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

impl<B: LunBackend> Clone for LunFile<B> {
    fn clone(&self) -> Self {
        LunFile {
            export: self.export.clone(),
            ino: self.ino,
        }
    }
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
/// of each request and return an [`Errno`] on failure; `FuseFs` (the
/// adapter) wires them to the kernel.
pub struct LunFs<B: LunBackend> {
    set: Arc<ExportSet<B>>,
    /// Every file shown since the mount, in order of appearance: a LUN the
    /// target added gets the next inode, one it removed keeps its inode
    /// (open files of it fail with `ENODEV`) but leaves the directory.
    files: std::sync::RwLock<Vec<LunFile<B>>>,
    /// The [`ExportSet::generation`] `files` follows.
    seen: std::sync::atomic::AtomicU64,
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
        Ok(LunFs::from_exports(Arc::new(set), opts))
    }

    /// The filesystem of an export set: one file per export, in order, and
    /// later the exports the set gains.
    pub fn from_exports(set: Arc<ExportSet<B>>, opts: FsOptions) -> LunFs<B> {
        let fs = LunFs {
            set,
            files: std::sync::RwLock::new(Vec::new()),
            seen: std::sync::atomic::AtomicU64::new(u64::MAX),
            opts,
            mounted_at: SystemTime::now(),
        };
        fs.follow_exports();
        fs
    }

    /// Give each export the set gained since the last look a file.
    fn follow_exports(&self) {
        use std::sync::atomic::Ordering;
        let generation = self.set.generation();
        if self.seen.load(Ordering::Acquire) == generation {
            return;
        }
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        for e in self.set.exports().iter() {
            if !files.iter().any(|f| Arc::ptr_eq(&f.export, e)) {
                let ino = FIRST_FILE_INO + files.len() as u64;
                files.push(LunFile {
                    export: e.clone(),
                    ino,
                });
            }
        }
        self.seen.store(generation, Ordering::Release);
    }

    /// The files in the directory now (LUNs the target still reports).
    pub fn files(&self) -> Vec<LunFile<B>> {
        self.follow_exports();
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|f| !f.export.is_gone())
            .cloned()
            .collect()
    }

    /// The exports behind the files (flush, shutdown, lost-data report).
    pub fn exports(&self) -> &ExportSet<B> {
        &self.set
    }

    /// The export set itself, shared.
    pub fn export_set(&self) -> &Arc<ExportSet<B>> {
        &self.set
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Every LUN is read-only (the mount can be `ro`).
    pub fn all_read_only(&self) -> bool {
        self.set.all_read_only()
    }

    /// The file with inode `ino` (also one whose LUN was removed, for the
    /// files still open).
    pub fn file(&self, ino: u64) -> Option<LunFile<B>> {
        let idx = usize::try_from(ino.checked_sub(FIRST_FILE_INO)?).ok()?;
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        files.get(idx).cloned()
    }

    /// The inode of the newest file of LUN `number` (also a removed one).
    pub fn ino_of(&self, number: u64) -> Option<u64> {
        self.follow_exports();
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .rev()
            .find(|f| f.number() == number)
            .map(|f| f.ino)
    }

    /// The file called `name` in the root directory.
    pub fn lookup(&self, name: &OsStr) -> Option<LunFile<B>> {
        self.follow_exports();
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .find(|f| !f.export.is_gone() && OsStr::new(f.name()) == name)
            .cloned()
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

    /// [`LunFs::read`] as far as it goes without waiting
    /// ([`Export::read_now`]): its result, or the read to finish with
    /// [`Export::read_sent`] (or by hand, on [`LunFile::export`]) or
    /// [`LunFs::read_wait`]. Call it inside the
    /// runtime (a cache read may start read-ahead tasks).
    pub fn read_now(&self, f: &LunFile<B>, offset: u64, size: u32) -> ExportRead<B> {
        f.export.read_now(offset, size as usize)
    }

    /// Finish a read [`LunFs::read_now`] could not complete at once.
    pub async fn read_wait(&self, f: &LunFile<B>, p: PendingExportRead<B>) -> Result<Bytes, Errno> {
        f.export.read_wait(p).await.map_err(|e| errno(&e))
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
        let attr = fs.file_attr(&f);

        assert_eq!(f.ino(), 3);
        assert_eq!(attr.size, 16 * 4096);
        assert_eq!(attr.blocks, 16 * 4096 / 512);
        assert_eq!(attr.perm, 0o640);
        assert_eq!((attr.uid, attr.gid), (1000, 100));
        assert_eq!(attr.kind, FileType::RegularFile);
        assert!(fs.lookup(OsStr::new("lun2")).is_none());
        assert_eq!(
            fs.file(2).map(|f| f.name().to_string()),
            Some("lun1".into())
        );
        assert!(fs.file(4).is_none() && fs.file(1).is_none() && fs.file(0).is_none());
    }

    #[tokio::test]
    async fn file_names_the_file_of_an_inode_and_nothing_else() {
        let fs = fs_with(
            vec![
                (1, TestLun::new(MemBackend::new(512, 8))),
                (7, TestLun::new(MemBackend::new(512, 8))),
            ],
            CacheMode::None,
            FsOptions::default(),
        );

        let of = |ino| fs.file(ino).map(|f| f.name().to_string());

        assert_eq!(of(2).as_deref(), Some("lun1"));
        assert_eq!(of(3).as_deref(), Some("lun7"));
        // The root directory, inode 0 and inodes past the last file.
        assert_eq!(
            (of(1), of(0), of(4), of(u64::MAX)),
            (None, None, None, None)
        );
    }

    #[tokio::test]
    async fn read_only_lun_has_no_write_bits_and_refuses_writes_with_erofs() {
        let (fs, _) = one_lun(MemBackend::new(512, 64).read_only(true));
        let f = &fs.files()[0].clone();

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

        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();

        let tail = fs.read(f, 64 * 512 - 100, 4096).await.expect("read");
        let past = fs.read(f, 64 * 512, 4096).await.expect("read at end");

        assert_eq!(&tail[..], &bytes[64 * 512 - 100..]);
        assert!(past.is_empty());
    }

    #[tokio::test]
    async fn unaligned_write_lands_and_reads_back() {
        let (fs, lun) = one_lun(MemBackend::new(512, 4096));
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();

        lun.mem.fail_next(crate::device::MemOp::Write, 1, 5);
        let first = fs.write(f, 0, Bytes::from(vec![1u8; MIB]), false).await;

        assert_eq!(first, Err(Errno::EIO));
    }

    #[tokio::test]
    async fn write_across_the_end_is_short_and_at_the_end_is_enospc() {
        let (fs, lun) = one_lun(MemBackend::new(512, 8));
        let f = &fs.files()[0].clone();

        let short = fs.write(f, 4000, Bytes::from(vec![9u8; 200]), false).await;
        let at_end = fs.write(f, 4096, Bytes::from(vec![9u8; 1]), false).await;

        assert_eq!(short, Ok(96));
        assert_eq!(lun.mem.bytes_at(4000, 96), vec![9u8; 96]);
        assert_eq!(at_end, Err(Errno::ENOSPC));
    }

    #[tokio::test]
    async fn sync_writes_use_fua_and_fsync_sends_synchronize_cache() {
        let (fs, lun) = one_lun(MemBackend::new(512, 64));
        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();

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
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();
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
        let f = &fs.files()[0].clone();
        lun.mem.fail_next(crate::device::MemOp::Read, 1, 5);

        assert_eq!(fs.read(f, 0, 512).await, Err(Errno::EIO));
    }
}
