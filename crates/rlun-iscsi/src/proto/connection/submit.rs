//! Sending requests (RFC 7143 §4.2.2.1, §11.3, §11.10): SCSI commands and
//! Text Requests wait in order until the command window (CmdSN up to
//! MaxCmdSN) and the queue depth admit them; then each gets its ITT and
//! CmdSN and leaves — a command with its immediate data, followed by
//! unsolicited Data-Out (`inband.rs`) or with its buffers for the
//! transport (`direct.rs`).

use bytes::{Bytes, BytesMut};

use super::api::{
    sn_lte, CommandRequest, DataMovement, Event, TaskError, TaskId, Transmit, TransmitKind,
    CALLER_TASK_IDS,
};
use super::direct;
use super::state::Connection;
use super::tasks::{CommandTask, Queued, ReadBuf, Task, TaskKind};
use crate::iobuf::IoBuf;
use crate::proto::pdu::{Bhs, Pdu, ScsiCommand, TextRequest, RESERVED_TAG};

impl Connection {
    /// True while command `task` still waits here for the command window or
    /// the queue depth: the target has not seen it yet.
    pub fn is_waiting(&self, task: TaskId) -> bool {
        // From the back: a command just submitted, if held back, is last.
        self.waiting.iter().rev().any(|q| match q {
            Queued::Command(t, _) => *t == task,
            Queued::Text(..) => false,
        })
    }

    /// True when the window admits one more non-immediate command (§4.2.2.1).
    pub fn window_open(&self) -> bool {
        sn_lte(self.cmd_sn, self.max_cmd_sn)
    }

    /// Queue a SCSI command. It is sent as soon as the command window and the
    /// queue depth allow; its result arrives as [`Event::Command`].
    pub fn submit(&mut self, req: CommandRequest) -> TaskId {
        let id = self.alloc_task_id();
        self.enqueue_command(id, req);
        id
    }

    /// [`Connection::submit`] under a task id the caller chose: one with
    /// [`CALLER_TASK_IDS`] set (the core's own ids never have it), not used
    /// by another task of this core that has not completed yet. The
    /// recovery machine puts its own request id there, so the
    /// [`Event::Command`] names its record directly (no map from task ids
    /// to requests).
    pub fn submit_as(&mut self, id: TaskId, req: CommandRequest) {
        debug_assert!(
            id.0 & CALLER_TASK_IDS != 0,
            "caller task ids have the top bit set"
        );
        self.enqueue_command(id, req);
    }

    fn enqueue_command(&mut self, id: TaskId, req: CommandRequest) {
        if !req.data_out.is_empty() && req.read_len > 0 {
            self.events.push_back(Event::Command {
                id,
                result: Err(TaskError::Invalid(
                    "bidirectional commands are not supported",
                )),
            });
            return;
        }
        // Nothing waits and the window and queue depth allow it: straight
        // out, without a trip through the queue (the usual case).
        if self.waiting.is_empty()
            && self.resets_outstanding == 0
            && self.window_open()
            && self.commands_in_flight < self.params.queue_depth
        {
            self.send_command(id, req);
            return;
        }
        self.waiting.push_back(Queued::Command(id, req));
        self.pump();
    }

    /// Start a Text Request exchange (e.g. `SendTargets=All`); the reassembled
    /// answer arrives as [`Event::Text`].
    pub fn submit_text(&mut self, data: Bytes) -> TaskId {
        let id = self.alloc_task_id();
        self.waiting.push_back(Queued::Text(id, data));
        self.pump();
        id
    }

    /// Move waiting requests onto the wire while the window and queue depth allow.
    pub(super) fn pump(&mut self) {
        while self.window_open() {
            let Some(front) = self.waiting.front() else {
                break;
            };
            if matches!(front, Queued::Command(..))
                && (self.commands_in_flight >= self.params.queue_depth
                    || self.resets_outstanding > 0)
            {
                break;
            }
            match self.waiting.pop_front().expect("front exists") {
                Queued::Command(id, req) => self.send_command(id, req),
                Queued::Text(id, data) => self.send_text(id, data),
            }
        }
    }

    fn send_command(&mut self, id: TaskId, req: CommandRequest) {
        let itt = self.alloc_itt();
        let cmd_sn = self.cmd_sn;
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        let total = req.data_out.len() as u32;
        let p = &self.params;
        // Immediate data (§4.2.5.2): in the command PDU itself.
        let immediate_len = if p.immediate_data {
            total
                .min(p.first_burst_length)
                .min(p.max_xmit_data_segment_length)
        } else {
            0
        };
        // Unsolicited Data-Out PDUs follow when InitialR2T=No, up to FirstBurstLength.
        let unsolicited_end = if !p.initial_r2t {
            total.min(p.first_burst_length)
        } else {
            immediate_len
        };
        let final_ = unsolicited_end <= immediate_len;
        let cmd = ScsiCommand {
            immediate: false,
            final_,
            read: req.read_len > 0,
            write: total > 0,
            attr: req.attr,
            lun: req.lun,
            itt,
            expected_data_transfer_length: if total > 0 { total } else { req.read_len },
            cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb: req.cdb,
        };
        let direct = p.data_movement == DataMovement::Direct;
        let (read_buf, buffers) = if direct {
            direct::command_buffers(itt, &req, unsolicited_end)
        } else {
            (ReadBuf::InBand(IoBuf::empty()), None)
        };
        self.transmit.push_back(Transmit {
            pdu: Pdu::with_data(
                Bhs::ScsiCommand(cmd),
                req.data_out.slice(..immediate_len as usize),
            ),
            kind: TransmitKind::ScsiCommand,
            direct: buffers,
        });
        if unsolicited_end > immediate_len {
            self.queue_data_out(
                itt,
                req.lun,
                RESERVED_TAG,
                &req.data_out,
                immediate_len,
                unsolicited_end,
            );
        }
        self.commands_in_flight += 1;
        self.insert(Task {
            id,
            itt,
            cmd_sn,
            kind: TaskKind::Command(CommandTask {
                hold: None,
                lun: req.lun,
                data_out: req.data_out,
                read_len: req.read_len,
                read_buf,
                received: 0,
                next_data_sn: 0,
                status_from_data_in: None,
                direct,
                lent: false,
            }),
        });
    }

