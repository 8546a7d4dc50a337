//! Memory regions: memory registered with a protection domain, so the
//! local device may read it for Sends (`lkey`) and a peer may read or
//! write it by RDMA (`rkey`, the STag of iSER).
//!
//! Registering memory hands its address to hardware that reads and writes
//! it behind the compiler's back, so the one rule is: **a registration must
//! not outlive its memory**. Each kind of memory meets it its own way:
//!
//! - memory this crate allocates (`OwnedMemory`, the send and receive
//!   rings of [`super::queue`]): deregistered, then freed, by its own
//!   `Drop`, which runs only after the queue pair using it is destroyed
//!   (the queue pair owns it);
//! - pool arenas ([`PoolRegistrations`]): leaked memory that lives for the
//!   rest of the process ([`rlun_iscsi::iobuf::Arena`]); the addresses come
//!   from the pool's own registry ([`rlun_iscsi::iobuf::arena_of`]), never
//!   from the caller, so no registration can outlive them;
//! - shared write data ([`MemoryRegion::for_remote_read`]): the region keeps
//!   a clone of the `Bytes`, so the memory lives at least as long, and the
//!   peer may only read it;
//! - a direct task's read buffer ([`MemoryRegion::for_task_read`]): memory
//!   the iSCSI core owns. Its lifetime is not visible to the compiler, so
//!   this is the one wrapper with a contract, stated and argued there.
//!
//! What a peer writes lands only in memory registered for remote write:
//! arenas and task read buffers, which hold plain bytes (I/O data, cache
//! pages) and no Rust object whose validity a stray write could break. The
//! peer is trusted to write where the iSER header told it; a target that
//! writes elsewhere in a registration corrupts data in it, and can reach
//! nothing outside registered memory.

use std::alloc::Layout;
use std::ffi::c_int;
use std::io;
use std::ptr::NonNull;

use bytes::Bytes;
use rlun_iscsi::iobuf::{self, Arena};
use rlun_iscsi::proto::connection::ReadRegion;

use super::error::RdmaError;
use super::ffi::{self, IbvMr};
use super::verbs::ProtectionDomain;

/// The two keys of a registration: `lkey` for the local device (Send
/// scatter/gather entries), `rkey` for the peer (the STag it names in its
/// RDMA operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    pub lkey: u32,
    pub rkey: u32,
}

/// Access rights of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access(c_int);

impl Access {
    /// The local device writes (receive buffers).
    pub(crate) const LOCAL: Access = Access(ffi::IBV_ACCESS_LOCAL_WRITE);
    /// The peer reads (write data it fetches).
    const REMOTE_READ: Access = Access(ffi::IBV_ACCESS_REMOTE_READ);
    /// The peer writes (read data it places).
    const REMOTE_WRITE: Access = Access(ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE);
    /// Both (pool arenas serve reads and writes).
    const REMOTE_ALL: Access = Access(
        ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ,
    );
}

/// Memory registered with a protection domain; deregistered on drop. Keeps
/// the protection domain alive, and, for shared write data, the data.
pub struct MemoryRegion {
    pd: ProtectionDomain,
    mr: NonNull<IbvMr>,
    /// The shared data registered ([`MemoryRegion::for_remote_read`]):
    /// dropped after the deregistration (fields drop after `Drop::drop`).
    _data: Option<Bytes>,
}

// SAFETY: an MR handle may be used and deregistered from any thread; the
// struct reads only the immutable key fields of the MR.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("keys", &self.keys())
            .finish()
    }
}

