//! [`BlockBackend`]: what [`LunDevice`](super::LunDevice) needs from a block
//! device, implemented for a remote [`Lun`] here and for the in-memory
//! [`MemBackend`](super::MemBackend) used by tests; [`LunBackend`]: what a
//! front end's export (see [`crate::export`]) needs beyond that.

use std::future::Future;

use bytes::Bytes;
use thiserror::Error;

use crate::client::{ClientError, Lun};
use rlun_iscsi::scsi::lba_status::LbaStatus;
use rlun_iscsi::scsi::sense::errno;

/// Why a backend command failed.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The remote LUN (or the session under it) failed the command.
    #[error(transparent)]
    Lun(#[from] ClientError),
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
    /// The Linux errno a front end should report: SCSI errors through
    /// [`ScsiError::to_errno`](rlun_iscsi::scsi::ScsiError::to_errno), a lost
    /// connection or session as `EIO`.
    pub fn to_errno(&self) -> i32 {
        match self {
            BackendError::Lun(e) => match e {
                ClientError::Scsi { source, .. } => source.to_errno(),
                ClientError::ReadOnly(_) => errno::EROFS,
                ClientError::OutOfRange { .. } => errno::EINVAL,
                ClientError::LunNotFound(_) => errno::ENXIO,
                _ => errno::EIO,
            },
            BackendError::Injected { errno, .. } => *errno,
            BackendError::OutOfRange { .. } => errno::EINVAL,
            BackendError::ReadOnly { .. } => errno::EROFS,
        }
    }

    /// The target does not implement the command (ILLEGAL REQUEST, invalid
    /// operation code or invalid field in CDB): the caller may fall back.
    pub fn is_unsupported(&self) -> bool {
        match self {
            BackendError::Lun(e) => e.scsi().is_some_and(|s| s.is_unsupported_command()),
            _ => false,
        }
    }
}

/// A block device that [`LunDevice`](super::LunDevice) can cache.
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

