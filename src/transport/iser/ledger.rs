//! Which per-command memory registrations an iSER connection holds, and
//! when it may drop them: at the task's SCSI Response, or when task
//! management ends the task without one (ABORT TASK, a LUN-wide or a
//! target reset). Pure bookkeeping, host-tested; the connection keeps one
//! behind a mutex with its registrations as `R`.
//!
//! Without the task-management half, an aborted or reset command's
//! registration would stay until the connection ends (and its Initiator
//! Task Tag could be reused meanwhile). A registration is released only
//! once the target said the task is gone (the TMF Response arrives, on the
//! reliable connection, after every RDMA operation the target made for the
//! task), so the target never sees a key vanish under a transfer it still
//! makes. Buffers from the registered pool (see [`rlun_iscsi::iobuf`]) need no
//! entry here: their arena stays registered for the connection's life.

use std::collections::HashMap;

use rlun_iscsi::proto::pdu::tmf;

/// TMF Response codes that mean the referenced task(s) no longer exist at
/// the target (RFC 7143 §11.6.1): function complete, task does not exist.
const TMF_COMPLETE: u8 = 0;
const TMF_TASK_DOES_NOT_EXIST: u8 = 1;

#[derive(Debug, Clone, Copy)]
struct PendingTmf {
    function: u8,
    lun: [u8; 8],
    ref_itt: u32,
}

/// Registrations of in-flight commands, by Initiator Task Tag.
#[derive(Debug)]
pub struct Ledger<R> {
    regs: HashMap<u32, ([u8; 8], Vec<R>)>,
    tmfs: HashMap<u32, PendingTmf>,
}

impl<R> Default for Ledger<R> {
    fn default() -> Self {
        Ledger {
            regs: HashMap::new(),
            tmfs: HashMap::new(),
        }
    }
}

impl<R> Ledger<R> {
    /// Command `itt` on `lun` was sent with `regs`. Returns what an earlier
    /// command with the same tag still held (a bug upstream: tags are
    /// reused only after their task ended), for the caller to drop.
    pub fn insert(&mut self, itt: u32, lun: [u8; 8], regs: Vec<R>) -> Option<Vec<R>> {
        if regs.is_empty() {
            return self.regs.remove(&itt).map(|(_, r)| r);
        }
        self.regs.insert(itt, (lun, regs)).map(|(_, r)| r)
    }

    /// The SCSI Response of `itt` arrived: its registrations go.
    pub fn on_response(&mut self, itt: u32) -> Vec<R> {
        self.regs.remove(&itt).map(|(_, r)| r).unwrap_or_default()
    }

    /// A Task Management Function request `itt` was sent.
    pub fn on_tmf_request(&mut self, itt: u32, function: u8, lun: [u8; 8], ref_itt: u32) {
        self.tmfs.insert(
            itt,
            PendingTmf {
                function,
                lun,
                ref_itt,
            },
        );
    }

    /// The TMF Response to `itt` arrived with `response`: the registrations
    /// of every task it ended go.
    pub fn on_tmf_response(&mut self, itt: u32, response: u8) -> Vec<R> {
        let Some(t) = self.tmfs.remove(&itt) else {
            return Vec::new();
        };
        if response != TMF_COMPLETE && response != TMF_TASK_DOES_NOT_EXIST {
            return Vec::new();
        }
        match t.function {
            tmf::ABORT_TASK => self.on_response(t.ref_itt),
            tmf::ABORT_TASK_SET | tmf::CLEAR_TASK_SET | tmf::LOGICAL_UNIT_RESET
                if response == TMF_COMPLETE =>
            {
                self.take_where(|lun| *lun == t.lun)
            }
            tmf::TARGET_WARM_RESET | tmf::TARGET_COLD_RESET if response == TMF_COMPLETE => {
                self.take_where(|_| true)
            }
            _ => Vec::new(),
        }
    }

    fn take_where(&mut self, f: impl Fn(&[u8; 8]) -> bool) -> Vec<R> {
        let itts: Vec<u32> = self
            .regs
            .iter()
            .filter(|(_, (lun, _))| f(lun))
            .map(|(itt, _)| *itt)
            .collect();
        itts.into_iter()
            .flat_map(|i| self.regs.remove(&i).map(|(_, r)| r).unwrap_or_default())
            .collect()
    }

    /// Commands holding registrations.
    pub fn len(&self) -> usize {
        self.regs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LUN0: [u8; 8] = [0; 8];
    const LUN1: [u8; 8] = [0, 1, 0, 0, 0, 0, 0, 0];

    #[test]
    fn response_releases_the_commands_registrations() {
        let mut l = Ledger::default();
        assert!(l.insert(7, LUN0, vec!["read", "write"]).is_none());
        assert_eq!(l.on_response(7), vec!["read", "write"]);
        assert!(l.is_empty());
        assert!(l.on_response(7).is_empty(), "only once");
    }

    #[test]
    fn completed_abort_task_releases_the_aborted_commands_registrations() {
        let mut l = Ledger::default();
        l.insert(7, LUN0, vec!["aborted"]);
        l.insert(8, LUN0, vec!["other"]);
        l.on_tmf_request(20, tmf::ABORT_TASK, LUN0, 7);
        assert!(l.on_tmf_response(99, 0).is_empty(), "unknown TMF tag");
        assert_eq!(l.on_tmf_response(20, 0), vec!["aborted"]);
        assert_eq!(l.len(), 1, "the other command keeps its registration");
    }

    #[test]
    fn abort_of_a_task_the_target_does_not_know_releases_it_too() {
        let mut l = Ledger::default();
        l.insert(7, LUN0, vec!["r"]);
        l.on_tmf_request(20, tmf::ABORT_TASK, LUN0, 7);
        assert_eq!(l.on_tmf_response(20, 1), vec!["r"]);
    }

    #[test]
    fn rejected_abort_keeps_the_registration() {
        let mut l = Ledger::default();
        l.insert(7, LUN0, vec!["r"]);
        l.on_tmf_request(20, tmf::ABORT_TASK, LUN0, 7);
        // 5: function not supported; 255: function rejected.
        assert!(l.on_tmf_response(20, 255).is_empty());
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.on_response(7),
            vec!["r"],
            "the SCSI Response still releases it"
        );
    }

    #[test]
    fn lun_reset_releases_every_registration_on_that_lun_only() {
        let mut l = Ledger::default();
        l.insert(1, LUN0, vec![1]);
        l.insert(2, LUN1, vec![2]);
        l.insert(3, LUN0, vec![3]);
        l.on_tmf_request(9, tmf::LOGICAL_UNIT_RESET, LUN0, 0xffff_ffff);
        let mut got = l.on_tmf_response(9, 0);
        got.sort();
        assert_eq!(got, vec![1, 3]);
        assert_eq!(l.on_response(2), vec![2]);
    }

    #[test]
    fn target_reset_releases_everything() {
        let mut l = Ledger::default();
        l.insert(1, LUN0, vec![1]);
        l.insert(2, LUN1, vec![2]);
        l.on_tmf_request(9, tmf::TARGET_WARM_RESET, LUN0, 0xffff_ffff);
        assert_eq!(l.on_tmf_response(9, 0).len(), 2);
        assert!(l.is_empty());
    }

    #[test]
    fn a_reused_tag_hands_back_the_stale_registration() {
        let mut l = Ledger::default();
        l.insert(7, LUN0, vec!["old"]);
        assert_eq!(l.insert(7, LUN0, vec!["new"]), Some(vec!["old"]));
        assert_eq!(l.on_response(7), vec!["new"]);
    }
}
