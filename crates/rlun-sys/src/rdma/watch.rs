//! The channel fds of rdma-core on tokio: [`watch`] wraps an object of this
//! crate that owns such an fd in a `tokio::io::unix::AsyncFd`.
//!
//! `AsyncFd`'s constructor is `unsafe` (tokio 1.54): the fd must stay open,
//! and `as_raw_fd` return that same fd, for as long as the `AsyncFd` owns
//! the object. That holds for every [`Watchable`] type by construction —
//! each owns the channel whose fd it returns, the channel is never replaced,
//! and it is closed only when the object drops, which `AsyncFd` does after
//! deregistering the fd — so the wrapping is safe here, and only these
//! types can be wrapped ([`Watchable`] is sealed).

use std::io;
use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::cm::EventChannel;
use super::queue::{RecvQueue, SendQueue};

mod sealed {
    pub trait Sealed {}
}

/// An object of this crate that owns a channel fd (non-blocking, readable
/// when an event waits) for as long as it lives.
pub trait Watchable: AsRawFd + sealed::Sealed {}

impl sealed::Sealed for EventChannel {}
impl Watchable for EventChannel {}
impl sealed::Sealed for SendQueue {}
impl Watchable for SendQueue {}
impl sealed::Sealed for RecvQueue {}
impl Watchable for RecvQueue {}

/// `obj` registered with the current tokio runtime for readability. Must
/// be called within a runtime.
pub fn watch<T: Watchable>(obj: T) -> io::Result<AsyncFd<T>> {
    // SAFETY: a `Watchable` owns the open channel whose fd `as_raw_fd`
    // returns; the channel is never replaced and closes only when `obj`
    // drops, which the `AsyncFd` does after deregistering the fd (see the
    // module docs).
    unsafe { AsyncFd::register_with_interest(obj, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
