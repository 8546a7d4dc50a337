//! The NBD server: connections over TCP, Unix sockets or TLS, driven by the
//! sans-IO [`proto`](super::proto) and served from one shared
//! [`LunDevice`] per export.
//!
//! # One connection
//!
//! The handshake runs [`Handshake`] over the socket (upgrading it to TLS on
//! `NBD_OPT_STARTTLS`). In the transmission phase the connection's task
//! reads request headers (and WRITE payloads) and runs each request's
//! command on the export's [`LunDevice`]. A READ starts with
//! [`Export::read_now`]: a cache hit is copied out and its encoded reply
//! handed to the writer task right there, with no future, task or page
//! list allocated (and its data carved from a per-thread arena). Any other
//! request, and a READ that must wait, becomes a future polled once in the
//! connection task — if it completes at once (a refusal) its reply goes
//! out straight away — and otherwise continues in the connection's one
//! request task ([`InFlight`]: no task of its own).
//! Replies go out in completion order while many requests are in flight.
//!
//! # Large requests
//!
//! Every READ and WRITE length a request can carry is accepted, and the
//! `NBD_INFO_BLOCK_SIZE` maximum says so ([`MAX_PAYLOAD`], 0xffffffff,
//! the spec's "no fixed limit"; nbd-server has none either). Up to
//! [`big::STREAM_ABOVE`] (32 MiB) a request is handled as above, from one
//! buffer; longer ones are streamed through the export in
//! [`big::PIECE`] (4 MiB) pieces — a WRITE received and written piece by
//! piece, a READ read and sent piece by piece — see [`big`] for the
//! details (what a failure in the middle does, `NBD_CMD_FLAG_DF`).
//!
//! # Memory bound
//!
//! Each connection holds at most [`Limits::max_requests`] requests (default
//! 128) and [`Limits::max_bytes`] bytes of payload (default 64 MiB: WRITE
//! data received, READ data to send) between reading a request and writing
//! its reply. The reader takes the permits before it reads a WRITE's
//! payload and the reply gives them back once it is written, so a client
//! that never reads its replies stops being read from (TCP pushes back)
//! instead of growing the server; other connections are unaffected. A
//! streamed request (longer than 32 MiB) counts as the
//! [`big::STREAM_COST`] (12 MiB) it holds at most, so the bound holds
//! whatever the requests' lengths. One request larger than `max_bytes`
//! waits for the whole budget and runs alone. Beyond that a connection
//! keeps a 64 KiB read buffer; replies are
//! written from their own buffers (see below), with at most a 128 KiB
//! staging buffer for a TLS stream. The socket's kernel send buffer is
//! raised to [`SEND_BUFFER`] (kernel memory, capped by `wmem_max`).
//!
//! # Replies on the wire
//!
//! The writer task gathers every reply already queued (up to 64 replies or
//! 4 MiB) and writes the batch with one vectored write where the stream
//! allows it: each reply's header and then its data, READ data straight
//! from the buffer the device returned, never copied into a write buffer.
//! A partial write (a slow client, a full socket buffer) continues where it
//! stopped. A TLS stream, which takes no vectored writes, gets short pieces
//! copied together and long ones written as they are.
//!
//! # Disconnects
//!
//! A client that disconnects (or breaks the protocol) mid-stream: requests
//! whose header and payload were read in full run to completion (their
//! replies are dropped); a WRITE whose payload did not arrive in full is
//! never started, so nothing is half-applied — except a streamed WRITE,
//! whose pieces received before are written (its range, which got no
//! reply, then holds old and new data). Other connections carry on.
//!
//! # Shutdown
//!
//! When the server's shutdown signal fires, connections stop reading
//! requests, let the requests in flight finish and send their replies
//! (waiting at most [`Limits::drain_timeout`] for a client that does not
//! read), then close; the caller then flushes the devices.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use super::proto::{
    self, cflag, err, tflag, Command, ExportInfo, Handshake, HandshakeError, HandshakeEvent,
    Negotiated, Request, TlsMode, Transmission,
};
use crate::export::inflight::InFlight;
use crate::export::{Export, ExportError, ExportRead, ExportSet, LunBackend, ZeroMode};

pub mod big;
mod writer;

use big::read_exact_bytes;
use writer::{failure, read_reply, write_replies, Reply};

