//! A reliable-connected queue pair on a CM id, made together with
//! everything its work requests point into, and handed out as its two
//! halves: [`SendQueue`] and [`RecvQueue`], each with its own completion
//! queue and completion channel (whose fd tokio watches, [`super::watch`]).
//!
//! Safety by construction:
//!
//! - **Rings owned here.** Each half has a ring of fixed-size slots in
//!   memory this module allocates and registers (`OwnedMemory`). A slot
//!   is *lent* to the device from the moment it is posted until the
//!   completion that covers it is polled; only then can the caller read it
//!   (a received message, [`RecvQueue::received`]) or write it (the next
//!   Send, [`SendQueue::prepare`]). Each half is the only poller of its
//!   completion queue, so it sees every completion of its own work
//!   requests.
//! - **In-place data kept alive.** A Send may carry one segment from memory
//!   outside the ring (iSER: immediate data straight from the caller's
//!   buffer) as `Bytes`; the send queue keeps that `Bytes` until the Send
//!   is complete. The device only reads it, under the caller's `lkey`
//!   (a wrong key fails the Send; it cannot make the device write).
//! - **Release order by ownership.** The queue pair's owner holds the CM
//!   id, the protection domain, both completion queues and both rings, and
//!   its `Drop` moves the queue pair to the error state and destroys it
//!   before any of those go: no work request can outlive the memory or the
//!   queues it names. The halves hold the queue pair, so it lives until
//!   both are gone.
//!
//! Selective signalling: only some Sends ask for a work completion
//! ([`SendSlots`]); on a reliable connection the send queue completes in
//! order, so a signalled completion returns its slot and every slot posted
//! before it.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::cm::CmId;
use super::error::RdmaError;
use super::ffi::{self, IbvQp, IbvQpCap, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSge};
use super::id::Id;
use super::mr::{Access, OwnedMemory};
use super::slots::SendSlots;
use super::verbs::{Cq, Events, ProtectionDomain, WorkCompletion};

/// Scatter/gather entries of one Send: the head in the slot, an in-place
/// segment, the tail in the slot.
pub const MAX_SEND_SGE: usize = 3;
/// Send completions taken from the CQ per poll.
const REAP_BATCH: usize = 16;

/// The shape of a queue pair and its rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Send slots, and the send queue's depth.
    pub send_slots: usize,
    pub send_slot_len: usize,
    /// At most this many Sends in a row go unsignalled ([`SendSlots`]).
    pub signal_every: usize,
    /// Receive slots, and the receive queue's depth.
    pub recv_slots: usize,
    pub recv_slot_len: usize,
}

/// The queue pair and what its work requests point into, released in this
/// order by `Drop` and the field order below.
struct Qp {
    qp: NonNull<IbvQp>,
    disconnected: AtomicBool,
    id: Arc<Id>,
    send_ring: OwnedMemory,
    recv_ring: OwnedMemory,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    _pd: ProtectionDomain,
}

// SAFETY: a QP may be used from any thread; posting sends and posting
// receives are thread-safe in the providers (each queue has its own lock),
// and the halves that share this struct post only to their own queue and
// touch only their own ring's slots.
unsafe impl Send for Qp {}
// SAFETY: as above; the only mutable state is an atomic.
unsafe impl Sync for Qp {}

impl Qp {
    /// Move the QP to the error state (no more remote access to anything
    /// registered; posted work requests flush). Idempotent.
    fn disconnect(&self) {
        if !self.disconnected.swap(true, Ordering::SeqCst) {
            // SAFETY: the id is live and has this QP; rdma_disconnect moves
            // the QP to the error state, also when it never connected.
            unsafe { (self.id.api.rdma_disconnect)(self.id.id.as_ptr()) };
        }
    }

    fn post_send(&self, wr: *mut IbvSendWr, bad: &mut *mut IbvSendWr) -> c_int {
        let qp = self.qp.as_ptr();
        // SAFETY: the QP and its context are live; the caller passes a
        // chain of work requests whose SGEs name memory that stays valid
        // until their completion (see `SendQueue::post`).
        unsafe { ((*(*qp).context).ops.post_send)(qp, wr, bad) }
    }

