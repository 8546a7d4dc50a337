//! The time input of the machine: when it next wants
//! [`Recovery::handle_timeout`] called, and what passing time does — the
//! connection core's keepalive, a command past its deadline aborted (ABORT
//! TASK, RFC 7143 §11.5.1) and re-issued, unanswered task management
//! escalated to LOGICAL UNIT RESET and then to a new connection, the next
//! connection attempt after DefaultTime2Wait (§13.15) or back-off, and the
//! replacement timeout while disconnected.

use std::time::Instant;

use super::api::{Failure, Loss, Notice, Output, QUEUED_RECHECK};
use super::machine::Recovery;
use super::records::{Conn, Other, OwnTmf};
use crate::proto::connection::{ProtocolError, TaskId};

impl<W> Recovery<W> {
    /// When each caller's task management request now unanswered was sent.
    fn caller_tmfs_sent(&self) -> impl Iterator<Item = Instant> + '_ {
        self.others.values().filter_map(|o| match o {
            Other::Tmf(_, sent) => Some(*sent),
            _ => None,
        })
    }

    /// When [`Recovery::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.conn {
            Conn::Live(core) => {
                let cmd = self.deadlines.first(&self.cmds);
                let tmf = self
                    .tmfs
                    .values()
                    .map(|t| match t {
                        OwnTmf::Abort { sent, .. } | OwnTmf::Reset { sent } => *sent,
                    })
                    .chain(self.caller_tmfs_sent())
                    .min()
                    .map(|sent| sent + self.cfg.tmf_timeout);
                [core.poll_timeout(), cmd, tmf].into_iter().flatten().min()
            }
            Conn::Down { wake, .. } => [*wake, self.give_up_at()].into_iter().flatten().min(),
            Conn::Closed => None,
        }
    }

    /// Called at (or after) the instant from [`Recovery::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        match &mut self.conn {
            Conn::Live(core) => {
                if core.poll_timeout().is_some_and(|t| t <= now) {
                    let result = core.handle_timeout(now);
                    self.drain_core(now);
                    match result {
                        Ok(()) => {}
                        Err(ProtocolError::PingTimeout(d)) => {
                            return self.lose(Loss::NotResponding(d), now)
                        }
                        Err(e) => return self.lose(Loss::Protocol(e), now),
                    }
                }
                if self.check_tmfs(now) {
                    self.check_deadlines(now);
                }
                self.drain_core(now);
                self.step();
            }
            Conn::Down { since, wake } => {
                let (since, wake) = (*since, *wake);
                self.check_stall(now);
                if !self.requests_open && self.cmds.is_empty() {
                    return self.finish(Failure::Closed);
                }
                if wake.is_some_and(|w| w <= now) {
                    self.conn = Conn::Down { since, wake: None };
                    self.outputs.push_back(Output::Connect);
                }
            }
            Conn::Closed => {}
        }
    }

    /// Escalate our task management that has not answered: ABORT TASK →
    /// LOGICAL UNIT RESET → new connection. Returns false when the
    /// connection was dropped.
    fn check_tmfs(&mut self, now: Instant) -> bool {
        let mut expired: Vec<(TaskId, OwnTmf)> = self
            .tmfs
            .iter()
            .filter(|(_, t)| match t {
                OwnTmf::Abort { sent, .. } | OwnTmf::Reset { sent } => {
                    now >= *sent + self.cfg.tmf_timeout
                }
            })
            .map(|(id, t)| (*id, *t))
            .collect();
        expired.sort_by_key(|(id, _)| *id);
        // A LOGICAL UNIT RESET, ours or a caller's, holds the
        // connection's commands until it answers: one that does not
        // within the TMF timeout costs the connection.
        let caller_expired = self
            .caller_tmfs_sent()
            .any(|sent| now >= sent + self.cfg.tmf_timeout);
        if caller_expired
            || expired
                .iter()
                .any(|(_, t)| matches!(t, OwnTmf::Reset { .. }))
        {
            self.lose(Loss::TaskManagementTimeout(self.cfg.tmf_timeout), now);
            return false;
        }
        for (id, t) in expired {
            self.tmfs.remove(&id);
            if let OwnTmf::Abort { lun, .. } = t {
                self.outputs
                    .push_back(Output::Notice(Notice::AbortUnanswered));
                self.reset_lun(lun, now);
            }
        }
        true
    }

    /// Abort commands past their deadline.
    fn check_deadlines(&mut self, now: Instant) {
        while let Some((_, id)) = self.deadlines.pop_due(now, &self.cmds) {
            let Conn::Live(core) = &mut self.conn else {
                return;
            };
            let Some(cmd) = self.cmds.get_mut(id.0) else {
                continue;
            };
            cmd.deadline = None;
            let Some(task) = cmd.task else {
                continue;
            };
            // Held back by a window the *target* has kept closed for a whole
            // command timeout: that is the target's doing, and the command
            // times out as before (aborted locally, re-issued, and failing
            // as WindowClosed after its retries). Held back by our own queue
            // depth, or by a window that is open again, it only waits.
            let window_stuck = cmd.queued
                && !core.window_open()
                && cmd
                    .submitted
                    .is_some_and(|t| now >= t + self.cfg.command_timeout);
            if cmd.queued && !window_stuck {
                // Still waiting here: look again shortly. Sent since the
                // last look: the full timeout from now.
                cmd.queued = core.is_waiting(task);
                let next = now
                    + if cmd.queued {
                        QUEUED_RECHECK
                    } else {
                        self.cfg.command_timeout
                    };
                cmd.deadline = Some(next);
                self.deadlines.push(next, id, &self.cmds);
                continue;
            }
            cmd.timeouts += 1;
            self.outputs
                .push_back(Output::Notice(Notice::CommandTimedOut {
                    opcode: cmd.req.cdb[0],
                    timeout: self.cfg.command_timeout,
                }));
            let lun = cmd.req.lun;
            let tmf = core.abort_task(task);
            self.tmfs.insert(tmf, OwnTmf::Abort { lun, sent: now });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::proto::recovery::*;
    use std::time::Duration;

    #[test]
    fn command_held_back_by_the_queue_depth_gets_its_full_timeout_once_sent() {
        // Queue depth 1: B waits in rlun behind A, unseen by the target.
        let mut h = Harness::with(cfg(), core_with_depth(1));
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        let sent = h.sent();
        assert_eq!(sent.len(), 1, "only A goes out: {sent:?}");
        // A is answered after 29 s; only then does B go out.
        h.run_until(28.5);
        assert!(h.sent().is_empty());
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 29.0);
        let sent = h.sent();
        let b_itt = Harness::itt_of(&sent, 0xa2);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);
        // 30 s after B was *submitted* it has been on the wire for 1 s: no
        // ABORT TASK, no timeout notice.
        h.run_until(45.0);
        assert!(
            h.sent().is_empty(),
            "B aborted after a short time on the wire"
        );
        assert!(
            !h.outputs()
                .iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "B timed out while it waited for the queue depth"
        );
        h.answer(b_itt, GOOD, 50.0);
        assert_eq!(command_results(&h.outputs()), vec![(b, Ok(GOOD))]);
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn command_held_back_by_a_closed_window_waits_a_whole_command_timeout() {
        // The target's window is closed (MaxCmdSN = ExpCmdSN - 1): the
        // command waits in rlun, unseen by the target, and is looked at
        // every QUEUED_RECHECK. Those looks must not time it out before the
        // target has kept the window closed for a whole command timeout
        // (then it fails as WindowClosed after its retries:
        // command_the_closed_window_holds_back_fails_saying_so_after_its_retries).
        let mut h = Harness::with(cfg(), core_with_window(0));
        let a = h.cmd(0xa1, 0.0);
        assert!(h.sent().is_empty(), "the window is closed");
        h.run_until(29.5);
        let out = h.outputs();
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "timed out before the command timeout: {out:?}"
        );
        assert!(command_results(&out).is_empty(), "{a:?} failed: {out:?}");
        assert!(h.sent().is_empty());
        h.run_until(31.0);
        assert!(
            h.outputs()
                .iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "a window kept closed for the whole command timeout times the command out"
        );
    }

    #[test]
    fn command_deadline_is_the_next_timeout() {
        let mut h = Harness::new();
        h.cmd(0xa1, 1.0);
        h.cmd(0xa2, 2.0);
        assert_eq!(h.r.poll_timeout(), Some(h.at(31.0)));
    }

    #[test]
    fn early_timeout_call_changes_nothing() {
        // The driver keeps one timer armed at the earliest deadline it was
        // asked for and does not move it later, so it may call
        // handle_timeout before anything is due: live and while down,
        // that must be a no-op.
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 1.0);
        let sent = h.sent();
        assert_eq!(sent.len(), 1);
        h.outputs();
        for secs in [1.5, 10.0, 30.9] {
            h.timeout(secs);
            assert!(h.sent().is_empty(), "nothing to send at {secs}s");
            assert!(h.outputs().is_empty(), "nothing to say at {secs}s");
        }
        assert_eq!(h.r.poll_timeout(), Some(h.at(31.0)), "deadline unchanged");
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 31.5);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);

        h.cmd(0xa2, 40.0);
        h.sent();
        h.lose(41.0);
        h.outputs();
        h.timeout(42.0);
        assert_eq!(connects(&h.outputs()), 0, "not before DefaultTime2Wait");
        assert_eq!(h.r.poll_timeout(), Some(h.at(43.0)));
    }

    #[test]
    fn timed_out_command_is_aborted_and_reissued() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);

        let abort = h.times_out_and_is_aborted(30.0, 0xa1, itt);
        h.tmf_answer(abort, 0, 30.5);
        let sent = h.sent();
        let again = Harness::itt_of(&sent, 0xa1);
        assert_ne!(again, itt, "a new task");
        assert_eq!(h.r.poll_timeout(), Some(h.at(60.5)), "a fresh deadline");
        h.answer(again, GOOD, 31.0);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
    }

    #[test]
    fn command_that_times_out_four_times_fails_as_aborted() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        let mut now = 0.0;
        for round in 0..4 {
            now += 30.0;
            h.run_until(now);
            let sent = h.sent();
            let [Sent::Tmf(tmf::ABORT_TASK, abort, _)] = sent[..] else {
                panic!("round {round}: {sent:?}")
            };
            h.tmf_answer(abort, 0, now);
            let out = h.outputs();
            if round < 3 {
                assert!(command_results(&out).is_empty(), "round {round}");
                assert!(
                    matches!(h.sent()[..], [Sent::Cmd(0xa1, _)]),
                    "round {round}"
                );
            } else {
                assert_eq!(
                    command_results(&out),
                    vec![(id, Err(Failure::Task(TaskError::Aborted)))]
                );
                assert!(h.sent().is_empty());
            }
        }
        assert_eq!(h.r.pending_commands(), 0);
    }

    #[test]
    fn command_the_closed_window_holds_back_fails_saying_so_after_its_retries() {
        // The target's window admits nothing (MaxCmdSN = ExpCmdSN - 1) and
        // never opens: the command times out unsent, is retried like an
        // aborted one, and finally fails naming the closed window.
        let core = Connection::new(
            FeatureParams {
                nop_interval: None,
                ..FeatureParams::default()
            },
            SequenceNumbers {
                cmd_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 0,
                exp_stat_sn: 1,
            },
        );
        let mut h = Harness::with(cfg(), core);
        let id = h.cmd(0xa1, 0.0);
        assert!(h.sent().is_empty(), "nothing fits in the window");
        for round in 1..=4 {
            h.run_until(30.0 * f64::from(round) + 1.0);
            let out = h.outputs();
            assert!(h.sent().is_empty(), "round {round}: nothing is sent");
            if round < 4 {
                assert!(command_results(&out).is_empty(), "round {round}");
            } else {
                assert_eq!(
                    command_results(&out),
                    vec![(
                        id,
                        Err(Failure::Task(TaskError::WindowClosed {
                            cmd_sn: 1,
                            max_cmd_sn: 0
                        }))
                    )]
                );
            }
        }
        assert_eq!(h.r.pending_commands(), 0);
    }

    #[test]
    fn failed_abort_escalates_to_lun_reset_and_the_command_goes_again() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        let sent = h.sent();
        let [Sent::Tmf(tmf::ABORT_TASK, abort, _)] = sent[..] else {
            panic!("{sent:?}")
        };

        h.tmf_answer(abort, 5, 30.1); // function not supported

        let out = h.outputs();
        assert!(notices(&out).contains(&Notice::AbortFailed {
            result: Ok(TmfOutcome::NotSupported)
        }));
        let sent = h.sent();
        let [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.tmf_answer(reset, 0, 30.2);
        let again = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(again, GOOD, 30.3);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
        assert!(h.r.is_live());
    }

    #[test]
    fn unanswered_abort_escalates_to_lun_reset_after_the_tmf_timeout() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        h.sent();
        h.outputs();

        h.run_until(39.9);
        assert!(h.sent().is_empty(), "not before the TMF timeout");
        h.run_until(40.0);

        assert!(notices(&h.outputs()).contains(&Notice::AbortUnanswered));
        assert!(matches!(
            h.sent()[..],
            [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, _, _)]
        ));
    }

    #[test]
    fn lun_reset_that_never_answers_drops_the_connection_and_keeps_the_command() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(40.0); // timeout at 30, abort unanswered at 40 → reset
        h.sent();
        h.outputs();

        h.run_until(50.0);

        let out = h.outputs();
        assert_eq!(
            disconnect(&out),
            Some((Loss::TaskManagementTimeout(TMF_TIMEOUT), true))
        );
        assert!(command_results(&out).is_empty());
        h.run_until(52.0);
        assert_eq!(connects(&h.outputs()), 1);
        h.connected(52.5);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 53.0);
        assert!(command_results(&h.outputs()).contains(&(id, Ok(GOOD))));
    }

    #[test]
    fn a_callers_lun_reset_that_never_answers_drops_the_connection_and_fails_the_reset() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        let reset = h.r.handle_lun_reset([0; 8], h.at(1.0));
        let held = h.cmd(0xa2, 1.5);
        let sent = h.sent();
        assert!(
            matches!(sent[..], [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, _, _)]),
            "the command waits behind the reset: {sent:?}"
        );
        h.run_until(10.9);
        assert!(h.r.is_live(), "not before the TMF timeout");
        h.run_until(11.0);
        let out = h.outputs();
        assert_eq!(
            disconnect(&out),
            Some((Loss::TaskManagementTimeout(TMF_TIMEOUT), true))
        );
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::TaskMgmt { id: r, result: Err(_) } if *r == reset)));
        h.run_until(13.0);
        h.connected(13.5);
        let sent = h.sent();
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 14.0);
        h.answer(Harness::itt_of(&sent, 0xa2), GOOD, 14.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(id, Ok(GOOD)), (held, Ok(GOOD))],
            "both commands go again on the new connection"
        );
    }

    #[test]
    fn lun_reset_failing_drops_the_connection() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        let sent = h.sent();
        let [Sent::Tmf(_, abort, _)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.tmf_answer(abort, 255, 30.1); // rejected
        let sent = h.sent();
        let [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)] = sent[..] else {
            panic!("{sent:?}")
        };

        h.tmf_answer(reset, 255, 30.2);

        assert_eq!(disconnect(&h.outputs()), Some((Loss::LunResetFailed, true)));
        assert!(!h.r.is_live());
        assert_eq!(h.r.pending_commands(), 1);
    }

    #[test]
    fn unanswered_ping_drops_the_connection_as_not_responding() {
        let mut h = Harness::with(cfg(), core_with(Some(Duration::from_secs(5))));
        h.run_until(5.0);
        assert!(matches!(h.sent()[..], [Sent::Nop(_)]));

        h.run_until(15.0);

        assert_eq!(
            disconnect(&h.outputs()),
            Some((Loss::NotResponding(Duration::from_secs(10)), true))
        );
    }
}