/// Largest READ or WRITE payload accepted and advertised
/// (`NBD_INFO_BLOCK_SIZE` maximum): any length a request can carry, the
/// spec's "no fixed limit" (nbd-server has none either). Requests longer
/// than [`big::STREAM_ABOVE`] are streamed in pieces ([`big`]).
pub const MAX_PAYLOAD: u32 = u32::MAX;

/// Send buffer asked for on each connection's socket (the kernel makes it
/// twice that, capped by `net.core.wmem_max`; 425 984 bytes on a stock
/// kernel): with the default 208 KiB every 256 KiB READ reply (nbdcopy's
/// request size) took at least two writes and a wait for the client in
/// between; with this a batch of replies goes out in one.
pub const SEND_BUFFER: usize = 1 << 20;

/// Ask for [`SEND_BUFFER`] on a connection's socket (TCP or Unix); a
/// kernel that refuses only leaves the default.
pub fn enlarge_send_buffer<S: std::os::fd::AsFd>(sock: &S) {
    if let Err(e) = socket2::SockRef::from(sock).set_send_buffer_size(SEND_BUFFER) {
        debug!(error = %e, "SO_SNDBUF not raised");
    }
}

/// Per-connection limits; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_requests: usize,
    pub max_bytes: usize,
    /// Longest wait for a client to finish the handshake.
    pub handshake_timeout: Duration,
    /// Longest wait for a client to take its last replies at shutdown.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_requests: 128,
            max_bytes: 64 << 20,
            handshake_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// What the handshake tells clients about `export` (its size now, the
/// transmission flags and block sizes that follow from the LUN).
pub fn export_info<B: LunBackend>(export: &Export<B>, description: String) -> ExportInfo {
    let i = export.info();
    let mut flags = tflag::HAS_FLAGS
        | tflag::SEND_FLUSH
        | tflag::SEND_FUA
        | tflag::SEND_WRITE_ZEROES
        | tflag::SEND_CACHE
        | tflag::CAN_MULTI_CONN;
    if i.read_only {
        flags |= tflag::READ_ONLY;
    }
    if i.can_trim {
        flags |= tflag::SEND_TRIM;
    }
    if i.fast_zero {
        flags |= tflag::SEND_FAST_ZERO;
    }
    let preferred = i.preferred_size.max(4096).next_power_of_two();
    ExportInfo {
        name: export.name().to_string(),
        description,
        size: i.size,
        flags,
        block: proto::BlockSizes {
            minimum: i.block_size.min(65536),
            preferred,
            maximum: MAX_PAYLOAD,
        },
    }
}

/// Errors that end one connection.
#[derive(Debug, Error)]
pub enum ConnError {
    #[error("connection I/O failed")]
    Io(#[from] io::Error),
    #[error("handshake failed")]
    Handshake(#[from] HandshakeError),
    #[error("the client did not finish the handshake within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("TLS handshake failed")]
    Tls(#[source] io::Error),
    /// A TLS handshake that failed for a reason the operator can act on.
    #[error("TLS handshake refused: {reason}")]
    TlsRefused {
        reason: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the client broke the transmission protocol: {0}")]
    Protocol(String),
    /// A streamed READ failed after its simple reply's header was sent.
    #[error(
        "a READ failed after its reply had begun; the connection was closed (NBD hard disconnect)"
    )]
    ReadAborted,
    /// The task that runs the connection's requests ended early: a
    /// request panicked (a bug, logged with the panic). The connection is
    /// closed so that its client does not wait for replies forever.
    #[error("the connection's requests stopped running (a bug: see the panic logged before)")]
    RequestsGone,
}

/// Why a TLS handshake failed, in the words an operator acts on, when it
/// was the client's certificate: the client itself only sees a fatal alert.
fn tls_refusal(e: &io::Error) -> Option<&'static str> {
    use tokio_rustls::rustls::{CertificateError, Error};
    let error = e.get_ref()?.downcast_ref::<Error>()?;
    Some(match error {
        Error::NoCertificatesPresented => {
            "the client sent no certificate, and --tls-ca requires one"
        }
        Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the client certificate has expired"
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the client certificate is not valid yet"
            }
            CertificateError::UnknownIssuer => {
                "the client certificate is not signed by a CA of --tls-ca"
            }
            CertificateError::Revoked => "the client certificate is revoked",
            // webpki refuses X.509 v1 and v2 certificates (no extensions).
            CertificateError::Other(other)
                if format!("{other:?}").contains("UnsupportedCertVersion") =>
            {
                "client certificate must be X.509 v3 (it is v1 or v2: sign it with \
                 extensions, e.g. `openssl x509 -req -extfile` with basicConstraints=CA:FALSE)"
            }
            _ => return None,
        },
        _ => return None,
    })
}

