//! The path selector, sans-IO: which path of a LUN the next command takes,
//! given what is known of each path (its session up or down, the checker's
//! verdict, its ALUA state, its commands in flight) and the policy. No
//! clock, no I/O: the router feeds it events with the time they happened
//! at, and the unit tests drive it with made-up instants.
//!
//! The rules:
//!
//! - A path is *usable* when it is up (logged in, last check passed) and
//!   its asymmetric access state carries I/O (active/optimized,
//!   active/non-optimized, LBA-dependent). A target without ALUA reports
//!   every path active/optimized.
//! - Commands go to the usable paths of the best state present (optimized
//!   before non-optimized): the *candidates*. Standby, unavailable,
//!   offline and transitioning paths carry no reads or writes (the
//!   checker still sends them TEST UNIT READY and REPORT TARGET PORT
//!   GROUPS).
//! - [`Policy::Failover`]: one candidate at a time, sticky: the current
//!   path stays while it is a candidate. When it stops being one the
//!   preferred candidate (the ALUA preferred group's, else the first
//!   portal given) takes over, else the first. With
//!   [`Failback::Immediate`] the preferred path takes over again as soon
//!   as it is a candidate; with [`Failback::Manual`] only when the current
//!   one fails.
//! - [`Policy::RoundRobin`]: the candidates in turn, a command each.
//! - [`Policy::QueueLength`]: the candidate with the fewest commands in
//!   flight (dm-multipath's queue-length and service-time idea), ties in
//!   turn.

use std::time::Instant;

use rlun_iscsi::scsi::alua::AluaState;

pub use crate::config::settings::{Failback, MultipathPolicy as Policy};

/// What the selector knows of one path.
#[derive(Debug, Clone)]
pub struct PathState {
    /// Logged in, and the last check (if any) passed.
    pub up: bool,
    pub alua: AluaState,
    /// The target port group the path reaches, when the target says.
    pub group: Option<u16>,
    /// The path's group is the preferred one (ALUA PREF), or, without
    /// ALUA, the path is the first portal given.
    pub preferred: bool,
    pub in_flight: u32,
    /// Commands completed through the path.
    pub commands: u64,
    /// Times the path failed (went down: a command lost on it, or a check).
    pub errors: u64,
    /// When the path last went down, and why.
    pub last_failure: Option<(Instant, String)>,
}

impl PathState {
    fn new(preferred: bool) -> PathState {
        PathState {
            up: false,
            alua: AluaState::ActiveOptimized,
            group: None,
            preferred,
            in_flight: 0,
            commands: 0,
            errors: 0,
            last_failure: None,
        }
    }

    /// Up, and in a state that carries reads and writes.
    pub fn usable(&self) -> bool {
        self.up && self.alua.carries_io()
    }
}

/// A change of the path in use, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    pub from: Option<usize>,
    pub to: Option<usize>,
}

/// The selector of one LUN (see the module docs).
#[derive(Debug)]
pub struct Selector {
    policy: Policy,
    failback: Failback,
    paths: Vec<PathState>,
    /// The failover policy's current path.
    current: Option<usize>,
    /// Where the next turn of round-robin starts.
    next: usize,
    /// When the current path last changed because another failed.
    pub last_failover: Option<Instant>,
    pub failovers: u64,
}

impl Selector {
    /// `n` paths, all down until [`Selector::set_up`]; the first is the
    /// preferred one until ALUA says otherwise.
    pub fn new(n: usize, policy: Policy, failback: Failback) -> Selector {
        Selector {
            policy,
            failback,
            paths: (0..n).map(|i| PathState::new(i == 0)).collect(),
            current: None,
            next: 0,
            last_failover: None,
            failovers: 0,
        }
    }

