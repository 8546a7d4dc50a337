//! iSCSI over TCP (RFC 7143 §4.1): connect with a timeout, frame PDUs out of
//! the byte stream, and write PDUs with vectored writes so data segments are
//! never copied into a send buffer.

use std::future::Future;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::Interest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::{
    DataMovement, Encoded, FrameEncoder, FrameWriter, Lent, PduReader, Placement, Received,
    Transmit, Transport,
};
use rlun_iscsi::proto::pdu::{self, Bhs, Digests, FrameLimits, Pdu, WireFrame};

pub use super::TransportError;

/// iSCSI on a TCP connection: in-band data movement (Data-In, R2T and
/// Data-Out PDUs carry the data).
pub struct TcpTransport {
    stream: TcpStream,
}

impl TcpTransport {
    /// The connected socket (tests and diagnostics).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

impl Transport for TcpTransport {
    const DATA_MOVEMENT: DataMovement = DataMovement::InBand;
    type Reader = FrameReader<TcpReadHalf>;
    type Writer = TcpWriter;
    type Encoder = TcpEncoder;

    async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, TransportError> {
        Ok(TcpTransport {
            stream: connect(host, port, timeout).await?,
        })
    }

    fn split(self, limits: FrameLimits) -> (Self::Reader, Self::Writer, Self::Encoder) {
        // A second descriptor of the same socket to read through inside
        // tokio's readiness tracking (see `TcpReadHalf`); without one (out
        // of descriptors) reads cost one more system call per wake-up.
        let raw = std::os::fd::AsFd::as_fd(&self.stream)
            .try_clone_to_owned()
            .ok()
            .map(std::net::TcpStream::from);
        let (half, wr) = self.stream.into_split();
        (
            FrameReader::new(TcpReadHalf { half, raw }, limits),
            TcpWriter { wr },
            TcpEncoder::default(),
        )
    }
}

/// The sending half of a TCP connection.
pub struct TcpWriter {
    wr: OwnedWriteHalf,
}

/// Encodes PDUs with the digests negotiated at login, padding and all.
#[derive(Debug, Default)]
pub struct TcpEncoder {
    digests: Digests,
}

impl FrameEncoder for TcpEncoder {
    type Frame = WireFrame;

    fn set_digests(&mut self, digests: Digests) {
        self.digests = digests;
    }

    fn encode(&mut self, tx: Transmit) -> Result<Encoded<WireFrame>, super::TransportError> {
        // In-band data movement: the buffers a direct transport would
        // register are already in the PDUs' data segments.
        Ok(Encoded {
            frame: tx.pdu.encode(self.digests),
            hold: None,
        })
    }
}

impl FrameWriter for TcpWriter {
    type Frame = WireFrame;

    async fn write_frames(&mut self, frames: &[WireFrame]) -> io::Result<()> {
        write_frames(&mut self.wr, frames).await
    }

    async fn shutdown(&mut self) {
        let _ = AsyncWriteExt::shutdown(&mut self.wr).await;
    }
}

impl<R: ByteSource + 'static> PduReader for FrameReader<R> {
    fn set_limits(&mut self, limits: FrameLimits) {
        FrameReader::set_limits(self, limits)
    }

