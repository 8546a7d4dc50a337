//! The reply writer of one connection: replies go out in the order they
//! are queued, gathered into batches written with as few calls as the
//! stream allows (see the parent module's "Replies on the wire"); and the
//! encoding of READ replies and failures.

use std::io;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tracing::debug;

use crate::export::ExportError;
use crate::nbd::proto::{self, err, errno_to_nbd, Request};

/// An encoded reply: header bytes, then data, and the permits it holds
/// until it is written — and, for a READ streamed in pieces
/// ([`super::big`]), the rest of its pieces, written right behind it
/// before any other reply.
pub(super) struct Reply {
    pub(super) head: BytesMut,
    pub(super) data: Bytes,
    pub(super) permits: Option<Permits>,
    pub(super) rest: Option<mpsc::Receiver<Piece>>,
}

impl Reply {
    /// A reply of `head` and `data`, holding no permits yet.
    pub(super) fn new(head: BytesMut, data: Bytes) -> Reply {
        Reply {
            head,
            data,
            permits: None,
            rest: None,
        }
    }
}

/// A request's permits: one of the request budget, and its bytes of the
/// byte budget (none for a request without payload).
pub(super) type Permits = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

/// The permits of every reply in `batch`, merged into one permit per
/// budget (all come from the same connection's two semaphores).
fn gather_permits(
    batch: &mut [Reply],
) -> (Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>) {
    fn merge(into: &mut Option<OwnedSemaphorePermit>, p: OwnedSemaphorePermit) {
        match into {
            Some(all) if Arc::ptr_eq(all.semaphore(), p.semaphore()) => all.merge(p),
            // Not the connection's (cannot happen): released on its own.
            Some(_) => drop(p),
            None => *into = Some(p),
        }
    }
    let (mut requests, mut bytes) = (None, None);
    for (r, b) in batch.iter_mut().filter_map(|r| r.permits.take()) {
        merge(&mut requests, r);
        if let Some(b) = b {
            merge(&mut bytes, b);
        }
    }
    (requests, bytes)
}

/// One more piece of a streamed READ reply.
pub(super) enum Piece {
    /// Bytes for the wire: a chunk header (structured replies; empty for a
    /// simple reply) and data; `last` ends the reply.
    Data {
        head: BytesMut,
        data: Bytes,
        last: bool,
    },
    /// The read failed after the reply's header went out with no error:
    /// nothing more may be sent, the connection is closed (the spec's hard
    /// disconnect). So is a stream that ends without its last piece.
    Abort,
}

/// Most replies gathered into one batch (one `writev` when the stream
/// takes vectored writes; 2 slices each, far below `IOV_MAX`).
const BATCH_REPLIES: usize = 64;
/// Most payload bytes gathered into one batch: a batch stops growing once
/// it holds this much, so the permits of its replies come back soon.
const BATCH_BYTES: usize = 4 << 20;
/// Without vectored writes (TLS), pieces shorter than this are copied into
/// one staging buffer; longer ones are written from where they are.
const STAGE_MAX: usize = 64 << 10;

