//! iSCSI Extensions for RDMA (iSER, RFC 7145): the transport behind
//! `iser://` URLs.
//!
//! - [`header`]: the iSER header, Hello / Hello Reply and the RDMA CM private
//!   data, as a pure codec (host-tested).
//! - `sys` (feature `rdma`): a thin binding to rdma-core's `libibverbs` and
//!   `librdmacm`, loaded with `dlopen` at first use, so a machine without
//!   rdma-core still runs rlun over TCP and `iser://` says what is missing.
//! - `conn` (feature `rdma`): one connection — RDMA CM setup with the iSER
//!   private data, an RC queue pair, registered send/receive buffers posted
//!   before connecting, completions through the completion channels' fds on
//!   tokio (one CQ for the receive half, one for the send half). The
//!   frames of one write go out as one chain of work requests in one post,
//!   only some of them signalled ([`slots`]); received buffers go back to
//!   the device once per poll batch, as one chain; a waiting half reads one
//!   completion event per wake-up. On soft-RoCE every post and every re-arm
//!   is a system call, so these are what the per-I/O CPU cost is made of.
//! - [`slots`]: send-slot accounting with selective signalling (host-tested).
//!
//! [`IserTransport`] implements the session driver's
//! [`Transport`](crate::transport::Transport) trait with
//! [`DataMovement::Direct`](crate::transport::DataMovement): login, text,
//! NOP, task management and logout PDUs are Sends with a plain iSER header;
//! a SCSI command's buffers are registered when it is posted and named in its
//! header (Read STag/VA: the target RDMA-Writes read data there; Write
//! STag/VA: it RDMA-Reads write data from the first byte not sent as
//! immediate data), and released when its SCSI Response arrives (the RC
//! queue pair delivers the response after the target's RDMA operations).
//! When the receive half goes, the queue pair is moved to the error state at
//! once, so no buffer the core frees afterwards is reachable by the target.
//!
//! Zero copy: buffers from the registered pool ([`rlun_iscsi::iobuf`]) are
//! named under their arena's key, which each connection registers once, so
//! the data path makes no registration; immediate data goes out as a
//! second scatter/gather entry straight from the caller's buffer. Other
//! memory is registered per command and released at the SCSI Response or
//! when task management ends the task ([`ledger`]). Copies that remain are
//! counted in [`crate::stats`] (`copied_bytes`). Not yet: Send with
//! Invalidate.
//!
//! Discovery over iSER: the same SendTargets text exchange as over TCP, in a
//! discovery session on the iSER portal (LIO treats the iSER keys as
//! irrelevant there). Discovery over TCP on the plain portal works as well,
//! as with other initiators.
//!
//! All `unsafe` code of rlun's RDMA support is in `sys` and `conn`, each
//! block with a `// SAFETY:` comment.

#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
mod conn;
pub mod header;
pub mod ledger;
pub mod slots;

#[cfg(feature = "rdma")]
pub use conn::{IserFrame, IserReader, IserTransport, IserWriter};

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;

use header::IserHeaderError;
use rlun_iscsi::proto::digest::DigestType;
use rlun_iscsi::proto::negotiate::InitiatorProposal;
use rlun_iscsi::proto::pdu::PduError;

/// The checks to name when RDMA is not usable.
const CHECKS: &str = "check `rdma link` (an RDMA link, e.g. soft-RoCE `rdma link add rxe0 type rxe netdev eth0`) and `ibv_devices`";

