//! Transports that carry iSCSI PDUs, under one trait the session driver is
//! generic over.
//!
//! A [`Transport`] is one connection to a portal. It is opened with
//! [`Transport::connect`] and split into a receive half ([`PduReader`]),
//! which the driver task polls itself inside its `select!` (so the
//! receive path has no channel hop), and a send half ([`FrameWriter`]),
//! which runs as its own task ([`FrameWriter::run`]) fed with batches of
//! encoded frames.
//!
//! Transports differ in how SCSI data moves ([`DataMovement`]):
//!
//! - **In-band** ([`tcp`]): Data-In, R2T and Data-Out PDUs carry the data;
//!   the protocol core reassembles reads and answers R2Ts.
//! - **Direct** (iSER, RFC 7145, [`iser`]): the target places read data
//!   into, and fetches write data from, the initiator's memory by RDMA.
//!   The core attaches each SCSI command's buffers to the command's
//!   outgoing PDU ([`Transmit::direct`]) so the transport can register them
//!   and name them in the iSER header (STag and base offset); the core
//!   then expects no Data-In and no R2T for that task, and the SCSI
//!   Response finds the data already in the task's buffer.
//!
//! Frames are encoded by the driver task with the connection's
//! [`FrameEncoder`] (a transport-specific wire form: TCP adds digests and
//! padding, iSER registers a command's buffers and names them in its
//! header) and handed to the writer task in batches, so encoding stays off
//! the writer and the writer can merge batches into one system call (TCP:
//! `writev`) or one chain of work requests (RDMA). What an encoder must
//! keep for as long as a task lives (iSER: the registration of its
//! buffers) it returns as a [`TaskHold`], which the driver gives to the
//! protocol core: the core drops it when the task ends.
//!
//! What differs between transports besides the wire goes through the
//! trait too, so the layers above name no transport: how data moves
//! ([`Transport::DATA_MOVEMENT`]), the most one command may move
//! ([`Transport::MAX_TRANSFER`]) and what the login proposes
//! ([`Transport::adjust_proposal`]). Failures particular to one transport
//! reach the layers above as [`TransportError::Specific`], classified by
//! the transport itself ([`SpecificError::kind`]).
//!
//! Contract for direct transports: the memory named in a
//! [`DirectBuffers`] stays valid until the core completes the task (its
//! SCSI Response, an abort, or `fail_all`) or until the core is dropped.
//! When a connection ends, the driver drops the receive half first, then
//! the core; the send half lives on in the writer task until that task
//! sees its channel close, i.e. possibly after the core is gone. So a
//! direct transport must revoke the target's access to every registration
//! it made (destroy the queue pair, or invalidate the keys) by the time
//! its **receive half**'s `Drop` returns, and its send half must then fail
//! cleanly instead of touching that memory.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rlun_iscsi::ErrorKind;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use rlun_iscsi::proto::negotiate::InitiatorProposal;
use rlun_iscsi::proto::pdu::{DataIn, Digests, FrameLimits, Pdu, PduError};

pub use crate::url::TransportKind;
pub use rlun_iscsi::proto::connection::{
    DataMovement, DirectBuffers, Lent, ReadRegion, TaskHold, Transmit, TransmitKind, WriteRegion,
};

pub mod iser;
pub mod tcp;

/// Errors of a transport: reaching the portal, and the byte or message
/// stream once connected.
#[derive(Debug, Error)]
pub enum TransportError {
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    #[error("cannot connect to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("no answer from {addr} within {timeout:?} (connect timeout)")]
    ConnectTimeout { addr: SocketAddr, timeout: Duration },
    #[error("connection closed by the target")]
    Closed,
    #[error(
        "connection closed by the target in the middle of a PDU ({have} of {need} bytes received)"
    )]
    Truncated { have: usize, need: usize },
    #[error("network I/O failed")]
    Io(#[from] io::Error),
    #[error("target sent a bad PDU")]
    Pdu(#[from] PduError),
    #[error("this rlun was built without the {}:// transport (cargo feature `rdma`); use iscsi://", .0.scheme())]
    Unavailable(TransportKind),
    /// A failure particular to one transport (iSER: the RDMA device,
    /// memory registration…), classified by that transport.
    #[error(transparent)]
    Specific(Specific),
}

/// An error of one transport's own that the layers above pass on without
/// knowing its type: it says what kind of failure it is.
pub trait SpecificError: std::error::Error + Send + Sync + 'static {
    fn kind(&self) -> ErrorKind;
}