/// Write replies as they come: every reply already queued joins the
/// batch, and a batch goes out with as few write calls as the stream
/// allows — header and data of each reply are written from where they are
/// (the READ data straight from the device's buffer, no copy) with
/// vectored writes, a partial write continuing where it stopped.
pub(super) async fn write_replies<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Reply>,
) -> io::Result<()> {
    let vectored = w.is_write_vectored();
    let mut batch: Vec<Reply> = Vec::with_capacity(BATCH_REPLIES);
    let mut stage = Vec::new();
    let mut failed = None;
    while let Some(first) = rx.recv().await {
        let mut bytes = first.head.len() + first.data.len();
        // A streamed reply ends its batch: its pieces follow it at once.
        let mut streamed = first.rest.is_some();
        batch.push(first);
        while !streamed && batch.len() < BATCH_REPLIES && bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(r) => {
                    bytes += r.head.len() + r.data.len();
                    streamed = r.rest.is_some();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        if failed.is_none() {
            let r = if vectored {
                write_batch_vectored(&mut w, &batch).await
            } else {
                write_batch_staged(&mut w, &batch, &mut stage).await
            };
            if let Err(e) = r {
                failed = Some(e);
            }
        }
        // After a failed write the pieces are not wanted: dropping the
        // receiver stops the reads that produce them.
        if let (None, Some(rest)) = (&failed, batch.last_mut().and_then(|r| r.rest.as_mut())) {
            loop {
                match rest.recv().await {
                    Some(Piece::Data { head, data, last }) => {
                        if let Err(e) = write_piece(&mut w, vectored, &head, &data).await {
                            failed = Some(e);
                            break;
                        }
                        if last {
                            break;
                        }
                    }
                    Some(Piece::Abort) | None => {
                        // Ends the connection: the reader stops once this
                        // task's receiver is gone.
                        let _ = w.shutdown().await;
                        return Err(io::Error::other(
                            "a READ failed after its reply began; connection closed",
                        ));
                    }
                }
            }
        }
        // Written (or dropped after a failure): the permits go back, one
        // release per budget for the whole batch (each release takes the
        // semaphore's lock).
        let back = gather_permits(&mut batch);
        batch.clear();
        drop(back);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    w.flush().await?;
    // Closes TLS properly (close_notify) and the socket's write side.
    w.shutdown().await
}

/// One piece of a streamed reply: its chunk header (if any) and data in
/// one vectored write where the stream takes them.
async fn write_piece<W: AsyncWrite + Unpin>(
    w: &mut W,
    vectored: bool,
    head: &[u8],
    data: &[u8],
) -> io::Result<()> {
    if vectored {
        let mut slices = [io::IoSlice::new(head), io::IoSlice::new(data)];
        let mut rest = &mut slices[..];
        while rest.iter().any(|s| !s.is_empty()) {
            let n = w.write_vectored(rest).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            io::IoSlice::advance_slices(&mut rest, n);
        }
    } else {
        w.write_all(head).await?;
        w.write_all(data).await?;
    }
    w.flush().await
}

/// The pieces of a batch in wire order: each reply's header, then its
/// data (empty pieces left out).
fn reply_slices(batch: &[Reply]) -> Vec<io::IoSlice<'_>> {
    let mut v = Vec::with_capacity(batch.len() * 2);
    for r in batch {
        for piece in [&r.head[..], &r.data[..]] {
            if !piece.is_empty() {
                v.push(io::IoSlice::new(piece));
            }
        }
    }
    v
}

/// One batch through vectored writes, resuming after partial ones.
async fn write_batch_vectored<W: AsyncWrite + Unpin>(w: &mut W, batch: &[Reply]) -> io::Result<()> {
    let mut slices = reply_slices(batch);
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = w.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        io::IoSlice::advance_slices(&mut rest, n);
    }
    w.flush().await
}

/// One batch for a stream without vectored writes: short pieces gathered
/// in `stage` and written together, long ones written as they are.
async fn write_batch_staged<W: AsyncWrite + Unpin>(
    w: &mut W,
    batch: &[Reply],
    stage: &mut Vec<u8>,
) -> io::Result<()> {
    stage.clear();
    for r in batch {
        for piece in [&r.head[..], &r.data[..]] {
            if piece.len() < STAGE_MAX {
                stage.extend_from_slice(piece);
                if stage.len() >= STAGE_MAX {
                    w.write_all(stage).await?;
                    stage.clear();
                }
            } else {
                if !stage.is_empty() {
                    w.write_all(stage).await?;
                    stage.clear();
                }
                w.write_all(piece).await?;
            }
        }
    }
    if !stage.is_empty() {
        w.write_all(stage).await?;
        stage.clear();
    }
    w.flush().await
}

