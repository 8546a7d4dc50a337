//! iSER wire formats that are not iSCSI PDUs (RFC 7145 §9): the 28-byte iSER
//! header that precedes every iSCSI control-type PDU in a Send message, the
//! iSER Hello / Hello Reply messages, and the 4-byte private data carried in
//! the RDMA CM connect request and reply.
//!
//! Pure codec, no I/O. Field layouts follow RFC 7145 §9.2 (header), §9.3 and
//! §9.4 (Hello, Hello Reply) and the iSER CM REQ/REP private data (§9.1), as
//! the Linux initiator and target (`include/scsi/iser.h`, `ib_isert`) and
//! libiscsi put them on the wire; see `ref/iser/iser.md` for what each peer
//! actually does with them.
//!
//! What rlun sends:
//! - every iSCSI PDU (login included) with [`IserOpcode::Control`] and the
//!   STags of the command's buffers, see [`IserHeader`];
//! - never a Hello: LIO logs Hello messages as errors and no peer requires
//!   them. A Hello Reply is accepted and decoded ([`HelloReply`]);
//! - CM private data `0xC0`: no zero-based virtual addressing (we advertise
//!   real virtual addresses) and no Send with Invalidate (rlun registers its
//!   buffers once and reuses their keys, so the target must never invalidate
//!   them), see [`CmPrivateData::RLUN`].

use thiserror::Error;

/// Length of the iSER header (RFC 7145 §9.2).
pub const ISER_HEADER_LEN: usize = 28;
/// Length of a Hello or Hello Reply message (RFC 7145 §9.3, §9.4).
pub const HELLO_LEN: usize = 12;
/// Length of the iSER part of the RDMA CM private data (RFC 7145 §9.1).
pub const CM_PRIVATE_DATA_LEN: usize = 4;

/// Write STag valid (byte 0, bit 3).
const FLAG_WSV: u8 = 0x08;
/// Read STag valid (byte 0, bit 2).
const FLAG_RSV: u8 = 0x04;
/// Hello Reply: the target rejected our iSER version (byte 0, bit 0).
const FLAG_REJECT: u8 = 0x01;
/// CM private data: zero-based virtual addressing not supported.
const CM_ZBVA_NOT_SUPPORTED: u8 = 0x80;
/// CM private data: Send with Invalidate not supported.
const CM_SWI_NOT_SUPPORTED: u8 = 0x40;

/// The iSER opcode, high nibble of byte 0 of every iSER message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IserOpcode {
    /// `0x1`: an iSCSI control-type PDU follows the header.
    Control,
    /// `0x2`: iSER Hello (initiator to target).
    Hello,
    /// `0x3`: iSER Hello Reply (target to initiator).
    HelloReply,
    /// Any other value; the message cannot be understood.
    Unknown(u8),
}

impl IserOpcode {
    pub fn from_nibble(n: u8) -> IserOpcode {
        match n & 0x0f {
            0x1 => IserOpcode::Control,
            0x2 => IserOpcode::Hello,
            0x3 => IserOpcode::HelloReply,
            other => IserOpcode::Unknown(other),
        }
    }

    pub fn nibble(self) -> u8 {
        match self {
            IserOpcode::Control => 0x1,
            IserOpcode::Hello => 0x2,
            IserOpcode::HelloReply => 0x3,
            IserOpcode::Unknown(n) => n & 0x0f,
        }
    }
}

/// A buffer the target may access by RDMA: its steering tag (the rkey of its
/// memory registration) and the virtual address of its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    pub stag: u32,
    pub va: u64,
}

/// The iSER header in front of an iSCSI control-type PDU (RFC 7145 §9.2).
///
/// `write` is the buffer the target RDMA-Reads write data from (its VA is the
/// first byte *not* sent as immediate or unsolicited data, which is where LIO
/// starts reading); `read` is the buffer the target RDMA-Writes read data
/// into, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IserHeader {
    pub opcode: IserOpcode,
    pub write: Option<RemoteBuf>,
    pub read: Option<RemoteBuf>,
}

/// Errors in a received iSER message. Each one means the target misbehaved.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum IserHeaderError {
    #[error("iSER message of {len} bytes is shorter than the {need}-byte header")]
    Short { len: usize, need: usize },
    #[error("iSER message has unknown opcode {0:#x}")]
    UnknownOpcode(u8),
    #[error("target sent an iSER Hello message, which only an initiator may send")]
    UnexpectedHello,
}

impl IserHeader {
    /// The header for a PDU that moves no data by RDMA (login, NOP-Out,
    /// text, task management, logout, a command without data).
    pub const CONTROL: IserHeader = IserHeader {
        opcode: IserOpcode::Control,
        write: None,
        read: None,
    };

