//! The verbs objects of a device: the loaded library ([`Rdma`]), a device
//! context ([`Context`]), a protection domain ([`ProtectionDomain`]),
//! completion queues with their completion channels (crate-private: each
//! is owned by the queue it completes, [`super::queue`]) and work
//! completions ([`WorkCompletion`]).
//!
//! Ownership: a [`Context`] holds the CM id it came from (the RDMA CM keeps
//! the device open for the id's life); a protection domain and a completion
//! queue hold their context. So a context can never be closed under the
//! objects made on it, and each `Drop` releases one object after everything
//! made from it is gone.

use std::ffi::c_int;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::RdmaError;
use super::fd::set_nonblocking;
use super::ffi::{self, Api, IbvCompChannel, IbvContext, IbvCq, IbvWc};
use super::id::Id;

/// rdma-core, loaded (`ffi` loads it once per process with `dlopen`).
#[derive(Clone, Copy)]
pub struct Rdma {
    pub(crate) api: &'static Api,
}

impl std::fmt::Debug for Rdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rdma")
    }
}

impl Rdma {
    /// Load `libibverbs.so.1` and `librdmacm.so.1` (once per process). The
    /// error names the library that is missing and what `dlopen` said.
    pub fn load() -> Result<Rdma, ffi::LoadError> {
        ffi::api().map(|api| Rdma { api })
    }

    /// How many RDMA devices the machine has (`ibv_get_device_list`). An
    /// error where the kernel has no RDMA support at all (`ENOSYS`).
    pub fn device_count(&self) -> io::Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count into `n` and returns
        // NULL (errno set) or a list that we free right below.
        let list = unsafe { (self.api.ibv_get_device_list)(&mut n) };
        if list.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `list` came from ibv_get_device_list and is freed once; no
        // device pointer from it is kept.
        unsafe { (self.api.ibv_free_device_list)(list) };
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

/// The verbs context of the device a CM id is bound to (after address
/// resolution, [`super::CmId::context`]). Cheap to clone; keeps the id, and
/// so the device, open.
#[derive(Clone)]
pub struct Context {
    pub(crate) api: &'static Api,
    pub(crate) ctx: NonNull<IbvContext>,
    pub(crate) _id: Arc<Id>,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs locks
// what it shares); this struct never changes after creation.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// A protection domain: memory registered in it and queue pairs created in
/// it belong together. Cheap to clone (shared); deallocated when the last
/// clone and every memory region and queue pair in it are gone (each holds
/// a clone).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<Pd>,
}

pub(crate) struct Pd {
    pub(crate) ctx: Context,
    pub(crate) pd: NonNull<std::ffi::c_void>,
}

// SAFETY: ibv_pd objects may be used from any thread; registration in and
// deallocation of a PD are thread-safe in libibverbs.
unsafe impl Send for Pd {}
// SAFETY: as above; the struct never changes after creation.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated in `ProtectionDomain::new`, deallocated once;
        // every memory region and queue pair in it held this `Pd` and is
        // gone, and the context (kept by `ctx`) is still open.
        unsafe { (self.ctx.api.ibv_dealloc_pd)(self.pd.as_ptr()) };
    }
}

impl ProtectionDomain {
    /// Allocate a protection domain on `ctx`'s device.
    pub fn new(ctx: &Context) -> Result<ProtectionDomain, RdmaError> {
        // SAFETY: `ctx` is an open device context (kept open by its id).
        let pd = unsafe { (ctx.api.ibv_alloc_pd)(ctx.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| RdmaError::last("allocate a protection domain"))?;
        Ok(ProtectionDomain {
            inner: Arc::new(Pd {
                ctx: ctx.clone(),
                pd,
            }),
        })
    }

    pub(crate) fn api(&self) -> &'static Api {
        self.inner.ctx.api
    }

    pub(crate) fn context(&self) -> &Context {
        &self.inner.ctx
    }
}

/// A completion queue with a completion channel of its own, whose fd
/// (non-blocking) says when a completion arrived after [`Cq::arm`].
/// Crate-private: the queue that owns it ([`super::SendQueue`],
/// [`super::RecvQueue`]) is the only one to poll it, so it sees every
/// completion of its work requests.
pub(crate) struct Cq {
    ctx: Context,
    channel: NonNull<IbvCompChannel>,
    cq: NonNull<IbvCq>,
}