/// A byte stream a connection runs on (TCP, Unix, or TLS over either).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// The description of an export for `NBD_OPT_LIST` and
/// `NBD_INFO_DESCRIPTION`.
pub type Describe<B> = Arc<dyn Fn(&Export<B>) -> String + Send + Sync>;

/// The exports and settings shared by every connection.
pub struct Server<B: LunBackend> {
    exports: Arc<ExportSet<B>>,
    describe: Describe<B>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
}

impl<B: LunBackend> Server<B> {
    /// A server for `exports` (`describe` gives the text `NBD_OPT_LIST` and
    /// `NBD_INFO_DESCRIPTION` show for each); connections stop reading
    /// requests when `shutdown` turns true. Exports the set gains or loses
    /// while it serves are offered to, or refused to, the next clients.
    pub fn new(
        exports: Arc<ExportSet<B>>,
        describe: Describe<B>,
        tls: Option<tokio_rustls::TlsAcceptor>,
        limits: Limits,
        shutdown: watch::Receiver<bool>,
    ) -> Server<B> {
        Server {
            exports,
            describe,
            tls,
            limits,
            shutdown,
        }
    }

    /// What a new connection is told: the exports as they are now (a LUN
    /// whose capacity changed is re-read first), and the exports
    /// themselves in the same order.
    async fn infos(&self) -> (Arc<[Arc<Export<B>>]>, Arc<[ExportInfo]>) {
        let exports = self.exports.exports();
        let mut v = Vec::new();
        for e in exports.iter() {
            e.refresh_capacity().await;
            v.push(export_info(e, (self.describe)(e)));
        }
        (exports, v.into())
    }