    pub fn paths(&self) -> &[PathState] {
        &self.paths
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The failover policy's current path.
    pub fn current(&self) -> Option<usize> {
        self.current
    }

    /// Paths that can carry I/O now.
    pub fn usable(&self) -> usize {
        self.paths.iter().filter(|p| p.usable()).count()
    }

    /// The best state among usable paths.
    fn best_rank(&self) -> Option<u8> {
        self.paths
            .iter()
            .filter(|p| p.usable())
            .map(|p| p.alua.rank())
            .min()
    }

    fn is_candidate(&self, i: usize, rank: u8) -> bool {
        self.paths[i].usable() && self.paths[i].alua.rank() == rank
    }

    /// The path for the next command, counted in flight until
    /// [`Selector::done`]; `None` when no path is usable.
    pub fn pick(&mut self) -> Option<usize> {
        let i = match self.policy {
            Policy::Failover => {
                self.settle();
                self.current?
            }
            Policy::RoundRobin => self.round_robin()?,
            Policy::QueueLength => self.shortest()?,
        };
        self.paths[i].in_flight += 1;
        Some(i)
    }

    /// While no path is usable: an up path in the transitioning state,
    /// the preferred one first, counted in flight like [`Selector::pick`]
    /// — a command may go there to learn whether its transition has
    /// ended (the target answers it or says "transitioning" again).
    pub fn pick_transitioning(&mut self) -> Option<usize> {
        if self.usable() > 0 {
            return None;
        }
        let n = self.paths.len();
        let probe = |p: &PathState| p.up && p.alua == AluaState::Transitioning;
        let i = (0..n)
            .find(|&i| self.paths[i].preferred && probe(&self.paths[i]))
            .or_else(|| (0..n).find(|&i| probe(&self.paths[i])))?;
        self.paths[i].in_flight += 1;
        Some(i)
    }

    /// Bring the failover policy's current path in line with the states;
    /// the switch made, if any.
    pub fn settle(&mut self) -> Option<Switch> {
        let from = self.current;
        let rank = self.best_rank();
        let keep = match (from, rank) {
            (Some(c), Some(r)) if self.is_candidate(c, r) => {
                let preferred_back = self.failback == Failback::Immediate
                    && !self.paths[c].preferred
                    && (0..self.paths.len())
                        .any(|i| self.paths[i].preferred && self.is_candidate(i, r));
                !preferred_back
            }
            _ => false,
        };
        if keep {
            return None;
        }
        let to = rank.and_then(|r| {
            let n = self.paths.len();
            (0..n)
                .find(|&i| self.paths[i].preferred && self.is_candidate(i, r))
                .or_else(|| (0..n).find(|&i| self.is_candidate(i, r)))
        });
        if to == from {
            return None;
        }
        self.current = to;
        Some(Switch { from, to })
    }

    fn round_robin(&mut self) -> Option<usize> {
        let rank = self.best_rank()?;
        let n = self.paths.len();
        let i = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| self.is_candidate(i, rank))?;
        self.next = (i + 1) % n;
        Some(i)
    }

    fn shortest(&mut self) -> Option<usize> {
        let rank = self.best_rank()?;
        let n = self.paths.len();
        let i = (0..n)
            .map(|k| (self.next + k) % n)
            .filter(|&i| self.is_candidate(i, rank))
            .min_by_key(|&i| self.paths[i].in_flight)?;
        self.next = (i + 1) % n;
        Some(i)
    }

    /// A command picked for path `i` is over (whatever its outcome).
    pub fn done(&mut self, i: usize, completed: bool) {
        let p = &mut self.paths[i];
        p.in_flight = p.in_flight.saturating_sub(1);
        if completed {
            p.commands += 1;
        }
    }

    /// Path `i` failed at `now` for `reason`: down until it is seen up
    /// again. Returns the switch of the failover policy's path it caused.
    pub fn failed(&mut self, i: usize, reason: &str, now: Instant) -> Option<Switch> {
        // Carrying I/O until now: the failover policy's path, or any
        // usable one under the others.
        let in_use = match self.policy {
            Policy::Failover => self.current == Some(i),
            _ => self.paths[i].usable(),
        };
        let p = &mut self.paths[i];
        // Once per failure, not once per command that was on the path.
        if p.up {
            p.errors += 1;
            p.up = false;
            p.last_failure = Some((now, reason.to_string()));
        }
        let switch = self.settle();
        if in_use && self.usable() > 0 {
            self.failovers += 1;
            self.last_failover = Some(now);
        }
        switch
    }

    /// Path `i` is up (logged in, check passed) or down. The switch it
    /// caused, if any (a failback, or a first path).
    pub fn set_up(&mut self, i: usize, up: bool, now: Instant) -> Option<Switch> {
        let p = &mut self.paths[i];
        if p.up && !up {
            p.last_failure = Some((now, "check failed".to_string()));
        }
        p.up = up;
        self.settle()
    }

