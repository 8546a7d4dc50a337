//! The error of the RDMA wrappers: which call failed and the errno it left.

use std::fmt;
use std::io;

/// A failed rdma-core call.
#[derive(Debug)]
pub enum RdmaError {
    /// A verbs or CM call; `op` says what it was for ("create a
    /// completion queue", "post a send"…).
    Call { op: &'static str, source: io::Error },
    /// `ibv_reg_mr` of `len` bytes. Registered memory is pinned and counts
    /// against `RLIMIT_MEMLOCK` ([`super::memlock`]), the usual reason this
    /// fails (`ENOMEM`, `EPERM`, `EAGAIN`).
    Register { len: usize, source: io::Error },
}

impl RdmaError {
    /// `op` failed with the calling thread's errno.
    pub(crate) fn last(op: &'static str) -> RdmaError {
        RdmaError::Call {
            op,
            source: io::Error::last_os_error(),
        }
    }

    /// `op` failed with `rc`, an errno value returned (not set) by the call,
    /// as the inline verbs do.
    pub(crate) fn returned(op: &'static str, rc: i32) -> RdmaError {
        RdmaError::Call {
            op,
            source: io::Error::from_raw_os_error(rc),
        }
    }

    /// The operating system's error.
    pub fn io(&self) -> &io::Error {
        match self {
            RdmaError::Call { source, .. } | RdmaError::Register { source, .. } => source,
        }
    }
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaError::Call { op, .. } => write!(f, "cannot {op}"),
            RdmaError::Register { len, .. } => {
                write!(
                    f,
                    "cannot register {len} bytes of memory with the RDMA device"
                )
            }
        }
    }
}

impl std::error::Error for RdmaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.io())
    }
}
