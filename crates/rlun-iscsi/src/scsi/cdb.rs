//! CDB builders (SPC-5 and SBC-4).
//!
//! Each builder returns a [`Cdb`]: up to 16 CDB bytes plus what the iSCSI
//! SCSI Command PDU needs besides them (RFC 7143 11.3): the data direction
//! (R/W bits) and the expected data transfer length. Builders whose
//! arguments may not fit a CDB field return [`CdbError`] instead of
//! truncating; none of them panics.
//!
//! The CONTROL byte is always 0 (no NACA, no linking).

use std::fmt;

/// Operation codes (SPC-5 annex / SBC-4 5.x).
pub mod opcode {
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const INQUIRY: u8 = 0x12;
    pub const MODE_SENSE_6: u8 = 0x1A;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2A;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const UNMAP: u8 = 0x42;
    pub const MODE_SENSE_10: u8 = 0x5A;
    pub const READ_16: u8 = 0x88;
    pub const WRITE_16: u8 = 0x8A;
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    pub const WRITE_SAME_16: u8 = 0x93;
    /// SERVICE ACTION IN(16); READ CAPACITY(16) is its service action 0x10.
    pub const SERVICE_ACTION_IN_16: u8 = 0x9E;
    pub const REPORT_LUNS: u8 = 0xA0;
    /// MAINTENANCE IN; REPORT TARGET PORT GROUPS is its service action 0x0A.
    pub const MAINTENANCE_IN: u8 = 0xA3;
}

/// Whether a command with operation code `op` can change neither the
/// medium nor the logical unit's state: the reads and inquiries rlun
/// sends (READ, INQUIRY, capacity, REPORT LUNS, mode and log pages,
/// REPORT TARGET PORT GROUPS, TEST UNIT READY, VERIFY). Such a command
/// may be sent again elsewhere while a copy of it is still on its way: a
/// late answer changes nothing. Anything not listed counts as changing
/// something.
pub fn changes_nothing(op: u8) -> bool {
    matches!(
        op,
        opcode::TEST_UNIT_READY
            | opcode::REQUEST_SENSE
            | 0x08 // READ(6)
            | opcode::INQUIRY
            | opcode::MODE_SENSE_6
            | opcode::READ_CAPACITY_10
            | opcode::READ_10
            | 0x2F // VERIFY(10)
            | 0x4D // LOG SENSE
            | opcode::MODE_SENSE_10
            | 0x5E // PERSISTENT RESERVE IN
            | opcode::READ_16
            | 0x8F // VERIFY(16)
            | opcode::SERVICE_ACTION_IN_16
            | opcode::REPORT_LUNS
            | opcode::MAINTENANCE_IN
            | 0xA8 // READ(12)
            | 0xAF // VERIFY(12)
    )
}

/// SERVICE ACTION IN(16) service action of READ CAPACITY(16) (SBC-4 5.21).
pub const SA_READ_CAPACITY_16: u8 = 0x10;
/// SERVICE ACTION IN(16) service action of GET LBA STATUS (SBC-4 5.8).
pub const SA_GET_LBA_STATUS: u8 = 0x12;

/// Mode page codes for MODE SENSE (SPC-5 7.5.1, SBC-4 6.5).
pub mod mode_page {
    /// Caching mode page (SBC-4 6.5.5).
    pub const CACHING: u8 = 0x08;
    /// Return all mode pages.
    pub const ALL: u8 = 0x3F;
}

/// A human name for an operation code, for logs and error messages.
pub fn opcode_name(op: u8) -> &'static str {
    match op {
        opcode::TEST_UNIT_READY => "TEST UNIT READY",
        opcode::REQUEST_SENSE => "REQUEST SENSE",
        opcode::INQUIRY => "INQUIRY",
        opcode::MODE_SENSE_6 => "MODE SENSE(6)",
        opcode::READ_CAPACITY_10 => "READ CAPACITY(10)",
        opcode::READ_10 => "READ(10)",
        opcode::WRITE_10 => "WRITE(10)",
        opcode::SYNCHRONIZE_CACHE_10 => "SYNCHRONIZE CACHE(10)",
        opcode::UNMAP => "UNMAP",
        opcode::MODE_SENSE_10 => "MODE SENSE(10)",
        opcode::READ_16 => "READ(16)",
        opcode::WRITE_16 => "WRITE(16)",
        opcode::SYNCHRONIZE_CACHE_16 => "SYNCHRONIZE CACHE(16)",
        opcode::WRITE_SAME_16 => "WRITE SAME(16)",
        opcode::SERVICE_ACTION_IN_16 => "SERVICE ACTION IN(16)",
        opcode::REPORT_LUNS => "REPORT LUNS",
        opcode::MAINTENANCE_IN => "MAINTENANCE IN",
        _ => "unknown command",
    }
}

