//! [`LunQueue`]: many reads and writes of one LUN in flight from one
//! task, completed in batches.

use bytes::Bytes;
use rlun_iscsi::proto::connection::{CommandRequest, CommandResult};
use rlun_iscsi::proto::pdu::TaskAttr;
use rlun_iscsi::scsi::alua::AluaSense;
use rlun_iscsi::scsi::cdb;
use rlun_iscsi::scsi::{ScsiError, Status};

use super::{note_target_change, write_cdbs, ClientError, Lun};
use crate::session::{CommandQueue, Completion, SessionError};

/// Reads and writes of one LUN kept in flight by one task: each is
/// submitted with a tag of the caller's, and [`LunQueue::completions`]
/// hands out every one that finished in a driver turn at once, with one
/// wake-up of the task per turn (a [`CommandQueue`] underneath). Results
/// are those of [`Lun::read`] and [`Lun::write`] (without FUA): a read
/// returns exactly its blocks, a short transfer is an error. A command the
/// retry policy of [`Lun::execute`] would retry (UNIT ATTENTION, BUSY…) is
/// run again through it, awaited inside `completions`: rare, and it keeps
/// the policy in one place.
pub struct LunQueue {
    lun: Lun,
    /// On the primary session; every path's commands complete into it.
    q: CommandQueue,
    /// With several paths, a queue per other path (made when first used),
    /// completing into `q`.
    beside: Vec<Option<CommandQueue>>,
    /// Commands in flight, by the queue's own tag (an index here).
    ops: Vec<Option<QueuedOp>>,
    free: Vec<u64>,
    batch: Vec<Completion>,
}

struct QueuedOp {
    tag: u64,
    /// The path it went on, with several.
    path: Option<usize>,
    lba: u64,
    kind: QueuedKind,
}

enum QueuedKind {
    Read { blocks: u32 },
    Write { data: Bytes },
}

impl LunQueue {
    /// A queue on the session `lun`'s commands go through (with several
    /// paths: the first that logged in).
    pub(super) fn new(lun: Lun) -> LunQueue {
        let q = lun.session().queue();
        let paths = lun.route.router().map_or(0, |r| r.set().paths().len());
        LunQueue {
            lun,
            q,
            beside: (0..paths).map(|_| None).collect(),
            ops: Vec::new(),
            free: Vec::new(),
            batch: Vec::new(),
        }
    }

    /// Commands submitted and not yet handed out.
    pub fn in_flight(&self) -> usize {
        self.ops.len() - self.free.len()
    }

