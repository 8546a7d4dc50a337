//! Host tests of the encoder: frames and iSER headers from real cores'
//! transmits, with counted fake registrations standing in for the verbs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rlun_iscsi::proto::connection::{
    CommandRequest, Connection, DataMovement, Event, FeatureParams, ReadRegion, SequenceNumbers,
    TaskError, TaskHold, Transmit, TransmitKind,
};
use rlun_iscsi::proto::pdu::{Bhs, Pdu, Residual, ScsiResponse, TaskAttr, TaskMgmtResponse};

use super::*;
use crate::transport::iser::header::IserOpcode;

/// Keys of the fake pool.
const POOL: Keys = Keys {
    lkey: 0x100,
    rkey: 0x200,
};

/// A registrar whose "pool" is the ranges it is told, and whose
/// registrations count themselves while they live.
#[derive(Default)]
struct Fake {
    pool: Vec<(usize, usize)>,
    live: Arc<AtomicUsize>,
    made: u32,
}

#[derive(Debug)]
struct FakeRegistration {
    live: Arc<AtomicUsize>,
}

impl Drop for FakeRegistration {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Fake {
    fn in_pool(&mut self, b: &[u8]) {
        self.pool.push((b.as_ptr() as usize, b.len()));
    }

    fn in_pool_region(&mut self, r: ReadRegion) {
        self.pool.push((r.addr(), r.len() as usize));
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    fn register(&mut self) -> (FakeRegistration, Keys) {
        self.live.fetch_add(1, Ordering::SeqCst);
        self.made += 1;
        let keys = Keys {
            lkey: 0x1000 + self.made,
            rkey: 0x2000 + self.made,
        };
        (
            FakeRegistration {
                live: self.live.clone(),
            },
            keys,
        )
    }
}

impl Registrar for Fake {
    type Registration = FakeRegistration;

    fn pool_keys(&mut self, addr: usize, len: usize) -> Result<Option<Keys>, IserError> {
        Ok(self
            .pool
            .iter()
            .any(|&(a, l)| addr >= a && addr + len <= a + l)
            .then_some(POOL))
    }

    fn register_read(
        &mut self,
        _region: &ReadRegion,
    ) -> Result<(FakeRegistration, Keys), IserError> {
        Ok(self.register())
    }

