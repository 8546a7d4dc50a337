//! Sans-IO: what a ublk I/O descriptor asks for, and the device
//! parameters an export is announced with. Unit-tested without a kernel.

use libublk::sys;

use crate::export::ExportInfo;

/// One request of `/dev/ublkbN`, decoded from its I/O descriptor
/// (`ublksrv_io_desc`: op and flags, start sector, sector count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Read {
        offset: u64,
        len: usize,
    },
    /// `fua`: REQ_FUA, the data must be durable when this completes.
    Write {
        offset: u64,
        len: usize,
        fua: bool,
    },
    Flush,
    Discard {
        offset: u64,
        len: u64,
    },
    /// `unmap`: the kernel allows unmapping (no REQ_NOUNMAP).
    WriteZeroes {
        offset: u64,
        len: u64,
        unmap: bool,
    },
    /// An op rlun does not serve (zoned ops, WRITE_SAME): EOPNOTSUPP.
    Unsupported(u32),
    /// A transfer larger than the I/O buffer the device was set up with
    /// (the kernel keeps to `max_sectors`; a device recovered with other
    /// limits could break that): EINVAL rather than a short copy.
    TooLarge {
        len: u64,
    },
}

/// Decode one descriptor. `buf_len` is the per-tag I/O buffer.
pub fn decode(op_flags: u32, start_sector: u64, nr_sectors: u32, buf_len: usize) -> Request {
    let offset = start_sector << 9;
    let len = u64::from(nr_sectors) << 9;
    let data = |mk: fn(u64, usize) -> Request| {
        if len > buf_len as u64 {
            Request::TooLarge { len }
        } else {
            mk(offset, len as usize)
        }
    };
    match op_flags & 0xff {
        sys::UBLK_IO_OP_READ => data(|offset, len| Request::Read { offset, len }),
        sys::UBLK_IO_OP_WRITE => {
            let fua = op_flags & sys::UBLK_IO_F_FUA != 0;
            match data(|offset, len| Request::Write {
                offset,
                len,
                fua: false,
            }) {
                Request::Write { offset, len, .. } => Request::Write { offset, len, fua },
                other => other,
            }
        }
        sys::UBLK_IO_OP_FLUSH => Request::Flush,
        sys::UBLK_IO_OP_DISCARD => Request::Discard { offset, len },
        sys::UBLK_IO_OP_WRITE_ZEROES => Request::WriteZeroes {
            offset,
            len,
            unmap: op_flags & sys::UBLK_IO_F_NOUNMAP == 0,
        },
        op => Request::Unsupported(op),
    }
}

/// `log2(n)` of a power of two, clamped to `lo..=hi`.
fn shift(n: u64, lo: u8, hi: u8) -> u8 {
    let s = if n.is_power_of_two() {
        n.trailing_zeros() as u8
    } else {
        // The largest power of two below n.
        (63 - n.max(1).leading_zeros()) as u8
    };
    s.clamp(lo, hi)
}

/// The per-tag I/O buffer (and so the largest request the kernel sends):
/// the LUN's largest transfer, at most `cap`, at least 4 KiB, a multiple
/// of 4 KiB.
pub fn io_buf_bytes(info: &ExportInfo, cap: u32) -> u32 {
    let max = info.max_transfer.clamp(4096, u64::from(cap)) as u32;
    max & !4095
}

