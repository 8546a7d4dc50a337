//! READs and WRITEs longer than [`STREAM_ABOVE`], streamed in pieces of
//! [`PIECE`] bytes so that a connection's memory does not grow with the
//! request.
//!
//! Requests up to [`STREAM_ABOVE`] (the 32 MiB every NBD client may send)
//! keep the ordinary path: one buffer, cache hits answered inline. Longer
//! ones, up to [`MAX_PAYLOAD`](super::MAX_PAYLOAD) (any length the
//! request's 32-bit field can carry, as nbd-server accepts):
//!
//! - **WRITE**: the connection's reader receives the payload piece by piece
//!   and writes each piece through the export while it receives the next
//!   (at most two pieces in memory). A piece that fails ends the writing;
//!   the rest of the payload is read and dropped and the reply carries the
//!   first error. A client that goes away inside the payload leaves the
//!   pieces received before written: the range then holds old and new data
//!   — as after any write that got no reply, its contents are unspecified.
//! - **READ**: the request's task reads the first piece before anything is
//!   sent, so a failure there is an ordinary error reply. Then the reply's
//!   header goes out with that piece and the writer sends the further
//!   pieces as the task reads them (one queued, one being read: at most
//!   three pieces in memory), before any other reply. With simple replies
//!   the header is one simple reply and the data follows in pieces; a
//!   later piece that fails closes the connection, as the spec demands once
//!   a header with no error is out. With structured replies each piece is
//!   an `NBD_REPLY_TYPE_OFFSET_DATA` chunk (the last one with
//!   `NBD_REPLY_FLAG_DONE`), and a later failure is a final
//!   `NBD_REPLY_TYPE_ERROR` chunk: the connection stays usable.
//!   `NBD_CMD_FLAG_DF` (one chunk) on a READ longer than [`STREAM_ABOVE`]
//!   is refused with `NBD_EOVERFLOW`, as the spec allows (nbd-server does
//!   so above 1 MiB).
//!
//! A streamed request takes [`STREAM_COST`] bytes (at most
//! `Limits::max_bytes`) of the connection's byte budget, the most it
//! holds at once, so the per-connection bound of the parent module holds
//! whatever the request's length.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::writer::{failure, read_reply, Permits, Piece, Reply};
use crate::export::{Export, ExportError, LunBackend};
use crate::nbd::proto::{self, cflag, err, Command, Request};

/// Longest READ or WRITE served from one buffer; longer ones are streamed.
pub const STREAM_ABOVE: u32 = 32 << 20;
/// Size of the pieces a streamed request is received, written, read and
/// sent in.
pub const PIECE: usize = 4 << 20;
/// What a streamed request takes of a connection's byte budget: the most
/// pieces it holds at once (three for a READ, two for a WRITE).
pub const STREAM_COST: usize = 3 * PIECE;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a streamed request's reply goes: the writer's queue, and the
/// connection's signal that its last replies are no longer waited for (a
/// client that stopped reading at the end of the connection): a streamed
/// READ then stops, and the writer closes the connection behind it.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) replies: mpsc::UnboundedSender<Reply>,
    pub(super) stop: watch::Receiver<bool>,
}

/// Whether `req` is streamed (a READ or WRITE longer than [`STREAM_ABOVE`]).
pub(super) fn streamed(req: &Request) -> bool {
    matches!(req.command, Command::Read | Command::Write) && req.length > STREAM_ABOVE
}

/// The byte budget `req` (a valid READ or WRITE) takes until its reply is
/// written: its length, or [`STREAM_COST`] when streamed.
pub(super) fn cost(req: &Request) -> usize {
    if streamed(req) {
        STREAM_COST
    } else {
        req.length as usize
    }
}

/// `NBD_EOVERFLOW` for a READ with `NBD_CMD_FLAG_DF` that would have to be
/// streamed: its one chunk would be too long.
pub(super) fn check_unfragmented(req: &Request) -> Result<(), u32> {
    if req.command == Command::Read && req.flags & cflag::DF != 0 && req.length > STREAM_ABOVE {
        Err(err::EOVERFLOW)
    } else {
        Ok(())
    }
}

/// Start a streamed request (validated, its `permits` taken): a WRITE's
/// payload is received and written here; the task returned finishes the
/// request and queues its reply on `replies`.
pub(super) async fn start<B: LunBackend, R: AsyncRead + Unpin>(
    export: Arc<Export<B>>,
    rd: &mut R,
    buf: &mut BytesMut,
    req: Request,
    structured: bool,
    permits: Permits,
    out: &Outbox,
) -> io::Result<Task> {
    if req.command == Command::Read {
        let out = out.clone();
        return Ok(Box::pin(stream_read(export, req, structured, permits, out)));
    }
    let replies = out.replies.clone();
    let last = receive_write(&export, rd, buf, &req).await?;
    Ok(Box::pin(async move {
        let mut head = BytesMut::with_capacity(32);
        match last.await {
            Ok(()) => proto::put_simple_reply(&mut head, req.cookie, 0),
            Err(e) => {
                let (code, message) = failure(e);
                proto::put_error_reply(&mut head, structured, req.cookie, code, &message);
            }
        }
        let mut reply = Reply::new(head, Bytes::new());
        reply.permits = Some(permits);
        let _ = replies.send(reply);
    }))
}