    fn post_recv(&self, wr: *mut IbvRecvWr, bad: &mut *mut IbvRecvWr) -> c_int {
        let qp = self.qp.as_ptr();
        // SAFETY: as in `post_send`, for receive slots of the ring.
        unsafe { ((*(*qp).context).ops.post_recv)(qp, wr, bad) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.disconnect();
        // SAFETY: the QP was created on this id and is destroyed once; the
        // rings, CQs and PD it uses are fields dropped after this returns.
        unsafe { (self.id.api.rdma_destroy_qp)(self.id.id.as_ptr()) };
    }
}

/// Create the RC queue pair of `id` in `pd`, with a completion queue (and
/// channel) for each direction and the send and receive rings registered
/// in `pd`. Nothing is posted yet: see [`RecvQueue::post_idle`].
pub fn create(
    id: &CmId,
    pd: &ProtectionDomain,
    cfg: &QueueConfig,
) -> Result<(SendQueue, RecvQueue), RdmaError> {
    let Some(ctx) = id.context() else {
        return Err(RdmaError::Call {
            op: "create the queue pair (rdma_create_qp)",
            source: io::Error::new(io::ErrorKind::NotConnected, "the CM id has no device yet"),
        });
    };
    if ctx.ctx != pd.context().ctx {
        return Err(RdmaError::Call {
            op: "create the queue pair (rdma_create_qp)",
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "the protection domain is on another device",
            ),
        });
    }
    let too_big = |what| RdmaError::Call {
        op: "create the queue pair (rdma_create_qp)",
        source: io::Error::new(io::ErrorKind::InvalidInput, what),
    };
    let send_depth = u32::try_from(cfg.send_slots).map_err(|_| too_big("send queue too deep"))?;
    let recv_depth =
        u32::try_from(cfg.recv_slots).map_err(|_| too_big("receive queue too deep"))?;
    if cfg.send_slots == 0
        || cfg.recv_slots == 0
        || cfg.signal_every == 0
        || cfg.signal_every > cfg.send_slots
        || u32::try_from(cfg.send_slot_len).is_err()
        || u32::try_from(cfg.recv_slot_len).is_err()
    {
        return Err(too_big("queue shape out of range"));
    }
    let send_len = cfg
        .send_slots
        .checked_mul(cfg.send_slot_len)
        .ok_or_else(|| too_big("send ring too large"))?;
    let recv_len = cfg
        .recv_slots
        .checked_mul(cfg.recv_slot_len)
        .ok_or_else(|| too_big("receive ring too large"))?;
    let recv_ring = OwnedMemory::new(pd, recv_len, Access::LOCAL)?;
    let send_ring = OwnedMemory::new(pd, send_len, Access::LOCAL)?;
    let send_cq = Arc::new(Cq::new(&ctx, cfg.send_slots)?);
    let recv_cq = Arc::new(Cq::new(&ctx, cfg.recv_slots)?);
    let mut attr = IbvQpInitAttr {
        qp_context: ptr::null_mut(),
        send_cq: send_cq.as_ptr(),
        recv_cq: recv_cq.as_ptr(),
        srq: ptr::null_mut(),
        cap: IbvQpCap {
            max_send_wr: send_depth,
            max_recv_wr: recv_depth,
            max_send_sge: MAX_SEND_SGE as u32,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: ffi::IBV_QPT_RC,
        sq_sig_all: 0,
    };
    let api = id.inner.api;
    // SAFETY: the id, the PD and both CQs are live and on the same device
    // (checked above); the QP is destroyed by `Qp`'s Drop before any of
    // them (it holds them all).
    if unsafe { (api.rdma_create_qp)(id.inner.id.as_ptr(), pd.inner.pd.as_ptr(), &mut attr) } != 0 {
        return Err(RdmaError::last("create the queue pair (rdma_create_qp)"));
    }
    // SAFETY: the id is live; rdma_create_qp just set its `qp` field.
    let qp = unsafe { (*id.inner.id.as_ptr()).qp };
    let Some(qp) = NonNull::new(qp) else {
        // SAFETY: the QP call succeeded, so destroying it on the id is valid.
        unsafe { (api.rdma_destroy_qp)(id.inner.id.as_ptr()) };
        return Err(RdmaError::Call {
            op: "create the queue pair (rdma_create_qp)",
            source: io::Error::other("no queue pair on the CM id"),
        });
    };
    let qp = Arc::new(Qp {
        qp,
        disconnected: AtomicBool::new(false),
        id: id.inner.clone(),
        send_ring,
        recv_ring,
        _send_cq: send_cq.clone(),
        _recv_cq: recv_cq.clone(),
        _pd: pd.clone(),
    });
    let send = SendQueue {
        qp: qp.clone(),
        events: Events::new(send_cq.clone()),
        cq: send_cq,
        slots: SendSlots::new(cfg.send_slots, cfg.signal_every),
        slot_len: cfg.send_slot_len,
        held: vec![None; cfg.send_slots],
        pending: Vec::with_capacity(cfg.send_slots),
        chain: SendChain(Vec::with_capacity(cfg.send_slots)),
    };
    let recv = RecvQueue {
        qp,
        events: Events::new(recv_cq.clone()),
        cq: recv_cq,
        slot_len: cfg.recv_slot_len,
        lent: vec![false; cfg.recv_slots].into_boxed_slice(),
        sges: Vec::with_capacity(cfg.recv_slots),
        chain: RecvChain(Vec::with_capacity(cfg.recv_slots)),
    };
    Ok((send, recv))
}

/// One Send to prepare in a slot: `head` copied into the slot, then
/// `in_place` sent from its own memory, then `tail` copied into the slot
/// after the head. The peer receives head, in-place data and tail as one
/// message.
#[derive(Debug)]
pub struct Message<'a> {
    pub head: &'a [&'a [u8]],
    pub in_place: Option<InPlace>,
    pub tail: &'a [u8],
}

