//! Whole PDUs and their framing (RFC 7143 §11.2): [`Pdu`] (BHS, AHS and
//! data segment), how long a received PDU is once its BHS is in
//! ([`frame_length`], [`header_lengths`]; `Ok(None)` while fewer than 48
//! bytes are there, a normal outcome), decoding a frame or a header with its
//! digests checked (CRC32C, §11.2.3, §11.2.4) and the encoded form for one
//! vectored write ([`WireFrame`]: header inline, data shared, padding and
//! digest in a small tail).

use bytes::Bytes;
use crc32c::crc32c;

use super::bhs::{Bhs, PduError, BHS_LEN, MAX_DATA_SEGMENT};

/// Which digests are in force on a connection (negotiated at login).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// Limits applied while framing received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    pub digests: Digests,
    /// The largest data segment we accept (our declared
    /// MaxRecvDataSegmentLength, or 8192 during login for safety margin the
    /// caller may raise).
    pub max_data_segment: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            digests: Digests::default(),
            // Login PDUs may legitimately carry up to 8192 bytes (§6.6 default).
            max_data_segment: 8192,
        }
    }
}

/// Bytes of padding that follow `len` bytes of data to reach a 4-byte boundary.
pub fn pad_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// A whole PDU: header, optional AHS, data segment (without padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: Bhs,
    /// Raw AHS bytes (a multiple of 4; empty in practice for an initiator).
    pub ahs: Bytes,
    pub data: Bytes,
}

impl Pdu {
    pub fn new(bhs: Bhs) -> Pdu {
        Pdu {
            bhs,
            ahs: Bytes::new(),
            data: Bytes::new(),
        }
    }

    pub fn with_data(bhs: Bhs, data: Bytes) -> Pdu {
        Pdu {
            bhs,
            ahs: Bytes::new(),
            data,
        }
    }

    /// Encode for sending. The data segment is not copied: the returned
    /// frame references it.
    pub fn encode(&self, digests: Digests) -> WireFrame {
        debug_assert!(self.ahs.len().is_multiple_of(4) && self.ahs.len() <= 1020);
        debug_assert!(self.data.len() <= MAX_DATA_SEGMENT as usize);
        let bhs = self.bhs.encode(self.ahs.len(), self.data.len() as u32);
        let mut head = FrameHead::new(&bhs, &self.ahs);
        if digests.header {
            let crc = crc32c(&head);
            head.push_digest(crc.to_le_bytes());
        }
        let mut tail = [0u8; 7];
        let pad = pad_len(self.data.len());
        let mut tail_len = 0;
        if !self.data.is_empty() {
            tail_len = pad;
            if digests.data {
                let mut crc = crc32c::crc32c(&self.data);
                crc = crc32c::crc32c_append(crc, &[0u8; 3][..pad]);
                tail[pad..pad + 4].copy_from_slice(&crc.to_le_bytes());
                tail_len += 4;
            }
        }
        WireFrame {
            head,
            data: self.data.clone(),
            tail,
            tail_len,
        }
    }
}

/// The header part of a [`WireFrame`]: BHS, AHS and header digest. A
/// frame without AHS (every PDU rlun sends but a command with an extended
/// CDB) keeps it inline, so encoding a command allocates nothing; it reads
/// as a byte slice.
#[derive(Debug, Clone)]
pub enum FrameHead {
    /// BHS and, with header digests, the digest: `len` bytes of `buf`.
    Inline { buf: [u8; BHS_LEN + 4], len: u8 },
    /// With an AHS.
    Heap(Vec<u8>),
}

impl FrameHead {
    fn new(bhs: &[u8; BHS_LEN], ahs: &[u8]) -> FrameHead {
        if ahs.is_empty() {
            let mut buf = [0u8; BHS_LEN + 4];
            buf[..BHS_LEN].copy_from_slice(bhs);
            FrameHead::Inline {
                buf,
                len: BHS_LEN as u8,
            }
        } else {
            let mut v = Vec::with_capacity(BHS_LEN + ahs.len() + 4);
            v.extend_from_slice(bhs);
            v.extend_from_slice(ahs);
            FrameHead::Heap(v)
        }
    }