    fn register_write(&mut self, _data: &Bytes) -> Result<(FakeRegistration, Keys), IserError> {
        Ok(self.register())
    }
}

fn core(initial_r2t: bool) -> Connection {
    Connection::new(
        FeatureParams {
            data_movement: DataMovement::Direct,
            initial_r2t,
            ..FeatureParams::default()
        },
        SequenceNumbers {
            cmd_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 64,
            exp_stat_sn: 1,
        },
    )
}

fn read(len: u32) -> CommandRequest {
    CommandRequest {
        lun: [0; 8],
        cdb: [0x28; 16],
        data_out: Bytes::new(),
        read_len: len,
        attr: TaskAttr::Simple,
    }
}

fn write(data: &Bytes) -> CommandRequest {
    CommandRequest {
        lun: [0; 8],
        cdb: [0x2a; 16],
        data_out: data.clone(),
        read_len: 0,
        attr: TaskAttr::Simple,
    }
}

fn transmits(c: &mut Connection) -> Vec<Transmit> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn one(c: &mut Connection) -> Transmit {
    let mut t = transmits(c);
    assert_eq!(t.len(), 1, "{t:?}");
    t.pop().unwrap()
}

fn response(itt: u32, stat_sn: u32) -> Pdu {
    Pdu::new(Bhs::ScsiResponse(ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        residual: Residual::default(),
        response: 0,
        status: 0,
        itt,
        snack_tag: 0,
        stat_sn,
        exp_cmd_sn: stat_sn + 1,
        max_cmd_sn: 64,
        exp_data_sn: 0,
        bidi_read_residual_count: 0,
    }))
}

/// The tag of a Task Management Function Request.
fn tmf_itt(tmf: &Transmit) -> u32 {
    let Bhs::TaskMgmtRequest(t) = &tmf.pdu.bhs else {
        panic!("expected a task management request, got {:?}", tmf.pdu.bhs)
    };
    t.itt
}

/// The target's answer to the TMF `itt`: `response` as RFC 7143 §11.6.1
/// numbers it.
fn tmf_response(itt: u32, response: u8, exp_cmd_sn: u32) -> Pdu {
    Pdu::new(Bhs::TaskMgmtResponse(TaskMgmtResponse {
        response,
        itt,
        stat_sn: 1,
        exp_cmd_sn,
        max_cmd_sn: 64,
    }))
}

/// Encode the command `tx` and give its hold to `c`, as the driver does.
fn encode_and_hold(reg: &mut Fake, c: &mut Connection, tx: Transmit) -> IserFrame {
    let itt = tx.direct.as_ref().map(|d| d.itt);
    let (frame, hold) = encode(reg, tx).unwrap();
    if let (Some(itt), Some(hold)) = (itt, hold) {
        c.hold(itt, Box::new(hold) as TaskHold)
            .expect("the task is there");
    }
    frame
}

#[test]
fn a_control_pdu_is_copied_whole_behind_a_plain_header() {
    let mut c = core(true);
    c.submit_text(Bytes::from_static(b"SendTargets=All\0"));
    let tx = one(&mut c);
    assert_eq!(tx.kind, TransmitKind::Control);
    let wire = tx.pdu.encode(Digests::default()).to_vec();
    let mut reg = Fake::default();

    let (frame, hold) = encode(&mut reg, tx).unwrap();

    assert!(hold.is_none());
    assert_eq!(frame.header(), IserHeader::CONTROL);
    let l = frame.layout();
    assert_eq!(l.head[0], &IserHeader::CONTROL.encode()[..]);
    assert!(l.in_place.is_none());
    assert_eq!(l.copied_scsi_data, 0, "text is no SCSI data");
    let sent: Vec<u8> = l
        .head
        .concat()
        .into_iter()
        .chain(l.tail.iter().copied())
        .collect();
    assert_eq!(
        &sent[ISER_HEADER_LEN..],
        &wire[..],
        "the PDU follows the header whole"
    );
}

#[test]
fn a_read_into_pool_memory_names_the_arena_key_and_holds_nothing() {
    let mut c = core(true);
    c.submit(read(16384));
    let tx = one(&mut c);
    let region = tx.direct.as_ref().unwrap().read.unwrap();
    let mut reg = Fake::default();
    reg.in_pool_region(region);

    let (frame, hold) = encode(&mut reg, tx).unwrap();

    assert!(
        hold.is_none(),
        "pool memory needs no registration per command"
    );
    assert_eq!(reg.made, 0);
    let h = frame.header();
    assert_eq!(h.opcode, IserOpcode::Control);
    assert_eq!(
        h.read,
        Some(RemoteBuf {
            stag: POOL.rkey,
            va: region.addr() as u64,
        })
    );
    assert_eq!(h.write, None);
    assert!(frame.layout().in_place.is_none(), "a read carries no data");
}

#[test]
fn a_read_outside_the_pool_is_registered_until_its_response() {
    let mut c = core(true);
    c.submit(read(16384));
    let tx = one(&mut c);
    let itt = tx.direct.as_ref().unwrap().itt;
    let region = tx.direct.as_ref().unwrap().read.unwrap();
    let mut reg = Fake::default();

    let frame = encode_and_hold(&mut reg, &mut c, tx);

    assert_eq!(
        frame.header().read,
        Some(RemoteBuf {
            stag: 0x2001,
            va: region.addr() as u64,
        }),
        "named under its own registration"
    );
    assert_eq!(reg.live(), 1, "kept with the task while the target writes");
    c.submit(read(512));
    let other = one(&mut c);
    let _ = encode_and_hold(&mut reg, &mut c, other);
    assert_eq!(reg.live(), 2);

    c.handle_pdu(response(itt, 1), Instant::now()).unwrap();

    assert_eq!(
        reg.live(),
        1,
        "released at its response, the other one kept"
    );
    assert!(matches!(
        c.poll_event(),
        Some(Event::Command { result: Ok(_), .. })
    ));
}

#[test]
fn immediate_data_from_pool_memory_goes_in_place_under_the_arena_key() {
    let mut c = core(true);
    let data = Bytes::from(vec![7u8; 32768]);
    c.submit(write(&data));
    let tx = one(&mut c);
    let w = tx.direct.as_ref().unwrap().write.clone().unwrap();
    let mut reg = Fake::default();
    reg.in_pool(&data);

    let (frame, hold) = encode(&mut reg, tx).unwrap();

    assert!(hold.is_none());
    assert_eq!(
        frame.header().write,
        Some(RemoteBuf {
            stag: POOL.rkey,
            va: data.as_ptr() as u64 + u64::from(w.offset),
        }),
        "the target reads from the first byte not sent as immediate data"
    );
    let l = frame.layout();
    let p = l.in_place.expect("sent from the caller's buffer");
    assert_eq!(p.lkey, POOL.lkey);
    assert_eq!(
        p.data.as_ptr(),
        data.as_ptr(),
        "immediate data starts the buffer"
    );
    assert_eq!(p.data.len(), w.offset as usize);
    assert!(l.head[2].is_empty(), "nothing of the data is copied");
    assert_eq!(l.copied_scsi_data, 0);
}

#[test]
fn immediate_data_outside_the_pool_goes_in_place_under_the_commands_registration() {
    let mut c = core(true);
    let data = Bytes::from(vec![7u8; 32768]);
    c.submit(write(&data));
    let tx = one(&mut c);
    let itt = tx.direct.as_ref().unwrap().itt;
    let mut reg = Fake::default();

    let frame = encode_and_hold(&mut reg, &mut c, tx);

    assert_eq!(reg.live(), 1, "one registration covers the write buffer");
    assert_eq!(frame.header().write.map(|w| w.stag), Some(0x2001));
    assert_eq!(frame.header().read, None);
    let p = frame.layout().in_place.expect("in place");
    assert_eq!(p.lkey, 0x1001, "the command's own local key");
    c.handle_pdu(response(itt, 1), Instant::now()).unwrap();
    assert_eq!(reg.live(), 0);
}

#[test]
fn a_write_sent_whole_as_immediate_data_registers_nothing_and_copies_it() {
    let mut c = core(true);
    let data = Bytes::from(vec![9u8; 4096]);
    c.submit(write(&data));
    let tx = one(&mut c);
    assert!(
        tx.direct.as_ref().and_then(|d| d.write.as_ref()).is_none(),
        "nothing left to fetch"
    );
    let mut reg = Fake::default();

    let (frame, hold) = encode(&mut reg, tx).unwrap();

    assert!(hold.is_none());
    assert_eq!(frame.header(), IserHeader::CONTROL);
    let l = frame.layout();
    assert!(l.in_place.is_none());
    assert_eq!(l.head[2], &data[..]);
    assert_eq!(l.copied_scsi_data, 4096, "a copy of SCSI data is counted");
}

#[test]
fn unsolicited_data_out_goes_in_place_from_the_pool_and_is_copied_otherwise() {
    for pool in [true, false] {
        let mut c = core(false);
        let data = Bytes::from(vec![3u8; 65536]);
        c.submit(write(&data));
        let sent = transmits(&mut c);
        let outs: Vec<&Transmit> = sent
            .iter()
            .filter(|t| t.kind == TransmitKind::DataOut)
            .collect();
        assert!(!outs.is_empty(), "InitialR2T=No: unsolicited Data-Out");
        let mut reg = Fake::default();
        if pool {
            reg.in_pool(&data);
        }
        for t in outs {
            let (frame, hold) = encode(&mut reg, t.clone()).unwrap();
            assert!(hold.is_none(), "a Data-Out registers nothing");
            assert_eq!(frame.header(), IserHeader::CONTROL);
            let l = frame.layout();
            if pool {
                assert_eq!(l.in_place.map(|p| p.lkey), Some(POOL.lkey));
                assert_eq!(l.copied_scsi_data, 0);
            } else {
                assert!(l.in_place.is_none());
                assert_eq!(l.copied_scsi_data, t.pdu.data.len());
            }
        }
    }
}

#[test]
fn task_management_ending_a_task_releases_its_registration() {
    let mut c = core(true);
    let id = c.submit(read(16384));
    let tx = one(&mut c);
    let mut reg = Fake::default();
    let _ = encode_and_hold(&mut reg, &mut c, tx);
    c.abort_task(id);
    let tmf = one(&mut c);
    let tmf_itt = tmf_itt(&tmf);
    let (frame, hold) = encode(&mut reg, tmf.clone()).unwrap();
    assert!(hold.is_none());
    assert_eq!(frame.header(), IserHeader::CONTROL);
    assert_eq!(reg.live(), 1, "the target may still be writing");

    c.handle_pdu(tmf_response(tmf_itt, 0, 3), Instant::now())
        .unwrap();

    assert_eq!(reg.live(), 0, "the TMF response ended the task");
    let events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Command {
                result: Err(TaskError::Aborted),
                ..
            }
        )),
        "{events:?}"
    );
}

