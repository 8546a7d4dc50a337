//! Send-slot accounting with selective signalling. Pure bookkeeping,
//! host-tested; each [`super::SendQueue`] keeps one, and it is what decides
//! when a send slot is lent to the device and when it is back.
//!
//! Every Send uses one registered send slot (iSER header, BHS, data copied
//! or named in place) and one send-queue entry, and both stay busy until the
//! device is done with the work request. Only some Sends are *signalled*
//! (they produce a work completion): on a reliable-connected queue pair the
//! send queue completes in order, so a signalled completion means every Send
//! posted before it is done as well, and their slots are free again. Fewer
//! completions means less work for the device (on soft-RoCE, for the
//! kernel) and fewer to poll.
//!
//! The rule for which Sends are signalled keeps two promises:
//! - at most [`SendSlots::every`] Sends in a row go unsignalled, so the send
//!   queue never fills with Sends nothing will ever complete;
//! - once fewer than `every` slots are free, every Send is signalled, so a
//!   writer that finds no free slot always has a signalled Send outstanding
//!   whose completion will free at least one slot (it never waits forever).

use std::collections::VecDeque;

/// Free and posted send slots, in posting order.
#[derive(Debug)]
pub struct SendSlots {
    /// Slots ready for a new Send (last in, first out).
    free: Vec<usize>,
    /// Posted Sends not yet known to be complete, oldest first.
    posted: VecDeque<usize>,
    /// How many slots exist.
    slots: usize,
    /// Unsignalled Sends posted since the last signalled one.
    since_signal: usize,
    /// Whether each slot's posted Send is signalled (indexed by slot).
    signalled: Vec<bool>,
    every: usize,
}

impl SendSlots {
    /// `slots` slots (and send-queue entries); at most `every` Sends in a
    /// row unsignalled (`every` >= 1; 1 signals every Send).
    pub fn new(slots: usize, every: usize) -> SendSlots {
        assert!(slots > 0 && every > 0 && every <= slots);
        SendSlots {
            free: (0..slots).rev().collect(),
            posted: VecDeque::with_capacity(slots),
            slots,
            since_signal: 0,
            signalled: vec![false; slots],
            every,
        }
    }

    /// The longest run of unsignalled Sends.
    pub fn every(&self) -> usize {
        self.every
    }

    /// How many slots are free.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Whether a signalled Send is outstanding (whose completion will free
    /// at least one slot).
    pub fn signal_outstanding(&self) -> bool {
        self.posted.iter().any(|&s| self.signalled[s])
    }

    /// Take a free slot for a Send about to be posted, and say whether that
    /// Send must be signalled. The Send counts as posted from now on; if
    /// posting it fails, give the slot back with [`SendSlots::unpost`].
    pub fn take(&mut self) -> Option<(usize, bool)> {
        let slot = self.free.pop()?;
        let signal = self.since_signal + 1 >= self.every || self.free.len() < self.every;
        if signal {
            self.since_signal = 0;
        } else {
            self.since_signal += 1;
        }
        self.signalled[slot] = signal;
        self.posted.push_back(slot);
        Some((slot, signal))
    }

    /// The newest `n` taken slots were never posted (the post failed):
    /// return them, newest first given back last. Returns the slots.
    pub fn unpost(&mut self, n: usize) -> Vec<usize> {
        let mut back = Vec::with_capacity(n);
        self.unpost_with(n, |s| back.push(s));
        back
    }

    /// [`SendSlots::unpost`], calling `freed` with each slot given back
    /// instead of collecting them.
    pub fn unpost_with(&mut self, n: usize, mut freed: impl FnMut(usize)) {
        for _ in 0..n {
            if let Some(s) = self.posted.pop_back() {
                self.signalled[s] = false;
                self.free.push(s);
                freed(s);
            }
        }
        // The run of unsignalled Sends is unknown now; count conservatively
        // so the next Send is signalled.
        self.since_signal = self.every;
    }

    /// A work completion for the Send in `slot` (signalled, or any Send
    /// flushed in error): it and every Send posted before it are done.
    /// Returns the slots freed, oldest first (empty when `slot` is not
    /// outstanding, e.g. a duplicate).
    pub fn complete(&mut self, slot: usize) -> Vec<usize> {
        let mut done = Vec::new();
        self.complete_with(slot, |s| done.push(s));
        done
    }