    fn push_digest(&mut self, crc: [u8; 4]) {
        match self {
            FrameHead::Inline { buf, len } => {
                let at = usize::from(*len);
                buf[at..at + 4].copy_from_slice(&crc);
                *len += 4;
            }
            FrameHead::Heap(v) => v.extend_from_slice(&crc),
        }
    }
}

impl std::ops::Deref for FrameHead {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FrameHead::Inline { buf, len } => &buf[..usize::from(*len)],
            FrameHead::Heap(v) => v,
        }
    }
}

/// An encoded PDU, in three parts for one vectored write.
#[derive(Debug, Clone)]
pub struct WireFrame {
    /// BHS, AHS and header digest.
    pub head: FrameHead,
    /// The data segment (shared, not copied).
    pub data: Bytes,
    tail: [u8; 7],
    tail_len: usize,
}

impl WireFrame {
    /// Padding and data digest that follow the data.
    pub fn tail(&self) -> &[u8] {
        &self.tail[..self.tail_len]
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.data.len() + self.tail_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one contiguous buffer (tests and small PDUs).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head);
        v.extend_from_slice(&self.data);
        v.extend_from_slice(self.tail());
        v
    }
}

/// How many bytes the PDU at the start of `buf` occupies, once at least the
/// BHS is present; `Ok(None)` when fewer than 48 bytes are there (a normal
/// outcome: wait for more). Rejects data segments over the limit before any
/// of it is buffered.
pub fn frame_length(buf: &[u8], limits: &FrameLimits) -> Result<Option<usize>, PduError> {
    if buf.len() < BHS_LEN {
        return Ok(None);
    }
    let ahs = buf[4] as usize * 4;
    let dlen = (u32::from(buf[5]) << 16) | (u32::from(buf[6]) << 8) | u32::from(buf[7]);
    if dlen > limits.max_data_segment {
        return Err(PduError::DataSegmentTooLong {
            len: dlen,
            max: limits.max_data_segment,
        });
    }
    let mut total = BHS_LEN + ahs;
    if limits.digests.header {
        total += 4;
    }
    if dlen > 0 {
        total += dlen as usize + pad_len(dlen as usize);
        if limits.digests.data {
            total += 4;
        }
    }
    Ok(Some(total))
}

/// Lengths of the PDU whose BHS starts `bhs` (at least 48 bytes): its
/// header (BHS, AHS and header digest) and its data segment (without
/// padding and digest). Rejects data segments over the limit.
pub fn header_lengths(bhs: &[u8], limits: &FrameLimits) -> Result<(usize, usize), PduError> {
    let total = frame_length(bhs, limits)?.ok_or(PduError::LengthMismatch {
        got: bhs.len(),
        expected: BHS_LEN,
    })?;
    let head = BHS_LEN + bhs[4] as usize * 4 + if limits.digests.header { 4 } else { 0 };
    let dlen = (usize::from(bhs[5]) << 16) | (usize::from(bhs[6]) << 8) | usize::from(bhs[7]);
    debug_assert!(total >= head + dlen);
    Ok((head, dlen))
}

/// Decode a whole header (exactly the header length [`header_lengths`]
/// gives), verifying its digest: the BHS and the raw AHS.
pub fn decode_header(head: &[u8], limits: &FrameLimits) -> Result<(Bhs, Bytes), PduError> {
    let (want, _) = header_lengths(head, limits)?;
    if head.len() != want {
        return Err(PduError::LengthMismatch {
            got: head.len(),
            expected: want,
        });
    }
    decode_measured_header(head, limits)
}

/// [`decode_header`] of a header whose length [`header_lengths`] already
/// checked (`head` is exactly that long): the reader measures each header
/// once, as it arrives, and does not check it again here.
pub fn decode_measured_header(head: &[u8], limits: &FrameLimits) -> Result<(Bhs, Bytes), PduError> {
    let ahs_end = BHS_LEN + head[4] as usize * 4;
    if limits.digests.header {
        let received = u32::from_le_bytes(head[ahs_end..ahs_end + 4].try_into().expect("4 bytes"));
        let computed = crc32c(&head[..ahs_end]);
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
    }
    let bhs_bytes: &[u8; BHS_LEN] = head[..BHS_LEN].try_into().expect("checked length");
    let bhs = Bhs::decode(bhs_bytes)?;
    // Nearly every PDU has no AHS: no copy (nor allocation) for it.
    let ahs = if ahs_end == BHS_LEN {
        Bytes::new()
    } else {
        Bytes::copy_from_slice(&head[BHS_LEN..ahs_end])
    };
    Ok((bhs, ahs))
}