    fn send_text(&mut self, id: TaskId, data: Bytes) {
        let itt = self.alloc_itt();
        let cmd_sn = self.cmd_sn;
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.queue(Pdu::with_data(
            Bhs::TextRequest(TextRequest {
                immediate: false,
                final_: true,
                continue_: false,
                lun: [0; 8],
                itt,
                ttt: RESERVED_TAG,
                cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data,
        ));
        self.insert(Task {
            id,
            itt,
            cmd_sn,
            kind: TaskKind::Text {
                received: BytesMut::new(),
                responses: 0,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::testing::data_in;
    use std::time::Instant;

    #[test]
    fn commands_wait_while_the_window_is_closed_and_go_when_it_reopens() {
        // Window admits CmdSN 1..=3.
        let mut s = connection(params(), 3);
        let now = Instant::now();
        for _ in 0..5 {
            s.submit(read(512));
        }
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 3, "only three commands fit in the window");
        let sns: Vec<u32> = sent
            .iter()
            .map(|p| match &p.bhs {
                Bhs::ScsiCommand(c) => c.cmd_sn,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(sns, vec![1, 2, 3]);

        // The target closes the window completely (MaxCmdSN = ExpCmdSN - 1)
        // while answering the first command: nothing new may go out.
        let first = itt_of(&sent[0]);
        s.handle_pdu(response(first, 1, 4, 3, 0), now).unwrap();
        assert!(drain(&mut s).is_empty());
        assert!(!s.window_open());

        // Reopening by two lets exactly the two queued commands through.
        let second = itt_of(&sent[1]);
        s.handle_pdu(response(second, 2, 4, 5, 0), now).unwrap();
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 2);
        assert_eq!(s.numbers().cmd_sn, 6);
        assert_eq!(s.numbers().exp_stat_sn, 3);
    }

    #[test]
    fn aborting_a_command_the_closed_window_held_back_says_so() {
        // Window admits CmdSN 1 only; the second command waits for it.
        let mut s = connection(params(), 1);
        let now = Instant::now();
        let first = s.submit(read(512));
        let held = s.submit(read(512));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        // The target answers the first and keeps the window closed, moving
        // MaxCmdSN backwards too (ignored: the window cannot shrink).
        s.handle_pdu(response(itt_of(&sent[0]), 1, 2, 0, 0), now)
            .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Ok(_) }) if id == first)
        );
        assert!(drain(&mut s).is_empty());
        s.abort_task(held);
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { id, result: Err(TaskError::WindowClosed { cmd_sn: 2, max_cmd_sn: 1 }) }) if id == held
        ));
    }

    #[test]
    fn aborting_a_command_queued_behind_the_queue_depth_is_a_plain_abort() {
        let p = FeatureParams {
            queue_depth: 1,
            ..params()
        };
        let mut s = connection(p, 100);
        s.submit(read(512));
        let held = s.submit(read(512));
        assert_eq!(drain(&mut s).len(), 1);
        assert!(s.window_open());
        s.abort_task(held);
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { id, result: Err(TaskError::Aborted) }) if id == held
        ));
    }

    #[test]
    fn queue_depth_limits_commands_in_flight() {
        let mut s = connection(
            FeatureParams {
                queue_depth: 2,
                ..params()
            },
            100,
        );
        for _ in 0..4 {
            s.submit(read(512));
        }
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 2);
        s.handle_pdu(
            data_in(itt_of(&sent[0]), 0, 0, &[7u8; 512], true),
            Instant::now(),
        )
        .unwrap();
        assert_eq!(drain(&mut s).len(), 1);
    }

    #[test]
    fn window_works_across_cmd_sn_wraparound() {
        let mut s = Connection::new(
            params(),
            SequenceNumbers {
                cmd_sn: 0xffff_fffe,
                exp_cmd_sn: 0xffff_fffe,
                max_cmd_sn: 1,
                exp_stat_sn: 0,
            },
        );
        for _ in 0..6 {
            s.submit(read(0));
        }
        assert_eq!(drain(&mut s).len(), 4, "SNs fffffffe, ffffffff, 0, 1");
    }
}
