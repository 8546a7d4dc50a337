//! What the connection's unit tests share: default parameters, a
//! connection with a given window, canned requests and target PDUs, and
//! ways to drain what the connection sends and reports.

use std::time::Instant;

use bytes::Bytes;

use super::api::{
    CommandRequest, CommandResult, DataMovement, Event, FeatureParams, ProtocolError,
    SequenceNumbers, TaskId, Transmit,
};
use super::state::Connection;
use crate::iobuf::Pool;
use crate::proto::pdu::{Bhs, Pdu, R2t, Residual, ScsiResponse, TaskAttr};

/// The tests below spell out the values they depend on (8 KiB segments,
/// 64 KiB first burst, 5 s / 10 s keepalive): those are the defaults.
pub(super) fn params() -> FeatureParams {
    FeatureParams::default()
}

pub(super) fn connection(p: FeatureParams, max_cmd_sn: u32) -> Connection {
    Connection::new(
        p,
        SequenceNumbers {
            cmd_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn,
            exp_stat_sn: 1,
        },
    )
}

pub(super) fn read(len: u32) -> CommandRequest {
    CommandRequest {
        lun: [0; 8],
        cdb: [0x28; 16],
        data_out: Bytes::new(),
        read_len: len,
        attr: TaskAttr::Simple,
    }
}

pub(super) fn write(data: Vec<u8>) -> CommandRequest {
    CommandRequest {
        lun: [0; 8],
        cdb: [0x2a; 16],
        data_out: Bytes::from(data),
        read_len: 0,
        attr: TaskAttr::Simple,
    }
}

pub(super) fn drain(s: &mut Connection) -> Vec<Pdu> {
    std::iter::from_fn(|| s.poll_transmit().map(|t| t.pdu)).collect()
}

pub(super) fn response(
    itt: u32,
    stat_sn: u32,
    exp_cmd_sn: u32,
    max_cmd_sn: u32,
    status: u8,
) -> Pdu {
    Pdu::new(Bhs::ScsiResponse(ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        residual: Residual::default(),
        response: 0,
        status,
        itt,
        snack_tag: 0,
        stat_sn,
        exp_cmd_sn,
        max_cmd_sn,
        exp_data_sn: 0,
        bidi_read_residual_count: 0,
    }))
}

pub(super) fn itt_of(p: &Pdu) -> u32 {
    match &p.bhs {
        Bhs::ScsiCommand(c) => c.itt,
        Bhs::DataOut(d) => d.itt,
        Bhs::TextRequest(t) => t.itt,
        Bhs::NopOut(n) => n.itt,
        other => panic!("unexpected {other:?}"),
    }
}

pub(super) fn data_outs(pdus: &[Pdu]) -> Vec<(u32, u32, u32, usize, bool)> {
    pdus.iter()
        .filter_map(|p| match &p.bhs {
            Bhs::DataOut(d) => Some((d.ttt, d.data_sn, d.buffer_offset, p.data.len(), d.final_)),
            _ => None,
        })
        .collect()
}

pub(super) fn direct() -> FeatureParams {
    FeatureParams {
        data_movement: DataMovement::Direct,
        ..params()
    }
}

pub(super) fn transmits(s: &mut Connection) -> Vec<Transmit> {
    std::iter::from_fn(|| s.poll_transmit()).collect()
}

pub(super) fn response_with_underflow(itt: u32, stat_sn: u32, short_by: u32) -> Pdu {
    let mut p = response(itt, stat_sn, 2, 40, 0);
    if let Bhs::ScsiResponse(r) = &mut p.bhs {
        r.residual = Residual {
            underflow: true,
            overflow: false,
            count: short_by,
        };
    }
    p
}

pub(super) fn r2t(itt: u32, ttt: u32, offset: u32, len: u32) -> Pdu {
    Pdu::new(Bhs::R2t(R2t {
        lun: [0; 8],
        itt,
        ttt,
        stat_sn: 1,
        exp_cmd_sn: 2,
        max_cmd_sn: 40,
        r2t_sn: 0,
        buffer_offset: offset,
        desired_length: len,
    }))
}

pub(super) fn completed(s: &mut Connection) -> CommandResult {
    match s.poll_event() {
        Some(Event::Command { result, .. }) => result.expect("command succeeds"),
        other => panic!("expected a command completion, got {other:?}"),
    }
}

pub(super) fn private_pool() -> &'static Pool {
    Box::leak(Box::new(Pool::new(crate::iobuf::ARENA_LEN)))
}

pub(super) fn pooled_connection(pool: &'static Pool) -> Connection {
    let mut s = connection(params(), 40);
    s.set_read_pool(pool);
    s
}

/// Submit a read of `len` bytes and send it; its ITT.
pub(super) fn sent_read(s: &mut Connection, len: u32) -> (TaskId, u32) {
    let id = s.submit(read(len));
    let itt = itt_of(&drain(s)[0]);
    (id, itt)
}

/// Lend `itt`'s buffer for a Data-In at `offset`, fill it with `data` as
/// the receive path would, and hand it back.
pub(super) fn place(s: &mut Connection, h: Pdu, data: &[u8]) -> Result<(), ProtocolError> {
    let Bhs::DataIn(d) = &h.bhs else {
        panic!("not a Data-In")
    };
    let mut lent = s
        .lend_read_buffer(d, data.len() as u32)
        .expect("buffer lent");
    lent.dest().copy_from_slice(data);
    s.handle_placed(Pdu::new(h.bhs), lent, Instant::now())
}
