//! The errors of the iSER transport, classified beside their type
//! ([`IserError::kind`]), and how the errors of the RDMA wrappers
//! ([`rlun_sys::rdma::RdmaError`]) become them: a failed memory
//! registration says which limit to raise.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rlun_iscsi::proto::pdu::PduError;
use rlun_iscsi::ErrorKind;
use rlun_sys::rdma::memlock::{self, Limits};
use rlun_sys::rdma::RdmaError;
use thiserror::Error;

use super::header::IserHeaderError;
use crate::transport::{SpecificError, TransportError};

/// The checks to name when RDMA is not usable.
const CHECKS: &str = "check `rdma link` (an RDMA link, e.g. soft-RoCE `rdma link add rxe0 type rxe netdev eth0`) and `ibv_devices`";

/// Errors of the iSER transport. Each message names its step and, where the
/// fix is on this machine, what to check.
#[derive(Debug, Error)]
pub enum IserError {
    #[error("RLUN_ISER_REGISTRATION={0}: expected `pool` or `per-command`")]
    BadRegistration(String),
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

    /// How this failure is classified (exit codes, errno).
    pub fn kind(&self) -> ErrorKind {
        match self {
            IserError::BadRegistration(_) => ErrorKind::Usage,
            e if e.is_unreachable() => ErrorKind::Unreachable,
            IserError::Header(_) | IserError::Pdu(_) | IserError::ShortPdu { .. } => {
                ErrorKind::Protocol
            }
            _ => ErrorKind::Failure,
        }
    }

    /// A work completion that failed on the connection to `addr`.
    pub fn completion(addr: SocketAddr, status: &str, flushed: bool) -> IserError {
        IserError::Completion {
            addr,
            status: status.to_string(),
            flushed,
        }
    }
}

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

impl From<RdmaError> for IserError {
    fn from(e: RdmaError) -> Self {
        match e {
            RdmaError::Call { op, source } => IserError::Verbs { op, source },
            RdmaError::Register { len, source } => {
                registration_error(len, source, memlock::limits().ok())
            }
        }
    }
}

/// A registration of `len` bytes failed with `err`: when it is the
/// pinned-memory limit (ENOMEM, EPERM, EAGAIN), say which limit to raise
/// and what it is (`limits`), rather than only an errno.
fn registration_error(len: usize, err: io::Error, limits: Option<Limits>) -> IserError {
    match err.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => IserError::Memlock {
            bytes: len,
            limit: limits.map_or_else(|| "unknown".into(), |l| l.soft.to_string()),
            source: err,
        },
        _ => IserError::Verbs {
            op: "register memory (ibv_reg_mr)",
            source: err,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_sys::rdma::memlock::Limit;

    fn addr() -> SocketAddr {
        "10.99.0.1:3261".parse().unwrap()
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

    #[test]
    fn a_registration_refused_for_pinned_memory_names_the_limit_to_raise() {
        let limits = Limits {
            soft: Limit::Bytes(8 << 20),
            hard: Limit::Unlimited,
        };
        for errno in [libc::ENOMEM, libc::EPERM, libc::EAGAIN] {
            let e = registration_error(4 << 20, io::Error::from_raw_os_error(errno), Some(limits));
            let m = e.to_string();
            assert!(matches!(e, IserError::Memlock { .. }), "{m}");
            assert!(m.contains("4194304 bytes"), "{m}");
            assert!(
                m.contains("RLIMIT_MEMLOCK soft limit: 8388608 bytes"),
                "{m}"
            );
            assert!(m.contains("ulimit -l unlimited"), "{m}");
            assert_eq!(e.kind(), ErrorKind::Failure);
        }
        let e = registration_error(4096, io::Error::from_raw_os_error(libc::ENOMEM), None);
        assert!(e.to_string().contains("soft limit: unknown"), "{e}");
    }

    #[test]
    fn other_registration_failures_are_verbs_errors_with_their_cause() {
        let e = IserError::from(RdmaError::Register {
            len: 4096,
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
        assert_eq!(e.to_string(), "cannot register memory (ibv_reg_mr)");
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert!(cause.contains("Invalid argument"), "{cause}");
        let e = IserError::from(RdmaError::Call {
            op: "post a send",
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        });
        assert!(
            matches!(
                e,
                IserError::Verbs {
                    op: "post a send",
                    ..
                }
            ),
            "a post is no registration"
        );
    }

    #[test]
    fn errors_are_classified_unreachable_protocol_or_failure() {
        let unreachable = [
            IserError::Timeout {
                addr: addr(),
                step: "connection",
                timeout: Duration::from_secs(5),
            },
            IserError::Rejected {
                addr: addr(),
                status: 28,
            },
            IserError::completion(addr(), "remote access error", false),
        ];
        for e in unreachable {
            assert_eq!(e.kind(), ErrorKind::Unreachable, "{e}");
        }
        let protocol = [
            IserError::ShortPdu { len: 30 },
            IserError::Header(IserHeaderError::UnexpectedHello),
        ];
        for e in protocol {
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        }
        let failure = [
            IserError::NotBuilt,
            IserError::SendTooLong {
                len: 20000,
                max: 16384,
            },
        ];
        for e in failure {
            assert_eq!(e.kind(), ErrorKind::Failure, "{e}");
        }
    }

    #[test]
    fn a_lost_connection_is_closed_to_the_driver_and_others_stay_specific() {
        let lost = IserError::Disconnected {
            addr: addr(),
            event: "RDMA_CM_EVENT_DISCONNECTED (status 0)".into(),
        };
        assert!(matches!(TransportError::from(lost), TransportError::Closed));
        let flushed = IserError::completion(addr(), "Work Request Flushed Error", true);
        let m = flushed.to_string();
        assert!(m.ends_with("(flushed after the connection failed)"), "{m}");
        let t = TransportError::from(flushed);
        assert!(matches!(t, TransportError::Specific(_)));
        assert_eq!(t.kind(), ErrorKind::Unreachable);
        assert_eq!(t.to_string(), m, "shown as the iSER error itself");
    }
}
