//! A logged-in target and its LUNs, with typed SCSI operations.
//!
//! [`Target`] wraps a [`SessionHandle`]; [`LoggedIn`] is the target a
//! command logged in to, which it cannot forget to log out of; [`Lun`]
//! knows its block size,
//! capacity, write protection and block limits and offers `read`, `write`,
//! `sync`, `unmap`… in blocks.
//!
//! A write asked to be durable (`fua`) carries the FUA bit only when the LUN
//! reports DPOFUA in its MODE SENSE header (SBC-4 6.5.1). Without it some
//! targets refuse the bit (LIO: ILLEGAL REQUEST, INVALID FIELD IN CDB) and
//! others may ignore it, so the write goes without FUA and is followed by a
//! SYNCHRONIZE CACHE of the same range before it counts as done. Every command goes through
//! [`Lun::execute`], which turns a non-GOOD status into a typed
//! [`ScsiError`] and retries what SAM says is transient: UNIT ATTENTION
//! (always reported once after login, SPC-5 §5.14), BUSY, TASK SET FULL and
//! NOT READY "becoming ready".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rlun_iscsi::ErrorKind;
use thiserror::Error;
use tracing::{debug, warn};

use crate::multipath::{PathSet, Route, Router};
use crate::session::{SessionConfig, SessionError, SessionHandle};
use rlun_iscsi::proto::connection::{CommandRequest, CommandResult};
use rlun_iscsi::proto::pdu::TaskAttr;
use rlun_iscsi::scsi::cdb::{self, Cdb, CdbError, WriteSame};
use rlun_iscsi::scsi::inquiry::{PeripheralQualifier, StandardInquiry};
use rlun_iscsi::scsi::mode::ModeSense;
use rlun_iscsi::scsi::vpd::{self, BlockLimits, LogicalBlockProvisioning};
use rlun_iscsi::scsi::{lun_to_bytes, ParseError, ReadCapacity10, ReadCapacity16, ReportLuns};
use rlun_iscsi::scsi::{ScsiError, Status};

mod identity;
mod queue;
mod started;

pub use identity::LunIdentity;
pub use queue::LunQueue;
pub use started::StartedRead;

/// Errors of the client layer.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("{op} failed")]
    Scsi {
        op: &'static str,
        #[source]
        source: ScsiError,
    },
    #[error("LUN {0} does not exist on this target")]
    LunNotFound(u64),
    /// The LUN left the export set (the target removed it, or put another
    /// logical unit under its number): nothing more is sent for it.
    #[error("LUN {0} was removed from the target or replaced by another logical unit; nothing more is sent to it")]
    Fenced(u64),
    #[error(
        "LUN {lun} is a {device_type} ({vendor} {product}), not a disk: rlun reads and writes \
         disk LUNs only"
    )]
    NotADisk {
        lun: u64,
        device_type: String,
        /// INQUIRY's vendor and product identification, for listings.
        vendor: String,
        product: String,
    },
    #[error("LUN {0} is write protected (read-only)")]
    ReadOnly(u64),
    /// With several portals: one of them reaches another logical unit
    /// than the first (VPD pages 0x80 and 0x83 differ).
    #[error(
        "the path through {portal} reaches another logical unit than the first path for LUN {lun} \
         ({identity}): the portals given with --portal must be paths to the same target"
    )]
    PathsDiffer {
        lun: u64,
        portal: String,
        identity: String,
    },
    #[error(
        "I/O at block {lba} for {blocks} blocks is past the end of the LUN ({capacity} blocks)"
    )]
    OutOfRange {
        lba: u64,
        blocks: u64,
        capacity: u64,
    },
    #[error("the source is {size} bytes but LUN {lun} holds only {capacity} bytes")]
    TooLarge { lun: u64, size: u64, capacity: u64 },
    #[error("cannot parse the {what} the target returned")]
    Parse {
        what: &'static str,
        #[source]
        source: ParseError,
    },
    #[error("cannot build the command")]
    Cdb(#[from] CdbError),
    #[error("{op}: target returned {got} bytes, expected {expected}")]
    ShortTransfer {
        op: &'static str,
        got: usize,
        expected: usize,
    },
}

impl ClientError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Session(s) => s.kind(),
            ClientError::LunNotFound(_) | ClientError::Fenced(_) => ErrorKind::NotFound,
            // It exists: asking rlun to read or write it is the mistake.
            ClientError::NotADisk { .. } | ClientError::PathsDiffer { .. } => ErrorKind::Usage,
            ClientError::ReadOnly(_)
            | ClientError::OutOfRange { .. }
            | ClientError::TooLarge { .. }
            | ClientError::Scsi { .. } => ErrorKind::Io,
            ClientError::Parse { .. } | ClientError::ShortTransfer { .. } => ErrorKind::Protocol,
            ClientError::Cdb(_) => ErrorKind::Usage,
        }
    }
}

