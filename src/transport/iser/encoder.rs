//! The send half's encoder, run on the driver task: turns each PDU the core
//! wants sent into an [`IserFrame`] — its iSCSI encoding, its iSER header,
//! and whether its data segment goes out from the caller's buffer — and
//! makes a SCSI Command's buffers reachable by the target.
//!
//! Registration at encode time (RFC 7145 §9.2): the read buffer is named
//! as Read STag/VA (the target RDMA-Writes the read data there), the write
//! data as Write STag/VA pointing at the first byte not sent as immediate
//! or unsolicited data (the target RDMA-Reads the rest). Buffers from the
//! registered pool ([`rlun_iscsi::iobuf`]) go under their arena's key,
//! registered once per connection, so the data path makes no registration;
//! other memory is registered for this one command
//! ([`rlun_sys::rdma::MemoryRegion::for_task_read`],
//! [`rlun_sys::rdma::MemoryRegion::for_remote_read`]) and the registration
//! is returned as the task's hold ([`crate::transport::TaskHold`]): the
//! core keeps it with the task and drops it when the task ends, before the
//! task's buffers. The transport keeps no table of tasks.
//!
//! The registering side is a small trait ([`Registrar`]), so the encoding
//! is host-tested with counted fake registrations and real cores; the
//! verbs behind it ([`VerbsRegistrar`]) are tested against real targets in
//! the VM lab.

use bytes::Bytes;
use rlun_iscsi::proto::connection::{ReadRegion, TaskHold, Transmit, TransmitKind};
use rlun_iscsi::proto::pdu::{Digests, WireFrame};
use rlun_sys::rdma::{InPlace, Keys, MemoryRegion, PoolRegistrations, ProtectionDomain};

use super::error::IserError;
use super::header::{IserHeader, RemoteBuf, ISER_HEADER_LEN};
use super::params::Registration;
use crate::stats;
use crate::transport::{Encoded, FrameEncoder, TransportError};

/// Makes a command's buffers reachable by the target.
pub trait Registrar {
    /// One registration, kept in the task's hold until the task ends.
    type Registration: Send + 'static;

    /// The keys of the registered pool memory holding
    /// `addr..addr + len`; `None` outside the pool.
    fn pool_keys(&mut self, addr: usize, len: usize) -> Result<Option<Keys>, IserError>;

    /// Register a direct task's read buffer for the target to write.
    fn register_read(
        &mut self,
        region: &ReadRegion,
    ) -> Result<(Self::Registration, Keys), IserError>;

    /// Register write data for the target to read (and for sending its
    /// immediate part from it).
    fn register_write(&mut self, data: &Bytes) -> Result<(Self::Registration, Keys), IserError>;
}

/// The registrations made for one command outside the pool: its task's
/// hold. Dropping it deregisters them.
#[derive(Debug)]
pub struct CommandRegistration<R> {
    pub read: Option<R>,
    pub write: Option<R>,
}

/// The registrations a [`Registrar`] made for one command.
pub type Registered<R> = CommandRegistration<<R as Registrar>::Registration>;

/// A PDU ready to go: its iSCSI encoding (no digests on iSER, RFC 7145
/// §7.2), its iSER header, and how its data segment is sent.
pub struct IserFrame {
    header: [u8; ISER_HEADER_LEN],
    wire: WireFrame,
    /// The data segment goes out in place under this local key (registered
    /// memory); `None`: it is copied into the send slot.
    data_lkey: Option<u32>,
    /// The data segment is SCSI data (immediate data or Data-Out): a copy
    /// of it is counted ([`crate::stats::add_copied`]).
    scsi_data: bool,
}

/// How a frame goes into one Send: the iSER header, the BHS (and AHS) and,
/// unless it goes in place, the data segment are copied into the send slot;
/// then the in-place data; then the padding (copied).
#[derive(Debug)]
pub struct SendLayout<'a> {
    pub head: [&'a [u8]; 3],
    pub in_place: Option<InPlace>,
    pub tail: &'a [u8],
    /// Bytes of SCSI data among those copied.
    pub copied_scsi_data: usize,
}

impl IserFrame {
    pub fn layout(&self) -> SendLayout<'_> {
        let data = &self.wire.data;
        match self.data_lkey {
            Some(lkey) => SendLayout {
                head: [&self.header, &self.wire.head, &[]],
                in_place: Some(InPlace {
                    data: data.clone(),
                    lkey,
                }),
                tail: self.wire.tail(),
                copied_scsi_data: 0,
            },
            None => SendLayout {
                head: [&self.header, &self.wire.head, data],
                in_place: None,
                tail: self.wire.tail(),
                copied_scsi_data: if self.scsi_data { data.len() } else { 0 },
            },
        }
    }

    /// The iSER header in front of the PDU.
    pub fn header(&self) -> IserHeader {
        IserHeader::decode(&self.header).expect("a whole header")
    }
}

/// Whether `inner` lies within `outer` in memory.
fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (i, o) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
    i >= o && i + inner.len() <= o + outer.len()
}