/// Errors of the iSER transport. Each message names its step and, where the
/// fix is on this machine, what to check.
#[derive(Debug, Error)]
pub enum IserError {
    #[error("this rlun was built without RDMA support (cargo feature `rdma`); iser:// is unavailable, use iscsi://")]
    NotBuilt,
    #[error("iser:// needs rdma-core's {library}, which cannot be loaded ({detail}); install rdma-core (Debian: libibverbs1 librdmacm1 ibverbs-providers), then {CHECKS}")]
    Unavailable {
        library: &'static str,
        detail: String,
    },
    #[error("no RDMA device on this machine ({detail}); iser:// needs an RDMA NIC or soft-RoCE: {CHECKS}")]
    NoDevice { detail: String },
    #[error("no RDMA device reaches {addr} ({reason}): {CHECKS}; the portal's address must route through an RDMA-capable interface")]
    AddrResolve { addr: SocketAddr, reason: String },
    #[error("no RDMA route to {addr} ({reason})")]
    RouteResolve { addr: SocketAddr, reason: String },
    #[error("{addr} rejected the RDMA connection (reject status {status}): no iSER portal listens there, or the target refused it")]
    Rejected { addr: SocketAddr, status: i32 },
    #[error("{addr} is unreachable over RDMA ({reason})")]
    Unreachable { addr: SocketAddr, reason: String },
    #[error("no answer from {addr} within {timeout:?} during {step}")]
    Timeout {
        addr: SocketAddr,
        step: &'static str,
        timeout: Duration,
    },
    #[error("RDMA connection to {addr} lost: {event}")]
    Disconnected { addr: SocketAddr, event: String },
    #[error("RDMA operation on the connection to {addr} failed: {status}{}", if *flushed { " (flushed after the connection failed)" } else { "" })]
    Completion {
        addr: SocketAddr,
        status: String,
        flushed: bool,
    },
    #[error("cannot register {bytes} bytes of memory with the RDMA device (RLIMIT_MEMLOCK soft limit: {limit}); registered memory is pinned: raise the limit (`ulimit -l unlimited`, or LimitMEMLOCK=infinity in the systemd unit)")]
    Memlock {
        bytes: usize,
        limit: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot {op}")]
    Verbs {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("PDU of {len} bytes does not fit a {max}-byte send buffer")]
    SendTooLong { len: usize, max: usize },
    #[error("target sent a truncated PDU ({len} bytes)")]
    ShortPdu { len: usize },
    #[error("target sent a bad iSER message")]
    Header(#[from] IserHeaderError),
    #[error("target sent a bad PDU")]
    Pdu(#[from] PduError),
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
}

impl IserError {
    /// The machine has no usable RDMA (library, device or route): the
    /// portal cannot be reached from here.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            IserError::Unavailable { .. }
                | IserError::NoDevice { .. }
                | IserError::AddrResolve { .. }
                | IserError::RouteResolve { .. }
                | IserError::Rejected { .. }
                | IserError::Unreachable { .. }
                | IserError::Timeout { .. }
                | IserError::Disconnected { .. }
                | IserError::Completion { .. }
                | IserError::Resolve { .. }
        )
    }
}

impl IserError {
    /// How this failure is classified (exit codes, errno).
    pub fn kind(&self) -> rlun_iscsi::ErrorKind {
        use rlun_iscsi::ErrorKind;
        match self {
            e if e.is_unreachable() => ErrorKind::Unreachable,
            IserError::Header(_) | IserError::Pdu(_) | IserError::ShortPdu { .. } => {
                ErrorKind::Protocol
            }
            _ => ErrorKind::Failure,
        }
    }
}

/// Fail at once, with the checks to run, when this machine cannot do iSER
/// (rdma-core missing, no RDMA device, or RDMA support not built).
pub fn check_available() -> Result<(), IserError> {
    #[cfg(feature = "rdma")]
    {
        conn::check_devices().map(|_| ())
    }
    #[cfg(not(feature = "rdma"))]
    {
        Err(IserError::NotBuilt)
    }
}

/// What rlun proposes at login over iSER, from the TCP proposal (the driver
/// adds RDMAExtensions=Yes itself for a direct transport): no digests (RFC
/// 7145 §7.2; discovery sessions still send the digest keys), and every PDU
/// the target sends must fit one receive buffer: InitiatorRecvDataSegmentLength
/// (normal sessions) and MaxRecvDataSegmentLength (discovery) at most
/// [`MAX_RECV_DATA`]. Immediate data stays on: TargetRecvDataSegmentLength
/// (default 8192, what LIO receives into) bounds it.
pub fn adjust_proposal(p: &mut InitiatorProposal) {
    p.header_digest = vec![DigestType::None];
    p.data_digest = vec![DigestType::None];
    p.max_recv_data_segment_length = p.max_recv_data_segment_length.min(MAX_RECV_DATA);
    p.initiator_recv_data_segment_length = p.initiator_recv_data_segment_length.min(MAX_RECV_DATA);
}

/// The most data one SCSI command moves over iSER (512 KiB): tgtd's iSER
/// transport refuses a larger RDMA transfer for one task ("rdma-wr size …
/// too big") and closes the connection, and the Linux iSER initiator sends
/// no larger commands by default either. Targets do not announce this limit
/// (it is not MaxBurstLength), so rlun keeps to it for every iSER target.
pub const MAX_DIRECT_TRANSFER: u64 = 512 * 1024;

/// The largest data segment the target may send us in one PDU: what one
/// receive buffer holds after the iSER header, BHS and AHS.
pub const MAX_RECV_DATA: u32 = 8192;

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

#[cfg(feature = "rdma")]
mod transport_impl {
    //! [`IserTransport`] behind the session driver's [`Transport`] trait.
    use std::io;
    use std::time::Duration;