/// Why a CDB could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdbError {
    /// A value does not fit the CDB field that carries it.
    #[error("{command}: {field} {value} does not fit the CDB field (max {max})")]
    FieldOverflow {
        command: &'static str,
        field: &'static str,
        value: u64,
        max: u64,
    },
    /// blocks × block size exceeds the 32-bit iSCSI Expected Data Transfer Length.
    #[error("{command}: {blocks} blocks of {block_size} bytes exceed the 32-bit expected transfer length")]
    TransferTooLong {
        command: &'static str,
        blocks: u64,
        block_size: u32,
    },
    /// lba + blocks runs past the 64-bit LBA space.
    #[error("{command}: LBA {lba} + {blocks} blocks runs past the end of the LBA space")]
    LbaRangeOverflow {
        command: &'static str,
        lba: u64,
        blocks: u64,
    },
    /// A data-moving command was asked for with a block size of 0.
    #[error("{command}: block size must not be 0")]
    ZeroBlockSize { command: &'static str },
    /// The allocation length is below what the command requires.
    #[error("{command}: allocation length {got} is below the minimum of {min}")]
    AllocationTooSmall {
        command: &'static str,
        min: u32,
        got: u32,
    },
    /// A raw CDB is not 6..=16 bytes long.
    #[error("raw CDB of {len} bytes: a CDB is 6 to 16 bytes")]
    BadLength { len: usize },
    /// The UNMAP parameter list is full (its length fields are 16 bits).
    #[error("UNMAP parameter list: at most {max} block descriptors fit")]
    TooManyUnmapDescriptors { max: usize },
}

/// Which way data flows for a command, seen from the initiator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataDirection {
    /// No data phase (TEST UNIT READY, SYNCHRONIZE CACHE).
    NoData,
    /// Data-In, target to initiator: the iSCSI R bit.
    Read,
    /// Data-Out, initiator to target: the iSCSI W bit.
    Write,
}

/// A Command Descriptor Block plus its data direction and expected
/// transfer length (in bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cdb {
    bytes: [u8; 16],
    len: u8,
    direction: DataDirection,
    transfer_len: u32,
}

impl Cdb {
    /// The largest CDB the iSCSI BHS carries without an AHS.
    pub const MAX_LEN: usize = 16;

    fn build<const N: usize>(bytes: [u8; N], direction: DataDirection, transfer_len: u32) -> Cdb {
        const { assert!(N <= 16) };
        let mut out = [0u8; 16];
        out[..N].copy_from_slice(&bytes);
        Cdb {
            bytes: out,
            len: N as u8,
            direction,
            transfer_len,
        }
    }

    /// A CDB from raw bytes (pass-through). `bytes` must be 6 to 16 long.
    pub fn from_bytes(
        bytes: &[u8],
        direction: DataDirection,
        transfer_len: u32,
    ) -> Result<Cdb, CdbError> {
        if !(6..=Self::MAX_LEN).contains(&bytes.len()) {
            return Err(CdbError::BadLength { len: bytes.len() });
        }
        let mut out = [0u8; 16];
        out[..bytes.len()].copy_from_slice(bytes);
        Ok(Cdb {
            bytes: out,
            len: bytes.len() as u8,
            direction,
            transfer_len,
        })
    }

    /// The CDB bytes (6, 10, 12 or 16 of them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(Self::MAX_LEN)]
    }

    /// The CDB zero-padded to the 16-byte field of the iSCSI BHS.
    pub fn padded(&self) -> [u8; 16] {
        self.bytes
    }

    /// CDB length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always false: a CDB has at least an operation code.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn opcode(&self) -> u8 {
        self.bytes[0]
    }

    /// The command's name ("READ(10)"), for logs and errors.
    pub fn name(&self) -> &'static str {
        if self.opcode() == opcode::SERVICE_ACTION_IN_16
            && self.bytes[1] & 0x1F == SA_READ_CAPACITY_16
        {
            "READ CAPACITY(16)"
        } else {
            opcode_name(self.opcode())
        }
    }

    pub fn direction(&self) -> DataDirection {
        self.direction
    }

    /// Bytes the command moves (iSCSI Expected Data Transfer Length): the
    /// allocation length for Data-In commands, the data-out length for writes.
    pub fn expected_transfer_len(&self) -> u32 {
        self.transfer_len
    }
}

impl fmt::Debug for Cdb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cdb({} [", self.name())?;
        for (i, b) in self.as_bytes().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        write!(f, "] {:?} {})", self.direction, self.transfer_len)
    }
}

fn fit_u16(command: &'static str, field: &'static str, v: u64) -> Result<u16, CdbError> {
    u16::try_from(v).map_err(|_| CdbError::FieldOverflow {
        command,
        field,
        value: v,
        max: u64::from(u16::MAX),
    })
}

fn fit_u32(command: &'static str, field: &'static str, v: u64) -> Result<u32, CdbError> {
    u32::try_from(v).map_err(|_| CdbError::FieldOverflow {
        command,
        field,
        value: v,
        max: u64::from(u32::MAX),
    })
}

/// blocks × block_size as a u32 transfer length; checks the LBA range too.
fn data_len(
    command: &'static str,
    lba: u64,
    blocks: u64,
    block_size: u32,
) -> Result<u32, CdbError> {
    if block_size == 0 {
        return Err(CdbError::ZeroBlockSize { command });
    }
    if lba.checked_add(blocks).is_none() {
        return Err(CdbError::LbaRangeOverflow {
            command,
            lba,
            blocks,
        });
    }
    blocks
        .checked_mul(u64::from(block_size))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(CdbError::TransferTooLong {
            command,
            blocks,
            block_size,
        })
}

