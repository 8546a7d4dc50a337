//! MODE SENSE(6)/(10) parameter data (SPC-5 7.5.5, SBC-4 6.5).
//!
//! What the layers above need from it: the write-protect bit (WP) of the
//! device-specific parameter, DPOFUA (whether FUA is honoured), and the
//! caching page's WCE bit (whether SYNCHRONIZE CACHE matters).

use super::{be16_at, be32_at, be64_at, need, slice_at, u8_at, ParseError};

/// The first mode parameter block descriptor (SBC-4 6.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    /// NUMBER OF LOGICAL BLOCKS (0 in the short form can mean "too many").
    pub blocks: u64,
    pub block_length: u32,
}

/// One mode page, header stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModePage {
    pub code: u8,
    /// SUBPAGE CODE, for pages in the sub_page format (SPF = 1).
    pub subpage: Option<u8>,
    /// PS: the page can be saved.
    pub saveable: bool,
    /// The page parameters after the 2- (or 4-) byte page header.
    pub data: Vec<u8>,
}

/// The caching mode page (SBC-4 6.5.5) bits that matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachingPage {
    /// WCE: write cache enabled; writes may sit in volatile cache until
    /// SYNCHRONIZE CACHE.
    pub write_cache_enabled: bool,
    /// RCD: read cache disabled.
    pub read_cache_disabled: bool,
}

/// Parsed MODE SENSE data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeSense {
    /// The full length the target has (MODE DATA LENGTH + its own field).
    pub full_length: usize,
    pub medium_type: u8,
    /// DEVICE-SPECIFIC PARAMETER, raw.
    pub device_specific: u8,
    /// WP (device-specific parameter bit 7, SBC-4 6.5.1): write protected.
    pub write_protected: bool,
    /// DPOFUA (bit 4): the device honours DPO and FUA.
    pub dpofua: bool,
    /// LONGLBA (MODE SENSE(10) only): block descriptors are 16 bytes.
    pub long_lba: bool,
    pub block_descriptor: Option<BlockDescriptor>,
    /// Pages that fit wholly in the buffer (a page cut off by the
    /// allocation length is left out).
    pub pages: Vec<ModePage>,
}

impl ModeSense {
    /// MODE SENSE(6) data: byte 0 MODE DATA LENGTH (n − 1), 1 MEDIUM TYPE,
    /// 2 DEVICE-SPECIFIC PARAMETER, 3 BLOCK DESCRIPTOR LENGTH.
    pub fn parse6(buf: &[u8]) -> Result<ModeSense, ParseError> {
        need(buf, 4, "MODE SENSE(6) data")?;
        let full_length = usize::from(u8_at(buf, 0)) + 1;
        let bd_len = usize::from(u8_at(buf, 3));
        Ok(Self::build(
            buf,
            full_length,
            u8_at(buf, 1),
            u8_at(buf, 2),
            false,
            4,
            bd_len,
        ))
    }

    /// MODE SENSE(10) data: bytes 0..2 MODE DATA LENGTH (n − 2), 2 MEDIUM
    /// TYPE, 3 DEVICE-SPECIFIC PARAMETER, 4 LONGLBA (bit 0), 6..8 BLOCK
    /// DESCRIPTOR LENGTH.
    pub fn parse10(buf: &[u8]) -> Result<ModeSense, ParseError> {
        need(buf, 8, "MODE SENSE(10) data")?;
        let full_length = usize::from(be16_at(buf, 0)) + 2;
        let bd_len = usize::from(be16_at(buf, 6));
        Ok(Self::build(
            buf,
            full_length,
            u8_at(buf, 2),
            u8_at(buf, 3),
            u8_at(buf, 4) & 0x01 != 0,
            8,
            bd_len,
        ))
    }

    fn build(
        buf: &[u8],
        full_length: usize,
        medium_type: u8,
        device_specific: u8,
        long_lba: bool,
        header_len: usize,
        bd_len: usize,
    ) -> ModeSense {
        let data = slice_at(buf, 0, full_length);
        let bd = slice_at(data, header_len, bd_len);
        let block_descriptor = if long_lba && bd.len() >= 16 {
            // Long LBA descriptor: 0..8 blocks, 12..16 block length.
            Some(BlockDescriptor {
                blocks: be64_at(bd, 0),
                block_length: be32_at(bd, 12),
            })
        } else if !long_lba && bd.len() >= 8 {
            // Short descriptor: 0..4 blocks, 5..8 block length (24 bits).
            Some(BlockDescriptor {
                blocks: be32_at(bd, 0).into(),
                block_length: be32_at(bd, 4) & 0x00FF_FFFF,
            })
        } else {
            None
        };
        ModeSense {
            full_length,
            medium_type,
            device_specific,
            write_protected: device_specific & 0x80 != 0,
            dpofua: device_specific & 0x10 != 0,
            long_lba,
            block_descriptor,
            pages: parse_pages(slice_at(
                data,
                header_len.saturating_add(bd_len),
                data.len(),
            )),
        }
    }

    /// The page with this code (page format, no subpage).
    pub fn page(&self, code: u8) -> Option<&ModePage> {
        self.pages
            .iter()
            .find(|p| p.code == code && p.subpage.is_none())
    }