    use super::conn::{IserFrame, IserReader, IserTransport, IserWriter};
    use super::{resolve, IserError};
    use crate::transport::{
        DataMovement, Encoded, FrameEncoder, FrameWriter, PduReader, Placement, Received,
        SpecificError, Transmit, Transport, TransportError,
    };
    use rlun_iscsi::proto::negotiate::InitiatorProposal;
    use rlun_iscsi::proto::pdu::{Digests, FrameLimits};
    use rlun_iscsi::ErrorKind;

    impl SpecificError for IserError {
        fn kind(&self) -> ErrorKind {
            IserError::kind(self)
        }
    }

    impl From<IserError> for TransportError {
        fn from(e: IserError) -> Self {
            match e {
                IserError::Disconnected { .. } => TransportError::Closed,
                IserError::Pdu(p) => TransportError::Pdu(p),
                other => TransportError::Specific(other.into()),
            }
        }
    }

    impl Transport for IserTransport {
        const DATA_MOVEMENT: DataMovement = DataMovement::Direct;
        const MAX_TRANSFER: Option<u64> = Some(super::MAX_DIRECT_TRANSFER);
        type Reader = IserReader;
        type Writer = IserWriter;
        type Encoder = IserEncoder;

        fn adjust_proposal(proposal: &mut InitiatorProposal) {
            super::adjust_proposal(proposal)
        }

        async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, TransportError> {
            let addr = resolve(host, port, timeout).await?;
            Ok(IserTransport::connect_addr(addr, timeout).await?)
        }

        fn split(self, limits: FrameLimits) -> (IserReader, IserWriter, IserEncoder) {
            let (r, w) = self.into_halves(limits);
            (r, w, IserEncoder)
        }
    }

    impl PduReader for IserReader {
        fn set_limits(&mut self, limits: FrameLimits) {
            IserReader::set_limits(self, limits)
        }

        // The target writes read data by RDMA: no Data-In payload to place.
        async fn read_pdu(
            &mut self,
            _place: &mut (dyn Placement + Send),
        ) -> Result<Received, TransportError> {
            Ok(IserReader::read_pdu(self).await?.into())
        }

        fn try_next(
            &mut self,
            _place: &mut (dyn Placement + Send),
        ) -> Result<Option<Received>, TransportError> {
            Ok(IserReader::try_next(self)?.map(Received::from))
        }
    }

    /// Frames for the send half. No digests on iSER (RFC 7145 §7.2).
    pub struct IserEncoder;

    impl FrameEncoder for IserEncoder {
        type Frame = IserFrame;

        fn set_digests(&mut self, _digests: Digests) {}

        fn encode(&mut self, tx: Transmit) -> Result<Encoded<IserFrame>, TransportError> {
            // The header is added when the frame is posted, after its
            // buffers are registered.
            Ok(Encoded {
                frame: IserFrame::new(tx),
                hold: None,
            })
        }
    }

    impl FrameWriter for IserWriter {
        type Frame = IserFrame;

        async fn write_frames(&mut self, frames: &[IserFrame]) -> io::Result<()> {
            IserWriter::write_frames(self, frames)
                .await
                .map_err(io::Error::other)
        }

        async fn shutdown(&mut self) {
            IserWriter::shutdown(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iser_proposal_drops_digests_and_fits_receive_buffers() {
        let mut p = InitiatorProposal::default();
        assert!(p.max_recv_data_segment_length > MAX_RECV_DATA);
        assert!(p.initiator_recv_data_segment_length > MAX_RECV_DATA);

        adjust_proposal(&mut p);

        assert_eq!(p.header_digest, vec![DigestType::None]);
        assert_eq!(p.data_digest, vec![DigestType::None]);
        assert_eq!(p.max_recv_data_segment_length, MAX_RECV_DATA);
        assert_eq!(p.initiator_recv_data_segment_length, MAX_RECV_DATA);
        assert!(
            p.immediate_data,
            "immediate data stays, bounded by TargetRecvDataSegmentLength"
        );
    }

    #[test]
    fn unavailable_rdma_messages_name_the_checks() {
        for e in [
            IserError::NoDevice { detail: "x".into() },
            IserError::Unavailable {
                library: "libibverbs.so.1",
                detail: "x".into(),
            },
        ] {
            let m = e.to_string();
            assert!(
                m.contains("`rdma link`") && m.contains("`ibv_devices`"),
                "{m}"
            );
            assert!(e.is_unreachable());
        }
    }
}