/// A transport's own error, boxed ([`TransportError::Specific`]); displays
/// and chains as the error itself.
#[derive(Debug)]
pub struct Specific(pub Box<dyn SpecificError>);

impl std::fmt::Display for Specific {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Specific {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl<E: SpecificError> From<E> for Specific {
    fn from(e: E) -> Self {
        Specific(Box::new(e))
    }
}

impl TransportError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TransportError::Pdu(_) | TransportError::Truncated { .. } => ErrorKind::Protocol,
            TransportError::Resolve { .. }
            | TransportError::NoAddress { .. }
            | TransportError::Connect { .. }
            | TransportError::ConnectTimeout { .. }
            | TransportError::Closed
            | TransportError::Unavailable(_)
            | TransportError::Io(_) => ErrorKind::Unreachable,
            TransportError::Specific(e) => e.0.kind(),
        }
    }
}

/// One connection to a portal that carries iSCSI PDUs.
pub trait Transport: Sized + Send + 'static {
    /// How SCSI data moves on this transport; the session core runs in
    /// this mode ([`rlun_iscsi::proto::connection::FeatureParams::data_movement`]).
    const DATA_MOVEMENT: DataMovement;
    /// The most data one SCSI command may move on this transport, in
    /// bytes (`None`: no limit of its own; the LUN's limits still apply).
    const MAX_TRANSFER: Option<u64> = None;

    type Reader: PduReader;
    type Writer: FrameWriter;
    type Encoder: FrameEncoder<Frame = <Self::Writer as FrameWriter>::Frame>;

    /// Change what the login proposes to what this transport can carry
    /// (iSER: no digests, data segments that fit its receive buffers).
    /// RDMAExtensions follows from [`Transport::DATA_MOVEMENT`].
    fn adjust_proposal(_proposal: &mut InitiatorProposal) {}

    /// Resolve `host` and connect to `port`, each attempt bounded by
    /// `timeout`.
    fn connect(
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self, TransportError>> + Send;

    /// The receive and send halves and the encoder for the send half's
    /// frames; `limits` frame what is received until
    /// [`PduReader::set_limits`] changes them (after login).
    fn split(self, limits: FrameLimits) -> (Self::Reader, Self::Writer, Self::Encoder);
}

/// A PDU in a transport's wire form, with what must live as long as its
/// task.
pub struct Encoded<F> {
    pub frame: F,
    /// For the core to keep with the PDU's task ([`TaskHold`]); only a
    /// direct transport's SCSI Commands have one.
    pub hold: Option<TaskHold>,
}

/// Turns the PDUs the core wants sent into one connection's frames; runs
/// on the driver task, so the writer task only writes.
pub trait FrameEncoder: Send + 'static {
    /// A PDU in this transport's wire form.
    type Frame: Send + 'static;

    /// The digests negotiated at login, for every frame from now on
    /// (always none on iSER).
    fn set_digests(&mut self, digests: Digests);

    /// Encode one PDU. A direct transport makes its command's buffers
    /// reachable by the target here (iSER: registers what is outside its
    /// registered pool) and returns what keeps them so as the hold.
    fn encode(&mut self, tx: Transmit) -> Result<Encoded<Self::Frame>, TransportError>;
}

