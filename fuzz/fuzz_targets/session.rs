//! The full-feature core (`proto::connection`) fed arbitrary target PDUs
//! between the commands, text requests, pings, task management and
//! timeouts a driver would issue.
//!
//! Input: a byte choosing the negotiated parameters, then operations. An
//! operation byte below 0x30 is a request from our side; anything else is a
//! PDU from the target: a 48-byte header whose opcode, task tag, DataSN,
//! offsets and window fields are optionally set to plausible values (so the
//! fuzzer reaches the sequencing checks), plus a data segment.
//!
//! Checked: every task completes exactly once (all of them, at the latest
//! when the connection is failed at the end), read data never exceeds what
//! was asked for, and every PDU we send is well formed and within the
//! negotiated limits.
#![no_main]
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rlun_iscsi::proto::pdu::{self, Bhs, Digests, TaskAttr, BHS_LEN, MAX_DATA_SEGMENT, RESERVED_TAG};
use rlun_iscsi::proto::connection::{
    CommandRequest, DataMovement, Event, FeatureParams, Connection, SequenceNumbers, TaskId,
};
use rlun_fuzz::{frame, limits, Input};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Command { read_len: u32 },
    Text,
    TaskMgmt,
    Ping,
    Logout,
}

/// What we know about a task tag we sent, to aim target PDUs at it.
#[derive(Default, Clone, Copy)]
struct Tag {
    itt: u32,
    write_len: u32,
    data_ins: u32,
    bytes_in: u32,
}

struct Harness {
    s: Connection,
    now: Instant,
    pending: HashMap<TaskId, Kind>,
    tags: Vec<Tag>,
    write_len_by_itt: HashMap<u32, u32>,
}

const OPCODES: [u8; 16] = [
    0x20, 0x21, 0x21, 0x22, 0x24, 0x25, 0x25, 0x25, 0x26, 0x31, 0x31, 0x32, 0x3f, 0x23, 0x00, 0x01,
];

impl Harness {
    fn drain(&mut self) {
        let p = self.s.params().clone();
        while let Some(t) = self.s.poll_transmit() {
            let out = t.pdu;
            let wire = out.encode(Digests::default()).to_vec();
            let back = pdu::decode(
                Bytes::from(wire),
                &limits(Digests::default(), MAX_DATA_SEGMENT),
            )
            .expect("a PDU we send decodes");
            assert_eq!(back, out);
            match &out.bhs {
                Bhs::ScsiCommand(c) => {
                    let immediate_max = p.first_burst_length.min(p.max_xmit_data_segment_length);
                    assert!(
                        out.data.len() as u32 <= immediate_max,
                        "immediate data over the limits"
                    );
                    assert!(p.immediate_data || out.data.is_empty());
                    let write_len = if c.write {
                        c.expected_data_transfer_length
                    } else {
                        0
                    };
                    self.write_len_by_itt.insert(c.itt, write_len);
                    self.tag(Tag {
                        itt: c.itt,
                        write_len,
                        ..Tag::default()
                    });
                }
                Bhs::DataOut(d) => {
                    let total = self
                        .write_len_by_itt
                        .get(&d.itt)
                        .copied()
                        .expect("Data-Out for a write we sent");
                    assert!(!out.data.is_empty(), "empty Data-Out");
                    assert!(out.data.len() as u32 <= p.max_xmit_data_segment_length.max(512));
                    assert!(
                        u64::from(d.buffer_offset) + out.data.len() as u64 <= u64::from(total),
                        "Data-Out beyond the write"
                    );
                }
                Bhs::TextRequest(t) => self.tag(Tag {
                    itt: t.itt,
                    ..Tag::default()
                }),
                Bhs::NopOut(n) if n.itt != RESERVED_TAG => self.tag(Tag {
                    itt: n.itt,
                    ..Tag::default()
                }),
                Bhs::TaskMgmtRequest(t) => self.tag(Tag {
                    itt: t.itt,
                    ..Tag::default()
                }),
                Bhs::LogoutRequest(l) => self.tag(Tag {
                    itt: l.itt,
                    ..Tag::default()
                }),
                Bhs::NopOut(_) => {}
                other => panic!("session sent a {:?}", other.opcode()),
            }
        }
        while let Some(ev) = self.s.poll_event() {
            let (id, kind) = match &ev {
                Event::Command { id, result } => {
                    if let Ok(r) = result {
                        let Some(Kind::Command { read_len }) = self.pending.get(id) else {
                            panic!("completion for {id:?}, which is no pending command: {ev:?}");
                        };
                        assert!(
                            r.data.len() as u64 <= u64::from(*read_len),
                            "more data than asked for"
                        );
                    }
                    (*id, "command")
                }
                Event::Text { id, .. } => (*id, "text"),
                Event::TaskMgmt { id, .. } => (*id, "task management"),
                Event::Pong { id, .. } => {
                    // Keepalive pings sent by handle_timeout are not in `pending`.
                    self.pending.remove(id);
                    continue;
                }
                Event::Logout { id, .. } => (*id, "logout"),
                Event::Async { .. } | Event::Reject { .. } => continue,
            };
            assert!(
                self.pending.remove(&id).is_some(),
                "{kind} event for {id:?}, which is not pending (twice?)"
            );
        }
    }