    async fn read_pdu(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Received, TransportError> {
        FrameReader::read_pdu(self, place).await
    }

    fn try_next(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Option<Received>, TransportError> {
        FrameReader::try_next(self, place)
    }

    fn received_head(&self) -> &[u8] {
        &self.head[..self.head_have]
    }
}

/// Resolve `host:port` and connect to the first address that answers, each
/// attempt bounded by `timeout`. Sets TCP_NODELAY: iSCSI is request/response
/// and Nagle would delay small PDUs (NOP, R2T answers, commands).
pub async fn connect(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let addrs: Vec<SocketAddr> =
        tokio::time::timeout(timeout, tokio::net::lookup_host((host, port)))
            .await
            .map_err(|_| TransportError::Resolve {
                host: host.to_string(),
                source: io::Error::new(io::ErrorKind::TimedOut, "name resolution timed out"),
            })?
            .map_err(|source| TransportError::Resolve {
                host: host.to_string(),
                source,
            })?
            .collect();
    let mut last = None;
    for addr in &addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                stream.set_nodelay(true)?;
                // Closing aborts (RST) and drops what was still unsent: a
                // connection given up must not deliver a command later,
                // when the network returns, after the command was sent
                // again (on a new connection, or through another path).
                socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO))?;
                return Ok(stream);
            }
            Ok(Err(source)) => {
                last = Some(TransportError::Connect {
                    addr: *addr,
                    source,
                })
            }
            Err(_) => {
                last = Some(TransportError::ConnectTimeout {
                    addr: *addr,
                    timeout,
                })
            }
        }
    }
    Err(last.unwrap_or(TransportError::NoAddress {
        host: host.to_string(),
    }))
}

/// A byte stream the reader fills several buffers from with one call
/// (`readv`).
pub trait ByteSource: Send + Unpin {
    /// Wait until data is there, then read it into `bufs` in order; 0 at
    /// the end of the stream. Cancel-safe: nothing is read unless it
    /// returns.
    fn recv_vectored(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
    ) -> impl Future<Output = io::Result<usize>> + Send;

    /// Read what is there without waiting; `WouldBlock` when nothing is.
    fn try_recv_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize>;
}

/// The receive half of a TCP connection as a [`ByteSource`].
///
/// A read that gets less than it asked for has emptied the socket's
/// receive queue, so it also tells tokio the socket is no longer readable
/// (as tokio's own `poll_read` does): the next read then waits for epoll
/// at once instead of first trying `readv` for an `EAGAIN`. That takes
/// the read inside [`TcpStream::try_io`], through `raw`, a second
/// descriptor of the same (non-blocking) socket.
pub struct TcpReadHalf {
    half: OwnedReadHalf,
    raw: Option<std::net::TcpStream>,
}

impl TcpReadHalf {
    fn read_now(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let Some(raw) = &self.raw else {
            return self.half.try_read_vectored(bufs);
        };
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        let mut got = None;
        let r = self.half.as_ref().try_io(Interest::READABLE, || {
            let n = std::io::Read::read_vectored(&mut &*raw, bufs)?;
            got = Some(n);
            if n > 0 && n < want {
                // Drained: clear tokio's readiness (tokio ignores that when
                // an event arrived meanwhile).
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            }
        });
        match (r, got) {
            (Err(e), Some(n)) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
            (r, _) => r,
        }
    }
}

impl ByteSource for TcpReadHalf {
    async fn recv_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        loop {
            self.half.readable().await?;
            match self.read_now(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }

    fn try_recv_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        // Without a syscall while tokio knows the socket is drained.
        self.read_now(bufs)
    }
}

/// Any [`AsyncRead`] as a [`ByteSource`] (one buffer per read; tests and
/// in-memory streams).
pub struct Stream<R>(pub R);

impl<R: AsyncRead + Unpin + Send> ByteSource for Stream<R> {
    async fn recv_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(b) => self.0.read(b).await,
            None => Ok(0),
        }
    }

    fn try_recv_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let Some(b) = bufs.iter_mut().find(|b| !b.is_empty()) else {
            return Ok(0);
        };
        let mut rb = tokio::io::ReadBuf::new(b);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut self.0).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// Longest header: BHS, 1020 bytes of AHS, header digest.
const HEAD_MAX: usize = pdu::BHS_LEN + 1020 + 4;

/// Reads whole PDUs from a byte stream, the header first and then the data
/// segment exactly, so that a Data-In payload can go straight into the
/// command's read buffer ([`Placement`]): no payload byte is copied in
/// user space. Each read also asks for the padding and digest after the
/// data segment and for the next PDU's header (`readv`), so a stream of
/// Data-In costs about one system call per PDU.
pub struct FrameReader<R> {
    rd: R,
    limits: FrameLimits,
    /// The header being received.
    head: Box<[u8; HEAD_MAX]>,
    head_have: usize,
    body: Body,
    /// The last read got less than it asked for: the socket had no more.
    drained: bool,
}