    /// Path `i`'s asymmetric access state (and group, and whether the group
    /// is the preferred one) as the target reports it. The switch it
    /// caused, if any.
    pub fn set_alua(
        &mut self,
        i: usize,
        state: AluaState,
        group: Option<u16>,
        preferred: bool,
    ) -> Option<Switch> {
        let p = &mut self.paths[i];
        p.alua = state;
        p.group = group;
        p.preferred = preferred;
        self.settle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn up(n: usize, policy: Policy, failback: Failback) -> (Selector, Instant) {
        let now = Instant::now();
        let mut s = Selector::new(n, policy, failback);
        for i in 0..n {
            s.set_up(i, true, now);
        }
        (s, now)
    }

    fn picks(s: &mut Selector, n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let i = s.pick().expect("a usable path");
                s.done(i, true);
                i
            })
            .collect()
    }

    #[test]
    fn only_while_no_path_is_usable_a_transitioning_one_may_be_tried() {
        let (mut s, now) = up(3, Policy::Failover, Failback::Immediate);
        s.set_alua(0, AluaState::Standby, Some(1), false);
        s.set_alua(1, AluaState::Transitioning, Some(2), false);
        s.set_alua(2, AluaState::Transitioning, Some(2), true);
        assert_eq!(s.pick(), None);
        assert_eq!(s.pick_transitioning(), Some(2), "the preferred one first");
        assert_eq!(s.paths()[2].in_flight, 1);
        s.done(2, false);
        s.failed(2, "connection lost", now);
        assert_eq!(
            s.pick_transitioning(),
            Some(1),
            "a failed path is not tried"
        );
        s.done(1, false);
        s.set_alua(0, AluaState::ActiveNonOptimized, Some(1), false);
        assert_eq!(s.pick_transitioning(), None, "a usable path carries I/O");
        assert_eq!(s.pick(), Some(0));
    }

    #[test]
    fn failover_sticks_to_one_path_and_moves_only_when_it_fails() {
        let (mut s, now) = up(2, Policy::Failover, Failback::Immediate);
        assert_eq!(picks(&mut s, 4), vec![0, 0, 0, 0]);
        let sw = s.failed(0, "connection lost", now);
        assert_eq!(
            sw,
            Some(Switch {
                from: Some(0),
                to: Some(1)
            })
        );
        assert_eq!(s.failovers, 1);
        assert_eq!(picks(&mut s, 2), vec![1, 1]);
        assert_eq!(s.paths()[0].errors, 1);
        assert_eq!(
            s.paths()[0].last_failure.as_ref().unwrap().1,
            "connection lost"
        );
    }

    #[test]
    fn immediate_failback_returns_to_the_preferred_path_and_manual_stays() {
        for (failback, back_to) in [(Failback::Immediate, 0), (Failback::Manual, 1)] {
            let (mut s, now) = up(2, Policy::Failover, failback);
            s.failed(0, "lost", now);
            assert_eq!(s.pick(), Some(1));
            s.set_up(0, true, now + Duration::from_secs(5));
            assert_eq!(s.pick(), Some(back_to), "{failback:?}");
        }
    }

    #[test]
    fn no_usable_path_gives_none_and_a_returning_one_is_taken() {
        let (mut s, now) = up(2, Policy::Failover, Failback::Manual);
        s.failed(0, "lost", now);
        s.failed(1, "lost", now);
        assert_eq!(s.pick(), None);
        assert_eq!(s.usable(), 0);
        s.set_up(1, true, now);
        assert_eq!(s.pick(), Some(1));
    }

    #[test]
    fn round_robin_takes_the_candidates_in_turn() {
        let (mut s, now) = up(3, Policy::RoundRobin, Failback::Immediate);
        assert_eq!(picks(&mut s, 6), vec![0, 1, 2, 0, 1, 2]);
        s.failed(1, "lost", now);
        assert_eq!(s.failovers, 1, "a path that carried I/O failed");
        assert_eq!(picks(&mut s, 4), vec![0, 2, 0, 2]);
    }

    #[test]
    fn queue_length_prefers_the_path_with_fewer_commands_in_flight() {
        let (mut s, _) = up(2, Policy::QueueLength, Failback::Immediate);
        let a = s.pick().unwrap();
        let b = s.pick().unwrap();
        assert_ne!(a, b, "an idle path is taken before a busy one");
        s.done(a, true);
        // `a` is idle now, `b` still has one.
        assert_eq!(s.pick(), Some(a));
        assert_eq!(s.paths()[b].in_flight, 1);
    }

    #[test]
    fn io_follows_alua_to_the_optimized_group_and_never_to_standby() {
        let (mut s, _) = up(2, Policy::RoundRobin, Failback::Immediate);
        s.set_alua(0, AluaState::ActiveOptimized, Some(1), true);
        s.set_alua(1, AluaState::ActiveNonOptimized, Some(2), false);
        assert_eq!(picks(&mut s, 3), vec![0, 0, 0]);
        // The states swap.
        s.set_alua(0, AluaState::Standby, Some(1), false);
        s.set_alua(1, AluaState::ActiveOptimized, Some(2), true);
        assert_eq!(picks(&mut s, 3), vec![1, 1, 1]);
        // Non-optimized is used when nothing better is left.
        s.set_alua(1, AluaState::ActiveNonOptimized, Some(2), false);
        assert_eq!(picks(&mut s, 2), vec![1, 1]);
        // Transitioning and standby carry nothing.
        s.set_alua(1, AluaState::Transitioning, Some(2), false);
        assert_eq!(s.pick(), None);
    }

    #[test]
    fn failover_follows_the_preferred_group_of_alua() {
        let (mut s, _) = up(2, Policy::Failover, Failback::Immediate);
        assert_eq!(s.pick(), Some(0));
        s.set_alua(0, AluaState::ActiveOptimized, Some(1), false);
        let sw = s.set_alua(1, AluaState::ActiveOptimized, Some(2), true);
        assert_eq!(sw.map(|s| s.to), Some(Some(1)));
        assert_eq!(s.pick(), Some(1));
        // An ALUA move is not a failover.
        assert_eq!(s.failovers, 0);
    }

    #[test]
    fn in_flight_counts_balance_and_completions_are_counted() {
        let (mut s, now) = up(2, Policy::Failover, Failback::Immediate);
        let i = s.pick().unwrap();
        s.failed(i, "lost", now);
        s.done(i, false);
        assert_eq!(s.paths()[i].in_flight, 0);
        assert_eq!(s.paths()[i].commands, 0);
        let j = s.pick().unwrap();
        s.done(j, true);
        assert_eq!(s.paths()[j].commands, 1);
    }
}
