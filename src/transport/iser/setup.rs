//! Connecting: the RDMA CM connection setup of one iSER connection (RFC
//! 7145 §5.1, and what LIO expects, see `ref/iser/iser.md`), and the
//! [`Transport`] implementation that splits it into the driver's halves.
//!
//! Flow: resolve address and route (each bounded by the connect timeout)
//! → protection domain, one completion queue (with its own channel) for
//! sends and one for receives, the RC queue pair on the CM id with its
//! send and receive rings → the pool arenas registered → every receive
//! buffer posted → `rdma_connect` with the iSER private data
//! ([`CmPrivateData::RLUN`]) → ESTABLISHED. From then on every iSCSI PDU
//! (login included) is a Send: iSER header + BHS + data.
//!
//! Every rdma-core object is owned by a wrapper of [`rlun_sys::rdma`], so
//! an early error releases what exists, in the right order, by dropping.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rlun_iscsi::iobuf;
use rlun_iscsi::proto::negotiate::InitiatorProposal;
use rlun_iscsi::proto::pdu::FrameLimits;
use rlun_sys::rdma::{
    memlock, queue, watch, CmEvent, CmEventKind, ConnectParams, EventChannel, ProtectionDomain,
    QueueConfig, Rdma, RecvQueue, SendQueue, Watchable,
};
use tokio::io::unix::AsyncFd;
use tracing::debug;

use super::encoder::{IserEncoder, VerbsRegistrar};
use super::error::IserError;
use super::header::CmPrivateData;
use super::params::{
    self, Registration, MAX_DIRECT_TRANSFER, POLL_BATCH, RECV_SLOTS, RECV_SLOT_LEN,
    REGISTRATION_ENV, SEND_SLOTS, SEND_SLOT_LEN, SIGNAL_EVERY,
};
use super::reader::IserReader;
use super::writer::IserWriter;
use crate::transport::{DataMovement, Transport, TransportError};

/// Check that rdma-core loads and at least one RDMA device exists.
pub fn check_devices() -> Result<Rdma, IserError> {
    let rdma = Rdma::load().map_err(|e| IserError::Unavailable {
        library: e.library,
        detail: e.detail,
    })?;
    match rdma.device_count() {
        Err(e) => Err(IserError::NoDevice {
            detail: e.to_string(),
        }),
        Ok(0) => Err(IserError::NoDevice {
            detail: "ibv_get_device_list found 0 devices".into(),
        }),
        Ok(_) => Ok(rdma),
    }
}

/// How this process registers data buffers ([`REGISTRATION_ENV`]).
pub fn registration() -> Result<Registration, IserError> {
    Registration::parse(std::env::var(REGISTRATION_ENV).ok().as_deref())
        .map_err(IserError::BadRegistration)
}

/// Resolve `host:port` to the socket address the RDMA CM connects to.
pub async fn resolve(host: &str, port: u16, timeout: Duration) -> Result<SocketAddr, IserError> {
    let lookup = tokio::time::timeout(timeout, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| IserError::Resolve {
            host: host.to_string(),
            source: io::Error::new(io::ErrorKind::TimedOut, "name resolution timed out"),
        })?
        .map_err(|source| IserError::Resolve {
            host: host.to_string(),
            source,
        })?;
    let addrs: Vec<SocketAddr> = lookup.collect();
    addrs.first().copied().ok_or_else(|| IserError::Resolve {
        host: host.to_string(),
        source: io::Error::new(io::ErrorKind::NotFound, "no address"),
    })
}

/// Raise the soft RLIMIT_MEMLOCK to the hard limit: registered memory is
/// pinned and counts against it. Failure is not fatal here; registration
/// reports what to raise if it then fails.
fn raise_memlock_limit() {
    if let Ok(Some((old, new))) = memlock::raise_to_hard() {
        debug!(%old, %new, "raised RLIMIT_MEMLOCK soft limit to the hard limit");
    }
}

/// Watch an rdma-core channel's fd with tokio (readability only).
fn on_tokio<T: Watchable>(obj: T, op: &'static str) -> Result<AsyncFd<T>, IserError> {
    watch(obj).map_err(|source| IserError::Verbs { op, source })
}