// SAFETY: CQs and completion channels may be used from any thread; polling
// and arming go through the provider, which locks the CQ. One queue handle
// polls each CQ (see the struct docs).
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// A CQ of `depth` entries on `ctx`'s device, with its own non-blocking
    /// completion channel.
    pub(crate) fn new(ctx: &Context, depth: usize) -> Result<Cq, RdmaError> {
        let api = ctx.api;
        // SAFETY: `ctx` is an open device context.
        let channel = unsafe { (api.ibv_create_comp_channel)(ctx.ctx.as_ptr()) };
        let channel =
            NonNull::new(channel).ok_or_else(|| RdmaError::last("create a completion channel"))?;
        let destroy_channel = |channel: NonNull<IbvCompChannel>| {
            // SAFETY: created above, no CQ uses it yet; destroyed once.
            unsafe { (api.ibv_destroy_comp_channel)(channel.as_ptr()) };
        };
        // SAFETY: the channel is live; its `fd` field is plain data.
        let fd = unsafe { (*channel.as_ptr()).fd };
        // SAFETY: the fd belongs to the live channel, open for the call.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if let Err(source) = set_nonblocking(borrowed) {
            destroy_channel(channel);
            return Err(RdmaError::Call {
                op: "make a completion channel non-blocking",
                source,
            });
        }
        let depth = c_int::try_from(depth).unwrap_or(c_int::MAX);
        // SAFETY: context and channel live; no CQ context pointer is used.
        let cq = unsafe {
            (api.ibv_create_cq)(
                ctx.ctx.as_ptr(),
                depth,
                std::ptr::null_mut(),
                channel.as_ptr(),
                0,
            )
        };
        let Some(cq) = NonNull::new(cq) else {
            let err = RdmaError::last("create a completion queue");
            destroy_channel(channel);
            return Err(err);
        };
        Ok(Cq {
            ctx: ctx.clone(),
            channel,
            cq,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut IbvCq {
        self.cq.as_ptr()
    }

    /// The completion channel's fd (non-blocking), open as long as `self`.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as `self`; `fd` is plain data
        // that never changes.
        unsafe { (*self.channel.as_ptr()).fd }
    }

    /// Up to `wcs.len()` work completions; returns how many.
    pub(crate) fn poll(&self, wcs: &mut [WorkCompletion]) -> Result<usize, RdmaError> {
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        // SAFETY: the CQ is live; `wcs` has room for `n` entries, and
        // `WorkCompletion` is a transparent `struct ibv_wc`.
        let got = unsafe {
            ((*self.ctx.ctx.as_ptr()).ops.poll_cq)(self.cq.as_ptr(), n, wcs.as_mut_ptr().cast())
        };
        if got < 0 {
            return Err(RdmaError::Call {
                op: "poll a completion queue",
                source: io::Error::other(format!("ibv_poll_cq returned {got}")),
            });
        }
        Ok(got as usize)
    }

    /// Ask for an event on the channel at the next completion.
    pub(crate) fn arm(&self) -> Result<(), RdmaError> {
        // SAFETY: the CQ is live.
        let rc = unsafe { ((*self.ctx.ctx.as_ptr()).ops.req_notify_cq)(self.cq.as_ptr(), 0) };
        if rc != 0 {
            return Err(RdmaError::returned("arm completion notification", rc));
        }
        Ok(())
    }

    /// Take one completion event from the channel without blocking:
    /// `Ok(false)` when there is none. Every event taken must be
    /// acknowledged ([`Cq::ack`]) before the CQ is destroyed: the queue
    /// handles count them ([`Events`]).
    pub(crate) fn take_event(&self) -> Result<bool, RdmaError> {
        let mut cq = std::ptr::null_mut();
        let mut cq_ctx = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; the out-pointers are
        // valid for the call.
        if unsafe { (self.ctx.api.ibv_get_cq_event)(self.channel.as_ptr(), &mut cq, &mut cq_ctx) }
            != 0
        {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(RdmaError::Call {
                op: "read a completion event",
                source: err,
            });
        }
        Ok(true)
    }

    /// Acknowledge `n` events taken from the channel.
    pub(crate) fn ack(&self, n: u32) {
        if n > 0 {
            // SAFETY: the CQ is live and `n` events of it were taken and not
            // yet acknowledged (the caller's count).
            unsafe { (self.ctx.api.ibv_ack_cq_events)(self.cq.as_ptr(), n) };
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, in this order: the CQ
        // (whose queue pair held this `Cq` and is destroyed, and whose
        // events were all acknowledged by the owning queue's `Events`),
        // then its channel.
        unsafe {
            (self.ctx.api.ibv_destroy_cq)(self.cq.as_ptr());
            (self.ctx.api.ibv_destroy_comp_channel)(self.channel.as_ptr());
        }
    }
}

/// Completion events taken from a CQ's channel and not yet acknowledged:
/// acknowledged in batches (`ibv_ack_cq_events` takes a lock) and all of
/// them when the owner drops, before the CQ can be destroyed.
pub(crate) struct Events {
    cq: Arc<Cq>,
    unacked: u32,
}

/// Events acknowledged in one `ibv_ack_cq_events` call.
const ACK_BATCH: u32 = 32;

impl Events {
    pub(crate) fn new(cq: Arc<Cq>) -> Events {
        Events { cq, unacked: 0 }
    }

    /// Take at most one event (a waiting queue takes one per wake-up: its
    /// CQ is armed only just before it waits, so one is normally all
    /// there is; one left behind costs a spurious wake-up later, never a
    /// lost one). Returns whether there was one.
    pub(crate) fn take_one(&mut self) -> Result<bool, RdmaError> {
        let got = self.cq.take_event()?;
        if got {
            self.unacked += 1;
            if self.unacked >= ACK_BATCH {
                self.cq.ack(self.unacked);
                self.unacked = 0;
            }
        }
        Ok(got)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.cq.ack(self.unacked);
    }
}

/// One work completion (`struct ibv_wc`): which work request (`wr_id`),
/// whether it succeeded, and for a receive how many bytes arrived.
#[repr(transparent)]
#[derive(Clone, Copy, Default)]
pub struct WorkCompletion(pub(crate) IbvWc);

impl WorkCompletion {
    /// The `wr_id` of the work request it completes (for the queues of this
    /// crate: the slot).
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    pub fn is_success(&self) -> bool {
        self.0.status == ffi::IBV_WC_SUCCESS
    }

    /// Flushed: the queue pair was in the error state (after a disconnect
    /// or a failed operation), so the work request never ran.
    pub fn is_flushed(&self) -> bool {
        self.0.status == ffi::IBV_WC_WR_FLUSH_ERR
    }

    /// Bytes received (receive completions).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The status as libibverbs names it ("success", "Work Request Flushed
    /// Error", "remote access error"…).
    pub fn status_name(&self) -> &'static str {
        match ffi::api() {
            Ok(api) => ffi::wc_status_name(api, self.0.status),
            Err(_) => "unknown work completion status",
        }
    }

    /// A completion as the device would report it (tests of the code that
    /// handles completions).
    pub fn new(wr_id: u64, status: i32, byte_len: u32) -> WorkCompletion {
        WorkCompletion(IbvWc {
            wr_id,
            status,
            byte_len,
            ..IbvWc::default()
        })
    }

    /// The status code (`enum ibv_wc_status`).
    pub fn status(&self) -> i32 {
        self.0.status
    }
}

