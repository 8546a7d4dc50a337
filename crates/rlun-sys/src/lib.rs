//! rlun-sys: the only crate of rlun with `unsafe` code, and the safe
//! interface around it.
//!
//! rlun talks to two C interfaces: rdma-core (the RDMA connection manager
//! and verbs, for iSER) and the Linux nbd driver's ioctls. Everything that
//! needs `unsafe` for them lives here, behind wrappers whose safe methods
//! cannot break memory safety, so that the application crate (`rlun`) can
//! forbid `unsafe` altogether and the sans-IO core (`rlun-iscsi`) never
//! needed it. Every `unsafe` block carries a `// SAFETY:` comment
//! (`clippy::undocumented_unsafe_blocks` is denied) and every `unsafe fn`
//! a `# Safety` section.
//!
//! # Modules and their safety design
//!
//! - [`rdma`]: rdma-core, **loaded with `dlopen` at first use** rather
//!   than linked, so rlun runs where it is not installed (TCP only) and
//!   `iser://` then fails naming the library to install
//!   ([`rdma::LoadError`]). Struct layouts are hand-written and checked
//!   against the installed C headers by a test. The wrappers:
//!   - *ownership gives the release order*: each object holds what it was
//!     made from (a queue pair its CM id, protection domain, completion
//!     queues and rings; a memory region its protection domain; a CM id
//!     its event channel), so rdma-core's objects are destroyed in reverse
//!     order of creation however the caller drops them;
//!   - *memory lent to the device*: the send and receive rings are memory
//!     this crate allocates; a slot is lent to the device from its post
//!     until the completion covering it is polled, and only then readable
//!     (received data) or writable (the next Send) through safe methods;
//!     data sent in place from the caller's `Bytes` is kept until the Send
//!     completes;
//!   - *registered memory outlives its registration*: pool arenas are
//!     leaked for the process (registered from the pool's own registry),
//!     shared write data is kept by its registration; the one registration
//!     of memory owned elsewhere, a direct task's read buffer, states its
//!     contract and why rlun meets it in one place
//!     ([`rdma::MemoryRegion::for_task_read`]);
//!   - *events copied out*: a CM event is copied (kind, status, private
//!     data) and acknowledged in the same call; completion events are
//!     counted and acknowledged before their queue can be destroyed;
//!   - *fds for tokio*: channel fds are made non-blocking (`fcntl`) and
//!     exposed with `AsFd`/`AsRawFd` on their owners, which
//!     [`rdma::watch`] wraps in `tokio::io::unix::AsyncFd` (an `unsafe`
//!     constructor whose contract those owners meet by construction);
//!   - *the pinned-memory limit*: `RLIMIT_MEMLOCK`, read and raised
//!     ([`rdma::memlock`]), calls that only read or write a value we pass.
//! - [`nbd`]: the nbd ioctls, each taking its argument by value (no memory
//!   of ours reaches the kernel), so safe for any descriptor.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::missing_safety_doc)]

pub mod nbd;
pub mod rdma;
