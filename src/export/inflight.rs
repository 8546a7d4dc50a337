//! [`InFlight`]: the requests of one front-end connection (an NBD
//! connection, a FUSE mount) that wait (for the target, for the cache's
//! fill), run side by side in one task of the connection's, not in a task
//! each.
//!
//! A tokio task per request costs its spawn, its join and a trip through
//! the scheduler for every wake-up, and tokio copies a request's future
//! (about 2 KiB for a read through the device) into the task and again
//! when it finishes: about 1,100 user-space instructions per 4 KiB read of
//! `rlun serve`, 1,900 of `rlun mount` (`benches/instructions.sh`). Here a
//! request is a boxed future sent to the connection's one executor task,
//! which polls those woken (a `FuturesUnordered`) and takes new ones in the
//! same turn.
//!
//! Every request sent runs to completion, and [`InFlight::finish`] waits
//! for all of them. Requests of one connection share one task, so with
//! `--threads` above one they run on one worker at a time (connections
//! still spread over the workers); rlun's default runtime has one thread
//! anyway.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, Stream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// One request on its way: it sends its own reply.
pub type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor task of one connection and the way in to it. Dropped
/// without [`InFlight::finish`], it aborts the requests (as a dropped
/// `JoinSet` would: the NBD connection's future itself was dropped) or,
/// when started with [`InFlight::detached`], lets them finish on their own
/// (a FUSE mount's requests, whose replies the kernel still waits for).
pub struct InFlight {
    tx: Option<mpsc::UnboundedSender<Job>>,
    task: Option<JoinHandle<()>>,
    abort_on_drop: bool,
}

impl InFlight {
    /// On the current runtime; requests are aborted when it is dropped.
    pub fn start() -> InFlight {
        let (tx, rx) = mpsc::unbounded_channel();
        InFlight {
            tx: Some(tx),
            task: Some(tokio::spawn(run(rx))),
            abort_on_drop: true,
        }
    }

    /// On `rt` (from a thread outside it); when this is dropped the
    /// requests sent still run to completion.
    pub fn detached(rt: &tokio::runtime::Handle) -> InFlight {
        let (tx, rx) = mpsc::unbounded_channel();
        InFlight {
            tx: Some(tx),
            task: Some(rt.spawn(run(rx))),
            abort_on_drop: false,
        }
    }

    /// Run `job` beside the others. The job comes back when the executor
    /// task is gone before the connection ended: a request panicked (a
    /// bug, logged with the panic); the caller then ends the connection or
    /// runs the job elsewhere, rather than leave its client waiting for a
    /// reply that cannot come.
    pub fn push(&self, job: Job) -> Result<(), Job> {
        match &self.tx {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Wait for every request sent to finish; after `drain`, call
    /// `on_timeout` (which tells streamed replies to stop) and wait for the
    /// rest.
    pub async fn finish(mut self, drain: Duration, on_timeout: impl FnOnce()) {
        self.tx = None;
        let Some(mut task) = self.task.take() else {
            return;
        };
        if tokio::time::timeout(drain, &mut task).await.is_err() {
            on_timeout();
            let _ = task.await;
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let (true, Some(task)) = (self.abort_on_drop, &self.task) {
            task.abort();
        }
    }
}

/// Poll the requests that were woken and take the new ones, until the
/// sender is gone and every request has finished.
async fn run(mut rx: mpsc::UnboundedReceiver<Job>) {
    let mut set: FuturesUnordered<Job> = FuturesUnordered::new();
    let mut open = true;
    std::future::poll_fn(|cx| {
        loop {
            while open {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(job)) => set.push(job),
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            // Ready(Some) per finished request, Ready(None) once the set
            // is empty, Pending when the rest wait (or the set yields to
            // the scheduler after a long turn; it has woken itself then).
            let mut finished = false;
            while let Poll::Ready(Some(())) = Pin::new(&mut set).poll_next(cx) {
                finished = true;
            }
            if !open && set.is_empty() {
                return Poll::Ready(());
            }
            // A request that finished may have let the reader go on; new
            // requests are taken at once when there are some.
            if !finished || !open {
                return Poll::Pending;
            }
            match rx.poll_recv(cx) {
                Poll::Ready(Some(job)) => set.push(job),
                Poll::Ready(None) => open = false,
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn every_request_sent_runs_to_completion_before_finish_returns() {
        let f = InFlight::start();
        let done = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        for i in 0..100u64 {
            let done = done.clone();
            let mut go = go_rx.clone();
            f.push(Box::pin(async move {
                if i % 2 == 0 {
                    // Half wait for a signal sent after the last push.
                    let _ = go.wait_for(|g| *g).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(i % 7)).await;
                }
                done.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap_or_else(|_| panic!("refused"));
        }
        tokio::task::yield_now().await;
        assert!(done.load(Ordering::SeqCst) < 100);
        go_tx.send(true).unwrap();
        f.finish(Duration::from_secs(10), || panic!("no timeout expected"))
            .await;
        assert_eq!(done.load(Ordering::SeqCst), 100);
    }

    #[tokio::test]
    async fn after_the_drain_timeout_the_stop_is_called_and_the_rest_awaited() {
        let f = InFlight::start();
        let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        f.push(Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
            d.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap_or_else(|_| panic!("refused"));
        let mut stopped = false;
        f.finish(Duration::from_millis(50), || {
            stopped = true;
            let _ = stop_tx.send(true);
        })
        .await;
        assert!(stopped);
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn dropping_it_aborts_the_requests() {
        let f = InFlight::start();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        f.push(Box::pin(async move {
            std::future::pending::<()>().await;
            drop(tx);
        }))
        .unwrap_or_else(|_| panic!("refused"));
        tokio::task::yield_now().await;
        drop(f);
        // The aborted request drops its future, and with it the sender.
        assert!(tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("the request was not aborted")
            .is_err());
    }

    #[test]
    fn a_detached_one_lets_its_requests_finish_when_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let f = InFlight::detached(rt.handle());
        f.push(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(7);
        }))
        .unwrap_or_else(|_| panic!("refused"));
        drop(f);
        let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), rx).await });
        assert_eq!(got.expect("the request did not finish").ok(), Some(7));
    }

    #[tokio::test]
    async fn a_request_that_panics_makes_push_fail_instead_of_hanging() {
        let f = InFlight::start();
        f.push(Box::pin(async { panic!("a bug in a request") }))
            .unwrap_or_else(|_| panic!("refused"));
        let mut refused = false;
        for _ in 0..100 {
            tokio::task::yield_now().await;
            if f.push(Box::pin(async {})).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