impl ClientError {
    pub fn scsi(&self) -> Option<&ScsiError> {
        match self {
            ClientError::Scsi { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A logged-in normal session to one target.
#[derive(Clone)]
pub struct Target {
    route: Route,
}

impl Target {
    /// Log in; through every portal when `cfg.multipath` names more
    /// ([`PathSet::login`]).
    pub async fn login(cfg: SessionConfig) -> Result<Target, ClientError> {
        let route = match cfg.multipath {
            None => Route::One(SessionHandle::connect(cfg).await?),
            Some(_) => Route::Many(Router::new(PathSet::login(cfg).await?, [0; 8])),
        };
        Ok(Target { route })
    }

    pub fn from_session(session: SessionHandle) -> Target {
        Target {
            route: Route::One(session),
        }
    }

    /// The session (with several paths: the first that logged in).
    pub fn session(&self) -> &SessionHandle {
        self.route.primary()
    }

    /// Where commands go: one session or several paths.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// REPORT LUNS (sent to LUN 0, SPC-5 §6.33): the LUN numbers.
    pub async fn report_luns(&self) -> Result<Vec<u64>, ClientError> {
        let mut alloc = 4096u32;
        loop {
            let c = cdb::report_luns(0, alloc)?;
            let r = execute(&self.route, [0; 8], "REPORT LUNS", &c, Bytes::new()).await?;
            match ReportLuns::parse(&r.data) {
                Ok(list) => return Ok(list.numbers()),
                Err(e) => match e.needed() {
                    Some(n) if (n as u64) > alloc as u64 && n <= 16 << 20 => alloc = n as u32,
                    _ => {
                        return Err(ClientError::Parse {
                            what: "REPORT LUNS data",
                            source: e,
                        })
                    }
                },
            }
        }
    }

    /// Open a LUN: INQUIRY (does it exist, is it a disk), READ CAPACITY,
    /// MODE SENSE (write protect) and the block limits VPD page if offered.
    pub async fn open_lun(&self, number: u64) -> Result<Lun, ClientError> {
        let raw = lun_to_bytes(number);
        let route = self.route.for_lun(raw);
        let inq = match execute(&route, raw, "INQUIRY", &cdb::inquiry(255), Bytes::new()).await {
            Ok(r) => StandardInquiry::parse(&r.data).map_err(|e| ClientError::Parse {
                what: "INQUIRY data",
                source: e,
            })?,
            Err(ClientError::Scsi { source, .. }) if source.is_lun_not_supported() => {
                return Err(ClientError::LunNotFound(number))
            }
            Err(e) => return Err(e),
        };
        if inq.qualifier != PeripheralQualifier::Connected {
            return Err(ClientError::LunNotFound(number));
        }
        let mut lun = Lun {
            route,
            raw,
            number,
            inquiry: inq,
            block_size: 512,
            blocks: 0,
            write_protected: false,
            dpofua: false,
            limits: None,
            provisioning: None,
            supported_vpd: Vec::new(),
            identity: LunIdentity::default(),
            fenced: Arc::new(AtomicBool::new(false)),
        };
        if !matches!(
            lun.inquiry.device_type,
            rlun_iscsi::scsi::inquiry::DeviceType::DirectAccess
        ) {
            return Err(ClientError::NotADisk {
                lun: number,
                device_type: lun.inquiry.device_type.name().to_string(),
                vendor: lun.inquiry.vendor.clone(),
                product: lun.inquiry.product.clone(),
            });
        }
        lun.refresh_capacity().await?;
        match lun.mode_sense().await {
            Ok(m) => {
                lun.write_protected = m.write_protected;
                lun.dpofua = m.dpofua;
            }
            Err(e) => debug!(error = %e, "MODE SENSE failed; assuming writable, without FUA"),
        }
        if let Ok(pages) = lun.vpd(0x00).await {
            if let Ok(sp) = vpd::SupportedPages::parse(&pages) {
                lun.supported_vpd = sp.pages.clone();
                if sp.supports(0xb0) {
                    if let Ok(b) = lun.vpd(0xb0).await {
                        lun.limits = BlockLimits::parse(&b).ok();
                    }
                }
                if sp.supports(0xb2) {
                    if let Ok(b) = lun.vpd(0xb2).await {
                        lun.provisioning = LogicalBlockProvisioning::parse(&b).ok();
                    }
                }
            }
        }
        lun.identity = lun.read_identity().await;
        if let Some(router) = lun.route.router() {
            let expected = lun.identity.clone();
            let same_unit: crate::multipath::SameUnit = Box::new(move |serial, ident| {
                !LunIdentity::from_pages(serial, ident).differs_from(&expected)
            });
            let alua = lun.inquiry.tpgs != rlun_iscsi::scsi::inquiry::Tpgs::NotSupported;
            if let Err(portal) = router.verify(same_unit, alua).await {
                return Err(ClientError::PathsDiffer {
                    lun: number,
                    portal,
                    identity: lun.identity.to_string(),
                });
            }
            router.start_checker();
        }
        Ok(lun)
    }

    /// Log out (of every path).
    pub async fn logout(&self) -> Result<(), ClientError> {
        Ok(self.route.logout().await?)
    }
}

/// A target this process logged in to, whose logout cannot be forgotten.
///
/// The normal path ends it with [`LoggedIn::logout`], awaited. Work on it
/// goes through [`LoggedIn::scope`] (log out whatever the work returned,
/// a `?` inside included) or [`LoggedIn::or_logout`] (keep the session
/// when a step succeeds, log out before its error is returned), so that
/// every path that ends the session waits for the logout to reach the
/// target. A guard dropped without either (a panic, a cancelled future)
/// still ends the session politely: it asks the driver to log out — after
/// the commands still in flight — without waiting. (Dropping the last
/// [`SessionHandle`] would do that too, but [`Lun`]s hold handles of
/// their own; the guard ends the session when it goes.)
pub struct LoggedIn {
    /// `None` once logged out.
    target: Option<Target>,
}

impl LoggedIn {
    /// Log in ([`Target::login`]).
    pub async fn login(cfg: SessionConfig) -> Result<LoggedIn, ClientError> {
        Ok(LoggedIn::new(Target::login(cfg).await?))
    }

    /// Take charge of logging out of `target`.
    pub fn new(target: Target) -> LoggedIn {
        LoggedIn {
            target: Some(target),
        }
    }

    /// The target.
    pub fn target(&self) -> &Target {
        self.target
            .as_ref()
            .expect("a LoggedIn holds its target until it is consumed")
    }

    /// Log out and wait for it (in-flight commands finish first). The
    /// session ends here even while [`Lun`]s of it are still around.
    pub async fn logout(mut self) -> Result<(), ClientError> {
        match self.target.take() {
            Some(t) => t.logout().await,
            None => Ok(()),
        }
    }

    /// Run `body` on the target, then log out, awaited, whatever it
    /// returned. A failed logout is logged, not returned: by then the
    /// body's result is what the caller reports.
    pub async fn scope<T, E>(
        self,
        body: impl AsyncFnOnce(&Target) -> Result<T, E>,
    ) -> Result<T, E> {
        let result = body(self.target()).await;
        if let Err(e) = self.logout().await {
            debug!(error = %e, "logout failed");
        }
        result
    }

    /// Run a step that the session is useless without (opening a LUN, the
    /// exports): on success keep the session and hand out what the step
    /// made; on failure log out, awaited, before the error is returned.
    pub async fn or_logout<T, E>(
        self,
        step: impl AsyncFnOnce(&Target) -> Result<T, E>,
    ) -> Result<(LoggedIn, T), E> {
        match step(self.target()).await {
            Ok(made) => Ok((self, made)),
            Err(e) => {
                if let Err(le) = self.logout().await {
                    debug!(error = %le, "logout failed");
                }
                Err(e)
            }
        }
    }
}

impl std::ops::Deref for LoggedIn {
    type Target = Target;

    fn deref(&self) -> &Target {
        self.target()
    }
}

impl Drop for LoggedIn {
    fn drop(&mut self) {
        let Some(target) = self.target.take() else {
            return;
        };
        // Not awaited: a drop cannot wait. The driver logs out after the
        // commands in flight, as long as the runtime runs.
        debug!("session dropped without an awaited logout; asking the driver to log out");
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = target.logout().await {
                    debug!(error = %e, "logout failed");
                }
            });
        }
    }
}

/// One LUN of a logged-in target.
#[derive(Clone)]
pub struct Lun {
    route: Route,
    raw: [u8; 8],
    number: u64,
    pub inquiry: StandardInquiry,
    block_size: u32,
    blocks: u64,
    write_protected: bool,
    /// DPOFUA from MODE SENSE: WRITE may carry FUA.
    dpofua: bool,
    pub limits: Option<BlockLimits>,
    pub provisioning: Option<LogicalBlockProvisioning>,
    pub supported_vpd: Vec<u8>,
    /// Who the logical unit is, as read when it was opened
    /// ([`Lun::read_identity`]); empty when the target gave no designators.
    identity: LunIdentity,
    /// Set by [`Lun::fence`]; shared by the clones of this handle.
    fenced: Arc<AtomicBool>,
}

/// Default cap on one command's transfer when the target states none.
const DEFAULT_MAX_TRANSFER: u64 = 8 << 20;

impl Lun {
    pub fn number(&self) -> u64 {
        self.number
    }
    /// The session (with several paths: the first that logged in).
    pub fn session(&self) -> &SessionHandle {
        self.route.primary()
    }
    /// Where this LUN's commands go: one session or several paths.
    pub fn route(&self) -> &Route {
        &self.route
    }
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    pub fn blocks(&self) -> u64 {
        self.blocks
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.blocks * self.block_size as u64
    }
    pub fn write_protected(&self) -> bool {
        self.write_protected
    }
    /// Whether the LUN reported DPOFUA, i.e. whether [`Lun::write`] with
    /// `fua` sends the FUA bit (otherwise WRITE + SYNCHRONIZE CACHE).
    pub fn dpofua(&self) -> bool {
        self.dpofua
    }
    /// Behave as if the LUN had not reported DPOFUA: durable writes become
    /// WRITE + SYNCHRONIZE CACHE of the range. For tests of that path
    /// against targets that do report DPOFUA.
    #[doc(hidden)]
    pub fn assume_no_dpofua(&mut self) {
        self.dpofua = false;
    }

