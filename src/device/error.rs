//! [`DeviceError`]: what a `LunDevice` request can fail with, each with its
//! operation ([`Op`]) and byte range, and the one errno mapping for front
//! ends.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use super::backend::BackendError;
use rlun_iscsi::scsi::sense::errno;

/// The operation a [`DeviceError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::WriteZeroes => "write zeroes",
        })
    }
}

/// Errors of `LunDevice`, each with the operation and byte range.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("{op} of {len} bytes at offset {offset}: the LUN is read-only")]
    ReadOnly { op: Op, offset: u64, len: u64 },
    #[error("{op} of {len} bytes at offset {offset} is outside the device ({size} bytes)")]
    OutOfRange {
        op: Op,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{op} of {len} bytes at offset {offset} failed")]
    Io {
        op: Op,
        offset: u64,
        len: u64,
        #[source]
        source: Arc<BackendError>,
    },
    #[error("invalid device configuration: {0}")]
    Config(String),
    #[error("LunDevice must be created inside a Tokio runtime (it runs background tasks)")]
    NoRuntime,
    #[error("{op}: the device is shut down")]
    Closed { op: Op },
}

impl DeviceError {
    /// The Linux errno for this error: `EROFS` for read-only, `EINVAL` for
    /// out of range or bad settings, the SCSI error's own mapping
    /// ([`rlun_iscsi::scsi::ScsiError::to_errno`], e.g. `ENOSPC` for a full thin
    /// pool), `EIO` for a lost connection or anything else.
    pub fn to_errno(&self) -> i32 {
        match self {
            DeviceError::ReadOnly { .. } => errno::EROFS,
            DeviceError::OutOfRange { .. } | DeviceError::Config(_) => errno::EINVAL,
            DeviceError::Io { source, .. } => source.to_errno(),
            DeviceError::NoRuntime | DeviceError::Closed { .. } => errno::EIO,
        }
    }
}
