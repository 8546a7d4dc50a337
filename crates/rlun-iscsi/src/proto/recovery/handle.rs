//! The machine's inputs and outputs apart from time: callers' requests
//! (`handle_command`, `handle_text`, `handle_ping`, `handle_lun_reset`,
//! `handle_logout`, `handle_requests_closed`), what happens to the
//! connection (`handle_pdu`, `handle_placed`, `handle_connection_lost`,
//! `handle_connected`, `handle_connect_failed`) and what the driver drains
//! (`poll_transmit`, `poll_output`, `take_retired`). Each request's answer
//! carries the [`RequestId`] it returns.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::api::{Failure, Loss, Notice, Output, Released, RequestId};
use super::deadlines::next_backoff;
use super::machine::Recovery;
use super::records::{not_live_failure, CmdRecord, Conn, LogoutBy, Other};
use crate::proto::connection::{CommandRequest, Connection, Lent, TaskHold, Transmit};
use crate::proto::pdu::{DataIn, Pdu};
use crate::scsi::cdb::changes_nothing;

impl<W> Recovery<W> {
    // ---- requests from callers -------------------------------------------------

    /// A SCSI command; its answer comes as [`Output::Command`] with
    /// `waiter`.
    pub fn handle_command(&mut self, req: CommandRequest, waiter: W, now: Instant) -> RequestId {
        let id = self.alloc_id();
        let fail = match &self.conn {
            Conn::Closed => Some(Failure::Closed),
            Conn::Live(_) if self.closing.is_some() || self.logout_by() == Some(LogoutBy::Us) => {
                Some(Failure::Closed)
            }
            Conn::Down { .. } if self.gave_up => Some(Failure::ReplacementTimeout),
            _ => None,
        };
        if let Some(f) = fail {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(f),
                waiter,
            });
            return id;
        }
        self.cmds.insert(
            id.0,
            CmdRecord {
                req,
                waiter,
                task: None,
                deadline: None,
                queued: false,
                submitted: None,
                timeouts: 0,
            },
        );
        // While the target's logout request is being served, commands wait
        // for the next connection.
        if self.logout_by() != Some(LogoutBy::Target) {
            self.submit(id, now);
        }
        self.step();
        id
    }

    /// A Text Request exchange; the answer comes as [`Output::Text`].
    pub fn handle_text(&mut self, data: Bytes, now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.submit_text(data);
                self.others.insert(task, Other::Text(id));
                self.drain_core(now);
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs.push_back(Output::Text { id, result: Err(f) });
            }
        }
        id
    }

    /// A NOP-Out ping; the answer comes as [`Output::Pong`].
    pub fn handle_ping(&mut self, now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.ping(now);
                self.others.insert(task, Other::Ping(id));
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs.push_back(Output::Pong { id, result: Err(f) });
            }
        }
        id
    }

    /// A caller's LOGICAL UNIT RESET; the answer comes as [`Output::TaskMgmt`].
    pub fn handle_lun_reset(&mut self, lun: [u8; 8], now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.lun_reset(lun);
                self.others.insert(task, Other::Tmf(id, now));
                self.drain_core(now);
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs
                    .push_back(Output::TaskMgmt { id, result: Err(f) });
            }
        }
        id
    }

    /// A caller wants the session closed: in-flight work drains first, then
    /// the Logout Request goes out. The answer comes as [`Output::Logout`].
    pub fn handle_logout(&mut self) -> RequestId {
        let id = self.alloc_id();
        match &self.conn {
            Conn::Closed => self
                .outputs
                .push_back(Output::Logout { id, result: Ok(()) }),
            Conn::Down { .. } => {
                // Nothing to log out of: stop reconnecting.
                self.closing = Some(Some(id));
                self.finish(Failure::Closed);
            }
            Conn::Live(_) => {
                if self.closing.is_some() || self.logout_by() == Some(LogoutBy::Us) {
                    self.outputs
                        .push_back(Output::Logout { id, result: Ok(()) });
                } else {
                    // Also while the target's logout is on the wire: the
                    // session then ends instead of logging in again.
                    self.closing = Some(Some(id));
                    self.step();
                }
            }
        }
        id
    }

    /// Every handle is gone: no more requests will come. Pending commands
    /// still finish; then the session logs out politely.
    pub fn handle_requests_closed(&mut self) {
        self.requests_open = false;
        if matches!(self.conn, Conn::Down { .. }) && self.cmds.is_empty() {
            self.finish(Failure::Closed);
        } else {
            self.step();
        }
    }

    // ---- the connection --------------------------------------------------------

    /// A PDU received on the current connection.
    pub fn handle_pdu(&mut self, pdu: Pdu, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let result = core.handle_pdu(pdu, now);
        self.drain_core(now);
        match result {
            Ok(()) => self.step(),
            Err(e) => self.lose(Loss::Protocol(e), now),
        }
    }

    /// Lend the current connection's core's read buffer for a Data-In
    /// payload ([`Connection::lend_read_buffer`]); `None` when no connection
    /// is live or the header names no place for it.
    pub fn lend_read_buffer(&mut self, h: &DataIn, len: u32) -> Option<Lent> {
        match &mut self.conn {
            Conn::Live(core) => core.lend_read_buffer(h, len),
            _ => None,
        }
    }

    /// A Data-In whose payload was read into a lent buffer
    /// ([`Connection::handle_placed`]). A buffer lent by a connection that is
    /// no longer live is dropped.
    pub fn handle_placed(&mut self, pdu: Pdu, lent: Lent, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let result = core.handle_placed(pdu, lent, now);
        self.drain_core(now);
        match result {
            Ok(()) => self.step(),
            Err(e) => self.lose(Loss::Protocol(e), now),
        }
    }

    /// The driver saw the current connection fail (EOF, I/O error).
    pub fn handle_connection_lost(&mut self, now: Instant) {
        if self.is_live() {
            self.lose(Loss::Transport, now);
        }
    }

    /// The attempt asked for by [`Output::Connect`] logged in; `core` is the
    /// new connection's full feature phase, `time2wait` its DefaultTime2Wait.
    /// Ignored when no attempt was wanted any more (the core then goes
    /// straight to [`Recovery::take_retired`]).
    pub fn handle_connected(&mut self, mut core: Connection, time2wait: Duration, now: Instant) {
        let Conn::Down { since, wake: None } = self.conn else {
            self.retired.push(core);
            return;
        };
        core.start(now);
        self.conn = Conn::Live(Box::new(core));
        self.time2wait = time2wait;
        self.delay = time2wait;
        self.live_since = now;
        self.progress_on_conn = false;
        if self.cmds.is_empty() {
            // Nobody is waiting: the next stall starts afresh.
            self.stall_since = None;
            self.gave_up = false;
        }
        // Re-issue what the old connection left unfinished, oldest first.
        let mut ids: Vec<RequestId> = self.cmds.keys().map(RequestId).collect();
        ids.sort_unstable();
        for &id in &ids {
            self.submit(id, now);
        }
        self.outputs.push_back(Output::Reconnected {
            after: now.saturating_duration_since(since),
            reissued: ids.len(),
        });
        self.step();
    }

    /// The attempt asked for by [`Output::Connect`] failed.
    pub fn handle_connect_failed(&mut self, now: Instant) {
        let Conn::Down { since, wake: None } = self.conn else {
            return;
        };
        self.outputs
            .push_back(Output::Notice(Notice::AttemptFailed));
        self.check_stall(now);
        if !self.requests_open && self.cmds.is_empty() {
            self.finish(Failure::Closed);
            return;
        }
        self.delay = next_backoff(self.delay);
        self.conn = Conn::Down {
            since,
            wake: Some(now + self.delay),
        };
    }

    /// A caller wants the target tried now rather than at the next
    /// back-off step: while disconnected and between attempts, the next
    /// attempt is asked for at once ([`Output::Connect`]); while an attempt
    /// is under way it is the one. True when an attempt is (now) under way,
    /// false when there is nothing to do (live, or the session is over).
    ///
    /// Commands are not affected: after the replacement timeout new ones
    /// still fail at once until a connection is live again. This is for a
    /// caller that must know whether the target is back before giving up
    /// on data it holds (the final write-back of a cache), so that it does
    /// not fail with the error of an attempt made before the target came
    /// back.
    pub fn handle_reconnect_now(&mut self) -> bool {
        match self.conn {
            Conn::Down {
                since,
                wake: Some(_),
            } => {
                self.conn = Conn::Down { since, wake: None };
                self.outputs.push_back(Output::Connect);
                true
            }
            Conn::Down { wake: None, .. } => true,
            Conn::Live(_) | Conn::Closed => false,
        }
    }

    /// While the connection is down, give back at once the kept commands
    /// of `lun` that cannot change anything (reads, inquiries: see
    /// [`cdb::changes_nothing`]), and with `all` the others too; each
    /// fails with [`Failure::Released`], oldest first, for its caller to
    /// send through another path. Does nothing while a connection is
    /// live (its commands are on their way again) or once the session is
    /// closed.
    ///
    /// For the others this is safe only once the caller knows that what
    /// the lost connection carried can no longer reach the medium: the
    /// multipath router asks for them after a LOGICAL UNIT RESET through
    /// another path, which ended every task the target still held.
    ///
    /// [`cdb::changes_nothing`]: crate::scsi::cdb::changes_nothing
    pub fn handle_release(&mut self, lun: [u8; 8], all: bool) -> Released {
        if !matches!(self.conn, Conn::Down { .. }) {
            return Released::default();
        }
        let mut ids: Vec<u64> = self
            .cmds
            .keys()
            .filter(|&id| {
                self.cmds
                    .get(id)
                    .is_some_and(|c| c.req.lun == lun && (all || changes_nothing(c.req.cdb[0])))
            })
            .collect();
        ids.sort_unstable();
        for &id in &ids {
            if let Some(c) = self.cmds.remove(id) {
                self.outputs.push_back(Output::Command {
                    id: RequestId(id),
                    result: Err(Failure::Released),
                    waiter: c.waiter,
                });
            }
        }
        if self.cmds.is_empty() {
            // Nobody waits for the connection any more: the next stall
            // starts afresh.
            self.stall_since = None;
            if !self.requests_open {
                self.finish(Failure::Closed);
            }
        }
        Released {
            released: ids.len(),
            kept: self.cmds.values().filter(|c| c.req.lun == lun).count(),
        }
    }

    // ---- outputs ---------------------------------------------------------------

    /// Next PDU to send on the current connection (with the task's buffers
    /// when the transport moves data directly).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        match &mut self.conn {
            Conn::Live(core) => core.poll_transmit(),
            _ => None,
        }
    }

    /// Keep `hold` with task `itt` of the current connection (see
    /// [`TaskHold`]): right after [`Recovery::poll_transmit`] gave out that
    /// task's command. Dropped at once when the task is not there.
    pub fn hold(&mut self, itt: u32, hold: TaskHold) {
        if let Conn::Live(core) = &mut self.conn {
            let _ = core.hold(itt, hold);
        }
    }

    /// Cores of connections the machine is done with. The driver drops them
    /// after the connection's transport (on [`Output::Disconnect`] and
    /// [`Output::Finished`]): tasks' buffers must outlive any remote access
    /// to them.
    pub fn take_retired(&mut self) -> Vec<Connection> {
        std::mem::take(&mut self.retired)
    }

    /// SCSI data bytes the connections' cores copied since the last call
    /// (see [`Connection::take_copied_bytes`]), the current one's and those
    /// of connections already let go of.
    pub fn take_copied_bytes(&mut self) -> u64 {
        let live = match &mut self.conn {
            Conn::Live(core) => core.take_copied_bytes(),
            _ => 0,
        };
        std::mem::take(&mut self.copied_untaken) + live
    }

    /// Next answer, order or notice.
    pub fn poll_output(&mut self) -> Option<Output<W>> {
        self.outputs.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::proto::recovery::*;
    use crate::scsi::cdb;
    use bytes::Bytes;
    use std::time::Duration;

    #[test]
    fn every_command_path_hands_its_waiter_back_exactly_once_and_frees_its_record() {
        let mut h: Harness<u32> = Harness::with_waiters(cfg(), core());
        let cmd = |h: &mut Harness<u32>, tag: u8, secs: f64| {
            let now = h.at(secs);
            h.r.handle_command(read(tag), u32::from(tag), now)
        };
        let mut back = Vec::new();
        // Answered.
        cmd(&mut h, 0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 0.1);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back, vec![(0xa1, Ok(GOOD))]);
        // A second answer for the same (retired) ITT names no task: the
        // connection goes as a protocol error, and nothing is delivered twice.
        // (Checked below, after the other paths, on its own connection.)

        // Timed out four times: fails as aborted.
        cmd(&mut h, 0xa2, 1.0);
        h.sent();
        let mut now = 1.0;
        for _ in 0..4 {
            now += 30.0;
            h.run_until(now);
            let sent = h.sent();
            let abort = sent
                .iter()
                .find_map(|s| match s {
                    Sent::Tmf(tmf::ABORT_TASK, itt, _) => Some(*itt),
                    _ => None,
                })
                .expect("an ABORT TASK");
            h.tmf_answer(abort, 0, now);
            back.extend(waiters_back(h.outputs()));
        }
        assert_eq!(back[1..], [(0xa2, Err(Failure::Task(TaskError::Aborted)))]);
        assert_eq!(h.r.pending_commands(), 0);

        // Kept over a connection loss, re-issued and answered there.
        cmd(&mut h, 0xa3, now);
        h.sent();
        h.lose(now + 1.0);
        back.extend(waiters_back(h.outputs()));
        h.run_until(now + 3.0);
        h.outputs();
        h.connected(now + 3.5);
        back.extend(waiters_back(h.outputs()));
        let itt = Harness::itt_of(&h.sent(), 0xa3);
        h.answer(itt, GOOD, now + 4.0);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[2..], [(0xa3, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);

        // The same ITT answered again on this connection: a late answer for
        // a finished task is a protocol error, never a second delivery.
        h.answer(itt, GOOD, now + 4.1);
        let out = h.outputs();
        assert!(
            matches!(disconnect_of(&out), Some(Loss::Protocol(_))),
            "{out:?}"
        );
        back.extend(waiters_back(out));
        assert_eq!(back.len(), 3, "{back:?}");

        // Waiting past the replacement timeout while down (the attempt
        // the machine asked for never reports): fails with it.
        let t = now + 5.0;
        cmd(&mut h, 0xa4, t);
        h.run_until(t + 200.0);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[3..], [(0xa4, Err(Failure::ReplacementTimeout))]);
        assert_eq!(h.r.pending_commands(), 0);

        // After giving up, a new command fails at once; the caller's logout
        // then ends the session with nothing left behind.
        cmd(&mut h, 0xa5, t + 201.0);
        h.r.handle_logout();
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[4..], [(0xa5, Err(Failure::ReplacementTimeout))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert!(h.r.is_finished());
        let mut tags: Vec<u32> = back.iter().map(|(w, _)| *w).collect();
        tags.dedup();
        assert_eq!(
            tags,
            vec![0xa1, 0xa2, 0xa3, 0xa4, 0xa5],
            "each exactly once"
        );
    }

    #[test]
    fn answered_command_reaches_its_caller_and_is_forgotten() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);

        h.answer(itt, GOOD, 0.1);

        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert_eq!(h.r.poll_timeout(), None, "no deadline left to watch");
    }

    #[test]
    fn text_ping_and_reset_fail_at_once_while_down() {
        let mut h = Harness::new();
        h.lose(0.0);
        h.outputs();
        let now = h.at(0.5);
        let t =
            h.r.handle_text(Bytes::from_static(b"SendTargets=All\0"), now);
        let p = h.r.handle_ping(now);
        let m = h.r.handle_lun_reset([0; 8], now);
        let down = Failure::Task(TaskError::ConnectionLost("reconnecting".into()));
        let out = h.outputs();
        assert!(matches!(&out[0], Output::Text { id, result: Err(f) } if *id == t && *f == down));
        assert!(matches!(&out[1], Output::Pong { id, result: Err(f) } if *id == p && *f == down));
        assert!(
            matches!(&out[2], Output::TaskMgmt { id, result: Err(f) } if *id == m && *f == down)
        );
    }

    #[test]
    fn connection_scoped_requests_fail_with_the_connection_and_commands_are_kept() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let now = h.at(0.0);
        let t =
            h.r.handle_text(Bytes::from_static(b"SendTargets=All\0"), now);
        let p = h.r.handle_ping(now);
        h.sent();

        h.lose(1.0);

        let out = h.outputs();
        assert!(out.iter().any(
            |o| matches!(o, Output::Text { id, result: Err(Failure::ConnectionLost) } if *id == t)
        ));
        assert!(out.iter().any(
            |o| matches!(o, Output::Pong { id, result: Err(Failure::ConnectionLost) } if *id == p)
        ));
        // The cause comes first, so the driver can name it in the failures.
        let disconnect_at = out
            .iter()
            .position(|o| matches!(o, Output::Disconnect { .. }))
            .expect("a Disconnect");
        let text_at = out
            .iter()
            .position(|o| matches!(o, Output::Text { .. }))
            .expect("the Text failure");
        assert!(disconnect_at < text_at, "{out:?}");
        assert!(command_results(&out).is_empty());
        assert_eq!(h.r.pending_commands(), 1);
        let _ = c;
    }

    #[test]
    fn caller_requests_get_their_answers() {
        let mut h = Harness::new();
        let now = h.at(0.0);
        let p = h.r.handle_ping(now);
        let m = h.r.handle_lun_reset([0; 8], now);
        let sent = h.sent();
        let (Sent::Nop(nop), Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)) = (&sent[0], &sent[1])
        else {
            panic!("{sent:?}")
        };
        let stat_sn = h.next_stat_sn();
        h.pdu(
            Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt: *nop,
                ttt: RESERVED_TAG,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
            }),
            Bytes::new(),
            0.004,
        );
        h.tmf_answer(*reset, 0, 0.01);
        let out = h.outputs();
        assert!(
            matches!(&out[0], Output::Pong { id, result: Ok(rtt) } if *id == p && *rtt == Duration::from_millis(4))
        );
        assert!(
            matches!(&out[1], Output::TaskMgmt { id, result: Ok(TmfOutcome::Complete) } if *id == m)
        );
    }

    #[test]
    fn caller_logout_waits_for_in_flight_commands_then_finishes() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        let logout = h.r.handle_logout();
        assert!(h.sent().is_empty(), "not while a command is in flight");
        let refused = h.cmd(0xa2, 0.2);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(refused, Err(Failure::Closed))]
        );

        h.answer(itt, GOOD, 0.3);

        let sent = h.sent();
        let [Sent::Logout(l)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.logout_answer(l, 0.4);
        let out = h.outputs();
        assert_eq!(command_results(&out), vec![(c, Ok(GOOD))]);
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
        assert!(h.r.is_finished());
        let after = h.cmd(0xa3, 0.5);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(after, Err(Failure::Closed))]
        );
    }

    #[test]
    fn connection_lost_after_our_logout_went_out_counts_as_logged_out() {
        let mut h = Harness::new();
        let logout = h.r.handle_logout();
        assert!(matches!(h.sent()[..], [Sent::Logout(_)]));

        h.lose(0.1);

        let out = h.outputs();
        assert!(matches!(
            out.iter().find(|o| matches!(o, Output::Disconnect { .. })),
            Some(Output::Disconnect {
                reconnect: false,
                quiet: true,
                ..
            })
        ));
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
    }

    #[test]
    fn logout_while_down_fails_kept_commands_and_finishes() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        h.lose(0.5);
        h.outputs();

        let logout = h.r.handle_logout();

        let out = h.outputs();
        assert_eq!(command_results(&out), vec![(c, Err(Failure::Closed))]);
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
        assert_eq!(h.r.poll_timeout(), None, "no more attempts");
    }

    #[test]
    fn handles_dropped_with_nothing_pending_logs_out_politely() {
        let mut h = Harness::new();
        h.r.handle_requests_closed();
        let sent = h.sent();
        let [Sent::Logout(l)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.logout_answer(l, 1.1);
        assert!(finished(&h.outputs()));
    }

    #[test]
    fn handles_dropped_with_a_command_pending_log_out_after_it() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.r.handle_requests_closed();
        assert!(h.sent().is_empty());
        h.answer(itt, GOOD, 0.2);
        assert!(matches!(h.sent()[..], [Sent::Logout(_)]));
        assert_eq!(command_results(&h.outputs()), vec![(c, Ok(GOOD))]);
    }

    #[test]
    fn handles_dropped_while_down_with_nothing_pending_finishes() {
        let mut h = Harness::new();
        h.lose(0.0);
        h.outputs();
        h.r.handle_requests_closed();
        assert!(finished(&h.outputs()));
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn discovery_session_fails_pending_work_when_the_connection_is_lost() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(120), false);
        let mut h = Harness::with(cfg, core());
        let c = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        let out = h.outputs();
        assert_eq!(disconnect(&out), Some((Loss::Transport, false)));
        assert_eq!(
            command_results(&out),
            vec![(c, Err(Failure::ConnectionLost))]
        );
        assert!(finished(&out));
    }

    #[test]
    fn lost_connection_core_is_handed_back_for_the_driver_to_drop_after_its_transport() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        assert!(h.r.take_retired().is_empty());

        h.lose(1.0);

        let retired = h.r.take_retired();
        assert_eq!(retired.len(), 1);
        assert_eq!(
            retired[0].outstanding(),
            1,
            "the task (and its buffers) still lives in the retired core"
        );
        assert!(h.r.take_retired().is_empty());
    }

    #[test]
    fn release_while_down_gives_back_reads_at_once_and_the_rest_only_when_asked() {
        let mut h = Harness::new();
        let r10 = h.cmd(cdb::opcode::READ_10, 0.0);
        let w10 = h.cmd(cdb::opcode::WRITE_10, 0.1);
        let r16 = h.cmd(cdb::opcode::READ_16, 0.2);
        let mut other_lun = read(cdb::opcode::READ_10);
        other_lun.lun = [0, 2, 0, 0, 0, 0, 0, 0];
        let other = h.r.handle_command(other_lun, (), h.at(0.3));
        h.sent();
        h.lose(1.0);
        h.outputs();

        assert_eq!(
            h.r.handle_release([0; 8], false),
            Released {
                released: 2,
                kept: 1
            }
        );
        assert_eq!(
            command_results(&h.outputs()),
            vec![(r10, Err(Failure::Released)), (r16, Err(Failure::Released))],
            "the reads of that LUN, oldest first; the write and the other LUN's read stay"
        );
        assert_eq!(
            h.r.handle_release([0; 8], true),
            Released {
                released: 1,
                kept: 0
            }
        );
        assert_eq!(
            command_results(&h.outputs()),
            vec![(w10, Err(Failure::Released))]
        );

        h.timeout(3.0);
        h.outputs();
        h.connected(3.5);
        assert!(h
            .outputs()
            .iter()
            .any(|o| matches!(o, Output::Reconnected { reissued: 1, .. })));
        let sent = h.sent();
        assert_eq!(
            sent.len(),
            1,
            "only the other LUN's read goes again: {sent:?}"
        );
        h.answer(Harness::itt_of(&sent, cdb::opcode::READ_10), GOOD, 4.0);
        assert_eq!(command_results(&h.outputs()), vec![(other, Ok(GOOD))]);
    }

    #[test]
    fn release_does_nothing_while_a_connection_is_live() {
        let mut h = Harness::new();
        let r = h.cmd(cdb::opcode::READ_10, 0.0);
        h.cmd(cdb::opcode::WRITE_10, 0.0);
        let sent = h.sent();
        assert_eq!(
            h.r.handle_release([0; 8], true),
            Released::default(),
            "nothing is kept for a next connection"
        );
        assert!(command_results(&h.outputs()).is_empty());
        h.answer(Harness::itt_of(&sent, cdb::opcode::READ_10), GOOD, 1.0);
        assert_eq!(command_results(&h.outputs()), vec![(r, Ok(GOOD))]);
    }

    #[test]
    fn a_session_whose_handles_are_gone_ends_once_its_last_command_is_released() {
        let mut h = Harness::new();
        h.cmd(cdb::opcode::READ_10, 0.0);
        h.lose(1.0);
        h.r.handle_requests_closed();
        h.outputs();
        h.r.handle_release([0; 8], false);
        assert!(finished(&h.outputs()));
    }
}
