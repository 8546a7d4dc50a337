//! The connection's own business besides data (RFC 7143): NOP-Out pings
//! when the target has been quiet and the verdict when one goes unanswered
//! (§11.18, §11.19), task management — ABORT TASK and LOGICAL UNIT RESET
//! (§11.5) and ending the tasks they terminated (§4.2.3) — and logout
//! (§11.14).

use std::time::Instant;

use super::api::{Event, ProtocolError, TaskError, TaskId, TmfOutcome};
use super::state::Connection;
use super::tasks::{Queued, Task, TaskKind};
use crate::proto::pdu::{
    logout_reason, tmf, Bhs, LogoutRequest, NopOut, Pdu, TaskMgmtRequest, RESERVED_TAG,
};

impl Connection {
    /// Send a NOP-Out ping now (immediate, so it ignores the window).
    pub fn ping(&mut self, now: Instant) -> TaskId {
        let id = self.alloc_task_id();
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::NopOut(NopOut {
            immediate: true,
            lun: [0; 8],
            itt,
            ttt: RESERVED_TAG,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::Ping { sent: now },
        });
        self.ping_outstanding = Some((itt, now));
        id
    }

    /// ABORT TASK for an in-flight command (§11.5.1). A command still waiting
    /// for the window is dropped locally and completes as aborted at once.
    pub fn abort_task(&mut self, target: TaskId) -> TaskId {
        let id = self.alloc_task_id();
        if let Some(pos) = self.waiting.iter().position(|q| match q {
            Queued::Command(t, _) | Queued::Text(t, _) => *t == target,
        }) {
            if let Some(q) = self.waiting.remove(pos) {
                // Still queued: say so when the window is what held it.
                let err = if self.window_open() {
                    TaskError::Aborted
                } else {
                    TaskError::WindowClosed {
                        cmd_sn: self.cmd_sn,
                        max_cmd_sn: self.max_cmd_sn,
                    }
                };
                self.complete_queued_with(q, err);
            }
            self.events.push_back(Event::TaskMgmt {
                id,
                result: Ok(TmfOutcome::Complete),
            });
            return id;
        }
        // A scan (ABORT TASK is rare) rather than a second map per command.
        let Some(ref_itt) = self.tasks.find_id(target) else {
            self.events.push_back(Event::TaskMgmt {
                id,
                result: Ok(TmfOutcome::TaskDoesNotExist),
            });
            return id;
        };
        let (lun, ref_cmd_sn) = match self.tasks.get(&ref_itt).expect("found above") {
            Task {
                kind: TaskKind::Command(c),
                cmd_sn,
                ..
            } => (c.lun, *cmd_sn),
            t => ([0; 8], t.cmd_sn),
        };
        self.send_tmf(id, tmf::ABORT_TASK, lun, ref_itt, ref_cmd_sn);
        id
    }

    /// LOGICAL UNIT RESET (§11.5.1): every task on the LUN is terminated.
    /// Commands submitted until it is answered wait (see
    /// `resets_outstanding`).
    pub fn lun_reset(&mut self, lun: [u8; 8]) -> TaskId {
        let id = self.alloc_task_id();
        self.resets_outstanding += 1;
        self.send_tmf(id, tmf::LOGICAL_UNIT_RESET, lun, RESERVED_TAG, self.cmd_sn);
        id
    }

    fn send_tmf(&mut self, id: TaskId, function: u8, lun: [u8; 8], ref_itt: u32, ref_cmd_sn: u32) {
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::TaskMgmtRequest(TaskMgmtRequest {
            immediate: true,
            function,
            lun,
            itt,
            referenced_task_tag: ref_itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            ref_cmd_sn,
            exp_data_sn: 0,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::TaskMgmt {
                function,
                lun,
                ref_itt,
            },
        });
    }