    /// A control-PDU header advertising the given buffers.
    pub fn control(write: Option<RemoteBuf>, read: Option<RemoteBuf>) -> IserHeader {
        IserHeader {
            opcode: IserOpcode::Control,
            write,
            read,
        }
    }

    pub fn encode(&self) -> [u8; ISER_HEADER_LEN] {
        let mut b = [0u8; ISER_HEADER_LEN];
        b[0] = self.opcode.nibble() << 4;
        if let Some(w) = self.write {
            b[0] |= FLAG_WSV;
            b[4..8].copy_from_slice(&w.stag.to_be_bytes());
            b[8..16].copy_from_slice(&w.va.to_be_bytes());
        }
        if let Some(r) = self.read {
            b[0] |= FLAG_RSV;
            b[16..20].copy_from_slice(&r.stag.to_be_bytes());
            b[20..28].copy_from_slice(&r.va.to_be_bytes());
        }
        b
    }

    /// Decode the first [`ISER_HEADER_LEN`] bytes of `buf`. STag fields are
    /// read only when their valid bit is set (a target may leave garbage in
    /// them otherwise); reserved bits are ignored.
    pub fn decode(buf: &[u8]) -> Result<IserHeader, IserHeaderError> {
        let Some(b) = buf.first_chunk::<ISER_HEADER_LEN>() else {
            return Err(IserHeaderError::Short {
                len: buf.len(),
                need: ISER_HEADER_LEN,
            });
        };
        let opcode = IserOpcode::from_nibble(b[0] >> 4);
        let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let be64 = |o: usize| (u64::from(be32(o)) << 32) | u64::from(be32(o + 4));
        let write = (b[0] & FLAG_WSV != 0).then(|| RemoteBuf {
            stag: be32(4),
            va: be64(8),
        });
        let read = (b[0] & FLAG_RSV != 0).then(|| RemoteBuf {
            stag: be32(16),
            va: be64(20),
        });
        Ok(IserHeader {
            opcode,
            write,
            read,
        })
    }
}

/// iSER Hello (RFC 7145 §9.3). rlun never sends one (see the module docs);
/// the encoder exists for tests and for a future `iSERHelloRequired=Yes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub max_version: u8,
    pub min_version: u8,
    /// The initiator's RDMA Read inbound depth.
    pub ird: u16,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0] = IserOpcode::Hello.nibble() << 4;
        b[1] = (self.max_version << 4) | (self.min_version & 0x0f);
        b[2..4].copy_from_slice(&self.ird.to_be_bytes());
        b
    }
}

/// iSER Hello Reply (RFC 7145 §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloReply {
    /// The target did not accept our version.
    pub rejected: bool,
    pub max_version: u8,
    pub current_version: u8,
    /// The target's RDMA Read outbound depth.
    pub ord: u16,
}

impl HelloReply {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0] = IserOpcode::HelloReply.nibble() << 4;
        if self.rejected {
            b[0] |= FLAG_REJECT;
        }
        b[1] = (self.max_version << 4) | (self.current_version & 0x0f);
        b[2..4].copy_from_slice(&self.ord.to_be_bytes());
        b
    }

    fn decode(b: &[u8; HELLO_LEN]) -> HelloReply {
        HelloReply {
            rejected: b[0] & FLAG_REJECT != 0,
            max_version: b[1] >> 4,
            current_version: b[1] & 0x0f,
            ord: u16::from_be_bytes([b[2], b[3]]),
        }
    }
}

/// One received iSER message (the payload of a Send the target posted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IserMessage<'a> {
    /// An iSCSI PDU (BHS, AHS, data segment; no digests) after the header.
    Control {
        header: IserHeader,
        pdu: &'a [u8],
    },
    HelloReply(HelloReply),
}

