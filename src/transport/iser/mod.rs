//! iSCSI Extensions for RDMA (iSER, RFC 7145): the transport behind
//! `iser://` URLs, in safe code over the RDMA wrappers of
//! [`rlun_sys::rdma`] (rdma-core loaded with `dlopen` at first use, so a
//! machine without rdma-core still runs rlun over TCP and `iser://` says
//! what is missing).
//!
//! - [`header`]: the iSER header, Hello / Hello Reply and the RDMA CM
//!   private data, as a pure codec.
//! - [`params`]: the login limits and the sizes of queues and rings.
//! - [`error`]: [`IserError`], classified beside its type.
//! - `setup` (feature `rdma`): connecting through the RDMA CM, and the
//!   [`Transport`](crate::transport::Transport) implementation that splits
//!   a connection into the driver's halves.
//! - `encoder` (feature `rdma`): each PDU's frame and iSER header, built on
//!   the driver task; a SCSI Command's buffers registered there.
//! - `reader` (feature `rdma`): the receive half — receive completions and
//!   CM events, on tokio through the completion channel's fd.
//! - `writer` (feature `rdma`): the send half — the frames of one write as
//!   one chain of Sends in one post, only some of them signalled
//!   ([`rlun_sys::rdma::slots`]).
//!
//! Received buffers go back to the device once per poll batch, as one
//! chain; a waiting half reads one completion event per wake-up. On
//! soft-RoCE every post and every re-arm is a system call, so these are
//! what the per-I/O CPU cost is made of.
//!
//! [`IserTransport`] moves data directly
//! ([`DataMovement::Direct`](crate::transport::DataMovement)): login,
//! text, NOP, task management and logout PDUs are Sends with a plain iSER
//! header; a SCSI command's buffers are named in its header (Read STag/VA:
//! the target RDMA-Writes read data there; Write STag/VA: it RDMA-Reads
//! write data from the first byte not sent as immediate data).
//!
//! Zero copy: buffers from the registered pool ([`rlun_iscsi::iobuf`]) are
//! named under their arena's key, which each connection registers once, so
//! the data path makes no registration; immediate data goes out as a
//! second scatter/gather entry straight from the caller's buffer. Other
//! memory is registered per command. Copies that remain are counted in
//! [`crate::stats`] (`copied_bytes`). Not yet: Send with Invalidate.
//!
//! # Who owns a command's registration, and why that is enough
//!
//! The encoder registers a command's buffers outside the pool when it
//! encodes the SCSI Command and returns the registration as the task's
//! hold ([`TaskHold`](crate::transport::TaskHold)); the driver hands it to
//! the core, which keeps it with the task and drops it when the task ends,
//! before the task's buffers. Nothing here tracks tasks or looks into
//! responses. That this never takes a registration away while the target
//! may still use it, nor keeps one past its memory:
//!
//! - **Final response.** The queue pair is reliable-connected: the
//!   target's RDMA Writes of a task's read data are delivered, and its RDMA
//!   Read requests for the write data are served by our device, before the
//!   Send carrying the SCSI Response that follows them (RC ordering), so
//!   when the core sees the response the target is done with the buffers.
//! - **Task management.** A TMF Response that ends tasks (ABORT TASK, a
//!   LUN or target reset, RFC 7143 §11.6) comes after the target stopped
//!   those tasks, on the same ordered connection; the core ends exactly
//!   the tasks it names and drops their holds then.
//! - **Connection loss.** The driver drops the receive half first, and its
//!   `Drop` moves the queue pair to the error state (the target loses
//!   access to everything registered), then the core, whose tasks drop
//!   their holds. The send half may live on in the writer task; whatever
//!   it posts then is flushed.
//! - **Any other end** (a Reject, a local failure): dropping the hold
//!   deregisters the memory before the core frees it (`ibv_dereg_mr`
//!   returns once the device can no longer touch it); a target that still
//!   used the key gets a remote access error, never freed memory.
//!
//! The memory-safety half of this argument (a registration never outlives
//! its memory) is stated once, at the wrapper that makes such
//! registrations: [`rlun_sys::rdma::MemoryRegion::for_task_read`].
//!
//! Discovery over iSER: the same SendTargets text exchange as over TCP, in a
//! discovery session on the iSER portal (LIO treats the iSER keys as
//! irrelevant there). Discovery over TCP on the plain portal works as well,
//! as with other initiators.

#[cfg(feature = "rdma")]
mod encoder;
pub mod error;
pub mod header;
pub mod params;
#[cfg(feature = "rdma")]
mod reader;
#[cfg(feature = "rdma")]
mod setup;
#[cfg(feature = "rdma")]
mod writer;

#[cfg(feature = "rdma")]
pub use encoder::{IserEncoder, IserFrame};
pub use error::IserError;
pub use params::{adjust_proposal, MAX_DIRECT_TRANSFER, MAX_RECV_DATA};
#[cfg(feature = "rdma")]
pub use reader::IserReader;
#[cfg(feature = "rdma")]
pub use setup::IserTransport;
#[cfg(feature = "rdma")]
pub use writer::IserWriter;

/// Fail at once, with the checks to run, when this machine cannot do iSER
/// (rdma-core missing, no RDMA device, or RDMA support not built), or
/// when `RLUN_ISER_REGISTRATION` names no mode.
pub fn check_available() -> Result<(), error::IserError> {
    #[cfg(feature = "rdma")]
    {
        setup::registration()?;
        setup::check_devices().map(|_| ())
    }
    #[cfg(not(feature = "rdma"))]
    {
        Err(error::IserError::NotBuilt)
    }
}
