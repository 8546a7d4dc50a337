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
//!   before connecting, completions through the completion channel's fd on
//!   tokio.
//!
//! What works in this build: the connection, login as Sends carrying the
//! iSER header, and a discovery session over it (`rlun discover
//! iser://host[:port]`). The command path with direct data placement (reads
//! advertising a Read STag that the target RDMA-Writes, writes advertising a
//! Write STag the target RDMA-Reads) waits for the transport seam in the
//! session driver; until then the other commands refuse `iser://` with a
//! message instead of silently falling back to TCP.
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
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
mod sys;

#[cfg(feature = "rdma")]
pub use conn::{IserConnection, Received};

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;

use crate::proto::login::LoginError;
#[cfg(not(feature = "rdma"))]
use crate::proto::negotiate::DiscoveredTarget;
use crate::proto::pdu::PduError;
use crate::proto::session::{ProtocolError, TaskError};
#[cfg(not(feature = "rdma"))]
use crate::session::SessionConfig;
use header::IserHeaderError;

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
    #[error("login to {portal} over iSER failed")]
    Login {
        portal: String,
        #[source]
        source: LoginError,
    },
    #[error("login to {portal} over iSER timed out after {timeout:?}")]
    LoginTimeout { portal: String, timeout: Duration },
    #[error("login to {portal} over iSER: too many redirections")]
    Redirected { portal: String },
    #[error("target violated the iSCSI protocol")]
    Protocol(#[from] ProtocolError),
    #[error("discovery failed")]
    Task(#[source] TaskError),
    #[error("discovery answer is malformed: {0}")]
    BadDiscovery(String),
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
                | IserError::LoginTimeout { .. }
        )
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
mod discovery;
#[cfg(feature = "rdma")]
pub use discovery::discover;

/// Discovery over iSER (`SendTargets=All` in a discovery session on the
/// iSER portal). Not available without the `rdma` feature.
#[cfg(not(feature = "rdma"))]
pub async fn discover(_cfg: &SessionConfig) -> Result<Vec<DiscoveredTarget>, IserError> {
    Err(IserError::NotBuilt)
}
