//! One iSER connection: RDMA CM connection setup, a reliable-connected
//! queue pair, registered send/receive buffers, and completions delivered to
//! tokio through the completion channel's file descriptor.
//!
//! All `unsafe` of the iSER transport lives here and in [`super::sys`]; each
//! block says why it is sound. The resources are owned by [`IserConnection`]
//! and released in reverse order of creation in its `Drop`.
//!
//! Flow (RFC 7145 §5.1, and what LIO expects, see `ref/iser/iser.md`):
//! resolve address and route (each bounded by the connect timeout) → protection
//! domain, completion channel, one CQ for sends and receives, RC QP created
//! on the CM id → receive buffers registered and posted → `rdma_connect` with
//! the iSER private data ([`CmPrivateData::RLUN`]) → ESTABLISHED. From then on
//! every iSCSI PDU (login included) is a Send: iSER header + BHS + data.
//!
//! Completions: the CQ is polled until empty; only then is notification
//! re-armed and the CQ polled once more (a completion that arrived between
//! the last poll and the re-arm would otherwise be missed), and only then
//! does the task wait on the channel's fd. Nothing spins while idle.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use super::header::{CmPrivateData, IserHeader, IserMessage, RemoteBuf, ISER_HEADER_LEN};
use super::ledger::Ledger;
use super::slots::SendSlots;
use super::{IserError, MAX_RECV_DATA};
use crate::stats;
use rlun_iscsi::iobuf;
use rlun_iscsi::proto::connection::{DirectBuffers, Transmit};
use rlun_iscsi::proto::pdu::{self, Bhs, FrameLimits, Pdu, WireFrame};
use rlun_sys::rdma::ffi::{
    self as sys, cm_event, Api, IbvCompChannel, IbvCq, IbvMr, IbvSge, IbvWc, RdmaCmId,
};

/// Receive buffers posted at all times: a response for every command the
/// session keeps in flight (queue depth 128 by default; LIO's CmdSN window
/// is 64) plus unsolicited PDUs (NOP-In, Async Message), with margin. A
/// target that outruns them waits on RNR retries, it does not fail.
const RECV_SLOTS: usize = 160;
/// One receive buffer: iSER header, BHS, the largest AHS, and a data segment
/// of up to [`MAX_RECV_DATA`] bytes plus padding.
const RECV_SLOT_LEN: usize = 16 * 1024;
/// Send buffers (and the send queue depth).
const SEND_SLOTS: usize = 32;
const SEND_SLOT_LEN: usize = 16 * 1024;
/// At most this many Sends in a row go unsignalled (see [`SendSlots`]).
const SIGNAL_EVERY: usize = SEND_SLOTS / 4;
/// Sends chained into one `ibv_post_send`.
const MAX_CHAIN: usize = SEND_SLOTS / 2;
/// Work completions taken from the CQ per poll; received buffers are
/// reposted once per batch, as one chain.
const POLL_BATCH: usize = 16;
// A chain never needs more slots than exist, and signalling at least every
// SIGNAL_EVERY Sends keeps the send queue from filling with Sends that
// nothing completes.
const _: () = assert!(MAX_CHAIN <= SEND_SLOTS);
const _: () = assert!(SIGNAL_EVERY >= 1 && SIGNAL_EVERY <= SEND_SLOTS / 2);
/// CQ events acknowledged in one `ibv_ack_cq_events` call.
const ACK_BATCH: u32 = 32;

/// A raw fd registered with tokio; the owner (rdma-core) closes it.
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own (from rdma-core), with valid arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Register an rdma-core channel fd with tokio, for readability only.
fn register_fd(fd: RawFd, op: &'static str) -> Result<AsyncFd<Fd>, IserError> {
    // SAFETY: `fd` belongs to a channel that `IserConnection` keeps open for
    // longer than the returned AsyncFd: its Drop drops the AsyncFd before
    // destroying the channel, and `Fd::as_raw_fd` always returns this fd.
    unsafe { AsyncFd::register_with_interest(Fd(fd), tokio::io::Interest::READABLE) }.map_err(|e| {
        IserError::Verbs {
            op,
            source: io::Error::other(e.to_string()),
        }
    })
}

/// Page-aligned memory registered with the device. Freed after
/// deregistration, in `Drop`.
struct Region {
    api: &'static Api,
    ptr: *mut u8,
    len: usize,
    mr: *mut IbvMr,
}

impl Region {
    fn new(
        api: &'static Api,
        pd: *mut c_void,
        len: usize,
        access: c_int,
    ) -> Result<Region, IserError> {
        let layout =
            std::alloc::Layout::from_size_align(len, 4096).map_err(|_| IserError::Verbs {
                op: "allocate buffers",
                source: io::Error::from(io::ErrorKind::InvalidInput),
            })?;
        // SAFETY: the layout has a non-zero size (callers pass len > 0).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(IserError::Verbs {
                op: "allocate buffers",
                source: io::Error::from(io::ErrorKind::OutOfMemory),
            });
        }
        // SAFETY: `pd` is a live protection domain; [ptr, ptr+len) is memory
        // we own and keep alive (and unmoved) until the MR is deregistered.
        let mr = unsafe { (api.ibv_reg_mr)(pd, ptr.cast(), len, access) };
        if mr.is_null() {
            let err = io::Error::last_os_error();
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(registration_error(len, err));
        }
        Ok(Region { api, ptr, len, mr })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live for the life of `self`.
        unsafe { (*self.mr).lkey }
    }

    fn slot(&self, i: usize, slot_len: usize) -> *mut u8 {
        debug_assert!((i + 1) * slot_len <= self.len);
        // SAFETY: in bounds of our allocation (checked by callers' slot counts).
        unsafe { self.ptr.add(i * slot_len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `mr` was registered by us and is deregistered once; the QP
        // using it has been destroyed (IserConnection drops regions after it).
        unsafe { (self.api.ibv_dereg_mr)(self.mr) };
        let layout =
            std::alloc::Layout::from_size_align(self.len, 4096).expect("valid at creation");
        // SAFETY: allocated in `new` with this layout; no device access remains.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// Registration failed: say what limit to raise when it is the pinned-memory
/// limit, rather than only an errno.
fn registration_error(len: usize, err: io::Error) -> IserError {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let limit =
        (unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0).then_some(lim.rlim_cur);
    match err.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => IserError::Memlock {
            bytes: len,
            limit: limit
                .map(|l| {
                    if l == libc::RLIM_INFINITY {
                        "unlimited".into()
                    } else {
                        format!("{l} bytes")
                    }
                })
                .unwrap_or_else(|| "unknown".into()),
            source: err,
        },
        _ => IserError::Verbs {
            op: "register memory (ibv_reg_mr)",
            source: err,
        },
    }
}

/// Raise the soft RLIMIT_MEMLOCK to the hard limit: registered memory is
/// pinned and counts against it. Failure is not fatal here; registration
/// reports what to raise if it then fails.
pub fn raise_memlock_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let old = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0 {
                debug!(
                    old,
                    new = lim.rlim_max,
                    "raised RLIMIT_MEMLOCK soft limit to the hard limit"
                );
            }
        }
    }
}

