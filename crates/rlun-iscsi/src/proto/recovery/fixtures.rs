//! What the recovery tests share: a harness that drives the machine with a
//! real connection core and hand-made target PDUs — no socket, no clock
//! (instants are `t0` plus offsets) — and readers of its outputs.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::api::{Failure, Loss, Notice, Output, RecoveryConfig, RequestId};
use super::machine::Recovery;
use crate::proto::connection::{CommandRequest, Connection, FeatureParams, SequenceNumbers};
use crate::proto::pdu::{
    tmf, AsyncMessage, Bhs, LogoutResponse, Pdu, Residual, ScsiResponse, TaskAttr, TaskMgmtResponse,
};

pub(super) const T2W: Duration = Duration::from_secs(2);
pub(super) const GOOD: u8 = 0;

pub(super) fn cfg() -> RecoveryConfig {
    RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(120), true)
}

pub(super) fn core_with(nop_interval: Option<Duration>) -> Connection {
    core_of(FeatureParams {
        nop_interval,
        ..FeatureParams::default()
    })
}

/// A core with `params`, at CmdSN 1 with a window of 64.
pub(super) fn core_of(params: FeatureParams) -> Connection {
    Connection::new(
        params,
        SequenceNumbers {
            cmd_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 64,
            exp_stat_sn: 1,
        },
    )
}

pub(super) fn core() -> Connection {
    core_with(None)
}

/// A read whose CDB starts with `tag`, so re-issues can be recognised.
pub(super) fn read(tag: u8) -> CommandRequest {
    let mut cdb = [0u8; 16];
    cdb[0] = tag;
    CommandRequest {
        lun: [0; 8],
        cdb,
        data_out: Bytes::new(),
        read_len: 0,
        attr: TaskAttr::Simple,
    }
}

/// What the machine sent, in a form tests can compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    /// SCSI command: (CDB tag, ITT).
    Cmd(u8, u32),
    /// Task management: (function, ITT, referenced ITT).
    Tmf(u8, u32, u32),
    Logout(u32),
    Text(u32),
    Nop(u32),
}

pub(super) struct Harness<W = ()> {
    pub(super) r: Recovery<W>,
    pub(super) t0: Instant,
    pub(super) stat_sn: u32,
}

impl Harness {
    pub(super) fn new() -> Harness {
        Harness::with(cfg(), core())
    }

    pub(super) fn with(cfg: RecoveryConfig, core: Connection) -> Harness {
        Harness::with_waiters(cfg, core)
    }

    pub(super) fn cmd(&mut self, tag: u8, secs: f64) -> RequestId {
        let now = self.at(secs);
        self.r.handle_command(read(tag), (), now)
    }

    /// Run to `secs`, when the command with CDB tag `tag` and ITT `itt`
    /// times out (30 s): the timeout notice, then one ABORT TASK for it.
    /// Returns the ABORT TASK's own ITT.
    pub(super) fn times_out_and_is_aborted(&mut self, secs: f64, tag: u8, itt: u32) -> u32 {
        self.run_until(secs);
        assert!(notices(&self.outputs()).contains(&Notice::CommandTimedOut {
            opcode: tag,
            timeout: Duration::from_secs(30)
        }));
        let sent = self.sent();
        let [Sent::Tmf(tmf::ABORT_TASK, abort, referenced)] = sent[..] else {
            panic!("{sent:?}")
        };
        assert_eq!(referenced, itt);
        abort
    }

    /// The ITT of the command with `tag` in `sent`.
    pub(super) fn itt_of(sent: &[Sent], tag: u8) -> u32 {
        sent.iter()
            .find_map(|s| match s {
                Sent::Cmd(t, itt) if *t == tag => Some(*itt),
                _ => None,
            })
            .unwrap_or_else(|| panic!("command {tag:#x} not in {sent:?}"))
    }
}

impl<W> Harness<W> {
    pub(super) fn with_waiters(cfg: RecoveryConfig, core: Connection) -> Harness<W> {
        let t0 = Instant::now();
        Harness {
            r: Recovery::new(cfg, core, T2W, t0),
            t0,
            stat_sn: 1,
        }
    }

