//! The PDU framer and decoder (`proto::pdu`): what arrives on the socket.
//!
//! Input: one configuration byte, then either
//! - raw mode: a byte stream cut into frames exactly as the TCP transport
//!   does (`frame_length`, then `decode` of that many bytes), or
//! - shaped mode: records of a 48-byte BHS, a 2-byte length and that much
//!   data, each given a correct frame (lengths, padding, digests) so every
//!   PDU reaches the per-opcode header decoder.
//!
//! Whatever decodes must encode again to a frame that decodes to the same PDU.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::pdu::{self, Digests, PduError, BHS_LEN, MAX_DATA_SEGMENT};
use rlun_fuzz::{frame, limits, Input};

fn check_roundtrip(p: &pdu::Pdu, digests: Digests) {
    let wire = p.encode(digests).to_vec();
    let lim = limits(digests, MAX_DATA_SEGMENT);
    assert_eq!(
        pdu::frame_length(&wire, &lim).expect("re-encoded frame has a valid length"),
        Some(wire.len())
    );
    let again = pdu::decode(Bytes::from(wire), &lim).expect("re-encoded PDU decodes");
    assert_eq!(&again, p, "PDU changed across encode/decode");
    let _ = p.bhs.opcode().name();
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cfg = input.u8();
    let digests = Digests {
        header: cfg & 1 != 0,
        data: cfg & 2 != 0,
    };
    let max_seg = [8192, 262_144, MAX_DATA_SEGMENT, 0][usize::from(cfg >> 3) & 3];
    let lim = limits(digests, max_seg);
    if cfg & 4 == 0 {
        // Raw stream through the framer.
        let mut buf = input.rest();
        loop {
            match pdu::frame_length(buf, &lim) {
                Ok(None) => {
                    assert!(buf.len() < BHS_LEN);
                    break;
                }
                Err(e) => {
                    let _ = e.to_string();
                    break;
                }
                Ok(Some(n)) => {
                    assert!(n >= BHS_LEN);
                    if n > buf.len() {
                        break; // incomplete: the transport would wait
                    }
                    match pdu::decode(Bytes::copy_from_slice(&buf[..n]), &lim) {
                        Ok(p) => check_roundtrip(&p, digests),
                        Err(e) => {
                            let _ = e.to_string();
                        }
                    }
                    buf = &buf[n..];
                }
            }
        }
    } else {
        let lim = limits(digests, MAX_DATA_SEGMENT);
        while !input.is_empty() {
            let bhs: [u8; BHS_LEN] = input.array();
            let len = usize::from(input.u16() % 4096);
            let payload = input.bytes(len);
            let wire = frame(bhs, payload, digests);
            assert_eq!(pdu::frame_length(&wire, &lim), Ok(Some(wire.len())));
            match pdu::decode(Bytes::from(wire), &lim) {
                Ok(p) => {
                    assert_eq!(&p.data[..], payload);
                    check_roundtrip(&p, digests)
                }
                Err(e @ PduError::Malformed { .. }) => {
                    let _ = e.to_string();
                }
                Err(e) => panic!("a correctly framed PDU failed to decode: {e}"),
            }
        }
    }
});
