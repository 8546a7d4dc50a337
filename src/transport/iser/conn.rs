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
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use super::header::{CmPrivateData, IserHeader, IserMessage, ISER_HEADER_LEN};
use super::sys::{self, cm_event, Api, IbvCompChannel, IbvCq, IbvMr, IbvSge, IbvWc, RdmaCmId};
use super::IserError;
use crate::proto::pdu::{self, FrameLimits, Pdu, WireFrame};

/// Receive buffers posted at all times. LIO keeps 128 commands' worth of its
/// own; we post what the window and unsolicited PDUs (NOP-In, Async) need.
const RECV_SLOTS: usize = 64;
/// One receive buffer: iSER header, BHS, the largest AHS, and a data segment
/// of up to [`MAX_RECV_DATA`] bytes plus padding.
const RECV_SLOT_LEN: usize = 16 * 1024;
/// The largest data segment we let the target send us in one PDU
/// (our InitiatorRecvDataSegmentLength / MaxRecvDataSegmentLength).
pub const MAX_RECV_DATA: u32 = 8192;
/// Send buffers (and the send queue depth).
const SEND_SLOTS: usize = 32;
const SEND_SLOT_LEN: usize = 16 * 1024;
/// Work completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;
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

/// A CM event, copied out of rdma-core's struct before it is acknowledged.
#[derive(Debug)]
struct CmEvent {
    kind: c_int,
    status: c_int,
    private_data: Vec<u8>,
}

/// One received iSER message, already copied out of its receive buffer.
#[derive(Debug)]
pub struct Received {
    pub header: IserHeader,
    pub pdu: Pdu,
}

/// A connected iSER queue pair. Not `Sync`; one task drives it.
pub struct IserConnection {
    api: &'static Api,
    addr: SocketAddr,
    // Field order is irrelevant: `Drop` releases everything explicitly.
    cm_fd: Option<AsyncFd<Fd>>,
    cq_fd: Option<AsyncFd<Fd>>,
    channel: *mut sys::RdmaEventChannel,
    id: *mut RdmaCmId,
    pd: *mut c_void,
    comp: *mut IbvCompChannel,
    cq: *mut IbvCq,
    qp_created: bool,
    recv_region: Option<Region>,
    send_region: Option<Region>,
    free_send: Vec<usize>,
    received: VecDeque<Received>,
    unacked_events: u32,
    connected: bool,
    /// What the target said in its REP private data (None: it sent none).
    pub peer_private_data: Option<CmPrivateData>,
    limits: FrameLimits,
}

// SAFETY: the raw pointers are rdma-core objects owned exclusively by this
// struct; libibverbs and librdmacm allow using them from any thread, and
// `&mut self` on every operation serialises access.
unsafe impl Send for IserConnection {}

impl IserConnection {
    /// Connect to the iSER portal `addr` through the RDMA CM, each step
    /// bounded by `timeout`.
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<IserConnection, IserError> {
        let api = check_devices()?;
        raise_memlock_limit();
        let mut c = IserConnection {
            api,
            addr,
            cm_fd: None,
            cq_fd: None,
            channel: ptr::null_mut(),
            id: ptr::null_mut(),
            pd: ptr::null_mut(),
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp_created: false,
            recv_region: None,
            send_region: None,
            free_send: (0..SEND_SLOTS).rev().collect(),
            received: VecDeque::new(),
            unacked_events: 0,
            connected: false,
            peer_private_data: None,
            limits: FrameLimits {
                digests: pdu::Digests::default(),
                max_data_segment: MAX_RECV_DATA,
            },
        };
        c.setup(timeout).await?;
        Ok(c)
    }

    fn verbs_err(op: &'static str) -> IserError {
        IserError::Verbs {
            op,
            source: io::Error::last_os_error(),
        }
    }