    pub(super) fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }

    pub(super) fn sent(&mut self) -> Vec<Sent> {
        std::iter::from_fn(|| self.r.poll_transmit())
            .map(|t| match t.pdu.bhs {
                Bhs::ScsiCommand(c) => Sent::Cmd(c.cdb[0], c.itt),
                Bhs::TaskMgmtRequest(t) => Sent::Tmf(t.function, t.itt, t.referenced_task_tag),
                Bhs::LogoutRequest(l) => Sent::Logout(l.itt),
                Bhs::TextRequest(t) => Sent::Text(t.itt),
                Bhs::NopOut(n) => Sent::Nop(n.itt),
                other => panic!("unexpected PDU {other:?}"),
            })
            .collect()
    }

    pub(super) fn outputs(&mut self) -> Vec<Output<W>> {
        std::iter::from_fn(|| self.r.poll_output()).collect()
    }

    pub(super) fn next_stat_sn(&mut self) -> u32 {
        self.stat_sn += 1;
        self.stat_sn - 1
    }

    pub(super) fn pdu(&mut self, bhs: Bhs, data: Bytes, secs: f64) {
        let now = self.at(secs);
        self.r.handle_pdu(Pdu::with_data(bhs, data), now);
    }

    pub(super) fn answer(&mut self, itt: u32, status: u8, secs: f64) {
        let stat_sn = self.next_stat_sn();
        self.pdu(
            Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: false,
                bidi_underflow: false,
                residual: Residual::default(),
                response: 0,
                status,
                itt,
                snack_tag: 0,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
                exp_data_sn: 0,
                bidi_read_residual_count: 0,
            }),
            Bytes::new(),
            secs,
        );
    }

    pub(super) fn tmf_answer(&mut self, itt: u32, response: u8, secs: f64) {
        let stat_sn = self.next_stat_sn();
        self.pdu(
            Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response,
                itt,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
            }),
            Bytes::new(),
            secs,
        );
    }

    pub(super) fn logout_answer(&mut self, itt: u32, secs: f64) {
        let stat_sn = self.next_stat_sn();
        self.pdu(
            Bhs::LogoutResponse(LogoutResponse {
                response: 0,
                itt,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
                time2wait: 0,
                time2retain: 0,
            }),
            Bytes::new(),
            secs,
        );
    }

    pub(super) fn async_message(
        &mut self,
        event: u8,
        parameters: [u16; 3],
        data: Bytes,
        secs: f64,
    ) {
        let stat_sn = self.next_stat_sn();
        self.pdu(
            Bhs::AsyncMessage(AsyncMessage {
                lun: [0; 8],
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
                event,
                vcode: 0,
                parameter1: parameters[0],
                parameter2: parameters[1],
                parameter3: parameters[2],
            }),
            data,
            secs,
        );
    }

    pub(super) fn timeout(&mut self, secs: f64) {
        let now = self.at(secs);
        self.r.handle_timeout(now);
    }

    /// Run the timer up to `secs`, as a driver sleeping to each deadline would.
    pub(super) fn run_until(&mut self, secs: f64) {
        let end = self.at(secs);
        while let Some(t) = self.r.poll_timeout() {
            if t > end {
                break;
            }
            self.r.handle_timeout(t);
        }
    }

    pub(super) fn lose(&mut self, secs: f64) {
        let now = self.at(secs);
        self.r.handle_connection_lost(now);
    }

    pub(super) fn connected(&mut self, secs: f64) {
        let now = self.at(secs);
        self.r.handle_connected(core(), T2W, now);
    }

    pub(super) fn connect_failed(&mut self, secs: f64) {
        let now = self.at(secs);
        self.r.handle_connect_failed(now);
    }
}

pub(super) fn command_results(outputs: &[Output]) -> Vec<(RequestId, Result<u8, Failure>)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Command { id, result, .. } => {
                Some((*id, result.as_ref().map(|r| r.status).map_err(Clone::clone)))
            }
            _ => None,
        })
        .collect()
}

pub(super) fn connects(outputs: &[Output]) -> usize {
    outputs
        .iter()
        .filter(|o| matches!(o, Output::Connect))
        .count()
}

pub(super) fn disconnect(outputs: &[Output]) -> Option<(Loss, bool)> {
    outputs.iter().find_map(|o| match o {
        Output::Disconnect {
            cause, reconnect, ..
        } => Some((cause.clone(), *reconnect)),
        _ => None,
    })
}

pub(super) fn finished(outputs: &[Output]) -> bool {
    outputs.iter().any(|o| matches!(o, Output::Finished))
}

pub(super) fn notices(outputs: &[Output]) -> Vec<Notice> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Notice(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

/// Sense data of a UNIT ATTENTION with the given ASC/ASCQ, as an iSCSI
/// data segment: SenseLength (2 bytes), then fixed-format sense.
pub(super) fn sense_segment(asc: u8, ascq: u8) -> Bytes {
    let mut s = vec![0u8; 2 + 18];
    s[1] = 18; // SenseLength
    s[2] = 0x70; // response code: current, fixed format
    s[2 + 2] = 0x06; // sense key: UNIT ATTENTION
    s[2 + 7] = 10; // additional sense length
    s[2 + 12] = asc;
    s[2 + 13] = ascq;
    Bytes::from(s)
}

/// The waiters that came back with command answers, in order, with
/// the outcome (status or failure).
pub(super) fn waiters_back(outputs: Vec<Output<u32>>) -> Vec<(u32, Result<u8, Failure>)> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Command { result, waiter, .. } => Some((waiter, result.map(|r| r.status))),
            _ => None,
        })
        .collect()
}

pub(super) fn disconnect_of<W>(outputs: &[Output<W>]) -> Option<&Loss> {
    outputs.iter().find_map(|o| match o {
        Output::Disconnect { cause, .. } => Some(cause),
        _ => None,
    })
}

/// A core that keeps at most `depth` commands in flight.
pub(super) fn core_with_depth(depth: u32) -> Connection {
    core_of(FeatureParams {
        queue_depth: depth,
        nop_interval: None,
        ..FeatureParams::default()
    })
}

/// A core whose command window ends at `max_cmd_sn`.
pub(super) fn core_with_window(max_cmd_sn: u32) -> Connection {
    Connection::new(
        FeatureParams {
            nop_interval: None,
            ..FeatureParams::default()
        },
        SequenceNumbers {
            cmd_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn,
            exp_stat_sn: 1,
        },
    )
}

/// One flap: the connection attempt succeeds, and the target breaks the
/// new connection right away (here: a PDU with an unknown task tag).
/// Returns the time and everything the machine said.
pub(super) fn flap(h: &mut Harness) -> (f64, Vec<Output>) {
    let wake =
        h.r.poll_timeout()
            .expect("an attempt or give-up is scheduled");
    h.r.handle_timeout(wake);
    let now = wake.duration_since(h.t0).as_secs_f64();
    let mut out = h.outputs();
    if connects(&out) == 1 {
        h.connected(now + 0.1);
        h.sent();
        h.answer(0xdead_beef, GOOD, now + 0.2);
        out.extend(h.outputs());
    }
    (now + 0.2, out)
}