/// Encode one PDU: its frame and, for a SCSI Command whose buffers lie
/// (partly) outside the pool, the registrations to keep with its task.
pub fn encode<R: Registrar>(
    reg: &mut R,
    tx: Transmit,
) -> Result<(IserFrame, Option<Registered<R>>), IserError> {
    let scsi_data = matches!(tx.kind, TransmitKind::ScsiCommand | TransmitKind::DataOut);
    let wire = tx.pdu.encode(Digests::default());
    let mut header = IserHeader::CONTROL;
    let mut held = CommandRegistration {
        read: None,
        write: None,
    };
    // The write data the target fetches, and the local key covering it.
    let mut write_data: Option<(&Bytes, u32)> = None;
    if let Some(d) = &tx.direct {
        if let Some(r) = d.read.filter(|r| !r.is_empty()) {
            let stag = match reg.pool_keys(r.addr(), r.len() as usize)? {
                Some(k) => k.rkey,
                None => {
                    let (m, k) = reg.register_read(&r)?;
                    held.read = Some(m);
                    k.rkey
                }
            };
            header.read = Some(RemoteBuf {
                stag,
                va: r.addr() as u64,
            });
        }
        if let Some(w) = &d.write {
            let all = &w.data;
            if (w.offset as usize) < all.len() {
                let keys = match reg.pool_keys(all.as_ptr() as usize, all.len())? {
                    Some(k) => k,
                    None => {
                        // The whole buffer, so the immediate part can be
                        // sent from it too.
                        let (m, k) = reg.register_write(all)?;
                        held.write = Some(m);
                        k
                    }
                };
                header.write = Some(RemoteBuf {
                    stag: keys.rkey,
                    va: all.as_ptr() as u64 + u64::from(w.offset),
                });
                write_data = Some((all, keys.lkey));
            }
        }
    }
    let data = &wire.data;
    let data_lkey = if scsi_data && !data.is_empty() {
        match reg.pool_keys(data.as_ptr() as usize, data.len())? {
            Some(k) => Some(k.lkey),
            None => write_data
                .filter(|(all, _)| within(data, all))
                .map(|(_, lkey)| lkey),
        }
    } else {
        None
    };
    let frame = IserFrame {
        header: header.encode(),
        wire,
        data_lkey,
        scsi_data,
    };
    let hold = (held.read.is_some() || held.write.is_some()).then_some(held);
    Ok((frame, hold))
}

/// The registrations of one connection: the pool arenas in its protection
/// domain, and per-command regions.
pub struct VerbsRegistrar {
    pd: ProtectionDomain,
    pool: PoolRegistrations,
    /// Name no buffer by the pool's keys: register each per command
    /// ([`Registration::PerCommand`]).
    per_command: bool,
}

impl VerbsRegistrar {
    pub fn new(pd: &ProtectionDomain, mode: Registration) -> VerbsRegistrar {
        VerbsRegistrar {
            pd: pd.clone(),
            pool: PoolRegistrations::new(pd),
            per_command: mode == Registration::PerCommand,
        }
    }

    /// Register every pool arena there is (at connect, off the data path).
    pub fn register_pool(&mut self) -> Result<(), IserError> {
        for arena in self.pool.register_all()? {
            note_arena(arena);
        }
        Ok(())
    }
}

fn note_arena(arena: rlun_iscsi::iobuf::Arena) {
    stats::add_pool_registration();
    tracing::debug!(
        arena = arena.index,
        bytes = arena.len,
        "registered a buffer pool arena"
    );
}

impl Registrar for VerbsRegistrar {
    type Registration = MemoryRegion;

    fn pool_keys(&mut self, addr: usize, len: usize) -> Result<Option<Keys>, IserError> {
        if self.per_command {
            return Ok(None);
        }
        let Some(k) = self.pool.keys(addr, len)? else {
            return Ok(None);
        };
        if let Some(arena) = k.registered {
            note_arena(arena);
        }
        Ok(Some(k.keys))
    }

    fn register_read(&mut self, region: &ReadRegion) -> Result<(MemoryRegion, Keys), IserError> {
        // The contract of `for_task_read` is met by where the region goes:
        // into this task's hold only (see its docs).
        let m = MemoryRegion::for_task_read(&self.pd, region)?;
        stats::add_data_path_registration();
        let k = m.keys();
        Ok((m, k))
    }

    fn register_write(&mut self, data: &Bytes) -> Result<(MemoryRegion, Keys), IserError> {
        // Remote read only: the target never writes into write data.
        let m = MemoryRegion::for_remote_read(&self.pd, data.clone())?;
        stats::add_data_path_registration();
        let k = m.keys();
        Ok((m, k))
    }
}

/// Frames for the send half of one connection ([`FrameEncoder`]).
pub struct IserEncoder {
    reg: VerbsRegistrar,
}

impl IserEncoder {
    pub fn new(reg: VerbsRegistrar) -> IserEncoder {
        IserEncoder { reg }
    }
}

impl FrameEncoder for IserEncoder {
    type Frame = IserFrame;

    /// No digests on iSER (RFC 7145 §7.2).
    fn set_digests(&mut self, _digests: Digests) {}

    fn encode(&mut self, tx: Transmit) -> Result<Encoded<IserFrame>, TransportError> {
        let (frame, hold) = encode(&mut self.reg, tx)?;
        Ok(Encoded {
            frame,
            hold: hold.map(|h| Box::new(h) as TaskHold),
        })
    }
}

#[cfg(test)]
mod tests;