    fn tag(&mut self, t: Tag) {
        if let Some(old) = self.tags.iter_mut().find(|o| o.itt == t.itt) {
            *old = t;
        } else if self.tags.len() < 64 {
            self.tags.push(t);
        }
    }

    fn target_pdu(&mut self, op: u8, input: &mut Input) -> Option<pdu::Pdu> {
        let mut b: [u8; BHS_LEN] = input.array();
        let len = usize::from(input.u16() % 16384);
        let data = input.bytes(len);
        let opcode = OPCODES[usize::from(op & 0x0f)];
        if op & 0x0f < 14 {
            b[0] = opcode;
        }
        let put = |b: &mut [u8; BHS_LEN], at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes())
        };
        let numbers = self.s.numbers();
        if op & 0x10 != 0 && !self.tags.is_empty() {
            let i = usize::from(b[16]) % self.tags.len();
            let t = self.tags[i];
            put(&mut b, 16, t.itt);
            if op & 0x20 != 0 {
                match b[0] & 0x3f {
                    0x25 => {
                        put(&mut b, 36, t.data_ins);
                        put(&mut b, 40, t.bytes_in);
                        self.tags[i].data_ins += 1;
                        self.tags[i].bytes_in = t.bytes_in.wrapping_add(data.len() as u32);
                    }
                    0x31 if t.write_len > 0 => {
                        let off = u32::from(b[40]) * 512 % t.write_len;
                        put(&mut b, 40, off);
                        let want = (t.write_len - off).min(1 + u32::from(b[44]) * 512);
                        put(&mut b, 44, want);
                    }
                    _ => {}
                }
            }
        }
        if op & 0x40 != 0 {
            put(&mut b, 28, numbers.cmd_sn);
            let max_cmd_sn = numbers.cmd_sn.wrapping_add(u32::from(b[32] % 64));
            put(&mut b, 32, max_cmd_sn);
        }
        if op & 0x80 != 0 {
            put(&mut b, 24, numbers.exp_stat_sn);
        }
        let wire = frame(b, data, Digests::default());
        pdu::decode(
            Bytes::from(wire),
            &limits(Digests::default(), MAX_DATA_SEGMENT),
        )
        .ok()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cfg = input.u8();
    let seg = [512, 8192, 65536, 262_144][usize::from(cfg & 3)];
    let max_burst = [512, 65536, 262_144, 16_777_215][usize::from((cfg >> 2) & 3)];
    let qd = input.u8();
    let params = FeatureParams {
        immediate_data: cfg & 0x10 != 0,
        initial_r2t: cfg & 0x20 != 0,
        first_burst_length: [512, 8192, 65536, 262_144][usize::from((cfg >> 6) & 3)].min(max_burst),
        max_burst_length: max_burst,
        max_xmit_data_segment_length: seg,
        max_recv_data_segment_length: 262_144,
        queue_depth: 1 + u32::from(qd % 8),
        nop_interval: Some(Duration::from_secs(5)),
        nop_timeout: Duration::from_secs(10),
        // The iSER mode: the target moves the data, no Data-In or R2T.
        data_movement: if qd & 0x80 != 0 {
            DataMovement::Direct
        } else {
            DataMovement::InBand
        },
    };
    let start = input.u32();
    let numbers = SequenceNumbers {
        cmd_sn: start,
        exp_cmd_sn: start,
        max_cmd_sn: start.wrapping_add(u32::from(input.u8() % 8)),
        exp_stat_sn: input.u32(),
    };
    let now = Instant::now();
    let mut h = Harness {
        s: Connection::new(params, numbers),
        now,
        pending: HashMap::new(),
        tags: Vec::new(),
        write_len_by_itt: HashMap::new(),
    };
    h.s.start(now);
    let mut ids: Vec<TaskId> = Vec::new();
    let mut dead = false;
    while !input.is_empty() && !dead {
        let op = input.u8();
        match op {
            0x00..=0x07 => {
                let read_len = u32::from(input.u16()) * 16 + u32::from(op);
                let lun = [0, input.u8() % 4, 0, 0, 0, 0, 0, 0];
                let id = h.s.submit(CommandRequest {
                    lun,
                    cdb: [0x28; 16],
                    data_out: Bytes::new(),
                    read_len,
                    attr: TaskAttr::Simple,
                });
                h.pending.insert(id, Kind::Command { read_len });
                ids.push(id);
            }
            0x08..=0x0f => {
                let len = usize::from(input.u16() % 16384) + usize::from(op & 7);
                let read_len = if input.u8() == 0xff { 512 } else { 0 }; // rarely bidirectional
                let id = h.s.submit(CommandRequest {
                    lun: [0, input.u8() % 4, 0, 0, 0, 0, 0, 0],
                    cdb: [0x2a; 16],
                    data_out: Bytes::from(vec![0xa5; len]),
                    read_len,
                    attr: TaskAttr::Simple,
                });
                h.pending.insert(id, Kind::Command { read_len });
                ids.push(id);
            }
            0x10..=0x13 => {
                let len = usize::from(input.u8());
                let id = h.s.submit_text(Bytes::copy_from_slice(input.bytes(len)));
                h.pending.insert(id, Kind::Text);
                ids.push(id);
            }
            0x14..=0x17 => {
                let id = h.s.ping(h.now);
                h.pending.insert(id, Kind::Ping);
            }
            0x18..=0x1b => {
                if let Some(&target) = ids.get(usize::from(input.u8()) % ids.len().max(1)) {
                    let id = h.s.abort_task(target);
                    h.pending.insert(id, Kind::TaskMgmt);
                }
            }
            0x1c..=0x1f => {
                let id = h.s.lun_reset([0, input.u8() % 4, 0, 0, 0, 0, 0, 0]);
                h.pending.insert(id, Kind::TaskMgmt);
            }
            0x20..=0x23 => {
                let id = h.s.logout();
                h.pending.insert(id, Kind::Logout);
            }
            0x24..=0x2f => {
                h.now += Duration::from_millis(u64::from(input.u16()) * 4);
                let _ = h.s.poll_timeout();
                if let Err(e) = h.s.handle_timeout(h.now) {
                    let _ = e.to_string();
                    dead = true;
                }
            }
            _ => {
                if let Some(p) = h.target_pdu(op, &mut input) {
                    if let Err(e) = h.s.handle_pdu(p, h.now) {
                        let _ = e.to_string();
                        dead = true;
                    }
                }
            }
        }
        h.drain();
    }
    // The connection goes away: every task still open must complete now.
    h.s.fail_all("fuzz input ended");
    h.drain();
    h.pending.retain(|_, k| *k != Kind::Ping);
    assert!(
        h.pending.is_empty(),
        "tasks never completed: {:?}",
        h.pending
    );
    assert_eq!(h.s.outstanding(), 0);
});
