//! Operational negotiation (`proto::negotiate`): the target's answers and
//! offers during login, SendTargets replies and TargetAddress values.
//!
//! Input: a byte choosing the session type and proposal, then responses,
//! each a 2-byte length and a text segment. The negotiator sends its offers,
//! takes each response, and must either fail with an error or settle on
//! parameters that respect what we offered and the RFC's ranges.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::digest::DigestType;
use rlun_iscsi::proto::negotiate::{
    self, InitiatorProposal, Negotiator, SessionType, TargetAddress, TaskReporting, MAX_SEGMENT_LEN,
};
use rlun_iscsi::proto::text;
use rlun_fuzz::Input;

fn proposal(cfg: u8, input: &mut Input) -> InitiatorProposal {
    let mut p = InitiatorProposal::default();
    p.header_digest = match cfg & 3 {
        0 => vec![DigestType::None, DigestType::Crc32c],
        1 => vec![DigestType::Crc32c],
        2 => vec![DigestType::None],
        _ => vec![DigestType::Crc32c, DigestType::None],
    };
    p.data_digest = match (cfg >> 2) & 3 {
        0 => vec![DigestType::None, DigestType::Crc32c],
        1 => vec![DigestType::Crc32c],
        2 => vec![DigestType::None],
        _ => vec![DigestType::Crc32c, DigestType::None],
    };
    p.initial_r2t = cfg & 0x10 != 0;
    p.immediate_data = cfg & 0x20 != 0;
    if cfg & 0x40 != 0 {
        p.task_reporting = Some(vec![TaskReporting::FastAbort, TaskReporting::Rfc3720]);
        p.protocol_level = Some(1);
    }
    let extra = input.u8();
    if extra & 1 != 0 {
        p.max_recv_data_segment_length = 512 + input.u32() % (MAX_SEGMENT_LEN - 511);
        p.max_burst_length = 512 + input.u32() % (MAX_SEGMENT_LEN - 511);
        p.first_burst_length = 512 + input.u32() % (p.max_burst_length - 511);
    }
    p
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cfg = input.u8();
    let session_type = if cfg & 0x80 != 0 {
        SessionType::Discovery
    } else {
        SessionType::Normal
    };
    let proposal = proposal(cfg, &mut input);
    let mut neg = Negotiator::new(proposal.clone(), session_type).expect("proposal is valid");
    let _ = neg.initial_keys();

    let mut all_pairs = Vec::new();
    let mut failed = false;
    while !input.is_empty() {
        let len = usize::from(input.u16());
        let Ok(pairs) = text::parse_text(input.bytes(len)) else {
            continue;
        };
        for (_, v) in &pairs {
            if let Ok(a) = TargetAddress::parse(v) {
                let again = TargetAddress::parse(&a.to_string());
                assert_eq!(
                    again.as_ref().ok(),
                    Some(&a),
                    "TargetAddress display round trip"
                );
            }
        }
        if !failed {
            match neg.handle_target_keys(&pairs) {
                Ok(reply) => {
                    // Our answers must be text the target can parse.
                    text::encode_text_checked(&reply).expect("our answers are valid text");
                }
                Err(e) => {
                    let _ = e.to_string();
                    failed = true;
                }
            }
        }
        all_pairs.extend(pairs);
    }
    if let Ok(targets) = negotiate::parse_send_targets(&all_pairs) {
        for t in targets {
            assert!(
                !t.name.is_empty()
                    || all_pairs
                        .iter()
                        .any(|(k, v)| k == "TargetName" && v.is_empty())
            );
        }
    }
    let _ = neg.pending();
    let _ = neg.target_alias();
    let _ = neg.target_addresses();
    if failed {
        return;
    }
    match neg.finish() {
        Ok(p) => {
            assert_eq!(p.session_type, session_type);
            assert!(proposal.header_digest.contains(&p.header_digest));
            assert!(proposal.data_digest.contains(&p.data_digest));
            assert!((512..=MAX_SEGMENT_LEN).contains(&p.max_xmit_data_segment_length));
            if session_type == SessionType::Normal {
                assert!(p.first_burst_length <= p.max_burst_length);
                assert!(p.max_burst_length <= proposal.max_burst_length.max(262_144));
                assert!((512..=MAX_SEGMENT_LEN).contains(&p.max_burst_length));
                assert!(p.max_connections >= 1);
                assert!(p.max_outstanding_r2t >= 1);
                if p.immediate_data {
                    assert!(proposal.immediate_data, "ImmediateData is an AND key");
                }
                if !p.initial_r2t {
                    assert!(!proposal.initial_r2t, "InitialR2T is an OR key");
                }
            }
            assert_eq!(p.error_recovery_level, 0);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
