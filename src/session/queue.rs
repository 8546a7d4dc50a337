//! What travels between callers and the driver task: the [`Request`]s
//! handles send it, how a command's answer finds its way back
//! ([`CmdWaiter`]), and the completion queue for callers that keep many
//! commands in flight ([`CommandQueue`], whose commands carry a [`Ticket`]
//! and complete into a shared [`Completions`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rlun_iscsi::proto::connection::{CommandRequest, CommandResult, TmfOutcome};
use rlun_iscsi::proto::recovery::Released;
use tokio::sync::{mpsc, oneshot};

use super::error::SessionError;

/// A caller's request to the driver task.
pub(super) enum Request {
    /// Take the commands in the session's [`Inbox`].
    Inbox,
    /// A [`CommandQueue`]'s commands since its last flush; the emptied
    /// vector goes back to the queue for the next batch
    /// ([`Completions::recycle`]).
    Batch(Arc<Completions>, Vec<(CommandRequest, Ticket)>),
    Text(Bytes, oneshot::Sender<Result<Bytes, SessionError>>),
    Ping(oneshot::Sender<Result<Duration, SessionError>>),
    LunReset([u8; 8], oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
    /// Try the target now when the session is down; answered when a
    /// connection is live or the attempt failed
    /// ([`super::SessionHandle::reconnect`]).
    Reconnect(oneshot::Sender<Result<(), SessionError>>),
    /// Give the live connection up now, as if it had been lost (a path
    /// the multipath checker found dead): its commands wait for a new
    /// one, for at most the replacement timeout.
    Abandon(String),
    /// While the connection is down, give back the kept commands of a
    /// LUN for another path ([`super::SessionHandle::release`]).
    Release {
        lun: [u8; 8],
        all: bool,
        tx: oneshot::Sender<Released>,
    },
}

/// The commands [`super::SessionHandle::submit`] queued for the driver
/// and the driver has not taken yet. The one that finds it empty sends
/// the driver one [`Request::Inbox`]; those after it until the driver
/// takes them send nothing. Callers that each submit a command of their
/// own (the device layer under a front end's many requests) thereby reach
/// the driver in batches, as a [`CommandQueue`]'s commands do, without a
/// message each.
///
/// Order with the other requests is kept where it matters: a command is
/// in the inbox before the `Inbox` message that takes it is sent, so a
/// request sent after `submit` returns finds the command handled before
/// it (or with it).
#[derive(Default)]
pub(super) struct Inbox {
    state: std::sync::Mutex<InboxState>,
}

type InboxCommand = (
    CommandRequest,
    oneshot::Sender<Result<CommandResult, SessionError>>,
);

#[derive(Default)]
struct InboxState {
    commands: Vec<InboxCommand>,
    /// The vector the driver emptied last, for the next batch.
    spare: Vec<InboxCommand>,
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a command; true when the inbox was empty (the caller sends
    /// the driver [`Request::Inbox`]).
    pub(super) fn push(
        &self,
        req: CommandRequest,
        tx: oneshot::Sender<Result<CommandResult, SessionError>>,
    ) -> bool {
        let mut st = self.lock();
        let first = st.commands.is_empty();
        if first && st.commands.capacity() == 0 {
            st.commands = std::mem::take(&mut st.spare);
        }
        st.commands.push((req, tx));
        first
    }

    /// Take every queued command (the driver).
    pub(super) fn take(&self) -> Vec<InboxCommand> {
        std::mem::take(&mut self.lock().commands)
    }

    /// Give back the vector [`Inbox::take`] returned, emptied.
    pub(super) fn recycle(&self, v: Vec<InboxCommand>) {
        debug_assert!(v.is_empty());
        self.lock().spare = v;
    }

    /// Drop every queued command: their callers see
    /// [`SessionError::Closed`] (the driver is gone).
    pub(super) fn clear(&self) {
        let dropped = std::mem::take(&mut self.lock().commands);
        drop(dropped);
    }
}

/// How a command's answer reaches its caller. It travels inside the
/// recovery machine's record of the command
/// ([`rlun_iscsi::proto::recovery::Recovery::handle_command`]) and comes
/// back with its output: one record per command above the core, no map of
/// waiters beside it.
pub(super) enum CmdWaiter {
    /// One caller awaits this one command (`SessionHandle::submit`).
    One(oneshot::Sender<Result<CommandResult, SessionError>>),
    /// A [`CommandQueue`]'s command.
    Queue(Ticket),
}

impl std::fmt::Debug for CmdWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmdWaiter::One(_) => f.write_str("One"),
            CmdWaiter::Queue(t) => write!(f, "Queue({})", t.tag),
        }
    }
}

/// A command's answer as a [`CommandQueue`] hands it out: the caller's tag
/// and the result.
pub type Completion = (u64, Result<CommandResult, SessionError>);

