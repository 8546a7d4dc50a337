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

#[cfg(test)]
mod tests {
    use super::super::{Limits, Server};
    use super::PIECE;
    use crate::device::{CacheMode, DeviceConfig, MemBackend, MemOp};
    use crate::export::testing::TestLun;
    use crate::export::ExportSet;
    use crate::nbd::proto::{err, reply, IHAVEOPT, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::sync::watch;

    const MIB: usize = 1 << 20;
    /// A streamed READ: nine pieces.
    const LEN: usize = 36 * MIB;

    async fn read_exact(c: &mut DuplexStream, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        c.read_exact(&mut v).await.unwrap();
        v
    }

    fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes(b[..4].try_into().unwrap())
    }

    /// Handshake as a client (structured replies asked for or not) on a
    /// server over a 40 MiB in-memory LUN without a cache.
    async fn connected(structured: bool) -> (DuplexStream, Arc<MemBackend>) {
        let lun = TestLun::new(MemBackend::from_data(
            512,
            (0..40 * MIB).map(|i| (i / 512) as u8).collect(),
        ));
        let mem = lun.mem.clone();
        let cfg = DeviceConfig {
            mode: CacheMode::None,
            ..DeviceConfig::default()
        };
        let set = Arc::new(ExportSet::new(vec![(1, lun)], &cfg, false).unwrap());
        let (_stop, shutdown) = watch::channel(false);
        let server = Arc::new(Server::new(
            set,
            Arc::new(|_: &crate::export::Export<TestLun>| String::new()),
            None,
            Limits::default(),
            shutdown,
        ));
        // A small pipe: the server blocks when the client does not read.
        let (mut c, s) = tokio::io::duplex(64 << 10);
        tokio::spawn(async move {
            let _keep = _stop;
            let _ = server.serve(s, "test").await;
        });
        read_exact(&mut c, 18).await;
        c.write_all(&3u32.to_be_bytes()).await.unwrap();
        let mut opts = Vec::new();
        if structured {
            opts.push((8u32, Vec::new()));
        }
        let mut go = 4u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"lun1");
        go.extend_from_slice(&0u16.to_be_bytes());
        opts.push((7, go));
        for (opt, data) in opts {
            let mut m = IHAVEOPT.to_be_bytes().to_vec();
            m.extend_from_slice(&opt.to_be_bytes());
            m.extend_from_slice(&(data.len() as u32).to_be_bytes());
            m.extend_from_slice(&data);
            c.write_all(&m).await.unwrap();
            loop {
                let head = read_exact(&mut c, 20).await;
                let (kind, len) = (be32(&head[12..]), be32(&head[16..]));
                read_exact(&mut c, len as usize).await;
                assert!(kind < 1 << 31, "option {opt} refused: {kind:#x}");
                if kind == 1 {
                    break;
                }
            }
        }
        (c, mem)
    }

    async fn request(c: &mut DuplexStream, cookie: u64, offset: u64, len: usize) {
        let mut m = 0x2560_9513u32.to_be_bytes().to_vec();
        m.extend_from_slice(&0u16.to_be_bytes());
        m.extend_from_slice(&0u16.to_be_bytes()); // READ
        m.extend_from_slice(&cookie.to_be_bytes());
        m.extend_from_slice(&offset.to_be_bytes());
        m.extend_from_slice(&(len as u32).to_be_bytes());
        c.write_all(&m).await.unwrap();
    }

    /// Send a streamed READ, let the server read ahead as far as it goes
    /// while the client reads nothing (three pieces: one being written,
    /// one queued, one waiting), then make every further read fail.
    async fn read_then_fail(c: &mut DuplexStream, mem: &MemBackend) {
        request(c, 1, 0, LEN).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        // 1 MiB commands: four per piece.
        while mem.counts().reads < 12 {
            assert!(Instant::now() < deadline, "the server did not read ahead");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(mem.counts().reads, 12, "read ahead is three pieces");
        mem.fail_next(MemOp::Read, 1000, 5);
    }

    #[tokio::test]
    async fn a_simple_reply_that_fails_midway_closes_the_connection_after_whole_pieces() {
        let (mut c, mem) = connected(false).await;
        read_then_fail(&mut c, &mem).await;
        let head = read_exact(&mut c, 16).await;
        assert_eq!(be32(&head), SIMPLE_REPLY_MAGIC);
        assert_eq!(be32(&head[4..]), 0, "no error: the first piece was read");
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest.len(), 3 * PIECE, "three pieces, then EOF");
        assert!(rest.iter().enumerate().all(|(i, &b)| b == (i / 512) as u8));
    }

    #[tokio::test]
    async fn a_structured_reply_that_fails_midway_ends_with_an_error_chunk() {
        let (mut c, mem) = connected(true).await;
        read_then_fail(&mut c, &mem).await;
        for k in 0..3u64 {
            let head = read_exact(&mut c, 20).await;
            assert_eq!(be32(&head), STRUCTURED_REPLY_MAGIC);
            let kind = u16::from_be_bytes([head[6], head[7]]);
            assert_eq!((kind, head[5] & 1), (reply::OFFSET_DATA, 0), "piece {k}");
            assert_eq!(be32(&head[16..]) as usize, PIECE + 8);
            let offset = u64::from_be_bytes(read_exact(&mut c, 8).await.try_into().unwrap());
            assert_eq!(offset, k * PIECE as u64);
            read_exact(&mut c, PIECE).await;
        }
        let head = read_exact(&mut c, 20).await;
        let kind = u16::from_be_bytes([head[6], head[7]]);
        assert_eq!(
            (kind, head[5] & 1),
            (reply::ERROR, 1),
            "a final error chunk"
        );
        let body = read_exact(&mut c, be32(&head[16..]) as usize).await;
        assert_eq!(be32(&body), err::EIO);
        // The connection goes on.
        mem.clear_faults();
        request(&mut c, 2, 512, 512).await;
        let head = read_exact(&mut c, 20).await;
        assert_eq!(u64::from_be_bytes(head[8..16].try_into().unwrap()), 2);
        assert_eq!(be32(&head[16..]), 512 + 8);
        let data = read_exact(&mut c, 512 + 8).await;
        assert!(data[8..].iter().all(|&b| b == 1));
    }
}
