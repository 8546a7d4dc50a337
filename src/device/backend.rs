//! [`BlockBackend`]: what `LunDevice` needs from a block device, and
//! [`BackendError`], how a backend says a command failed; [`LunBackend`]:
//! what a front end's export (the export layer) needs beyond that.
//!
//! The device layer knows no particular backend: `MemBackend` (the
//! in-memory backend of the tests) implements these traits here in
//! `device`, and the client's remote `Lun` in the `remote` module, the
//! layer above both. A backend's own failures reach the device as a
//! [`CommandFailure`], which carries the classification the device and
//! the front ends need (errno, "command not supported") with the
//! backend's error as its message and cause.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::task::{Context, Poll};

use bytes::Bytes;
use thiserror::Error;

use rlun_iscsi::scsi::lba_status::LbaStatus;
use rlun_iscsi::scsi::sense::errno;

/// Why a backend command failed.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The device under the backend failed the command (for a remote LUN:
    /// the target refused it, or the session under it failed).
    #[error(transparent)]
    Command(CommandFailure),
    /// A READ returned fewer (or more) bytes than the blocks it asked for.
    #[error("{op}: target returned {got} bytes, expected {expected}")]
    ShortTransfer {
        op: &'static str,
        got: usize,
        expected: usize,
    },
    /// A failure injected by a test backend.
    #[error("{op} failed (injected fault, errno {errno})")]
    Injected { op: &'static str, errno: i32 },
    /// A command addressed blocks past the end of the backend.
    #[error("{op} at block {lba} for {blocks} blocks is past the end ({capacity} blocks)")]
    OutOfRange {
        op: &'static str,
        lba: u64,
        blocks: u64,
        capacity: u64,
    },
    /// A write to a read-only backend.
    #[error("{op}: the device is read-only")]
    ReadOnly { op: &'static str },
}

impl BackendError {
    /// The Linux errno a front end should report: a backend's failure as
    /// the backend classified it (for a remote LUN: SCSI errors through
    /// [`ScsiError::to_errno`](rlun_iscsi::scsi::ScsiError::to_errno), a
    /// lost connection or session as `EIO`), a short transfer as `EIO`.
    pub fn to_errno(&self) -> i32 {
        match self {
            BackendError::Command(f) => f.errno(),
            BackendError::ShortTransfer { .. } => errno::EIO,
            BackendError::Injected { errno, .. } => *errno,
            BackendError::OutOfRange { .. } => errno::EINVAL,
            BackendError::ReadOnly { .. } => errno::EROFS,
        }
    }

    /// The target does not implement the command (ILLEGAL REQUEST, invalid
    /// operation code or invalid field in CDB): the caller may fall back.
    pub fn is_unsupported(&self) -> bool {
        match self {
            BackendError::Command(f) => f.is_unsupported(),
            _ => false,
        }
    }
}

/// A command a backend's device failed, as the backend classified it: the
/// errno a front end reports and whether the device lacks the command. Its
/// message and cause chain are the backend error's own (it displays as
/// that error and has that error's cause as its source).
#[derive(Debug)]
pub struct CommandFailure {
    errno: i32,
    unsupported: bool,
    unreachable: bool,
    error: Box<dyn StdError + Send + Sync>,
}

impl CommandFailure {
    /// `error`, reported to front ends as `errno`; `unsupported` when the
    /// device does not implement the command (for SCSI: ILLEGAL REQUEST,
    /// invalid operation code or invalid field in CDB), so the caller may
    /// fall back to another one.
    pub fn new(
        error: impl Into<Box<dyn StdError + Send + Sync>>,
        errno: i32,
        unsupported: bool,
    ) -> CommandFailure {
        CommandFailure {
            errno,
            unsupported,
            unreachable: false,
            error: error.into(),
        }
    }

    /// Mark the failure as the device being out of reach (for a remote
    /// LUN: the session lost and not back in time), not the device
    /// refusing the command; `rlun stats` counts the two apart.
    pub fn unreachable(mut self, unreachable: bool) -> CommandFailure {
        self.unreachable = unreachable;
        self
    }

    /// The device was out of reach ([`CommandFailure::unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        self.unreachable
    }

    /// The Linux errno for this failure.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// The device does not implement the command.
    pub fn is_unsupported(&self) -> bool {
        self.unsupported
    }

    /// The backend's own error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }
}

impl fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl StdError for CommandFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.error.source()
    }
}