    /// [`SendSlots::complete`], calling `freed` with each slot freed
    /// (oldest first) instead of collecting them: no allocation per
    /// completion.
    pub fn complete_with(&mut self, slot: usize, mut freed: impl FnMut(usize)) {
        if slot >= self.slots || !self.posted.contains(&slot) {
            return;
        }
        while let Some(s) = self.posted.pop_front() {
            self.signalled[s] = false;
            self.free.push(s);
            freed(s);
            if s == slot {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Post `n` Sends; returns (slot, signalled) of each.
    fn post(s: &mut SendSlots, n: usize) -> Vec<(usize, bool)> {
        (0..n).map(|_| s.take().expect("a free slot")).collect()
    }

    #[test]
    fn at_most_every_unsignalled_in_a_row() {
        let mut s = SendSlots::new(32, 8);
        let mut run = 0;
        for _ in 0..1000 {
            let (slot, sig) = s.take().unwrap();
            if sig {
                run = 0;
                // The device completes it: everything before is free too.
                s.complete(slot);
            } else {
                run += 1;
            }
            assert!(run < 8, "more than 7 unsignalled Sends in a row");
        }
    }

    #[test]
    fn a_slot_is_reused_only_after_a_signalled_completion_covering_it() {
        let mut s = SendSlots::new(8, 4);
        let first = post(&mut s, 3);
        assert_eq!(first.iter().filter(|p| p.1).count(), 0, "{first:?}");
        // The 4th is signalled (run limit); nothing freed before its completion.
        let (fourth, sig) = s.take().unwrap();
        assert!(sig);
        assert_eq!(s.free(), 4);
        // A completion can only be for a signalled Send; the unsignalled
        // ones stay busy until it comes, then all four are free together.
        let freed = s.complete(fourth);
        assert_eq!(
            freed,
            first
                .iter()
                .map(|p| p.0)
                .chain([fourth])
                .collect::<Vec<_>>()
        );
        assert_eq!(s.free(), 8);
        assert!(!s.signal_outstanding());
    }

    #[test]
    fn below_every_free_slots_each_send_is_signalled_so_a_waiter_always_wakes() {
        let mut s = SendSlots::new(32, 8);
        let mut posted = Vec::new();
        while let Some(p) = s.take() {
            posted.push(p);
            // Whenever no slot is free, a signalled Send is outstanding.
            if s.free() == 0 {
                assert!(s.signal_outstanding());
            }
        }
        assert_eq!(posted.len(), 32);
        // The last 8 (taken with fewer than 8 free afterwards) are signalled.
        assert!(posted[24..].iter().all(|p| p.1), "{posted:?}");
        // Completing the oldest signalled one frees it and all before it.
        let oldest = posted.iter().find(|p| p.1).unwrap().0;
        let freed = s.complete(oldest);
        assert_eq!(freed.last(), Some(&oldest));
        assert_eq!(s.free(), freed.len());
        assert!(s.free() >= 1);
    }

    #[test]
    fn every_one_signals_every_send() {
        let mut s = SendSlots::new(4, 1);
        assert!(post(&mut s, 4).iter().all(|p| p.1));
    }

    #[test]
    fn unknown_or_duplicate_completions_free_nothing() {
        let mut s = SendSlots::new(4, 2);
        let p = post(&mut s, 2);
        assert!(s.complete(99).is_empty());
        assert_eq!(s.complete(p[1].0).len(), 2);
        assert!(s.complete(p[1].0).is_empty(), "already free");
        assert_eq!(s.free(), 4);
    }

    #[test]
    fn flushed_completions_of_unsignalled_sends_free_in_order() {
        // In the error state every Send completes (flushed), signalled or
        // not, in order: each frees itself (and nothing already freed).
        let mut s = SendSlots::new(8, 8);
        let p = post(&mut s, 5);
        for (slot, _) in &p {
            assert_eq!(s.complete(*slot), vec![*slot]);
        }
        assert_eq!(s.free(), 8);
    }

    #[test]
    fn a_failed_post_gives_its_slots_back_and_the_next_send_is_signalled() {
        let mut s = SendSlots::new(8, 4);
        post(&mut s, 1);
        let p = post(&mut s, 2);
        let back = s.unpost(2);
        assert_eq!(back.len(), 2);
        assert!(back.iter().all(|b| p.iter().any(|q| q.0 == *b)));
        assert_eq!(s.free(), 7);
        assert!(s.take().unwrap().1, "signalled after an unpost");
    }
}