/// Commands submitted through a queue complete into it, and the one task
/// that reads it is woken once per driver turn with every command that
/// finished in that turn — not once per command through a channel of its
/// own, as `SessionHandle::submit` does. For a caller that keeps many
/// commands in flight (`rlun bench`, the client layer's `LunQueue`) that
/// saves a channel allocation, a wake-up and a task switch per I/O.
///
/// Submissions are batched the same way: commands submitted go to the
/// session together, in one message, at the next
/// [`CommandQueue::completions`] or [`CommandQueue::flush`] (or when the
/// queue is dropped).
///
/// Every command submitted gets exactly one completion with its tag:
/// its answer, or [`SessionError::Closed`] when the session ended
/// without one. Dropping the queue with commands in flight leaves them
/// running harmlessly (their buffers stay with the session until the
/// target answers); their results are dropped.
pub struct CommandQueue {
    tx: mpsc::UnboundedSender<Request>,
    done: Arc<Completions>,
    /// Submitted, not yet handed to the session.
    pending: Vec<(CommandRequest, Ticket)>,
}

/// What a queue's commands completed into, shared by the queue and the
/// driver; the driver wakes the reader after its turn.
#[derive(Default)]
pub(super) struct Completions {
    state: std::sync::Mutex<CompletionState>,
}

#[derive(Default)]
struct CompletionState {
    done: Vec<Completion>,
    waker: Option<std::task::Waker>,
    /// A submission vector the driver emptied, for the next batch.
    spare: Vec<(CommandRequest, Ticket)>,
}

impl Completions {
    fn push(&self, c: Completion) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .done
            .push(c);
    }

    /// Wake the task reading the queue, if it waits.
    pub(super) fn wake(&self) {
        let waker = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waker
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Keep a submission vector the driver emptied for the queue's next
    /// batch.
    pub(super) fn recycle(&self, batch: Vec<(CommandRequest, Ticket)>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).spare = batch;
    }
}

/// A queue's command on its way: delivered exactly once, by the driver
/// with its answer ([`Ticket::complete`]) or, if it is dropped unanswered
/// (the session ended, the driver is gone), as [`SessionError::Closed`].
pub(super) struct Ticket {
    done: Arc<Completions>,
    tag: u64,
    delivered: bool,
}

impl Ticket {
    /// Deliver `result`; the caller wakes the queue's reader after the
    /// turn. Returns the queue for that.
    pub(super) fn complete(
        mut self,
        result: Result<CommandResult, SessionError>,
    ) -> Arc<Completions> {
        self.delivered = true;
        self.done.push((self.tag, result));
        self.done.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.delivered {
            self.done.push((self.tag, Err(SessionError::Closed)));
            self.done.wake();
        }
    }
}

impl CommandQueue {
    /// An empty queue whose batches go to the driver through `tx`.
    pub(super) fn new(tx: mpsc::UnboundedSender<Request>) -> CommandQueue {
        CommandQueue {
            tx,
            done: Arc::new(Completions::default()),
            pending: Vec::new(),
        }
    }

    /// A queue that sends its commands through `tx` (another session's
    /// driver) and completes them into this queue: one reader for the
    /// commands of several sessions (the paths of a multipath LUN).
    pub(super) fn sibling(&self, tx: mpsc::UnboundedSender<Request>) -> CommandQueue {
        CommandQueue {
            tx,
            done: self.done.clone(),
            pending: Vec::new(),
        }
    }

    /// Queue a SCSI command; its completion comes with `tag`. It goes to
    /// the session at the next [`CommandQueue::completions`] or
    /// [`CommandQueue::flush`].
    pub fn submit(&mut self, req: CommandRequest, tag: u64) {
        if self.pending.capacity() == 0 {
            // The vector the driver emptied last time, if it is back.
            self.pending = std::mem::take(
                &mut self
                    .done
                    .state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spare,
            );
        }
        let ticket = Ticket {
            done: self.done.clone(),
            tag,
            delivered: false,
        };
        self.pending.push((req, ticket));
    }

    /// Hand the commands submitted since the last flush to the session,
    /// in one message.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        // If the driver is gone the batch comes back here, dropped, and
        // its tickets complete the commands as Closed.
        let _ = self.tx.send(Request::Batch(self.done.clone(), batch));
    }

    /// Send what was submitted ([`CommandQueue::flush`]), wait until at
    /// least one command has completed, then move every completion there
    /// is into `out` (appended).
    pub async fn completions(&mut self, out: &mut Vec<Completion>) {
        self.flush();
        std::future::poll_fn(|cx| {
            let mut st = self.done.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.done.is_empty() {
                if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.waker = Some(cx.waker().clone());
                }
                return std::task::Poll::Pending;
            }
            if out.is_empty() {
                // Hand over the filled vector and keep the caller's empty
                // one (with its capacity) for the next batch.
                std::mem::swap(out, &mut st.done);
            } else {
                out.append(&mut st.done);
            }
            std::task::Poll::Ready(())
        })
        .await
    }
}

impl Drop for CommandQueue {
    /// Commands submitted but not yet sent still go (see the type's docs).
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rlun_iscsi::proto::pdu::{Residual, TaskAttr};

    use super::*;

