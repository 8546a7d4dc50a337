//! The RDMA connection manager: an event channel ([`EventChannel`], whose
//! fd tokio can watch), a CM id on it ([`CmId`]: address and route
//! resolution, the device context it is bound to, connect with private
//! data), and its events ([`CmEvent`], copied out of librdmacm's struct and
//! acknowledged at once).

use std::ffi::c_int;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use super::error::RdmaError;
use super::fd::set_nonblocking;
use super::ffi::{self, cm_event, RdmaCmEvent, RdmaConnParam};
use super::id::{Channel, Id};
use super::verbs::{Context, Rdma};

/// An RDMA CM event channel, non-blocking. Its fd is readable when an event
/// is waiting ([`EventChannel::try_event`]).
pub struct EventChannel {
    inner: Arc<Channel>,
}

impl EventChannel {
    pub fn new(rdma: &Rdma) -> Result<EventChannel, RdmaError> {
        let api = rdma.api;
        // SAFETY: no preconditions; returns NULL (errno set) or a channel
        // that `Channel` destroys once.
        let ch = unsafe { (api.rdma_create_event_channel)() };
        let ch =
            NonNull::new(ch).ok_or_else(|| RdmaError::last("create an RDMA CM event channel"))?;
        let inner = Arc::new(Channel { api, ch });
        let channel = EventChannel { inner };
        set_nonblocking(channel.as_fd()).map_err(|source| RdmaError::Call {
            op: "make the CM event channel non-blocking",
            source,
        })?;
        Ok(channel)
    }

    /// A CM id for a reliable-connected (TCP port space) connection, whose
    /// events arrive on this channel.
    pub fn create_id(&self) -> Result<CmId, RdmaError> {
        let api = self.inner.api;
        let mut id = std::ptr::null_mut();
        // SAFETY: the channel is live; `id` receives a new id (or stays
        // NULL on failure) that `Id` destroys once.
        let rc = unsafe {
            (api.rdma_create_id)(
                self.inner.ch.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                ffi::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(RdmaError::last("create an RDMA CM id"));
        }
        let id = NonNull::new(id).ok_or_else(|| RdmaError::last("create an RDMA CM id"))?;
        Ok(CmId {
            inner: Arc::new(Id {
                api,
                id,
                _channel: self.inner.clone(),
            }),
        })
    }

    /// The next event, without waiting (`None`: none is there). Its fields
    /// are copied out and the event acknowledged before this returns, so no
    /// event is ever left unacknowledged (which would block the id's
    /// destruction).
    pub fn try_event(&self) -> Result<Option<CmEvent>, RdmaError> {
        let api = self.inner.api;
        let mut ev: *mut RdmaCmEvent = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; on success `ev`
        // points to an event that we copy and acknowledge once below.
        if unsafe { (api.rdma_get_cm_event)(self.inner.ch.as_ptr(), &mut ev) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(RdmaError::Call {
                op: "read a CM event",
                source: err,
            });
        }
        // SAFETY: on success `ev` is a valid event until acknowledged; its
        // private data, if any, is `private_data_len` bytes at
        // `private_data`, valid as long as the event.
        let out = unsafe {
            let e = &*ev;
            let private_data = if e.conn.private_data.is_null() || e.conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    e.conn.private_data.cast::<u8>(),
                    usize::from(e.conn.private_data_len),
                )
                .to_vec()
            };
            CmEvent {
                kind: CmEventKind::from_raw(e.event),
                name: ffi::event_name(api, e.event),
                status: e.status,
                private_data,
            }
        };
        // SAFETY: acknowledged exactly once, after the copy; nothing of the
        // event is used afterwards.
        unsafe { (api.rdma_ack_cm_event)(ev) };
        Ok(Some(out))
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel's fd stays open as long as the channel, which
        // `self` keeps alive; the borrow cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is live; `fd` is plain data that never changes.
        unsafe { (*self.inner.ch.as_ptr()).fd }
    }
}

/// What a CM event says (`enum rdma_cm_event_type`), for the events an
/// initiator meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    RouteResolved,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    AddrChange,
    TimewaitExit,
    Other(i32),
}

