//! [`ExportError`]: what an export request can fail with, its one errno
//! mapping for front ends and its class for `rlun stats`.

use thiserror::Error;

use super::meter::ErrorClass;
use crate::device::DeviceError;
use rlun_iscsi::scsi::sense::errno;

/// Why an export request failed.
#[derive(Debug, Error)]
pub enum ExportError {
    /// The export is shutting down; nothing more is accepted.
    #[error("{export}: the export is shutting down")]
    ShutDown { export: String },
    /// A write, zeroing or trim of a read-only export (write-protected LUN
    /// or read-only by option).
    #[error("{export} is read-only")]
    ReadOnly { export: String },
    /// A write that starts at or past the end of the export (or, through
    /// [`Export::check_range`], reaches past it).
    #[error("{export}: no space at offset {offset} ({size} bytes)")]
    NoSpace {
        export: String,
        offset: u64,
        size: u64,
    },
    /// A read or trim reaching past the end ([`Export::check_range`]), or a
    /// range whose end overflows.
    #[error("{export}: {len} bytes at offset {offset} reach past the end ({size} bytes)")]
    OutOfRange {
        export: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    /// Cached data of the LUN's size before a capacity change could not be
    /// written (the LUN shrank under it, or the target was unreachable).
    #[error("{export}: cached data could not be written before the LUN's capacity changed")]
    LostInResize { export: String },
    /// The target no longer reports this LUN (REPORT LUNS after a
    /// REPORTED LUNS DATA HAS CHANGED, or a rescan).
    #[error("{export}: the LUN was removed from the target")]
    Gone { export: String },
    /// The device (cache, or the LUN under it) failed.
    #[error("{export}")]
    Device {
        export: String,
        #[source]
        source: DeviceError,
    },
}

impl ExportError {
    /// The Linux errno for this error, the one mapping front ends start
    /// from: `EIO` when shut down, `ENODEV` for a removed LUN, `EROFS`, `ENOSPC`, `EINVAL`, or the
    /// device's own mapping ([`DeviceError::to_errno`]: SCSI sense → errno,
    /// a lost session → `EIO`).
    pub fn to_errno(&self) -> i32 {
        match self {
            ExportError::ShutDown { .. } => errno::EIO,
            ExportError::Gone { .. } => errno::ENODEV,
            ExportError::LostInResize { .. } => errno::EIO,
            ExportError::ReadOnly { .. } => errno::EROFS,
            ExportError::NoSpace { .. } => errno::ENOSPC,
            ExportError::OutOfRange { .. } => errno::EINVAL,
            ExportError::Device { source, .. } => source.to_errno(),
        }
    }

    /// How `rlun stats` and the metrics count this error.
    pub fn class(&self) -> ErrorClass {
        use crate::device::BackendError;
        match self {
            ExportError::ShutDown { .. } => ErrorClass::Other,
            ExportError::Gone { .. } | ExportError::LostInResize { .. } => ErrorClass::Removed,
            ExportError::ReadOnly { .. } => ErrorClass::ReadOnly,
            ExportError::NoSpace { .. } => ErrorClass::NoSpace,
            ExportError::OutOfRange { .. } => ErrorClass::OutOfRange,
            ExportError::Device { source, .. } => match source {
                DeviceError::ReadOnly { .. } => ErrorClass::ReadOnly,
                DeviceError::OutOfRange { .. } => ErrorClass::OutOfRange,
                DeviceError::Io { source, .. } => match &**source {
                    BackendError::Command(f) if f.is_unreachable() => ErrorClass::Unreachable,
                    BackendError::ReadOnly { .. } => ErrorClass::ReadOnly,
                    BackendError::OutOfRange { .. } => ErrorClass::OutOfRange,
                    other => match other.to_errno() {
                        errno::EROFS => ErrorClass::ReadOnly,
                        errno::ENOSPC => ErrorClass::NoSpace,
                        _ => ErrorClass::Target,
                    },
                },
                DeviceError::Config(_) | DeviceError::NoRuntime | DeviceError::Closed { .. } => {
                    ErrorClass::Other
                }
            },
        }
    }

    /// The device error underneath, if any.
    pub fn device(&self) -> Option<&DeviceError> {
        match self {
            ExportError::Device { source, .. } => Some(source),
            _ => None,
        }
    }
}