/// A segment sent from memory outside the ring (not copied): registered
/// memory that `lkey` covers, kept alive by the send queue until the Send
/// completes.
#[derive(Debug, Clone)]
pub struct InPlace {
    pub data: Bytes,
    pub lkey: u32,
}

/// Why [`SendQueue::prepare`] did not prepare a Send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareError {
    /// Every slot is lent to the device: post what is prepared and wait
    /// for a send completion.
    NoFreeSlot,
    /// What must be copied does not fit a slot.
    TooLong { len: usize, max: usize },
}

/// A Send prepared in a slot, waiting to be posted in a chain.
#[derive(Debug, Clone, Copy)]
struct Pending {
    slot: usize,
    signalled: bool,
    sge: [IbvSge; MAX_SEND_SGE],
    n: usize,
}

/// The work requests of one post, rebuilt for each post (no allocation:
/// the vector keeps its capacity) and emptied right after it.
struct SendChain(Vec<IbvSendWr>);

// SAFETY: the vector is empty except during `SendQueue::post`, which fills,
// posts and clears it on one thread; no pointer in it is used across threads.
unsafe impl Send for SendChain {}
// SAFETY: as above; only `&mut` access (in `post`) ever reads or writes it.
unsafe impl Sync for SendChain {}

/// What a poll of the send completion queue found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reaped {
    /// Work completions taken.
    pub completions: usize,
    /// The first that failed (its slots are free again all the same).
    pub failed: Option<WorkCompletion>,
}

/// The send half of a queue pair: its ring of send slots, its completion
/// queue, selective signalling, and chains of Sends posted at once.
pub struct SendQueue {
    qp: Arc<Qp>,
    events: Events,
    cq: Arc<Cq>,
    slots: SendSlots,
    slot_len: usize,
    /// Per slot: the in-place segment of its Send, kept until the Send is
    /// complete.
    held: Vec<Option<Bytes>>,
    /// Sends prepared but not yet posted, in order.
    pending: Vec<Pending>,
    chain: SendChain,
}

impl SendQueue {
    /// Prepare one Send in a free slot (it is lent to the device from now
    /// on; posted by [`SendQueue::post`], or given back by
    /// [`SendQueue::discard_pending`]). Returns whether it is signalled.
    pub fn prepare(&mut self, msg: Message<'_>) -> Result<bool, PrepareError> {
        let head_len: usize = msg.head.iter().map(|p| p.len()).sum();
        let copied = head_len + msg.tail.len();
        if copied > self.slot_len {
            return Err(PrepareError::TooLong {
                len: copied,
                max: self.slot_len,
            });
        }
        let in_place = msg.in_place.filter(|p| !p.data.is_empty());
        if let Some(p) = &in_place {
            if u32::try_from(p.data.len()).is_err() {
                return Err(PrepareError::TooLong {
                    len: p.data.len(),
                    max: u32::MAX as usize,
                });
            }
        }
        let (slot, signalled) = self.slots.take().ok_or(PrepareError::NoFreeSlot)?;
        let ring = &self.qp.send_ring;
        debug_assert!((slot + 1) * self.slot_len <= ring.len());
        // SAFETY: `slot` was free, so no posted Send reads it (a slot is
        // free only once a completion at or after its last Send was polled,
        // `SendSlots`), and this queue is the only user of the send ring;
        // the slot lies within the ring (`create` sized it slots * len).
        let buf = unsafe {
            std::slice::from_raw_parts_mut(ring.as_ptr().add(slot * self.slot_len), self.slot_len)
        };
        let mut off = 0;
        for part in msg.head.iter().copied().chain([msg.tail]) {
            buf[off..off + part.len()].copy_from_slice(part);
            off += part.len();
        }
        let (sge, n) = send_sges(
            (buf.as_ptr() as u64, ring.lkey()),
            head_len,
            in_place
                .as_ref()
                .map(|p| (p.data.as_ptr() as u64, p.data.len() as u32, p.lkey)),
            msg.tail.len(),
        );
        self.held[slot] = in_place.map(|p| p.data);
        self.pending.push(Pending {
            slot,
            signalled,
            sge,
            n,
        });
        Ok(signalled)
    }

