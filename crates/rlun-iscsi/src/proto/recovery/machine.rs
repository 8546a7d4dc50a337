//! [`Recovery`], the machine, and its reactions: kept commands handed to
//! the live connection core with fresh deadlines (and re-issued after an
//! abort or on a new connection, oldest first), the core's events turned
//! into answers for callers, task management outcomes escalated, target
//! asynchronous events acted on (RFC 7143 §11.9.1), a lost connection
//! (requests failed or kept, back-off after repeated failures right after
//! login), giving up after the replacement timeout, and the end of the
//! session.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::api::{
    Failure, Loss, Notice, Output, RecoveryConfig, RequestId, FLAP_WINDOW, MAX_FLAP_BACKOFF,
    MIN_BACKOFF, QUEUED_RECHECK,
};
use super::deadlines::Deadlines;
use super::records::{task_of, CmdRecord, Conn, LogoutBy, Other, OwnTmf};
use crate::proto::connection::{
    CommandResult, Connection, Event, TaskError, TaskId, TmfOutcome, CALLER_TASK_IDS,
};
use crate::proto::idmap::{IdMap, SlotTable};
use crate::proto::pdu::async_event;
use crate::scsi::Sense;

/// The recovery state machine. See the module docs. `W` travels with each
/// command from [`Recovery::handle_command`] to its [`Output::Command`].
#[derive(Debug)]
pub struct Recovery<W = ()> {
    pub(super) cfg: RecoveryConfig,
    pub(super) conn: Conn,
    /// DefaultTime2Wait of the last login.
    pub(super) time2wait: Duration,
    /// Pause before the next attempt.
    pub(super) delay: Duration,
    pub(super) next_id: u64,
    /// The kept commands, by request id. A command submitted to the core
    /// runs there under task id `CALLER_TASK_IDS | id` ([`task_of`]), so
    /// the core's completion names its record without a map between them.
    pub(super) cmds: SlotTable<CmdRecord<W>>,
    pub(super) deadlines: Deadlines,
    pub(super) others: IdMap<TaskId, Other>,
    pub(super) tmfs: IdMap<TaskId, OwnTmf>,
    /// Someone wants the session closed: the caller to answer (`None` when
    /// every handle was dropped). The logout goes out once work has drained.
    pub(super) closing: Option<Option<RequestId>>,
    /// The Logout Request on the wire, and why.
    pub(super) logout_sent: Option<(TaskId, LogoutBy)>,
    pub(super) requests_open: bool,
    /// The replacement timeout passed and no reconnect has succeeded since:
    /// new commands fail at once while disconnected.
    pub(super) gave_up: bool,
    /// Since when commands have been waiting without the session making
    /// progress (a command completing). Set by a connection loss, cleared by
    /// progress — not by a login, so a target that accepts every login and
    /// then fails cannot keep commands waiting past the replacement timeout.
    pub(super) stall_since: Option<Instant>,
    /// When the current connection logged in, and whether a command has
    /// completed on it since.
    pub(super) live_since: Instant,
    pub(super) progress_on_conn: bool,
    /// Connections in a row that failed right after login.
    pub(super) flaps: u32,
    pub(super) outputs: VecDeque<Output<W>>,
    /// Cores let go of, waiting for the driver to drop them.
    pub(super) retired: Vec<Connection>,
    /// Bytes retired cores copied that [`Recovery::take_copied_bytes`] has
    /// not reported yet.
    pub(super) copied_untaken: u64,
}

impl<W> Recovery<W> {
    /// Start on a connection that has just completed login; `time2wait` is
    /// its negotiated DefaultTime2Wait.
    pub fn new(
        cfg: RecoveryConfig,
        mut core: Connection,
        time2wait: Duration,
        now: Instant,
    ) -> Self {
        core.start(now);
        Recovery {
            cfg,
            conn: Conn::Live(Box::new(core)),
            time2wait,
            delay: time2wait,
            next_id: 0,
            cmds: SlotTable::default(),
            deadlines: Deadlines::default(),
            others: IdMap::default(),
            tmfs: IdMap::default(),
            closing: None,
            logout_sent: None,
            requests_open: true,
            gave_up: false,
            stall_since: None,
            live_since: now,
            progress_on_conn: false,
            flaps: 0,
            outputs: VecDeque::new(),
            retired: Vec::new(),
            copied_untaken: 0,
        }
    }

    /// The policy in force.
    pub fn config(&self) -> &RecoveryConfig {
        &self.cfg
    }