    /// Serve one client until it disconnects or the server shuts down.
    pub async fn serve<S: Stream + 'static>(
        self: Arc<Self>,
        stream: S,
        peer: &str,
    ) -> Result<(), ConnError> {
        let stream: Box<dyn Stream> = Box::new(stream);
        let mut buf = BytesMut::with_capacity(64 << 10);
        let (exports, infos) = self.infos().await;
        let timeout = self.limits.handshake_timeout;
        let (stream, negotiated) =
            match tokio::time::timeout(timeout, self.handshake(stream, &mut buf, &infos)).await {
                Ok(Ok(Some(done))) => done,
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(ConnError::HandshakeTimeout(timeout)),
            };
        let info = &infos[negotiated.export];
        info!(
            peer,
            export = %info.name,
            structured = negotiated.structured,
            block_sizes = negotiated.block_sizes_agreed,
            "NBD client connected"
        );
        let negotiated_export = negotiated.export;
        let tx = Transmission {
            size: info.size,
            flags: negotiated.flags,
            block: info.block,
            negotiated,
        };
        let export = exports[negotiated_export].clone();
        // A client that negotiated keeps the size it was told.
        let r = self
            .clone()
            .transmission(stream, buf, tx, export, false)
            .await;
        info!(peer, "NBD client disconnected");
        r
    }

    /// What a client that skips the handshake is told about `export`:
    /// for the kernel's NBD client, whose size, block size and flags
    /// `rlun attach` passes over netlink instead.
    pub async fn preset_info(&self, export: &Export<B>) -> ExportInfo {
        export.refresh_capacity().await;
        export_info(export, (self.describe)(export))
    }

    /// Serve a connection already past negotiation (the kernel's NBD
    /// client on a socketpair): `export`, as `info` ([`Server::preset_info`])
    /// describes it, simple replies, the block
    /// sizes the kernel was given. Requests are handled exactly as after a
    /// handshake.
    pub async fn serve_negotiated<S: Stream + 'static>(
        self: Arc<Self>,
        stream: S,
        export: Arc<Export<B>>,
        info: &ExportInfo,
        peer: &str,
    ) -> Result<(), ConnError> {
        let flags = info.flags | tflag::HAS_FLAGS;
        let tx = Transmission {
            size: info.size,
            flags,
            block: info.block,
            negotiated: Negotiated {
                export: 0,
                structured: false,
                allocation: None,
                block_sizes_agreed: true,
                flags,
            },
        };
        info!(peer, export = %info.name, "NBD connection without handshake");
        let r = self
            .clone()
            .transmission(
                Box::new(stream),
                BytesMut::with_capacity(64 << 10),
                tx,
                export,
                true,
            )
            .await;
        info!(peer, "NBD connection closed");
        r
    }

    /// Run the handshake; `None` when the client aborted.
    async fn handshake(
        &self,
        mut stream: Box<dyn Stream>,
        buf: &mut BytesMut,
        infos: &Arc<[ExportInfo]>,
    ) -> Result<Option<(Box<dyn Stream>, Negotiated)>, ConnError> {
        let mode = if self.tls.is_some() {
            TlsMode::Required
        } else {
            TlsMode::Off
        };
        let mut hs = Handshake::new(infos.clone(), mode);
        let mut shutdown = self.shutdown.clone();
        loop {
            let ev = hs.handle_input(buf)?;
            let out = hs.take_output();
            if !out.is_empty() {
                let r = async {
                    stream.write_all(&out).await?;
                    stream.flush().await
                }
                .await;
                // A client may close right after NBD_OPT_ABORT without
                // reading the ACK; the spec asks servers to take that well.
                if ev != HandshakeEvent::Abort {
                    r?;
                }
            }
            match ev {
                HandshakeEvent::NeedInput => {
                    tokio::select! {
                        n = stream.read_buf(buf) => {
                            if n? == 0 {
                                return Err(ConnError::Io(io::ErrorKind::UnexpectedEof.into()));
                            }
                        }
                        _ = shutdown.wait_for(|s| *s) => return Ok(None),
                    }
                }
                HandshakeEvent::StartTls => {
                    let acceptor = self.tls.clone().expect("StartTls only in TLS mode");
                    let tls = acceptor
                        .accept(stream)
                        .await
                        .map_err(|e| match tls_refusal(&e) {
                            Some(reason) => ConnError::TlsRefused { reason, source: e },
                            None => ConnError::Tls(e),
                        })?;
                    stream = Box::new(tls);
                    hs.tls_started();
                }
                HandshakeEvent::Abort => {
                    let _ = stream.shutdown().await;
                    return Ok(None);
                }
                HandshakeEvent::Transmission(n) => return Ok(Some((stream, n))),
            }
        }
    }

    async fn transmission(
        self: Arc<Self>,
        stream: Box<dyn Stream>,
        mut buf: BytesMut,
        tx: Transmission,
        export: Arc<Export<B>>,
        live_size: bool,
    ) -> Result<(), ConnError> {
        let (mut rd, wr) = tokio::io::split(stream);
        let (reply_tx, reply_rx) = mpsc::unbounded_channel::<Reply>();
        let writer = tokio::spawn(write_replies(wr, reply_rx));
        let (stop_tx, stop) = watch::channel(false);
        let outbox = big::Outbox {
            replies: reply_tx.clone(),
            stop,
        };
        let requests = Arc::new(Semaphore::new(self.limits.max_requests));
        let bytes = Arc::new(Semaphore::new(self.limits.max_bytes));
        let tx = Arc::new(tx);
        let tasks = InFlight::start();
        let mut shutdown = self.shutdown.clone();
        let result = loop {
            if *shutdown.borrow() {
                break Ok(());
            }
            if reply_tx.is_closed() {
                break Err(ConnError::ReadAborted);
            }
            // A request already in the buffer (a client pipelining many
            // per write) needs no select with the shutdown signal.
            let r = match buffered_request(&mut buf) {
                Ok(Some(req)) => Ok(Some(req)),
                Err(e) => Err(e),
                Ok(None) => tokio::select! {
                    r = read_request(&mut rd, &mut buf) => r,
                    _ = shutdown.wait_for(|s| *s) => break Ok(()),
                    _ = reply_tx.closed() => break Err(ConnError::ReadAborted),
                },
            };
            let req = match r {
                Ok(Some(req)) => req,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            };
            if req.command == Command::Disc {
                debug!("NBD_CMD_DISC");
                break Ok(());
            }
            let payload = if req.command == Command::Write {
                req.length as usize
            } else {
                0
            };
            let check = if live_size {
                tx.check_within(&req, export.size())
            } else {
                tx.check(&req)
            };
            let check = check.and_then(|()| big::check_unfragmented(&req));
            // Every request, refused ones too, holds a request permit until
            // its reply is written: that bounds the replies queued for a
            // client that does not read them.
            let cost = match (check, req.command) {
                (Ok(()), Command::Read | Command::Write) => {
                    big::cost(&req).min(self.limits.max_bytes)
                }
                _ => 0,
            };
            let permits = match try_acquire(&requests, &bytes, cost) {
                Some(p) => p,
                None => tokio::select! {
                    p = acquire(&requests, &bytes, cost) => p,
                    _ = shutdown.wait_for(|s| *s) => break Ok(()),
                },
            };
            if let Err(code) = check {
                // Skip a refused WRITE's payload without keeping it.
                if let Err(e) = discard_exact(&mut rd, &mut buf, payload).await {
                    break Err(e);
                }
                let mut head = BytesMut::new();
                proto::put_error_reply(
                    &mut head,
                    tx.negotiated.structured,
                    req.cookie,
                    code,
                    &refusal(&req, code),
                );
                let _ = reply_tx.send(Reply {
                    permits: Some(permits),
                    ..Reply::new(head, Bytes::new())
                });
                continue;
            }
            if big::streamed(&req) {
                let export = export.clone();
                let structured = tx.negotiated.structured;
                let (rd, buf) = (&mut rd, &mut buf);
                match big::start(export, rd, buf, req, structured, permits, &outbox).await {
                    Ok(task) => {
                        if tasks.push(task).is_err() {
                            break Err(ConnError::RequestsGone);
                        }
                    }
                    Err(e) => break Err(e.into()),
                };
                continue;
            }
            let data = if payload > 0 {
                match read_exact_bytes(&mut rd, &mut buf, payload).await {
                    Ok(d) => d,
                    Err(e) => {
                        warn!(
                            cookie = req.cookie,
                            len = payload,
                            "client went away inside a WRITE payload; the write was not started"
                        );
                        break Err(e.into());
                    }
                }
            } else {
                Bytes::new()
            };
            // A READ that can complete at once (a cache hit) is answered
            // right here, without a future or task. One sent to the target
            // as it is (no cache) waits in a job that holds only the read;
            // the others in a future that can run any request.
            let mut run: std::pin::Pin<Box<dyn std::future::Future<Output = Reply> + Send>> =
                if req.command == Command::Read {
                    match export.read_now(req.offset, req.length as usize) {
                        ExportRead::Done(r) => {
                            let mut reply = read_reply(tx.negotiated.structured, &req, r);
                            reply.permits = Some(permits);
                            let _ = reply_tx.send(reply);
                            continue;
                        }
                        ExportRead::Sent(p) => {
                            // Never ready yet: straight to the executor
                            // task, in one allocation and without a poll
                            // here under this task's waker.
                            let (export, structured) = (export.clone(), tx.negotiated.structured);
                            let reply_tx = reply_tx.clone();
                            let mut p = p;
                            let job = Box::pin(async move {
                                let r = std::future::poll_fn(|cx| p.poll_read(&export, cx)).await;
                                let mut reply = read_reply(structured, &req, r);
                                reply.permits = Some(permits);
                                let _ = reply_tx.send(reply);
                            });
                            if tasks.push(job).is_err() {
                                break Err(ConnError::RequestsGone);
                            }
                            continue;
                        }
                        ExportRead::Wait(p) => {
                            let (export, structured) = (export.clone(), tx.negotiated.structured);
                            Box::pin(async move {
                                let r = export.read_wait(p).await;
                                read_reply(structured, &req, r)
                            })
                        }
                    }
                } else {
                    let (server, tx, export) = (self.clone(), tx.clone(), export.clone());
                    Box::pin(async move { server.execute(&tx, &export, req, data).await })
                };
            // Polled once here: a request that completes at once (a cache
            // hit) is answered at once; one that waits for the target
            // continues in the connection's executor task, so requests
            // overlap.
            match poll_once(run.as_mut()).await {
                Some(mut reply) => {
                    reply.permits = Some(permits);
                    let _ = reply_tx.send(reply);
                }
                None => {
                    let reply_tx = reply_tx.clone();
                    let job = Box::pin(async move {
                        let mut reply = run.await;
                        reply.permits = Some(permits);
                        let _ = reply_tx.send(reply);
                    });
                    if tasks.push(job).is_err() {
                        break Err(ConnError::RequestsGone);
                    }
                }
            }
        };
        // Requests read in full run to completion, whatever happened. A
        // streamed READ also waits for the client to take its pieces: after
        // drain_timeout it is told to stop (the writer then closes).
        tasks
            .finish(self.limits.drain_timeout, || {
                let _ = stop_tx.send(true);
            })
            .await;
        drop((reply_tx, outbox));
        match tokio::time::timeout(self.limits.drain_timeout, writer).await {
            Ok(Ok(Err(e))) => debug!(error = %e, "writing replies failed"),
            Ok(_) => {}
            Err(_) => warn!("client did not take its last replies in time; closing"),
        }
        result
    }

    /// Run one validated request and encode its reply.
    async fn execute(
        &self,
        tx: &Transmission,
        export: &Export<B>,
        req: Request,
        data: Bytes,
    ) -> Reply {
        let structured = tx.negotiated.structured;
        let fua = req.flags & cflag::FUA != 0;
        let (off, len) = (req.offset, req.length as u64);
        let mut head = BytesMut::with_capacity(32);
        let done = |r: Result<(), ExportError>| r.map(|_| Bytes::new()).map_err(failure);
        let result: Result<Bytes, (u32, String)> = match req.command {
            Command::Read => {
                let r = export.read(off, req.length as usize).await;
                return read_reply(structured, &req, r);
            }
            Command::Write => done(export.write(off, data, fua).await.map(|_| ())),
            Command::Flush => done(export.flush().await),
            Command::Trim => done(trim(export, off, len, fua).await),
            Command::WriteZeroes => write_zeroes(export, req.flags, off, len)
                .await
                .map(|_| Bytes::new()),
            Command::Cache => done(export.prefetch(off, len).await),
            Command::BlockStatus => {
                // From GET LBA STATUS on thin LUNs (see Export::allocation);
                // otherwise one "allocated" extent, status 0, which the
                // spec allows for any block.
                let avail = tx.size - off;
                let want = if len == 0 {
                    avail.min(tx.block.minimum as u64)
                } else {
                    len.min(avail)
                };
                if want == 0 {
                    Err((err::EINVAL, "block status at the end of the export".into()))
                } else {
                    let mut extents: Vec<(u32, u32)> = export
                        .allocation(off, want)
                        .await
                        .into_iter()
                        .map(|e| {
                            let mut st = 0;
                            if e.hole {
                                st |= proto::state::HOLE;
                            }
                            if e.zero {
                                st |= proto::state::ZERO;
                            }
                            (e.len.min(u32::MAX as u64) as u32, st)
                        })
                        .collect();
                    if extents.is_empty() {
                        extents.push((want.min(u32::MAX as u64) as u32, 0));
                    }
                    if req.flags & cflag::REQ_ONE != 0 {
                        extents.truncate(1);
                    }
                    let ctx = tx
                        .negotiated
                        .allocation
                        .unwrap_or(proto::BASE_ALLOCATION_ID);
                    proto::put_block_status(&mut head, req.cookie, true, ctx, &extents);
                    return Reply::new(head, Bytes::new());
                }
            }
            Command::Disc | Command::Unknown(_) => Err((err::EINVAL, "unexpected command".into())),
        };
        match result {
            Ok(_) => {
                proto::put_simple_reply(&mut head, req.cookie, 0);
                Reply::new(head, Bytes::new())
            }
            Err((code, message)) => {
                debug!(cookie = req.cookie, ?req.command, off, len, code, %message, "request failed");
                proto::put_error_reply(&mut head, structured, req.cookie, code, &message);
                Reply::new(head, Bytes::new())
            }
        }
    }
}

