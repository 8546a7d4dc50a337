//! SCSI parameter data and sense parsers (`scsi::*`): INQUIRY, VPD pages,
//! READ CAPACITY, REPORT LUNS, MODE SENSE, sense data and the status/sense
//! to error mapping. All of it comes from the target.
//!
//! Input: a byte choosing a shape, then the body. Shapes put a valid-looking
//! header in front of the body (a VPD page code and length, a REPORT LUNS
//! list length, a MODE SENSE header, a sense response code) so the parsers
//! get past their first checks. Every parser must return; a `Truncated`
//! error must ask for more bytes than it was given.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::scsi::{capacity, inquiry, luns, mode, sense, vpd, ParseError};
use rlun_fuzz::Input;

fn check<T>(r: Result<T, ParseError>, len: usize) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            if let Some(n) = e.needed() {
                assert!(n > len, "Truncated asks for {n} bytes but got {len}: {e}");
            }
            let _ = e.to_string();
            None
        }
    }
}

fn all_parsers(buf: &[u8]) {
    let n = buf.len();
    if let Some(i) = check(inquiry::StandardInquiry::parse(buf), n) {
        let _ = (
            i.version_name(),
            i.is_connected_disk(),
            i.device_type.name(),
        );
    }
    if let Some(p) = check(vpd::SupportedPages::parse(buf), n) {
        let _ = p.supports(0x83);
    }
    let _ = check(vpd::UnitSerialNumber::parse(buf), n);
    if let Some(id) = check(vpd::DeviceIdentification::parse(buf), n) {
        for d in &id.designators {
            let _ = d.to_text();
        }
        let _ = id.lu_name();
    }
    if let Some(b) = check(vpd::BlockLimits::parse(buf), n) {
        let _ = (b.max_transfer_blocks(), b.supports_unmap());
    }
    if let Some(l) = check(vpd::LogicalBlockProvisioning::parse(buf), n) {
        let _ = l.unmapped_reads_zero();
    }
    let _ = vpd::page_length(buf);
    if let Some(c) = check(capacity::ReadCapacity10::parse(buf), n) {
        let _ = (c.needs_16(), c.block_count(), c.capacity_bytes());
    }
    if let Some(c) = check(capacity::ReadCapacity16::parse(buf), n) {
        let _ = (
            c.block_count(),
            c.capacity_bytes(),
            c.physical_block_length(),
        );
    }
    if let Some(r) = check(luns::ReportLuns::parse(buf), n) {
        for number in r.numbers() {
            assert!(r.find(number).is_some());
        }
    }
    for m in [mode::ModeSense::parse6(buf), mode::ModeSense::parse10(buf)] {
        if let Some(m) = check(m, n) {
            let _ = m.caching();
            let _ = m.page(0x08);
        }
    }
    if let Some(s) = check(sense::Sense::parse(buf), n) {
        let _ = (
            s.to_string(),
            s.field_pointer(),
            s.progress(),
            s.description(),
        );
    }
    let _ = sense::Sense::from_iscsi_data_segment(buf);
    for status in [0x00u8, 0x02, 0x08, 0x18, 0x28, 0x30, 0x40, 0x77] {
        let e = sense::ScsiError::from_status_and_sense_bytes(sense::Status::from(status), buf);
        let _ = (
            e.to_string(),
            e.to_errno(),
            e.is_retryable(),
            e.sense_key(),
            e.asc_ascq(),
        );
        let _ = (
            e.is_unit_attention(),
            e.is_write_protected(),
            e.is_lba_out_of_range(),
        );
        let _ = sense::ScsiError::check(sense::Status::from(status), buf);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let shape = input.u8();
    let body = input.rest();
    let declared = |slack: u8| body.len().saturating_sub(usize::from(slack & 0x0f));
    let mut buf = Vec::with_capacity(body.len() + 8);
    match shape >> 4 {
        0 => {
            // VPD page header: qualifier/type, page code, 16-bit length.
            let page = [0x00, 0x80, 0x83, 0xb0, 0xb2, 0xb1, 0x86, 0x00][usize::from(shape & 7)];
            buf.extend_from_slice(&[0x00, page]);
            buf.extend_from_slice(&(declared(shape) as u16).to_be_bytes());
        }
        1 => {
            // REPORT LUNS: 32-bit list length, 4 reserved bytes.
            buf.extend_from_slice(&(declared(shape) as u32).to_be_bytes());
            buf.extend_from_slice(&[0; 4]);
        }
        2 => {
            // MODE SENSE(6) header: length, medium type, flags, BD length.
            buf.extend_from_slice(&[declared(shape).min(255) as u8, 0, 0, (shape & 3) * 8]);
        }
        3 => {
            // MODE SENSE(10) header.
            buf.extend_from_slice(&(declared(shape) as u16).to_be_bytes());
            buf.extend_from_slice(&[0, 0, shape & 1, 0, 0, (shape & 6) * 4]);
        }
        4 => {
            // Sense data: fixed or descriptor format, current or deferred.
            buf.push(0x70 + (shape & 3));
        }
        5 => {
            // iSCSI SCSI Response data segment: SenseLength + sense data.
            buf.extend_from_slice(&(declared(shape) as u16).to_be_bytes());
            buf.push(0x70 + (shape & 3));
        }
        _ => {}
    }
    buf.extend_from_slice(body);
    all_parsers(&buf);
    for raw in body.chunks_exact(8).take(16) {
        let raw: [u8; 8] = raw.try_into().expect("8 bytes");
        let n = luns::lun_from_bytes(raw);
        let _ = luns::LunAddress::decode(raw).number();
        if n < 0x4000 {
            assert_eq!(luns::lun_from_bytes(luns::lun_to_bytes(n)), n);
        }
    }
});