    /// Largest transfer for one READ/WRITE, in bytes: the block limits page's
    /// MAXIMUM TRANSFER LENGTH, else 8 MiB, and at most what the session's
    /// transport carries in one command (iSER: 512 KiB);
    /// always a whole number of blocks.
    pub fn max_transfer_bytes(&self) -> u64 {
        let bs = self.block_size as u64;
        let from_vpd = self
            .limits
            .as_ref()
            .and_then(|l| l.max_transfer_blocks())
            .map(|b| b as u64 * bs)
            .unwrap_or(DEFAULT_MAX_TRANSFER);
        let mut max = from_vpd.min(DEFAULT_MAX_TRANSFER);
        if let Some(transport_max) = self.route.max_transfer() {
            max = max.min(transport_max);
        }
        (max / bs).max(1) * bs
    }

    /// Run a CDB against this LUN with the retry policy of the module docs.
    pub async fn execute(&self, cdb: &Cdb, data_out: Bytes) -> Result<CommandResult, ClientError> {
        execute(&self.route, self.raw, cdb.name(), cdb, data_out).await
    }

    /// READ CAPACITY(10), then (16) when needed or when (10) is refused.
    pub async fn refresh_capacity(&mut self) -> Result<(), ClientError> {
        let r10 = self.execute(&cdb::read_capacity10(), Bytes::new()).await;
        let (blocks, bs) = match r10 {
            Ok(r) => {
                let c = ReadCapacity10::parse(&r.data).map_err(|e| ClientError::Parse {
                    what: "READ CAPACITY(10) data",
                    source: e,
                })?;
                match c.block_count() {
                    Some(n) if !c.needs_16() => (n, c.block_length),
                    _ => self.read_capacity16().await?,
                }
            }
            Err(ClientError::Scsi { .. }) => self.read_capacity16().await?,
            Err(e) => return Err(e),
        };
        if bs == 0 || !bs.is_power_of_two() {
            return Err(ClientError::Parse {
                what: "READ CAPACITY data",
                source: ParseError::BadField {
                    what: "READ CAPACITY",
                    field: "block length",
                    value: bs as u64,
                },
            });
        }
        self.blocks = blocks;
        self.block_size = bs;
        Ok(())
    }

