//! The login state machine (`proto::login`, with `proto::chap` and the
//! negotiator) fed arbitrary Login Responses.
//!
//! Input: a byte choosing the login (CHAP or not, mutual, discovery), then
//! responses. Each starts with a flags byte; most become a Login Response
//! built field by field (our ITT and ISID, so the fuzzer gets past the
//! header checks into the stages, CHAP and negotiation), some are a raw
//! 48-byte header of any opcode. Each carries a 2-byte length and text.
//! The login must end in Complete, Redirect or an error, and every request
//! it sends must be a PDU the target could decode and parse.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::chap::ChapNonce;
use rlun_iscsi::proto::login::{ChapSettings, Login, LoginConfig, LoginStep};
use rlun_iscsi::proto::negotiate::{InitiatorProposal, SessionType};
use rlun_iscsi::proto::pdu::{self, Bhs, Digests, FrameLimits, LoginResponse, Pdu, Stage};
use rlun_iscsi::proto::text;
use rlun_iscsi::secret::Secret;
use rlun_fuzz::Input;

const ISID: [u8; 6] = [0x80, 1, 2, 3, 0, 0];

fn stage(bits: u8) -> Stage {
    match bits & 3 {
        0 => Stage::Security,
        1 => Stage::Operational,
        _ => Stage::FullFeature,
    }
}

fn check_request(p: &Pdu) {
    let Bhs::LoginRequest(r) = &p.bhs else {
        panic!("login sent a {:?}", p.bhs.opcode());
    };
    assert_eq!(r.isid, ISID);
    let wire = p.encode(Digests::default()).to_vec();
    let lim = FrameLimits {
        digests: Digests::default(),
        max_data_segment: pdu::MAX_DATA_SEGMENT,
    };
    let back = pdu::decode(Bytes::from(wire), &lim).expect("our request decodes");
    assert_eq!(&back, p);
    text::parse_text(&p.data).expect("our request text parses");
}

fn response(input: &mut Input) -> Pdu {
    let flags = input.u8();
    let bhs = if flags & 0xf0 == 0xf0 {
        let raw: [u8; pdu::BHS_LEN] = input.array();
        match Bhs::decode(&raw) {
            Ok(b) => b,
            Err(_) => Bhs::Unknown {
                opcode: 0x3c,
                raw: Box::new(raw),
            },
        }
    } else {
        let class = if flags & 0x0c == 0x0c {
            input.u8() % 5
        } else {
            0
        };
        Bhs::LoginResponse(LoginResponse {
            transit: flags & 1 != 0,
            continue_: flags & 2 != 0,
            csg: stage(flags >> 4),
            nsg: stage(flags >> 6),
            version_max: 0,
            version_active: 0,
            isid: ISID,
            tsih: input.u16(),
            itt: 0,
            stat_sn: input.u32(),
            exp_cmd_sn: input.u32(),
            max_cmd_sn: input.u32(),
            status_class: class,
            status_detail: if class == 0 { 0 } else { input.u8() },
        })
    };
    let len = usize::from(input.u16() % 8192);
    Pdu::with_data(bhs, Bytes::copy_from_slice(input.bytes(len)))
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cfg = input.u8();
    let discovery = cfg & 4 != 0;
    let chap = (cfg & 1 != 0).then(|| ChapSettings {
        user: "initiator-user".into(),
        secret: Secret::new("initiator-secret-123"),
        mutual: (cfg & 2 != 0)
            .then(|| ("target-user".to_string(), Secret::new("target-secret-4567"))),
    });
    let login_cfg = LoginConfig {
        initiator_name: "iqn.2026-11.org.rlun:fuzz".into(),
        initiator_alias: (cfg & 8 != 0).then(|| "fuzz".into()),
        target_name: (!discovery).then(|| "iqn.2026-11.org.example:disk1".into()),
        session_type: if discovery {
            SessionType::Discovery
        } else {
            SessionType::Normal
        },
        isid: ISID,
        tsih: 0,
        cid: 0,
        cmd_sn: 1,
        chap,
        chap_nonce: Some(ChapNonce {
            id: 7,
            challenge: [0x5a; 16],
        }),
        proposal: InitiatorProposal::default(),
    };
    let (mut login, first) = Login::start(login_cfg).expect("login starts");
    check_request(&first);
    for _ in 0..64 {
        if input.is_empty() {
            return;
        }
        match login.handle_response(response(&mut input)) {
            Ok(LoginStep::Send { next, pdu }) => {
                check_request(&pdu);
                login = *next;
            }
            Ok(LoginStep::Complete(result)) => {
                assert_eq!(result.isid, ISID);
                assert!(
                    result.params.first_burst_length <= result.params.max_burst_length || discovery
                );
                return;
            }
            Ok(LoginStep::Redirect { .. }) => return,
            Err(e) => {
                let _ = e.to_string();
                let _ = e.is_transient();
                return;
            }
        }
    }
});
