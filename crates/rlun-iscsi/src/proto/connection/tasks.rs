//! The tasks of one connection: every request on the wire by its
//! Initiator Task Tag (RFC 7143 §11.2.1.8) — a SCSI command with its
//! buffers, a text exchange, a task management request, a NOP-Out ping or
//! a logout — in a direct-mapped table, and the requests still waiting for
//! the command window (§4.2.2.1).

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::api::{CommandRequest, TaskHold, TaskId};
use crate::iobuf::IoBuf;
use crate::proto::idmap::SlotTable;
use crate::proto::pdu::Residual;

/// What a task on the wire is, and what it keeps until it ends.
#[derive(Debug)]
pub(super) enum TaskKind {
    Command(CommandTask),
    Text {
        received: BytesMut,
        /// Text Responses received so far for this exchange.
        responses: u32,
    },
    TaskMgmt {
        function: u8,
        lun: [u8; 8],
        ref_itt: u32,
    },
    Ping {
        sent: Instant,
    },
    Logout,
}

/// A SCSI command on the wire: its buffers and how far its data got.
#[derive(Debug)]
pub(super) struct CommandTask {
    /// What the transport keeps for this task ([`TaskHold`]). The first
    /// field, so it is dropped before the buffers it may name.
    pub(super) hold: Option<TaskHold>,
    pub(super) lun: [u8; 8],
    /// The caller's write data, held (shared, not copied) until the final
    /// response: in-band it feeds the Data-Out for each R2T, direct the
    /// target reads it by RDMA.
    pub(super) data_out: Bytes,
    pub(super) read_len: u32,
    /// The read destination, owned by the task until its final response
    /// and then handed to the caller in [`CommandResult::data`]. In-band
    /// the receive path reads each Data-In payload straight into it
    /// ([`Lent`]); direct it is `read_len` long from submission on, and
    /// the transport has its address ([`ReadRegion`]).
    ///
    /// [`CommandResult::data`]: crate::proto::connection::CommandResult::data
    /// [`Lent`]: crate::proto::connection::Lent
    /// [`ReadRegion`]: crate::proto::connection::ReadRegion
    pub(super) read_buf: ReadBuf,
    pub(super) received: u32,
    pub(super) next_data_sn: u32,
    /// Status delivered in the final Data-In (S bit).
    pub(super) status_from_data_in: Option<(u8, Residual)>,
    /// The data moves directly: no Data-In and no R2T may name this task.
    pub(super) direct: bool,
    /// The in-band read buffer is lent to the receive path ([`Lent`]),
    /// which is reading one Data-In payload straight into it.
    ///
    /// [`Lent`]: crate::proto::connection::Lent
    pub(super) lent: bool,
}

/// Where a command's read data goes: in-band a buffer of the read length,
/// taken from a pool when the first Data-In arrives
/// ([`crate::iobuf::read_pool`]; empty until then), that the receive path
/// reads each payload straight into ([`Connection::lend_read_buffer`]), or a
/// PDU's data segment is copied into ([`Connection::handle_pdu`]); direct a
/// fixed-address buffer (from the registered pool when the transport
/// enabled it, see [`crate::iobuf`]) that the target writes by RDMA.
///
/// A pooled in-band buffer is not zeroed: it holds whatever an earlier
/// buffer left. That is safe because Data-In fills it strictly in order
/// from offset 0 (see `check_data_in` in `inband.rs`) and the caller gets exactly the
/// `received` bytes, never more, whatever the residual says: a short
/// Data-In sequence yields a short result (which a client reports
/// as a short transfer), never bytes the target did not send.
///
/// [`Connection::lend_read_buffer`]: crate::proto::connection::Connection::lend_read_buffer
/// [`Connection::handle_pdu`]: crate::proto::connection::Connection::handle_pdu
#[derive(Debug)]
pub(super) enum ReadBuf {
    InBand(IoBuf),
    Direct(IoBuf),
}

impl ReadBuf {
    pub(super) fn into_bytes(self, len: usize) -> Bytes {
        match self {
            ReadBuf::InBand(mut b) | ReadBuf::Direct(mut b) => {
                b.truncate(len);
                b.into_bytes()
            }
        }
    }
}

impl TaskKind {
    pub(super) fn command(&mut self) -> Option<&mut CommandTask> {
        match self {
            TaskKind::Command(c) => Some(c),
            _ => None,
        }
    }

    pub(super) fn text(&mut self) -> Option<(&mut BytesMut, &mut u32)> {
        match self {
            TaskKind::Text {
                received,
                responses,
            } => Some((received, responses)),
            _ => None,
        }
    }

    pub(super) fn ping(&mut self) -> Option<Instant> {
        match self {
            TaskKind::Ping { sent } => Some(*sent),
            _ => None,
        }
    }

    pub(super) fn task_mgmt(&mut self) -> Option<()> {
        matches!(self, TaskKind::TaskMgmt { .. }).then_some(())
    }

    pub(super) fn logout(&mut self) -> Option<()> {
        matches!(self, TaskKind::Logout).then_some(())
    }
}

/// A task on the wire: the caller's id for it, its tag and CmdSN.
#[derive(Debug)]
pub(super) struct Task {
    pub(super) id: TaskId,
    pub(super) itt: u32,
    pub(super) cmd_sn: u32,
    pub(super) kind: TaskKind,
}

/// The tasks on the wire, by Initiator Task Tag: a direct-mapped table
/// (task `itt` lives in slot `itt % len`), so finding the task a PDU names
/// is an index and a compare, and a command costs no hashing or
/// allocation. ITTs still count up and come round only after 2^32 tasks,
/// so a late answer for a finished task names an ITT that is in no slot
/// (the slot holds a newer task with another ITT, or nothing) and is
/// rejected, never delivered to the newer task. `Connection::alloc_itt`
/// skips an ITT whose slot is taken (by a long-lived task) and the table
/// doubles before it is half full.
#[derive(Debug, Default)]
pub(super) struct TaskTable(SlotTable<Task>);