    /// READ(10) of one block at `lba`.
    fn read_of(lba: u8) -> CommandRequest {
        let mut cdb = [0; 16];
        cdb[0] = 0x28;
        cdb[5] = lba;
        cdb[8] = 1;
        CommandRequest {
            lun: [0; 8],
            cdb,
            data_out: Bytes::new(),
            read_len: 512,
            attr: TaskAttr::Simple,
        }
    }

    fn good() -> CommandResult {
        CommandResult {
            status: 0,
            sense: None,
            data: Bytes::new(),
            residual: Residual::default(),
        }
    }

    #[test]
    fn the_inbox_asks_for_the_driver_once_per_batch_and_a_cleared_inbox_closes_its_commands() {
        let inbox = Inbox::default();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, _rx2) = oneshot::channel();
        assert!(
            inbox.push(read_of(1), tx1),
            "the first into an empty inbox calls"
        );
        assert!(!inbox.push(read_of(2), tx2), "the next ones do not");
        let mut batch = inbox.take();
        assert_eq!(
            batch.iter().map(|(c, _)| c.cdb[5]).collect::<Vec<_>>(),
            [1, 2]
        );
        // Taken: the next command calls again, and reuses the vector.
        let cap = batch.capacity();
        batch.clear();
        inbox.recycle(batch);
        let (tx3, mut rx3) = oneshot::channel();
        assert!(inbox.push(read_of(3), tx3));
        assert_eq!(inbox.lock().commands.capacity(), cap);
        // The driver gone: clearing drops the waiters, which see Closed.
        inbox.clear();
        assert!(rx3
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Closed));
        assert!(inbox.take().is_empty());
        // A command taken and dropped unanswered is closed too.
        assert!(rx1
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Closed));
    }

    /// The one message the queue sent, as the driver receives it.
    fn the_batch(
        rx: &mut mpsc::UnboundedReceiver<Request>,
    ) -> (Arc<Completions>, Vec<(CommandRequest, Ticket)>) {
        let Ok(Request::Batch(done, batch)) = rx.try_recv() else {
            panic!("expected a batch");
        };
        assert!(rx.try_recv().is_err(), "one message per flush");
        (done, batch)
    }

    #[tokio::test]
    async fn queued_commands_reach_the_driver_in_one_batch_and_wake_their_reader_once_answered() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut queue = CommandQueue::new(tx);
        queue.submit(read_of(1), 10);
        queue.submit(read_of(2), 20);
        assert!(rx.try_recv().is_err(), "nothing goes before a flush");
        queue.flush();
        let (done, mut batch) = the_batch(&mut rx);
        assert_eq!(batch.len(), 2);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            queue.completions(&mut out).await;
            out
        });
        tokio::task::yield_now().await;

        // The driver's turn: answer both, then wake the reader once.
        for (_, ticket) in batch.drain(..) {
            let q = ticket.complete(Ok(good()));
            assert!(Arc::ptr_eq(&q, &done));
        }
        done.recycle(batch);
        done.wake();

        let out = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("the reader is woken")
            .unwrap();
        let tags: Vec<u64> = out.iter().map(|(tag, _)| *tag).collect();
        assert_eq!(tags, [10, 20]);
        assert!(out
            .iter()
            .all(|(_, r)| r.as_ref().is_ok_and(|r| r.status == 0)));
    }

    #[test]
    fn the_next_batch_travels_in_the_vector_the_driver_emptied() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut queue = CommandQueue::new(tx);
        queue.submit(read_of(1), 1);
        queue.submit(read_of(2), 2);
        queue.flush();
        let (done, mut batch) = the_batch(&mut rx);
        let buffer = batch.as_ptr();
        for (_, ticket) in batch.drain(..) {
            ticket.complete(Ok(good()));
        }
        done.recycle(batch);

        queue.submit(read_of(3), 3);
        queue.flush();

        let (_, batch) = the_batch(&mut rx);
        assert_eq!(batch.as_ptr(), buffer, "no new allocation per batch");
        assert_eq!(batch.len(), 1);
    }

    #[tokio::test]
    async fn commands_left_unanswered_complete_as_closed() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut queue = CommandQueue::new(tx);
        queue.submit(read_of(1), 7);
        // The driver is gone: the batch comes back and is dropped.
        drop(rx);
        let mut out = Vec::new();

        tokio::time::timeout(Duration::from_secs(5), queue.completions(&mut out))
            .await
            .expect("a completion for the dropped command");

        assert!(
            matches!(out.as_slice(), [(7, Err(SessionError::Closed))]),
            "{out:?}"
        );
    }

    #[test]
    fn a_ticket_answered_is_not_completed_again_when_dropped() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut queue = CommandQueue::new(tx);
        queue.submit(read_of(1), 5);
        queue.flush();
        let (done, mut batch) = the_batch(&mut rx);
        let (_, ticket) = batch.pop().unwrap();

        ticket.complete(Ok(good()));

        let st = done.state.lock().unwrap();
        assert_eq!(st.done.len(), 1, "exactly one completion");
        assert!(st.done[0].1.is_ok());
    }
}