/// TEST UNIT READY (SPC-5 6.47): 6 bytes, opcode 0x00, no data.
pub fn test_unit_ready() -> Cdb {
    Cdb::build(
        [opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0],
        DataDirection::NoData,
        0,
    )
}

/// REQUEST SENSE (SPC-5 6.39). Rarely needed on iSCSI, which returns sense
/// data with the status (autosense).
pub fn request_sense(alloc_len: u8) -> Cdb {
    Cdb::build(
        [opcode::REQUEST_SENSE, 0, 0, 0, alloc_len, 0],
        DataDirection::Read,
        u32::from(alloc_len),
    )
}

/// Standard INQUIRY (SPC-5 6.7.1): EVPD=0, page 0, 16-bit allocation length.
pub fn inquiry(alloc_len: u16) -> Cdb {
    let [hi, lo] = alloc_len.to_be_bytes();
    Cdb::build(
        [opcode::INQUIRY, 0, 0, hi, lo, 0],
        DataDirection::Read,
        u32::from(alloc_len),
    )
}

/// INQUIRY for a VPD page (SPC-5 6.7.1): EVPD=1 (byte 1 bit 0), page code in byte 2.
pub fn inquiry_vpd(page: u8, alloc_len: u16) -> Cdb {
    let [hi, lo] = alloc_len.to_be_bytes();
    Cdb::build(
        [opcode::INQUIRY, 0x01, page, hi, lo, 0],
        DataDirection::Read,
        u32::from(alloc_len),
    )
}

/// READ CAPACITY(10) (SBC-4 5.20): returns 8 bytes.
pub fn read_capacity10() -> Cdb {
    Cdb::build(
        [opcode::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        DataDirection::Read,
        8,
    )
}

/// READ CAPACITY(16) (SBC-4 5.21): SERVICE ACTION IN(16) 0x9E, service
/// action 0x10, allocation length in bytes 10..14 (32 is the full data).
pub fn read_capacity16(alloc_len: u32) -> Cdb {
    let a = alloc_len.to_be_bytes();
    Cdb::build(
        [
            opcode::SERVICE_ACTION_IN_16,
            SA_READ_CAPACITY_16,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            a[0],
            a[1],
            a[2],
            a[3],
            0,
            0,
        ],
        DataDirection::Read,
        alloc_len,
    )
}

/// GET LBA STATUS(16) from `lba` (SBC-4 5.8): bytes 2..10 STARTING LOGICAL
/// BLOCK ADDRESS, 10..14 ALLOCATION LENGTH, byte 14 REPORT TYPE 0 (all).
pub fn get_lba_status(lba: u64, alloc_len: u32) -> Cdb {
    let l = lba.to_be_bytes();
    let a = alloc_len.to_be_bytes();
    Cdb::build(
        [
            opcode::SERVICE_ACTION_IN_16,
            SA_GET_LBA_STATUS,
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            l[5],
            l[6],
            l[7],
            a[0],
            a[1],
            a[2],
            a[3],
            0,
            0,
        ],
        DataDirection::Read,
        alloc_len,
    )
}

/// REPORT LUNS (SPC-5 6.33): SELECT REPORT in byte 2 (0 = all LUNs the
/// initiator can address), allocation length in bytes 6..10, which SPC
/// requires to be at least 16.
pub fn report_luns(select_report: u8, alloc_len: u32) -> Result<Cdb, CdbError> {
    if alloc_len < 16 {
        return Err(CdbError::AllocationTooSmall {
            command: "REPORT LUNS",
            min: 16,
            got: alloc_len,
        });
    }
    let a = alloc_len.to_be_bytes();
    Ok(Cdb::build(
        [
            opcode::REPORT_LUNS,
            0,
            select_report,
            0,
            0,
            0,
            a[0],
            a[1],
            a[2],
            a[3],
            0,
            0,
        ],
        DataDirection::Read,
        alloc_len,
    ))
}

/// FUA bit of READ/WRITE(10/16) byte 1 (SBC-4 5.16, 5.45).
const FUA: u8 = 0x08;

fn rw10(op: u8, flags: u8, lba: u32, blocks: u16, dir: DataDirection, len: u32) -> Cdb {
    let l = lba.to_be_bytes();
    let n = blocks.to_be_bytes();
    Cdb::build(
        [op, flags, l[0], l[1], l[2], l[3], 0, n[0], n[1], 0],
        dir,
        len,
    )
}

fn rw16(op: u8, flags: u8, lba: u64, blocks: u32, dir: DataDirection, len: u32) -> Cdb {
    let l = lba.to_be_bytes();
    let n = blocks.to_be_bytes();
    Cdb::build(
        [
            op, flags, l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], n[0], n[1], n[2], n[3], 0, 0,
        ],
        dir,
        len,
    )
}

