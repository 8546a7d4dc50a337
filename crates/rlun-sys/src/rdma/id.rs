//! The owners of the two RDMA CM objects everything else hangs from: the
//! event channel and the CM id. Crate-private; the public handles are in
//! [`super::cm`], and every object created on the id's device keeps the
//! id alive ([`super::verbs::Context`]).
//!
//! Release order by ownership: an [`Id`] holds its [`Channel`], so
//! `rdma_destroy_id` runs before `rdma_destroy_event_channel`; everything
//! made on the id's device (protection domain, completion queues, queue
//! pair) holds the `Id`, so the id goes last of them. Events are copied out
//! and acknowledged as they are read ([`super::cm::EventChannel::try_event`]),
//! so `rdma_destroy_id`, which waits for the acknowledgement of every event
//! of its id, never blocks.

use std::ptr::NonNull;

use super::ffi::{Api, RdmaCmId, RdmaEventChannel};

/// An `rdma_event_channel`, destroyed when the last holder goes.
pub(crate) struct Channel {
    pub(crate) api: &'static Api,
    pub(crate) ch: NonNull<RdmaEventChannel>,
}

// SAFETY: the channel is an fd-backed librdmacm object that may be used and
// destroyed from any thread; this struct only reads events from it
// (`rdma_get_cm_event` is thread-safe) and destroys it once, in Drop.
unsafe impl Send for Channel {}
// SAFETY: as above; nothing in the struct changes after creation.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel, destroyed exactly
        // once; every id on it is gone (each holds this channel).
        unsafe { (self.api.rdma_destroy_event_channel)(self.ch.as_ptr()) };
    }
}

/// An `rdma_cm_id`, destroyed when the last holder goes.
pub(crate) struct Id {
    pub(crate) api: &'static Api,
    pub(crate) id: NonNull<RdmaCmId>,
    /// Kept until the id is destroyed.
    pub(crate) _channel: std::sync::Arc<Channel>,
}

// SAFETY: librdmacm ids may be used from any thread; the calls made through
// `Id` (resolve, connect, disconnect, create/destroy QP) are each made by
// one owner at a time or are thread-safe in librdmacm (rdma_disconnect).
unsafe impl Send for Id {}
// SAFETY: as above; the struct itself never changes after creation.
unsafe impl Sync for Id {}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id and destroyed exactly once.
        // Everything created on its device context (PD, CQs, the QP) held
        // this `Id` and is gone, and its events were acknowledged when read.
        unsafe { (self.api.rdma_destroy_id)(self.id.as_ptr()) };
    }
}