#[test]
fn an_abort_of_a_task_the_target_does_not_know_releases_its_registration() {
    // Response 1, "task does not exist" (RFC 7143 §11.6.1): the target
    // holds nothing of the task, so its buffer is ours again.
    let mut c = core(true);
    let id = c.submit(read(16384));
    let tx = one(&mut c);
    let mut reg = Fake::default();
    let _ = encode_and_hold(&mut reg, &mut c, tx);
    c.abort_task(id);
    let tmf = one(&mut c);
    let tmf_itt = tmf_itt(&tmf);
    assert_eq!(reg.live(), 1);

    c.handle_pdu(tmf_response(tmf_itt, 1, 3), Instant::now())
        .unwrap();

    assert_eq!(reg.live(), 0, "the target does not know the task");
}

#[test]
fn a_hold_for_a_task_that_ended_before_it_was_given_comes_back_to_be_dropped() {
    // The driver encodes, then hands the hold over; if the task has ended
    // in between (its response, a failure), the core gives the hold back
    // and the driver drops it: nothing outlives the task.
    let mut c = core(true);
    c.submit(read(16384));
    let tx = one(&mut c);
    let itt = tx.direct.as_ref().unwrap().itt;
    let mut reg = Fake::default();
    let (_frame, hold) = encode(&mut reg, tx).unwrap();
    let hold = hold.expect("a read outside the pool is registered");
    assert_eq!(reg.live(), 1);

    c.handle_pdu(response(itt, 1), Instant::now()).unwrap();
    let back = c
        .hold(itt, Box::new(hold) as TaskHold)
        .expect_err("the task has ended: the hold comes back");
    assert_eq!(reg.live(), 1, "given back, not dropped by the core");
    drop(back);
    assert_eq!(reg.live(), 0);
}