/// Whether a (lba, blocks) pair fits the 10-byte READ/WRITE/SYNCHRONIZE CACHE form.
fn fits_10(lba: u64, blocks: u32) -> bool {
    lba <= u64::from(u32::MAX) && blocks <= u32::from(u16::MAX)
}

/// READ(10) (SBC-4 5.16): 32-bit LBA in bytes 2..6, 16-bit count in bytes 7..9.
/// A count of 0 transfers nothing.
pub fn read10(lba: u32, blocks: u16, block_size: u32) -> Result<Cdb, CdbError> {
    let len = data_len("READ(10)", lba.into(), blocks.into(), block_size)?;
    Ok(rw10(
        opcode::READ_10,
        0,
        lba,
        blocks,
        DataDirection::Read,
        len,
    ))
}

/// READ(16) (SBC-4 5.18): 64-bit LBA in bytes 2..10, 32-bit count in bytes 10..14.
pub fn read16(lba: u64, blocks: u32, block_size: u32) -> Result<Cdb, CdbError> {
    let len = data_len("READ(16)", lba, blocks.into(), block_size)?;
    Ok(rw16(
        opcode::READ_16,
        0,
        lba,
        blocks,
        DataDirection::Read,
        len,
    ))
}

/// READ `blocks` blocks at `lba`: READ(10) when both fit its fields, else READ(16).
pub fn read(lba: u64, blocks: u32, block_size: u32) -> Result<Cdb, CdbError> {
    if fits_10(lba, blocks) {
        read10(lba as u32, blocks as u16, block_size)
    } else {
        read16(lba, blocks, block_size)
    }
}

/// WRITE(10) (SBC-4 5.45); `fua` sets FUA (byte 1 bit 3): the data reaches
/// the medium before GOOD status.
pub fn write10(lba: u32, blocks: u16, block_size: u32, fua: bool) -> Result<Cdb, CdbError> {
    let len = data_len("WRITE(10)", lba.into(), blocks.into(), block_size)?;
    let flags = if fua { FUA } else { 0 };
    Ok(rw10(
        opcode::WRITE_10,
        flags,
        lba,
        blocks,
        DataDirection::Write,
        len,
    ))
}

/// WRITE(16) (SBC-4 5.47) with optional FUA.
pub fn write16(lba: u64, blocks: u32, block_size: u32, fua: bool) -> Result<Cdb, CdbError> {
    let len = data_len("WRITE(16)", lba, blocks.into(), block_size)?;
    let flags = if fua { FUA } else { 0 };
    Ok(rw16(
        opcode::WRITE_16,
        flags,
        lba,
        blocks,
        DataDirection::Write,
        len,
    ))
}

/// WRITE `blocks` blocks at `lba`: WRITE(10) when both fit, else WRITE(16).
pub fn write(lba: u64, blocks: u32, block_size: u32, fua: bool) -> Result<Cdb, CdbError> {
    if fits_10(lba, blocks) {
        write10(lba as u32, blocks as u16, block_size, fua)
    } else {
        write16(lba, blocks, block_size, fua)
    }
}

/// IMMED bit of SYNCHRONIZE CACHE byte 1 (SBC-4 5.24): status returns
/// before the cache is flushed.
const IMMED: u8 = 0x02;

/// SYNCHRONIZE CACHE(10) (SBC-4 5.24). `blocks` 0 means "from `lba` to the
/// end of the medium"; (0, 0) flushes everything.
pub fn sync_cache10(lba: u32, blocks: u16, immed: bool) -> Cdb {
    let flags = if immed { IMMED } else { 0 };
    rw10(
        opcode::SYNCHRONIZE_CACHE_10,
        flags,
        lba,
        blocks,
        DataDirection::NoData,
        0,
    )
}

/// SYNCHRONIZE CACHE(16) (SBC-4 5.25).
pub fn sync_cache16(lba: u64, blocks: u32, immed: bool) -> Cdb {
    let flags = if immed { IMMED } else { 0 };
    rw16(
        opcode::SYNCHRONIZE_CACHE_16,
        flags,
        lba,
        blocks,
        DataDirection::NoData,
        0,
    )
}

/// SYNCHRONIZE CACHE: the 10-byte form when `lba`/`blocks` fit it, else 16.
pub fn sync_cache(lba: u64, blocks: u32, immed: bool) -> Cdb {
    if fits_10(lba, blocks) {
        sync_cache10(lba as u32, blocks as u16, immed)
    } else {
        sync_cache16(lba, blocks, immed)
    }
}

/// UNMAP (SBC-4 5.30): ANCHOR in byte 1 bit 0, PARAMETER LIST LENGTH in
/// bytes 7..9. Send the bytes of an [`UnmapList`] as its Data-Out; most
/// callers want [`UnmapList::cdb`].
pub fn unmap(param_list_len: u16, anchor: bool) -> Cdb {
    let n = param_list_len.to_be_bytes();
    Cdb::build(
        [
            opcode::UNMAP,
            u8::from(anchor),
            0,
            0,
            0,
            0,
            0,
            n[0],
            n[1],
            0,
        ],
        DataDirection::Write,
        u32::from(param_list_len),
    )
}