/// Where the payload of a Data-In goes when the receive path can read it
/// straight into the command's read buffer (TCP). The session driver
/// implements it over the protocol core
/// ([`rlun_iscsi::proto::connection::Connection::lend_read_buffer`]); a transport
/// that never sees Data-In payloads (iSER: the target writes the data by
/// RDMA) ignores it.
pub trait Placement {
    /// The read buffer for this Data-In header's `len`-byte payload, or
    /// `None`: then the payload is read into the PDU as usual and the core
    /// decides what is wrong with it.
    fn lend(&mut self, header: &DataIn, len: u32) -> Option<Lent>;
}

/// A [`Placement`] that places nothing (login, tests).
pub struct NoPlacement;

impl Placement for NoPlacement {
    fn lend(&mut self, _: &DataIn, _: u32) -> Option<Lent> {
        None
    }
}

/// What the receive half delivers: a whole PDU, or a Data-In header whose
/// payload already sits in the buffer [`Placement::lend`] gave (the PDU's
/// data segment is then empty; hand both to
/// [`rlun_iscsi::proto::connection::Connection::handle_placed`]).
#[derive(Debug)]
pub struct Received {
    pub pdu: Pdu,
    pub placed: Option<Lent>,
}

impl From<Pdu> for Received {
    fn from(pdu: Pdu) -> Self {
        Received { pdu, placed: None }
    }
}

/// The receive half: yields whole PDUs.
pub trait PduReader: Send + 'static {
    /// Limits (digests, largest data segment) for what is received from
    /// now on; set when login has negotiated them.
    fn set_limits(&mut self, limits: FrameLimits);

    /// The next complete PDU. `Err(TransportError::Closed)` on a clean end
    /// between PDUs. A Data-In payload goes where `place` says, if it says.
    ///
    /// Must be cancel-safe: the driver polls it in a `select!` with its
    /// request channel and timers, and drops the future whenever another
    /// branch wins. No received byte may be lost when that happens (a
    /// buffer lent for a payload stays with the reader until it returns it).
    fn read_pdu(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> impl Future<Output = Result<Received, TransportError>> + Send;

    /// A PDU that has already arrived, without waiting; the driver drains
    /// these before it re-enters its `select!`.
    fn try_next(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Option<Received>, TransportError>;

    /// The bytes of the header that was being received when a read failed:
    /// for the first answer of a connection, what answered (an HTTP or SSH
    /// server's greeting names it). Empty when the transport cannot say.
    fn received_head(&self) -> &[u8] {
        &[]
    }
}

/// The send half: writes encoded frames in order.
pub trait FrameWriter: Send + Sized + 'static {
    /// A PDU in this transport's wire form ([`FrameEncoder::Frame`]).
    type Frame: Send + 'static;

    /// Write `frames` in order and return once the transport has taken
    /// them all (TCP: as few `writev` calls as the socket allows).
    fn write_frames(
        &mut self,
        frames: &[Self::Frame],
    ) -> impl Future<Output = io::Result<()>> + Send;

    /// Close our sending side so the target sees the end of the connection.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send;

    /// The writer task of one connection: write the batches that arrive on
    /// `rx`, merging what is already queued into one write, until the
    /// driver drops the sender (then shut down) or a write fails (then
    /// report it on `err` and stop).
    ///
    /// A separate task means a target that is busy sending us data can
    /// never deadlock against us while we push Data-Out. A transport may
    /// override this when it has its own completion machinery.
    fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Vec<Self::Frame>>,
        err: oneshot::Sender<io::Error>,
    ) -> impl Future<Output = ()> + Send {
        async move {
            while let Some(mut batch) = rx.recv().await {
                // The first batch is written from the driver's own vector,
                // so its frames are not moved again; later ones join it.
                while batch.len() < 4096 {
                    match rx.try_recv() {
                        Ok(more) => batch.extend(more),
                        Err(_) => break,
                    }
                }
                if let Err(e) = self.write_frames(&batch).await {
                    let _ = err.send(e);
                    return;
                }
            }
            // The driver dropped this connection: close our side so the
            // target sees the end.
            self.shutdown().await;
        }
    }
}