#[test]
fn failed_or_dropped_tasks_release_their_registrations() {
    let mut reg = Fake::default();
    let mut c = core(true);
    for _ in 0..3 {
        c.submit(read(8192));
        let tx = one(&mut c);
        let _ = encode_and_hold(&mut reg, &mut c, tx);
    }
    assert_eq!(reg.live(), 3);
    c.fail_all("connection lost");
    assert_eq!(reg.live(), 0, "failed tasks drop their holds");

    let mut c = core(true);
    c.submit(read(8192));
    let tx = one(&mut c);
    let _ = encode_and_hold(&mut reg, &mut c, tx);
    assert_eq!(reg.live(), 1);
    drop(c);
    assert_eq!(reg.live(), 0, "so does the core's drop");
}

#[test]
fn a_lun_reset_releases_the_registrations_of_that_lun_only() {
    let mut c = core(true);
    let mut reg = Fake::default();
    let lun1 = [0, 1, 0, 0, 0, 0, 0, 0];
    for lun in [[0; 8], lun1, [0; 8]] {
        c.submit(CommandRequest { lun, ..read(8192) });
        let tx = one(&mut c);
        let _ = encode_and_hold(&mut reg, &mut c, tx);
    }
    assert_eq!(reg.live(), 3);
    c.lun_reset([0; 8]);
    let tmf = one(&mut c);
    let tmf_itt = tmf_itt(&tmf);

    c.handle_pdu(tmf_response(tmf_itt, 0, 5), Instant::now())
        .unwrap();

    assert_eq!(reg.live(), 1, "the command on LUN 1 keeps its registration");
}

#[test]
fn a_rejected_abort_keeps_the_registration_until_the_response() {
    let mut c = core(true);
    let id = c.submit(read(16384));
    let tx = one(&mut c);
    let itt = tx.direct.as_ref().unwrap().itt;
    let mut reg = Fake::default();
    let _ = encode_and_hold(&mut reg, &mut c, tx);
    c.abort_task(id);
    let tmf = one(&mut c);
    let tmf_itt = tmf_itt(&tmf);

    // 255: function rejected; the task lives on at the target.
    c.handle_pdu(tmf_response(tmf_itt, 255, 3), Instant::now())
        .unwrap();
    assert_eq!(reg.live(), 1, "the target may still write into the buffer");

    c.handle_pdu(response(itt, 2), Instant::now()).unwrap();
    assert_eq!(reg.live(), 0, "the SCSI Response still releases it");
}