/// The UNMAP parameter list (SBC-4 5.30.2): an 8-byte header and 16-byte
/// block descriptors (LBA, number of blocks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnmapList {
    descriptors: Vec<(u64, u32)>,
}

impl UnmapList {
    /// The most descriptors whose lengths fit the 16-bit header fields:
    /// 8 + 16·n ≤ 65535.
    pub const MAX_DESCRIPTORS: usize = (u16::MAX as usize - 8) / 16;

    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one descriptor: `blocks` blocks from `lba`.
    pub fn push(&mut self, lba: u64, blocks: u32) -> Result<(), CdbError> {
        if lba.checked_add(u64::from(blocks)).is_none() {
            return Err(CdbError::LbaRangeOverflow {
                command: "UNMAP",
                lba,
                blocks: blocks.into(),
            });
        }
        if self.descriptors.len() >= Self::MAX_DESCRIPTORS {
            return Err(CdbError::TooManyUnmapDescriptors {
                max: Self::MAX_DESCRIPTORS,
            });
        }
        self.descriptors.push((lba, blocks));
        Ok(())
    }

    /// Adds a range of any length, split into descriptors of at most
    /// `u32::MAX` blocks. On error nothing is added.
    pub fn push_range(&mut self, lba: u64, blocks: u64) -> Result<(), CdbError> {
        if lba.checked_add(blocks).is_none() {
            return Err(CdbError::LbaRangeOverflow {
                command: "UNMAP",
                lba,
                blocks,
            });
        }
        let per = u64::from(u32::MAX);
        let needed = blocks.div_ceil(per) as usize;
        if self.descriptors.len().saturating_add(needed) > Self::MAX_DESCRIPTORS {
            return Err(CdbError::TooManyUnmapDescriptors {
                max: Self::MAX_DESCRIPTORS,
            });
        }
        let (mut at, mut left) = (lba, blocks);
        while left > 0 {
            let n = left.min(per);
            self.descriptors.push((at, n as u32));
            at += n;
            left -= n;
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.descriptors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.descriptors.is_empty()
    }

    /// The (LBA, number of blocks) descriptors in order.
    pub fn descriptors(&self) -> &[(u64, u32)] {
        &self.descriptors
    }

    /// Total parameter list length in bytes: 8 + 16 per descriptor.
    pub fn byte_len(&self) -> usize {
        8 + 16 * self.descriptors.len()
    }

    /// The parameter list bytes: UNMAP DATA LENGTH (n − 2) in bytes 0..2,
    /// BLOCK DESCRIPTOR DATA LENGTH in 2..4, 4 reserved bytes, then per
    /// descriptor an 8-byte LBA, a 4-byte count and 4 reserved bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let total = self.byte_len();
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&((total - 2) as u16).to_be_bytes());
        out.extend_from_slice(&((16 * self.descriptors.len()) as u16).to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        for &(lba, blocks) in &self.descriptors {
            out.extend_from_slice(&lba.to_be_bytes());
            out.extend_from_slice(&blocks.to_be_bytes());
            out.extend_from_slice(&[0; 4]);
        }
        out
    }

    /// The UNMAP CDB that carries this list as its Data-Out.
    pub fn cdb(&self, anchor: bool) -> Cdb {
        // byte_len() ≤ 8 + 16·MAX_DESCRIPTORS ≤ u16::MAX by construction.
        unmap(self.byte_len() as u16, anchor)
    }
}

/// Options of WRITE SAME(16) byte 1 (SBC-4 5.50).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteSame {
    /// UNMAP (bit 3): deallocate the blocks if the device can (thin
    /// provisioning); they then read back as the block sent (or zeros).
    pub unmap: bool,
    /// ANCHOR (bit 4): anchor rather than deallocate.
    pub anchor: bool,
    /// NDOB (bit 0): no Data-Out buffer; the device writes zeros. Needs
    /// SBC-4 support, which the device reports in REPORT SUPPORTED
    /// OPERATION CODES; without it, send one zero block instead.
    pub ndob: bool,
}

/// WRITE SAME(16) (SBC-4 5.50): writes one block's data (or zeros with
/// NDOB) to `blocks` blocks from `lba`. `blocks` 0 means "to the end of
/// the medium" on some devices and is refused by others. The Data-Out is
/// one block unless NDOB is set.
pub fn write_same16(
    lba: u64,
    blocks: u32,
    block_size: u32,
    opts: WriteSame,
) -> Result<Cdb, CdbError> {
    const COMMAND: &str = "WRITE SAME(16)";
    if block_size == 0 {
        return Err(CdbError::ZeroBlockSize { command: COMMAND });
    }
    if lba.checked_add(u64::from(blocks)).is_none() {
        return Err(CdbError::LbaRangeOverflow {
            command: COMMAND,
            lba,
            blocks: blocks.into(),
        });
    }
    let mut flags = 0;
    if opts.anchor {
        flags |= 0x10;
    }
    if opts.unmap {
        flags |= 0x08;
    }
    let (dir, len) = if opts.ndob {
        flags |= 0x01;
        (DataDirection::NoData, 0)
    } else {
        (DataDirection::Write, block_size)
    };
    Ok(rw16(opcode::WRITE_SAME_16, flags, lba, blocks, dir, len))
}