/// What an export ([`crate::export`]) needs from its block device beyond
/// [`BlockBackend`]: capacity changes and thin provisioning.
pub trait LunBackend: BlockBackend + Sized {
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

/// Largest block count one UNMAP descriptor or WRITE SAME(16) may carry on
/// this LUN: the block limits page's limit when it states one.
fn chunk_limit(limit: Option<u64>) -> u64 {
    match limit {
        Some(n) if n != 0 && n != u32::MAX as u64 => n.min(u32::MAX as u64),
        _ => u32::MAX as u64,
    }
}

impl BlockBackend for Lun {
    fn block_size(&self) -> u32 {
        Lun::block_size(self)
    }
    fn blocks(&self) -> u64 {
        Lun::blocks(self)
    }
    fn read_only(&self) -> bool {
        self.write_protected()
    }
    fn max_transfer_bytes(&self) -> u64 {
        Lun::max_transfer_bytes(self)
    }
    fn optimal_granularity_bytes(&self) -> u64 {
        self.limits.as_ref().map_or(0, |l| {
            l.optimal_transfer_granularity as u64 * Lun::block_size(self) as u64
        })
    }
    fn optimal_transfer_bytes(&self) -> u64 {
        self.limits.as_ref().map_or(0, |l| {
            l.optimal_transfer_len as u64 * Lun::block_size(self) as u64
        })
    }
    async fn read_blocks(&self, lba: u64, blocks: u32) -> Result<Bytes, BackendError> {
        Ok(self.read(lba, blocks).await?)
    }
    async fn write_blocks(&self, lba: u64, data: Bytes, fua: bool) -> Result<(), BackendError> {
        Ok(self.write(lba, data, fua).await?)
    }
    async fn flush(&self) -> Result<(), BackendError> {
        Ok(self.sync().await?)
    }
    async fn unmap(&self, lba: u64, blocks: u64) -> Result<(), BackendError> {
        let max = chunk_limit(self.limits.as_ref().map(|l| l.max_unmap_lba_count as u64));
        let mut done = 0;
        while done < blocks {
            let n = (blocks - done).min(max);
            Lun::unmap(self, lba + done, n).await?;
            done += n;
        }
        Ok(())
    }
    async fn write_zeroes(&self, lba: u64, blocks: u64, unmap: bool) -> Result<(), BackendError> {
        let max = chunk_limit(self.limits.as_ref().map(|l| l.max_write_same_len));
        let mut done = 0;
        while done < blocks {
            let n = (blocks - done).min(max);
            Lun::write_zeroes(self, lba + done, n as u32, unmap).await?;
            done += n;
        }
        Ok(())
    }
}

impl LunBackend for Lun {
    fn capacity_generation(&self) -> u64 {
        self.session().capacity_generation()
    }
    fn reread_capacity(&self) -> impl Future<Output = Result<Lun, BackendError>> + Send {
        let mut lun = self.clone();
        async move {
            lun.refresh_capacity().await?;
            Ok(lun)
        }
    }
    fn can_unmap(&self) -> bool {
        self.provisioning.as_ref().is_some_and(|p| p.lbpu)
    }
    fn unmap_reads_zeros(&self) -> bool {
        self.provisioning
            .as_ref()
            .is_some_and(|p| p.lbpu && p.lbprz & 1 == 1)
    }
    fn allocation(
        &self,
        lba: u64,
    ) -> impl Future<Output = Result<Option<Vec<LbaStatus>>, BackendError>> + Send {
        // Only a thin LUN (one that can unmap) has anything to report.
        let thin = self.can_unmap();
        async move {
            if !thin {
                return Ok(None);
            }
            match self.get_lba_status(lba).await {
                Ok(v) => Ok(Some(v)),
                Err(e) => {
                    let e = BackendError::Lun(e);
                    if e.is_unsupported() {
                        Ok(None)
                    } else {
                        Err(e)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlun_iscsi::scsi::sense::{ScsiError, Sense, SenseKey, Status};

    fn scsi_error(key: SenseKey, asc: u8) -> BackendError {
        // Fixed-format sense data (SPC-5 §4.4.3).
        let mut raw = [0u8; 18];
        raw[0] = 0x70; // response code: current, fixed format
        raw[2] = key.as_u8(); // sense key
        raw[7] = 10; // additional sense length
        raw[12] = asc; // ASC
        let sense = Sense::parse(&raw).expect("valid fixed sense");
        BackendError::Lun(ClientError::Scsi {
            op: "WRITE SAME(16)",
            source: ScsiError::new(Status::CheckCondition, Some(sense)),
        })
    }

    #[test]
    fn errno_comes_from_the_scsi_error_for_refused_commands() {
        assert_eq!(
            scsi_error(SenseKey::DataProtect, 0x27).to_errno(),
            errno::EROFS
        );
        assert_eq!(
            scsi_error(SenseKey::MediumError, 0x11).to_errno(),
            errno::EIO
        );
    }

    #[test]
    fn lost_connection_maps_to_eio_and_read_only_to_erofs() {
        let lost = BackendError::Lun(ClientError::Session(crate::session::SessionError::Closed));
        assert_eq!(lost.to_errno(), errno::EIO);
        assert_eq!(
            BackendError::ReadOnly { op: "WRITE" }.to_errno(),
            errno::EROFS
        );
    }

    #[test]
    fn invalid_opcode_and_invalid_field_count_as_unsupported() {
        assert!(scsi_error(SenseKey::IllegalRequest, 0x20).is_unsupported());
        assert!(scsi_error(SenseKey::IllegalRequest, 0x24).is_unsupported());
        assert!(!scsi_error(SenseKey::MediumError, 0x11).is_unsupported());
    }

    #[test]
    fn chunk_limit_honours_stated_limits_only() {
        assert_eq!(chunk_limit(None), u32::MAX as u64);
        assert_eq!(chunk_limit(Some(0)), u32::MAX as u64);
        assert_eq!(chunk_limit(Some(4096)), 4096);
        assert_eq!(chunk_limit(Some(1 << 40)), u32::MAX as u64);
    }
}
