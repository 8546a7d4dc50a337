//! The iSER wire formats that are not iSCSI PDUs (`transport::iser::header`,
//! RFC 7145 §9): the 28-byte iSER header in front of every received
//! message, Hello Replies and the RDMA CM private data — all from the target.
//!
//! Input: one received iSER message. What parses must encode back to the
//! same header; a control message's iSCSI PDU goes on to the PDU decoder
//! as the iSER receive path hands it over.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::pdu::{self, Digests, FrameLimits, MAX_DATA_SEGMENT};
use rlun::transport::iser::header::{
    CmPrivateData, IserHeader, IserMessage, CM_PRIVATE_DATA_LEN, ISER_HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    match IserMessage::parse(data) {
        Ok(IserMessage::Control { header, pdu }) => {
            assert_eq!(IserHeader::decode(&header.encode()), Ok(header));
            assert_eq!(pdu.len(), data.len() - ISER_HEADER_LEN);
            let lim = FrameLimits {
                digests: Digests::default(),
                max_data_segment: MAX_DATA_SEGMENT,
            };
            if let Ok(Some(n)) = pdu::frame_length(pdu, &lim) {
                if n <= pdu.len() {
                    let _ = pdu::decode(Bytes::copy_from_slice(&pdu[..n]), &lim);
                }
            }
        }
        Ok(IserMessage::HelloReply(r)) => {
            let _ = r.encode();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Some(p) = CmPrivateData::decode(data) {
        assert!(data.len() >= CM_PRIVATE_DATA_LEN);
        let _ = format!("{p:?}");
    }
});