fn check_page(command: &'static str, page: u8) -> Result<(), CdbError> {
    if page > 0x3F {
        return Err(CdbError::FieldOverflow {
            command,
            field: "page code",
            value: page.into(),
            max: 0x3F,
        });
    }
    Ok(())
}

/// MODE SENSE(6) (SPC-5 6.13) for current values (PC = 00b): DBD in byte 1
/// bit 3 (no block descriptors), page code in byte 2 bits 5..0, subpage in
/// byte 3, 8-bit allocation length in byte 4.
pub fn mode_sense6(page: u8, subpage: u8, dbd: bool, alloc_len: u8) -> Result<Cdb, CdbError> {
    check_page("MODE SENSE(6)", page)?;
    let flags = if dbd { 0x08 } else { 0 };
    Ok(Cdb::build(
        [opcode::MODE_SENSE_6, flags, page, subpage, alloc_len, 0],
        DataDirection::Read,
        alloc_len.into(),
    ))
}

/// MODE SENSE(10) (SPC-5 6.14): as (6), with LLBAA = 0 and a 16-bit
/// allocation length in bytes 7..9.
pub fn mode_sense10(page: u8, subpage: u8, dbd: bool, alloc_len: u16) -> Result<Cdb, CdbError> {
    check_page("MODE SENSE(10)", page)?;
    let flags = if dbd { 0x08 } else { 0 };
    let [hi, lo] = alloc_len.to_be_bytes();
    Ok(Cdb::build(
        [
            opcode::MODE_SENSE_10,
            flags,
            page,
            subpage,
            0,
            0,
            0,
            hi,
            lo,
            0,
        ],
        DataDirection::Read,
        alloc_len.into(),
    ))
}

/// A 64-bit block count as the 32-bit field of a 16-byte CDB, or an error
/// naming the command (for callers that hold counts as u64).
pub fn blocks_u32(command: &'static str, blocks: u64) -> Result<u32, CdbError> {
    fit_u32(command, "block count", blocks)
}