/// The reply to a READ: its data (simple reply, or one `OFFSET_DATA`
/// chunk — `NONE` when empty — with structured replies), or its error.
pub(super) fn read_reply(structured: bool, req: &Request, r: Result<Bytes, ExportError>) -> Reply {
    let mut head = BytesMut::with_capacity(32);
    let data = match r {
        Ok(data) => {
            if !structured {
                proto::put_simple_reply(&mut head, req.cookie, 0);
            } else if data.is_empty() {
                proto::put_none_chunk(&mut head, req.cookie);
            } else {
                proto::put_offset_data_head(
                    &mut head,
                    req.cookie,
                    true,
                    req.offset,
                    data.len() as u32,
                );
            }
            data
        }
        Err(e) => {
            let (code, message) = failure(e);
            debug!(cookie = req.cookie, off = req.offset, len = req.length, code, %message, "read failed");
            proto::put_error_reply(&mut head, structured, req.cookie, code, &message);
            Bytes::new()
        }
    };
    Reply::new(head, data)
}

/// The NBD error and message for a failed request: `NBD_ESHUTDOWN` when
/// the server is stopping, else the export layer's errno mapped by
/// [`errno_to_nbd`] (write-protect → `EPERM`, no space → `ENOSPC`, a SCSI
/// or session failure → its errno, usually `EIO`).
pub(super) fn failure(e: ExportError) -> (u32, String) {
    let code = match e {
        ExportError::ShutDown { .. } => err::ESHUTDOWN,
        ref e => errno_to_nbd(e.to_errno()),
    };
    (code, rlun_iscsi::error_chain(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::sync::Semaphore;

    /// A client socket that takes at most `step` bytes per call and says
    /// "not now" every other call, with or without vectored writes.
    struct SlowClient {
        got: Vec<u8>,
        step: usize,
        vectored: bool,
        calls: usize,
        writes: usize,
    }

    impl SlowClient {
        fn take(
            &mut self,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.writes += 1;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.step - n);
                self.got.extend_from_slice(&b[..k]);
                n += k;
                if n == self.step || !self.vectored {
                    break;
                }
            }
            Poll::Ready(Ok(n))
        }
    }

    impl AsyncWrite for SlowClient {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.take(cx, &[io::IoSlice::new(buf)])
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.take(cx, bufs)
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Simple and structured READ replies with data (small and larger than
    /// the staging limit), an empty one, a write's reply and an error:
    /// (the replies, the bytes the client must receive).
    #[test]
    fn a_batch_gives_back_every_permit_through_one_per_budget() {
        let (requests, bytes, other) = (
            Arc::new(Semaphore::new(8)),
            Arc::new(Semaphore::new(100)),
            Arc::new(Semaphore::new(8)),
        );
        let reply = |r: &Arc<Semaphore>, b: Option<u32>| {
            let mut reply = Reply::new(BytesMut::new(), Bytes::new());
            reply.permits = Some((
                r.clone().try_acquire_owned().unwrap(),
                b.map(|n| bytes.clone().try_acquire_many_owned(n).unwrap()),
            ));
            reply
        };
        let mut batch = vec![
            reply(&requests, Some(10)),
            reply(&requests, None),
            reply(&requests, Some(30)),
            reply(&other, Some(5)),
        ];

        let (r, b) = gather_permits(&mut batch);
        let merged = (
            r.as_ref().map(|p| p.num_permits()),
            b.as_ref().map(|p| p.num_permits()),
        );
        let held = (requests.available_permits(), bytes.available_permits());
        drop((r, b));

        assert!(batch.iter().all(|r| r.permits.is_none()));
        assert_eq!(merged, (Some(3), Some(45)));
        assert_eq!(held, (5, 55), "nothing is given back before the drop");
        assert_eq!(requests.available_permits(), 8);
        assert_eq!(bytes.available_permits(), 100);
        assert_eq!(
            other.available_permits(),
            8,
            "a stray semaphore's permit too"
        );
    }

    fn replies(permits: &Arc<Semaphore>) -> (Vec<Reply>, Vec<u8>) {
        let mut out = Vec::new();
        let mut wire = Vec::new();
        let data = |n: usize, seed: u8| -> Bytes {
            (0..n)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect::<Vec<u8>>()
                .into()
        };
        for (i, n) in [4096usize, 0, 200 << 10, 512, 1 << 20, 0]
            .into_iter()
            .enumerate()
        {
            let cookie = 100 + i as u64;
            let mut head = BytesMut::new();
            let d = data(n, i as u8);
            match i % 3 {
                0 => proto::put_simple_reply(&mut head, cookie, 0),
                1 if n == 0 => proto::put_error_reply(&mut head, true, cookie, err::EIO, "failed"),
                1 => proto::put_offset_data_head(&mut head, cookie, true, 4096, n as u32),
                _ if n == 0 => proto::put_none_chunk(&mut head, cookie),
                _ => proto::put_offset_data_head(&mut head, cookie, true, 0, n as u32),
            }
            wire.extend_from_slice(&head);
            wire.extend_from_slice(&d);
            let p = permits.clone().try_acquire_owned().unwrap();
            let mut r = Reply::new(head, d);
            r.permits = Some((p, None));
            out.push(r);
        }
        (out, wire)
    }

    #[tokio::test]
    async fn replies_reach_a_slow_client_whole_and_in_order_with_and_without_vectored_writes() {
        for vectored in [true, false] {
            for step in [1usize, 7, 4096, 300 << 10, usize::MAX] {
                let permits = Arc::new(Semaphore::new(16));
                let (list, wire) = replies(&permits);
                let (tx, rx) = mpsc::unbounded_channel();
                // Queued before the writer starts: all in one batch.
                for r in list {
                    tx.send(r).unwrap();
                }
                drop(tx);
                let mut client = SlowClient {
                    got: Vec::new(),
                    step,
                    vectored,
                    calls: 0,
                    writes: 0,
                };
                write_replies(&mut client, rx).await.unwrap();
                assert!(
                    client.got == wire,
                    "vectored={vectored} step={step}: bytes differ"
                );
                assert_eq!(
                    permits.available_permits(),
                    16,
                    "every reply gave its permits back"
                );
                if vectored && step == usize::MAX {
                    assert_eq!(client.writes, 1, "one batch, one vectored write");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_failed_write_drops_the_rest_and_still_returns_the_permits() {
        struct Broken;
        impl AsyncWrite for Broken {
            fn poll_write(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                _: &[u8],
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let permits = Arc::new(Semaphore::new(16));
        let (list, _) = replies(&permits);
        let (tx, rx) = mpsc::unbounded_channel();
        for r in list {
            tx.send(r).unwrap();
        }
        drop(tx);
        let e = write_replies(Broken, rx).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(permits.available_permits(), 16);
    }

    /// A streamed reply: its header and first piece, then each further
    /// piece as it comes, before the reply queued behind it — or, when the
    /// stream is aborted (or ends without its last piece), nothing more at
    /// all and an error that ends the connection.
    #[tokio::test]
    async fn a_streamed_reply_goes_out_whole_before_the_next_or_ends_the_connection() {
        for how in ["whole", "abort", "cut off"] {
            let (tx, rx) = mpsc::unbounded_channel();
            let (ptx, prx) = mpsc::channel(1);
            let first = Reply {
                rest: Some(prx),
                ..Reply::new(BytesMut::from(&b"HEAD"[..]), Bytes::from_static(b"one"))
            };
            tx.send(first).unwrap();
            tx.send(Reply::new(BytesMut::from(&b"NEXT"[..]), Bytes::new()))
                .unwrap();
            drop(tx);
            let feeder = tokio::spawn(async move {
                let piece = |d: &'static [u8], last| Piece::Data {
                    head: BytesMut::from(&b"+"[..]),
                    data: Bytes::from_static(d),
                    last,
                };
                ptx.send(piece(b"two", false)).await.unwrap();
                match how {
                    "whole" => ptx.send(piece(b"three", true)).await.unwrap(),
                    "abort" => ptx.send(Piece::Abort).await.unwrap(),
                    _ => drop(ptx),
                }
            });
            let mut client = SlowClient {
                got: Vec::new(),
                step: 5,
                vectored: true,
                calls: 0,
                writes: 0,
            };
            let r = write_replies(&mut client, rx).await;
            feeder.await.unwrap();
            if how == "whole" {
                r.unwrap();
                assert_eq!(client.got, b"HEADone+two+threeNEXT");
            } else {
                assert!(r.is_err(), "{how}");
                assert_eq!(client.got, b"HEADone+two", "{how}: nothing after");
            }
        }
    }
}