impl<'a> IserMessage<'a> {
    /// Classify a received message. A Hello from the target, a short message
    /// and an unknown opcode are errors (the target misbehaved).
    pub fn parse(msg: &'a [u8]) -> Result<IserMessage<'a>, IserHeaderError> {
        let Some(&first) = msg.first() else {
            return Err(IserHeaderError::Short {
                len: 0,
                need: ISER_HEADER_LEN,
            });
        };
        match IserOpcode::from_nibble(first >> 4) {
            IserOpcode::Control => {
                let header = IserHeader::decode(msg)?;
                Ok(IserMessage::Control {
                    header,
                    pdu: &msg[ISER_HEADER_LEN..],
                })
            }
            IserOpcode::HelloReply => match msg.first_chunk::<HELLO_LEN>() {
                Some(b) => Ok(IserMessage::HelloReply(HelloReply::decode(b))),
                None => Err(IserHeaderError::Short {
                    len: msg.len(),
                    need: HELLO_LEN,
                }),
            },
            IserOpcode::Hello => Err(IserHeaderError::UnexpectedHello),
            IserOpcode::Unknown(n) => Err(IserHeaderError::UnknownOpcode(n)),
        }
    }
}

/// The iSER private data of the RDMA CM connect request / reply
/// (RFC 7145 §9.1). rdma_cm prepends its own IP header on IB/RoCE; this is
/// only our part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmPrivateData {
    /// The sender does not support zero-based virtual addresses.
    pub zbva_not_supported: bool,
    /// The sender does not support Send with Invalidate.
    pub swi_not_supported: bool,
}

impl CmPrivateData {
    /// What rlun sends: real VAs (no ZBVA) and no Send with Invalidate, since
    /// its memory is registered once and its keys reused (`0xC0`, as
    /// libiscsi sends).
    pub const RLUN: CmPrivateData = CmPrivateData {
        zbva_not_supported: true,
        swi_not_supported: true,
    };

    pub fn encode(&self) -> [u8; CM_PRIVATE_DATA_LEN] {
        let mut b = [0u8; CM_PRIVATE_DATA_LEN];
        if self.zbva_not_supported {
            b[0] |= CM_ZBVA_NOT_SUPPORTED;
        }
        if self.swi_not_supported {
            b[0] |= CM_SWI_NOT_SUPPORTED;
        }
        b
    }

