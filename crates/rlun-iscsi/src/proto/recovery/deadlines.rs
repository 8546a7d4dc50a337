//! Time bookkeeping that does not need the machine: the kept commands'
//! deadlines, earliest first, at a push per submitted command and nothing
//! per completion, and the pause between failed connection attempts.
//!
//! The queue's methods are `#[inline]`: the machine calls them for every
//! command from other files (`machine.rs`, `timers.rs`), and they were
//! inlined there when all of it was one file.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::api::{RequestId, MAX_BACKOFF, MIN_BACKOFF};
use super::records::CmdRecord;
use crate::proto::idmap::SlotTable;

/// The kept commands' deadlines, earliest first: a queue of `(deadline,
/// command)` entries instead of an ordered set, so that a command costs a
/// push when it is submitted and nothing when it completes. An entry is
/// current while its command still has that deadline
/// ([`CmdRecord::deadline`]); a completed command or a replaced deadline
/// leaves a stale entry behind, dropped when it reaches the front (the
/// front is always kept current) or when stale entries outnumber the
/// commands. Deadlines are pushed in time order (each is `now` plus a
/// fixed period; the queued-command recheck, shorter, is rare and takes
/// the slow, sorted insert).
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    q: VecDeque<(Instant, RequestId)>,
}

impl Deadlines {
    #[inline]
    fn is_current<W>(cmds: &SlotTable<CmdRecord<W>>, t: Instant, id: RequestId) -> bool {
        cmds.get(id.0).and_then(|c| c.deadline) == Some(t)
    }

    /// Watch command `id`, which has just been given deadline `t`.
    #[inline]
    pub(super) fn push<W>(&mut self, t: Instant, id: RequestId, cmds: &SlotTable<CmdRecord<W>>) {
        if self.q.back().is_none_or(|&(last, _)| last <= t) {
            self.q.push_back((t, id));
        } else {
            let at = self.q.partition_point(|&(d, _)| d <= t);
            self.q.insert(at, (t, id));
        }
        // Stale entries behind a long-lived front: drop them all at once,
        // so the queue stays within a small multiple of the kept commands.
        if self.q.len() > 2 * cmds.len() + 64 {
            self.q.retain(|&(t, id)| Self::is_current(cmds, t, id));
        }
    }

    /// Drop stale entries from the front (after a deadline went away).
    #[inline]
    pub(super) fn prune<W>(&mut self, cmds: &SlotTable<CmdRecord<W>>) {
        while let Some(&(t, id)) = self.q.front() {
            if Self::is_current(cmds, t, id) {
                break;
            }
            self.q.pop_front();
        }
    }

    /// The earliest current deadline.
    #[inline]
    pub(super) fn first<W>(&self, cmds: &SlotTable<CmdRecord<W>>) -> Option<Instant> {
        // The front is current after every change; the filter only guards.
        self.q
            .iter()
            .find(|&&(t, id)| Self::is_current(cmds, t, id))
            .map(|&(t, _)| t)
    }

    /// Take the earliest current entry if it is due at `now`.
    #[inline]
    pub(super) fn pop_due<W>(
        &mut self,
        now: Instant,
        cmds: &SlotTable<CmdRecord<W>>,
    ) -> Option<(Instant, RequestId)> {
        self.prune(cmds);
        match self.q.front() {
            Some(&(t, _)) if t <= now => self.q.pop_front(),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn clear(&mut self) {
        self.q.clear();
    }
}

/// The pause after a failed attempt: doubles from at least [`MIN_BACKOFF`],
/// 1 s → 2 s → 4 s, never more than [`MAX_BACKOFF`].
pub(super) fn next_backoff(delay: Duration) -> Duration {
    MIN_BACKOFF
        .max(delay.min(Duration::from_secs(2)) * 2)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use crate::proto::recovery::*;
    use bytes::Bytes;

    #[test]
    fn deadlines_fire_on_time_under_load_and_completed_commands_leave_nothing_behind() {
        let mut h = Harness::new();
        let stuck = h.cmd(0xa1, 0.0);
        let stuck_itt = Harness::itt_of(&h.sent(), 0xa1);
        // A window that stays open however many commands go by.
        let mut answered = 1u32;
        let mut answer = |h: &mut Harness, itt: u32, secs: f64| {
            answered += 1;
            let stat_sn = h.next_stat_sn();
            h.pdu(
                Bhs::ScsiResponse(ScsiResponse {
                    bidi_overflow: false,
                    bidi_underflow: false,
                    residual: Residual::default(),
                    response: 0,
                    status: GOOD,
                    itt,
                    snack_tag: 0,
                    stat_sn,
                    exp_cmd_sn: answered,
                    max_cmd_sn: answered + 64,
                    exp_data_sn: 0,
                    bidi_read_residual_count: 0,
                }),
                Bytes::new(),
                secs,
            );
        };
        // 4,800 commands come and go around the stuck one, in bursts of 16
        // answered newest first (the deadline queue sees completions out of
        // order), over 29 s.
        for burst in 0..300 {
            let secs = f64::from(burst) * 0.097;
            let ids: Vec<RequestId> = (0..16).map(|_| h.cmd(0x28, secs)).collect();
            let itts: Vec<u32> = h
                .sent()
                .iter()
                .map(|s| match s {
                    Sent::Cmd(0x28, itt) => *itt,
                    other => panic!("unexpected {other:?}"),
                })
                .collect();
            assert_eq!(itts.len(), 16);
            for &itt in itts.iter().rev() {
                answer(&mut h, itt, secs + 0.001);
            }
            let done: Vec<RequestId> = command_results(&h.outputs())
                .into_iter()
                .map(|(id, r)| {
                    assert_eq!(r, Ok(GOOD));
                    id
                })
                .collect();
            assert_eq!(done.len(), 16);
            assert!(ids.iter().all(|id| done.contains(id)));
            assert_eq!(
                h.r.poll_timeout(),
                Some(h.at(30.0)),
                "the stuck command's deadline stays the next one"
            );
            assert_eq!(h.r.pending_commands(), 1);
            assert!(
                h.r.deadlines.q.len() <= 2 * h.r.pending_commands() + 64 + 16,
                "{} deadline entries kept for one command",
                h.r.deadlines.q.len()
            );
        }
        h.run_until(29.99);
        assert!(!notices(&h.outputs())
            .iter()
            .any(|n| matches!(n, Notice::CommandTimedOut { .. })));
        let abort = h.times_out_and_is_aborted(30.0, 0xa1, stuck_itt);
        // Aborted, re-issued, answered: nothing is left to watch anywhere.
        h.tmf_answer(abort, 0, 30.5);
        let again = Harness::itt_of(&h.sent(), 0xa1);
        answer(&mut h, again, 31.0);
        assert_eq!(command_results(&h.outputs()), vec![(stuck, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert_eq!(h.r.core().map(Connection::outstanding), Some(0));
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn commands_on_a_lost_connection_free_their_deadlines_and_get_fresh_ones_after() {
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 0.0);
        h.sent();
        h.lose(1.0);
        h.outputs();
        assert!(
            h.r.deadlines.q.is_empty(),
            "deadlines go with the connection"
        );
        h.run_until(1.0 + T2W.as_secs_f64());
        h.connected(3.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        assert_eq!(h.r.poll_timeout(), Some(h.at(33.0)), "a fresh deadline");
        h.answer(itt, GOOD, 4.0);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);
        assert_eq!(h.r.poll_timeout(), None);
        assert_eq!(h.r.core().map(Connection::outstanding), Some(0));
    }
}
