//! Host tests of what the receive half makes of received messages.

use rlun_iscsi::proto::pdu::{Bhs, Digests, FrameLimits};
use rlun_iscsi::testing::data_in;
use rlun_iscsi::ErrorKind;

use super::*;
use crate::transport::iser::header::{
    Hello, HelloReply, IserHeader, IserHeaderError, ISER_HEADER_LEN,
};

fn limits() -> FrameLimits {
    FrameLimits {
        digests: Digests::default(),
        max_data_segment: 8192,
    }
}

/// A message as a target sends it: iSER header, then the PDU's bytes.
fn message(pdu: &[u8]) -> Vec<u8> {
    let mut m = IserHeader::CONTROL.encode().to_vec();
    m.extend_from_slice(pdu);
    m
}

#[test]
fn a_control_message_yields_its_pdu() {
    let sent = data_in(7, 0, 0, b"hello", true);
    let wire = sent.encode(Digests::default()).to_vec();
    assert_eq!(wire.len(), 48 + 8, "5 bytes of data padded to 8");

    let got = decode_message(&message(&wire), &limits()).unwrap().unwrap();

    let Bhs::DataIn(d) = &got.bhs else {
        panic!("{:?}", got.bhs)
    };
    assert_eq!(d.itt, 7);
    assert_eq!(&got.data[..], b"hello");
}

#[test]
fn an_unpadded_last_data_segment_is_accepted() {
    // Targets need not pad the data segment of the last PDU in a Send.
    let wire = data_in(7, 0, 0, b"hello", true)
        .encode(Digests::default())
        .to_vec();
    let unpadded = &wire[..48 + 5];

    let got = decode_message(&message(unpadded), &limits())
        .unwrap()
        .unwrap();

    assert_eq!(&got.data[..], b"hello");
}

#[test]
fn a_pdu_cut_short_is_a_protocol_error() {
    let wire = data_in(7, 0, 0, &[1; 64], true)
        .encode(Digests::default())
        .to_vec();
    for cut in [20, 47, 48 + 60] {
        let e = decode_message(&message(&wire[..cut]), &limits()).unwrap_err();
        assert!(
            matches!(e, IserError::ShortPdu { len } if len == cut),
            "{cut}: {e}"
        );
        assert_eq!(e.kind(), ErrorKind::Protocol);
    }
}

#[test]
fn a_message_shorter_than_the_iser_header_is_a_protocol_error() {
    let e = decode_message(&IserHeader::CONTROL.encode()[..20], &limits()).unwrap_err();
    assert!(
        matches!(
            e,
            IserError::Header(IserHeaderError::Short {
                len: 20,
                need: ISER_HEADER_LEN
            })
        ),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Protocol);
}

#[test]
fn a_data_segment_over_the_receive_limit_is_refused() {
    let wire = data_in(7, 0, 0, &[1; 9000], true)
        .encode(Digests::default())
        .to_vec();
    let e = decode_message(&message(&wire), &limits()).unwrap_err();
    assert!(matches!(e, IserError::Pdu(_)), "{e}");
    assert_eq!(e.kind(), ErrorKind::Protocol);
}

#[test]
fn a_hello_reply_is_accepted_and_yields_nothing() {
    let reply = HelloReply {
        rejected: false,
        max_version: 10,
        current_version: 10,
        ord: 4,
    }
    .encode();
    assert!(decode_message(&reply, &limits()).unwrap().is_none());
}

#[test]
fn a_hello_from_the_target_is_a_protocol_error() {
    let hello = Hello {
        max_version: 10,
        min_version: 10,
        ird: 4,
    }
    .encode();
    let e = decode_message(&hello, &limits()).unwrap_err();
    assert!(
        matches!(e, IserError::Header(IserHeaderError::UnexpectedHello)),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Protocol);
}