    /// Decode a reply's private data. Targets may send more than 4 bytes
    /// (the CM pads it) or none at all (then nothing is claimed: `None`).
    pub fn decode(buf: &[u8]) -> Option<CmPrivateData> {
        let flags = *buf.first()?;
        if buf.len() < CM_PRIVATE_DATA_LEN {
            return None;
        }
        Some(CmPrivateData {
            zbva_not_supported: flags & CM_ZBVA_NOT_SUPPORTED != 0,
            swi_not_supported: flags & CM_SWI_NOT_SUPPORTED != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A READ command's header: RSV only.
    #[rustfmt::skip]
    const READ_HDR: [u8; 28] = [
        0x14,                                           // opcode 0x1 (control) | RSV
        0x00, 0x00, 0x00,                               // reserved
        0x00, 0x00, 0x00, 0x00,                         // Write STag (not valid)
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Write VA (not valid)
        0x12, 0x34, 0x56, 0x78,                         // Read STag 0x12345678
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x70, 0x00, // Read VA 0x7f12_3456_7000
    ];

    /// A WRITE command's header whose first 8192 bytes went as immediate data:
    /// WSV, Write VA = buffer base 0x7f00_0000_0000 + 0x2000.
    #[rustfmt::skip]
    const WRITE_HDR: [u8; 28] = [
        0x18,                                           // opcode 0x1 | WSV
        0x00, 0x00, 0x00,                               // reserved
        0xab, 0xcd, 0xef, 0x01,                         // Write STag
        0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x20, 0x00, // Write VA
        0x00, 0x00, 0x00, 0x00,                         // Read STag (not valid)
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Read VA (not valid)
    ];

    #[test]
    fn login_header_is_control_opcode_without_stags() {
        let b = IserHeader::CONTROL.encode();
        assert_eq!(b[0], 0x10);
        assert!(b[1..].iter().all(|&x| x == 0));
        assert_eq!(IserHeader::decode(&b).unwrap(), IserHeader::CONTROL);
    }

    #[test]
    fn read_header_sets_rsv_and_read_stag_va() {
        let h = IserHeader::control(
            None,
            Some(RemoteBuf {
                stag: 0x1234_5678,
                va: 0x7f12_3456_7000,
            }),
        );
        assert_eq!(h.encode(), READ_HDR);
        assert_eq!(IserHeader::decode(&READ_HDR).unwrap(), h);
    }

    #[test]
    fn write_header_sets_wsv_and_points_past_immediate_data() {
        let h = IserHeader::control(
            Some(RemoteBuf {
                stag: 0xabcd_ef01,
                va: 0x7f00_0000_0000 + 8192,
            }),
            None,
        );
        assert_eq!(h.encode(), WRITE_HDR);
        assert_eq!(IserHeader::decode(&WRITE_HDR).unwrap(), h);
    }

    #[test]
    fn bidirectional_header_sets_both_valid_bits() {
        let h = IserHeader::control(
            Some(RemoteBuf { stag: 1, va: 2 }),
            Some(RemoteBuf { stag: 3, va: 4 }),
        );
        let b = h.encode();
        assert_eq!(b[0], 0x1c);
        assert_eq!(IserHeader::decode(&b).unwrap(), h);
    }

    #[test]
    fn stag_fields_without_valid_bit_are_ignored() {
        let mut b = WRITE_HDR;
        b[0] = 0x10; // clear WSV, leave the STag bytes behind
        b[1] = 0xff; // reserved bytes are ignored too
        assert_eq!(IserHeader::decode(&b).unwrap(), IserHeader::CONTROL);
    }

    #[test]
    fn control_message_splits_header_from_pdu() {
        let mut msg = READ_HDR.to_vec();
        msg.extend_from_slice(&[0x21; 48]); // a SCSI Response BHS
        match IserMessage::parse(&msg).unwrap() {
            IserMessage::Control { header, pdu } => {
                assert_eq!(header.read.unwrap().stag, 0x1234_5678);
                assert_eq!(pdu, &[0x21; 48][..]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_control_message_is_an_error() {
        assert_eq!(
            IserMessage::parse(&READ_HDR[..27]),
            Err(IserHeaderError::Short { len: 27, need: 28 })
        );
        assert_eq!(
            IserMessage::parse(&[]),
            Err(IserHeaderError::Short { len: 0, need: 28 })
        );
    }

    #[test]
    fn hello_reply_is_accepted_and_decoded() {
        #[rustfmt::skip]
        let msg = [
            0x31,                   // opcode 0x3 (Hello Reply) | Reject
            0xa1,                   // MaxVer 10, CurVer 1
            0x00, 0x10,             // iSER-ORD 16
            0, 0, 0, 0, 0, 0, 0, 0, // reserved
        ];
        let want = HelloReply {
            rejected: true,
            max_version: 10,
            current_version: 1,
            ord: 16,
        };
        assert_eq!(
            IserMessage::parse(&msg).unwrap(),
            IserMessage::HelloReply(want)
        );
        assert_eq!(want.encode(), msg);
        assert!(matches!(
            IserMessage::parse(&msg[..11]),
            Err(IserHeaderError::Short { len: 11, need: 12 })
        ));
    }

    #[test]
    fn hello_layout() {
        let h = Hello {
            max_version: 10,
            min_version: 10,
            ird: 4,
        };
        assert_eq!(h.encode(), [0x20, 0xaa, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn hello_from_target_and_unknown_opcode_are_errors() {
        let hello = Hello {
            max_version: 10,
            min_version: 10,
            ird: 4,
        }
        .encode();
        assert_eq!(
            IserMessage::parse(&hello),
            Err(IserHeaderError::UnexpectedHello)
        );
        let mut b = READ_HDR;
        b[0] = 0x50;
        assert_eq!(
            IserMessage::parse(&b),
            Err(IserHeaderError::UnknownOpcode(5))
        );
    }

    #[test]
    fn cm_private_data_rlun_sends_no_zbva_no_swi() {
        assert_eq!(CmPrivateData::RLUN.encode(), [0xc0, 0, 0, 0]);
    }

    #[test]
    fn cm_private_data_reply_from_lio() {
        // LIO's REP: 0x80 | 0x40 when it will not use Send with Invalidate,
        // padded by the CM to 56 bytes.
        let mut rep = vec![0u8; 56];
        rep[0] = 0xc0;
        assert_eq!(CmPrivateData::decode(&rep), Some(CmPrivateData::RLUN));
        assert_eq!(
            CmPrivateData::decode(&[0x80, 0, 0, 0]),
            Some(CmPrivateData {
                zbva_not_supported: true,
                swi_not_supported: false,
            })
        );
        assert_eq!(CmPrivateData::decode(&[]), None);
        assert_eq!(CmPrivateData::decode(&[0xc0, 0]), None);
    }

    proptest! {
        #[test]
        fn random_messages_never_panic(msg in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = IserMessage::parse(&msg);
            let _ = IserHeader::decode(&msg);
            let _ = CmPrivateData::decode(&msg);
        }

        #[test]
        fn header_round_trips(
            op in 0u8..16,
            w in proptest::option::of((any::<u32>(), any::<u64>())),
            r in proptest::option::of((any::<u32>(), any::<u64>())),
        ) {
            let h = IserHeader {
                opcode: IserOpcode::from_nibble(op),
                write: w.map(|(stag, va)| RemoteBuf { stag, va }),
                read: r.map(|(stag, va)| RemoteBuf { stag, va }),
            };
            prop_assert_eq!(IserHeader::decode(&h.encode()).unwrap(), h);
        }
    }
}