    /// The caching page (0x08), if the target returned it: byte 2 of the
    /// page holds WCE (bit 2) and RCD (bit 0).
    pub fn caching(&self) -> Option<CachingPage> {
        let page = self.page(0x08)?;
        let flags = *page.data.first()?;
        Some(CachingPage {
            write_cache_enabled: flags & 0x04 != 0,
            read_cache_disabled: flags & 0x01 != 0,
        })
    }
}

/// Mode pages (SPC-5 7.5.7): byte 0 PS (7) SPF (6) PAGE CODE (5..0); page
/// format: byte 1 PAGE LENGTH; sub_page format: byte 1 SUBPAGE CODE, bytes
/// 2..4 PAGE LENGTH.
fn parse_pages(mut rest: &[u8]) -> Vec<ModePage> {
    let mut pages = Vec::new();
    while rest.len() >= 2 {
        let b0 = rest[0];
        let spf = b0 & 0x40 != 0;
        let (hdr, len, subpage) = if spf {
            if rest.len() < 4 {
                break;
            }
            (4, usize::from(be16_at(rest, 2)), Some(rest[1]))
        } else {
            (2, usize::from(rest[1]), None)
        };
        if rest.len() < hdr + len {
            break; // cut off by the allocation length
        }
        pages.push(ModePage {
            code: b0 & 0x3F,
            subpage,
            saveable: b0 & 0x80 != 0,
            data: rest[hdr..hdr + len].to_vec(),
        });
        rest = &rest[hdr + len..];
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MODE SENSE(6), all pages, as a disk target answers (header, one short
    /// block descriptor, caching page, control page).
    #[rustfmt::skip]
    const MODE6_ALL: [u8; 44] = [
        0x2B,                   // mode data length 43 (44 - 1)
        0x00,                   // medium type
        0x10,                   // device-specific: WP = 0, DPOFUA = 1
        0x08,                   // block descriptor length 8
        0x00, 0x20, 0x00, 0x00, // number of blocks 0x200000
        0x00,                   // reserved
        0x00, 0x02, 0x00,       // block length 512
        0x08,                   // caching page, PS = 0
        0x12,                   // page length 18
        0x14,                   // DISC, WCE; RCD = 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // rest of caching page
        0x0A,                   // control page
        0x0A,                   // page length 10
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn mode_sense6_reads_header_descriptor_and_pages() {
        let m = ModeSense::parse6(&MODE6_ALL).unwrap();
        assert_eq!(m.full_length, 44);
        assert!(!m.write_protected);
        assert!(m.dpofua);
        assert_eq!(
            m.block_descriptor,
            Some(BlockDescriptor {
                blocks: 0x20_0000,
                block_length: 512
            })
        );
        assert_eq!(m.pages.len(), 2);
        assert_eq!(m.pages[1].code, 0x0A);
        assert_eq!(
            m.caching(),
            Some(CachingPage {
                write_cache_enabled: true,
                read_cache_disabled: false
            })
        );
    }

    #[test]
    fn write_protect_bit_is_bit_7_of_device_specific_parameter() {
        let buf = [0x03, 0x00, 0x80, 0x00]; // header only, WP set
        let m = ModeSense::parse6(&buf).unwrap();
        assert!(m.write_protected);
        assert_eq!(m.block_descriptor, None);
        assert!(m.pages.is_empty());
    }

    #[test]
    fn mode_sense10_with_long_lba_descriptor() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x16,             // mode data length 22 (24 - 2)
            0x00,                   // medium type
            0x80,                   // WP
            0x01,                   // LONGLBA
            0x00,                   // reserved
            0x00, 0x10,             // block descriptor length 16
            0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, // blocks 2^33
            0x00, 0x00, 0x00, 0x00, // reserved
            0x00, 0x00, 0x10, 0x00, // block length 4096
        ];
        let m = ModeSense::parse10(&buf).unwrap();
        assert!(m.write_protected && m.long_lba);
        assert_eq!(
            m.block_descriptor,
            Some(BlockDescriptor {
                blocks: 1 << 33,
                block_length: 4096
            })
        );
    }

    #[test]
    fn page_cut_off_by_allocation_length_is_left_out() {
        let m = ModeSense::parse6(&MODE6_ALL[..30]).unwrap();
        assert_eq!(m.full_length, 44);
        assert!(m.pages.is_empty());
        assert_eq!(m.caching(), None);
    }

    #[test]
    fn subpage_format_pages_are_parsed() {
        #[rustfmt::skip]
        let buf = [
            0x0B, 0x00, 0x00, 0x00, // header: length 11, no block descriptors
            0x4A,                   // SPF, page 0x0A
            0x01,                   // subpage 1
            0x00, 0x04,             // page length 4
            0xAA, 0xBB, 0xCC, 0xDD, // parameters
        ];
        let m = ModeSense::parse6(&buf).unwrap();
        assert_eq!(
            m.pages,
            vec![ModePage {
                code: 0x0A,
                subpage: Some(1),
                saveable: false,
                data: vec![0xAA, 0xBB, 0xCC, 0xDD]
            }]
        );
        assert_eq!(m.page(0x0A), None);
    }

    #[test]
    fn short_headers_are_truncated_errors() {
        assert_eq!(ModeSense::parse6(&[0x03]).unwrap_err().needed(), Some(4));
        assert_eq!(ModeSense::parse10(&[0; 7]).unwrap_err().needed(), Some(8));
    }
}