/// A 64-bit block count as the 16-bit field of a 10-byte CDB.
pub fn blocks_u16(command: &'static str, blocks: u64) -> Result<u16, CdbError> {
    fit_u16(command, "block count", blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_and_inquiries_change_nothing() {
        for c in [
            read(0, 1, 512).unwrap(),
            inquiry_vpd(0x83, 255),
            test_unit_ready(),
        ] {
            assert!(changes_nothing(c.padded()[0]), "{c:?}");
        }
        for op in [
            opcode::WRITE_10,
            opcode::WRITE_16,
            opcode::UNMAP,
            opcode::WRITE_SAME_16,
            opcode::SYNCHRONIZE_CACHE_10,
            0x89, // COMPARE AND WRITE
            0x5F, // PERSISTENT RESERVE OUT
            0xFF,
        ] {
            assert!(!changes_nothing(op), "{op:#x}");
        }
    }

    #[test]
    fn test_unit_ready_is_six_zero_bytes_without_data() {
        let cdb = test_unit_ready();
        assert_eq!(cdb.as_bytes(), &[0u8; 6]);
        assert_eq!(cdb.direction(), DataDirection::NoData);
        assert_eq!(cdb.expected_transfer_len(), 0);
    }

    #[test]
    fn standard_inquiry_sets_allocation_length_big_endian() {
        let cdb = inquiry(0x0124);
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x12, // INQUIRY
                0x00, // EVPD = 0
                0x00, // page code
                0x01, 0x24, // allocation length 292
                0x00, // control
            ]
        );
        assert_eq!(cdb.direction(), DataDirection::Read);
        assert_eq!(cdb.expected_transfer_len(), 292);
    }

    #[test]
    fn vpd_inquiry_sets_evpd_and_page_code() {
        let cdb = inquiry_vpd(0xB0, 64);
        assert_eq!(cdb.as_bytes(), &[0x12, 0x01, 0xB0, 0x00, 0x40, 0x00]);
    }

    #[test]
    fn read_capacity16_is_service_action_in_with_allocation_length() {
        let cdb = read_capacity16(32);
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x9E, // SERVICE ACTION IN(16)
                0x10, // service action READ CAPACITY(16)
                0, 0, 0, 0, 0, 0, 0, 0, // LBA (obsolete)
                0, 0, 0, 32, // allocation length
                0,  // PMI
                0,  // control
            ]
        );
        assert_eq!(cdb.name(), "READ CAPACITY(16)");
        assert_eq!(cdb.expected_transfer_len(), 32);
    }

    #[test]
    fn read_capacity10_expects_eight_bytes() {
        let cdb = read_capacity10();
        assert_eq!(cdb.as_bytes(), &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(cdb.expected_transfer_len(), 8);
    }

    #[test]
    fn report_luns_places_allocation_length_in_bytes_6_to_9() {
        let cdb = report_luns(0, 4096).unwrap();
        assert_eq!(
            cdb.as_bytes(),
            &[
                0xA0, // REPORT LUNS
                0x00, // reserved
                0x00, // SELECT REPORT
                0, 0, 0, // reserved
                0x00, 0x00, 0x10, 0x00, // allocation length 4096
                0x00, // reserved
                0x00, // control
            ]
        );
    }

    #[test]
    fn report_luns_refuses_allocation_length_below_16() {
        assert!(matches!(
            report_luns(0, 8),
            Err(CdbError::AllocationTooSmall { got: 8, .. })
        ));
    }

    #[test]
    fn read_uses_ten_byte_form_when_lba_and_count_fit() {
        let cdb = read(0x0012_3456, 8, 512).unwrap();
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x28, // READ(10)
                0x00, // flags
                0x00, 0x12, 0x34, 0x56, // LBA
                0x00, // group
                0x00, 0x08, // transfer length 8 blocks
                0x00, // control
            ]
        );
        assert_eq!(cdb.direction(), DataDirection::Read);
        assert_eq!(cdb.expected_transfer_len(), 4096);
    }

    #[test]
    fn read_switches_to_sixteen_bytes_when_lba_exceeds_32_bits() {
        let cdb = read(0x1_0000_0000, 1, 4096).unwrap();
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x88, // READ(16)
                0x00, // flags
                0, 0, 0, 0x01, 0, 0, 0, 0, // LBA 2^32
                0, 0, 0, 0x01, // 1 block
                0x00, // group
                0x00, // control
            ]
        );
    }

    #[test]
    fn read_switches_to_sixteen_bytes_when_count_exceeds_16_bits() {
        let cdb = read(0, 65_536, 512).unwrap();
        assert_eq!(cdb.opcode(), opcode::READ_16);
        assert_eq!(&cdb.as_bytes()[10..14], &[0x00, 0x01, 0x00, 0x00]);
        assert_eq!(cdb.expected_transfer_len(), 32 * 1024 * 1024);
    }

    #[test]
    fn read_whose_byte_count_overflows_32_bits_is_an_error() {
        let err = read(0, 0x0100_0000, 4096).unwrap_err();
        assert_eq!(
            err,
            CdbError::TransferTooLong {
                command: "READ(16)",
                blocks: 0x0100_0000,
                block_size: 4096
            }
        );
    }

    #[test]
    fn read_past_the_end_of_lba_space_is_an_error() {
        assert!(matches!(
            read(u64::MAX, 2, 512),
            Err(CdbError::LbaRangeOverflow { .. })
        ));
    }

    #[test]
    fn read_with_zero_block_size_is_an_error() {
        assert_eq!(
            read(0, 1, 0),
            Err(CdbError::ZeroBlockSize {
                command: "READ(10)"
            })
        );
    }

    #[test]
    fn write_with_fua_sets_byte_one_bit_three_in_both_forms() {
        let w10 = write(7, 1, 512, true).unwrap();
        let w16 = write(1 << 40, 1, 512, true).unwrap();
        assert_eq!(w10.as_bytes(), &[0x2A, 0x08, 0, 0, 0, 7, 0, 0, 1, 0]);
        assert_eq!(w16.opcode(), opcode::WRITE_16);
        assert_eq!(w16.as_bytes()[1], 0x08);
        assert_eq!(w10.direction(), DataDirection::Write);
        assert_eq!(w10.expected_transfer_len(), 512);
    }

    #[test]
    fn write_without_fua_leaves_flags_clear() {
        let cdb = write(0, 1, 512, false).unwrap();
        assert_eq!(cdb.as_bytes()[1], 0);
    }

    #[test]
    fn sync_cache_whole_device_is_ten_bytes_of_zero_range() {
        let cdb = sync_cache(0, 0, false);
        assert_eq!(cdb.as_bytes(), &[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(cdb.direction(), DataDirection::NoData);
    }

    #[test]
    fn sync_cache16_sets_immed_and_range() {
        let cdb = sync_cache16(0x1_0000_0000, 0x10, true);
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x91, // SYNCHRONIZE CACHE(16)
                0x02, // IMMED
                0, 0, 0, 1, 0, 0, 0, 0, // LBA
                0, 0, 0, 0x10, // number of blocks
                0,    // group
                0,    // control
            ]
        );
        assert_eq!(
            sync_cache(1 << 33, 1, false).opcode(),
            opcode::SYNCHRONIZE_CACHE_16
        );
    }

    #[test]
    fn unmap_list_encodes_header_and_descriptors() {
        let mut list = UnmapList::new();
        list.push(0x1000, 0x80).unwrap();
        list.push(0x2_0000_0000, 8).unwrap();

        let bytes = list.to_bytes();
        let cdb = list.cdb(false);

        #[rustfmt::skip]
        let expected: &[u8] = &[
            0x00, 0x26,             // UNMAP DATA LENGTH = 40 - 2
            0x00, 0x20,             // BLOCK DESCRIPTOR DATA LENGTH = 2 × 16
            0, 0, 0, 0,             // reserved
            0, 0, 0, 0, 0, 0, 0x10, 0x00, // LBA 0x1000
            0, 0, 0, 0x80,          // 128 blocks
            0, 0, 0, 0,             // reserved
            0, 0, 0, 0x02, 0, 0, 0, 0, // LBA 0x2_0000_0000
            0, 0, 0, 0x08,          // 8 blocks
            0, 0, 0, 0,             // reserved
        ];
        assert_eq!(bytes, expected);
        assert_eq!(
            cdb.as_bytes(),
            &[0x42, 0x00, 0, 0, 0, 0, 0, 0x00, 0x28, 0x00]
        );
        assert_eq!(cdb.direction(), DataDirection::Write);
        assert_eq!(cdb.expected_transfer_len(), 40);
    }

    #[test]
    fn unmap_push_range_splits_at_u32_max_blocks() {
        let mut list = UnmapList::new();
        list.push_range(10, u64::from(u32::MAX) + 5).unwrap();
        assert_eq!(
            list.descriptors(),
            &[(10, u32::MAX), (10 + u64::from(u32::MAX), 5)]
        );
    }

    #[test]
    fn unmap_list_refuses_more_descriptors_than_the_length_field_holds() {
        let mut list = UnmapList::new();
        for i in 0..UnmapList::MAX_DESCRIPTORS as u64 {
            list.push(i * 8, 8).unwrap();
        }
        let err = list.push(0, 1).unwrap_err();
        assert_eq!(
            err,
            CdbError::TooManyUnmapDescriptors {
                max: UnmapList::MAX_DESCRIPTORS
            }
        );
        assert!(list.byte_len() <= usize::from(u16::MAX));
        assert_eq!(
            list.cdb(false).expected_transfer_len() as usize,
            list.byte_len()
        );
    }

    #[test]
    fn write_same16_with_unmap_sends_one_block() {
        let cdb = write_same16(
            0x100,
            0x800,
            512,
            WriteSame {
                unmap: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            cdb.as_bytes(),
            &[
                0x93, // WRITE SAME(16)
                0x08, // UNMAP
                0, 0, 0, 0, 0, 0, 0x01, 0x00, // LBA 0x100
                0, 0, 0x08, 0x00, // 2048 blocks
                0,    // group
                0,    // control
            ]
        );
        assert_eq!(cdb.direction(), DataDirection::Write);
        assert_eq!(cdb.expected_transfer_len(), 512);
    }

    #[test]
    fn write_same16_with_ndob_has_no_data_out() {
        let cdb = write_same16(
            0,
            8,
            4096,
            WriteSame {
                unmap: true,
                ndob: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(cdb.as_bytes()[1], 0x09);
        assert_eq!(cdb.direction(), DataDirection::NoData);
        assert_eq!(cdb.expected_transfer_len(), 0);
    }

    #[test]
    fn mode_sense6_all_pages_with_dbd() {
        let cdb = mode_sense6(mode_page::ALL, 0, true, 0xFF).unwrap();
        assert_eq!(cdb.as_bytes(), &[0x1A, 0x08, 0x3F, 0x00, 0xFF, 0x00]);
        assert_eq!(cdb.expected_transfer_len(), 255);
    }

    #[test]
    fn mode_sense10_caching_page_with_block_descriptors() {
        let cdb = mode_sense10(mode_page::CACHING, 0, false, 0x200).unwrap();
        assert_eq!(
            cdb.as_bytes(),
            &[0x5A, 0x00, 0x08, 0x00, 0, 0, 0, 0x02, 0x00, 0x00]
        );
    }

    #[test]
    fn mode_sense_page_code_above_six_bits_is_an_error() {
        assert!(matches!(
            mode_sense6(0x40, 0, false, 4),
            Err(CdbError::FieldOverflow { max: 0x3F, .. })
        ));
    }

    #[test]
    fn raw_cdb_rejects_lengths_outside_6_to_16() {
        assert_eq!(
            Cdb::from_bytes(&[0; 5], DataDirection::NoData, 0),
            Err(CdbError::BadLength { len: 5 })
        );
        assert_eq!(
            Cdb::from_bytes(&[0; 17], DataDirection::NoData, 0),
            Err(CdbError::BadLength { len: 17 })
        );
        let cdb = Cdb::from_bytes(&[0x12, 0, 0, 0, 36, 0], DataDirection::Read, 36).unwrap();
        assert_eq!(cdb.padded()[..6], [0x12, 0, 0, 0, 36, 0]);
        assert_eq!(cdb.padded()[6..], [0; 10]);
    }

    #[test]
    fn debug_shows_name_hex_direction_and_length() {
        let s = format!("{:?}", read10(1, 1, 512).unwrap());
        assert_eq!(s, "Cdb(READ(10) [28 00 00 00 00 01 00 00 01 00] Read 512)");
    }

    #[test]
    fn blocks_helpers_refuse_counts_that_do_not_fit() {
        assert_eq!(blocks_u16("READ(10)", 65_535), Ok(65_535));
        assert!(blocks_u16("READ(10)", 65_536).is_err());
        assert!(blocks_u32("READ(16)", 1 << 32).is_err());
    }
}
