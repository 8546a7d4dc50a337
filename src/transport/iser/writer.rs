//! The send half of an iSER connection: posts encoded frames as Sends.
//!
//! The frames of one [`IserWriter::write_frames`] call go to the device as
//! one chain of work requests in one `ibv_post_send` (on soft-RoCE each
//! post is a system call that runs the requester), at most
//! [`MAX_CHAIN`] at a time. Only some Sends are signalled
//! ([`rlun_sys::rdma::slots::SendSlots`]): a slot returns to use when a
//! signalled completion at or after it arrives. When no slot is free, what
//! is prepared goes out and the writer waits for a send completion.

use std::io;
use std::net::SocketAddr;

use rlun_sys::rdma::{Message, PrepareError, SendQueue};
use tokio::io::unix::AsyncFd;

use super::encoder::IserFrame;
use super::error::IserError;
use super::params::MAX_CHAIN;
use crate::stats;
use crate::transport::FrameWriter;

/// The send half: registered send buffers, send completions.
pub struct IserWriter {
    send: AsyncFd<SendQueue>,
    addr: SocketAddr,
}

impl IserWriter {
    pub fn new(send: AsyncFd<SendQueue>, addr: SocketAddr) -> IserWriter {
        IserWriter { send, addr }
    }

    /// Post every frame as a Send, in order, chained into as few posts as
    /// the free send slots allow.
    pub async fn write_frames(&mut self, frames: &[IserFrame]) -> Result<(), IserError> {
        let r = self.write_frames_inner(frames).await;
        if r.is_err() {
            // Prepared Sends never posted: their slots are free again.
            self.send.get_mut().discard_pending();
        }
        r
    }

    async fn write_frames_inner(&mut self, frames: &[IserFrame]) -> Result<(), IserError> {
        self.reap()?;
        for f in frames {
            self.prepare(f).await?;
            if self.send.get_ref().pending() >= MAX_CHAIN {
                self.send.get_mut().post()?;
            }
        }
        Ok(self.send.get_mut().post()?)
    }

    /// Prepare one Send in a free slot (posting what is pending and
    /// waiting for a completion when none is free): the iSER header and
    /// the BHS (and AHS) in the slot, then the data segment — in place
    /// from the caller's registered buffer when the encoder found one, else
    /// copied into the slot (and counted when it is SCSI data) — then the
    /// padding.
    async fn prepare(&mut self, frame: &IserFrame) -> Result<(), IserError> {
        loop {
            let layout = frame.layout();
            let msg = Message {
                head: &layout.head,
                in_place: layout.in_place,
                tail: layout.tail,
            };
            match self.send.get_mut().prepare(msg) {
                Ok(_) => {
                    if layout.copied_scsi_data > 0 {
                        stats::add_copied(layout.copied_scsi_data as u64);
                    }
                    return Ok(());
                }
                Err(PrepareError::TooLong { len, max }) => {
                    return Err(IserError::SendTooLong { len, max })
                }
                Err(PrepareError::NoFreeSlot) => {
                    // What is prepared goes out first (its last Send is
                    // signalled, see SendSlots), then wait for a completion.
                    self.send.get_mut().post()?;
                    self.wait().await?;
                }
            }
        }
    }

    /// Return the slots of completed Sends; returns how many completions.
    fn reap(&mut self) -> Result<usize, IserError> {
        let r = self.send.get_mut().reap()?;
        match r.failed {
            Some(wc) => Err(IserError::completion(
                self.addr,
                wc.status_name(),
                wc.is_flushed(),
            )),
            None => Ok(r.completions),
        }
    }

    /// Wait until at least one Send completed.
    async fn wait(&mut self) -> Result<(), IserError> {
        debug_assert!(
            self.send.get_ref().signal_outstanding(),
            "waiting for a send completion with no signalled send outstanding"
        );
        loop {
            if self.reap()? > 0 {
                return Ok(());
            }
            self.send.get_ref().arm()?;
            if self.reap()? > 0 {
                return Ok(());
            }
            if self.send.get_ref().is_disconnected() {
                return Err(IserError::Disconnected {
                    addr: self.addr,
                    event: "connection closed".into(),
                });
            }
            let mut g = self
                .send
                .readable()
                .await
                .map_err(|source| IserError::Verbs {
                    op: "wait for send completions",
                    source,
                })?;
            g.clear_ready();
            drop(g);
            self.send.get_mut().take_event()?;
        }
    }

    /// Close our side: the target sees a disconnect.
    pub fn shutdown(&mut self) {
        self.send.get_ref().disconnect();
    }
}

impl FrameWriter for IserWriter {
    type Frame = IserFrame;

    async fn write_frames(&mut self, frames: &[IserFrame]) -> io::Result<()> {
        IserWriter::write_frames(self, frames)
            .await
            .map_err(io::Error::other)
    }

    async fn shutdown(&mut self) {
        IserWriter::shutdown(self)
    }
}
