//! rdma-core, loaded with `dlopen` at first use, behind safe wrappers: what
//! an iSER initiator needs of the RDMA connection manager and the verbs.
//!
//! | wrapper | C object | released |
//! | --- | --- | --- |
//! | [`Rdma`] | `libibverbs.so.1` + `librdmacm.so.1` | never (loaded once) |
//! | [`EventChannel`] | `rdma_event_channel` | after every id on it |
//! | [`CmId`] | `rdma_cm_id` | after everything made on its device |
//! | [`Context`] | the id's `ibv_context` | owned by the CM (kept by the id) |
//! | [`ProtectionDomain`] | `ibv_pd` | after its regions and queue pair |
//! | completion queue (in [`SendQueue`], [`RecvQueue`]) | `ibv_cq` + `ibv_comp_channel` | after the queue pair, events acknowledged |
//! | [`SendQueue`] + [`RecvQueue`] ([`queue::create`]) | `ibv_qp` on the id, with its rings | QP destroyed first, then rings, CQs |
//! | [`MemoryRegion`], [`PoolRegistrations`] | `ibv_mr` | before its memory |
//!
//! Every wrapper holds what it was made from (a `Drop` never runs while
//! anything made from its object lives), so the release order of rdma-core
//! is the drop order of the Rust values, whatever order the caller drops
//! them in. The fds rdma-core hands out (CM event channel, completion
//! channels) are non-blocking and exposed through `AsFd`/`AsRawFd` on the
//! objects that own them, so the caller can wrap those objects in tokio's
//! `AsyncFd`, which deregisters the fd before the object closes it.
//!
//! See [`mr`] for which memory may be registered and why each kind outlives
//! its registration, and [`queue`] for how ring slots are lent to the
//! device until their completions are polled.

mod cm;
mod error;
mod fd;
mod ffi;
mod id;
pub mod memlock;
pub mod mr;
pub mod queue;
pub mod slots;
mod verbs;
mod watch;

pub use cm::{CmEvent, CmEventKind, CmId, ConnectParams, EventChannel};
pub use error::RdmaError;
pub use ffi::LoadError;
pub use mr::{Keys, MemoryRegion, PoolKeys, PoolRegistrations};
pub use queue::{InPlace, Message, PrepareError, QueueConfig, Reaped, RecvQueue, SendQueue};
pub use verbs::{wc_status, Context, ProtectionDomain, Rdma, WorkCompletion};
pub use watch::{watch, Watchable};
