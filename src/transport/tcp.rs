//! iSCSI over TCP (RFC 7143 §4.1): connect with a timeout, frame PDUs out of
//! the byte stream, and write PDUs with vectored writes so data segments are
//! never copied into a send buffer.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::{DataMovement, FrameWriter, PduReader, Transmit, Transport, TransportKind};
use crate::proto::pdu::{self, Digests, FrameLimits, Pdu, WireFrame};

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
    const KIND: TransportKind = TransportKind::Tcp;
    const DATA_MOVEMENT: DataMovement = DataMovement::InBand;
    type Reader = FrameReader<OwnedReadHalf>;
    type Writer = TcpWriter;

    async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, TransportError> {
        Ok(TcpTransport {
            stream: connect(host, port, timeout).await?,
        })
    }

    fn split(self, limits: FrameLimits) -> (Self::Reader, Self::Writer) {
        let (rd, wr) = self.stream.into_split();
        (FrameReader::new(rd, limits), TcpWriter { wr })
    }
}

/// The sending half of a TCP connection.
pub struct TcpWriter {
    wr: OwnedWriteHalf,
}

impl FrameWriter for TcpWriter {
    type Frame = WireFrame;

    fn encode(tx: Transmit, digests: Digests) -> WireFrame {
        // In-band data movement: the buffers a direct transport would
        // register are already in the PDUs' data segments.
        tx.pdu.encode(digests)
    }

    async fn write_frames(&mut self, frames: &[WireFrame]) -> io::Result<()> {
        write_frames(&mut self.wr, frames).await
    }

    async fn shutdown(&mut self) {
        let _ = AsyncWriteExt::shutdown(&mut self.wr).await;
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> PduReader for FrameReader<R> {
    fn set_limits(&mut self, limits: FrameLimits) {
        FrameReader::set_limits(self, limits)
    }

    async fn read_pdu(&mut self) -> Result<Pdu, TransportError> {
        FrameReader::read_pdu(self).await
    }

    fn try_next(&mut self) -> Result<Option<Pdu>, TransportError> {
        FrameReader::try_next(self)
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

/// Reads whole PDUs from a byte stream. Data segments come out as zero-copy
/// slices of the receive buffer.
pub struct FrameReader<R> {
    rd: R,
    buf: BytesMut,
    limits: FrameLimits,
}

const READ_CHUNK: usize = 512 * 1024;

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(rd: R, limits: FrameLimits) -> Self {
        FrameReader {
            rd,
            buf: BytesMut::with_capacity(READ_CHUNK),
            limits,
        }
    }

    pub fn set_limits(&mut self, limits: FrameLimits) {
        self.limits = limits;
    }

    /// A PDU that is already wholly buffered, without reading the socket.
    pub fn try_next(&mut self) -> Result<Option<Pdu>, TransportError> {
        match pdu::frame_length(&self.buf, &self.limits)? {
            Some(n) if self.buf.len() >= n => {
                let frame = self.buf.split_to(n).freeze();
                Ok(Some(pdu::decode(frame, &self.limits)?))
            }
            _ => Ok(None),
        }
    }

    /// Next complete PDU. `Err(Closed)` on a clean end of stream between PDUs.
    ///
    /// Cancel-safe: all state lives in `self`, and the only await point is a
    /// cancel-safe `read_buf`, so it can sit in a `select!`.
    pub async fn read_pdu(&mut self) -> Result<Pdu, TransportError> {
        loop {
            if let Some(n) = pdu::frame_length(&self.buf, &self.limits)? {
                if self.buf.len() >= n {
                    let frame = self.buf.split_to(n).freeze();
                    return Ok(pdu::decode(frame, &self.limits)?);
                }
                self.reserve(n - self.buf.len());
            } else {
                self.reserve(pdu::BHS_LEN);
            }
            let got = self.rd.read_buf(&mut self.buf).await?;
            if got == 0 {
                if self.buf.is_empty() {
                    return Err(TransportError::Closed);
                }
                let need = pdu::frame_length(&self.buf, &self.limits)?.unwrap_or(pdu::BHS_LEN);
                return Err(TransportError::Truncated {
                    have: self.buf.len(),
                    need,
                });
            }
        }
    }

    fn reserve(&mut self, need: usize) {
        if self.buf.capacity() - self.buf.len() < need {
            self.buf.reserve(need.max(READ_CHUNK));
        }
    }
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
    use crate::proto::pdu::{Bhs, Digests, NopIn, RESERVED_TAG};
    use bytes::Bytes;

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
            b,
            FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        );
        assert_eq!(r.read_pdu().await.unwrap(), nop(b"hello"));
        assert_eq!(r.read_pdu().await.unwrap(), nop(b""));
        assert_eq!(r.read_pdu().await.unwrap(), nop(b"x"));
        writer.await.unwrap();
        assert!(matches!(r.read_pdu().await, Err(TransportError::Closed)));
    }

    #[tokio::test]
    async fn stream_ending_mid_pdu_is_truncated_error() {
        let bytes = nop(b"hello").encode(Digests::default()).to_vec();
        let mut r = FrameReader::new(&bytes[..30], FrameLimits::default());
        match r.read_pdu().await {
            Err(TransportError::Truncated { have: 30, need: 48 }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn tcp_transport_halves_carry_pdus_both_ways_and_the_writer_task_closes_on_drop() {
        use crate::transport::{FrameWriter, PduReader, Transport};
        use tokio::sync::{mpsc, oneshot};

        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (t, accepted) = tokio::join!(
            TcpTransport::connect("127.0.0.1", port, Duration::from_secs(2)),
            l.accept()
        );
        let (mut reader, writer) = t.unwrap().split(FrameLimits::default());
        let (peer, _) = accepted.unwrap();
        let (peer_rd, mut peer_wr) = peer.into_split();

        // Receive half: what the peer writes comes out whole, in order.
        let frames = [nop(b"in-1"), nop(b"")].map(|p| p.encode(Digests::default()));
        write_frames(&mut peer_wr, &frames).await.unwrap();
        assert_eq!(
            PduReader::read_pdu(&mut reader).await.unwrap(),
            nop(b"in-1")
        );
        let second = match PduReader::try_next(&mut reader).unwrap() {
            Some(p) => p,
            None => PduReader::read_pdu(&mut reader).await.unwrap(),
        };
        assert_eq!(second, nop(b""));

        // Send half: batches through the writer task, then the end.
        let (tx, rx) = mpsc::unbounded_channel();
        let (err_tx, err_rx) = oneshot::channel();
        let task = tokio::spawn(writer.run(rx, err_tx));
        let enc = |p: Pdu| TcpWriter::encode(p.into(), Digests::default());
        tx.send(vec![enc(nop(b"out-1"))]).unwrap();
        tx.send(vec![enc(nop(b"out-2")), enc(nop(b"out-3"))])
            .unwrap();
        drop(tx);
        let mut peer_reader = FrameReader::new(peer_rd, FrameLimits::default());
        for want in [&b"out-1"[..], b"out-2", b"out-3"] {
            assert_eq!(peer_reader.read_pdu().await.unwrap().data, want);
        }
        assert!(matches!(
            peer_reader.read_pdu().await,
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
}