    async fn setup(&mut self, timeout: Duration) -> Result<(), IserError> {
        let api = self.api;
        let ms = c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1);
        // SAFETY: no preconditions; returns NULL or a channel we destroy in Drop.
        self.channel = unsafe { (api.rdma_create_event_channel)() };
        if self.channel.is_null() {
            return Err(Self::verbs_err("create an RDMA CM event channel"));
        }
        // SAFETY: the channel is live; reading its fd field is plain data.
        let cm_fd = unsafe { (*self.channel).fd };
        set_nonblocking(cm_fd).map_err(|source| IserError::Verbs {
            op: "set the CM channel non-blocking",
            source,
        })?;
        self.cm_fd = Some(register_fd(cm_fd, "register the CM channel with tokio")?);
        // SAFETY: channel live; `id` receives a new id destroyed in Drop.
        if unsafe {
            (api.rdma_create_id)(
                self.channel,
                &mut self.id,
                ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        } != 0
        {
            return Err(Self::verbs_err("create an RDMA CM id"));
        }

        let (mut storage, _len) = sockaddr_of(self.addr);
        // SAFETY: id live; `storage` holds a valid sockaddr_in/in6 for the call.
        if unsafe {
            (api.rdma_resolve_addr)(
                self.id,
                ptr::null_mut(),
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                ms,
            )
        } != 0
        {
            return Err(IserError::AddrResolve {
                addr: self.addr,
                reason: io::Error::last_os_error().to_string(),
            });
        }
        let ev = self.wait_cm_event(timeout, "address resolution").await?;
        if ev.kind != cm_event::ADDR_RESOLVED {
            return Err(IserError::AddrResolve {
                addr: self.addr,
                reason: self.describe(&ev),
            });
        }
        // SAFETY: id live with a resolved address.
        if unsafe { (api.rdma_resolve_route)(self.id, ms) } != 0 {
            return Err(Self::verbs_err("resolve the RDMA route"));
        }
        let ev = self.wait_cm_event(timeout, "route resolution").await?;
        if ev.kind != cm_event::ROUTE_RESOLVED {
            return Err(IserError::RouteResolve {
                addr: self.addr,
                reason: self.describe(&ev),
            });
        }

        // SAFETY: after address resolution the id is bound to a device whose
        // context (`verbs`) the CM keeps open for the id's life.
        let ctx = unsafe { (*self.id).verbs };
        if ctx.is_null() {
            return Err(IserError::AddrResolve {
                addr: self.addr,
                reason: "no device bound after resolution".into(),
            });
        }
        // SAFETY: ctx is a live device context.
        self.pd = unsafe { (api.ibv_alloc_pd)(ctx) };
        if self.pd.is_null() {
            return Err(Self::verbs_err("allocate a protection domain"));
        }
        // SAFETY: ctx live.
        self.comp = unsafe { (api.ibv_create_comp_channel)(ctx) };
        if self.comp.is_null() {
            return Err(Self::verbs_err("create a completion channel"));
        }
        // SAFETY: comp live; its fd is plain data.
        let cq_fd = unsafe { (*self.comp).fd };
        set_nonblocking(cq_fd).map_err(|source| IserError::Verbs {
            op: "set the completion channel non-blocking",
            source,
        })?;
        self.cq_fd = Some(register_fd(
            cq_fd,
            "register the completion channel with tokio",
        )?);
        let cqe = (RECV_SLOTS + SEND_SLOTS) as c_int;
        // SAFETY: ctx and comp live; the CQ is destroyed in Drop after the QP.
        self.cq = unsafe { (api.ibv_create_cq)(ctx, cqe, ptr::null_mut(), self.comp, 0) };
        if self.cq.is_null() {
            return Err(Self::verbs_err("create a completion queue"));
        }
        let mut attr = sys::IbvQpInitAttr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: ptr::null_mut(),
            cap: sys::IbvQpCap {
                max_send_wr: SEND_SLOTS as u32,
                max_recv_wr: RECV_SLOTS as u32,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: id, pd and cq are live and belong to the same device context.
        if unsafe { (api.rdma_create_qp)(self.id, self.pd, &mut attr) } != 0 {
            return Err(Self::verbs_err("create the queue pair (rdma_create_qp)"));
        }
        self.qp_created = true;

        self.recv_region = Some(Region::new(
            api,
            self.pd,
            RECV_SLOTS * RECV_SLOT_LEN,
            sys::IBV_ACCESS_LOCAL_WRITE,
        )?);
        self.send_region = Some(Region::new(
            api,
            self.pd,
            SEND_SLOTS * SEND_SLOT_LEN,
            sys::IBV_ACCESS_LOCAL_WRITE,
        )?);
        for i in 0..RECV_SLOTS {
            self.post_recv(i)?;
        }
        self.arm_cq()?;

        // Our RDMA Read *responder* resources are what the target may use
        // to fetch write data: let the CM offer the device maximum (0xff).
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
        if unsafe { (api.rdma_connect)(self.id, &mut param) } != 0 {
            return Err(Self::verbs_err("start the RDMA connection (rdma_connect)"));
        }
        let ev = self.wait_cm_event(timeout, "connection").await?;
        match ev.kind {
            cm_event::ESTABLISHED => {
                self.connected = true;
                self.peer_private_data = CmPrivateData::decode(&ev.private_data);
                debug!(addr = %self.addr, peer = ?self.peer_private_data, "iSER connection established");
                Ok(())
            }
            cm_event::REJECTED => Err(IserError::Rejected {
                addr: self.addr,
                status: ev.status,
            }),
            cm_event::UNREACHABLE | cm_event::CONNECT_ERROR => Err(IserError::Unreachable {
                addr: self.addr,
                reason: self.describe(&ev),
            }),
            _ => Err(IserError::Unreachable {
                addr: self.addr,
                reason: self.describe(&ev),
            }),
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

    /// The next CM event, or a timeout naming the step.
    async fn wait_cm_event(
        &mut self,
        timeout: Duration,
        step: &'static str,
    ) -> Result<CmEvent, IserError> {
        match tokio::time::timeout(timeout, self.next_cm_event()).await {
            Ok(r) => r,
            Err(_) => Err(IserError::Timeout {
                addr: self.addr,
                step,
                timeout,
            }),
        }
    }

    async fn next_cm_event(&mut self) -> Result<CmEvent, IserError> {
        loop {
            if let Some(ev) = self.try_cm_event()? {
                return Ok(ev);
            }
            let fd = self.cm_fd.as_ref().expect("set up before use");
            let mut guard = fd.readable().await.map_err(|source| IserError::Verbs {
                op: "wait for CM events",
                source,
            })?;
            guard.clear_ready();
        }
    }

    fn try_cm_event(&mut self) -> Result<Option<CmEvent>, IserError> {
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

    fn qp(&self) -> *mut sys::IbvQp {
        // SAFETY: the id is live and has a QP once `qp_created`.
        unsafe { (*self.id).qp }
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), IserError> {
        let region = self
            .recv_region
            .as_ref()
            .expect("registered before posting");
        let mut sge = IbvSge {
            addr: region.slot(slot, RECV_SLOT_LEN) as u64,
            length: RECV_SLOT_LEN as u32,
            lkey: region.lkey(),
        };
        let mut wr = sys::IbvRecvWr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        let qp = self.qp();
        // SAFETY: qp live; the SGE points into registered memory that stays
        // allocated until the QP is destroyed; `wr`/`sge` are copied by the
        // provider during the call.
        let rc = unsafe { ((*(*qp).context).ops.post_recv)(qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(IserError::Verbs {
                op: "post a receive buffer",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    fn arm_cq(&mut self) -> Result<(), IserError> {
        // SAFETY: cq live.
        let rc = unsafe { ((*(*self.cq).context).ops.req_notify_cq)(self.cq, 0) };
        if rc != 0 {
            return Err(IserError::Verbs {
                op: "arm completion notification",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    /// Send one PDU with `header` in front of it.
    pub async fn send(&mut self, header: IserHeader, frame: &WireFrame) -> Result<(), IserError> {
        let len = ISER_HEADER_LEN + frame.head.len() + frame.data.len() + frame.tail().len();
        if len > SEND_SLOT_LEN {
            return Err(IserError::SendTooLong {
                len,
                max: SEND_SLOT_LEN,
            });
        }
        let slot = loop {
            if let Some(s) = self.free_send.pop() {
                break s;
            }
            self.wait_completions().await?;
        };
        let region = self.send_region.as_ref().expect("registered at connect");
        let base = region.slot(slot, SEND_SLOT_LEN);
        let parts: [&[u8]; 4] = [&header.encode(), &frame.head, &frame.data, frame.tail()];
        let mut off = 0;
        for p in parts {
            // SAFETY: `base..base+SEND_SLOT_LEN` is ours and not in use by the
            // device (the slot was free); `len <= SEND_SLOT_LEN` was checked.
            unsafe { ptr::copy_nonoverlapping(p.as_ptr(), base.add(off), p.len()) };
            off += p.len();
        }
        let mut sge = [IbvSge {
            addr: base as u64,
            length: len as u32,
            lkey: region.lkey(),
        }];
        let mut wr = sys::IbvSendWr::send(slot as u64 | SEND_TAG, &mut sge);
        let mut bad = ptr::null_mut();
        let qp = self.qp();
        // SAFETY: qp live; the SGE covers registered memory owned until the
        // send completes (the slot returns to `free_send` only then).
        let rc = unsafe { ((*(*qp).context).ops.post_send)(qp, &mut wr, &mut bad) };
        if rc != 0 {
            self.free_send.push(slot);
            return Err(IserError::Verbs {
                op: "post a send",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    /// The next message the target sent. Cancel-safe: received messages wait
    /// in a queue inside the connection.
    pub async fn recv(&mut self) -> Result<Received, IserError> {
        loop {
            if let Some(m) = self.received.pop_front() {
                return Ok(m);
            }
            self.wait_completions().await?;
        }
    }

    /// Take every completion there is; if there was none, re-arm, check
    /// again, then wait for the channel (or a CM event such as a disconnect).
    async fn wait_completions(&mut self) -> Result<(), IserError> {
        if self.poll_cq()? > 0 {
            return Ok(());
        }
        self.arm_cq()?;
        if self.poll_cq()? > 0 {
            return Ok(());
        }
        loop {
            let cq_fd = self.cq_fd.as_ref().expect("set up at connect");
            let cm_fd = self.cm_fd.as_ref().expect("set up at connect");
            tokio::select! {
                g = cq_fd.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for completions", source })?;
                    g.clear_ready();
                    self.take_cq_events()?;
                    if self.poll_cq()? > 0 {
                        return Ok(());
                    }
                    self.arm_cq()?;
                }
                g = cm_fd.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for CM events", source })?;
                    g.clear_ready();
                    while let Some(ev) = self.try_cm_event()? {
                        match ev.kind {
                            cm_event::DISCONNECTED | cm_event::DEVICE_REMOVAL | cm_event::ADDR_CHANGE
                            | cm_event::TIMEWAIT_EXIT => {
                                self.connected = ev.kind != cm_event::DISCONNECTED && self.connected;
                                return Err(IserError::Disconnected { addr: self.addr, event: self.describe(&ev) });
                            }
                            _ => debug!(event = %self.describe(&ev), "ignoring CM event"),
                        }
                    }
                }
            }
        }
    }

    fn take_cq_events(&mut self) -> Result<(), IserError> {
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: comp live and non-blocking; each event is acked (in
            // batches, and all remaining ones before the CQ is destroyed).
            if unsafe { (self.api.ibv_get_cq_event)(self.comp, &mut cq, &mut ctx) } != 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    return Ok(());
                }
                return Err(IserError::Verbs {
                    op: "read a completion event",
                    source: err,
                });
            }
            self.unacked_events += 1;
            if self.unacked_events >= ACK_BATCH {
                // SAFETY: cq live; acking events we have taken.
                unsafe { (self.api.ibv_ack_cq_events)(self.cq, self.unacked_events) };
                self.unacked_events = 0;
            }
        }
    }

    /// Poll the CQ until it is empty; returns how many completions there were.
    fn poll_cq(&mut self) -> Result<usize, IserError> {
        let mut total = 0;
        let mut wcs = [IbvWc::default(); POLL_BATCH];
        loop {
            // SAFETY: cq live; `wcs` has room for POLL_BATCH entries.
            let n = unsafe {
                ((*(*self.cq).context).ops.poll_cq)(self.cq, POLL_BATCH as c_int, wcs.as_mut_ptr())
            };
            if n < 0 {
                return Err(IserError::Verbs {
                    op: "poll the completion queue",
                    source: io::Error::other(format!("ibv_poll_cq returned {n}")),
                });
            }
            let n = n as usize;
            for wc in &wcs[..n] {
                self.complete(wc)?;
            }
            total += n;
            if n < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    fn complete(&mut self, wc: &IbvWc) -> Result<(), IserError> {
        let is_send = wc.wr_id & SEND_TAG != 0;
        let slot = (wc.wr_id & !SEND_TAG) as usize;
        if wc.status != sys::IBV_WC_SUCCESS {
            if is_send {
                self.free_send.push(slot);
            }
            return Err(IserError::Completion {
                addr: self.addr,
                status: sys::wc_status_str(self.api, wc.status),
                flushed: wc.status == sys::IBV_WC_WR_FLUSH_ERR,
            });
        }
        if is_send {
            self.free_send.push(slot);
            return Ok(());
        }
        if slot >= RECV_SLOTS {
            return Err(IserError::Verbs {
                op: "receive completion",
                source: io::Error::other("unknown receive buffer"),
            });
        }
        let len = (wc.byte_len as usize).min(RECV_SLOT_LEN);
        let region = self.recv_region.as_ref().expect("registered");
        // SAFETY: the device wrote `byte_len` bytes into this slot and has
        // completed; the slot is not reposted until after this copy.
        let msg = unsafe { std::slice::from_raw_parts(region.slot(slot, RECV_SLOT_LEN), len) };
        let parsed = match IserMessage::parse(msg) {
            Ok(IserMessage::Control { header, pdu }) => self
                .decode_pdu(pdu)
                .map(|p| Some(Received { header, pdu: p })),
            Ok(IserMessage::HelloReply(r)) => {
                // Accepted and ignored: we never send Hello, so a reply only
                // tells us what the target supports.
                warn!(reply = ?r, "target sent an unsolicited iSER Hello Reply");
                Ok(None)
            }
            Err(e) => Err(IserError::Header(e)),
        };
        self.post_recv(slot)?;
        if let Some(m) = parsed? {
            self.received.push_back(m);
        }
        Ok(())
    }

    /// Decode a PDU from a Send. Targets need not pad the data segment of
    /// the last PDU in a message; we pad it to the codec's framing.
    fn decode_pdu(&self, bytes: &[u8]) -> Result<Pdu, IserError> {
        let need = pdu::frame_length(bytes, &self.limits)?
            .ok_or(IserError::ShortPdu { len: bytes.len() })?;
        if bytes.len() < need && need - bytes.len() > 3 {
            return Err(IserError::ShortPdu { len: bytes.len() });
        }
        let mut buf = BytesMut::with_capacity(need);
        buf.extend_from_slice(&bytes[..bytes.len().min(need)]);
        buf.resize(need, 0);
        Ok(pdu::decode(buf.freeze(), &self.limits)?)
    }

    /// Disconnect politely and wait (bounded) for the target to confirm.
    pub async fn close(mut self, timeout: Duration) {
        if self.connected {
            // SAFETY: id live and connected.
            unsafe { (self.api.rdma_disconnect)(self.id) };
            self.connected = false;
            let _ = tokio::time::timeout(timeout, async {
                while let Ok(ev) = self.next_cm_event().await {
                    if ev.kind == cm_event::DISCONNECTED || ev.kind == cm_event::TIMEWAIT_EXIT {
                        break;
                    }
                }
            })
            .await;
        }
    }
}

/// Bit set in the work-request id of sends (receives use the plain slot).
const SEND_TAG: u64 = 1 << 63;

impl Drop for IserConnection {
    fn drop(&mut self) {
        let api = self.api;
        // SAFETY: every pointer is either NULL (never created) or a live
        // object created in `setup` and released exactly once here, in
        // reverse order: QP before CQ and MRs, CQ (after acking its events)
        // before its channel, PD after everything registered in it, id before
        // its event channel. Tokio's registrations go before their fds close.
        unsafe {
            if self.connected {
                (api.rdma_disconnect)(self.id);
            }
            if self.qp_created {
                (api.rdma_destroy_qp)(self.id);
            }
            self.recv_region = None;
            self.send_region = None;
            self.cq_fd = None;
            if !self.cq.is_null() {
                if self.unacked_events > 0 {
                    (api.ibv_ack_cq_events)(self.cq, self.unacked_events);
                }
                (api.ibv_destroy_cq)(self.cq);
            }
            if !self.comp.is_null() {
                (api.ibv_destroy_comp_channel)(self.comp);
            }
            if !self.pd.is_null() {
                (api.ibv_dealloc_pd)(self.pd);
            }
            if !self.id.is_null() {
                (api.rdma_destroy_id)(self.id);
            }
            self.cm_fd = None;
            if !self.channel.is_null() {
                (api.rdma_destroy_event_channel)(self.channel);
            }
        }
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
