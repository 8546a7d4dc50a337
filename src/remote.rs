//! The remote LUN as the device layer's backend: [`BlockBackend`] and
//! [`LunBackend`] for [`client::Lun`](Lun).
//!
//! This is the one place that knows both sides. The device layer
//! (`crate::device`) caches any block device and names no client type; the
//! client (`crate::client`) speaks SCSI to a target and knows nothing of
//! caches. Here each backend call becomes the client's command (UNMAP and
//! WRITE SAME split by the LUN's block limits), and each [`ClientError`]
//! becomes a [`BackendError`] carrying the device layer's classification of
//! it: the errno a front end reports (SCSI sense through
//! [`ScsiError::to_errno`](rlun_iscsi::scsi::ScsiError::to_errno), a lost
//! session as `EIO`) and whether the target lacks the command (so the
//! device may fall back, e.g. from WRITE SAME to writing zeros).
//!
//! The traits are implemented on `Lun` itself, so `LunDevice<Lun>` and
//! `ExportSet<Lun>` need no wrapper type.

use std::future::Future;
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::client::{ClientError, Lun, StartedRead};
use crate::device::{BackendError, BlockBackend, CommandFailure, LunBackend};
use rlun_iscsi::scsi::lba_status::LbaStatus;
use rlun_iscsi::scsi::sense::errno;

/// The errno a front end reports for a failed client command: the SCSI
/// error's own mapping, `EROFS` for a write-protected LUN, `EINVAL` for a
/// range past its end, `ENXIO` for a missing LUN, `EIO` for a lost
/// connection or session and anything else.
fn client_errno(e: &ClientError) -> i32 {
    match e {
        ClientError::Scsi { source, .. } => source.to_errno(),
        ClientError::ReadOnly(_) => errno::EROFS,
        ClientError::OutOfRange { .. } => errno::EINVAL,
        ClientError::LunNotFound(_) => errno::ENXIO,
        ClientError::Fenced(_) => errno::ENODEV,
        _ => errno::EIO,
    }
}

impl From<ClientError> for BackendError {
    /// A failed client command, classified for the device layer (see the
    /// module docs); the client error stays its message and cause.
    fn from(e: ClientError) -> BackendError {
        let errno = client_errno(&e);
        // ILLEGAL REQUEST, invalid operation code or invalid field in CDB.
        let unsupported = e.scsi().is_some_and(|s| s.is_unsupported_command());
        let unreachable = e.kind() == rlun_iscsi::ErrorKind::Unreachable;
        BackendError::Command(CommandFailure::new(e, errno, unsupported).unreachable(unreachable))
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
        self.fenced()?;
        Ok(self.read(lba, blocks).await?)
    }
    type StartedRead = StartedRead;
    fn start_read(&self, lba: u64, blocks: u32) -> StartedRead {
        Lun::start_read(self, lba, blocks)
    }
    fn poll_read(
        &self,
        started: &mut StartedRead,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BackendError>>> {
        Lun::poll_read(self, started, cx).map(|r| r.map(|r| r.map_err(BackendError::from)))
    }
    async fn write_blocks(&self, lba: u64, data: Bytes, fua: bool) -> Result<(), BackendError> {
        self.fenced()?;
        Ok(self.write(lba, data, fua).await?)
    }
    async fn flush(&self) -> Result<(), BackendError> {
        self.fenced()?;
        Ok(self.sync().await?)
    }
    async fn unmap(&self, lba: u64, blocks: u64) -> Result<(), BackendError> {
        self.fenced()?;
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
        self.fenced()?;
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
    /// The session logs in again at once when it is down
    /// ([`crate::session::SessionHandle::reconnect`]).
    async fn reconnect(&self) -> Result<(), BackendError> {
        Ok(self
            .session()
            .reconnect()
            .await
            .map_err(ClientError::from)?)
    }
    fn capacity_generation(&self) -> u64 {
        self.session().capacity_generation()
    }
    fn fence(&self) {
        Lun::fence(self)
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
                    let e = BackendError::from(e);
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
        BackendError::from(ClientError::Scsi {
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
        let lost = BackendError::from(ClientError::Session(crate::session::SessionError::Closed));
        assert_eq!(lost.to_errno(), errno::EIO);
        // Counted apart from the target's refusals in `rlun stats`.
        assert!(matches!(&lost, BackendError::Command(f) if f.is_unreachable()));
        assert!(
            matches!(scsi_error(SenseKey::MediumError, 0x11), BackendError::Command(f) if !f.is_unreachable())
        );
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

    #[test]
    fn a_client_error_keeps_its_message_and_cause_chain() {
        let refused = || ClientError::Scsi {
            op: "READ(16)",
            source: ScsiError::new(Status::CheckCondition, None),
        };
        let e = BackendError::from(refused());
        assert_eq!(e.to_string(), refused().to_string());
        assert_eq!(
            rlun_iscsi::error_chain(&e),
            rlun_iscsi::error_chain(&refused())
        );
        let BackendError::Command(f) = &e else {
            panic!("a client error is a command failure: {e:?}");
        };
        assert!(matches!(
            f.error().downcast_ref::<ClientError>(),
            Some(ClientError::Scsi { op: "READ(16)", .. })
        ));
    }

    #[test]
    fn client_errors_without_sense_map_to_their_own_errno() {
        let errno_of = |e: ClientError| BackendError::from(e).to_errno();
        assert_eq!(errno_of(ClientError::ReadOnly(1)), errno::EROFS);
        assert_eq!(
            errno_of(ClientError::OutOfRange {
                lba: 8,
                blocks: 1,
                capacity: 8
            }),
            errno::EINVAL
        );
        assert_eq!(errno_of(ClientError::LunNotFound(3)), errno::ENXIO);
        assert_eq!(
            errno_of(ClientError::ShortTransfer {
                op: "READ",
                got: 0,
                expected: 512
            }),
            errno::EIO
        );
        assert!(!BackendError::from(ClientError::LunNotFound(3)).is_unsupported());
    }
}
