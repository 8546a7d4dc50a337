//! The receive half of an iSER connection: receive completions (each a
//! Send of the target: an iSER header and an iSCSI PDU) and the RDMA CM
//! events that say the connection ended.
//!
//! Completions are polled in batches; the buffers of one batch go back to
//! the device together, as one chain, after the batch. Only when the
//! queue is empty is notification re-armed and the queue polled once more
//! (a completion between the last poll and the re-arm would otherwise be
//! missed); then the task waits on the completion channel's fd, and takes
//! one event per wake-up. Nothing spins while idle.
//!
//! The PDUs are handed up as they are: the target's responses need no
//! looking into here, since a command's registrations belong to its task in
//! the core (see the module docs of `super` for the ordering).

use std::collections::VecDeque;
use std::net::SocketAddr;

use bytes::BytesMut;
use rlun_iscsi::proto::pdu::{self, FrameLimits, Pdu};
use rlun_sys::rdma::{EventChannel, RecvQueue, WorkCompletion};
use tokio::io::unix::AsyncFd;
use tracing::{debug, warn};

use super::error::IserError;
use super::header::IserMessage;
use super::params::{iser_limits, POLL_BATCH};
use crate::transport::{PduReader, Placement, Received, TransportError};

/// The receive half: receive completions, CM events (disconnects).
pub struct IserReader {
    recv: AsyncFd<RecvQueue>,
    cm: AsyncFd<EventChannel>,
    addr: SocketAddr,
    received: VecDeque<Pdu>,
    limits: FrameLimits,
    /// Set once the connection ended: every later read returns it again.
    ended: Option<String>,
}

impl IserReader {
    pub fn new(
        recv: AsyncFd<RecvQueue>,
        cm: AsyncFd<EventChannel>,
        addr: SocketAddr,
        limits: FrameLimits,
    ) -> IserReader {
        IserReader {
            recv,
            cm,
            addr,
            received: VecDeque::new(),
            limits: iser_limits(limits),
            ended: None,
        }
    }

    /// A PDU that has already arrived, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Pdu>, IserError> {
        if self.received.is_empty() && self.ended.is_none() {
            self.poll_all()?;
        }
        Ok(self.received.pop_front())
    }

    /// The next PDU. Cancel-safe: completed receives wait in a queue.
    pub async fn read_pdu(&mut self) -> Result<Pdu, IserError> {
        loop {
            if let Some(p) = self.received.pop_front() {
                return Ok(p);
            }
            if let Some(event) = &self.ended {
                return Err(IserError::Disconnected {
                    addr: self.addr,
                    event: event.clone(),
                });
            }
            if self.poll_all()? > 0 {
                continue;
            }
            self.recv.get_ref().arm()?;
            if self.poll_all()? > 0 {
                continue;
            }
            tokio::select! {
                g = self.recv.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for receive completions", source })?;
                    g.clear_ready();
                    drop(g);
                    self.recv.get_mut().take_event()?;
                }
                g = self.cm.readable() => {
                    let mut g = g.map_err(|source| IserError::Verbs { op: "wait for CM events", source })?;
                    g.clear_ready();
                    drop(g);
                    while let Some(ev) = self.cm.get_ref().try_event()? {
                        debug!(event = %ev, "RDMA CM event");
                        if ev.kind.ends_connection() {
                            self.recv.get_ref().disconnect();
                            // Deliver what arrived before the end first.
                            self.poll_all().ok();
                            self.ended = Some(ev.to_string());
                        } else {
                            debug!(event = %ev, "ignoring CM event");
                        }
                    }
                }
            }
        }
    }

    /// Take every receive completion there is; returns how many PDUs came.
    ///
    /// The buffers of one poll batch go back to the device together, as
    /// one chain, after the batch: at most [`POLL_BATCH`] receive slots are
    /// ever off the receive queue at once.
    fn poll_all(&mut self) -> Result<usize, IserError> {
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        let mut repost = [0usize; POLL_BATCH];
        let mut total = 0;
        loop {
            let q = self.recv.get_mut();
            let polled = q.poll(&mut wcs)?;
            let mut n = 0;
            let mut result = Ok(());
            for wc in &wcs[..polled] {
                if !wc.is_success() {
                    if wc.is_flushed() && q.is_disconnected() {
                        continue;
                    }
                    result = Err(IserError::completion(
                        self.addr,
                        wc.status_name(),
                        wc.is_flushed(),
                    ));
                    break;
                }
                let Some(msg) = q.received(wc) else {
                    result = Err(IserError::Verbs {
                        op: "take a receive completion",
                        source: std::io::Error::other("unknown receive buffer"),
                    });
                    break;
                };
                match decode_message(msg, &self.limits) {
                    Ok(pdu) => {
                        repost[n] = wc.wr_id() as usize;
                        n += 1;
                        if let Some(p) = pdu {
                            self.received.push_back(p);
                            total += 1;
                        }
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            q.post(&repost[..n])?;
            result?;
            if polled < POLL_BATCH {
                return Ok(total);
            }
        }
    }
}

impl Drop for IserReader {
    fn drop(&mut self) {
        // Revoke the target's access to every buffer now (the core may free
        // them right after this half is gone), whatever the writer task does.
        self.recv.get_ref().disconnect();
    }
}

/// One received message: the PDU of a control message (copied out, so the
/// buffer can go back to the device), or nothing for a Hello Reply (we
/// never send Hello; accepted and ignored).
pub fn decode_message(msg: &[u8], limits: &FrameLimits) -> Result<Option<Pdu>, IserError> {
    match IserMessage::parse(msg)? {
        IserMessage::Control { pdu, .. } => decode_pdu(pdu, limits).map(Some),
        IserMessage::HelloReply(r) => {
            warn!(reply = ?r, "target sent an unsolicited iSER Hello Reply");
            Ok(None)
        }
    }
}

/// Decode a PDU from a Send. Targets need not pad the data segment of the
/// last PDU in a message; we pad it to the codec's framing.
fn decode_pdu(bytes: &[u8], limits: &FrameLimits) -> Result<Pdu, IserError> {
    let need = pdu::frame_length(bytes, limits)?.ok_or(IserError::ShortPdu { len: bytes.len() })?;
    if bytes.len() < need && need - bytes.len() > 3 {
        return Err(IserError::ShortPdu { len: bytes.len() });
    }
    let mut buf = BytesMut::with_capacity(need);
    buf.extend_from_slice(&bytes[..bytes.len().min(need)]);
    buf.resize(need, 0);
    Ok(pdu::decode(buf.freeze(), limits)?)
}

impl PduReader for IserReader {
    fn set_limits(&mut self, limits: FrameLimits) {
        self.limits = iser_limits(limits);
    }

    // The target writes read data by RDMA: no Data-In payload to place.
    async fn read_pdu(
        &mut self,
        _place: &mut (dyn Placement + Send),
    ) -> Result<Received, TransportError> {
        Ok(IserReader::read_pdu(self).await?.into())
    }

    fn try_next(
        &mut self,
        _place: &mut (dyn Placement + Send),
    ) -> Result<Option<Received>, TransportError> {
        Ok(IserReader::try_next(self)?.map(Received::from))
    }
}

#[cfg(test)]
mod tests;