    /// Sends prepared and not yet posted.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Post the prepared Sends as one chain of work requests (one
    /// `ibv_post_send`). On failure the Sends not posted give their slots
    /// back.
    pub fn post(&mut self) -> Result<(), RdmaError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let wrs = &mut self.chain.0;
        wrs.clear();
        for p in self.pending.iter_mut() {
            wrs.push(IbvSendWr::send(
                p.slot as u64,
                &mut p.sge[..p.n],
                p.signalled,
            ));
        }
        // Link the chain now that `wrs` no longer moves.
        for i in 1..wrs.len() {
            let next: *mut IbvSendWr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad: *mut IbvSendWr = ptr::null_mut();
        // The SGEs (in `pending`) name ring slots lent until their
        // completion and in-place data kept in `held` until then.
        let rc = self.qp.post_send(wrs.as_mut_ptr(), &mut bad);
        let total = self.pending.len();
        let posted = if rc == 0 {
            total
        } else if bad.is_null() {
            0
        } else {
            // The work requests from `bad` on were not posted.
            let base = wrs.as_ptr() as usize;
            ((bad as usize).saturating_sub(base) / std::mem::size_of::<IbvSendWr>()).min(total)
        };
        wrs.clear();
        self.pending.clear();
        if rc != 0 {
            let held = &mut self.held;
            self.slots.unpost_with(total - posted, |s| held[s] = None);
            return Err(RdmaError::returned("post a send", rc));
        }
        Ok(())
    }

    /// Give back the slots of the Sends prepared and not posted.
    pub fn discard_pending(&mut self) {
        let n = self.pending.len();
        self.pending.clear();
        let held = &mut self.held;
        self.slots.unpost_with(n, |s| held[s] = None);
    }

    /// Take every send completion there is, returning the slots they cover
    /// (and dropping their in-place data).
    pub fn reap(&mut self) -> Result<Reaped, RdmaError> {
        let mut wcs = [WorkCompletion::default(); REAP_BATCH];
        let mut reaped = Reaped::default();
        loop {
            let n = self.cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                let held = &mut self.held;
                self.slots
                    .complete_with(wc.wr_id() as usize, |s| held[s] = None);
                if !wc.is_success() && reaped.failed.is_none() {
                    reaped.failed = Some(*wc);
                }
            }
            reaped.completions += n;
            if n < REAP_BATCH {
                return Ok(reaped);
            }
        }
    }

    /// Whether a signalled Send is outstanding, whose completion will
    /// free a slot.
    pub fn signal_outstanding(&self) -> bool {
        self.slots.signal_outstanding()
    }

    /// Slots free for new Sends.
    pub fn free_slots(&self) -> usize {
        self.slots.free()
    }

    /// Ask for an event on the channel at the next send completion.
    pub fn arm(&self) -> Result<(), RdmaError> {
        self.cq.arm()
    }

    /// Take at most one completion event from the channel (after the fd
    /// was readable); acknowledged in batches.
    pub fn take_event(&mut self) -> Result<bool, RdmaError> {
        self.events.take_one()
    }

    /// Move the queue pair to the error state (see [`RecvQueue::disconnect`]).
    pub fn disconnect(&self) {
        self.qp.disconnect()
    }

    /// Whether the queue pair was moved to the error state.
    pub fn is_disconnected(&self) -> bool {
        self.qp.disconnected.load(Ordering::SeqCst)
    }
}

impl AsFd for SendQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel's fd stays open as long as its CQ, which
        // `self` keeps; the borrow cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.cq.fd()) }
    }
}