impl CmEventKind {
    fn from_raw(v: c_int) -> CmEventKind {
        match v {
            cm_event::ADDR_RESOLVED => CmEventKind::AddrResolved,
            cm_event::ROUTE_RESOLVED => CmEventKind::RouteResolved,
            cm_event::CONNECT_ERROR => CmEventKind::ConnectError,
            cm_event::UNREACHABLE => CmEventKind::Unreachable,
            cm_event::REJECTED => CmEventKind::Rejected,
            cm_event::ESTABLISHED => CmEventKind::Established,
            cm_event::DISCONNECTED => CmEventKind::Disconnected,
            cm_event::DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            cm_event::ADDR_CHANGE => CmEventKind::AddrChange,
            cm_event::TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            other => CmEventKind::Other(other),
        }
    }

    /// The connection is over: the peer disconnected, the device went, the
    /// address moved, or the id left its time-wait.
    pub fn ends_connection(self) -> bool {
        matches!(
            self,
            CmEventKind::Disconnected
                | CmEventKind::DeviceRemoval
                | CmEventKind::AddrChange
                | CmEventKind::TimewaitExit
        )
    }
}

/// A CM event, copied out of librdmacm's struct before it was acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    pub kind: CmEventKind,
    /// librdmacm's name for it (`RDMA_CM_EVENT_ESTABLISHED`…).
    pub name: &'static str,
    /// Negative: an errno; positive: a transport-specific status (e.g. the
    /// reject reason of a REJECTED event).
    pub status: i32,
    /// The peer's private data (connect reply, reject).
    pub private_data: Vec<u8>,
}

impl fmt::Display for CmEvent {
    /// `RDMA_CM_EVENT_UNREACHABLE (Connection timed out (os error 110))` for an errno
    /// status, `RDMA_CM_EVENT_REJECTED (status 28)` for another.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.status < 0 {
            write!(
                f,
                "{} ({})",
                self.name,
                io::Error::from_raw_os_error(-self.status)
            )
        } else {
            write!(f, "{} (status {})", self.name, self.status)
        }
    }
}

/// What `rdma_connect` sends besides the private data (`struct
/// rdma_conn_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams<'a> {
    /// At most 255 bytes (the CM may carry less, depending on the port).
    pub private_data: &'a [u8],
    /// RDMA Reads the peer may have outstanding against us (0xff: the
    /// device's maximum, filled in by librdmacm).
    pub responder_resources: u8,
    /// RDMA Reads we may have outstanding against the peer.
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// An RDMA CM id for one outgoing connection. The objects made on its
/// device ([`Context`] and what is created from it) keep it alive; it is
/// destroyed when the last of them goes.
pub struct CmId {
    pub(crate) inner: Arc<Id>,
}

impl CmId {
    fn ms(timeout: Duration) -> c_int {
        c_int::try_from(timeout.as_millis())
            .unwrap_or(c_int::MAX)
            .max(1)
    }

    /// Start resolving `dst` to a local RDMA device (event
    /// [`CmEventKind::AddrResolved`] when done).
    pub fn resolve_addr(&self, dst: SocketAddr, timeout: Duration) -> Result<(), RdmaError> {
        let api = self.inner.api;
        let id = self.inner.id.as_ptr();
        let ms = Self::ms(timeout);
        let rc = match dst {
            SocketAddr::V4(a) => {
                let mut sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: the id is live; `sin` is a valid sockaddr_in that
                // librdmacm copies during the call.
                unsafe {
                    (api.rdma_resolve_addr)(
                        id,
                        std::ptr::null_mut(),
                        (&mut sin as *mut libc::sockaddr_in).cast(),
                        ms,
                    )
                }
            }
            SocketAddr::V6(a) => {
                let mut sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for a sockaddr_in6.
                unsafe {
                    (api.rdma_resolve_addr)(
                        id,
                        std::ptr::null_mut(),
                        (&mut sin6 as *mut libc::sockaddr_in6).cast(),
                        ms,
                    )
                }
            }
        };
        if rc != 0 {
            return Err(RdmaError::last("resolve the RDMA address"));
        }
        Ok(())
    }

