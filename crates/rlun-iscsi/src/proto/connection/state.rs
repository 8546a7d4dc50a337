//! [`Connection`]: the state of one connection in its Full Feature Phase
//! and the bookkeeping every part of it shares — task and request ids, the
//! sequence numbers (CmdSN, ExpCmdSN, MaxCmdSN, ExpStatSN; RFC 7143
//! §4.2.2.1, §4.2.2.2), inserting, finding and removing tasks,
//! completing a SCSI command (§11.4) or failing everything when the
//! connection is gone, and the queues of PDUs to send and events to report.
//! The files beside it add what the connection does with them.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::api::{
    sn_lt, CommandResult, Event, FeatureParams, ProtocolError, SequenceNumbers, TaskError,
    TaskHold, TaskId, Transmit,
};
use super::direct;
use super::tasks::{Queued, Task, TaskKind, TaskTable};
use crate::iobuf::Pool;
use crate::proto::pdu::{Pdu, Residual, RESERVED_TAG};

/// The Full Feature Phase state of one connection. See the module docs.
#[derive(Debug)]
pub struct Connection {
    pub(super) params: FeatureParams,
    pub(super) cmd_sn: u32,
    pub(super) exp_cmd_sn: u32,
    pub(super) max_cmd_sn: u32,
    pub(super) exp_stat_sn: u32,
    pub(super) next_itt: u32,
    pub(super) next_task: u64,
    pub(super) tasks: TaskTable,
    /// Non-immediate requests waiting for the window.
    pub(super) waiting: VecDeque<Queued>,
    /// LOGICAL UNIT RESETs sent and not answered: commands wait until
    /// they are, so that every command on the wire when the answer comes
    /// was sent before the reset and is ended by it (a reset may affect
    /// commands sent after it or not, RFC 7143 §11.5.1: the answer would
    /// leave those in doubt).
    pub(super) resets_outstanding: u32,
    /// SCSI commands in flight (counted against `queue_depth`).
    pub(super) commands_in_flight: u32,
    pub(super) transmit: VecDeque<Transmit>,
    pub(super) events: VecDeque<Event>,
    pub(super) last_heard: Option<Instant>,
    pub(super) ping_outstanding: Option<(u32, Instant)>,
    /// SCSI data bytes this core copied from PDUs into read buffers
    /// (in-band Data-In); see [`Connection::take_copied_bytes`].
    pub(super) copied_bytes: u64,
    /// Of `copied_bytes`, those not yet taken by [`Connection::take_copied_bytes`].
    pub(super) copied_untaken: u64,
    /// Where in-band read buffers come from; `None`: the process's
    /// ([`crate::iobuf::read_pool`]).
    pub(super) read_pool: Option<&'static Pool>,
}

impl Connection {
    /// The Full Feature Phase of a connection whose login just ended with
    /// these parameters and sequence numbers; [`Connection::start`] it when
    /// it goes live.
    pub fn new(params: FeatureParams, numbers: SequenceNumbers) -> Connection {
        Connection {
            params,
            cmd_sn: numbers.cmd_sn,
            exp_cmd_sn: numbers.exp_cmd_sn,
            max_cmd_sn: numbers.max_cmd_sn,
            exp_stat_sn: numbers.exp_stat_sn,
            next_itt: 1,
            next_task: 1,
            tasks: TaskTable::default(),
            waiting: VecDeque::new(),
            resets_outstanding: 0,
            commands_in_flight: 0,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            last_heard: None,
            ping_outstanding: None,
            copied_bytes: 0,
            copied_untaken: 0,
            read_pool: None,
        }
    }

    /// Take in-band read buffers from `pool` instead of the process's
    /// ([`crate::iobuf::read_pool`]); tests count what comes back with
    /// [`Pool::in_use`].
    pub fn set_read_pool(&mut self, pool: &'static Pool) {
        self.read_pool = Some(pool);
    }

    /// The parameters it runs with.
    pub fn params(&self) -> &FeatureParams {
        &self.params
    }