impl AsRawFd for SendQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.cq.fd()
    }
}

/// The scatter/gather entries of a Send from a slot at `slot.0` (lkey
/// `slot.1`) holding `head_len` bytes then `tail_len` bytes: one entry when
/// nothing goes in place, else the head, the in-place segment
/// (address, length, lkey) and, if any, the tail.
fn send_sges(
    slot: (u64, u32),
    head_len: usize,
    in_place: Option<(u64, u32, u32)>,
    tail_len: usize,
) -> ([IbvSge; MAX_SEND_SGE], usize) {
    let (base, lkey) = slot;
    let mut sge = [IbvSge::default(); MAX_SEND_SGE];
    match in_place {
        None => {
            sge[0] = IbvSge {
                addr: base,
                length: (head_len + tail_len) as u32,
                lkey,
            };
            (sge, 1)
        }
        Some((addr, length, data_lkey)) => {
            sge[0] = IbvSge {
                addr: base,
                length: head_len as u32,
                lkey,
            };
            sge[1] = IbvSge {
                addr,
                length,
                lkey: data_lkey,
            };
            if tail_len == 0 {
                return (sge, 2);
            }
            sge[2] = IbvSge {
                addr: base + head_len as u64,
                length: tail_len as u32,
                lkey,
            };
            (sge, 3)
        }
    }
}

/// The work requests (and their entries) of one receive post, rebuilt for
/// each post and emptied right after it.
struct RecvChain(Vec<IbvRecvWr>);

// SAFETY: as for `SendChain`: empty except during `RecvQueue::post`.
unsafe impl Send for RecvChain {}
// SAFETY: as for `SendChain`.
unsafe impl Sync for RecvChain {}

/// The receive half of a queue pair: its ring of receive slots and its
/// completion queue.
pub struct RecvQueue {
    qp: Arc<Qp>,
    events: Events,
    cq: Arc<Cq>,
    slot_len: usize,
    /// Per slot: posted and not yet completed (the device may write it).
    lent: Box<[bool]>,
    sges: Vec<IbvSge>,
    chain: RecvChain,
}

impl RecvQueue {
    /// How many receive slots there are.
    pub fn slots(&self) -> usize {
        self.lent.len()
    }

    /// Lend `slots` to the device as one chain of receive work requests
    /// (one `ibv_post_recv`). A slot out of range or lent already is
    /// refused (nothing is posted then).
    pub fn post(&mut self, slots: &[usize]) -> Result<(), RdmaError> {
        if slots.is_empty() {
            return Ok(());
        }
        for (i, &s) in slots.iter().enumerate() {
            if s >= self.lent.len() || self.lent[s] {
                for &t in &slots[..i] {
                    self.lent[t] = false;
                }
                return Err(RdmaError::Call {
                    op: "post a receive buffer",
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("receive slot {s} is not free"),
                    ),
                });
            }
            self.lent[s] = true;
        }
        let ring = &self.qp.recv_ring;
        let lkey = ring.lkey();
        self.sges.clear();
        self.sges.extend(slots.iter().map(|&s| IbvSge {
            addr: ring.as_ptr() as u64 + (s * self.slot_len) as u64,
            length: self.slot_len as u32,
            lkey,
        }));
        let wrs = &mut self.chain.0;
        wrs.clear();
        for (&s, sge) in slots.iter().zip(self.sges.iter_mut()) {
            wrs.push(IbvRecvWr {
                wr_id: s as u64,
                next: ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
            });
        }
        for i in 1..wrs.len() {
            let next: *mut IbvRecvWr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad: *mut IbvRecvWr = ptr::null_mut();
        // The SGEs name ring slots, marked lent above until their
        // completion is polled; the ring outlives the QP.
        let rc = self.qp.post_recv(wrs.as_mut_ptr(), &mut bad);
        let posted = if rc == 0 {
            slots.len()
        } else if bad.is_null() {
            0
        } else {
            let base = wrs.as_ptr() as usize;
            ((bad as usize).saturating_sub(base) / std::mem::size_of::<IbvRecvWr>())
                .min(slots.len())
        };
        wrs.clear();
        if rc != 0 {
            for &s in &slots[posted..] {
                self.lent[s] = false;
            }
            return Err(RdmaError::returned("post a receive buffer", rc));
        }
        Ok(())
    }

