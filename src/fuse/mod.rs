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
//! The `fuser` thread only decodes a request and hands it to the mount's
//! request task on the Tokio runtime ([`InFlight`](crate::export::inflight::InFlight),
//! one task for all, not a task each); the request does the I/O and sends
//! the reply itself, so requests run concurrently and no lock is held
//! across network I/O (the device's
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
//!
//! # Files
//!
//! | file | what |
//! | --- | --- |
//! | `fs.rs` | [`LunFs`] and [`LunFile`]: inodes, attributes, open flags, the work of each request over the exports, `fallocate` modes, [`WRITE_SPLIT`] |
//! | `adapter.rs` | [`FuseFs`], the `fuser::Filesystem` impl: connection set-up ([`MAX_IO`], [`KERNEL_READAHEAD`]), replies, handing requests to the mount's request task (`InFlight`) |
//! | `counters.rs` | [`FuseStats`] and [`FuseCounters`] |
//! | `mountinfo.rs` | [`find_mount`] and [`is_rlun_mount`] over `/proc/self/mountinfo` |
//! | `watch.rs` | the unmount watcher: the process that removes the mount of an rlun that died without unmounting ([`spawn_watcher`], [`run_watcher`]) |

mod adapter;
mod counters;
mod fs;
mod mountinfo;
mod watch;

#[cfg(doc)]
use crate::device::LunDevice;
#[cfg(doc)]
use crate::export::{Export, ExportError, ExportSet, ZeroMode};

pub use crate::export::LunBackend;
pub use adapter::{FuseFs, ATTR_TTL, KERNEL_READAHEAD, MAX_IO};
pub use counters::{FuseCounters, FuseStats};
pub use fs::{falloc, lun_file_name, FsOptions, LunFile, LunFs, WRITE_SPLIT};
pub use mountinfo::{find_mount, is_rlun_mount, parse_mountinfo_line, MountEntry};
pub use watch::{run_watcher, spawn_watcher, Watcher, WATCH_ENV};