    /// Start resolving the route (event [`CmEventKind::RouteResolved`]).
    pub fn resolve_route(&self, timeout: Duration) -> Result<(), RdmaError> {
        // SAFETY: the id is live (with a resolved address, or the call fails).
        if unsafe { (self.inner.api.rdma_resolve_route)(self.inner.id.as_ptr(), Self::ms(timeout)) }
            != 0
        {
            return Err(RdmaError::last("resolve the RDMA route"));
        }
        Ok(())
    }

    /// The device context the id is bound to, once its address is resolved.
    pub fn context(&self) -> Option<Context> {
        // SAFETY: the id is live; `verbs` is plain data the CM sets on
        // address resolution and keeps open for the id's life (the context
        // keeps the id).
        let ctx = unsafe { (*self.inner.id.as_ptr()).verbs };
        Some(Context {
            api: self.inner.api,
            ctx: NonNull::new(ctx)?,
            _id: self.inner.clone(),
        })
    }

    /// Start connecting (event [`CmEventKind::Established`] when done;
    /// rejected, unreachable or a connect error otherwise). The queue pair
    /// must exist ([`super::queue::create`]).
    pub fn connect(&self, params: &ConnectParams<'_>) -> Result<(), RdmaError> {
        let len = u8::try_from(params.private_data.len()).map_err(|_| RdmaError::Call {
            op: "start the RDMA connection (rdma_connect)",
            source: io::Error::new(io::ErrorKind::InvalidInput, "private data over 255 bytes"),
        })?;
        let mut param = RdmaConnParam {
            private_data: params.private_data.as_ptr().cast(),
            private_data_len: len,
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            flow_control: 0,
            retry_count: params.retry_count,
            rnr_retry_count: params.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        };
        // SAFETY: the id is live; `param` and the private data it points to
        // outlive the call, which copies them.
        if unsafe { (self.inner.api.rdma_connect)(self.inner.id.as_ptr(), &mut param) } != 0 {
            return Err(RdmaError::last("start the RDMA connection (rdma_connect)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: CmEventKind, name: &'static str, status: i32) -> CmEvent {
        CmEvent {
            kind,
            name,
            status,
            private_data: Vec::new(),
        }
    }

    #[test]
    fn cm_events_display_an_errno_status_as_its_message() {
        let e = event(
            CmEventKind::Unreachable,
            "RDMA_CM_EVENT_UNREACHABLE",
            -libc::ETIMEDOUT,
        );
        assert_eq!(
            e.to_string(),
            "RDMA_CM_EVENT_UNREACHABLE (Connection timed out (os error 110))"
        );
        let e = event(CmEventKind::Rejected, "RDMA_CM_EVENT_REJECTED", 28);
        assert_eq!(e.to_string(), "RDMA_CM_EVENT_REJECTED (status 28)");
    }

    #[test]
    fn cm_event_kinds_follow_rdma_cma_h_and_say_which_end_a_connection() {
        assert_eq!(
            CmEventKind::from_raw(cm_event::ESTABLISHED),
            CmEventKind::Established
        );
        assert_eq!(CmEventKind::from_raw(99), CmEventKind::Other(99));
        for k in [
            CmEventKind::Disconnected,
            CmEventKind::DeviceRemoval,
            CmEventKind::AddrChange,
            CmEventKind::TimewaitExit,
        ] {
            assert!(k.ends_connection(), "{k:?}");
        }
        assert!(!CmEventKind::Established.ends_connection());
        assert!(!CmEventKind::Other(3).ends_connection());
    }

    #[test]
    fn an_event_channel_without_rdma_devices_is_empty_and_non_blocking() {
        // rdma_create_event_channel opens /dev/infiniband/rdma_cm, which
        // exists only with RDMA support in the kernel; where it does not,
        // the error names the step.
        let rdma = Rdma::load().expect("rdma-core is installed where the tests run");
        match EventChannel::new(&rdma) {
            Ok(ch) => {
                assert!(crate::rdma::fd::is_nonblocking(ch.as_fd()).unwrap());
                assert!(ch.try_event().unwrap().is_none());
            }
            Err(e) => assert_eq!(e.to_string(), "cannot create an RDMA CM event channel"),
        }
    }
}