    /// True while a connection is in its full feature phase.
    pub fn is_live(&self) -> bool {
        matches!(self.conn, Conn::Live(_))
    }

    /// True once the session is over.
    pub fn is_finished(&self) -> bool {
        matches!(self.conn, Conn::Closed)
    }

    /// SCSI commands kept (in flight, waiting for the window or for a connection).
    pub fn pending_commands(&self) -> usize {
        self.cmds.len()
    }

    /// The current connection's core, when live (for diagnostics and tests).
    pub fn core(&self) -> Option<&Connection> {
        match &self.conn {
            Conn::Live(core) => Some(core),
            _ => None,
        }
    }

    /// The next request id: ids count up, skipping one whose slot in the
    /// command table a long-lived command holds (see [`SlotTable`]).
    // `#[inline]` (and `logout_by`'s): called per command from `handle.rs`.
    #[inline]
    pub(super) fn alloc_id(&mut self) -> RequestId {
        loop {
            let id = self.next_id;
            self.next_id += 1;
            if self.cmds.is_free(id) {
                return RequestId(id);
            }
        }
    }

    #[inline]
    pub(super) fn logout_by(&self) -> Option<LogoutBy> {
        self.logout_sent.map(|(_, by)| by)
    }

    /// Hand a kept command to the live core with a fresh deadline.
    pub(super) fn submit(&mut self, id: RequestId, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let Some(cmd) = self.cmds.get_mut(id.0) else {
            return;
        };
        let task = task_of(id);
        core.submit_as(task, cmd.req.clone());
        // A command the window or the queue depth holds back has not reached
        // the target: its timeout starts once it is sent, so that waiting
        // behind other commands neither aborts it (locally, unseen by the
        // target, and re-queued behind younger commands) nor leaves it less
        // than `command_timeout` on the wire.
        cmd.queued = core.is_waiting(task);
        cmd.submitted = Some(now);
        let deadline = if cmd.queued {
            now + QUEUED_RECHECK
        } else {
            now + self.cfg.command_timeout
        };
        // A replaced deadline's entry goes stale in the queue.
        let replaced = cmd.deadline.replace(deadline).is_some();
        cmd.task = Some(task);
        self.deadlines.push(deadline, id, &self.cmds);
        if replaced {
            self.deadlines.prune(&self.cmds);
        }
    }