    /// SCSI data bytes this core copied between PDUs and the callers'
    /// buffers: the Data-In payloads handed to [`Connection::handle_pdu`] in a
    /// PDU's data segment; none of those the receive path read in place
    /// ([`Connection::handle_placed`]) and none when the data moves directly
    /// (a driver adds them to its own counters with
    /// [`Connection::take_copied_bytes`]).
    pub fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }

    /// The bytes copied (see [`Connection::copied_bytes`]) since the last call:
    /// a driver adds them to its process-wide counters once per turn.
    pub fn take_copied_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.copied_untaken)
    }

    /// Current sequence numbers (for diagnostics and tests).
    pub fn numbers(&self) -> SequenceNumbers {
        SequenceNumbers {
            cmd_sn: self.cmd_sn,
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        }
    }

    /// Tasks of any kind not yet completed, plus those waiting for the window.
    pub fn outstanding(&self) -> usize {
        self.tasks.len() + self.waiting.len()
    }

    pub(super) fn alloc_task_id(&mut self) -> TaskId {
        let id = TaskId(self.next_task);
        self.next_task += 1;
        id
    }

    pub(super) fn alloc_itt(&mut self) -> u32 {
        loop {
            let itt = self.next_itt;
            self.next_itt = self.next_itt.wrapping_add(1);
            if itt != RESERVED_TAG && self.tasks.is_free(itt) {
                return itt;
            }
        }
    }

    /// The task a target PDU names by its ITT, as the kind of task that PDU
    /// answers (`pick` is one of `TaskKind::command`, `text`, `ping`…). A
    /// tag we did not hand out, or one of another kind of task, is a
    /// protocol error naming the PDU (`what`).
    pub(super) fn lookup<'a, R>(
        &'a mut self,
        itt: u32,
        what: &'static str,
        pick: impl FnOnce(&'a mut TaskKind) -> Option<R>,
    ) -> Result<R, ProtocolError> {
        self.tasks
            .get_mut(&itt)
            .and_then(|t| pick(&mut t.kind))
            .ok_or(ProtocolError::UnknownTask { what, itt })
    }

    pub(super) fn insert(&mut self, task: Task) {
        self.tasks.insert(task);
    }

    pub(super) fn remove(&mut self, itt: u32) -> Option<Task> {
        let t = self.tasks.remove(&itt)?;
        if matches!(t.kind, TaskKind::Command(_)) {
            self.commands_in_flight -= 1;
        }
        Some(t)
    }

    /// Update ExpCmdSN/MaxCmdSN from a target PDU (§4.2.2.1): ignore values
    /// that would move backwards or describe an invalid window.
    pub(super) fn update_window(&mut self, exp_cmd_sn: u32, max_cmd_sn: u32) {
        if sn_lt(max_cmd_sn, exp_cmd_sn.wrapping_sub(1)) {
            return;
        }
        if sn_lt(self.exp_cmd_sn, exp_cmd_sn) || self.exp_cmd_sn == exp_cmd_sn {
            self.exp_cmd_sn = exp_cmd_sn;
        }
        if sn_lt(self.max_cmd_sn, max_cmd_sn) {
            self.max_cmd_sn = max_cmd_sn;
        }
    }

    pub(super) fn update_stat_sn(&mut self, stat_sn: u32) {
        let next = stat_sn.wrapping_add(1);
        if sn_lt(self.exp_stat_sn, next) {
            self.exp_stat_sn = next;
        }
    }

    pub(super) fn finish_command(
        &mut self,
        itt: u32,
        status: u8,
        sense: Option<Bytes>,
        residual: Residual,
    ) {
        let Some(task) = self.remove(itt) else {
            return;
        };
        let TaskKind::Command(mut c) = task.kind else {
            return;
        };
        // The target is done with the buffers: let the transport release
        // what it kept for them before they change hands.
        drop(c.hold.take());
        let len = if c.direct {
            direct::placed_len(c.read_len, &residual)
        } else {
            c.received
        };
        let data = c.read_buf.into_bytes(len as usize);
        self.events.push_back(Event::Command {
            id: task.id,
            result: Ok(CommandResult {
                status,
                sense,
                data,
                residual,
            }),
        });
    }

    /// Next PDU to send, in order (with the task's buffers when the data
    /// moves directly).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    pub(super) fn queue(&mut self, pdu: Pdu) {
        self.transmit.push_back(Transmit::from(pdu));
    }

    /// Keep `hold` for as long as task `itt` lives (see [`TaskHold`]).
    /// Given back when no command task has that tag (it has ended already:
    /// the caller drops it).
    pub fn hold(&mut self, itt: u32, hold: TaskHold) -> Result<(), TaskHold> {
        match self.tasks.get_mut(&itt).and_then(|t| t.kind.command()) {
            Some(c) => {
                c.hold = Some(hold);
                Ok(())
            }
            None => Err(hold),
        }
    }

    /// Next completed task or target event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(super) fn complete_queued_with(&mut self, q: Queued, err: TaskError) {
        match q {
            Queued::Command(id, _) => self.events.push_back(Event::Command {
                id,
                result: Err(err),
            }),
            Queued::Text(id, _) => self.events.push_back(Event::Text {
                id,
                result: Err(err),
            }),
        }
    }

    /// The connection is gone: complete every task with `reason`.
    pub fn fail_all(&mut self, reason: &str) {
        let err = TaskError::ConnectionLost(reason.to_string());
        while let Some(q) = self.waiting.pop_front() {
            self.complete_queued_with(q, err.clone());
        }
        let itts: Vec<u32> = self.tasks.itts().collect();
        let mut tasks: Vec<Task> = itts.into_iter().filter_map(|i| self.remove(i)).collect();
        tasks.sort_by_key(|t| t.id);
        for task in tasks {
            let id = task.id;
            self.events.push_back(match task.kind {
                TaskKind::Command(_) => Event::Command {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Text { .. } => Event::Text {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::TaskMgmt { .. } => Event::TaskMgmt {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Logout => Event::Logout {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Ping { .. } => continue,
            });
        }
        self.ping_outstanding = None;
        self.transmit.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use std::time::Instant;

    #[test]
    fn stale_window_update_is_ignored() {
        let mut s = connection(params(), 10);
        let id = s.submit(read(0));
        let itt = itt_of(&drain(&mut s)[0]);
        // MaxCmdSN behind ExpCmdSN-1 is invalid: keep the old window.
        s.handle_pdu(response(itt, 1, 2, 0, 0), Instant::now())
            .unwrap();
        assert_eq!(s.numbers().max_cmd_sn, 10);
        assert!(matches!(s.poll_event(), Some(Event::Command { id: got, .. }) if got == id));
    }
}