/// Check that rdma-core loads and at least one RDMA device exists.
pub fn check_devices() -> Result<&'static Api, IserError> {
    let api = sys::api().map_err(|e| IserError::Unavailable {
        library: e.library,
        detail: e.detail,
    })?;
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count into `n` and returns NULL
    // or a list we free below.
    let list = unsafe { (api.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Err(IserError::NoDevice {
            detail: io::Error::last_os_error().to_string(),
        });
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { (api.ibv_free_device_list)(list) };
    if n == 0 {
        return Err(IserError::NoDevice {
            detail: "ibv_get_device_list found 0 devices".into(),
        });
    }
    Ok(api)
}

/// Memory of one SCSI command registered for the target's RDMA access (the
/// core owns the memory; we own the registration until the response).
struct Mr {
    api: &'static Api,
    mr: *mut IbvMr,
}

impl Mr {
    fn new(
        api: &'static Api,
        pd: *mut c_void,
        addr: *mut u8,
        len: usize,
        access: c_int,
    ) -> Result<Mr, IserError> {
        // SAFETY: the core guarantees the memory stays allocated and unmoved
        // until the task completes (transport contract in
        // `crate::transport`); the registration is dropped no later than
        // that (at the SCSI Response, or when the connection is torn down,
        // which moves the QP to the error state first).
        let mr = unsafe { (api.ibv_reg_mr)(pd, addr.cast(), len, access) };
        if mr.is_null() {
            return Err(registration_error(len, io::Error::last_os_error()));
        }
        Ok(Mr { api, mr })
    }

    fn rkey(&self) -> u32 {
        // SAFETY: `mr` is live for the life of `self`.
        unsafe { (*self.mr).rkey }
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live for the life of `self`.
        unsafe { (*self.mr).lkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, deregistered exactly once.
        unsafe { (self.api.ibv_dereg_mr)(self.mr) };
    }
}

// SAFETY: an MR handle may be deregistered from any thread.
unsafe impl Send for Mr {}

/// A CM event, copied out of rdma-core's struct before it is acknowledged.
#[derive(Debug)]
struct CmEvent {
    kind: c_int,
    status: c_int,
    private_data: Vec<u8>,
}

/// One completion queue with its own completion channel.
struct Cq {
    comp: *mut IbvCompChannel,
    cq: *mut IbvCq,
}

/// The rdma-core objects of one connection, shared by the two halves and
/// released when the last half goes (see `Drop`).
struct Shared {
    api: &'static Api,
    addr: SocketAddr,
    channel: *mut sys::RdmaEventChannel,
    id: *mut RdmaCmId,
    pd: *mut c_void,
    send_cq: Cq,
    recv_cq: Cq,
    qp_created: bool,
    recv_region: Option<Region>,
    send_region: Option<Region>,
    /// Per-command registrations of in-flight commands whose buffers are
    /// not in the registered pool, by Initiator Task Tag.
    registrations: std::sync::Mutex<Ledger<Mr>>,
    /// The registration of each pool arena with this connection's PD, by
    /// arena index (see [`rlun_iscsi::iobuf`]); made at connect, or at first use
    /// for arenas the pool adds later, and kept for the connection's life.
    arena_mrs: std::sync::Mutex<Vec<Option<Mr>>>,
    /// Set once the QP was moved to the error state (no remote access).
    disconnected: AtomicBool,
}

// SAFETY: the raw pointers are rdma-core objects owned by this struct;
// libibverbs and librdmacm allow using them from any thread. Each half only
// touches its own CQ; posting to the QP is thread-safe in rdma-core.
unsafe impl Send for Shared {}
// SAFETY: as above; shared state that changes is behind a Mutex or atomic.
unsafe impl Sync for Shared {}

impl Shared {
    fn qp(&self) -> *mut sys::IbvQp {
        // SAFETY: the id is live and has a QP once `qp_created`.
        unsafe { (*self.id).qp }
    }

    /// Move the QP to the error state: the target can no longer touch any
    /// of our registered memory. Idempotent.
    fn disconnect(&self) {
        if self.qp_created && !self.disconnected.swap(true, Ordering::SeqCst) {
            // SAFETY: id live; rdma_disconnect on an id with a QP moves the
            // QP to the error state (also when never connected).
            unsafe { (self.api.rdma_disconnect)(self.id) };
        }
    }

    /// Post receive buffers `slots` as one chain of work requests.
    fn post_recvs(&self, slots: &[usize]) -> Result<(), IserError> {
        if slots.is_empty() {
            return Ok(());
        }
        let region = self
            .recv_region
            .as_ref()
            .expect("registered before posting");
        let mut sges: Vec<IbvSge> = slots
            .iter()
            .map(|&slot| IbvSge {
                addr: region.slot(slot, RECV_SLOT_LEN) as u64,
                length: RECV_SLOT_LEN as u32,
                lkey: region.lkey(),
            })
            .collect();
        let mut wrs: Vec<sys::IbvRecvWr> = slots
            .iter()
            .zip(sges.iter_mut())
            .map(|(&slot, sge)| sys::IbvRecvWr {
                wr_id: slot as u64,
                next: ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
            })
            .collect();
        // Link the chain now that `wrs` no longer moves.
        for i in 1..wrs.len() {
            let next: *mut sys::IbvRecvWr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad = ptr::null_mut();
        let qp = self.qp();
        // SAFETY: qp live; the SGEs point into registered memory that stays
        // allocated until the QP is destroyed; `wrs` (linked through `next`)
        // and `sges` are read by the provider during the call only.
        let rc = unsafe { ((*(*qp).context).ops.post_recv)(qp, wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(IserError::Verbs {
                op: "post a receive buffer",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    fn arm(&self, cq: &Cq) -> Result<(), IserError> {
        // SAFETY: cq live.
        let rc = unsafe { ((*(*cq.cq).context).ops.req_notify_cq)(cq.cq, 0) };
        if rc != 0 {
            return Err(IserError::Verbs {
                op: "arm completion notification",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    /// Take up to `max` pending completion events of `cq`'s channel;
    /// returns how many.
    ///
    /// A waiting half takes one per wake-up (`max` 1), which saves the
    /// `read` that would only return EAGAIN: each channel serves one CQ,
    /// which is armed only just before waiting, so one event is normally
    /// all there is; one left behind (an arm that fired while the half was
    /// not waiting) costs a spurious wake-up later, never a lost one, as
    /// every new event wakes the edge-triggered registration again, and the
    /// half re-arms and polls before it waits. Drop takes them all.
    fn take_events(&self, cq: &Cq, max: u32) -> Result<u32, IserError> {
        let mut n = 0;
        while n < max {
            let mut got = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: channel live and non-blocking; the caller acks every
            // event it counts before the CQ is destroyed.
            if unsafe { (self.api.ibv_get_cq_event)(cq.comp, &mut got, &mut ctx) } != 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    return Ok(n);
                }
                return Err(IserError::Verbs {
                    op: "read a completion event",
                    source: err,
                });
            }
            n += 1;
        }
        Ok(n)
    }

    fn ack(&self, cq: &Cq, n: u32) {
        if n > 0 {
            // SAFETY: cq live; acking events taken from its channel.
            unsafe { (self.api.ibv_ack_cq_events)(cq.cq, n) };
        }
    }

    /// One batch of work completions (at most `wcs.len()`).
    fn poll<'w>(&self, cq: &Cq, wcs: &'w mut [IbvWc]) -> Result<&'w [IbvWc], IserError> {
        // SAFETY: cq live; `wcs` has room for `wcs.len()` entries.
        let n = unsafe {
            ((*(*cq.cq).context).ops.poll_cq)(cq.cq, wcs.len() as c_int, wcs.as_mut_ptr())
        };
        if n < 0 {
            return Err(IserError::Verbs {
                op: "poll a completion queue",
                source: io::Error::other(format!("ibv_poll_cq returned {n}")),
            });
        }
        Ok(&wcs[..n as usize])
    }

    fn completion_error(&self, wc: &IbvWc) -> IserError {
        IserError::Completion {
            addr: self.addr,
            status: sys::wc_status_str(self.api, wc.status),
            flushed: wc.status == sys::IBV_WC_WR_FLUSH_ERR,
        }
    }

    fn describe(&self, ev: &CmEvent) -> String {
        let status = if ev.status < 0 {
            io::Error::from_raw_os_error(-ev.status).to_string()
        } else {
            format!("status {}", ev.status)
        };
        format!("{} ({status})", sys::event_str(self.api, ev.kind))
    }

    fn try_cm_event(&self) -> Result<Option<CmEvent>, IserError> {
        let mut ev: *mut sys::RdmaCmEvent = ptr::null_mut();
        // SAFETY: channel live and non-blocking; on success `ev` points to an
        // event we copy and then acknowledge exactly once.
        if unsafe { (self.api.rdma_get_cm_event)(self.channel, &mut ev) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(IserError::Verbs {
                op: "read a CM event",
                source: err,
            });
        }
        // SAFETY: `ev` is valid until acknowledged; private data (if any) is
        // `private_data_len` bytes at `private_data`.
        let out = unsafe {
            let e = &*ev;
            let pd = if e.conn.private_data.is_null() || e.conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    e.conn.private_data.cast::<u8>(),
                    usize::from(e.conn.private_data_len),
                )
                .to_vec()
            };
            CmEvent {
                kind: e.event,
                status: e.status,
                private_data: pd,
            }
        };
        // SAFETY: acknowledged once, after the copy.
        unsafe { (self.api.rdma_ack_cm_event)(ev) };
        debug!(event = %sys::event_str(self.api, out.kind), status = out.status, "RDMA CM event");
        Ok(Some(out))
    }

    /// The (lkey, rkey) under which `addr..addr+len` is reachable when it
    /// lies in a pool arena, registering the arena with this connection the
    /// first time (see [`rlun_iscsi::iobuf`]); `None` for memory outside the pool.
    fn pool_keys(&self, addr: usize, len: usize) -> Result<Option<(u32, u32)>, IserError> {
        let Some(arena) = iobuf::arena_of(addr, len) else {
            return Ok(None);
        };
        let mut mrs = self.arena_mrs.lock().unwrap_or_else(|e| e.into_inner());
        if mrs.len() <= arena.index {
            mrs.resize_with(arena.index + 1, || None);
        }
        if mrs[arena.index].is_none() {
            mrs[arena.index] = Some(self.register_arena(arena)?);
        }
        let mr = mrs[arena.index].as_ref().expect("registered above");
        Ok(Some((mr.lkey(), mr.rkey())))
    }

    fn register_arena(&self, arena: iobuf::Arena) -> Result<Mr, IserError> {
        let access = sys::IBV_ACCESS_LOCAL_WRITE
            | sys::IBV_ACCESS_REMOTE_WRITE
            | sys::IBV_ACCESS_REMOTE_READ;
        // Arenas live (unmoved) for the rest of the process (`iobuf`), so
        // the registration can never outlive its memory.
        let mr = Mr::new(self.api, self.pd, arena.addr as *mut u8, arena.len, access)?;
        stats::add_pool_registration();
        debug!(
            arena = arena.index,
            bytes = arena.len,
            "registered a buffer pool arena"
        );
        Ok(mr)
    }

    /// Register every pool arena there is (at connect, off the data path).
    fn register_arenas(&self) -> Result<(), IserError> {
        for a in iobuf::arenas() {
            self.pool_keys(a.addr, a.len)?;
        }
        Ok(())
    }

    /// Name a direct command's buffers in its iSER header (RFC 7145 §9.2:
    /// Read STag/VA for the data the target RDMA-Writes, Write STag/VA for
    /// what it RDMA-Reads, the latter pointing at the first byte not sent
    /// as immediate/unsolicited data). Buffers in the registered pool go
    /// under their arena's key; others are registered for this command and
    /// released at its SCSI Response or when task management ends it.
    /// Also returns the local key that covers the whole write data, for
    /// sending its immediate part without a copy.
    fn register_direct(
        &self,
        d: &DirectBuffers,
        lun: [u8; 8],
    ) -> Result<(IserHeader, Option<u32>), IserError> {
        let mut mrs = Vec::new();
        let mut read = None;
        let mut write = None;
        let mut write_lkey = None;
        if let Some(r) = d.read.filter(|r| r.len > 0) {
            let stag = match self.pool_keys(r.addr, r.len as usize)? {
                Some((_, rkey)) => rkey,
                None => {
                    let access = sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE;
                    let mr = Mr::new(self.api, self.pd, r.addr as *mut u8, r.len as usize, access)?;
                    stats::add_data_path_registration();
                    let k = mr.rkey();
                    mrs.push(mr);
                    k
                }
            };
            read = Some(RemoteBuf {
                stag,
                va: r.addr as u64,
            });
        }
        if let Some(w) = &d.write {
            let all = &w.data;
            let rest = all.slice(w.offset as usize..);
            if !rest.is_empty() {
                let (lkey, rkey) = match self.pool_keys(all.as_ptr() as usize, all.len())? {
                    Some(k) => k,
                    None => {
                        // Remote read only: the target never writes into
                        // write data. The whole buffer, so the immediate
                        // part can be sent from it too.
                        let mr = Mr::new(
                            self.api,
                            self.pd,
                            all.as_ptr().cast_mut(),
                            all.len(),
                            sys::IBV_ACCESS_REMOTE_READ,
                        )?;
                        stats::add_data_path_registration();
                        let k = (mr.lkey(), mr.rkey());
                        mrs.push(mr);
                        k
                    }
                };
                write = Some(RemoteBuf {
                    stag: rkey,
                    va: rest.as_ptr() as u64,
                });
                write_lkey = Some(lkey);
            }
        }
        let stale = self
            .registrations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(d.itt, lun, mrs);
        if stale.is_some() {
            warn!(
                itt = d.itt,
                "Initiator Task Tag reused while its buffers were registered"
            );
        }
        Ok((IserHeader::control(write, read), write_lkey))
    }

    /// The target answered task `itt`: it will not touch its buffers again.
    fn release(&self, itt: u32) {
        let gone = self
            .registrations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_response(itt);
        drop(gone);
    }

    /// The target answered task management request `itt`: the tasks it
    /// ended lose their registrations.
    fn release_tmf(&self, itt: u32, response: u8) {
        let gone = self
            .registrations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_tmf_response(itt, response);
        if !gone.is_empty() {
            debug!(
                tmf = itt,
                registrations = gone.len(),
                "released the registrations of tasks ended by task management"
            );
        }
    }

    fn note_tmf(&self, itt: u32, function: u8, lun: [u8; 8], ref_itt: u32) {
        self.registrations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_tmf_request(itt, function, lun, ref_itt);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let api = self.api;
        self.disconnect();
        // SAFETY: every pointer is NULL (never created) or a live object
        // created in `IserTransport::connect` and released exactly once here,
        // in reverse order: QP before CQs and MRs, CQs before their channels,
        // the PD after everything registered in it, the id before its event
        // channel. The halves (which own the tokio registrations of the
        // channel fds and ack their CQ events) are gone: they hold the Arc.
        unsafe {
            if self.qp_created {
                (api.rdma_destroy_qp)(self.id);
            }
            *self
                .registrations
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()) = Ledger::default();
            self.arena_mrs
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            self.recv_region = None;
            self.send_region = None;
            for cq in [&self.send_cq, &self.recv_cq] {
                if !cq.cq.is_null() {
                    (api.ibv_destroy_cq)(cq.cq);
                }
                if !cq.comp.is_null() {
                    (api.ibv_destroy_comp_channel)(cq.comp);
                }
            }
            if !self.pd.is_null() {
                (api.ibv_dealloc_pd)(self.pd);
            }
            if !self.id.is_null() {
                (api.rdma_destroy_id)(self.id);
            }
            if !self.channel.is_null() {
                (api.rdma_destroy_event_channel)(self.channel);
            }
        }
    }
}

/// A connected iSER queue pair (RFC 7145 §5.1), before it is split into
/// its receive and send halves.
pub struct IserTransport {
    // Fields drop in order: the tokio registrations of the channel fds
    // before `shared`, whose Drop closes those fds.
    cm_fd: AsyncFd<Fd>,
    recv_fd: AsyncFd<Fd>,
    send_fd: AsyncFd<Fd>,
    shared: Arc<Shared>,
    /// What the target said in its REP private data (None: it sent none).
    pub peer_private_data: Option<CmPrivateData>,
}

/// Build-up state of a connection: owns the objects until they are all
/// made, so an early error releases what exists (through `Shared`'s Drop).
struct Setup {
    shared: Shared,
    cm_fd: Option<AsyncFd<Fd>>,
    recv_fd: Option<AsyncFd<Fd>>,
    send_fd: Option<AsyncFd<Fd>>,
}

impl Setup {
    fn verbs_err(op: &'static str) -> IserError {
        IserError::Verbs {
            op,
            source: io::Error::last_os_error(),
        }
    }

    async fn cm_event(
        &mut self,
        timeout: Duration,
        step: &'static str,
    ) -> Result<CmEvent, IserError> {
        let addr = self.shared.addr;
        let shared = &self.shared;
        let fd = self.cm_fd.as_ref().expect("registered first");
        let wait = async {
            loop {
                if let Some(ev) = shared.try_cm_event()? {
                    return Ok(ev);
                }
                let mut g = fd.readable().await.map_err(|source| IserError::Verbs {
                    op: "wait for CM events",
                    source,
                })?;
                g.clear_ready();
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(r) => r,
            Err(_) => Err(IserError::Timeout {
                addr,
                step,
                timeout,
            }),
        }
    }

    fn make_cq(
        &mut self,
        ctx: *mut sys::IbvContext,
        depth: usize,
        recv: bool,
    ) -> Result<(), IserError> {
        let api = self.shared.api;
        // SAFETY: ctx is the live device context of the CM id.
        let comp = unsafe { (api.ibv_create_comp_channel)(ctx) };
        if comp.is_null() {
            return Err(Self::verbs_err("create a completion channel"));
        }
        let slot = if recv {
            &mut self.shared.recv_cq
        } else {
            &mut self.shared.send_cq
        };
        slot.comp = comp;
        // SAFETY: comp live; its fd is plain data.
        let fd = unsafe { (*comp).fd };
        set_nonblocking(fd).map_err(|source| IserError::Verbs {
            op: "set a completion channel non-blocking",
            source,
        })?;
        let afd = register_fd(fd, "register a completion channel with tokio")?;
        // SAFETY: ctx and comp live; the CQ is destroyed in Shared's Drop
        // after the QP.
        let cq = unsafe { (api.ibv_create_cq)(ctx, depth as c_int, ptr::null_mut(), comp, 0) };
        if cq.is_null() {
            return Err(Self::verbs_err("create a completion queue"));
        }
        slot.cq = cq;
        if recv {
            self.recv_fd = Some(afd);
        } else {
            self.send_fd = Some(afd);
        }
        Ok(())
    }

    /// After route resolution: PD, CQs, QP, registered buffers, receives
    /// posted, then `rdma_connect` with the iSER private data. Synchronous,
    /// so no raw pointer is held across an await.
    fn build_and_connect(&mut self) -> Result<(), IserError> {
        let api = self.shared.api;
        let addr = self.shared.addr;
        // SAFETY: after address resolution the id is bound to a device whose
        // context (`verbs`) the CM keeps open for the id's life.
        let ctx = unsafe { (*self.shared.id).verbs };
        if ctx.is_null() {
            return Err(IserError::AddrResolve {
                addr,
                reason: "no device bound after resolution".into(),
            });
        }
        // SAFETY: ctx is a live device context.
        self.shared.pd = unsafe { (api.ibv_alloc_pd)(ctx) };
        if self.shared.pd.is_null() {
            return Err(Self::verbs_err("allocate a protection domain"));
        }
        self.make_cq(ctx, SEND_SLOTS, false)?;
        self.make_cq(ctx, RECV_SLOTS, true)?;
        let mut attr = sys::IbvQpInitAttr {
            qp_context: ptr::null_mut(),
            send_cq: self.shared.send_cq.cq,
            recv_cq: self.shared.recv_cq.cq,
            srq: ptr::null_mut(),
            cap: sys::IbvQpCap {
                max_send_wr: SEND_SLOTS as u32,
                max_recv_wr: RECV_SLOTS as u32,
                // Header and BHS, the data segment in place, padding.
                max_send_sge: 3,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: id, pd and CQs are live and belong to the same device context.
        if unsafe { (api.rdma_create_qp)(self.shared.id, self.shared.pd, &mut attr) } != 0 {
            return Err(Self::verbs_err("create the queue pair (rdma_create_qp)"));
        }
        self.shared.qp_created = true;

        raise_memlock_limit();
        self.shared.recv_region = Some(Region::new(
            api,
            self.shared.pd,
            RECV_SLOTS * RECV_SLOT_LEN,
            sys::IBV_ACCESS_LOCAL_WRITE,
        )?);
        self.shared.send_region = Some(Region::new(
            api,
            self.shared.pd,
            SEND_SLOTS * SEND_SLOT_LEN,
            sys::IBV_ACCESS_LOCAL_WRITE,
        )?);
        // From now on I/O buffers come from the registered pool; the arenas
        // that exist are registered here, off the data path.
        iobuf::enable();
        self.shared.register_arenas()?;
        // Receive buffers go up before the connect: LIO may send as soon as
        // the connection is established.
        let all: Vec<usize> = (0..RECV_SLOTS).collect();
        for chunk in all.chunks(POLL_BATCH) {
            self.shared.post_recvs(chunk)?;
        }
        self.shared.arm(&self.shared.recv_cq)?;
        self.shared.arm(&self.shared.send_cq)?;

        // Our RDMA Read *responder* resources bound how many reads of write
        // data the target may have outstanding: offer the device maximum
        // (0xff lets librdmacm fill it in).
        let private = CmPrivateData::RLUN.encode();
        let mut param = sys::RdmaConnParam {
            private_data: private.as_ptr().cast(),
            private_data_len: private.len() as u8,
            responder_resources: 0xff,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        // SAFETY: id has a QP and a resolved route; `param` and `private`
        // outlive the call (the CM copies the private data).
        if unsafe { (api.rdma_connect)(self.shared.id, &mut param) } != 0 {
            return Err(Self::verbs_err("start the RDMA connection (rdma_connect)"));
        }
        Ok(())
    }

    async fn run(&mut self, timeout: Duration) -> Result<Option<CmPrivateData>, IserError> {
        let api = self.shared.api;
        let addr = self.shared.addr;
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: no preconditions; returns NULL or a channel destroyed in Drop.
        self.shared.channel = unsafe { (api.rdma_create_event_channel)() };
        if self.shared.channel.is_null() {
            return Err(Self::verbs_err("create an RDMA CM event channel"));
        }
        // SAFETY: the channel is live; its fd field is plain data.
        let cm_fd = unsafe { (*self.shared.channel).fd };
        set_nonblocking(cm_fd).map_err(|source| IserError::Verbs {
            op: "set the CM channel non-blocking",
            source,
        })?;
        self.cm_fd = Some(register_fd(cm_fd, "register the CM channel with tokio")?);
        // SAFETY: channel live; `id` receives a new id destroyed in Drop.
        if unsafe {
            (api.rdma_create_id)(
                self.shared.channel,
                &mut self.shared.id,
                ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        } != 0
        {
            return Err(Self::verbs_err("create an RDMA CM id"));
        }

        let (mut storage, _len) = sockaddr_of(addr);
        // SAFETY: id live; `storage` holds a valid sockaddr_in/in6 for the call.
        if unsafe {
            (api.rdma_resolve_addr)(
                self.shared.id,
                ptr::null_mut(),
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                ms,
            )
        } != 0
        {
            return Err(IserError::AddrResolve {
                addr,
                reason: io::Error::last_os_error().to_string(),
            });
        }
        let ev = self.cm_event(timeout, "address resolution").await?;
        if ev.kind != cm_event::ADDR_RESOLVED {
            return Err(IserError::AddrResolve {
                addr,
                reason: self.shared.describe(&ev),
            });
        }
        // SAFETY: id live with a resolved address.
        if unsafe { (api.rdma_resolve_route)(self.shared.id, ms) } != 0 {
            return Err(Self::verbs_err("resolve the RDMA route"));
        }
        let ev = self.cm_event(timeout, "route resolution").await?;
        if ev.kind != cm_event::ROUTE_RESOLVED {
            return Err(IserError::RouteResolve {
                addr,
                reason: self.shared.describe(&ev),
            });
        }

        self.build_and_connect()?;
        let ev = self.cm_event(timeout, "connection").await?;
        match ev.kind {
            cm_event::ESTABLISHED => Ok(CmPrivateData::decode(&ev.private_data)),
            cm_event::REJECTED => Err(IserError::Rejected {
                addr,
                status: ev.status,
            }),
            cm_event::UNREACHABLE | cm_event::CONNECT_ERROR => Err(IserError::Unreachable {
                addr,
                reason: self.shared.describe(&ev),
            }),
            _ => Err(IserError::Unreachable {
                addr,
                reason: format!("unexpected {}", self.shared.describe(&ev)),
            }),
        }
    }
}

impl IserTransport {
    /// Connect to the iSER portal `addr` through the RDMA CM, each step
    /// bounded by `timeout`.
    pub async fn connect_addr(
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<IserTransport, IserError> {
        let api = check_devices()?;
        let mut setup = Setup {
            shared: Shared {
                api,
                addr,
                channel: ptr::null_mut(),
                id: ptr::null_mut(),
                pd: ptr::null_mut(),
                send_cq: Cq {
                    comp: ptr::null_mut(),
                    cq: ptr::null_mut(),
                },
                recv_cq: Cq {
                    comp: ptr::null_mut(),
                    cq: ptr::null_mut(),
                },
                qp_created: false,
                recv_region: None,
                send_region: None,
                registrations: std::sync::Mutex::new(Ledger::default()),
                arena_mrs: std::sync::Mutex::new(Vec::new()),
                disconnected: AtomicBool::new(false),
            },
            cm_fd: None,
            recv_fd: None,
            send_fd: None,
        };
        match setup.run(timeout).await {
            Ok(peer) => {
                debug!(%addr, ?peer, "iSER connection established");
                let Setup {
                    shared,
                    cm_fd,
                    recv_fd,
                    send_fd,
                } = setup;
                Ok(IserTransport {
                    shared: Arc::new(shared),
                    cm_fd: cm_fd.expect("set up"),
                    recv_fd: recv_fd.expect("set up"),
                    send_fd: send_fd.expect("set up"),
                    peer_private_data: peer,
                })
            }
            Err(e) => {
                // Drop the tokio registrations before the fds close.
                setup.cm_fd = None;
                setup.recv_fd = None;
                setup.send_fd = None;
                // Events taken so far were none (channels unused before
                // connect), so destroying the CQs needs no ack.
                Err(e)
            }
        }
    }

    /// Split into the receive half (which also watches CM events) and the
    /// send half.
    pub fn into_halves(self, limits: FrameLimits) -> (IserReader, IserWriter) {
        let IserTransport {
            shared,
            cm_fd,
            recv_fd,
            send_fd,
            ..
        } = self;
        let reader = IserReader {
            shared: shared.clone(),
            cm_fd: Some(cm_fd),
            fd: Some(recv_fd),
            received: VecDeque::new(),
            limits: iser_limits(limits),
            unacked: 0,
            ended: None,
        };
        let writer = IserWriter {
            shared,
            fd: Some(send_fd),
            slots: SendSlots::new(SEND_SLOTS, SIGNAL_EVERY),
            held: vec![None; SEND_SLOTS],
            pending: Vec::with_capacity(MAX_CHAIN),
            unacked: 0,
        };
        (reader, writer)
    }
}

/// No digests on iSER (RFC 7145 §7.2), and never more data than a receive
/// buffer holds.
fn iser_limits(l: FrameLimits) -> FrameLimits {
    FrameLimits {
        digests: pdu::Digests::default(),
        max_data_segment: l.max_data_segment.min(MAX_RECV_DATA),
    }
}

/// The receive half: receive completions, CM events (disconnects).
pub struct IserReader {
    shared: Arc<Shared>,
    cm_fd: Option<AsyncFd<Fd>>,
    fd: Option<AsyncFd<Fd>>,
    received: VecDeque<Pdu>,
    limits: FrameLimits,
    unacked: u32,
    /// Set once the connection ended: every later read returns it again.
    ended: Option<String>,
}

impl IserReader {
    pub fn set_limits(&mut self, limits: FrameLimits) {
        self.limits = iser_limits(limits);
    }

    /// A PDU that has already arrived, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Pdu>, IserError> {
        if self.received.is_empty() && self.ended.is_none() {
            self.poll_all()?;
        }
        Ok(self.received.pop_front())
    }

    /// The next PDU. Cancel-safe: completed receives wait in a queue.
    pub async fn read_pdu(&mut self) -> Result<Pdu, IserError> {
        loop {
            if let Some(p) = self.received.pop_front() {
                return Ok(p);
            }
            if let Some(event) = &self.ended {
                return Err(IserError::Disconnected {
                    addr: self.shared.addr,
                    event: event.clone(),
                });
            }
            if self.poll_all()? > 0 {
                continue;
            }
            self.shared.arm(&self.shared.recv_cq)?;
            if self.poll_all()? > 0 {
                continue;
            }
            let fd = self.fd.as_ref().expect("live");
            let cm = self.cm_fd.as_ref().expect("live");
            tokio::select! {
                g = fd.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for receive completions", source })?;
                    g.clear_ready();
                    self.unacked += self.shared.take_events(&self.shared.recv_cq, 1)?;
                    if self.unacked >= ACK_BATCH {
                        self.shared.ack(&self.shared.recv_cq, self.unacked);
                        self.unacked = 0;
                    }
                }
                g = cm.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for CM events", source })?;
                    g.clear_ready();
                    while let Some(ev) = self.shared.try_cm_event()? {
                        match ev.kind {
                            cm_event::DISCONNECTED | cm_event::DEVICE_REMOVAL | cm_event::ADDR_CHANGE
                            | cm_event::TIMEWAIT_EXIT => {
                                self.shared.disconnect();
                                // Deliver what arrived before the end first.
                                self.poll_all().ok();
                                self.ended = Some(self.shared.describe(&ev));
                            }
                            _ => debug!(event = %self.shared.describe(&ev), "ignoring CM event"),
                        }
                    }
                }
            }
        }
    }

    /// Take every receive completion there is; returns how many PDUs came.
    ///
    /// The buffers of one poll batch go back to the device together, as
    /// one chain, after the batch: at most [`POLL_BATCH`] of the
    /// [`RECV_SLOTS`] are ever off the receive queue at once.
    fn poll_all(&mut self) -> Result<usize, IserError> {
        let mut wcs = [IbvWc::default(); POLL_BATCH];
        let mut repost = [0usize; POLL_BATCH];
        let mut total = 0;
        loop {
            let batch = self.shared.poll(&self.shared.recv_cq, &mut wcs)?.to_vec();
            let mut n = 0;
            let mut result = Ok(());
            for wc in &batch {
                if wc.status != sys::IBV_WC_SUCCESS {
                    if wc.status == sys::IBV_WC_WR_FLUSH_ERR
                        && self.shared.disconnected.load(Ordering::SeqCst)
                    {
                        continue;
                    }
                    result = Err(self.shared.completion_error(wc));
                    break;
                }
                match self.received_one(wc) {
                    Ok((slot, pdus)) => {
                        repost[n] = slot;
                        n += 1;
                        total += pdus;
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            self.shared.post_recvs(&repost[..n])?;
            result?;
            if batch.len() < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    /// One receive completion: decode its PDU (the buffer's contents are
    /// copied out, so the caller may repost it). Returns the buffer's slot
    /// and how many PDUs were queued (0 or 1).
    fn received_one(&mut self, wc: &IbvWc) -> Result<(usize, usize), IserError> {
        let slot = wc.wr_id as usize;
        if slot >= RECV_SLOTS {
            return Err(IserError::Verbs {
                op: "take a receive completion",
                source: io::Error::other("unknown receive buffer"),
            });
        }
        let len = (wc.byte_len as usize).min(RECV_SLOT_LEN);
        let region = self.shared.recv_region.as_ref().expect("registered");
        // SAFETY: the device wrote `byte_len` bytes into this slot and has
        // completed; the slot is reposted only after this copy.
        let msg = unsafe { std::slice::from_raw_parts(region.slot(slot, RECV_SLOT_LEN), len) };
        let parsed = match IserMessage::parse(msg) {
            Ok(IserMessage::Control { pdu, .. }) => decode_pdu(pdu, &self.limits).map(Some),
            Ok(IserMessage::HelloReply(r)) => {
                // Accepted and ignored: we never send Hello.
                warn!(reply = ?r, "target sent an unsolicited iSER Hello Reply");
                Ok(None)
            }
            Err(e) => Err(IserError::Header(e)),
        };
        match parsed? {
            Some(p) => {
                match &p.bhs {
                    // RC ordering: the target's RDMA operations for the
                    // task(s) completed before this response arrived.
                    Bhs::ScsiResponse(r) => self.shared.release(r.itt),
                    Bhs::TaskMgmtResponse(r) => self.shared.release_tmf(r.itt, r.response),
                    _ => {}
                }
                self.received.push_back(p);
                Ok((slot, 1))
            }
            None => Ok((slot, 0)),
        }
    }
}

impl Drop for IserReader {
    fn drop(&mut self) {
        // Revoke the target's access to every buffer now (the core may free
        // them right after this half is gone), whatever the writer task does.
        self.shared.disconnect();
        self.fd = None;
        self.cm_fd = None;
        let n = self.unacked
            + self
                .shared
                .take_events(&self.shared.recv_cq, u32::MAX)
                .unwrap_or(0);
        self.shared.ack(&self.shared.recv_cq, n);
    }
}

/// Decode a PDU from a Send. Targets need not pad the data segment of the
/// last PDU in a message; we pad it to the codec's framing.
fn decode_pdu(bytes: &[u8], limits: &FrameLimits) -> Result<Pdu, IserError> {
    let need = pdu::frame_length(bytes, limits)?.ok_or(IserError::ShortPdu { len: bytes.len() })?;
    if bytes.len() < need && need - bytes.len() > 3 {
        return Err(IserError::ShortPdu { len: bytes.len() });
    }
    let mut buf = BytesMut::with_capacity(need);
    buf.extend_from_slice(&bytes[..bytes.len().min(need)]);
    buf.resize(need, 0);
    Ok(pdu::decode(buf.freeze(), limits)?)
}

/// What the send half must know about a PDU besides its bytes.
#[derive(Debug, Clone, Copy)]
enum FrameKind {
    /// A SCSI Command (its LUN) or a Data-Out: its data segment is SCSI
    /// data, which goes out from the caller's buffer when that is
    /// registered, and is counted in [`crate::stats`] when it is copied.
    ScsiData {
        lun: [u8; 8],
    },
    /// A task management request: the registrations of the tasks it ends
    /// go when its response arrives.
    Tmf {
        itt: u32,
        function: u8,
        lun: [u8; 8],
        ref_itt: u32,
    },
    Other,
}

/// A PDU ready to go: its iSCSI encoding plus, for a direct command, the
/// buffers to register and name in the iSER header.
pub struct IserFrame {
    wire: WireFrame,
    direct: Option<DirectBuffers>,
    kind: FrameKind,
}

impl IserFrame {
    pub fn new(tx: Transmit) -> IserFrame {
        let kind = match &tx.pdu.bhs {
            Bhs::ScsiCommand(c) => FrameKind::ScsiData { lun: c.lun },
            Bhs::DataOut(d) => FrameKind::ScsiData { lun: d.lun },
            Bhs::TaskMgmtRequest(t) => FrameKind::Tmf {
                itt: t.itt,
                function: t.function,
                lun: t.lun,
                ref_itt: t.referenced_task_tag,
            },
            _ => FrameKind::Other,
        };
        IserFrame {
            wire: tx.pdu.encode(pdu::Digests::default()),
            direct: tx.direct,
            kind,
        }
    }
}

/// A Send prepared in a send slot, waiting to be posted in a chain.
#[derive(Debug, Clone, Copy)]
struct PendingSend {
    slot: usize,
    signalled: bool,
    sge: [IbvSge; 3],
    n: usize,
}

/// The send half: registered send buffers, send completions.
///
/// The frames of one [`IserWriter::write_frames`] call go to the device as
/// one chain of work requests in one `ibv_post_send` (on soft-RoCE each
/// post is a system call that runs the requester). Only some Sends are
/// signalled ([`SendSlots`]): a slot returns to use when a signalled
/// completion at or after it arrives.
pub struct IserWriter {
    shared: Arc<Shared>,
    fd: Option<AsyncFd<Fd>>,
    slots: SendSlots,
    /// Per send slot: the data segment sent in place from the caller's
    /// registered buffer, held until the send completes.
    held: Vec<Option<Bytes>>,
    /// Sends prepared but not yet posted, in order.
    pending: Vec<PendingSend>,
    unacked: u32,
}

impl IserWriter {
    /// Post every frame as a Send, in order, chained into as few posts as
    /// the free send slots allow.
    pub async fn write_frames(&mut self, frames: &[IserFrame]) -> Result<(), IserError> {
        let r = self.write_frames_inner(frames).await;
        if r.is_err() {
            // Prepared Sends never posted: their slots are free again.
            let n = self.pending.len();
            self.pending.clear();
            for s in self.slots.unpost(n) {
                self.held[s] = None;
            }
        }
        r
    }

    async fn write_frames_inner(&mut self, frames: &[IserFrame]) -> Result<(), IserError> {
        self.reap()?;
        for f in frames {
            let (header, data_lkey) = match (&f.direct, f.kind) {
                (Some(d), FrameKind::ScsiData { lun }) => self.shared.register_direct(d, lun)?,
                (Some(d), _) => self.shared.register_direct(d, [0; 8])?,
                (None, _) => (IserHeader::CONTROL, None),
            };
            if let FrameKind::Tmf {
                itt,
                function,
                lun,
                ref_itt,
            } = f.kind
            {
                self.shared.note_tmf(itt, function, lun, ref_itt);
            }
            let scsi_data = matches!(f.kind, FrameKind::ScsiData { .. });
            self.prepare(header, &f.wire, scsi_data, data_lkey).await?;
            if self.pending.len() >= MAX_CHAIN {
                self.post_pending()?;
            }
        }
        self.post_pending()
    }

    /// Prepare one Send in a free slot (posting what is pending and
    /// waiting for a completion when none is free): the iSER header and
    /// the BHS (and AHS) in the slot, then the data segment — in place
    /// from the caller's buffer when it is SCSI data in registered memory
    /// (a pool arena, or the command's own registration `data_lkey`), else
    /// copied into the slot (and counted when it is SCSI data) — then the
    /// padding.
    async fn prepare(
        &mut self,
        header: IserHeader,
        frame: &WireFrame,
        scsi_data: bool,
        data_lkey: Option<u32>,
    ) -> Result<(), IserError> {
        let data = &frame.data;
        let in_place = if scsi_data && !data.is_empty() {
            match self.shared.pool_keys(data.as_ptr() as usize, data.len())? {
                Some((lkey, _)) => Some(lkey),
                None => data_lkey,
            }
        } else {
            None
        };
        let head_len = ISER_HEADER_LEN + frame.head.len();
        let tail = frame.tail();
        let slot_len = head_len + tail.len() + if in_place.is_some() { 0 } else { data.len() };
        if slot_len > SEND_SLOT_LEN {
            return Err(IserError::SendTooLong {
                len: slot_len,
                max: SEND_SLOT_LEN,
            });
        }
        let (slot, signalled) = loop {
            if let Some(s) = self.slots.take() {
                break s;
            }
            // No slot: what is prepared goes out first (its last Send is
            // signalled, see SendSlots), then wait for a completion.
            self.post_pending()?;
            self.wait().await?;
        };
        let region = self
            .shared
            .send_region
            .as_ref()
            .expect("registered at connect");
        let base = region.slot(slot, SEND_SLOT_LEN);
        let encoded = header.encode();
        let copied: &[u8] = if in_place.is_some() { &[] } else { &data[..] };
        let mut off = 0;
        for p in [&encoded[..], &frame.head[..], copied, tail] {
            // SAFETY: the slot is ours and idle (a signalled completion at
            // or after its last Send freed it); `slot_len <= SEND_SLOT_LEN`
            // was checked above.
            unsafe { ptr::copy_nonoverlapping(p.as_ptr(), base.add(off), p.len()) };
            off += p.len();
        }
        if scsi_data {
            stats::add_copied(copied.len() as u64);
        }
        let lkey = region.lkey();
        let mut sge = [IbvSge::default(); 3];
        let n = match in_place {
            Some(data_lkey) => {
                sge[0] = IbvSge {
                    addr: base as u64,
                    length: head_len as u32,
                    lkey,
                };
                sge[1] = IbvSge {
                    addr: data.as_ptr() as u64,
                    length: data.len() as u32,
                    lkey: data_lkey,
                };
                self.held[slot] = Some(data.clone());
                if tail.is_empty() {
                    2
                } else {
                    sge[2] = IbvSge {
                        // SAFETY: within the slot (checked above).
                        addr: unsafe { base.add(head_len) } as u64,
                        length: tail.len() as u32,
                        lkey,
                    };
                    3
                }
            }
            None => {
                sge[0] = IbvSge {
                    addr: base as u64,
                    length: slot_len as u32,
                    lkey,
                };
                1
            }
        };
        self.pending.push(PendingSend {
            slot,
            signalled,
            sge,
            n,
        });
        Ok(())
    }

    /// Post the prepared Sends as one chain of work requests.
    fn post_pending(&mut self) -> Result<(), IserError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<[IbvSge; 3]> = self.pending.iter().map(|p| p.sge).collect();
        let mut wrs: Vec<sys::IbvSendWr> = self
            .pending
            .iter()
            .zip(sges.iter_mut())
            .map(|(p, sge)| sys::IbvSendWr::send(p.slot as u64, &mut sge[..p.n], p.signalled))
            .collect();
        // Link the chain now that `wrs` no longer moves.
        for i in 1..wrs.len() {
            let next: *mut sys::IbvSendWr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad: *mut sys::IbvSendWr = ptr::null_mut();
        let qp = self.shared.qp();
        // SAFETY: qp live; `wrs` (linked through `next`) and the SGE arrays
        // they point to outlive the call, which only reads them. The SGEs
        // cover registered memory that stays untouched until the Sends
        // complete: a slot returns to use only after a signalled completion
        // at or after it (SendSlots), an in-place data segment is kept alive
        // in `held` until then, and pool arenas live for the whole process.
        let rc = unsafe { ((*(*qp).context).ops.post_send)(qp, wrs.as_mut_ptr(), &mut bad) };
        let total = self.pending.len();
        self.pending.clear();
        if rc != 0 {
            // The work requests from `bad` on were not posted.
            let posted = if bad.is_null() {
                0
            } else {
                // SAFETY: on failure `bad` points into `wrs`.
                (unsafe { bad.offset_from(wrs.as_ptr()) }).clamp(0, total as isize) as usize
            };
            for s in self.slots.unpost(total - posted) {
                self.held[s] = None;
            }
            return Err(IserError::Verbs {
                op: "post a send",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    /// Return the slots of completed sends; returns how many completions.
    fn reap(&mut self) -> Result<usize, IserError> {
        let mut wcs = [IbvWc::default(); POLL_BATCH];
        let mut total = 0;
        loop {
            let batch = self.shared.poll(&self.shared.send_cq, &mut wcs)?.to_vec();
            for wc in &batch {
                for s in self.slots.complete(wc.wr_id as usize) {
                    self.held[s] = None;
                }
                if wc.status != sys::IBV_WC_SUCCESS {
                    return Err(self.shared.completion_error(wc));
                }
            }
            total += batch.len();
            if batch.len() < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    /// Wait until at least one send completed.
    async fn wait(&mut self) -> Result<(), IserError> {
        debug_assert!(
            self.slots.signal_outstanding(),
            "waiting for a send completion with no signalled send outstanding"
        );
        loop {
            if self.reap()? > 0 {
                return Ok(());
            }
            self.shared.arm(&self.shared.send_cq)?;
            if self.reap()? > 0 {
                return Ok(());
            }
            if self.shared.disconnected.load(Ordering::SeqCst) {
                return Err(IserError::Disconnected {
                    addr: self.shared.addr,
                    event: "connection closed".into(),
                });
            }
            let fd = self.fd.as_ref().expect("live");
            let mut g = fd.readable().await.map_err(|source| IserError::Verbs {
                op: "wait for send completions",
                source,
            })?;
            g.clear_ready();
            self.unacked += self.shared.take_events(&self.shared.send_cq, 1)?;
            if self.unacked >= ACK_BATCH {
                self.shared.ack(&self.shared.send_cq, self.unacked);
                self.unacked = 0;
            }
        }
    }

    /// Close our side: the target sees a disconnect.
    pub fn shutdown(&mut self) {
        self.shared.disconnect();
    }
}

impl Drop for IserWriter {
    fn drop(&mut self) {
        self.fd = None;
        let n = self.unacked
            + self
                .shared
                .take_events(&self.shared.send_cq, u32::MAX)
                .unwrap_or(0);
        self.shared.ack(&self.shared.send_cq, n);
    }
}

fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_iscsi::proto::connection::FeatureParams;

    #[test]
    fn batched_reposting_keeps_a_receive_for_every_command_in_flight() {
        // poll_all holds back at most one poll batch of receive buffers
        // (reposted together after the batch); the rest stay posted. They
        // must still cover a response for every command at the default
        // queue depth plus unsolicited PDUs (NOP-In, Async Message, Reject).
        let unsolicited = 16;
        let held_back = POLL_BATCH;
        assert!(
            RECV_SLOTS - held_back >= FeatureParams::default().queue_depth as usize + unsolicited,
            "{RECV_SLOTS} receive buffers, {held_back} held back at once"
        );
    }

    #[test]
    fn send_signalling_fits_the_send_queue() {
        // The constants themselves are checked at compile time (below
        // their definitions); the accounting accepts them.
        let s = SendSlots::new(SEND_SLOTS, SIGNAL_EVERY);
        assert_eq!((s.free(), s.every()), (SEND_SLOTS, SIGNAL_EVERY));
    }
}