/// The device parameters for `info` with a per-tag buffer of `buf`:
/// block sizes from the LUN (the logical block at most a page, as the
/// kernel requires), `max_sectors` from the buffer, a volatile cache with
/// FUA (so that the kernel sends FLUSH and FUA writes, which rlun's cache
/// and the target's need), discard where the LUN can unmap, write-zeroes
/// always (the export writes zeros where it cannot unmap), read-only from
/// the export.
pub fn params(info: &ExportInfo, buf: u32) -> sys::ublk_params {
    let logical = shift(u64::from(info.block_size), 9, 12);
    let physical = shift(u64::from(info.preferred_size), logical, 20).max(logical);
    let mut attrs = sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA;
    if info.read_only {
        attrs |= sys::UBLK_ATTR_READ_ONLY;
    }
    let max_sectors = buf >> 9;
    sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_DISCARD,
        basic: sys::ublk_param_basic {
            attrs,
            logical_bs_shift: logical,
            physical_bs_shift: physical,
            io_opt_shift: physical,
            io_min_shift: logical,
            max_sectors,
            dev_sectors: info.size >> 9,
            ..Default::default()
        },
        discard: sys::ublk_param_discard {
            discard_alignment: 0,
            discard_granularity: 1 << physical,
            max_discard_sectors: if info.can_trim && !info.read_only {
                u32::MAX >> 9
            } else {
                0
            },
            max_write_zeroes_sectors: if info.read_only { 0 } else { u32::MAX >> 9 },
            max_discard_segments: 1,
            reserved0: 0,
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ExportInfo {
        ExportInfo {
            size: 64 << 20,
            block_size: 512,
            preferred_size: 4096,
            max_transfer: 8 << 20,
            read_only: false,
            can_trim: true,
            fast_zero: true,
        }
    }

    #[test]
    fn descriptors_decode_to_requests() {
        let buf = 512 << 10;
        assert_eq!(
            decode(sys::UBLK_IO_OP_READ, 8, 8, buf),
            Request::Read {
                offset: 4096,
                len: 4096
            }
        );
        assert_eq!(
            decode(sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_F_FUA, 0, 1, buf),
            Request::Write {
                offset: 0,
                len: 512,
                fua: true
            }
        );
        assert_eq!(
            decode(sys::UBLK_IO_OP_WRITE, 2, 1, buf),
            Request::Write {
                offset: 1024,
                len: 512,
                fua: false
            }
        );
        assert_eq!(decode(sys::UBLK_IO_OP_FLUSH, 0, 0, buf), Request::Flush);
        // Discard and write-zeroes carry no data: any length goes.
        assert_eq!(
            decode(sys::UBLK_IO_OP_DISCARD, 16, 1 << 21, buf),
            Request::Discard {
                offset: 8192,
                len: 1 << 30
            }
        );
        assert_eq!(
            decode(sys::UBLK_IO_OP_WRITE_ZEROES, 0, 8, buf),
            Request::WriteZeroes {
                offset: 0,
                len: 4096,
                unmap: true
            }
        );
        assert_eq!(
            decode(
                sys::UBLK_IO_OP_WRITE_ZEROES | sys::UBLK_IO_F_NOUNMAP,
                0,
                8,
                buf
            ),
            Request::WriteZeroes {
                offset: 0,
                len: 4096,
                unmap: false
            }
        );
        assert_eq!(
            decode(sys::UBLK_IO_OP_WRITE_SAME, 0, 8, buf),
            Request::Unsupported(sys::UBLK_IO_OP_WRITE_SAME)
        );
        assert_eq!(
            decode(sys::UBLK_IO_OP_ZONE_APPEND, 0, 8, buf),
            Request::Unsupported(sys::UBLK_IO_OP_ZONE_APPEND)
        );
        // More than the tag's buffer: refused, never copied short.
        assert_eq!(
            decode(sys::UBLK_IO_OP_READ, 0, (buf as u32 >> 9) + 1, buf),
            Request::TooLarge {
                len: buf as u64 + 512
            }
        );
        assert_eq!(
            decode(
                sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_F_FUA,
                0,
                (buf as u32 >> 9) + 1,
                buf
            ),
            Request::TooLarge {
                len: buf as u64 + 512
            }
        );
    }

    #[test]
    fn parameters_follow_the_lun() {
        let p = params(&info(), 512 << 10);
        assert_eq!(p.basic.logical_bs_shift, 9);
        assert_eq!(p.basic.physical_bs_shift, 12);
        assert_eq!(p.basic.max_sectors, 1024);
        assert_eq!(p.basic.dev_sectors, (64 << 20) >> 9);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_VOLATILE_CACHE, 0);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_FUA, 0);
        assert_eq!(p.basic.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
        assert_eq!(p.discard.max_discard_segments, 1);
        assert_ne!(p.discard.max_discard_sectors, 0);
        assert_eq!(p.discard.discard_granularity, 4096);

        let ro = ExportInfo {
            read_only: true,
            ..info()
        };
        let p = params(&ro, 512 << 10);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
        assert_eq!(p.discard.max_discard_sectors, 0);
        assert_eq!(p.discard.max_write_zeroes_sectors, 0);

        let no_unmap = ExportInfo {
            can_trim: false,
            ..info()
        };
        assert_eq!(params(&no_unmap, 512 << 10).discard.max_discard_sectors, 0);
        // The kernel needs a granularity even without discard.
        assert_ne!(params(&no_unmap, 512 << 10).discard.discard_granularity, 0);

        // 4 KiB-sector LUN; blocks larger than a page are clamped.
        let big = ExportInfo {
            block_size: 4096,
            preferred_size: 4096,
            ..info()
        };
        assert_eq!(params(&big, 512 << 10).basic.logical_bs_shift, 12);
        let huge = ExportInfo {
            block_size: 65536,
            preferred_size: 65536,
            ..info()
        };
        let p = params(&huge, 512 << 10);
        assert_eq!(p.basic.logical_bs_shift, 12);
        assert!(p.basic.physical_bs_shift >= p.basic.logical_bs_shift);
    }

    #[test]
    fn buffers_are_page_multiples_within_the_cap() {
        assert_eq!(io_buf_bytes(&info(), 512 << 10), 512 << 10);
        let small = ExportInfo {
            max_transfer: 65536 + 100,
            ..info()
        };
        assert_eq!(io_buf_bytes(&small, 512 << 10), 65536);
        let tiny = ExportInfo {
            max_transfer: 512,
            ..info()
        };
        assert_eq!(io_buf_bytes(&tiny, 512 << 10), 4096);
    }
}