fn refusal(r: &Request, code: u32) -> String {
    let why = match code {
        err::EPERM => "the export is read-only",
        err::ENOSPC => "past the end of the export",
        err::EOVERFLOW => "longer than one chunk may be (NBD_CMD_FLAG_DF, 32 MiB)",
        _ => "invalid request (range, alignment, flags or command)",
    };
    format!(
        "{:?} of {} bytes at offset {}: {why}",
        r.command, r.length, r.offset
    )
}

/// TRIM: UNMAP of the whole blocks inside the range (a no-op on a LUN
/// without UNMAP, which then does not advertise trim); FUA flushes after.
async fn trim<B: LunBackend>(
    e: &Export<B>,
    off: u64,
    len: u64,
    fua: bool,
) -> Result<(), ExportError> {
    e.trim(off, len).await?;
    if fua {
        e.flush().await?;
    }
    Ok(())
}

/// WRITE_ZEROES: with NO_HOLE the blocks stay allocated (WRITE SAME),
/// without it whole blocks may be unmapped on an LBPRZ LUN. FAST_ZERO is
/// refused with ENOTSUP unless the unmap path applies (the spec: fail fast
/// rather than be no faster than a write).
async fn write_zeroes<B: LunBackend>(
    e: &Export<B>,
    flags: u16,
    off: u64,
    len: u64,
) -> Result<(), (u32, String)> {
    let no_hole = flags & cflag::NO_HOLE != 0;
    if flags & cflag::FAST_ZERO != 0 && (no_hole || !e.info().fast_zero) {
        return Err((
            err::ENOTSUP,
            "fast zeroing needs UNMAP (and no NO_HOLE flag)".into(),
        ));
    }
    let mode = if no_hole {
        ZeroMode::Allocate
    } else {
        ZeroMode::MayUnmap
    };
    e.write_zeroes(off, len, mode).await.map_err(failure)?;
    if flags & cflag::FUA != 0 {
        e.flush().await.map_err(failure)?;
    }
    Ok(())
}

