//! [`StartedRead`]: a READ sent the moment it is asked for, without a
//! future, and polled for its answer with [`Lun::poll_read`].
//!
//! [`Lun::read`] is an `async fn` that builds the command, sends it and
//! waits inside the future its caller boxes: every layer between a front
//! end's request and the session (device, export, client, route) adds its
//! own state to that future and copies its arguments into it. A front end
//! answering many small requests (the NBD server, the FUSE adapter) instead
//! asks the device for the read synchronously
//! ([`crate::device::LunDevice::read_now`]), which sends it here at once;
//! the front end's future then only polls for the answer. The answer goes
//! through the same policy as [`Lun::execute`]'s: GOOD is the data, a
//! short transfer an error, and a condition the retry policy would send
//! again (UNIT ATTENTION at once, BUSY… after its pause) is handed back to
//! be run in full through [`Lun::read`] — rare, and it keeps that policy
//! in one place.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use rlun_iscsi::proto::connection::{CommandRequest, CommandResult};
use rlun_iscsi::proto::pdu::TaskAttr;
use rlun_iscsi::scsi::cdb;
use rlun_iscsi::scsi::{ScsiError, Status};
use tracing::{debug, warn};

use super::{note_target_change, retry, ClientError, Lun, Retry};
use crate::multipath::Route;
use crate::session::{PendingCommand, SessionError};

/// A READ [`Lun::start_read`] sent (or left to be run in full). Dropping
/// it leaves the command running harmlessly; its answer is discarded.
#[derive(Debug)]
pub struct StartedRead {
    state: State,
}

#[derive(Debug)]
enum State {
    /// On its way, with the name of its CDB and its blocks.
    Sent(PendingCommand, &'static str, u32),
    /// The retry policy's pause before the read is run again.
    Pausing(Pin<Box<tokio::time::Sleep>>),
    /// To be run in full ([`Lun::read`]).
    Again,
}

impl Lun {
    /// Send a READ of `blocks` blocks at `lba` now; [`Lun::poll_read`]
    /// gets its answer. Not sent, but handed back at once to be run in
    /// full by [`Lun::read`] (with its errors and retries): a read out of
    /// range, on a fenced LUN, or on a LUN with several paths (whose
    /// router picks a path and waits for one).
    pub fn start_read(&self, lba: u64, blocks: u32) -> StartedRead {
        let again = StartedRead {
            state: State::Again,
        };
        let Route::One(session) = &self.route else {
            return again;
        };
        if self.fenced().is_err() || self.check_range(lba, blocks as u64).is_err() {
            return again;
        }
        let Ok(c) = cdb::read(lba, blocks, self.block_size) else {
            return again;
        };
        let req = CommandRequest {
            lun: self.raw,
            cdb: c.padded(),
            data_out: Bytes::new(),
            read_len: c.expected_transfer_len(),
            attr: TaskAttr::Simple,
        };
        StartedRead {
            state: State::Sent(session.submit(req), c.name(), blocks),
        }
    }