    /// Close the session (§11.14). Sent as an immediate command.
    pub fn logout(&mut self) -> TaskId {
        let id = self.alloc_task_id();
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: logout_reason::CLOSE_SESSION,
            itt,
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::Logout,
        });
        id
    }

    /// After ABORT TASK or LOGICAL UNIT RESET completes, the target sends
    /// nothing more for the affected tasks (RFC 7143 §4.2.3.3): complete them
    /// here as aborted so their buffers are released and callers can retry.
    pub(super) fn terminate_after_tmf(
        &mut self,
        function: u8,
        lun: [u8; 8],
        ref_itt: u32,
        outcome: TmfOutcome,
    ) {
        let victims: Vec<u32> = match (function, outcome) {
            (tmf::ABORT_TASK, TmfOutcome::Complete | TmfOutcome::TaskDoesNotExist) => {
                vec![ref_itt]
            }
            (tmf::LOGICAL_UNIT_RESET, TmfOutcome::Complete) => {
                let mut v: Vec<(TaskId, u32)> = self
                    .tasks
                    .values()
                    .filter(|t| matches!(&t.kind, TaskKind::Command(c) if c.lun == lun))
                    .map(|t| (t.id, t.itt))
                    .collect();
                v.sort();
                v.into_iter().map(|(_, itt)| itt).collect()
            }
            _ => Vec::new(),
        };
        for itt in victims {
            if matches!(
                self.tasks.get(&itt),
                Some(Task {
                    kind: TaskKind::Command(_),
                    ..
                })
            ) {
                let task = self.remove(itt).expect("present");
                self.events.push_back(Event::Command {
                    id: task.id,
                    result: Err(TaskError::Aborted),
                });
            }
        }
    }

    /// When [`Connection::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some((_, sent)) = self.ping_outstanding {
            return Some(sent + self.params.nop_timeout);
        }
        let interval = self.params.nop_interval?;
        Some(self.last_heard? + interval)
    }

    /// Called at (or after) the instant from [`Connection::poll_timeout`]: sends
    /// a keepalive ping when the target has been quiet, and reports a dead
    /// connection when a ping went unanswered.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtocolError> {
        if let Some((_, sent)) = self.ping_outstanding {
            if now >= sent + self.params.nop_timeout {
                return Err(ProtocolError::PingTimeout(self.params.nop_timeout));
            }
            return Ok(());
        }
        let (Some(interval), Some(last)) = (self.params.nop_interval, self.last_heard) else {
            return Ok(());
        };
        if now >= last + interval {
            self.ping(now);
        }
        Ok(())
    }

    /// Record that the connection is up as of `now` (start of full feature phase).
    pub fn start(&mut self, now: Instant) {
        self.last_heard = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use bytes::Bytes;
    use std::time::{Duration, Instant};

    #[test]
    fn target_nop_in_is_echoed_without_advancing_cmd_sn() {
        let mut s = connection(params(), 10);
        s.handle_pdu(
            Pdu::with_data(
                Bhs::NopIn(NopIn {
                    lun: [0; 8],
                    itt: RESERVED_TAG,
                    ttt: 0x55,
                    stat_sn: 1,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 10,
                }),
                Bytes::from_static(b"ping"),
            ),
            Instant::now(),
        )
        .unwrap();
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::NopOut(n) = &sent[0].bhs else {
            panic!()
        };
        assert_eq!(
            (n.itt, n.ttt, n.cmd_sn, n.immediate),
            (RESERVED_TAG, 0x55, 1, true)
        );
        assert_eq!(&sent[0].data[..], b"ping");
        assert_eq!(s.numbers().cmd_sn, 1);
    }

    #[test]
    fn idle_connection_pings_and_unanswered_ping_is_fatal() {
        let mut s = connection(params(), 10);
        let t0 = Instant::now();
        s.start(t0);
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(5)));
        s.handle_timeout(t0 + Duration::from_secs(5)).unwrap();
        let sent = drain(&mut s);
        assert!(matches!(&sent[0].bhs, Bhs::NopOut(n) if n.itt != RESERVED_TAG && n.immediate));
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + Duration::from_secs(15)),
            "deadline is the ping's timeout"
        );
        let err = s.handle_timeout(t0 + Duration::from_secs(15)).unwrap_err();
        assert_eq!(err, ProtocolError::PingTimeout(Duration::from_secs(10)));
    }

    #[test]
    fn answered_ping_yields_pong() {
        let mut s = connection(params(), 10);
        let t0 = Instant::now();
        let id = s.ping(t0);
        let itt = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(
            Pdu::new(Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt,
                ttt: RESERVED_TAG,
                stat_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 10,
            })),
            t0 + Duration::from_millis(3),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Pong { id: got, rtt }) if got == id && rtt == Duration::from_millis(3))
        );
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + Duration::from_millis(3) + Duration::from_secs(5))
        );
    }

    #[test]
    fn long_text_answer_is_fetched_with_continuation_requests() {
        let mut s = connection(params(), 10);
        let id = s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let first = drain(&mut s);
        assert_eq!(&first[0].data[..], b"SendTargets=All\0");
        let itt = itt_of(&first[0]);
        let text = |final_, ttt, data: &'static [u8]| {
            Pdu::with_data(
                Bhs::TextResponse(TextResponse {
                    final_,
                    continue_: !final_,
                    lun: [0; 8],
                    itt,
                    ttt,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                }),
                Bytes::from_static(data),
            )
        };
        let now = Instant::now();
        s.handle_pdu(text(false, 0x77, b"TargetName=iqn.a\0TargetAdd"), now)
            .unwrap();
        let cont = drain(&mut s);
        assert!(
            matches!(&cont[0].bhs, Bhs::TextRequest(t) if t.ttt == 0x77 && t.itt == itt && cont[0].data.is_empty())
        );
        s.handle_pdu(text(true, RESERVED_TAG, b"ress=1.2.3.4:3260,1\0"), now)
            .unwrap();
        match s.poll_event() {
            Some(Event::Text { id: got, result }) => {
                assert_eq!(got, id);
                assert_eq!(
                    &result.unwrap()[..],
                    b"TargetName=iqn.a\0TargetAddress=1.2.3.4:3260,1\0"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn send_targets_reply_over_16_mib_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let itt = itt_of(&drain(&mut s)[0]);
        let part = |final_: bool, data: Bytes| {
            Pdu::with_data(
                Bhs::TextResponse(TextResponse {
                    final_,
                    continue_: !final_,
                    lun: [0; 8],
                    itt,
                    ttt: 0x77,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                }),
                data,
            )
        };
        // 64 segments of 256 KiB: exactly the 16 MiB bound, still accepted.
        let chunk = Bytes::from(vec![b'a'; 256 * 1024]);
        let now = Instant::now();
        for _ in 0..MAX_TEXT_RESPONSE_BYTES / chunk.len() {
            s.handle_pdu(part(false, chunk.clone()), now).unwrap();
        }
        let err = s
            .handle_pdu(part(true, Bytes::from_static(b"b")), now)
            .unwrap_err();
        assert!(err.to_string().contains("over 16 MiB"), "{err}");
        assert!(
            s.poll_event().is_none(),
            "no text result from a refused reply"
        );
    }

    #[test]
    fn endless_text_continuation_is_a_protocol_error() {
        let mut s = connection(params(), 10);
        s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let itt = itt_of(&drain(&mut s)[0]);
        let more = Pdu::new(Bhs::TextResponse(TextResponse {
            final_: false,
            continue_: false,
            lun: [0; 8],
            itt,
            ttt: 0x77,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 10,
        }));
        let now = Instant::now();
        for _ in 1..MAX_TEXT_RESPONSES {
            s.handle_pdu(more.clone(), now).unwrap();
            assert_eq!(drain(&mut s).len(), 1, "one continuation request each");
        }
        let err = s.handle_pdu(more, now).unwrap_err();
        assert!(matches!(err, ProtocolError::MalformedData { .. }), "{err}");
        assert!(
            err.to_string().contains("more than 1024 responses"),
            "{err}"
        );
    }

    #[test]
    fn completed_abort_task_terminates_the_referenced_command() {
        let mut s = connection(params(), 10);
        let victim = s.submit(read(512));
        let other = s.submit(read(512));
        drain(&mut s);
        let abort = s.abort_task(victim);
        let sent = drain(&mut s);
        let Bhs::TaskMgmtRequest(t) = &sent[0].bhs else {
            panic!("{:?}", sent[0].bhs)
        };
        assert_eq!(t.function, tmf::ABORT_TASK);
        assert!(t.immediate);
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: t.itt,
                stat_sn: 1,
                exp_cmd_sn: 3,
                max_cmd_sn: 10,
            })),
            Instant::now(),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::Aborted) }) if id == victim)
        );
        assert!(
            matches!(s.poll_event(), Some(Event::TaskMgmt { id, result: Ok(TmfOutcome::Complete) }) if id == abort)
        );
        assert_eq!(s.outstanding(), 1, "{other:?} is still running");
    }

    /// The target answers LUN reset `itt` with "function complete"; the
    /// commands the core then ended as aborted.
    fn reset_completes(s: &mut Connection, itt: u32, exp_cmd_sn: u32) -> Vec<TaskId> {
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt,
                stat_sn: 1,
                exp_cmd_sn,
                max_cmd_sn: 10,
            })),
            Instant::now(),
        )
        .unwrap();
        std::iter::from_fn(|| s.poll_event())
            .filter_map(|e| match e {
                Event::Command {
                    id,
                    result: Err(TaskError::Aborted),
                } => Some(id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn completed_lun_reset_terminates_every_command_on_that_lun() {
        let mut s = connection(params(), 10);
        let a = s.submit(read(512));
        let mut on_lun2 = read(512);
        on_lun2.lun = [0, 2, 0, 0, 0, 0, 0, 0];
        s.submit(on_lun2);
        let b = s.submit(read(512));
        drain(&mut s);
        s.lun_reset([0; 8]);
        let itt = match &drain(&mut s)[0].bhs {
            Bhs::TaskMgmtRequest(t) => t.itt,
            other => panic!("{other:?}"),
        };
        let aborted = reset_completes(&mut s, itt, 4);
        assert_eq!(aborted, vec![a, b]);
        assert_eq!(s.outstanding(), 1);
    }

    #[test]
    fn commands_submitted_during_a_lun_reset_wait_for_its_answer_and_are_not_ended_by_it() {
        let mut s = connection(params(), 10);
        let before = s.submit(read(512));
        drain(&mut s);
        s.lun_reset([0; 8]);
        let after = s.submit(read(512));
        let sent = drain(&mut s);
        let [Pdu {
            bhs: Bhs::TaskMgmtRequest(t),
            ..
        }] = &sent[..]
        else {
            panic!("only the reset goes out while it is unanswered: {sent:?}")
        };
        let aborted = reset_completes(&mut s, t.itt, 2);
        assert_eq!(
            aborted,
            vec![before],
            "only the command sent before the reset"
        );
        let sent = drain(&mut s);
        assert!(
            matches!(
                &sent[..],
                [Pdu {
                    bhs: Bhs::ScsiCommand(_),
                    ..
                }]
            ),
            "the held command goes once the reset answered: {sent:?}"
        );
        assert_eq!(s.outstanding(), 1);
        let _ = after;
    }
}