/// Poll `fut` once: its output if it completed, `None` if it waits (it
/// has registered this task's waker; whoever polls it next replaces it).
async fn poll_once<F: std::future::Future + ?Sized>(
    mut fut: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// [`acquire`] when both permits are free right now.
fn try_acquire(
    requests: &Arc<Semaphore>,
    bytes: &Arc<Semaphore>,
    cost: usize,
) -> Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)> {
    let r = requests.clone().try_acquire_owned().ok()?;
    let b = if cost > 0 {
        Some(bytes.clone().try_acquire_many_owned(cost as u32).ok()?)
    } else {
        None
    };
    Some((r, b))
}

async fn acquire(
    requests: &Arc<Semaphore>,
    bytes: &Arc<Semaphore>,
    cost: usize,
) -> (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>) {
    let r = requests
        .clone()
        .acquire_owned()
        .await
        .expect("never closed");
    let b = if cost > 0 {
        Some(
            bytes
                .clone()
                .acquire_many_owned(cost as u32)
                .await
                .expect("never closed"),
        )
    } else {
        None
    };
    (r, b)
}

/// The next request header if `buf` holds one whole.
fn buffered_request(buf: &mut BytesMut) -> Result<Option<Request>, ConnError> {
    match proto::parse_request(buf) {
        Ok(Some(r)) => {
            buf.advance(proto::REQUEST_LEN);
            Ok(Some(r))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(ConnError::Protocol(e.to_string())),
    }
}

/// Read one request header; `None` on a clean EOF between requests.
async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
) -> Result<Option<Request>, ConnError> {
    loop {
        if let Some(r) = buffered_request(buf)? {
            return Ok(Some(r));
        }
        // Read in 64 KiB gulps (headers and the payloads behind them), not
        // in the few bytes a nearly full buffer has left.
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 << 10);
        }
        if rd.read_buf(buf).await? == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(ConnError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Drop `n` bytes of the stream without keeping them.
async fn discard_exact<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    mut n: usize,
) -> Result<(), ConnError> {
    let k = n.min(buf.len());
    buf.advance(k);
    n -= k;
    // A refused WRITE may carry up to 4 GiB: skipped 64 KiB at a time.
    let mut scratch = vec![0u8; n.min(64 << 10)];
    while n > 0 {
        let m = n.min(scratch.len());
        rd.read_exact(&mut scratch[..m]).await?;
        n -= m;
    }
    Ok(())
}