    async fn read_capacity16(&self) -> Result<(u64, u32), ClientError> {
        let r = self
            .execute(&cdb::read_capacity16(32), Bytes::new())
            .await?;
        let c = ReadCapacity16::parse(&r.data).map_err(|e| ClientError::Parse {
            what: "READ CAPACITY(16) data",
            source: e,
        })?;
        let blocks = c.block_count().ok_or(ClientError::Parse {
            what: "READ CAPACITY(16) data",
            source: ParseError::BadField {
                what: "READ CAPACITY(16)",
                field: "last LBA",
                value: c.last_lba,
            },
        })?;
        Ok((blocks, c.block_length))
    }

    /// Full READ CAPACITY(16) data (for `rlun info`).
    pub async fn read_capacity16_data(&self) -> Result<ReadCapacity16, ClientError> {
        let r = self
            .execute(&cdb::read_capacity16(32), Bytes::new())
            .await?;
        ReadCapacity16::parse(&r.data).map_err(|e| ClientError::Parse {
            what: "READ CAPACITY(16) data",
            source: e,
        })
    }

    /// GET LBA STATUS from `lba` (SBC-4 5.8): the provisioning status of
    /// runs of blocks starting there (up to 64 descriptors).
    pub async fn get_lba_status(
        &self,
        lba: u64,
    ) -> Result<Vec<rlun_iscsi::scsi::lba_status::LbaStatus>, ClientError> {
        let r = self
            .execute(&cdb::get_lba_status(lba, 8 + 16 * 64), Bytes::new())
            .await?;
        rlun_iscsi::scsi::lba_status::parse(&r.data).map_err(|e| ClientError::Parse {
            what: "GET LBA STATUS data",
            source: e,
        })
    }

    /// MODE SENSE(10), falling back to (6): the WP bit (SBC-4 §6.5.1).
    pub async fn mode_sense_write_protect(&self) -> Result<bool, ClientError> {
        self.mode_sense().await.map(|m| m.write_protected)
    }