    /// Things that follow from the state rather than from one event: the
    /// caller's logout once work has drained, the polite logout when every
    /// handle is gone.
    pub(super) fn step(&mut self) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        if !self.requests_open
            && self.cmds.is_empty()
            && self.others.is_empty()
            && self.closing.is_none()
            && self.logout_sent.is_none()
        {
            self.closing = Some(None);
        }
        if self.closing.is_some() && self.logout_sent.is_none() && core.outstanding() == 0 {
            let task = core.logout();
            self.logout_sent = Some((task, LogoutBy::Us));
        }
    }

    /// Handle everything the core reported; a loss decided on the way is
    /// acted on after the whole batch (completions in it are real answers).
    pub(super) fn drain_core(&mut self, now: Instant) {
        let mut loss = None;
        let mut finished = false;
        loop {
            let Conn::Live(core) = &mut self.conn else {
                return;
            };
            let Some(ev) = core.poll_event() else {
                break;
            };
            match ev {
                Event::Command { id, result } => self.command_done(id, result, now),
                Event::Text { id, result } => {
                    if let Some(Other::Text(rid)) = self.others.remove(&id) {
                        self.outputs.push_back(Output::Text {
                            id: rid,
                            result: result.map_err(Failure::Task),
                        });
                    }
                }
                Event::Pong { id, rtt } => {
                    if let Some(Other::Ping(rid)) = self.others.remove(&id) {
                        self.outputs.push_back(Output::Pong {
                            id: rid,
                            result: Ok(rtt),
                        });
                    }
                }
                Event::TaskMgmt { id, result } => {
                    if let Some(l) = self.tmf_done(id, result, now) {
                        loss.get_or_insert(l);
                    }
                }
                Event::Logout { id, result } => match self.logout_sent {
                    Some((task, by)) if task == id => {
                        if let Ok(code) = result {
                            if code != 0 {
                                self.outputs
                                    .push_back(Output::Notice(Notice::LogoutResponse { code }));
                            }
                        }
                        if by == LogoutBy::Us || self.closing.is_some() {
                            finished = true;
                        } else {
                            loss.get_or_insert(Loss::TargetLogout);
                        }
                    }
                    _ => {}
                },
                Event::Async {
                    event,
                    vcode,
                    parameters,
                    data,
                } => {
                    if let Some(l) = self.async_event(event, vcode, parameters, &data) {
                        loss.get_or_insert(l);
                    }
                }
                Event::Reject { reason } => {
                    self.outputs
                        .push_back(Output::Notice(Notice::Reject { reason }));
                }
            }
        }
        if finished {
            self.finish(Failure::Closed);
        } else if let Some(l) = loss {
            self.lose(l, now);
        }
    }

    fn command_done(
        &mut self,
        task: TaskId,
        result: Result<CommandResult, TaskError>,
        now: Instant,
    ) {
        if task.0 & CALLER_TASK_IDS == 0 {
            return;
        }
        let id = RequestId(task.0 & !CALLER_TASK_IDS);
        // Only the answer for the command's current task counts.
        let Some(cmd) = self.cmds.get_mut(id.0).filter(|c| c.task == Some(task)) else {
            return;
        };
        cmd.task = None;
        let had_deadline = cmd.deadline.take().is_some();
        let timeouts = cmd.timeouts;
        if had_deadline {
            self.deadlines.prune(&self.cmds);
        }
        // Aborted after its deadline, or never sent because the target
        // kept the command window closed that long: retried the same way.
        let timed_out = matches!(
            result,
            Err(TaskError::Aborted | TaskError::WindowClosed { .. })
        );
        if timed_out && timeouts > 0 {
            if timeouts > self.cfg.max_timeout_retries {
                if let Some(cmd) = self.cmds.remove(id.0) {
                    self.outputs.push_back(Output::Command {
                        id,
                        result: result.map_err(Failure::Task),
                        waiter: cmd.waiter,
                    });
                }
            } else {
                self.outputs
                    .push_back(Output::Notice(Notice::ReissuingAborted { id }));
                self.submit(id, now);
            }
            return;
        }
        if result == Err(TaskError::Aborted) {
            // Aborted by a LUN reset (ours or a caller's): not its fault.
            self.submit(id, now);
            return;
        }
        let Some(cmd) = self.cmds.remove(id.0) else {
            return;
        };
        if matches!(
            result,
            Ok(_) | Err(TaskError::TargetFailure(_)) | Err(TaskError::Rejected(_))
        ) {
            // The target answered: the session makes progress.
            self.stall_since = None;
            self.gave_up = false;
            self.progress_on_conn = true;
            self.flaps = 0;
        }
        self.outputs.push_back(Output::Command {
            id,
            result: result.map_err(Failure::Task),
            waiter: cmd.waiter,
        });
    }

    /// A task management request finished; returns a loss when the
    /// connection must go.
    fn tmf_done(
        &mut self,
        task: TaskId,
        result: Result<TmfOutcome, TaskError>,
        now: Instant,
    ) -> Option<Loss> {
        if let Some(own) = self.tmfs.remove(&task) {
            let ok = matches!(
                result,
                Ok(TmfOutcome::Complete) | Ok(TmfOutcome::TaskDoesNotExist)
            );
            match own {
                OwnTmf::Abort { lun, .. } if !ok => {
                    self.outputs
                        .push_back(Output::Notice(Notice::AbortFailed { result }));
                    self.reset_lun(lun, now);
                }
                OwnTmf::Reset { .. } if result != Ok(TmfOutcome::Complete) => {
                    return Some(Loss::LunResetFailed);
                }
                _ => self
                    .outputs
                    .push_back(Output::Notice(Notice::TaskMgmtDone { result })),
            }
        } else if let Some(Other::Tmf(rid, _)) = self.others.remove(&task) {
            self.outputs.push_back(Output::TaskMgmt {
                id: rid,
                result: result.map_err(Failure::Task),
            });
        }
        None
    }

    pub(super) fn reset_lun(&mut self, lun: [u8; 8], now: Instant) {
        if let Conn::Live(core) = &mut self.conn {
            let task = core.lun_reset(lun);
            self.tmfs.insert(task, OwnTmf::Reset { sent: now });
        }
    }

    /// An Asynchronous Message (RFC 7143 §11.9); returns a loss when the
    /// connection must go.
    fn async_event(
        &mut self,
        event: u8,
        vcode: u8,
        parameters: [u16; 3],
        data: &[u8],
    ) -> Option<Loss> {
        match event {
            async_event::SCSI_ASYNC_EVENT => {
                // Sense data: SenseLength (2 bytes) then the sense bytes.
                let sense = Sense::from_iscsi_data_segment(data).ok().flatten();
                if let Some(change) = sense.as_ref().and_then(|s| s.target_change()) {
                    self.outputs.push_back(Output::TargetChanged(change));
                }
                self.outputs
                    .push_back(Output::Notice(Notice::ScsiEvent { sense }));
                None
            }
            async_event::LOGOUT_REQUESTED => {
                self.outputs
                    .push_back(Output::Notice(Notice::TargetRequestsLogout {
                        within_secs: parameters[2],
                    }));
                if self.logout_sent.is_none() {
                    if let Conn::Live(core) = &mut self.conn {
                        let task = core.logout();
                        self.logout_sent = Some((task, LogoutBy::Target));
                    }
                }
                None
            }
            async_event::CONNECTION_DROP | async_event::SESSION_DROP => {
                let time2wait = parameters[1];
                self.outputs
                    .push_back(Output::Notice(Notice::TargetDropping { event, time2wait }));
                Some(Loss::TargetDropping { event, time2wait })
            }
            async_event::NEGOTIATION_REQUEST => {
                self.outputs
                    .push_back(Output::Notice(Notice::RenegotiationRequested));
                Some(Loss::Renegotiation)
            }
            _ => {
                self.outputs.push_back(Output::Notice(Notice::AsyncMessage {
                    event,
                    vcode,
                    parameters,
                }));
                None
            }
        }
    }

    /// The current connection is over: connection-scoped requests fail,
    /// commands are kept for the next connection (or fail when there will be
    /// none).
    pub(super) fn lose(&mut self, cause: Loss, now: Instant) {
        if !self.is_live() {
            return;
        }
        self.retire(Conn::Down {
            since: now,
            wake: Some(now + self.time2wait),
        });
        self.tmfs.clear();
        self.deadlines.clear();
        for cmd in self.cmds.values_mut() {
            cmd.task = None;
            cmd.deadline = None;
        }
        let our_logout = self.logout_by() == Some(LogoutBy::Us);
        self.logout_sent = None;
        let reconnect = self.cfg.reconnect && self.closing.is_none() && !our_logout;
        let right_after_login =
            !self.progress_on_conn && now.saturating_duration_since(self.live_since) < FLAP_WINDOW;
        self.flaps = if right_after_login { self.flaps + 1 } else { 0 };
        // The cause goes out before the failures it explains, so a driver
        // reporting `Failure::ConnectionLost` can name it.
        self.outputs.push_back(Output::Disconnect {
            cause: cause.clone(),
            reconnect,
            pending: self.cmds.len(),
            // Repeats are summarised below instead of each one warned of.
            quiet: our_logout && self.cmds.is_empty() || reconnect && self.flaps > 1,
        });
        self.fail_others(Failure::ConnectionLost);
        if !reconnect {
            self.finish(Failure::ConnectionLost);
            return;
        }
        if self.flaps > 1 && self.flaps.is_power_of_two() {
            self.outputs
                .push_back(Output::Notice(Notice::RepeatedLoginFailures {
                    count: self.flaps,
                    cause,
                }));
        }
        // A target that fails the same way right after every login meets a
        // growing pause: DefaultTime2Wait (at least 1 s), doubled for each
        // repeat, up to MAX_FLAP_BACKOFF.
        self.delay = if self.flaps > 1 {
            let doublings = (self.flaps - 1).min(16);
            (self.time2wait.max(MIN_BACKOFF) * (1u32 << doublings)).min(MAX_FLAP_BACKOFF)
        } else {
            self.time2wait
        };
        self.conn = Conn::Down {
            since: now,
            wake: Some(now + self.delay),
        };
        self.stall_since.get_or_insert(now);
        self.check_stall(now);
        if !self.requests_open && self.cmds.is_empty() {
            self.finish(Failure::Closed);
        }
    }

    /// Every connection-scoped request fails with `f`, oldest first.
    fn fail_others(&mut self, f: Failure) {
        let mut others: Vec<(TaskId, Other)> = self.others.drain().collect();
        others.sort_by_key(|(t, _)| *t);
        for (_, other) in others {
            self.outputs.push_back(match other {
                Other::Text(id) => Output::Text {
                    id,
                    result: Err(f.clone()),
                },
                Other::Ping(id) => Output::Pong {
                    id,
                    result: Err(f.clone()),
                },
                Other::Tmf(id, _) => Output::TaskMgmt {
                    id,
                    result: Err(f.clone()),
                },
            });
        }
    }

    /// The replacement timeout passed: every kept command fails.
    fn give_up(&mut self) {
        self.gave_up = true;
        let failed = self.cmds.len();
        self.outputs
            .push_back(Output::Notice(Notice::GaveUp { failed }));
        for (id, waiter) in self.take_cmds() {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(Failure::ReplacementTimeout),
                waiter,
            });
        }
    }

    /// When the kept commands fail if the session makes no progress before.
    pub(super) fn give_up_at(&self) -> Option<Instant> {
        if self.gave_up || self.cmds.is_empty() {
            return None;
        }
        Some(self.stall_since? + self.cfg.replacement_timeout)
    }

    /// Give up when commands have waited without progress for the
    /// replacement timeout; end the session when nobody is left to wait.
    /// Only while disconnected: a live connection has its own deadlines.
    pub(super) fn check_stall(&mut self, now: Instant) {
        if self.give_up_at().is_some_and(|t| t <= now) {
            self.give_up();
        }
    }

    /// Forget every kept command; their ids and waiters, oldest first
    /// (callers hear about them in submission order).
    fn take_cmds(&mut self) -> Vec<(RequestId, W)> {
        let mut ids: Vec<(RequestId, W)> = self
            .cmds
            .drain()
            .into_iter()
            .map(|(id, c)| (RequestId(id), c.waiter))
            .collect();
        ids.sort_unstable_by_key(|(id, _)| *id);
        ids
    }

    /// Leave the current state for `next`; a live connection's core is kept
    /// for [`Recovery::take_retired`].
    fn retire(&mut self, next: Conn) {
        if let Conn::Live(mut core) = std::mem::replace(&mut self.conn, next) {
            self.copied_untaken += core.take_copied_bytes();
            self.retired.push(*core);
        }
    }

    /// End the session: kept commands fail with `failure`, a caller's logout
    /// is answered, and the driver is told to stop.
    pub(super) fn finish(&mut self, failure: Failure) {
        if matches!(self.conn, Conn::Closed) {
            return;
        }
        self.retire(Conn::Closed);
        self.tmfs.clear();
        self.deadlines.clear();
        self.logout_sent = None;
        for (id, waiter) in self.take_cmds() {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(failure.clone()),
                waiter,
            });
        }
        self.fail_others(Failure::Closed);
        if let Some(Some(id)) = self.closing.take() {
            self.outputs
                .push_back(Output::Logout { id, result: Ok(()) });
        }
        self.outputs.push_back(Output::Finished);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::scsi::TargetChange;
    use bytes::Bytes;
    use std::time::Duration;

    #[test]
    fn lost_connection_waits_time2wait_then_reissues_kept_commands_oldest_first() {
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        let c = h.cmd(0xa3, 0.0);
        let sent = h.sent();
        h.answer(Harness::itt_of(&sent, 0xa2), GOOD, 0.5);
        h.outputs();

        h.lose(1.0);
        let out = h.outputs();
        assert_eq!(disconnect(&out), Some((Loss::Transport, true)));
        assert!(command_results(&out).is_empty(), "commands are kept");
        assert_eq!(h.r.poll_timeout(), Some(h.at(3.0)), "DefaultTime2Wait");
        h.timeout(2.9);
        assert_eq!(connects(&h.outputs()), 0, "not before DefaultTime2Wait");
        h.timeout(3.0);
        assert_eq!(connects(&h.outputs()), 1);
        assert_eq!(
            h.r.poll_timeout(),
            Some(h.at(121.0)),
            "the attempt is the driver's; only the replacement timeout is ours"
        );

        h.connected(3.5);
        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Reconnected { reissued: 2, after } if *after == Duration::from_millis(2500))));
        let sent = h.sent();
        let tags: Vec<u8> = sent
            .iter()
            .map(|s| match s {
                Sent::Cmd(t, _) => *t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            tags,
            vec![0xa1, 0xa3],
            "oldest first, the answered one not again"
        );
        h.answer(Harness::itt_of(&sent, 0xa3), GOOD, 4.0);
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 4.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(c, Ok(GOOD)), (a, Ok(GOOD))]
        );
        let _ = b;
    }

    #[test]
    fn failed_attempts_back_off_one_two_four_seconds() {
        let mut h = Harness::with(cfg(), core());
        h.r = Recovery::new(cfg(), core(), Duration::ZERO, h.t0);
        h.cmd(0xa1, 0.0);
        h.lose(0.0);
        h.timeout(0.0);
        let mut now = 0.0;
        let mut pauses = Vec::new();
        for _ in 0..5 {
            assert_eq!(connects(&h.outputs()), 1);
            now += 0.25; // the attempt itself
            h.connect_failed(now);
            let wake = h.r.poll_timeout().expect("next attempt scheduled");
            pauses.push(wake.duration_since(h.at(now)).as_secs_f64());
            now = wake.duration_since(h.t0).as_secs_f64();
            h.timeout(now);
        }
        assert_eq!(pauses, vec![1.0, 2.0, 4.0, 4.0, 4.0]);
    }

    #[test]
    fn replacement_timeout_fails_kept_commands_and_new_ones_fail_fast_while_down() {
        let mut h = Harness::new();
        let kept = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.outputs();
        let mut failed = Vec::new();
        let mut now = 1.0;
        while failed.is_empty() {
            let wake = h.r.poll_timeout().expect("an attempt is scheduled");
            h.r.handle_timeout(wake);
            now = wake.duration_since(h.t0).as_secs_f64() + 0.5;
            h.connect_failed(now);
            failed = command_results(&h.outputs());
            assert!(now < 200.0, "never gave up");
        }
        assert!(
            now >= 121.0,
            "gave up at {now}, before the replacement timeout"
        );
        assert_eq!(failed, vec![(kept, Err(Failure::ReplacementTimeout))]);

        let late = h.cmd(0xa3, now + 0.1);

        assert_eq!(
            command_results(&h.outputs()),
            vec![(late, Err(Failure::ReplacementTimeout))],
            "new commands fail at once once given up"
        );
    }

    #[test]
    fn replacement_timeout_fails_every_kept_command_including_ones_that_arrived_while_down() {
        let mut h = Harness::new();
        let kept = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        let arrived = h.cmd(0xa2, 10.0);
        h.timeout(3.0);
        h.outputs();
        h.connect_failed(125.0);
        let out = h.outputs();
        assert_eq!(
            command_results(&out),
            vec![
                (kept, Err(Failure::ReplacementTimeout)),
                (arrived, Err(Failure::ReplacementTimeout))
            ]
        );
        assert!(notices(&out).contains(&Notice::GaveUp { failed: 2 }));
        assert!(!finished(&out), "handles are still open: keep trying");
        assert!(h.r.poll_timeout().is_some());
    }

    #[test]
    fn successful_reconnect_after_giving_up_accepts_commands_again() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.timeout(3.0);
        h.connect_failed(125.0);
        h.outputs();
        let wake = h.r.poll_timeout().unwrap();
        h.r.handle_timeout(wake);
        h.connected(130.0);
        h.outputs();
        let id = h.cmd(0xa2, 131.0);
        let itt = Harness::itt_of(&h.sent(), 0xa2);
        h.answer(itt, GOOD, 131.5);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
    }

    #[test]
    fn reconnect_now_after_giving_up_tries_at_once_and_commands_still_fail_fast_meanwhile() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.timeout(3.0);
        h.connect_failed(125.0);
        h.outputs();
        assert!(
            h.r.poll_timeout().unwrap() > h.at(126.0),
            "the next attempt waits for its back-off"
        );

        let trying = h.r.handle_reconnect_now();
        let again = h.r.handle_reconnect_now();
        let out = h.outputs();
        let meanwhile = h.cmd(0xa2, 125.2);

        assert!(trying && again);
        assert_eq!(connects(&out), 1, "one attempt at once, not one per call");
        assert_eq!(
            command_results(&h.outputs()),
            vec![(meanwhile, Err(Failure::ReplacementTimeout))],
            "application I/O still fails at once while down"
        );
        h.connected(125.5);
        h.outputs();
        assert!(!h.r.handle_reconnect_now(), "live: nothing to do");
        assert_eq!(connects(&h.outputs()), 0);
        let id = h.cmd(0xa3, 125.6);
        let itt = Harness::itt_of(&h.sent(), 0xa3);
        h.answer(itt, GOOD, 125.7);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
    }

    #[test]
    fn protocol_error_drops_the_connection_and_the_command_goes_again() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();

        h.answer(0x7777, GOOD, 0.1); // a tag we never used

        let out = h.outputs();
        assert!(matches!(
            disconnect(&out),
            Some((
                Loss::Protocol(ProtocolError::UnknownTask { itt: 0x7777, .. }),
                true
            ))
        ));
        h.run_until(2.1);
        h.connected(2.2);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 2.3);
        assert!(command_results(&h.outputs()).contains(&(id, Ok(GOOD))));
    }

    #[test]
    fn target_logout_request_logs_out_then_logs_in_again_keeping_commands() {
        let mut h = Harness::new();
        let before = h.cmd(0xa1, 0.0);
        h.sent();

        h.async_message(async_event::LOGOUT_REQUESTED, [0, 0, 5], Bytes::new(), 1.0);

        assert!(notices(&h.outputs()).contains(&Notice::TargetRequestsLogout { within_secs: 5 }));
        let sent = h.sent();
        let [Sent::Logout(logout)] = sent[..] else {
            panic!("{sent:?}")
        };
        // A command arriving meanwhile waits for the next connection.
        let during = h.cmd(0xa2, 1.1);
        assert!(h.sent().is_empty());
        assert!(command_results(&h.outputs()).is_empty());

        h.logout_answer(logout, 1.2);

        assert_eq!(disconnect(&h.outputs()), Some((Loss::TargetLogout, true)));
        h.run_until(3.2);
        assert_eq!(connects(&h.outputs()), 1);
        h.connected(3.3);
        let sent = h.sent();
        assert!(
            matches!(sent[..], [Sent::Cmd(0xa1, _), Sent::Cmd(0xa2, _)]),
            "{sent:?}"
        );
        let _ = (before, during);
    }

    #[test]
    fn caller_logout_during_a_target_logout_ends_the_session() {
        let mut h = Harness::new();
        h.async_message(async_event::LOGOUT_REQUESTED, [0, 0, 5], Bytes::new(), 1.0);
        let sent = h.sent();
        let [Sent::Logout(logout)] = sent[..] else {
            panic!("{sent:?}")
        };
        let id = h.r.handle_logout();
        assert!(h.sent().is_empty(), "one logout is enough");

        h.logout_answer(logout, 1.2);

        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id: got, result: Ok(()) } if *got == id)));
        assert!(finished(&out));
        assert_eq!(connects(&out), 0);
    }

    #[test]
    fn connection_drop_announcement_reconnects() {
        for event in [async_event::CONNECTION_DROP, async_event::SESSION_DROP] {
            let mut h = Harness::new();
            h.cmd(0xa1, 0.0);
            h.sent();

            h.async_message(event, [0, 2, 20], Bytes::new(), 1.0);

            let out = h.outputs();
            assert!(notices(&out).contains(&Notice::TargetDropping {
                event,
                time2wait: 2
            }));
            assert_eq!(
                disconnect(&out),
                Some((
                    Loss::TargetDropping {
                        event,
                        time2wait: 2
                    },
                    true
                ))
            );
            assert_eq!(h.r.pending_commands(), 1);
            h.run_until(3.0);
            assert_eq!(connects(&h.outputs()), 1);
        }
    }

    #[test]
    fn renegotiation_request_reconnects() {
        let mut h = Harness::new();
        h.async_message(
            async_event::NEGOTIATION_REQUEST,
            [0, 0, 0],
            Bytes::new(),
            1.0,
        );
        let out = h.outputs();
        assert!(notices(&out).contains(&Notice::RenegotiationRequested));
        assert_eq!(disconnect(&out), Some((Loss::Renegotiation, true)));
    }

    #[test]
    fn capacity_and_lun_change_events_are_reported_and_other_scsi_events_are_not() {
        let mut h = Harness::new();
        h.async_message(
            async_event::SCSI_ASYNC_EVENT,
            [0; 3],
            sense_segment(0x2a, 0x09),
            1.0,
        );
        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::TargetChanged(TargetChange::Capacity))));
        assert!(matches!(
            &notices(&out)[..],
            [Notice::ScsiEvent { sense: Some(s) }] if s.asc == 0x2a && s.ascq == 0x09
        ));

        h.async_message(
            async_event::SCSI_ASYNC_EVENT,
            [0; 3],
            sense_segment(0x29, 0x00),
            2.0,
        );
        let out = h.outputs();
        assert!(!out.iter().any(|o| matches!(o, Output::TargetChanged(_))));
        assert!(h.r.is_live());

        h.async_message(
            async_event::SCSI_ASYNC_EVENT,
            [0; 3],
            sense_segment(0x3f, 0x0e),
            3.0,
        );
        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::TargetChanged(TargetChange::Luns))));
    }

    #[test]
    fn unknown_async_message_is_only_noted() {
        let mut h = Harness::new();
        h.async_message(async_event::VENDOR_SPECIFIC, [1, 2, 3], Bytes::new(), 1.0);
        let out = h.outputs();
        assert_eq!(
            notices(&out),
            vec![Notice::AsyncMessage {
                event: async_event::VENDOR_SPECIFIC,
                vcode: 0,
                parameters: [1, 2, 3]
            }]
        );
        assert!(h.r.is_live());
    }

    // ---- issue 12: a target that accepts every login and then fails ----------

    #[test]
    fn target_failing_right_after_every_login_cannot_keep_a_command_waiting_past_the_replacement_timeout(
    ) {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        let id = h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.1); // the first connection breaks at once
        let mut results = command_results(&h.outputs());
        let mut now = 0.1;
        let mut logins = 0;
        while results.is_empty() {
            let (t, out) = flap(&mut h);
            now = t;
            logins += out
                .iter()
                .filter(|o| matches!(o, Output::Reconnected { .. }))
                .count();
            results = command_results(&out);
            assert!(now < 60.0, "still waiting at {now} s");
        }
        assert_eq!(results, vec![(id, Err(Failure::ReplacementTimeout))]);
        assert!(
            (10.0..=10.3).contains(&now),
            "failed at {now} s, not at 10.1 s"
        );
        assert_eq!(
            logins, 2,
            "each login succeeded and did not restart the clock"
        );
        // New commands fail at once while the target keeps failing.
        let late = h.cmd(0xa2, now + 0.1);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(late, Err(Failure::ReplacementTimeout))]
        );
    }

    #[test]
    fn connections_failing_right_after_login_meet_growing_back_off() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(3600), true);
        let mut h = Harness::with(cfg, core());
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        let mut pauses = Vec::new();
        for _ in 0..7 {
            let (now, _) = flap(&mut h);
            let next = h.r.poll_timeout().unwrap();
            pauses.push(next.duration_since(h.at(now)).as_secs());
        }
        // The first loss waits DefaultTime2Wait (2 s); each repeat doubles
        // it up to MAX_FLAP_BACKOFF.
        assert_eq!(pauses, vec![4, 8, 16, 30, 30, 30, 30]);
    }

    #[test]
    fn repeated_failures_right_after_login_are_summarised_with_their_cause() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        let mut summaries = Vec::new();
        let mut loud = 0;
        let mut all = h.outputs();
        for _ in 0..8 {
            all.extend(flap(&mut h).1);
        }
        for o in &all {
            match o {
                Output::Notice(Notice::RepeatedLoginFailures { count, cause }) => {
                    assert!(matches!(
                        cause,
                        Loss::Protocol(ProtocolError::UnknownTask { .. })
                    ));
                    summaries.push(*count);
                }
                Output::Disconnect { quiet: false, .. } => loud += 1,
                _ => {}
            }
        }
        assert_eq!(summaries, vec![2, 4, 8]);
        assert_eq!(loud, 1, "only the first loss is warned of on its own");
    }

    #[test]
    fn a_completed_command_restarts_the_replacement_clock() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        h.lose(0.0);
        h.run_until(2.0);
        h.connected(8.0);
        let sent = h.sent();
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 8.5); // progress
        h.lose(9.0);
        h.outputs();
        h.run_until(11.0);
        h.connect_failed(11.5);

        h.run_until(18.9);
        assert!(
            command_results(&h.outputs()).is_empty(),
            "10 s counted from the loss after the progress, not from the first loss"
        );
        h.run_until(19.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(b, Err(Failure::ReplacementTimeout))]
        );
        let _ = a;
    }

    #[test]
    fn a_connection_that_completes_a_command_ends_the_streak_of_failures() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        flap(&mut h);
        flap(&mut h);
        h.outputs();
        let wake = h.r.poll_timeout().unwrap();
        h.r.handle_timeout(wake);
        let now = wake.duration_since(h.t0).as_secs_f64();
        h.connected(now);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, now + 0.1);
        h.lose(now + 0.2);

        assert_eq!(
            h.r.poll_timeout(),
            Some(h.at(now + 2.2)),
            "back to DefaultTime2Wait"
        );
    }

    #[test]
    fn replacement_timeout_fires_on_time_during_a_slow_connection_attempt() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.run_until(3.0);
        assert_eq!(connects(&h.outputs()), 1);

        h.run_until(121.0); // the attempt has not finished

        assert_eq!(
            command_results(&h.outputs()),
            vec![(id, Err(Failure::ReplacementTimeout))]
        );
    }

    #[test]
    fn idle_session_that_reconnected_gives_the_next_loss_a_full_replacement_timeout() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        h.lose(0.0);
        h.run_until(2.0);
        h.connected(2.0); // nothing pending: the stall is over
        h.lose(500.0);
        let id = h.cmd(0xa1, 500.5);
        h.run_until(509.9);
        assert!(command_results(&h.outputs()).is_empty());
        h.run_until(510.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(id, Err(Failure::ReplacementTimeout))]
        );
    }
}