/// A block device that `LunDevice` can cache.
///
/// Addresses are logical blocks of [`block_size`](Self::block_size) bytes;
/// data lengths are whole blocks. Implementations must allow many commands in
/// flight at once (the device issues them concurrently).
pub trait BlockBackend: Send + Sync + 'static {
    /// Logical block size in bytes (a power of two).
    fn block_size(&self) -> u32;
    /// Number of logical blocks.
    fn blocks(&self) -> u64;
    /// Writes are refused (the LUN is write protected).
    fn read_only(&self) -> bool;
    /// Largest READ/WRITE transfer in bytes (a multiple of the block size).
    fn max_transfer_bytes(&self) -> u64;
    /// OPTIMAL TRANSFER LENGTH GRANULARITY in bytes, 0 when not reported.
    fn optimal_granularity_bytes(&self) -> u64 {
        0
    }
    /// OPTIMAL TRANSFER LENGTH in bytes, 0 when not reported.
    fn optimal_transfer_bytes(&self) -> u64 {
        0
    }
    /// Read `blocks` blocks at `lba`: exactly `blocks * block_size` bytes.
    fn read_blocks(
        &self,
        lba: u64,
        blocks: u32,
    ) -> impl Future<Output = Result<Bytes, BackendError>> + Send;
    /// A read [`start_read`](Self::start_read) started, polled with
    /// [`poll_read`](Self::poll_read). Dropping it abandons the read (its
    /// data is discarded).
    type StartedRead: Send + Unpin + 'static;
    /// Start reading `blocks` blocks at `lba` without waiting: a remote
    /// backend sends its command here, so that what waits for it holds
    /// only the answer's channel, not a future of every layer above.
    fn start_read(&self, lba: u64, blocks: u32) -> Self::StartedRead;
    /// The answer to a read [`start_read`](Self::start_read) started:
    /// `Some` with what [`read_blocks`](Self::read_blocks) would have
    /// returned, or `None` when the caller must run the read with
    /// `read_blocks` (it was not sent, or its answer asks for it to be
    /// run again; a backend with nothing to send, like memory, always
    /// says `None`). Not polled again after `Ready`.
    fn poll_read(
        &self,
        started: &mut Self::StartedRead,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BackendError>>>;
    /// Write whole blocks at `lba`; `fua` asks for durable media before
    /// completion (SBC-4 §5.40 FUA bit).
    fn write_blocks(
        &self,
        lba: u64,
        data: Bytes,
        fua: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Make completed writes durable (SYNCHRONIZE CACHE, SBC-4 §5.26).
    fn flush(&self) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Deallocate blocks (UNMAP, SBC-4 §5.30); their contents afterwards are
    /// what the target says (zeros on an LBPRZ target).
    fn unmap(&self, lba: u64, blocks: u64)
        -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Set blocks to zeros (WRITE SAME, SBC-4 §5.50), deallocating them too
    /// when `unmap` and the target can.
    fn write_zeroes(
        &self,
        lba: u64,
        blocks: u64,
        unmap: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// What an export (the export layer) needs from its block device beyond
/// [`BlockBackend`]: capacity changes, thin provisioning, and a fresh try
/// at reaching it before data is given up.
pub trait LunBackend: BlockBackend + Sized {
    /// Make sure the LUN is reachable now: when the connection to it is
    /// down, try again at once (not at the next step of a back-off) and
    /// wait for that attempt; `Ok` when it can be reached. The export
    /// layer's final write-back asks before it declares cached data lost.
    /// A backend without a connection is always reachable.
    fn reconnect(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        async { Ok(()) }
    }
    /// The LUN is no longer the export's (removed from the target, or
    /// another logical unit now has its number): fail every later command,
    /// so that nothing still cached for it — the write-back of dirty pages
    /// — reaches whatever the target puts under the number. A backend
    /// without such numbers does nothing.
    fn fence(&self) {}
    /// A counter that moves when the target reports a capacity change
    /// (UNIT ATTENTION 2A/09, counted by the session).
    fn capacity_generation(&self) -> u64;
    /// The same LUN with its capacity read again (READ CAPACITY).
    fn reread_capacity(&self) -> impl Future<Output = Result<Self, BackendError>> + Send;
    /// UNMAP is supported (LBPU of the Logical Block Provisioning VPD page,
    /// SBC-4 §6.6.4).
    fn can_unmap(&self) -> bool;
    /// UNMAP works and unmapped blocks read as zeros (LBPU and LBPRZ of the
    /// Logical Block Provisioning VPD page, SBC-4 §6.6.4).
    fn unmap_reads_zeros(&self) -> bool;
    /// The provisioning status of runs of blocks from `lba` on (GET LBA
    /// STATUS, SBC-4 §5.8), or `None` when the LUN cannot tell (not thin,
    /// or the target refuses the command).
    fn allocation(
        &self,
        lba: u64,
    ) -> impl Future<Output = Result<Option<Vec<LbaStatus>>, BackendError>> + Send {
        let _ = lba;
        async { Ok(None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a cause, like a backend's own error type.
    #[derive(Debug, Error)]
    #[error("WRITE SAME failed")]
    struct Refused(#[source] std::io::Error);

    #[test]
    fn a_command_failure_reads_as_the_backends_error_with_its_classification() {
        let e = BackendError::Command(CommandFailure::new(
            Refused(std::io::Error::other("invalid field in CDB")),
            errno::EILSEQ,
            true,
        ));
        assert_eq!(e.to_string(), "WRITE SAME failed");
        assert_eq!(
            rlun_iscsi::error_chain(&e),
            "WRITE SAME failed: invalid field in CDB"
        );
        assert_eq!(e.to_errno(), errno::EILSEQ);
        assert!(e.is_unsupported());
    }

    #[test]
    fn a_short_transfer_is_an_io_error_and_not_unsupported() {
        let e = BackendError::ShortTransfer {
            op: "READ",
            got: 512,
            expected: 4096,
        };
        assert_eq!(
            e.to_string(),
            "READ: target returned 512 bytes, expected 4096"
        );
        assert_eq!(e.to_errno(), errno::EIO);
        assert!(!e.is_unsupported());
    }
}