impl TaskTable {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// True when a task with `itt` could be inserted now (its slot is
    /// free); makes room first when the table is half full.
    pub(super) fn is_free(&mut self, itt: u32) -> bool {
        self.0.is_free(itt.into())
    }

    pub(super) fn contains_key(&self, itt: &u32) -> bool {
        self.get(itt).is_some()
    }

    pub(super) fn get(&self, itt: &u32) -> Option<&Task> {
        self.0.get((*itt).into())
    }

    pub(super) fn get_mut(&mut self, itt: &u32) -> Option<&mut Task> {
        self.0.get_mut((*itt).into())
    }

    /// Insert a task whose slot [`TaskTable::is_free`] found free.
    pub(super) fn insert(&mut self, task: Task) {
        debug_assert!(self.get(&task.itt).is_none(), "ITT in use");
        self.0.insert(task.itt.into(), task);
    }

    pub(super) fn remove(&mut self, itt: &u32) -> Option<Task> {
        self.0.remove((*itt).into())
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Task> {
        self.0.values()
    }

    pub(super) fn itts(&self) -> impl Iterator<Item = u32> + '_ {
        self.values().map(|t| t.itt)
    }

    pub(super) fn find_id(&self, id: TaskId) -> Option<u32> {
        self.values().find(|t| t.id == id).map(|t| t.itt)
    }
}

/// A request waiting for the command window (or queue depth) to open.
#[derive(Debug)]
pub(super) enum Queued {
    Command(TaskId, CommandRequest),
    Text(TaskId, Bytes),
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proto::connection::*;
    use crate::proto::pdu::*;
    use std::time::Instant;

    /// Submit a read, answer it GOOD, and return its ITT; `sn` is the
    /// StatSN the answer carries (bumped).
    fn run_one(s: &mut Connection, sn: &mut u32) -> u32 {
        let id = s.submit(read(0));
        let itt = itt_of(&drain(s)[0]);
        s.handle_pdu(response(itt, *sn, *sn + 1, *sn + 1000, 0), Instant::now())
            .unwrap();
        *sn += 1;
        match s.poll_event() {
            Some(Event::Command {
                id: got,
                result: Ok(r),
            }) if got == id => assert_eq!(r.status, 0),
            other => panic!("expected the command's GOOD, got {other:?}"),
        }
        itt
    }

    #[test]
    fn late_answer_for_a_finished_itt_is_rejected_not_given_to_the_task_in_its_slot() {
        let mut s = connection(params(), 10_000);
        let mut sn = 1;
        let old = run_one(&mut s, &mut sn);
        // Walk the ITTs round the table until a new command sits in the
        // slot the finished one used (ITTs count up; the table is a power
        // of two long, so one lap later lands on the same slot).
        let mut newer = None;
        for _ in 0..4096 {
            let id = s.submit(read(0));
            let itt = itt_of(&drain(&mut s)[0]);
            if itt & 63 == old & 63 {
                newer = Some((id, itt));
                break;
            }
            s.handle_pdu(response(itt, sn, sn + 1, sn + 1000, 0), Instant::now())
                .unwrap();
            sn += 1;
            assert!(
                matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
            );
        }
        let (id, itt) = newer.expect("an ITT in the finished command's slot");
        assert_ne!(itt, old, "ITTs are not reused");
        // The target answers the old ITT again: a protocol error naming it,
        // and the command now in that slot is untouched.
        let err = s
            .handle_pdu(response(old, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnknownTask {
                what: "SCSI Response",
                itt: old
            }
        );
        assert!(
            s.poll_event().is_none(),
            "nothing delivered for a stale ITT"
        );
        assert_eq!(s.outstanding(), 1);
        s.handle_pdu(response(itt, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
        );
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn long_lived_task_keeps_its_slot_while_thousands_of_commands_pass_it() {
        let p = FeatureParams {
            queue_depth: 1024,
            ..params()
        };
        let mut s = connection(p, 100_000);
        let mut sn = 1;
        let long = s.submit(read(0));
        let long_itt = itt_of(&drain(&mut s)[0]);
        // Many commands in flight at once, so the table has to grow around
        // the long-lived task, then many one at a time past its slot.
        let ids: Vec<TaskId> = (0..300).map(|_| s.submit(read(0))).collect();
        let itts: Vec<u32> = drain(&mut s).iter().map(itt_of).collect();
        assert_eq!(itts.len(), 300);
        assert!(!itts.contains(&long_itt));
        for (id, itt) in ids.iter().zip(&itts).rev() {
            s.handle_pdu(response(*itt, sn, sn + 1, sn + 1000, 0), Instant::now())
                .unwrap();
            sn += 1;
            assert!(
                matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == *id)
            );
        }
        for _ in 0..3000 {
            assert_ne!(run_one(&mut s, &mut sn), long_itt);
        }
        assert_eq!(s.outstanding(), 1, "only the long-lived task is left");
        // ABORT TASK still finds it (by its TaskId) and names its ITT.
        s.abort_task(long);
        let tmf = drain(&mut s);
        match &tmf[0].bhs {
            Bhs::TaskMgmtRequest(t) => assert_eq!(t.referenced_task_tag, long_itt),
            other => panic!("expected ABORT TASK, got {other:?}"),
        }
        s.handle_pdu(response(long_itt, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap();
        assert!(matches!(s.poll_event(), Some(Event::Command { id, result: Ok(_) }) if id == long));
    }
}