    /// Lend every slot not lent yet, in chains of at most `chain` work
    /// requests (at connect: receive buffers go up before the peer may
    /// send). Returns how many were posted.
    pub fn post_idle(&mut self, chain: usize) -> Result<usize, RdmaError> {
        let idle: Vec<usize> = (0..self.lent.len()).filter(|&s| !self.lent[s]).collect();
        for c in idle.chunks(chain.max(1)) {
            self.post(c)?;
        }
        Ok(idle.len())
    }

    /// Up to `wcs.len()` receive completions; returns how many. Each one
    /// returns its slot (success or not: the device is done with it), to be
    /// read with [`RecvQueue::received`] and lent again with
    /// [`RecvQueue::post`].
    pub fn poll(&mut self, wcs: &mut [WorkCompletion]) -> Result<usize, RdmaError> {
        let n = self.cq.poll(wcs)?;
        for wc in &wcs[..n] {
            if let Some(l) = self.lent.get_mut(wc.wr_id() as usize) {
                *l = false;
            }
        }
        Ok(n)
    }

    /// The message a receive completion delivered: the first `byte_len`
    /// bytes of its slot (at most the slot). `None` for a slot out of range
    /// or lent to the device again.
    pub fn received(&self, wc: &WorkCompletion) -> Option<&[u8]> {
        let slot = usize::try_from(wc.wr_id()).ok()?;
        if *self.lent.get(slot)? {
            return None;
        }
        let len = (wc.byte_len() as usize).min(self.slot_len);
        let ring = &self.qp.recv_ring;
        // SAFETY: the slot is within the ring and not lent: its completion
        // was polled, so the device is done writing it, and it is lent again
        // only by `post`, which takes `&mut self` and so cannot run while
        // the returned borrow lives.
        Some(unsafe { std::slice::from_raw_parts(ring.as_ptr().add(slot * self.slot_len), len) })
    }

    /// Ask for an event on the channel at the next receive completion.
    pub fn arm(&self) -> Result<(), RdmaError> {
        self.cq.arm()
    }

    /// Take at most one completion event from the channel (after the fd
    /// was readable); acknowledged in batches.
    pub fn take_event(&mut self) -> Result<bool, RdmaError> {
        self.events.take_one()
    }

    /// Move the queue pair to the error state: from when this returns, the
    /// peer can no longer reach any memory registered in its protection
    /// domain through it, and posted work requests complete as flushed.
    /// Idempotent; also done when the queue pair is destroyed.
    pub fn disconnect(&self) {
        self.qp.disconnect()
    }

    /// Whether the queue pair was moved to the error state.
    pub fn is_disconnected(&self) -> bool {
        self.qp.disconnected.load(Ordering::SeqCst)
    }
}

impl AsFd for RecvQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: as for `SendQueue`.
        unsafe { BorrowedFd::borrow_raw(self.cq.fd()) }
    }
}

impl AsRawFd for RecvQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.cq.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: (u64, u32) = (0x10_0000, 7);

    #[test]
    fn a_send_copied_whole_is_one_entry_over_head_and_tail() {
        let (sge, n) = send_sges(SLOT, 28 + 48 + 100, None, 3);
        assert_eq!(n, 1);
        assert_eq!(
            (sge[0].addr, sge[0].length, sge[0].lkey),
            (0x10_0000, 28 + 48 + 100 + 3, 7)
        );
    }

    #[test]
    fn in_place_data_goes_between_head_and_tail_under_its_own_key() {
        let (sge, n) = send_sges(SLOT, 76, Some((0x7f00_0000, 8190, 42)), 2);
        assert_eq!(n, 3);
        assert_eq!(
            (sge[0].addr, sge[0].length, sge[0].lkey),
            (0x10_0000, 76, 7)
        );
        assert_eq!(
            (sge[1].addr, sge[1].length, sge[1].lkey),
            (0x7f00_0000, 8190, 42)
        );
        assert_eq!(
            (sge[2].addr, sge[2].length, sge[2].lkey),
            (0x10_0000 + 76, 2, 7),
            "the tail sits in the slot right after the head"
        );
    }

    #[test]
    fn in_place_data_without_padding_is_two_entries() {
        let (sge, n) = send_sges(SLOT, 76, Some((0x7f00_0000, 8192, 42)), 0);
        assert_eq!(n, 2);
        assert_eq!(
            (sge[1].addr, sge[1].length, sge[1].lkey),
            (0x7f00_0000, 8192, 42)
        );
    }
}