impl MemoryRegion {
    /// Register `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` stays allocated and unmoved until the returned
    /// region is dropped (or `data` keeps it so), and with a remote-write
    /// `access` no Rust code reads or writes it while a peer may write it.
    unsafe fn register(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        access: Access,
        data: Option<Bytes>,
    ) -> Result<MemoryRegion, RdmaError> {
        if len == 0 {
            return Err(RdmaError::Register {
                len,
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        // SAFETY: the PD is live (held by `pd`); the memory is valid for
        // as long as the region exists (the caller's promise), and the
        // kernel pins its pages for the registration's life.
        let mr = unsafe { (pd.api().ibv_reg_mr)(pd.inner.pd.as_ptr(), addr.cast(), len, access.0) };
        let mr = NonNull::new(mr).ok_or_else(|| RdmaError::Register {
            len,
            source: io::Error::last_os_error(),
        })?;
        Ok(MemoryRegion {
            pd: pd.clone(),
            mr,
            _data: data,
        })
    }

    /// Register shared write data for the peer to read (iSER: the part of
    /// a command's write data the target fetches by RDMA Read) and for the
    /// local device to send from (the part sent as immediate data). Sound
    /// by construction: the region keeps `data` alive and allows no write.
    pub fn for_remote_read(pd: &ProtectionDomain, data: Bytes) -> Result<MemoryRegion, RdmaError> {
        let (addr, len) = (data.as_ptr().cast_mut(), data.len());
        // SAFETY: `data` is kept in the region, so the memory outlives the
        // registration; the access is read-only, so nothing writes the
        // memory that `Bytes` promises is immutable.
        unsafe { MemoryRegion::register(pd, addr, len, Access::REMOTE_READ, Some(data)) }
    }

    /// Register a direct task's read buffer for the peer to write (iSER:
    /// the Read STag of a SCSI Command; the target RDMA-Writes the read
    /// data there).
    ///
    /// # Contract
    ///
    /// This memory belongs to the iSCSI core, not to this crate, so the
    /// compiler cannot check its lifetime. The caller must drop the region
    /// **before the buffer is freed, moved or touched by Rust code**: until
    /// then a peer may write into it.
    ///
    /// # Why rlun's use meets it (the one place this is argued)
    ///
    /// - A [`ReadRegion`] names the read buffer of a direct task of
    ///   [`rlun_iscsi::proto::connection::Connection`], which the core
    ///   allocates whole at submission and keeps, neither moved, resized
    ///   nor read, in the task until the task ends ([`ReadRegion`]'s
    ///   guarantee). Its fields are private to `rlun-iscsi`: no other code
    ///   can make one up, so every region names such a buffer.
    /// - The iSER encoder (rlun's `transport::iser::encoder`) registers it
    ///   when it encodes that task's SCSI Command, on the driver task, in
    ///   the same synchronous step in which the core handed out the
    ///   command, and puts the region into nothing but the
    ///   [`TaskHold`](rlun_iscsi::proto::connection::TaskHold) it returns
    ///   for that task. The driver gives the hold to the core at once
    ///   ([`Connection::hold`](rlun_iscsi::proto::connection::Connection::hold)),
    ///   which keeps it in the task and drops it **before** the task's
    ///   buffers whenever the task ends: its SCSI Response, task management
    ///   ending it, a Reject, a failure, or the core being dropped (the hold
    ///   is the task's first field and the final response drops it
    ///   explicitly before handing the buffer over). A hold the core refuses
    ///   (no such task) is dropped by the driver right away, before the
    ///   frame naming it is even posted, so no peer ever saw its key.
    /// - `ibv_dereg_mr` returns only once the device can no longer access
    ///   the memory, so when the hold's drop returns, the buffer is the
    ///   core's alone again. A frame still queued that names the dropped
    ///   key (the task ended before it was posted) gets the target a
    ///   remote access error, never freed memory.
    pub fn for_task_read(
        pd: &ProtectionDomain,
        region: &ReadRegion,
    ) -> Result<MemoryRegion, RdmaError> {
        // SAFETY: the contract above, argued there: the core keeps the
        // buffer allocated, unmoved and untouched until it drops the hold
        // that owns this region.
        unsafe {
            MemoryRegion::register(
                pd,
                region.addr() as *mut u8,
                region.len() as usize,
                Access::REMOTE_WRITE,
                None,
            )
        }
    }

    /// The keys of this registration.
    pub fn keys(&self) -> Keys {
        // SAFETY: the MR is live for the life of `self`; its key fields
        // never change after registration.
        let mr = unsafe { self.mr.as_ref() };
        Keys {
            lkey: mr.lkey,
            rkey: mr.rkey,
        }
    }

    /// Whether `addr..addr + len` lies within this registration.
    pub fn covers(&self, addr: usize, len: usize) -> bool {
        // SAFETY: as in `keys`; `addr` and `length` never change either.
        let mr = unsafe { self.mr.as_ref() };
        let start = mr.addr as usize;
        addr >= start
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= start + mr.length)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered exactly once, while
        // its PD is alive (held by `self.pd`). After this returns the device
        // no longer accesses the memory.
        unsafe { (self.pd.api().ibv_dereg_mr)(self.mr.as_ptr()) };
    }
}

/// Page-aligned, zeroed memory this crate allocates and registers for the
/// local device (the send and receive rings). Deregistered, then freed, on
/// drop; its owner (the queue pair) drops it only after the queue pair is
/// destroyed, so the device never touches it afterwards.
pub(crate) struct OwnedMemory {
    ptr: NonNull<u8>,
    layout: Layout,
    /// `Some` until `Drop` deregisters it before freeing the memory.
    mr: Option<MemoryRegion>,
}

// SAFETY: plain memory plus an MR handle; which parts of it may be touched
// by whom is the business of the queues that use it (see `super::queue`).
unsafe impl Send for OwnedMemory {}
// SAFETY: as above.
unsafe impl Sync for OwnedMemory {}

impl OwnedMemory {
    /// `len` bytes (`len > 0`), page-aligned and zeroed, registered in `pd`.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        len: usize,
        access: Access,
    ) -> Result<OwnedMemory, RdmaError> {
        let layout = Layout::from_size_align(len.max(1), 4096).map_err(|_| RdmaError::Call {
            op: "allocate registered buffers",
            source: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| RdmaError::Call {
            op: "allocate registered buffers",
            source: io::Error::from(io::ErrorKind::OutOfMemory),
        })?;
        // SAFETY: the memory is ours; `Drop` deregisters it before freeing,
        // and the queues that use it never let Rust code touch a part the
        // device may write (only the local device accesses it).
        match unsafe { MemoryRegion::register(pd, ptr.as_ptr(), len, access, None) } {
            Ok(mr) => Ok(OwnedMemory {
                ptr,
                layout,
                mr: Some(mr),
            }),
            Err(e) => {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
                Err(e)
            }
        }
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, |m| m.keys().lkey)
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for OwnedMemory {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: allocated in `new` with this layout; the registration is
        // gone (just above), so the device no longer accesses it.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// The registrations of the pool arenas ([`rlun_iscsi::iobuf`]) in one
/// protection domain, each made once (at connect, or at the first use of an
/// arena the pool adds later) and kept for the domain's life: buffers from
/// the pool are then named to the peer without a registration per command.
pub struct PoolRegistrations {
    pd: ProtectionDomain,
    /// By arena index ([`Arena::index`]).
    by_arena: Vec<Option<MemoryRegion>>,
}

/// The keys under which pool memory is reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolKeys {
    pub keys: Keys,
    /// The arena this lookup registered (its first use in this domain).
    pub registered: Option<Arena>,
}

impl PoolRegistrations {
    pub fn new(pd: &ProtectionDomain) -> PoolRegistrations {
        PoolRegistrations {
            pd: pd.clone(),
            by_arena: Vec::new(),
        }
    }

    /// The keys for `addr..addr + len` when it lies in one pool arena
    /// (registering the arena the first time); `None` for other memory.
    pub fn keys(&mut self, addr: usize, len: usize) -> Result<Option<PoolKeys>, RdmaError> {
        let Some(arena) = iobuf::arena_of(addr, len) else {
            return Ok(None);
        };
        self.arena_keys(arena).map(Some)
    }

    /// Register every arena there is (at connect, off the data path);
    /// returns the ones registered now.
    pub fn register_all(&mut self) -> Result<Vec<Arena>, RdmaError> {
        let mut new = Vec::new();
        for a in iobuf::arenas() {
            new.extend(self.arena_keys(a)?.registered);
        }
        Ok(new)
    }

    fn arena_keys(&mut self, arena: Arena) -> Result<PoolKeys, RdmaError> {
        if self.by_arena.len() <= arena.index {
            self.by_arena.resize_with(arena.index + 1, || None);
        }
        let slot = &mut self.by_arena[arena.index];
        let registered = match slot {
            Some(_) => None,
            None => {
                // SAFETY: `arena` comes from the pool's registry
                // (`iobuf::arena_of`/`iobuf::arenas`), whose arenas are
                // leaked allocations that live, unmoved, for the rest of the
                // process: no registration can outlive them. Remote writes
                // land in plain byte buffers (see the module docs).
                let mr = unsafe {
                    MemoryRegion::register(
                        &self.pd,
                        arena.addr as *mut u8,
                        arena.len,
                        Access::REMOTE_ALL,
                        None,
                    )
                }?;
                *slot = Some(mr);
                Some(arena)
            }
        };
        let keys = slot
            .as_ref()
            .map(MemoryRegion::keys)
            .expect("registered above");
        Ok(PoolKeys { keys, registered })
    }
}