    /// MODE SENSE(10) of all pages without block descriptors, falling back
    /// to MODE SENSE(6) when (10) is refused.
    pub async fn mode_sense(&self) -> Result<ModeSense, ClientError> {
        let c = cdb::mode_sense10(0x3f, 0, true, 255)?;
        match self.execute(&c, Bytes::new()).await {
            Ok(r) => ModeSense::parse10(&r.data).map_err(|e| ClientError::Parse {
                what: "MODE SENSE(10) data",
                source: e,
            }),
            Err(ClientError::Scsi { .. }) => {
                let c = cdb::mode_sense6(0x3f, 0, true, 255)?;
                let r = self.execute(&c, Bytes::new()).await?;
                ModeSense::parse6(&r.data).map_err(|e| ClientError::Parse {
                    what: "MODE SENSE(6) data",
                    source: e,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// INQUIRY with EVPD=1 for `page`; grows the allocation length if the page is longer.
    /// Who the logical unit was when it was opened.
    pub fn identity(&self) -> &LunIdentity {
        &self.identity
    }

    /// Send nothing more for this LUN, through this handle or any clone
    /// of it: its block I/O fails with [`ClientError::Fenced`] from now on.
    /// For a LUN the target removed or replaced, so that data cached for
    /// the old logical unit (write-back still pending) cannot land on
    /// whatever the target puts under the number later.
    pub fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
    }

    /// [`Lun::fence`] was called: the error block I/O fails with.
    pub fn fenced(&self) -> Result<(), ClientError> {
        match self.fenced.load(Ordering::Acquire) {
            true => Err(ClientError::Fenced(self.number)),
            false => Ok(()),
        }
    }

    /// Ask the target who the logical unit under this LUN is now (VPD 0x80
    /// and 0x83, those of them it listed as supported when opened). A page
    /// that cannot be read is left out; [`LunIdentity::is_unknown`] when
    /// neither could.
    pub async fn read_identity(&self) -> LunIdentity {
        let page = |n: u8| async move {
            match self.supported_vpd.contains(&n) {
                true => self.vpd(n).await.ok(),
                false => None,
            }
        };
        let serial = page(0x80).await;
        let identification = page(0x83).await;
        LunIdentity::from_pages(serial.as_deref(), identification.as_deref())
    }

    pub async fn vpd(&self, page: u8) -> Result<Bytes, ClientError> {
        let mut alloc: u16 = 255;
        loop {
            let r = self
                .execute(&cdb::inquiry_vpd(page, alloc), Bytes::new())
                .await?;
            match vpd::page_length(&r.data) {
                Some(n) if n > r.data.len() && n <= u16::MAX as usize && alloc < u16::MAX => {
                    alloc = n as u16;
                }
                _ => return Ok(r.data),
            }
        }
    }

    pub async fn test_unit_ready(&self) -> Result<(), ClientError> {
        self.execute(&cdb::test_unit_ready(), Bytes::new())
            .await
            .map(|_| ())
    }

    fn check_range(&self, lba: u64, blocks: u64) -> Result<(), ClientError> {
        if lba.checked_add(blocks).is_none_or(|end| end > self.blocks) {
            return Err(ClientError::OutOfRange {
                lba,
                blocks,
                capacity: self.blocks,
            });
        }
        Ok(())
    }

    /// READ `blocks` blocks at `lba`. Returns exactly `blocks * block_size` bytes.
    pub async fn read(&self, lba: u64, blocks: u32) -> Result<Bytes, ClientError> {
        self.check_range(lba, blocks as u64)?;
        let c = cdb::read(lba, blocks, self.block_size)?;
        let r = self.execute(&c, Bytes::new()).await?;
        let expected = blocks as usize * self.block_size as usize;
        if r.data.len() != expected {
            return Err(ClientError::ShortTransfer {
                op: c.name(),
                got: r.data.len(),
                expected,
            });
        }
        Ok(r.data)
    }

    /// A queue for many reads and writes of this LUN in flight from one
    /// task, completed in batches (see [`LunQueue`]).
    pub fn queue(&self) -> LunQueue {
        LunQueue::new(self.clone())
    }

    /// WRITE `data` (a whole number of blocks) at `lba`. With `fua` the data
    /// is durable when this returns: FUA on the WRITE if the LUN reported
    /// DPOFUA, else a SYNCHRONIZE CACHE of the written range after it.
    pub async fn write(&self, lba: u64, data: Bytes, fua: bool) -> Result<(), ClientError> {
        if self.write_protected {
            return Err(ClientError::ReadOnly(self.number));
        }
        let bs = self.block_size as usize;
        debug_assert!(data.len().is_multiple_of(bs), "write of partial blocks");
        let blocks = (data.len() / bs) as u32;
        self.check_range(lba, blocks as u64)?;
        let (write, sync) = write_cdbs(lba, blocks, self.block_size, fua, self.dpofua)?;
        match self.execute(&write, data).await {
            Err(ClientError::Scsi { source, .. }) if source.is_write_protected() => {
                return Err(ClientError::ReadOnly(self.number))
            }
            other => other.map(|_| ())?,
        }
        match sync {
            Some(c) => self.execute(&c, Bytes::new()).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// SYNCHRONIZE CACHE for the whole LUN.
    pub async fn sync(&self) -> Result<(), ClientError> {
        self.execute(&cdb::sync_cache(0, 0, false), Bytes::new())
            .await
            .map(|_| ())
    }

    /// UNMAP a range of blocks (SBC-4 §5.30).
    pub async fn unmap(&self, lba: u64, blocks: u64) -> Result<(), ClientError> {
        if self.write_protected {
            return Err(ClientError::ReadOnly(self.number));
        }
        self.check_range(lba, blocks)?;
        let mut list = cdb::UnmapList::new();
        list.push_range(lba, blocks)?;
        let c = list.cdb(false);
        self.execute(&c, Bytes::from(list.to_bytes()))
            .await
            .map(|_| ())
    }

    /// WRITE SAME(16) of zeros, with UNMAP when `unmap` (SBC-4 §5.50).
    pub async fn write_zeroes(
        &self,
        lba: u64,
        blocks: u32,
        unmap: bool,
    ) -> Result<(), ClientError> {
        if self.write_protected {
            return Err(ClientError::ReadOnly(self.number));
        }
        self.check_range(lba, blocks as u64)?;
        let c = cdb::write_same16(
            lba,
            blocks,
            self.block_size,
            WriteSame {
                unmap,
                anchor: false,
                ndob: false,
            },
        )?;
        self.execute(&c, Bytes::from(vec![0u8; self.block_size as usize]))
            .await
            .map(|_| ())
    }
}

/// The commands of one WRITE of `blocks` blocks at `lba`: the WRITE, with
/// FUA only when `fua` is asked and the LUN reported `dpofua`; and when
/// `fua` is asked without `dpofua`, a SYNCHRONIZE CACHE of the same range to
/// send once the WRITE has completed.
pub(crate) fn write_cdbs(
    lba: u64,
    blocks: u32,
    block_size: u32,
    fua: bool,
    dpofua: bool,
) -> Result<(Cdb, Option<Cdb>), ClientError> {
    let write = cdb::write(lba, blocks, block_size, fua && dpofua)?;
    let sync = (fua && !dpofua).then(|| cdb::sync_cache(lba, blocks, false));
    Ok((write, sync))
}

/// A UNIT ATTENTION that announces a change the layers above follow
/// (capacity, LUN inventory: [`ScsiError::target_change`]) is counted on
/// the session, which wakes them; the command itself is retried as any
/// UNIT ATTENTION.
pub(crate) fn note_target_change(session: &SessionHandle, err: &ScsiError) {
    if let Some(change) = err.target_change() {
        debug!(?change, "the target reports a change");
        session.note_change(change);
    }
}

/// Send one CDB and apply the retry policy; GOOD → Ok, otherwise a typed error.
pub async fn execute(
    route: &Route,
    lun: [u8; 8],
    op: &'static str,
    c: &Cdb,
    data_out: Bytes,
) -> Result<CommandResult, ClientError> {
    let read_len = match c.direction() {
        cdb::DataDirection::Read => c.expected_transfer_len(),
        _ => 0,
    };
    let mut unit_attentions = 0;
    let mut busy = 0u32;
    loop {
        let req = CommandRequest {
            lun,
            cdb: c.padded(),
            data_out: data_out.clone(),
            read_len,
            attr: TaskAttr::Simple,
        };
        // The answer and the error live in this block only: were they
        // alive across the retry's sleep, every command's future would
        // carry them (184 bytes) for the rare BUSY.
        let wait = {
            let r = route.command(req).await?;
            let status = Status::from(r.status);
            if status.is_success() {
                return Ok(r);
            }
            let err =
                ScsiError::from_status_and_sense_bytes(status, r.sense.as_deref().unwrap_or(&[]));
            note_target_change(route.primary(), &err);
            match retry(&err, &mut unit_attentions, &mut busy) {
                Retry::Now => {
                    debug!(op, error = %err, "UNIT ATTENTION; retrying");
                    continue;
                }
                Retry::After(wait) => {
                    warn!(op, error = %err, ?wait, "transient condition; retrying");
                    wait
                }
                Retry::No => return Err(ClientError::Scsi { op, source: err }),
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// What [`execute`] does after a command failed with `err`.
#[derive(Debug, PartialEq, Eq)]
enum Retry {
    /// Send it again at once (a UNIT ATTENTION: the target reported a
    /// change once; the command itself was not run).
    Now,
    /// Send it again after a pause (BUSY, TASK SET FULL, TASK ABORTED, a LUN
    /// becoming ready or in an ALUA transition): 20 ms, doubling up to
    /// 1.28 s.
    After(Duration),
    /// Give up: the error is the command's result.
    No,
}

/// The retry policy: up to 8 UNIT ATTENTIONs, and up to 20 transient
/// conditions (about 19 s of pauses in all), counted per command.
fn retry(err: &ScsiError, unit_attentions: &mut u32, busy: &mut u32) -> Retry {
    if err.is_unit_attention() {
        if *unit_attentions < 8 {
            *unit_attentions += 1;
            return Retry::Now;
        }
        return Retry::No;
    }
    if !err.is_retryable() || *busy >= 20 {
        return Retry::No;
    }
    *busy += 1;
    Retry::After(Duration::from_millis(10u64 << (*busy).min(7)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionError;
    use rlun_iscsi::ErrorKind;

    /// Fixed-format sense data: response code 0x70, `key`, ASC/ASCQ.
    pub(super) fn sense(key: u8, asc: u8, ascq: u8) -> Vec<u8> {
        let mut s = vec![0u8; 18];
        s[0] = 0x70;
        s[2] = key;
        s[7] = 10;
        s[12] = asc;
        s[13] = ascq;
        s
    }

    #[test]
    fn the_retry_policy_resends_8_unit_attentions_and_20_transient_conditions_with_growing_pauses()
    {
        let ua =
            ScsiError::from_status_and_sense_bytes(Status::CheckCondition, &sense(0x6, 0x29, 0x00));
        let (mut uas, mut busy) = (0, 0);
        for _ in 0..8 {
            assert_eq!(retry(&ua, &mut uas, &mut busy), Retry::Now);
        }
        assert_eq!(retry(&ua, &mut uas, &mut busy), Retry::No);
        assert_eq!(busy, 0, "a UNIT ATTENTION is not a transient condition");

        let (mut uas, mut busy) = (0, 0);
        let statuses = [Status::Busy, Status::TaskSetFull, Status::TaskAborted];
        let mut waits = Vec::new();
        for i in 0..20 {
            let e = ScsiError::from_status_and_sense_bytes(statuses[i % 3], &[]);
            match retry(&e, &mut uas, &mut busy) {
                Retry::After(w) => waits.push(w.as_millis() as u64),
                other => panic!("attempt {i}: {other:?}"),
            }
        }
        assert_eq!(&waits[..8], &[20, 40, 80, 160, 320, 640, 1280, 1280]);
        assert!(waits[8..].iter().all(|&w| w == 1280));
        let busy_err = ScsiError::from_status_and_sense_bytes(Status::Busy, &[]);
        assert_eq!(retry(&busy_err, &mut uas, &mut busy), Retry::No);

        // Becoming ready and an ALUA transition wait; a medium error does not.
        let (mut uas, mut busy) = (0, 0);
        for (asc, ascq) in [(0x04, 0x01), (0x04, 0x0A)] {
            let e = ScsiError::from_status_and_sense_bytes(
                Status::CheckCondition,
                &sense(0x2, asc, ascq),
            );
            assert!(matches!(retry(&e, &mut uas, &mut busy), Retry::After(_)));
        }
        let medium =
            ScsiError::from_status_and_sense_bytes(Status::CheckCondition, &sense(0x3, 0x11, 0x00));
        assert_eq!(retry(&medium, &mut uas, &mut busy), Retry::No);
    }

    #[test]
    fn client_errors_classify_their_own_and_defer_to_the_session() {
        assert_eq!(ClientError::LunNotFound(3).kind(), ErrorKind::NotFound);
        assert_eq!(ClientError::ReadOnly(1).kind(), ErrorKind::Io);
        let e = ClientError::Session(SessionError::Closed);
        assert_eq!(e.kind(), ErrorKind::Unreachable);
    }

    /// Byte 1 bit 3 of READ/WRITE(10/16): FUA.
    const FUA_BIT: u8 = 0x08;

    #[test]
    fn durable_write_carries_fua_when_the_lun_reports_dpofua() {
        let (w, sync) = write_cdbs(100, 8, 512, true, true).unwrap();
        assert_eq!(w.as_bytes()[0], 0x2a, "WRITE(10)");
        assert_eq!(w.as_bytes()[1] & FUA_BIT, FUA_BIT, "FUA set");
        assert!(sync.is_none(), "no SYNCHRONIZE CACHE after a FUA write");
    }

    #[test]
    fn durable_write_without_dpofua_is_write_then_sync_cache_of_the_range() {
        let (w, sync) = write_cdbs(100, 8, 512, true, false).unwrap();
        assert_eq!(w.as_bytes()[0], 0x2a, "WRITE(10)");
        assert_eq!(w.as_bytes()[1] & FUA_BIT, 0, "no FUA without DPOFUA");
        let s = sync.expect("SYNCHRONIZE CACHE after the write");
        let b = s.as_bytes();
        assert_eq!(b[0], 0x35, "SYNCHRONIZE CACHE(10)");
        assert_eq!(
            b[1] & 0x02,
            0,
            "not IMMED: the data is durable when it completes"
        );
        assert_eq!(u32::from_be_bytes([b[2], b[3], b[4], b[5]]), 100, "LBA");
        assert_eq!(u16::from_be_bytes([b[7], b[8]]), 8, "blocks");
    }

    #[test]
    fn sync_cache_of_a_range_past_32_bits_uses_the_16_byte_form() {
        let lba = 1u64 << 33;
        let (w, sync) = write_cdbs(lba, 70_000, 4096, true, false).unwrap();
        assert_eq!(w.as_bytes()[0], 0x8a, "WRITE(16)");
        assert_eq!(w.as_bytes()[1] & FUA_BIT, 0);
        let s = sync.expect("SYNCHRONIZE CACHE");
        let b = s.as_bytes();
        assert_eq!(b[0], 0x91, "SYNCHRONIZE CACHE(16)");
        assert_eq!(u64::from_be_bytes(b[2..10].try_into().unwrap()), lba);
        assert_eq!(u32::from_be_bytes(b[10..14].try_into().unwrap()), 70_000);
    }

    #[test]
    fn plain_writes_never_carry_fua_nor_sync() {
        for dpofua in [false, true] {
            let (w, sync) = write_cdbs(7, 1, 512, false, dpofua).unwrap();
            assert_eq!(w.as_bytes()[1] & FUA_BIT, 0);
            assert!(sync.is_none());
        }
    }
}

/// [`LoggedIn`] against a target that only logs in and out.
#[cfg(test)]
mod guard_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use rlun_iscsi::proto::pdu::{Bhs, Digests, LoginResponse, LogoutResponse, Pdu, Stage};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Keys an initiator declares about itself, which a target does not
    /// answer.
    const DECLARED: &[&str] = &[
        "InitiatorName",
        "InitiatorAlias",
        "SessionType",
        "TargetName",
    ];

    /// The answer to a login request's keys: no authentication, the first
    /// value offered for everything else (RFC 7143 §6.2), and in the
    /// security stage the portal group tag a target must send.
    fn answer(keys: &[u8], stage: Stage) -> Bytes {
        let mut out = String::new();
        for pair in keys.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            let pair = String::from_utf8_lossy(pair);
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            match k {
                "AuthMethod" => out.push_str("AuthMethod=None\0"),
                _ if DECLARED.contains(&k) => {}
                _ => out.push_str(&format!("{k}={}\0", v.split(',').next().unwrap_or(v))),
            }
        }
        if stage == Stage::Security {
            out.push_str("TargetPortalGroupTag=1\0");
        }
        Bytes::from(out)
    }

    /// A target on 127.0.0.1 for one connection: it completes any login,
    /// answers a Logout Request and counts the logouts it answered.
    async fn login_logout_target() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let logouts = Arc::new(AtomicUsize::new(0));
        let counted = logouts.clone();
        tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut stat_sn = 0x100u32;
            loop {
                let mut bhs = [0u8; 48];
                if s.read_exact(&mut bhs).await.is_err() {
                    return;
                }
                // DataSegmentLength: bytes 5..8; the segment is padded to 4.
                let len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
                let mut data = vec![0u8; len.div_ceil(4) * 4];
                if s.read_exact(&mut data).await.is_err() {
                    return;
                }
                let reply = match Bhs::decode(&bhs) {
                    Ok(Bhs::LoginRequest(r)) => {
                        let done = r.transit && r.nsg == Stage::FullFeature;
                        let rsp = LoginResponse {
                            transit: r.transit,
                            continue_: false,
                            csg: r.csg,
                            nsg: r.nsg,
                            version_max: 0,
                            version_active: 0,
                            isid: r.isid,
                            tsih: u16::from(done),
                            itt: r.itt,
                            stat_sn,
                            exp_cmd_sn: r.cmd_sn,
                            max_cmd_sn: r.cmd_sn.wrapping_add(16),
                            status_class: 0,
                            status_detail: 0,
                        };
                        if done {
                            stat_sn += 1;
                        }
                        Pdu::with_data(Bhs::LoginResponse(rsp), answer(&data[..len], r.csg))
                    }
                    Ok(Bhs::LogoutRequest(r)) => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        Pdu::new(Bhs::LogoutResponse(LogoutResponse {
                            response: 0,
                            itt: r.itt,
                            stat_sn,
                            exp_cmd_sn: r.cmd_sn,
                            max_cmd_sn: r.cmd_sn.wrapping_add(16),
                            time2wait: 0,
                            time2retain: 0,
                        }))
                    }
                    _ => continue,
                };
                let frame = reply.encode(Digests {
                    header: false,
                    data: false,
                });
                let sent = async {
                    s.write_all(&frame.head).await?;
                    s.write_all(&frame.data).await?;
                    s.write_all(frame.tail()).await
                };
                if sent.await.is_err() {
                    return;
                }
            }
        });
        (port, logouts)
    }

    async fn log_in(port: u16) -> LoggedIn {
        let mut cfg = SessionConfig::new("127.0.0.1", port, "iqn.2026-11.invalid:guard-test");
        cfg.target_name = Some("iqn.2026-11.invalid:target".into());
        cfg.nop_interval = None;
        LoggedIn::login(cfg).await.expect("login")
    }

    #[tokio::test]
    async fn scope_logs_out_before_it_returns_the_bodys_error() {
        let (port, logouts) = login_logout_target().await;
        let target = log_in(port).await;

        let r: Result<(), &str> = target
            .scope(async |_: &Target| Err("the work failed"))
            .await;

        assert_eq!(r, Err("the work failed"));
        assert_eq!(logouts.load(Ordering::SeqCst), 1, "logged out, awaited");
    }

    #[tokio::test]
    async fn or_logout_keeps_the_session_when_the_step_succeeds_and_ends_it_when_it_fails() {
        let (port, logouts) = login_logout_target().await;
        let target = log_in(port).await;

        let (target, made) = target
            .or_logout(async |_: &Target| Ok::<_, ()>(7))
            .await
            .unwrap();
        let kept = logouts.load(Ordering::SeqCst);
        let failed = target.or_logout(async |_: &Target| Err::<(), _>(())).await;

        assert_eq!((made, kept), (7, 0));
        assert!(failed.is_err());
        assert_eq!(logouts.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_dropped_guard_still_logs_out() {
        let (port, logouts) = login_logout_target().await;
        let target = log_in(port).await;
        // A handle of its own (as a Lun has) does not keep the session.
        let other = target.session().clone();

        drop(target);

        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while logouts.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(logouts.load(Ordering::SeqCst), 1);
        drop(other);
    }
}