    /// The answer to a read [`Lun::start_read`] started: `Some` with its
    /// data (exactly its blocks) or its error as [`Lun::read`] would have
    /// returned them; `None` when it must be run again with [`Lun::read`]
    /// (not sent, or a condition the retry policy sends again, after its
    /// pause).
    pub fn poll_read(
        &self,
        started: &mut StartedRead,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, ClientError>>> {
        loop {
            match &mut started.state {
                State::Again => return Poll::Ready(None),
                State::Pausing(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    started.state = State::Again;
                }
                State::Sent(pending, op, blocks) => {
                    let answer = ready!(pending.poll_answer(cx));
                    let (op, blocks) = (*op, *blocks);
                    let expected = blocks as usize * self.block_size as usize;
                    let note = |e: &ScsiError| note_target_change(self.route.primary(), e);
                    match judge_read(answer, op, expected, note) {
                        Judged::Done(r) => {
                            started.state = State::Again;
                            return Poll::Ready(Some(r));
                        }
                        Judged::Again => started.state = State::Again,
                        Judged::After(wait) => {
                            started.state = State::Pausing(Box::pin(tokio::time::sleep(wait)))
                        }
                    }
                }
            }
        }
    }
}

/// What [`execute`](super::execute) would do with the first answer to a
/// READ (`op`) of `expected` bytes; `note` sees a SCSI error first (for
/// the target changes it announces).
fn judge_read(
    answer: Result<CommandResult, SessionError>,
    op: &'static str,
    expected: usize,
    note: impl FnOnce(&ScsiError),
) -> Judged {
    let r = match answer {
        Ok(r) => r,
        Err(e) => return Judged::Done(Err(e.into())),
    };
    let status = Status::from(r.status);
    if !status.is_success() {
        let err = ScsiError::from_status_and_sense_bytes(status, r.sense.as_deref().unwrap_or(&[]));
        note(&err);
        let (mut unit_attentions, mut busy) = (0, 0);
        return match retry(&err, &mut unit_attentions, &mut busy) {
            Retry::No => Judged::Done(Err(ClientError::Scsi { op, source: err })),
            Retry::Now => {
                debug!(op, error = %err, "UNIT ATTENTION; retrying");
                Judged::Again
            }
            Retry::After(wait) => {
                warn!(op, error = %err, ?wait, "transient condition; retrying");
                Judged::After(wait)
            }
        };
    }
    if r.data.len() != expected {
        return Judged::Done(Err(ClientError::ShortTransfer {
            op,
            got: r.data.len(),
            expected,
        }));
    }
    Judged::Done(Ok(r.data))
}

/// [`judge_read`]'s verdict.
#[derive(Debug)]
enum Judged {
    Done(Result<Bytes, ClientError>),
    /// Run it again at once.
    Again,
    /// Run it again after this pause.
    After(std::time::Duration),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(
        status: u8,
        sense: Option<Vec<u8>>,
        data: &[u8],
    ) -> Result<CommandResult, SessionError> {
        Ok(CommandResult {
            status,
            sense: sense.map(Into::into),
            data: Bytes::copy_from_slice(data),
            residual: Default::default(),
        })
    }

    /// Fixed-format sense data (the client's tests' own).
    fn sense(key: u8, asc: u8, ascq: u8) -> Option<Vec<u8>> {
        Some(crate::client::tests::sense(key, asc, ascq))
    }

    fn judge(a: Result<CommandResult, SessionError>, expected: usize) -> (Judged, usize) {
        let mut noted = 0;
        let j = judge_read(a, "READ(10)", expected, |_| noted += 1);
        (j, noted)
    }

    #[test]
    fn a_started_read_is_judged_as_execute_judges_a_first_answer() {
        // GOOD with its blocks: the data.
        match judge(answer(0, None, &[7; 1024]), 1024) {
            (Judged::Done(Ok(d)), 0) => assert_eq!(&d[..], &[7; 1024][..]),
            other => panic!("{other:?}"),
        }
        // GOOD but short: an error, not the data.
        assert!(matches!(
            judge(answer(0, None, &[7; 512]), 1024),
            (
                Judged::Done(Err(ClientError::ShortTransfer {
                    got: 512,
                    expected: 1024,
                    ..
                })),
                0
            )
        ));
        // A UNIT ATTENTION (capacity changed): noted, and run again at once.
        assert!(matches!(
            judge(answer(2, sense(0x6, 0x2a, 0x09), &[]), 1024),
            (Judged::Again, 1)
        ));
        // BUSY: run again after the policy's first pause.
        match judge(answer(8, None, &[]), 1024) {
            (Judged::After(d), 1) => assert_eq!(d, Duration::from_millis(20)),
            other => panic!("{other:?}"),
        }
        // A medium error: the command's result, with its CDB's name.
        match judge(answer(2, sense(0x3, 0x11, 0x00), &[]), 1024) {
            (Judged::Done(Err(ClientError::Scsi { op, .. })), 1) => assert_eq!(op, "READ(10)"),
            other => panic!("{other:?}"),
        }
        // The session gave the command up: its error, nothing to note.
        assert!(matches!(
            judge(Err(SessionError::Closed), 1024),
            (Judged::Done(Err(ClientError::Session(_))), 0)
        ));
    }
}