/// What the reader is receiving after a header.
enum Body {
    /// No data segment under way: a header.
    Header,
    /// A data segment with its padding and digest, into a buffer of its own.
    Staged {
        bhs: Bhs,
        ahs: Bytes,
        head_len: usize,
        dlen: usize,
        buf: Vec<u8>,
        have: usize,
    },
    /// A Data-In payload straight into a command's read buffer, then its
    /// padding and digest into `tail`.
    Placed {
        bhs: Bhs,
        ahs: Bytes,
        head_len: usize,
        lent: Lent,
        have: usize,
        tail: [u8; 7],
        tail_len: usize,
        tail_have: usize,
    },
}

impl<R: ByteSource> FrameReader<R> {
    pub fn new(rd: R, limits: FrameLimits) -> Self {
        FrameReader {
            rd,
            limits,
            head: Box::new([0; HEAD_MAX]),
            head_have: 0,
            body: Body::Header,
            drained: false,
        }
    }

    pub fn set_limits(&mut self, limits: FrameLimits) {
        self.limits = limits;
    }

    /// A PDU that can be completed from what is already there: buffered,
    /// or readable without waiting (one non-blocking read at most per
    /// PDU, none once a read found the socket empty).
    pub fn try_next(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Option<Received>, TransportError> {
        loop {
            if let Some(r) = self.advance(place)? {
                return Ok(Some(r));
            }
            if self.drained {
                return Ok(None);
            }
            let (mut iov, n, want) =
                slices(&mut self.head, self.head_have, &mut self.body, &self.limits);
            match self.rd.try_recv_vectored(&mut iov[..n]) {
                Ok(0) => return Err(self.eof()),
                Ok(got) => {
                    self.drained = got < want;
                    self.distribute(got);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.drained = true;
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Next complete PDU. `Err(Closed)` on a clean end of stream between PDUs.
    ///
    /// Cancel-safe: all state (a lent buffer too) lives in `self`, and the
    /// only await point is a cancel-safe read, so it can sit in a `select!`.
    pub async fn read_pdu(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Received, TransportError> {
        loop {
            if let Some(r) = self.advance(place)? {
                return Ok(r);
            }
            let (mut iov, n, want) =
                slices(&mut self.head, self.head_have, &mut self.body, &self.limits);
            let got = self.rd.recv_vectored(&mut iov[..n]).await?;
            if got == 0 {
                return Err(self.eof());
            }
            self.drained = got < want;
            self.distribute(got);
        }
    }

    /// Account for `n` bytes a read put into the [`slices`].
    fn distribute(&mut self, mut n: usize) {
        let mut take = |room: usize| {
            let t = n.min(room);
            n -= t;
            t
        };
        match &mut self.body {
            Body::Header => {}
            Body::Staged { buf, have, .. } => *have += take(buf.len() - *have),
            Body::Placed {
                lent,
                have,
                tail_len,
                tail_have,
                ..
            } => {
                *have += take(lent.payload().len() - *have);
                *tail_have += take(*tail_len - *tail_have);
            }
        }
        self.head_have += n;
    }

    /// Move the PDU under way as far as the buffered bytes allow; the PDU
    /// once it is whole.
    fn advance(
        &mut self,
        place: &mut (dyn Placement + Send),
    ) -> Result<Option<Received>, TransportError> {
        match &self.body {
            Body::Header => {}
            Body::Staged { buf, have, .. } if *have == buf.len() => {
                let Body::Staged {
                    bhs,
                    ahs,
                    dlen,
                    mut buf,
                    ..
                } = std::mem::replace(&mut self.body, Body::Header)
                else {
                    unreachable!("matched above")
                };
                if self.limits.digests.data {
                    let (data, trailer) = buf.split_at(buf.len() - 4);
                    let wire = trailer.try_into().expect("4 bytes");
                    pdu::check_data_digest(&data[..dlen], &data[dlen..], wire)?;
                }
                buf.truncate(dlen);
                let data = Bytes::from(buf);
                return Ok(Some(Pdu { bhs, ahs, data }.into()));
            }
            Body::Placed {
                lent,
                have,
                tail_len,
                tail_have,
                ..
            } if *have == lent.payload().len() && tail_have == tail_len => {
                let Body::Placed {
                    bhs,
                    ahs,
                    lent,
                    tail,
                    tail_len,
                    ..
                } = std::mem::replace(&mut self.body, Body::Header)
                else {
                    unreachable!("matched above")
                };
                if self.limits.digests.data {
                    let pad = tail_len - 4;
                    let wire = tail[pad..tail_len].try_into().expect("4 bytes");
                    pdu::check_data_digest(lent.payload(), &tail[..pad], wire)?;
                }
                let pdu = Pdu {
                    bhs,
                    ahs,
                    data: Bytes::new(),
                };
                return Ok(Some(Received {
                    pdu,
                    placed: Some(lent),
                }));
            }
            _ => return Ok(None),
        }
        // A header.
        if self.head_have < pdu::BHS_LEN {
            return Ok(None);
        }
        let (head_len, dlen) = pdu::header_lengths(&self.head[..], &self.limits)?;
        if self.head_have < head_len {
            return Ok(None);
        }
        debug_assert_eq!(self.head_have, head_len, "reads stop at the header's end");
        // Measured just above: decoded without measuring it again.
        let (bhs, ahs) = pdu::decode_measured_header(&self.head[..head_len], &self.limits)?;
        self.head_have = 0;
        if dlen == 0 {
            return Ok(Some(
                Pdu {
                    bhs,
                    ahs,
                    data: Bytes::new(),
                }
                .into(),
            ));
        }
        let pad = pdu::pad_len(dlen);
        let dd = if self.limits.digests.data { 4 } else { 0 };
        let lent = match &bhs {
            Bhs::DataIn(h) => place.lend(h, dlen as u32),
            _ => None,
        };
        self.body = match lent {
            Some(lent) => Body::Placed {
                bhs,
                ahs,
                head_len,
                lent,
                have: 0,
                tail: [0; 7],
                tail_len: pad + dd,
                tail_have: 0,
            },
            None => Body::Staged {
                bhs,
                ahs,
                head_len,
                dlen,
                buf: vec![0; dlen + pad + dd],
                have: 0,
            },
        };
        // The body may already be complete (an empty tail is never read).
        self.advance(place)
    }

    /// The error for the end of the stream now.
    fn eof(&self) -> TransportError {
        let dd = if self.limits.digests.data { 4 } else { 0 };
        let (have, need) = match &self.body {
            Body::Header if self.head_have == 0 => return TransportError::Closed,
            Body::Header => {
                let need = pdu::frame_length(&self.head[..self.head_have], &self.limits)
                    .ok()
                    .flatten()
                    .unwrap_or(pdu::BHS_LEN);
                (self.head_have, need)
            }
            Body::Staged {
                head_len,
                buf,
                have,
                ..
            } => (head_len + have, head_len + buf.len()),
            Body::Placed {
                head_len,
                lent,
                have,
                tail_have,
                ..
            } => {
                let dlen = lent.payload().len();
                (
                    head_len + have + tail_have,
                    head_len + dlen + pdu::pad_len(dlen) + dd,
                )
            }
        };
        TransportError::Truncated { have, need }
    }
}

/// Where the next read of a [`FrameReader`] goes: what the current PDU still lacks, and
/// after a data segment the next PDU's header (as far as its length
/// is known before it arrives). Returns the slices, how many, and how
/// many bytes they hold.
fn slices<'a>(
    head: &'a mut [u8; HEAD_MAX],
    head_have: usize,
    body: &'a mut Body,
    limits: &FrameLimits,
) -> ([IoSliceMut<'a>; 3], usize, usize) {
    let hd = if limits.digests.header { 4 } else { 0 };
    let head_want = if head_have < pdu::BHS_LEN {
        pdu::BHS_LEN + hd
    } else {
        // Known once the BHS is here (advance checked it).
        pdu::header_lengths(&head[..], limits)
            .map(|(h, _)| h)
            .unwrap_or(pdu::BHS_LEN + hd)
    };
    let head = &mut head[head_have..head_want.max(head_have)];
    let empty = || IoSliceMut::new(&mut []);
    let (iov, n) = match body {
        Body::Header => ([IoSliceMut::new(head), empty(), empty()], 1),
        Body::Staged { buf, have, .. } => (
            [
                IoSliceMut::new(&mut buf[*have..]),
                IoSliceMut::new(head),
                empty(),
            ],
            2,
        ),
        Body::Placed {
            lent,
            have,
            tail,
            tail_len,
            tail_have,
            ..
        } => (
            [
                IoSliceMut::new(&mut lent.dest()[*have..]),
                IoSliceMut::new(&mut tail[*tail_have..*tail_len]),
                IoSliceMut::new(head),
            ],
            3,
        ),
    };
    let want = iov.iter().map(|s| s.len()).sum();
    (iov, n, want)
}

/// Write frames with as few `writev` calls as the socket allows.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    w: &mut W,
    frames: &[WireFrame],
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(frames.len() * 3);
    for f in frames {
        slices.push(IoSlice::new(&f.head));
        if !f.data.is_empty() {
            slices.push(IoSlice::new(&f.data));
        }
        if !f.tail().is_empty() {
            slices.push(IoSlice::new(f.tail()));
        }
    }
    let mut bufs: &mut [IoSlice<'_>] = &mut slices;
    // Linux accepts at most 1024 iovecs per writev (IOV_MAX).
    while !bufs.is_empty() {
        let chunk = bufs.len().min(1024);
        let n = w.write_vectored(&bufs[..chunk]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "socket accepted no bytes",
            ));
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::NoPlacement;

    #[test]
    fn the_limit_known_before_connecting_is_this_one() {
        assert_eq!(
            crate::url::TransportKind::Tcp.max_transfer(),
            <TcpTransport as Transport>::MAX_TRANSFER
        );
    }
    use bytes::Bytes;
    use rlun_iscsi::proto::pdu::{Bhs, Digests, NopIn, RESERVED_TAG};

    fn nop(data: &'static [u8]) -> Pdu {
        Pdu::with_data(
            Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt: RESERVED_TAG,
                ttt: 1,
                stat_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 1,
            }),
            Bytes::from_static(data),
        )
    }

    #[tokio::test]
    async fn frames_written_vectored_are_read_back_whole() {
        let (a, b) = tokio::io::duplex(64);
        let digests = Digests {
            header: true,
            data: true,
        };
        let frames = vec![
            nop(b"hello").encode(digests),
            nop(b"").encode(digests),
            nop(b"x").encode(digests),
        ];
        let writer = tokio::spawn(async move {
            let mut a = a;
            write_frames(&mut a, &frames).await.unwrap();
        });
        let mut r = FrameReader::new(
            Stream(b),
            FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        );
        assert_eq!(
            r.read_pdu(&mut NoPlacement).await.unwrap().pdu,
            nop(b"hello")
        );
        assert_eq!(r.read_pdu(&mut NoPlacement).await.unwrap().pdu, nop(b""));
        assert_eq!(r.read_pdu(&mut NoPlacement).await.unwrap().pdu, nop(b"x"));
        writer.await.unwrap();
        assert!(matches!(
            r.read_pdu(&mut NoPlacement).await,
            Err(TransportError::Closed)
        ));
    }

    #[tokio::test]
    async fn stream_ending_mid_pdu_is_truncated_error() {
        let bytes = nop(b"hello").encode(Digests::default()).to_vec();
        let mut r = FrameReader::new(Stream(&bytes[..30]), FrameLimits::default());
        match r.read_pdu(&mut NoPlacement).await {
            Err(TransportError::Truncated { have: 30, need: 48 }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn tcp_transport_halves_carry_pdus_both_ways_and_the_writer_task_closes_on_drop() {
        use crate::transport::{FrameEncoder, FrameWriter, PduReader, Transport};
        use tokio::sync::{mpsc, oneshot};

        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (t, accepted) = tokio::join!(
            TcpTransport::connect("127.0.0.1", port, Duration::from_secs(2)),
            l.accept()
        );
        let (mut reader, writer, mut encoder) = t.unwrap().split(FrameLimits::default());
        let (peer, _) = accepted.unwrap();
        let (peer_rd, mut peer_wr) = peer.into_split();

        // Receive half: what the peer writes comes out whole, in order.
        let frames = [nop(b"in-1"), nop(b"")].map(|p| p.encode(Digests::default()));
        write_frames(&mut peer_wr, &frames).await.unwrap();
        assert_eq!(
            PduReader::read_pdu(&mut reader, &mut NoPlacement)
                .await
                .unwrap()
                .pdu,
            nop(b"in-1")
        );
        let second = match PduReader::try_next(&mut reader, &mut NoPlacement).unwrap() {
            Some(p) => p.pdu,
            None => {
                PduReader::read_pdu(&mut reader, &mut NoPlacement)
                    .await
                    .unwrap()
                    .pdu
            }
        };
        assert_eq!(second, nop(b""));

        // Send half: batches through the writer task, then the end.
        let (tx, rx) = mpsc::unbounded_channel();
        let (err_tx, err_rx) = oneshot::channel();
        let task = tokio::spawn(writer.run(rx, err_tx));
        let mut enc = |p: Pdu| encoder.encode(p.into()).unwrap().frame;
        tx.send(vec![enc(nop(b"out-1"))]).unwrap();
        tx.send(vec![enc(nop(b"out-2")), enc(nop(b"out-3"))])
            .unwrap();
        drop(tx);
        let mut peer_reader = FrameReader::new(Stream(peer_rd), FrameLimits::default());
        for want in [&b"out-1"[..], b"out-2", b"out-3"] {
            assert_eq!(
                peer_reader
                    .read_pdu(&mut NoPlacement)
                    .await
                    .unwrap()
                    .pdu
                    .data,
                want
            );
        }
        assert!(matches!(
            peer_reader.read_pdu(&mut NoPlacement).await,
            Err(TransportError::Closed)
        ));
        task.await.unwrap();
        assert!(err_rx.await.is_err(), "no write error was reported");
    }

    #[tokio::test]
    async fn connect_to_closed_port_fails_fast() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let err = connect("127.0.0.1", port, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err}");
    }

    // --- In-place receive: the reader with a real protocol core as its
    // `Placement`, fed encoded PDUs in small pieces. -----------------------

    mod in_place {
        use super::*;
        use rlun_iscsi::proto::connection::{
            CommandRequest, Connection, Event, FeatureParams, ProtocolError, SequenceNumbers,
        };
        use rlun_iscsi::proto::pdu::{DataIn, TaskAttr};
        use rlun_iscsi::testing::data_in;
        use std::time::Instant;
        use tokio::io::AsyncWriteExt;

        /// Data-In payloads go straight into the core's read buffers.
        struct Core<'a>(&'a mut Connection);

        impl Placement for Core<'_> {
            fn lend(&mut self, h: &DataIn, len: u32) -> Option<Lent> {
                self.0.lend_read_buffer(h, len)
            }
        }

        fn core() -> Connection {
            Connection::new(
                FeatureParams::default(),
                SequenceNumbers {
                    cmd_sn: 1,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 64,
                    exp_stat_sn: 1,
                },
            )
        }

        /// Submit a read of `len` bytes; its ITT.
        fn submit_read(s: &mut Connection, len: u32) -> u32 {
            s.submit(CommandRequest {
                lun: [0; 8],
                cdb: [0x28; 16],
                data_out: Bytes::new(),
                read_len: len,
                attr: TaskAttr::Simple,
            });
            let mut itt = None;
            while let Some(t) = s.poll_transmit() {
                if let Bhs::ScsiCommand(c) = t.pdu.bhs {
                    itt = Some(c.itt);
                }
            }
            itt.expect("command sent")
        }

        fn pattern(len: usize, seed: u8) -> Vec<u8> {
            (0..len)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect()
        }

        fn limits(header: bool, data: bool) -> FrameLimits {
            FrameLimits {
                digests: Digests { header, data },
                max_data_segment: 262144,
            }
        }

        /// Write `frames` to a stream `piece` bytes at a time.
        fn peer(
            frames: Vec<Vec<u8>>,
            piece: usize,
        ) -> (
            FrameReader<Stream<tokio::io::DuplexStream>>,
            tokio::task::JoinHandle<()>,
        ) {
            let (mut a, b) = tokio::io::duplex(piece);
            let task = tokio::spawn(async move {
                for f in frames {
                    for chunk in f.chunks(piece) {
                        if a.write_all(chunk).await.is_err() {
                            return;
                        }
                    }
                }
            });
            (FrameReader::new(Stream(b), FrameLimits::default()), task)
        }

        /// Read PDUs into `s` until `n` events came out; the events.
        async fn run(
            r: &mut FrameReader<Stream<tokio::io::DuplexStream>>,
            s: &mut Connection,
            n: usize,
        ) -> Result<Vec<Event>, ProtocolError> {
            let mut events = Vec::new();
            while events.len() < n {
                let got = r.read_pdu(&mut Core(s)).await.expect("a PDU");
                match got.placed {
                    Some(lent) => s.handle_placed(got.pdu, lent, Instant::now())?,
                    None => s.handle_pdu(got.pdu, Instant::now())?,
                }
                events.extend(std::iter::from_fn(|| s.poll_event()));
            }
            Ok(events)
        }

        #[tokio::test]
        async fn payloads_split_across_many_reads_land_in_place_with_and_without_digests() {
            for (header, data) in [(false, false), (true, false), (false, true), (true, true)] {
                for piece in [1, 7, 4096, 1 << 20] {
                    let mut s = core();
                    // 5001 bytes: the last segment needs padding.
                    let a = submit_read(&mut s, 5001);
                    let b = submit_read(&mut s, 8192);
                    let (pa, pb) = (pattern(5001, 1), pattern(8192, 2));
                    let d = Digests { header, data };
                    let frames = vec![
                        data_in(a, 0, 0, &pa[..3000], false).encode(d).to_vec(),
                        data_in(b, 0, 0, &pb[..4096], false).encode(d).to_vec(),
                        data_in(a, 1, 3000, &pa[3000..], true).encode(d).to_vec(),
                        data_in(b, 1, 4096, &pb[4096..], true).encode(d).to_vec(),
                    ];
                    let (mut r, task) = peer(frames, piece);
                    r.set_limits(limits(header, data));
                    let events = run(&mut r, &mut s, 2).await.unwrap();
                    let results: Vec<Bytes> = events
                        .into_iter()
                        .map(|e| match e {
                            Event::Command { result, .. } => result.unwrap().data,
                            other => panic!("{other:?}"),
                        })
                        .collect();
                    assert_eq!(results, vec![Bytes::from(pa), Bytes::from(pb)]);
                    assert_eq!(s.copied_bytes(), 0, "every payload was read in place");
                    task.await.unwrap();
                }
            }
        }

        #[tokio::test]
        async fn a_bad_data_digest_over_a_placed_payload_is_an_error() {
            let mut s = core();
            let a = submit_read(&mut s, 4096);
            let d = Digests {
                header: false,
                data: true,
            };
            let mut frame = data_in(a, 0, 0, &pattern(4096, 3), true).encode(d).to_vec();
            frame[100] ^= 0x40;
            let (mut r, _task) = peer(vec![frame], 512);
            r.set_limits(limits(false, true));
            match r.read_pdu(&mut Core(&mut s)).await {
                Err(TransportError::Pdu(pdu::PduError::DataDigest { .. })) => {}
                other => panic!("{other:?}"),
            }
        }

        #[tokio::test]
        async fn data_in_for_an_unknown_or_finished_task_or_past_the_buffer_writes_nowhere() {
            let mut s = core();
            let a = submit_read(&mut s, 4096);
            let b = submit_read(&mut s, 4096);
            let frames = vec![
                // Completes `a`.
                data_in(a, 0, 0, &pattern(4096, 4), true)
                    .encode(Digests::default())
                    .to_vec(),
                // `a` again: finished.
                data_in(a, 1, 0, &pattern(512, 5), false)
                    .encode(Digests::default())
                    .to_vec(),
                // A tag never used.
                data_in(0x7777, 0, 0, &pattern(512, 6), false)
                    .encode(Digests::default())
                    .to_vec(),
                // `b` past its 4096 bytes; and at a wrong offset.
                data_in(b, 0, 4000, &pattern(512, 7), false)
                    .encode(Digests::default())
                    .to_vec(),
                data_in(b, 0, 8, &pattern(512, 8), false)
                    .encode(Digests::default())
                    .to_vec(),
            ];
            let (mut r, _task) = peer(frames, 100);
            let first = run(&mut r, &mut s, 1).await.unwrap();
            assert!(matches!(&first[..], [Event::Command { result: Ok(_), .. }]));
            let mut errors = Vec::new();
            for _ in 0..4 {
                let got = r.read_pdu(&mut Core(&mut s)).await.unwrap();
                assert!(got.placed.is_none(), "no buffer lent for a bad header");
                assert_eq!(got.pdu.data.len(), 512, "the payload was read into the PDU");
                errors.push(s.handle_pdu(got.pdu, Instant::now()).unwrap_err());
            }
            assert!(
                matches!(
                    &errors[..],
                    [
                        ProtocolError::UnknownTask { .. },
                        ProtocolError::UnknownTask { .. },
                        ProtocolError::DataOverrun { .. },
                        ProtocolError::DataOffset { .. },
                    ]
                ),
                "{errors:?}"
            );
            assert_eq!(
                s.copied_bytes(),
                0,
                "no byte of a refused payload reached a buffer"
            );
            // `b` is untouched and still completes with the right bytes.
            let pb = pattern(4096, 9);
            let (mut r, _task) = peer(
                vec![data_in(b, 0, 0, &pb, true)
                    .encode(Digests::default())
                    .to_vec()],
                100,
            );
            let done = run(&mut r, &mut s, 1).await.unwrap();
            match &done[..] {
                [Event::Command {
                    result: Ok(res), ..
                }] => assert_eq!(res.data, pb),
                other => panic!("{other:?}"),
            }
        }

        #[tokio::test]
        async fn a_command_that_fails_while_its_payload_arrives_never_gets_the_late_bytes() {
            let mut s = core();
            let a = submit_read(&mut s, 8192);
            let frame = data_in(a, 0, 0, &pattern(8192, 10), true)
                .encode(Digests::default())
                .to_vec();
            let (mut a_side, b_side) = tokio::io::duplex(1 << 16);
            let mut r = FrameReader::new(Stream(b_side), FrameLimits::default());
            // Half the payload arrives: the reader holds the lent buffer.
            a_side.write_all(&frame[..4096]).await.unwrap();
            assert!(r.try_next(&mut Core(&mut s)).unwrap().is_none());
            // The command is given up meanwhile (connection reset, abort):
            // its caller gets an error and no buffer.
            s.fail_all("given up");
            match s.poll_event() {
                Some(Event::Command { result: Err(_), .. }) => {}
                other => panic!("{other:?}"),
            }
            // The rest of the payload lands in the lent buffer, which the
            // core then drops: the command it was lent by is gone.
            a_side.write_all(&frame[4096..]).await.unwrap();
            let got = r.read_pdu(&mut Core(&mut s)).await.unwrap();
            let lent = got.placed.expect("read in place");
            assert!(matches!(
                s.handle_placed(got.pdu, lent, Instant::now()),
                Err(ProtocolError::UnknownTask { .. })
            ));
            assert!(s.poll_event().is_none(), "nothing more reaches a caller");
        }
    }
}