impl std::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.0.wr_id)
            .field("status", &self.0.status)
            .field("byte_len", &self.0.byte_len)
            .finish()
    }
}

/// Work completion status codes (`enum ibv_wc_status`), for building completions in
/// tests ([`WorkCompletion::new`]).
pub mod wc_status {
    pub const SUCCESS: i32 = super::ffi::IBV_WC_SUCCESS;
    pub const WR_FLUSH_ERR: i32 = super::ffi::IBV_WC_WR_FLUSH_ERR;
    pub const REM_ACCESS_ERR: i32 = super::ffi::IBV_WC_REM_ACCESS_ERR;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_rdma_core_but_no_rdma_device() {
        // The test machines have rdma-core installed and no RDMA device:
        // the device list is empty, or the kernel has no RDMA support at
        // all (ENOSYS, "Function not implemented").
        let rdma = Rdma::load().expect("rdma-core is installed where the tests run");
        match rdma.device_count() {
            Ok(n) => assert_eq!(n, 0, "an RDMA device on a test host?"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "{e}"),
        }
    }

    #[test]
    fn work_completions_say_what_happened() {
        let ok = WorkCompletion::new(3, wc_status::SUCCESS, 76);
        assert!(ok.is_success() && !ok.is_flushed());
        assert_eq!((ok.wr_id(), ok.byte_len()), (3, 76));
        assert_eq!(ok.status_name(), "success");
        let flushed = WorkCompletion::new(4, wc_status::WR_FLUSH_ERR, 0);
        assert!(!flushed.is_success() && flushed.is_flushed());
        let access = WorkCompletion::new(5, wc_status::REM_ACCESS_ERR, 0);
        assert_eq!(access.status_name(), "remote access error");
    }

    #[test]
    fn a_work_completion_is_a_struct_ibv_wc() {
        assert_eq!(
            std::mem::size_of::<WorkCompletion>(),
            std::mem::size_of::<IbvWc>()
        );
    }
}