type PieceWrite = Pin<Box<dyn Future<Output = Result<(), ExportError>> + Send>>;

async fn finish(w: Option<PieceWrite>) -> Result<(), ExportError> {
    match w {
        Some(w) => w.await,
        None => Ok(()),
    }
}

/// Receive a WRITE's payload in pieces, each written while the next is
/// received; returns once the payload is read, with the future of what is
/// still being written (the first error, if a piece failed).
async fn receive_write<B: LunBackend, R: AsyncRead + Unpin>(
    export: &Arc<Export<B>>,
    rd: &mut R,
    buf: &mut BytesMut,
    req: &Request,
) -> io::Result<impl Future<Output = Result<(), ExportError>> + Send + 'static> {
    let fua = req.flags & cflag::FUA != 0;
    let total = req.length as usize;
    let mut done = 0;
    let mut writing: Option<PieceWrite> = None;
    let mut failed = None;
    while done < total {
        let n = (total - done).min(PIECE);
        // The piece in flight finishes even when the client goes away.
        let (written, piece) = tokio::join!(finish(writing.take()), read_exact_bytes(rd, buf, n));
        if let Err(e) = written {
            failed.get_or_insert(e);
        }
        let piece = piece.inspect_err(|_| {
            warn!(
                cookie = req.cookie,
                len = total,
                received = done,
                "client went away inside a WRITE payload; the pieces received before were written"
            );
        })?;
        if failed.is_none() {
            let (e, at) = (export.clone(), req.offset + done as u64);
            writing = Some(Box::pin(async move {
                e.write(at, piece, fua).await.map(|_| ())
            }));
        }
        done += n;
    }
    Ok(async move {
        let last = finish(writing).await;
        match failed {
            Some(e) => Err(e),
            None => last,
        }
    })
}

/// Exactly `n` bytes, from what is buffered and then the stream.
pub(super) async fn read_exact_bytes<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    n: usize,
) -> io::Result<Bytes> {
    if buf.len() >= n {
        return Ok(buf.split_to(n).freeze());
    }
    let mut data = BytesMut::with_capacity(n);
    data.extend_from_slice(&buf.split());
    let have = data.len();
    data.resize(n, 0);
    rd.read_exact(&mut data[have..]).await?;
    Ok(data.freeze())
}

/// Exactly `n` bytes at `at`: a short read (a LUN that shrank) is an error.
async fn read_piece<B: LunBackend>(
    export: &Export<B>,
    at: u64,
    n: usize,
) -> Result<Bytes, ExportError> {
    let data = export.read(at, n).await?;
    if data.len() != n {
        return Err(ExportError::OutOfRange {
            export: export.name().to_string(),
            offset: at,
            len: n as u64,
            size: export.size(),
        });
    }
    Ok(data)
}

/// Read and send a READ in pieces (see the module docs).
async fn stream_read<B: LunBackend>(
    export: Arc<Export<B>>,
    req: Request,
    structured: bool,
    permits: Permits,
    out: Outbox,
) {
    let Outbox { replies, mut stop } = out;
    let total = req.length as usize;
    let n = total.min(PIECE);
    let data = match read_piece(&export, req.offset, n).await {
        Ok(data) => data,
        Err(e) => {
            let mut reply = read_reply(structured, &req, Err(e));
            reply.permits = Some(permits);
            let _ = replies.send(reply);
            return;
        }
    };
    let mut head = BytesMut::with_capacity(32);
    if structured {
        proto::put_offset_data_head(&mut head, req.cookie, false, req.offset, n as u32);
    } else {
        proto::put_simple_reply(&mut head, req.cookie, 0);
    }
    let (tx, rx) = mpsc::channel(1);
    let reply = Reply {
        permits: Some(permits),
        rest: Some(rx),
        ..Reply::new(head, data)
    };
    if replies.send(reply).is_err() {
        return;
    }
    let mut done = n;
    while done < total {
        let n = (total - done).min(PIECE);
        let at = req.offset + done as u64;
        let last = done + n == total;
        let piece = match read_piece(&export, at, n).await {
            Ok(data) => {
                let mut head = BytesMut::new();
                if structured {
                    proto::put_offset_data_head(&mut head, req.cookie, last, at, n as u32);
                }
                Piece::Data { head, data, last }
            }
            Err(e) => {
                let (code, message) = failure(e);
                warn!(
                    cookie = req.cookie,
                    offset = at,
                    len = n,
                    code,
                    %message,
                    "a READ failed after its reply began"
                );
                if structured {
                    let mut head = BytesMut::new();
                    proto::put_error_chunk(&mut head, req.cookie, code, &message);
                    Piece::Data {
                        head,
                        data: Bytes::new(),
                        last: true,
                    }
                } else {
                    Piece::Abort
                }
            }
        };
        let end = !matches!(piece, Piece::Data { last: false, .. });
        tokio::select! {
            sent = tx.send(piece) => {
                // The writer is gone (the client too): nothing more to read.
                if sent.is_err() || end {
                    return;
                }
            }
            _ = stop.wait_for(|s| *s) => return,
        }
        done += n;
    }
}