/// Check a data digest received as the four wire bytes `wire`: CRC32C over
/// `data` and the padding bytes that followed it on the wire.
pub fn check_data_digest(data: &[u8], pad: &[u8], wire: [u8; 4]) -> Result<(), PduError> {
    let received = u32::from_le_bytes(wire);
    let computed = crc32c::crc32c_append(crc32c(data), pad);
    if received != computed {
        return Err(PduError::DataDigest { received, computed });
    }
    Ok(())
}

/// Decode one complete frame (exactly [`frame_length`] bytes), verifying
/// digests. The data segment of the result shares `frame`'s memory.
pub fn decode(frame: Bytes, limits: &FrameLimits) -> Result<Pdu, PduError> {
    let expected = frame_length(&frame, limits)?.ok_or(PduError::LengthMismatch {
        got: frame.len(),
        expected: BHS_LEN,
    })?;
    if frame.len() != expected {
        return Err(PduError::LengthMismatch {
            got: frame.len(),
            expected,
        });
    }
    let bhs_bytes: &[u8; BHS_LEN] = frame[..BHS_LEN].try_into().expect("checked length");
    let ahs_len = frame[4] as usize * 4;
    let dlen = (usize::from(frame[5]) << 16) | (usize::from(frame[6]) << 8) | usize::from(frame[7]);
    let mut at = BHS_LEN + ahs_len;
    if limits.digests.header {
        let received = u32::from_le_bytes(frame[at..at + 4].try_into().expect("4 bytes"));
        let computed = crc32c(&frame[..at]);
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
        at += 4;
    }
    let ahs = frame.slice(BHS_LEN..BHS_LEN + ahs_len);
    let data = frame.slice(at..at + dlen);
    if dlen > 0 && limits.digests.data {
        let padded_end = at + dlen + pad_len(dlen);
        let received = u32::from_le_bytes(
            frame[padded_end..padded_end + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let computed = crc32c(&frame[at..padded_end]);
        if received != computed {
            return Err(PduError::DataDigest { received, computed });
        }
    }
    let bhs = Bhs::decode(bhs_bytes)?;
    Ok(Pdu { bhs, ahs, data })
}

#[cfg(test)]
mod tests {
    use super::super::bhs::*;
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        s.split_whitespace()
            .flat_map(|w| {
                (0..w.len())
                    .step_by(2)
                    .map(move |i| u8::from_str_radix(&w[i..i + 2], 16).unwrap())
            })
            .collect()
    }

    fn roundtrip(pdu: Pdu, digests: Digests) -> Pdu {
        let wire = pdu.encode(digests).to_vec();
        let limits = FrameLimits {
            digests,
            max_data_segment: MAX_DATA_SEGMENT,
        };
        assert_eq!(frame_length(&wire, &limits).unwrap(), Some(wire.len()));
        let back = decode(Bytes::from(wire), &limits).unwrap();
        assert_eq!(back, pdu);
        back
    }

    #[test]
    fn scsi_read10_command_encodes_to_the_annotated_bytes() {
        let pdu = Pdu::new(Bhs::ScsiCommand(ScsiCommand {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            attr: TaskAttr::Simple,
            lun: [0, 1, 0, 0, 0, 0, 0, 0],
            itt: 0x0000_0007,
            expected_data_transfer_length: 4096,
            cmd_sn: 0x10,
            exp_stat_sn: 0x20,
            cdb: [0x28, 0, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0],
        }));
        let expected = hex("01                // opcode SCSI Command, I=0
             c1                // F=1 R=1 W=0 ATTR=Simple
             0000              // reserved
             00                // TotalAHSLength
             000000            // DataSegmentLength
             0001000000000000  // LUN 1 (peripheral addressing)
             00000007          // ITT
             00001000          // Expected Data Transfer Length 4096
             00000010          // CmdSN
             00000020          // ExpStatSN
             28000000000800000800000000000000 // CDB READ(10) lba 8 len 8");
        assert_eq!(pdu.encode(Digests::default()).to_vec(), expected);
        roundtrip(pdu, Digests::default());
    }

    #[test]
    fn login_request_carries_immediate_bit_stages_and_isid() {
        let pdu = Pdu::with_data(
            Bhs::LoginRequest(LoginRequest {
                transit: true,
                continue_: false,
                csg: Stage::Operational,
                nsg: Stage::FullFeature,
                version_max: 0,
                version_min: 0,
                isid: [0x80, 0x12, 0x34, 0x56, 0x00, 0x01],
                tsih: 0,
                itt: 0,
                cid: 0,
                cmd_sn: 1,
                exp_stat_sn: 0,
            }),
            Bytes::from_static(b"MaxBurstLength=262144\0"),
        );
        let wire = pdu.encode(Digests::default()).to_vec();
        let expected_head = hex("43           // I=1, opcode Login Request
             87           // T=1 C=0 CSG=1 (operational) NSG=3 (full feature)
             00 00        // version max / min
             00           // TotalAHSLength
             000016       // DataSegmentLength 22
             801234560001 // ISID: type 2 (random), A/B/C/D
             0000         // TSIH 0 (new session)
             00000000     // ITT
             0000 0000    // CID, reserved
             00000001     // CmdSN
             00000000     // ExpStatSN
             00000000000000000000000000000000 // reserved");
        assert_eq!(&wire[..48], &expected_head[..]);
        // 22 data bytes padded to 24.
        assert_eq!(wire.len(), 48 + 24);
        assert_eq!(&wire[70..72], &[0, 0]);
        roundtrip(pdu, Digests::default());
    }

    #[test]
    fn data_in_with_status_decodes_flags_residual_and_offset() {
        let mut wire = hex("25        // opcode SCSI Data-In
             83        // F=1, U=1 (underflow), S=1 (status present)
             00        // reserved
             00        // status GOOD
             00        // TotalAHSLength
             000004    // DataSegmentLength 4
             0000000000000000 // LUN
             0000002a  // ITT 42
             ffffffff  // TTT
             00000005  // StatSN
             00000006  // ExpCmdSN
             00000025  // MaxCmdSN
             00000000  // DataSN
             00000200  // Buffer Offset 512
             00000100  // Residual Count 256");
        wire.extend_from_slice(b"abcd");
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        let Bhs::DataIn(h) = &pdu.bhs else {
            panic!("expected Data-In, got {:?}", pdu.bhs)
        };
        assert!(h.final_ && h.status_present && !h.ack);
        assert_eq!(
            h.residual,
            Residual {
                underflow: true,
                overflow: false,
                count: 256
            }
        );
        assert_eq!((h.itt, h.stat_sn, h.max_cmd_sn), (42, 5, 0x25));
        assert_eq!(h.buffer_offset, 512);
        assert_eq!(&pdu.data[..], b"abcd");
    }

    #[test]
    fn r2t_decodes_offset_and_desired_length() {
        let wire = hex("31 80 0000 00 000000    // R2T, F=1, no data
             0000000000000000        // LUN
             00000009                // ITT
             00000abc                // TTT
             00000001 00000002 00000022 // StatSN ExpCmdSN MaxCmdSN
             00000003                // R2TSN
             00010000                // Buffer Offset 65536
             00040000                // Desired Data Transfer Length 262144");
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        assert_eq!(
            pdu.bhs,
            Bhs::R2t(R2t {
                lun: [0; 8],
                itt: 9,
                ttt: 0xabc,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 0x22,
                r2t_sn: 3,
                buffer_offset: 65536,
                desired_length: 262144,
            })
        );
    }

    #[test]
    fn login_response_decodes_status_class_and_detail() {
        let wire = hex(
            "23 00 00 00 00 000000   // Login Response, T=0, CSG/NSG 0, versions 0
             801234560001 0000       // ISID, TSIH
             00000000 00000000       // ITT, reserved
             00000000 00000001 00000001 // StatSN ExpCmdSN MaxCmdSN
             02 03 0000              // Status-Class 2 (initiator error), Detail 3 (not found)
             0000000000000000",
        );
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        let Bhs::LoginResponse(h) = pdu.bhs else {
            panic!("expected login response")
        };
        assert_eq!((h.status_class, h.status_detail), (2, 3));
    }

    #[test]
    fn every_opcode_roundtrips_with_both_digests() {
        let lun = [0, 2, 0, 0, 0, 0, 0, 0];
        let pdus = vec![
            Bhs::NopOut(NopOut {
                immediate: true,
                lun,
                itt: 1,
                ttt: RESERVED_TAG,
                cmd_sn: 3,
                exp_stat_sn: 4,
            }),
            Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate: true,
                function: tmf::ABORT_TASK,
                lun,
                itt: 5,
                referenced_task_tag: 6,
                cmd_sn: 7,
                exp_stat_sn: 8,
                ref_cmd_sn: 9,
                exp_data_sn: 10,
            }),
            Bhs::TextRequest(TextRequest {
                immediate: false,
                final_: true,
                continue_: false,
                lun: [0; 8],
                itt: 11,
                ttt: RESERVED_TAG,
                cmd_sn: 12,
                exp_stat_sn: 13,
            }),
            Bhs::DataOut(DataOut {
                final_: true,
                lun,
                itt: 14,
                ttt: 15,
                exp_stat_sn: 16,
                data_sn: 17,
                buffer_offset: 18,
            }),
            Bhs::LogoutRequest(LogoutRequest {
                immediate: true,
                reason: logout_reason::CLOSE_SESSION,
                itt: 19,
                cid: 1,
                cmd_sn: 20,
                exp_stat_sn: 21,
            }),
            Bhs::Snack(Snack {
                snack_type: 1,
                lun,
                itt: 22,
                ttt: 23,
                exp_stat_sn: 24,
                beg_run: 25,
                run_length: 26,
            }),
            Bhs::NopIn(NopIn {
                lun,
                itt: RESERVED_TAG,
                ttt: 27,
                stat_sn: 28,
                exp_cmd_sn: 29,
                max_cmd_sn: 30,
            }),
            Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: false,
                bidi_underflow: true,
                residual: Residual {
                    underflow: false,
                    overflow: true,
                    count: 31,
                },
                response: 0,
                status: 2,
                itt: 32,
                snack_tag: 0,
                stat_sn: 33,
                exp_cmd_sn: 34,
                max_cmd_sn: 35,
                exp_data_sn: 36,
                bidi_read_residual_count: 37,
            }),
            Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response: 0,
                itt: 38,
                stat_sn: 39,
                exp_cmd_sn: 40,
                max_cmd_sn: 41,
            }),
            Bhs::TextResponse(TextResponse {
                final_: false,
                continue_: true,
                lun: [0; 8],
                itt: 42,
                ttt: 43,
                stat_sn: 44,
                exp_cmd_sn: 45,
                max_cmd_sn: 46,
            }),
            Bhs::LogoutResponse(LogoutResponse {
                response: 0,
                itt: 47,
                stat_sn: 48,
                exp_cmd_sn: 49,
                max_cmd_sn: 50,
                time2wait: 2,
                time2retain: 20,
            }),
            Bhs::AsyncMessage(AsyncMessage {
                lun,
                stat_sn: 51,
                exp_cmd_sn: 52,
                max_cmd_sn: 53,
                event: async_event::LOGOUT_REQUESTED,
                vcode: 0,
                parameter1: 0,
                parameter2: 2,
                parameter3: 20,
            }),
            Bhs::Reject(Reject {
                reason: 0x04,
                stat_sn: 54,
                exp_cmd_sn: 55,
                max_cmd_sn: 56,
                data_sn: 0,
            }),
        ];
        for bhs in pdus {
            for digests in [
                Digests::default(),
                Digests {
                    header: true,
                    data: true,
                },
            ] {
                roundtrip(Pdu::new(bhs.clone()), digests);
                roundtrip(
                    Pdu::with_data(bhs.clone(), Bytes::from_static(b"odd")),
                    digests,
                );
            }
        }
    }

    #[test]
    fn header_with_ahs_and_digest_encodes_and_decodes_in_both_head_forms() {
        let bhs = Bhs::NopIn(NopIn {
            lun: [0; 8],
            itt: 7,
            ttt: RESERVED_TAG,
            stat_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 1,
        });
        for digests in [
            Digests::default(),
            Digests {
                header: true,
                data: true,
            },
        ] {
            let digest = if digests.header { 4 } else { 0 };
            // Without AHS the head is inline; with one it is on the heap.
            let plain = Pdu::with_data(bhs.clone(), Bytes::from_static(b"abc"));
            let f = plain.encode(digests);
            assert!(matches!(f.head, FrameHead::Inline { .. }));
            assert_eq!(f.head.len(), BHS_LEN + digest);
            roundtrip(plain, digests);
            let with_ahs = Pdu {
                bhs: bhs.clone(),
                ahs: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
                data: Bytes::from_static(b"abc"),
            };
            let f = with_ahs.encode(digests);
            assert!(matches!(f.head, FrameHead::Heap(_)));
            assert_eq!(f.head.len(), BHS_LEN + 8 + digest);
            assert_eq!(&f.head[BHS_LEN..BHS_LEN + 8], &[1, 2, 3, 4, 5, 6, 7, 8]);
            roundtrip(with_ahs, digests);
        }
    }

    #[test]
    fn corrupted_header_digest_is_detected() {
        let pdu = Pdu::new(Bhs::NopIn(NopIn {
            lun: [0; 8],
            itt: RESERVED_TAG,
            ttt: 1,
            stat_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 1,
        }));
        let digests = Digests {
            header: true,
            data: false,
        };
        let mut wire = pdu.encode(digests).to_vec();
        wire[20] ^= 1;
        let err = decode(
            Bytes::from(wire),
            &FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        )
        .unwrap_err();
        assert!(matches!(err, PduError::HeaderDigest { .. }), "{err}");
    }

    #[test]
    fn corrupted_data_digest_is_detected() {
        let pdu = Pdu::with_data(
            Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt: 1,
                ttt: RESERVED_TAG,
                stat_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 1,
            }),
            Bytes::from_static(b"ping data"),
        );
        let digests = Digests {
            header: true,
            data: true,
        };
        let mut wire = pdu.encode(digests).to_vec();
        wire[52] ^= 0x80;
        let err = decode(
            Bytes::from(wire),
            &FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        )
        .unwrap_err();
        assert!(matches!(err, PduError::DataDigest { .. }), "{err}");
    }

    #[test]
    fn oversized_data_segment_is_refused_before_buffering() {
        let mut wire = [0u8; 48];
        wire[0] = 0x25;
        wire[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
        let err = frame_length(&wire, &FrameLimits::default()).unwrap_err();
        assert_eq!(
            err,
            PduError::DataSegmentTooLong {
                len: 0xff_ffff,
                max: 8192
            }
        );
    }

    #[test]
    fn fewer_than_48_bytes_is_incomplete_not_an_error() {
        assert_eq!(frame_length(&[0u8; 47], &FrameLimits::default()), Ok(None));
    }

    #[test]
    fn unknown_opcode_is_kept_raw() {
        let mut wire = [0u8; 48];
        wire[0] = 0x1c;
        let pdu = decode(Bytes::copy_from_slice(&wire), &FrameLimits::default()).unwrap();
        assert_eq!(pdu.bhs.opcode(), Opcode::Unknown(0x1c));
    }

    #[test]
    fn reserved_login_stage_is_malformed() {
        let mut wire = [0u8; 48];
        wire[0] = 0x23;
        wire[1] = 0x80 | (2 << 2) | 3;
        let err = decode(Bytes::copy_from_slice(&wire), &FrameLimits::default()).unwrap_err();
        assert!(matches!(err, PduError::Malformed { .. }));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                                hd in any::<bool>(), dd in any::<bool>()) {
            let limits = FrameLimits { digests: Digests { header: hd, data: dd }, max_data_segment: 256 };
            if let Ok(Some(n)) = frame_length(&bytes, &limits) {
                if n <= bytes.len() {
                    let _ = decode(Bytes::copy_from_slice(&bytes[..n]), &limits);
                }
            }
            let _ = decode(Bytes::from(bytes), &limits);
        }
    }
}