    /// Queue one command of this LUN (simple task attribute) for `op`.
    fn submit(&mut self, cdb: [u8; 16], data_out: Bytes, read_len: u32, mut op: QueuedOp) {
        let req = CommandRequest {
            lun: self.lun.raw,
            cdb,
            data_out,
            read_len,
            attr: TaskAttr::Simple,
        };
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.ops.push(None);
                self.ops.len() as u64 - 1
            }
        };
        // With several paths: the one the policy picks (none usable:
        // the primary, whose failure sends the command through the
        // router, which waits for a path).
        let picked = self.lun.route.router().and_then(|r| {
            let (i, session) = r.take_path()?;
            Some((i, session, r.set().primary_index()))
        });
        match picked {
            Some((i, _, primary)) if i == primary => {
                op.path = Some(i);
                self.q.submit(req, slot);
            }
            Some((i, session, _)) => {
                op.path = Some(i);
                let q = self.beside[i].get_or_insert_with(|| session.queue_beside(&self.q));
                q.submit(req, slot);
            }
            None => self.q.submit(req, slot),
        }
        self.ops[slot as usize] = Some(op);
    }

    /// READ `blocks` blocks at `lba`; completes with `tag` and the data.
    pub fn read(&mut self, lba: u64, blocks: u32, tag: u64) -> Result<(), ClientError> {
        self.lun.check_range(lba, blocks as u64)?;
        let c = cdb::read(lba, blocks, self.lun.block_size)?;
        let read_len = c.expected_transfer_len();
        let op = QueuedOp {
            tag,
            path: None,
            lba,
            kind: QueuedKind::Read { blocks },
        };
        self.submit(c.padded(), Bytes::new(), read_len, op);
        Ok(())
    }

    /// WRITE `data` (whole blocks) at `lba`, without FUA; completes with
    /// `tag` and no data.
    pub fn write(&mut self, lba: u64, data: Bytes, tag: u64) -> Result<(), ClientError> {
        if self.lun.write_protected {
            return Err(ClientError::ReadOnly(self.lun.number));
        }
        let bs = self.lun.block_size as usize;
        debug_assert!(data.len().is_multiple_of(bs), "write of partial blocks");
        let blocks = (data.len() / bs) as u32;
        self.lun.check_range(lba, blocks as u64)?;
        let (c, _) = write_cdbs(lba, blocks, self.lun.block_size, false, self.lun.dpofua)?;
        let data_out = data.clone();
        let op = QueuedOp {
            tag,
            path: None,
            lba,
            kind: QueuedKind::Write { data },
        };
        self.submit(c.padded(), data_out, 0, op);
        Ok(())
    }

    /// Wait until at least one command has finished, then append every
    /// finished one to `out` as (tag, result): read data, or empty for a
    /// write. Returns at once, appending nothing, when nothing is in flight.
    pub async fn completions(&mut self, out: &mut Vec<(u64, Result<Bytes, ClientError>)>) {
        if self.in_flight() == 0 {
            return;
        }
        for q in self.beside.iter_mut().flatten() {
            q.flush();
        }
        self.q.completions(&mut self.batch).await;
        let mut batch = std::mem::take(&mut self.batch);
        for (slot, result) in batch.drain(..) {
            let Some(op) = self.ops.get_mut(slot as usize).and_then(Option::take) else {
                continue;
            };
            self.free.push(slot);
            let r = self.finish(&op, result).await;
            out.push((op.tag, r));
        }
        self.batch = batch;
    }

    /// `op` once more through [`Lun::read`] or [`Lun::write`]: under the
    /// retry policy of `execute`, and through whichever path is best.
    async fn again(&self, op: &QueuedOp) -> Result<Bytes, ClientError> {
        match &op.kind {
            QueuedKind::Read { blocks } => self.lun.read(op.lba, *blocks).await,
            QueuedKind::Write { data } => self
                .lun
                .write(op.lba, data.clone(), false)
                .await
                .map(|()| Bytes::new()),
        }
    }

    /// The result of a finished command, as [`Lun::read`] or
    /// [`Lun::write`] would have returned it.
    async fn finish(
        &self,
        op: &QueuedOp,
        result: Result<CommandResult, SessionError>,
    ) -> Result<Bytes, ClientError> {
        if let (Some(i), Some(router)) = (op.path, self.lun.route.router()) {
            router.finished(i, result.as_ref().map(|_| ()));
        }
        let r = match result {
            Ok(r) => r,
            // Several paths: the session of the path it took gave the
            // command up; the route sends it through another.
            Err(_) if self.lun.route.router().is_some() => return self.again(op).await,
            Err(e) => return Err(e.into()),
        };
        let status = Status::from(r.status);
        if !status.is_success() {
            let err =
                ScsiError::from_status_and_sense_bytes(status, r.sense.as_deref().unwrap_or(&[]));
            note_target_change(self.lun.session(), &err);
            if err.is_unit_attention()
                || err.is_retryable()
                || (self.lun.route.router().is_some() && AluaSense::of(&err).is_some())
            {
                return self.again(op).await;
            }
            return Err(match &op.kind {
                QueuedKind::Write { .. } if err.is_write_protected() => {
                    ClientError::ReadOnly(self.lun.number)
                }
                QueuedKind::Write { .. } => ClientError::Scsi {
                    op: "WRITE",
                    source: err,
                },
                QueuedKind::Read { .. } => ClientError::Scsi {
                    op: "READ",
                    source: err,
                },
            });
        }
        match &op.kind {
            QueuedKind::Read { blocks } => {
                let expected = *blocks as usize * self.lun.block_size as usize;
                if r.data.len() != expected {
                    return Err(ClientError::ShortTransfer {
                        op: "READ",
                        got: r.data.len(),
                        expected,
                    });
                }
                Ok(r.data)
            }
            QueuedKind::Write { .. } => Ok(Bytes::new()),
        }
    }
}