/// The next CM event on `cm`, within `timeout`.
async fn cm_event(
    cm: &AsyncFd<EventChannel>,
    addr: SocketAddr,
    timeout: Duration,
    step: &'static str,
) -> Result<CmEvent, IserError> {
    let wait = async {
        loop {
            if let Some(ev) = cm.get_ref().try_event()? {
                debug!(event = %ev, "RDMA CM event");
                return Ok(ev);
            }
            let mut g = cm.readable().await.map_err(|source| IserError::Verbs {
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

/// A connected iSER queue pair (RFC 7145 §5.1), before it is split into
/// its receive and send halves and its encoder.
pub struct IserTransport {
    cm: AsyncFd<EventChannel>,
    recv: AsyncFd<RecvQueue>,
    send: AsyncFd<SendQueue>,
    reg: VerbsRegistrar,
    addr: SocketAddr,
    /// What the target said in its REP private data (None: it sent none).
    pub peer_private_data: Option<CmPrivateData>,
}

impl IserTransport {
    /// Connect to the iSER portal `addr` through the RDMA CM, each step
    /// bounded by `timeout`.
    pub async fn connect_addr(
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<IserTransport, IserError> {
        let registration = registration()?;
        let rdma = check_devices()?;
        let cm = on_tokio(
            EventChannel::new(&rdma)?,
            "register the CM channel with tokio",
        )?;
        let id = cm.get_ref().create_id()?;

        id.resolve_addr(addr, timeout)
            .map_err(|e| IserError::AddrResolve {
                addr,
                reason: e.io().to_string(),
            })?;
        let ev = cm_event(&cm, addr, timeout, "address resolution").await?;
        if ev.kind != CmEventKind::AddrResolved {
            return Err(IserError::AddrResolve {
                addr,
                reason: ev.to_string(),
            });
        }
        id.resolve_route(timeout)?;
        let ev = cm_event(&cm, addr, timeout, "route resolution").await?;
        if ev.kind != CmEventKind::RouteResolved {
            return Err(IserError::RouteResolve {
                addr,
                reason: ev.to_string(),
            });
        }

        // After address resolution the id is bound to a device.
        let ctx = id.context().ok_or_else(|| IserError::AddrResolve {
            addr,
            reason: "no device bound after resolution".into(),
        })?;
        let pd = ProtectionDomain::new(&ctx)?;
        raise_memlock_limit();
        let (send, mut recv) = queue::create(
            &id,
            &pd,
            &QueueConfig {
                send_slots: SEND_SLOTS,
                send_slot_len: SEND_SLOT_LEN,
                signal_every: SIGNAL_EVERY,
                recv_slots: RECV_SLOTS,
                recv_slot_len: RECV_SLOT_LEN,
            },
        )?;
        // From now on I/O buffers come from the registered pool; the arenas
        // that exist are registered here, off the data path. Unless every
        // buffer is to be registered per command (RLUN_ISER_REGISTRATION).
        let mut reg = VerbsRegistrar::new(&pd, registration);
        if registration == Registration::Pool {
            iobuf::enable();
            reg.register_pool()?;
        } else {
            debug!(%addr, "{REGISTRATION_ENV}=per-command: data buffers registered per command");
        }
        // Receive buffers go up before the connect: LIO may send as soon as
        // the connection is established.
        recv.post_idle(POLL_BATCH)?;
        recv.arm()?;
        send.arm()?;
        let recv = on_tokio(recv, "register a completion channel with tokio")?;
        let send = on_tokio(send, "register a completion channel with tokio")?;

        // Our RDMA Read *responder* resources bound how many reads of write
        // data the target may have outstanding: offer the device maximum
        // (0xff lets librdmacm fill it in).
        let private = CmPrivateData::RLUN.encode();
        id.connect(&ConnectParams {
            private_data: &private,
            responder_resources: 0xff,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        })?;
        let ev = cm_event(&cm, addr, timeout, "connection").await?;
        let peer = match ev.kind {
            CmEventKind::Established => CmPrivateData::decode(&ev.private_data),
            CmEventKind::Rejected => {
                return Err(IserError::Rejected {
                    addr,
                    status: ev.status,
                })
            }
            CmEventKind::Unreachable | CmEventKind::ConnectError => {
                return Err(IserError::Unreachable {
                    addr,
                    reason: ev.to_string(),
                })
            }
            _ => {
                return Err(IserError::Unreachable {
                    addr,
                    reason: format!("unexpected {ev}"),
                })
            }
        };
        debug!(%addr, ?peer, "iSER connection established");
        Ok(IserTransport {
            cm,
            recv,
            send,
            reg,
            addr,
            peer_private_data: peer,
        })
    }
}

impl Transport for IserTransport {
    const DATA_MOVEMENT: DataMovement = DataMovement::Direct;
    const MAX_TRANSFER: Option<u64> = Some(MAX_DIRECT_TRANSFER);
    type Reader = IserReader;
    type Writer = IserWriter;
    type Encoder = IserEncoder;

    fn adjust_proposal(proposal: &mut InitiatorProposal) {
        params::adjust_proposal(proposal)
    }

    async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, TransportError> {
        let addr = resolve(host, port, timeout).await?;
        Ok(IserTransport::connect_addr(addr, timeout).await?)
    }

    /// The receive half also watches the CM events; the encoder keeps the
    /// pool's registrations.
    fn split(self, limits: FrameLimits) -> (IserReader, IserWriter, IserEncoder) {
        let IserTransport {
            cm,
            recv,
            send,
            reg,
            addr,
            ..
        } = self;
        (
            IserReader::new(recv, cm, addr, limits),
            IserWriter::new(send, addr),
            IserEncoder::new(reg),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_iscsi::ErrorKind;

    #[test]
    fn without_an_rdma_device_iser_fails_naming_the_checks() {
        // The test hosts have rdma-core but no RDMA device (the kernel has
        // no RDMA support: ENOSYS, or an empty device list).
        let e = check_devices().unwrap_err();
        assert!(matches!(e, IserError::NoDevice { .. }), "{e}");
        let m = e.to_string();
        assert!(m.starts_with("no RDMA device on this machine ("), "{m}");
        assert!(
            m.contains("Function not implemented") || m.contains("found 0 devices"),
            "{m}"
        );
        assert!(m.contains("`ibv_devices`"), "{m}");
        assert_eq!(e.kind(), ErrorKind::Unreachable);
    }

    #[tokio::test]
    async fn connecting_without_an_rdma_device_is_unreachable_before_any_cm_call() {
        let e = <IserTransport as Transport>::connect("127.0.0.1", 3260, Duration::from_secs(1))
            .await
            .err()
            .expect("no RDMA here");
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        assert!(
            e.to_string().starts_with("no RDMA device on this machine"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_unresolvable_portal_names_the_host() {
        let e = resolve("rlun-no-such-host.invalid", 3260, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "cannot resolve rlun-no-such-host.invalid");
        assert_eq!(e.kind(), ErrorKind::Unreachable);
    }
}
