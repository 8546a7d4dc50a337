//! Sans-IO NBD protocol, server side (the NBD protocol document,
//! `doc/proto.md` of the NetworkBlockDevice project).
//!
//! Nothing here touches a socket: [`Handshake`] takes the client's bytes
//! and queues the server's answers (fixed newstyle negotiation, options
//! GO, INFO, LIST, EXPORT_NAME, ABORT, STRUCTURED_REPLY, STARTTLS,
//! LIST/SET_META_CONTEXT); [`parse_request`] checks a transmission request
//! header; [`Transmission::check`] validates a request against what was
//! negotiated and picks the spec's error; the `put_*` functions encode
//! simple and structured replies. The server (`nbd::server`) drives these
//! over TCP, Unix sockets or TLS.
//!
//! Incomplete input is normal (`NeedInput`/`Ok(None)`), never an error.
//! Every length a client sends is checked before it is used, and nothing
//! the client sends makes this module allocate more than [`MAX_OPTION_LEN`]
//! bytes at once; option data longer than that is skipped as it arrives and
//! answered with `NBD_REP_ERR_TOO_BIG`.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// `NBDMAGIC`: the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle greeting and the prefix of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// `NBD_REQUEST_MAGIC`.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// `NBD_SIMPLE_REPLY_MAGIC`.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// `NBD_STRUCTURED_REPLY_MAGIC`.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags (server) and client flags.
pub mod hflag {
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const NO_ZEROES: u16 = 1 << 1;
    pub const C_FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const C_NO_ZEROES: u32 = 1 << 1;
}

/// Transmission flags.
pub mod tflag {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const SEND_DF: u16 = 1 << 7;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    pub const SEND_CACHE: u16 = 1 << 10;
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Option types.
pub mod opt {
    pub const EXPORT_NAME: u32 = 1;
    pub const ABORT: u32 = 2;
    pub const LIST: u32 = 3;
    pub const STARTTLS: u32 = 5;
    pub const INFO: u32 = 6;
    pub const GO: u32 = 7;
    pub const STRUCTURED_REPLY: u32 = 8;
    pub const LIST_META_CONTEXT: u32 = 9;
    pub const SET_META_CONTEXT: u32 = 10;
}

/// Option reply types.
pub mod rep {
    pub const ACK: u32 = 1;
    pub const SERVER: u32 = 2;
    pub const INFO: u32 = 3;
    pub const META_CONTEXT: u32 = 4;
    const ERR: u32 = 1 << 31;
    pub const ERR_UNSUP: u32 = ERR | 1;
    pub const ERR_POLICY: u32 = ERR | 2;
    pub const ERR_INVALID: u32 = ERR | 3;
    pub const ERR_TLS_REQD: u32 = ERR | 5;
    pub const ERR_UNKNOWN: u32 = ERR | 6;
    pub const ERR_SHUTDOWN: u32 = ERR | 7;
    pub const ERR_TOO_BIG: u32 = ERR | 9;
}

/// `NBD_INFO_*` types in `NBD_REP_INFO`.
pub mod info {
    pub const EXPORT: u16 = 0;
    pub const NAME: u16 = 1;
    pub const DESCRIPTION: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
}

/// Command flags.
pub mod cflag {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
    pub const DF: u16 = 1 << 2;
    pub const REQ_ONE: u16 = 1 << 3;
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply chunk types and the DONE flag.
pub mod reply {
    pub const FLAG_DONE: u16 = 1;
    pub const NONE: u16 = 0;
    pub const OFFSET_DATA: u16 = 1;
    pub const BLOCK_STATUS: u16 = 5;
    pub const ERROR: u16 = (1 << 15) | 1;
}

/// NBD error values (the "Error values" section: fixed numbers, not the
/// host's errno).
pub mod err {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

/// `NBD_STATE_*` flags of the `base:allocation` context.
pub mod state {
    pub const HOLE: u32 = 1 << 0;
    pub const ZERO: u32 = 1 << 1;
}

/// The only metadata context this server offers.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id this server gives `base:allocation` in `NBD_REP_META_CONTEXT`.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Longest option payload the handshake buffers; longer ones are skipped
/// and refused with `NBD_REP_ERR_TOO_BIG`. Strings are at most 4096 bytes
/// by the spec, so this leaves room for a dozen meta context queries.
pub const MAX_OPTION_LEN: u32 = 64 * 1024;
/// Longest string (export name, query, error message) per the spec.
pub const MAX_STRING: usize = 4096;
/// Length of a request header.
pub const REQUEST_LEN: usize = 28;
/// Length of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Length of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;

/// The block size constraints of an export (`NBD_INFO_BLOCK_SIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Minimum block size: power of two, at most 64 KiB.
    pub minimum: u32,
    /// Preferred block size: power of two, at least `max(minimum, 512)`.
    pub preferred: u32,
    /// Maximum payload of one READ or WRITE.
    pub maximum: u32,
}

/// What the handshake tells clients about one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags (`tflag::*`); `SEND_DF` is added per connection
    /// when structured replies are negotiated.
    pub flags: u16,
    pub block: BlockSizes,
}

/// How the server treats TLS (the spec's "Server-side requirements").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// NOTLS: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    Off,
    /// FORCEDTLS: every option but STARTTLS and ABORT is refused with
    /// `NBD_REP_ERR_TLS_REQD` until TLS is up.
    Required,
}

/// What a finished handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Index into the export list.
    pub export: usize,
    /// Structured replies are on.
    pub structured: bool,
    /// `base:allocation` was selected for this export, with this id.
    pub allocation: Option<u32>,
    /// The client asked for `NBD_INFO_BLOCK_SIZE` with `NBD_OPT_GO`, so it
    /// promised to honour the block size constraints.
    pub block_sizes_agreed: bool,
    /// Transmission flags as sent to the client.
    pub flags: u16,
}

/// What the caller of [`Handshake::handle_input`] does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Send [`Handshake::take_output`], then read more input.
    NeedInput,
    /// Send the output (it ends with the STARTTLS ACK), run the TLS
    /// handshake, then call [`Handshake::tls_started`] and carry on.
    StartTls,
    /// The client aborted (soft disconnect): send the output, then close.
    Abort,
    /// Send the output and enter the transmission phase.
    Transmission(Negotiated),
}

/// A handshake that must end with a hard disconnect.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("the client sent option magic {0:#018x} instead of IHAVEOPT")]
    BadOptionMagic(u64),
    #[error("the client sent unknown client flags {0:#x}")]
    BadClientFlags(u32),
    #[error("NBD_OPT_EXPORT_NAME for unknown export {0:?}")]
    UnknownExport(String),
    #[error("NBD_OPT_EXPORT_NAME without TLS on a server that requires TLS")]
    TlsRequired,
    #[error("option {0} from a client that did not negotiate fixed newstyle")]
    NotFixedNewstyle(u32),
    #[error("the client sent data after NBD_OPT_STARTTLS before the TLS handshake")]
    DataAfterStartTls,
    #[error("the handshake already ended")]
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HsState {
    /// Waiting for the 32-bit client flags.
    ClientFlags,
    /// Waiting for an option header or its data.
    Option,
    /// Discarding `remaining` bytes of the oversized option `opt`.
    Skip { opt: u32, remaining: u64 },
    /// STARTTLS acknowledged; waiting for the caller to run TLS.
    AwaitTls,
    /// Transmission or abort reached.
    Done,
}

/// The server's side of the fixed newstyle handshake.
#[derive(Debug)]
pub struct Handshake {
    exports: Arc<[ExportInfo]>,
    tls: TlsMode,
    tls_active: bool,
    state: HsState,
    out: BytesMut,
    fixed: bool,
    no_zeroes: bool,
    structured: bool,
    /// The export name and whether `base:allocation` was selected by the
    /// last `NBD_OPT_SET_META_CONTEXT`.
    meta: Option<(String, bool)>,
}

/// One parsed option, or a reason to refuse it.
struct OptData<'a> {
    opt: u32,
    data: &'a [u8],
}

impl Handshake {
    /// Start a handshake; the greeting is queued in the output.
    pub fn new(exports: Arc<[ExportInfo]>, tls: TlsMode) -> Handshake {
        let mut out = BytesMut::with_capacity(256);
        out.put_u64(NBDMAGIC);
        out.put_u64(IHAVEOPT);
        out.put_u16(hflag::FIXED_NEWSTYLE | hflag::NO_ZEROES);
        Handshake {
            exports,
            tls,
            tls_active: false,
            state: HsState::ClientFlags,
            out,
            fixed: false,
            no_zeroes: false,
            structured: false,
            meta: None,
        }
    }

    /// Bytes to send now.
    pub fn take_output(&mut self) -> Bytes {
        self.out.split().freeze()
    }

    /// Whether TLS is running on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The TLS handshake after `StartTls` succeeded: negotiation starts
    /// over (no option state survives STARTTLS).
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.structured = false;
        self.meta = None;
        if self.state == HsState::AwaitTls {
            self.state = HsState::Option;
        }
    }

    /// Consume what can be consumed of `buf` (complete client flags and
    /// options) and say what to do next.
    pub fn handle_input(&mut self, buf: &mut BytesMut) -> Result<HandshakeEvent, HandshakeError> {
        loop {
            match self.state {
                HsState::Done => return Err(HandshakeError::Finished),
                HsState::AwaitTls => {
                    if !buf.is_empty() {
                        return Err(HandshakeError::DataAfterStartTls);
                    }
                    return Ok(HandshakeEvent::StartTls);
                }
                HsState::ClientFlags => {
                    if buf.len() < 4 {
                        return Ok(HandshakeEvent::NeedInput);
                    }
                    let flags = buf.get_u32();
                    let known = hflag::C_FIXED_NEWSTYLE | hflag::C_NO_ZEROES;
                    if flags & !known != 0 {
                        return Err(HandshakeError::BadClientFlags(flags));
                    }
                    self.fixed = flags & hflag::C_FIXED_NEWSTYLE != 0;
                    self.no_zeroes = flags & hflag::C_NO_ZEROES != 0;
                    self.state = HsState::Option;
                }
                HsState::Skip { opt, remaining } => {
                    let n = remaining.min(buf.len() as u64);
                    buf.advance(n as usize);
                    if n < remaining {
                        self.state = HsState::Skip {
                            opt,
                            remaining: remaining - n,
                        };
                        return Ok(HandshakeEvent::NeedInput);
                    }
                    self.state = HsState::Option;
                    self.reply_error(opt, rep::ERR_TOO_BIG, "option data too long");
                }
                HsState::Option => {
                    if buf.len() < 16 {
                        return Ok(HandshakeEvent::NeedInput);
                    }
                    let magic = u64::from_be_bytes(buf[0..8].try_into().unwrap());
                    if magic != IHAVEOPT {
                        return Err(HandshakeError::BadOptionMagic(magic));
                    }
                    let opt = u32::from_be_bytes(buf[8..12].try_into().unwrap());
                    let len = u32::from_be_bytes(buf[12..16].try_into().unwrap());
                    if len > MAX_OPTION_LEN {
                        buf.advance(16);
                        if !self.fixed {
                            return Err(HandshakeError::NotFixedNewstyle(opt));
                        }
                        self.state = HsState::Skip {
                            opt,
                            remaining: len as u64,
                        };
                        continue;
                    }
                    if buf.len() < 16 + len as usize {
                        buf.reserve(16 + len as usize - buf.len());
                        return Ok(HandshakeEvent::NeedInput);
                    }
                    buf.advance(16);
                    let data = buf.split_to(len as usize);
                    if let Some(ev) = self.handle_option(OptData { opt, data: &data })? {
                        return Ok(ev);
                    }
                }
            }
        }
    }

    fn handle_option(&mut self, o: OptData<'_>) -> Result<Option<HandshakeEvent>, HandshakeError> {
        if !self.fixed && o.opt != opt::EXPORT_NAME {
            return Err(HandshakeError::NotFixedNewstyle(o.opt));
        }
        let tls_needed = self.tls == TlsMode::Required && !self.tls_active;
        match o.opt {
            opt::EXPORT_NAME => {
                if tls_needed {
                    return Err(HandshakeError::TlsRequired);
                }
                let name = String::from_utf8_lossy(o.data).into_owned();
                let Some(index) = self.lookup(&name) else {
                    return Err(HandshakeError::UnknownExport(name));
                };
                let flags = self.flags_for(index);
                self.out.put_u64(self.exports[index].size);
                self.out.put_u16(flags);
                if !self.no_zeroes {
                    self.out.put_bytes(0, 124);
                }
                self.state = HsState::Done;
                Ok(Some(HandshakeEvent::Transmission(Negotiated {
                    export: index,
                    structured: self.structured,
                    allocation: self.allocation_for(&name),
                    block_sizes_agreed: false,
                    flags,
                })))
            }
            opt::ABORT => {
                self.reply(o.opt, rep::ACK, &[]);
                self.state = HsState::Done;
                Ok(Some(HandshakeEvent::Abort))
            }
            opt::STARTTLS => {
                if !o.data.is_empty() {
                    self.reply_error(o.opt, rep::ERR_INVALID, "STARTTLS takes no data");
                } else if self.tls_active {
                    self.reply_error(o.opt, rep::ERR_INVALID, "TLS is already running");
                } else if self.tls == TlsMode::Off {
                    self.reply_error(
                        o.opt,
                        rep::ERR_POLICY,
                        "TLS is not configured on this server (rlun serve --tls-cert/--tls-key)",
                    );
                } else {
                    self.reply(o.opt, rep::ACK, &[]);
                    // The loop hands out StartTls once it saw that no
                    // bytes followed the option (the client must wait).
                    self.state = HsState::AwaitTls;
                }
                Ok(None)
            }
            _ if tls_needed => {
                self.reply_error(
                    o.opt,
                    rep::ERR_TLS_REQD,
                    "this server requires TLS: send NBD_OPT_STARTTLS first",
                );
                Ok(None)
            }
            opt::LIST => {
                if !o.data.is_empty() {
                    self.reply_error(o.opt, rep::ERR_INVALID, "LIST takes no data");
                    return Ok(None);
                }
                for e in self.exports.clone().iter() {
                    let mut d = Vec::with_capacity(4 + e.name.len() + e.description.len());
                    d.put_u32(e.name.len() as u32);
                    d.put_slice(e.name.as_bytes());
                    d.put_slice(e.description.as_bytes());
                    self.reply(o.opt, rep::SERVER, &d);
                }
                self.reply(o.opt, rep::ACK, &[]);
                Ok(None)
            }
            opt::INFO | opt::GO => self.info_or_go(o),
            opt::STRUCTURED_REPLY => {
                if !o.data.is_empty() {
                    self.reply_error(o.opt, rep::ERR_INVALID, "STRUCTURED_REPLY takes no data");
                } else if self.structured {
                    self.reply_error(o.opt, rep::ERR_INVALID, "structured replies already on");
                } else {
                    self.structured = true;
                    self.reply(o.opt, rep::ACK, &[]);
                }
                Ok(None)
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
                self.meta_context(o);
                Ok(None)
            }
            _ => {
                self.reply_error(o.opt, rep::ERR_UNSUP, "option not supported by this server");
                Ok(None)
            }
        }
    }

    fn info_or_go(&mut self, o: OptData<'_>) -> Result<Option<HandshakeEvent>, HandshakeError> {
        // Data: 32-bit name length, name, 16-bit count, count × 16-bit info.
        let parsed = (|| {
            let mut d = o.data;
            let name = take_string(&mut d)?;
            if d.len() < 2 {
                return None;
            }
            let n = d.get_u16() as usize;
            if d.len() != n * 2 {
                return None;
            }
            let reqs: Vec<u16> = (0..n).map(|_| d.get_u16()).collect();
            Some((name, reqs))
        })();
        let Some((name, reqs)) = parsed else {
            self.reply_error(o.opt, rep::ERR_INVALID, "malformed INFO/GO request");
            return Ok(None);
        };
        let Some(index) = self.lookup(&name) else {
            self.reply_error(
                o.opt,
                rep::ERR_UNKNOWN,
                &format!("no export named {name:?} (NBD_OPT_LIST shows them)"),
            );
            return Ok(None);
        };
        let e = self.exports[index].clone();
        let flags = self.flags_for(index);
        let mut d = Vec::with_capacity(64);
        d.put_u16(info::EXPORT);
        d.put_u64(e.size);
        d.put_u16(flags);
        self.reply(o.opt, rep::INFO, &d);
        if reqs.contains(&info::NAME) || name != e.name {
            d.clear();
            d.put_u16(info::NAME);
            d.put_slice(e.name.as_bytes());
            self.reply(o.opt, rep::INFO, &d);
        }
        if reqs.contains(&info::DESCRIPTION) {
            d.clear();
            d.put_u16(info::DESCRIPTION);
            d.put_slice(e.description.as_bytes());
            self.reply(o.opt, rep::INFO, &d);
        }
        // Sent unasked too: clients that did not ask are served without
        // the alignment rule (see `Transmission::check`).
        d.clear();
        d.put_u16(info::BLOCK_SIZE);
        d.put_u32(e.block.minimum);
        d.put_u32(e.block.preferred);
        d.put_u32(e.block.maximum);
        self.reply(o.opt, rep::INFO, &d);
        self.reply(o.opt, rep::ACK, &[]);
        if o.opt == opt::INFO {
            return Ok(None);
        }
        self.state = HsState::Done;
        Ok(Some(HandshakeEvent::Transmission(Negotiated {
            export: index,
            structured: self.structured,
            allocation: self.allocation_for(&name),
            block_sizes_agreed: reqs.contains(&info::BLOCK_SIZE),
            flags,
        })))
    }

    fn meta_context(&mut self, o: OptData<'_>) {
        let set = o.opt == opt::SET_META_CONTEXT;
        if set {
            // "replaces all previously-set metadata contexts (including
            // when this command fails)".
            self.meta = None;
        }
        if !self.structured {
            self.reply_error(
                o.opt,
                rep::ERR_INVALID,
                "negotiate NBD_OPT_STRUCTURED_REPLY before meta contexts",
            );
            return;
        }
        // Data: 32-bit export name length, name, 32-bit query count,
        // queries of 32-bit length + string.
        let parsed = (|| {
            let mut d = o.data;
            let name = take_string(&mut d)?;
            if d.len() < 4 {
                return None;
            }
            let n = d.get_u32();
            let mut queries = Vec::new();
            for _ in 0..n {
                queries.push(take_string(&mut d)?);
            }
            d.is_empty().then_some((name, queries))
        })();
        let Some((name, queries)) = parsed else {
            self.reply_error(o.opt, rep::ERR_INVALID, "malformed meta context request");
            return;
        };
        if queries.iter().any(|q| !q.contains(':')) {
            self.reply_error(o.opt, rep::ERR_INVALID, "a query lacks its namespace colon");
            return;
        }
        if self.lookup(&name).is_none() {
            self.reply_error(
                o.opt,
                rep::ERR_UNKNOWN,
                &format!("no export named {name:?}"),
            );
            return;
        }
        let matches = if set {
            queries.iter().any(|q| q == BASE_ALLOCATION)
        } else {
            queries.is_empty() || queries.iter().any(|q| q == "base:" || q == BASE_ALLOCATION)
        };
        if matches {
            let mut d = Vec::with_capacity(4 + BASE_ALLOCATION.len());
            d.put_u32(if set { BASE_ALLOCATION_ID } else { 0 });
            d.put_slice(BASE_ALLOCATION.as_bytes());
            self.reply(o.opt, rep::META_CONTEXT, &d);
        }
        if set {
            self.meta = Some((name, matches));
        }
        self.reply(o.opt, rep::ACK, &[]);
    }

    /// `base:allocation` applies if the last SET_META_CONTEXT selected it
    /// for the same export name the client then chose.
    fn allocation_for(&self, requested: &str) -> Option<u32> {
        match &self.meta {
            Some((name, true)) if name == requested => Some(BASE_ALLOCATION_ID),
            _ => None,
        }
    }

    /// The empty name is the default export: the first.
    fn lookup(&self, name: &str) -> Option<usize> {
        if name.is_empty() {
            return (!self.exports.is_empty()).then_some(0);
        }
        self.exports.iter().position(|e| e.name == name)
    }

    fn flags_for(&self, index: usize) -> u16 {
        let mut f = self.exports[index].flags | tflag::HAS_FLAGS;
        if self.structured {
            f |= tflag::SEND_DF;
        }
        f
    }

    fn reply(&mut self, opt: u32, kind: u32, data: &[u8]) {
        self.out.put_u64(OPT_REPLY_MAGIC);
        self.out.put_u32(opt);
        self.out.put_u32(kind);
        self.out.put_u32(data.len() as u32);
        self.out.put_slice(data);
    }

    fn reply_error(&mut self, opt: u32, kind: u32, message: &str) {
        let msg = truncate_str(message, MAX_STRING);
        self.reply(opt, kind, msg.as_bytes());
    }
}

/// A 32-bit length and that many bytes of UTF-8, at most [`MAX_STRING`].
fn take_string(d: &mut &[u8]) -> Option<String> {
    if d.len() < 4 {
        return None;
    }
    let n = d.get_u32() as usize;
    if n > MAX_STRING || d.len() < n {
        return None;
    }
    let s = std::str::from_utf8(&d[..n]).ok()?.to_owned();
    d.advance(n);
    Some(s)
}

fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Transmission commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disc,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Unknown(u16),
}

impl Command {
    pub fn from_wire(v: u16) -> Command {
        match v {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disc,
            3 => Command::Flush,
            4 => Command::Trim,
            5 => Command::Cache,
            6 => Command::WriteZeroes,
            7 => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }

    /// Command flags valid on this command (FUA is valid on every one).
    fn allowed_flags(self) -> u16 {
        use cflag::*;
        match self {
            Command::Read => FUA | DF,
            Command::WriteZeroes => FUA | NO_HOLE | FAST_ZERO,
            Command::BlockStatus => FUA | REQ_ONE,
            _ => FUA,
        }
    }
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

/// A request stream that cannot go on (the connection must be closed).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("bad request magic {0:#010x}")]
    BadMagic(u32),
}

/// Parse one request header from the front of `buf`: `Ok(None)` when fewer
/// than 28 bytes are there. A WRITE's payload (`length` bytes) follows.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, RequestError> {
    if buf.len() < REQUEST_LEN {
        return Ok(None);
    }
    let mut b = &buf[..REQUEST_LEN];
    let magic = b.get_u32();
    if magic != REQUEST_MAGIC {
        return Err(RequestError::BadMagic(magic));
    }
    Ok(Some(Request {
        flags: b.get_u16(),
        command: Command::from_wire(b.get_u16()),
        cookie: b.get_u64(),
        offset: b.get_u64(),
        length: b.get_u32(),
    }))
}

/// What one connection negotiated, for validating its requests.
#[derive(Debug, Clone)]
pub struct Transmission {
    pub size: u64,
    pub flags: u16,
    pub block: BlockSizes,
    pub negotiated: Negotiated,
}

impl Transmission {
    /// Check a request against the export and the negotiation; `Err` is the
    /// NBD error to reply with (the spec's choice where it makes one).
    /// DISC always passes.
    pub fn check(&self, r: &Request) -> Result<(), u32> {
        self.check_within(r, self.size)
    }

    /// [`Transmission::check`] against an export of `size` bytes (the
    /// kernel's client, which rlun resizes while it runs, is checked
    /// against the export's size now).
    pub fn check_within(&self, r: &Request, size: u64) -> Result<(), u32> {
        use Command::*;
        let has = |f: u16| self.flags & f != 0;
        let supported = match r.command {
            Read | Write | Disc => true,
            Flush => has(tflag::SEND_FLUSH),
            Trim => has(tflag::SEND_TRIM),
            Cache => has(tflag::SEND_CACHE),
            WriteZeroes => has(tflag::SEND_WRITE_ZEROES),
            BlockStatus => self.negotiated.structured && self.negotiated.allocation.is_some(),
            Unknown(_) => false,
        };
        if !supported {
            return Err(err::EINVAL);
        }
        if r.command == Disc {
            return Ok(());
        }
        let mut allowed = r.command.allowed_flags();
        if !has(tflag::SEND_FUA) {
            allowed &= !cflag::FUA;
        }
        if !has(tflag::SEND_DF) {
            allowed &= !cflag::DF;
        }
        if !has(tflag::SEND_FAST_ZERO) {
            allowed &= !cflag::FAST_ZERO;
        }
        if r.flags & !allowed != 0 {
            return Err(err::EINVAL);
        }
        if r.command == Flush {
            return Ok(());
        }
        let writes = matches!(r.command, Write | Trim | WriteZeroes);
        if writes && has(tflag::READ_ONLY) {
            return Err(err::EPERM);
        }
        let len = r.length as u64;
        let end = r.offset.checked_add(len);
        if end.is_none_or(|end| end > size) {
            return Err(if matches!(r.command, Write | WriteZeroes) {
                err::ENOSPC
            } else {
                err::EINVAL
            });
        }
        if matches!(r.command, Read | Write) && r.length > self.block.maximum {
            return Err(err::EINVAL);
        }
        if self.negotiated.block_sizes_agreed {
            let min = self.block.minimum as u64;
            let end_ok = r.command == BlockStatus || len.is_multiple_of(min);
            if !r.offset.is_multiple_of(min) || !end_ok {
                return Err(err::EINVAL);
            }
        }
        Ok(())
    }
}

/// Map a Linux errno to the NBD error the spec asks for: write protection
/// (`EROFS`, `EPERM`, `EACCES`) is `NBD_EPERM`; `EDQUOT`/`EFBIG`/`ENOSPC`
/// are `NBD_ENOSPC`; anything unknown is `NBD_EIO`.
pub fn errno_to_nbd(errno: i32) -> u32 {
    match errno {
        1 | 13 | 30 => err::EPERM,
        22 => err::EINVAL,
        12 => err::ENOMEM,
        27 | 28 | 122 => err::ENOSPC,
        75 => err::EOVERFLOW,
        95 => err::ENOTSUP,
        108 => err::ESHUTDOWN,
        _ => err::EIO,
    }
}

/// A simple reply header; a successful READ's data follows it.
pub fn put_simple_reply(out: &mut BytesMut, cookie: u64, error: u32) {
    out.put_u32(SIMPLE_REPLY_MAGIC);
    out.put_u32(error);
    out.put_u64(cookie);
}

/// A structured reply chunk header for `len` bytes of payload.
pub fn put_chunk_header(out: &mut BytesMut, cookie: u64, flags: u16, kind: u16, len: u32) {
    out.put_u32(STRUCTURED_REPLY_MAGIC);
    out.put_u16(flags);
    out.put_u16(kind);
    out.put_u64(cookie);
    out.put_u32(len);
}

/// The head of an `NBD_REPLY_TYPE_OFFSET_DATA` chunk (header and offset);
/// `data_len` bytes of data follow it.
pub fn put_offset_data_head(
    out: &mut BytesMut,
    cookie: u64,
    done: bool,
    offset: u64,
    data_len: u32,
) {
    let flags = if done { reply::FLAG_DONE } else { 0 };
    put_chunk_header(out, cookie, flags, reply::OFFSET_DATA, data_len + 8);
    out.put_u64(offset);
}

/// The final `NBD_REPLY_TYPE_NONE` chunk.
pub fn put_none_chunk(out: &mut BytesMut, cookie: u64) {
    put_chunk_header(out, cookie, reply::FLAG_DONE, reply::NONE, 0);
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk with a message for humans.
pub fn put_error_chunk(out: &mut BytesMut, cookie: u64, error: u32, message: &str) {
    let msg = truncate_str(message, MAX_STRING);
    put_chunk_header(
        out,
        cookie,
        reply::FLAG_DONE,
        reply::ERROR,
        6 + msg.len() as u32,
    );
    out.put_u32(error);
    out.put_u16(msg.len() as u16);
    out.put_slice(msg.as_bytes());
}

/// An `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: context id, then (length,
/// flags) per extent.
pub fn put_block_status(
    out: &mut BytesMut,
    cookie: u64,
    done: bool,
    context: u32,
    extents: &[(u32, u32)],
) {
    let flags = if done { reply::FLAG_DONE } else { 0 };
    put_chunk_header(
        out,
        cookie,
        flags,
        reply::BLOCK_STATUS,
        4 + 8 * extents.len() as u32,
    );
    out.put_u32(context);
    for &(len, st) in extents {
        out.put_u32(len);
        out.put_u32(st);
    }
}

/// A reply to a request that failed before it ran: an error chunk when
/// structured replies are on (READ must never get a simple reply then),
/// else a simple reply.
pub fn put_error_reply(
    out: &mut BytesMut,
    structured: bool,
    cookie: u64,
    error: u32,
    message: &str,
) {
    if structured {
        put_error_chunk(out, cookie, error, message);
    } else {
        put_simple_reply(out, cookie, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s
            .lines()
            .map(|l| l.split('#').next().unwrap())
            .collect::<String>()
            .split_whitespace()
            .collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn exports() -> Arc<[ExportInfo]> {
        Arc::from(vec![
            ExportInfo {
                name: "lun1".into(),
                description: "LUN 1 of iqn.x:t (1 MiB)".into(),
                size: 1 << 20,
                flags: tflag::SEND_FLUSH
                    | tflag::SEND_FUA
                    | tflag::SEND_TRIM
                    | tflag::CAN_MULTI_CONN,
                block: BlockSizes {
                    minimum: 512,
                    preferred: 4096,
                    maximum: 32 << 20,
                },
            },
            ExportInfo {
                name: "lun2".into(),
                description: "read-only".into(),
                size: 4096,
                flags: tflag::READ_ONLY,
                block: BlockSizes {
                    minimum: 4096,
                    preferred: 4096,
                    maximum: 1 << 20,
                },
            },
        ])
    }

    fn option(opt: u32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.put_u64(IHAVEOPT);
        v.put_u32(opt);
        v.put_u32(data.len() as u32);
        v.put_slice(data);
        v
    }

    /// Start a handshake past the client flags (fixed newstyle, no zeroes).
    fn started(tls: TlsMode) -> Handshake {
        let mut h = Handshake::new(exports(), tls);
        h.take_output();
        let mut b = BytesMut::from(&[0, 0, 0, 3][..]);
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
        h
    }

    /// Split option replies into (option, type, data).
    fn replies(mut b: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        while !b.is_empty() {
            assert_eq!(b.get_u64(), OPT_REPLY_MAGIC);
            let opt = b.get_u32();
            let kind = b.get_u32();
            let len = b.get_u32() as usize;
            v.push((opt, kind, b[..len].to_vec()));
            b.advance(len);
        }
        v
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.put_u32(name.len() as u32);
        d.put_slice(name.as_bytes());
        d.put_u16(infos.len() as u16);
        for i in infos {
            d.put_u16(*i);
        }
        d
    }

    #[test]
    fn greeting_is_nbdmagic_ihaveopt_and_fixed_newstyle_no_zeroes() {
        let mut h = Handshake::new(exports(), TlsMode::Off);
        let expected = hex("4e42444d41474943 # NBDMAGIC
             49484156454f5054 # IHAVEOPT
             0003             # FIXED_NEWSTYLE | NO_ZEROES");
        assert_eq!(&h.take_output()[..], &expected[..]);
    }

    #[test]
    fn unknown_client_flags_close_the_connection() {
        let mut h = Handshake::new(exports(), TlsMode::Off);
        let mut b = BytesMut::from(&hex("00000004 # client flags: unknown bit 2")[..]);
        assert_eq!(
            h.handle_input(&mut b),
            Err(HandshakeError::BadClientFlags(4))
        );
    }

    #[test]
    fn export_name_with_no_zeroes_sends_size_and_flags_only() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::EXPORT_NAME, b"lun1")[..]);
        let ev = h.handle_input(&mut b).unwrap();
        let HandshakeEvent::Transmission(n) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(n.export, 0);
        assert!(!n.structured && !n.block_sizes_agreed);
        let expected = hex("0000000000100000 # size 1 MiB
             012d             # HAS_FLAGS FLUSH FUA TRIM MULTI_CONN");
        assert_eq!(&h.take_output()[..], &expected[..]);
    }

    #[test]
    fn export_name_without_no_zeroes_pads_124_bytes() {
        let mut h = Handshake::new(exports(), TlsMode::Off);
        h.take_output();
        let mut b = BytesMut::from(&[0, 0, 0, 1][..]);
        b.extend_from_slice(&option(opt::EXPORT_NAME, b""));
        assert!(matches!(
            h.handle_input(&mut b),
            Ok(HandshakeEvent::Transmission(_))
        ));
        assert_eq!(h.take_output().len(), 8 + 2 + 124);
    }

    #[test]
    fn export_name_of_unknown_export_is_a_hard_disconnect() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::EXPORT_NAME, b"nope")[..]);
        assert_eq!(
            h.handle_input(&mut b),
            Err(HandshakeError::UnknownExport("nope".into()))
        );
    }

    #[test]
    fn go_replies_export_block_size_and_ack_then_enters_transmission() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::GO, &go_data("lun1", &[info::BLOCK_SIZE]))[..]);
        let ev = h.handle_input(&mut b).unwrap();
        let HandshakeEvent::Transmission(n) = ev else {
            panic!("{ev:?}")
        };
        assert!(n.block_sizes_agreed);
        let out = h.take_output();
        let expected = hex(
            "0003e889045565a9 00000007 00000003 0000000c # reply GO, INFO, 12 bytes
             0000 0000000000100000 012d                  # INFO_EXPORT size flags
             0003e889045565a9 00000007 00000003 0000000e # reply GO, INFO, 14 bytes
             0003 00000200 00001000 02000000             # INFO_BLOCK_SIZE 512 4096 32M
             0003e889045565a9 00000007 00000001 00000000 # reply GO, ACK",
        );
        assert_eq!(&out[..], &expected[..]);
    }

    #[test]
    fn info_with_name_and_description_does_not_end_the_handshake() {
        let mut h = started(TlsMode::Off);
        let data = go_data("", &[info::NAME, info::DESCRIPTION]);
        let mut b = BytesMut::from(&option(opt::INFO, &data)[..]);
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
        let r = replies(&h.take_output());
        let kinds: Vec<_> = r
            .iter()
            .map(|(_, k, d)| (*k, if d.len() >= 2 { d[1] } else { 99 }))
            .collect();
        assert_eq!(
            kinds,
            [
                (rep::INFO, 0),
                (rep::INFO, 1),
                (rep::INFO, 2),
                (rep::INFO, 3),
                (rep::ACK, 99)
            ]
        );
        assert_eq!(&r[1].2[2..], b"lun1", "the default export's canonical name");
        assert_eq!(&r[2].2[2..], b"LUN 1 of iqn.x:t (1 MiB)");
    }

    #[test]
    fn go_for_unknown_export_is_err_unknown_and_negotiation_goes_on() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::GO, &go_data("lun9", &[]))[..]);
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
        let r = replies(&h.take_output());
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].0, r[0].1), (opt::GO, rep::ERR_UNKNOWN));
        assert!(String::from_utf8_lossy(&r[0].2).contains("lun9"));
        b.extend_from_slice(&option(opt::GO, &go_data("lun2", &[])));
        assert!(
            matches!(h.handle_input(&mut b), Ok(HandshakeEvent::Transmission(n)) if n.export == 1)
        );
    }

    #[test]
    fn malformed_go_lengths_are_err_invalid() {
        for data in [
            hex("00000010 6c756e31 0000"),      // name length past the data
            hex("00000004 6c756e31 0002 0003"), // 2 infos announced, 1 sent
            hex("00000004 6c756e31"),           // no info count
        ] {
            let mut h = started(TlsMode::Off);
            let mut b = BytesMut::from(&option(opt::GO, &data)[..]);
            assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
            assert_eq!(replies(&h.take_output())[0].1, rep::ERR_INVALID);
        }
    }

    #[test]
    fn list_sends_one_server_reply_per_export_then_ack() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::LIST, &[])[..]);
        h.handle_input(&mut b).unwrap();
        let r = replies(&h.take_output());
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].1, rep::SERVER);
        assert_eq!(
            &r[0].2,
            &hex("00000004 6c756e31 # len 4, lun1")
                .into_iter()
                .chain(*b"LUN 1 of iqn.x:t (1 MiB)")
                .collect::<Vec<_>>()
        );
        assert_eq!(r[2].1, rep::ACK);
        let mut b = BytesMut::from(&option(opt::LIST, b"x")[..]);
        h.handle_input(&mut b).unwrap();
        assert_eq!(replies(&h.take_output())[0].1, rep::ERR_INVALID);
    }

    #[test]
    fn unknown_option_is_err_unsup_and_abort_is_acked() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(4242, b"junk")[..]);
        b.extend_from_slice(&option(opt::ABORT, &[]));
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::Abort));
        let r = replies(&h.take_output());
        assert_eq!((r[0].0, r[0].1), (4242, rep::ERR_UNSUP));
        assert_eq!((r[1].0, r[1].1), (opt::ABORT, rep::ACK));
    }

    #[test]
    fn oversized_option_is_skipped_and_refused_with_too_big() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::new();
        b.put_u64(IHAVEOPT);
        b.put_u32(opt::GO);
        b.put_u32(MAX_OPTION_LEN + 10);
        b.put_bytes(7, 1000);
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
        assert!(b.is_empty(), "skipped bytes are not buffered");
        b.put_bytes(7, (MAX_OPTION_LEN + 10 - 1000) as usize);
        b.extend_from_slice(&option(opt::STRUCTURED_REPLY, &[]));
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::NeedInput));
        let r = replies(&h.take_output());
        assert_eq!((r[0].0, r[0].1), (opt::GO, rep::ERR_TOO_BIG));
        assert_eq!((r[1].0, r[1].1), (opt::STRUCTURED_REPLY, rep::ACK));
    }

    #[test]
    fn options_split_across_reads_are_reassembled() {
        let mut h = started(TlsMode::Off);
        let all = option(opt::GO, &go_data("lun2", &[]));
        let mut b = BytesMut::new();
        for chunk in all.chunks(5) {
            b.extend_from_slice(chunk);
            let ev = h.handle_input(&mut b).unwrap();
            if b.is_empty() && ev != HandshakeEvent::NeedInput {
                assert!(matches!(ev, HandshakeEvent::Transmission(n) if n.export == 1));
                return;
            }
        }
        panic!("never reached transmission");
    }

    #[test]
    fn structured_reply_and_set_meta_context_select_base_allocation() {
        let mut h = started(TlsMode::Off);
        let mut meta = Vec::new();
        meta.put_u32(4);
        meta.put_slice(b"lun1");
        meta.put_u32(2); // two queries
        meta.put_u32(15);
        meta.put_slice(b"base:allocation");
        meta.put_u32(13);
        meta.put_slice(b"qemu:dirty-bm");
        let mut b = BytesMut::from(&option(opt::SET_META_CONTEXT, &meta)[..]);
        h.handle_input(&mut b).unwrap();
        assert_eq!(
            replies(&h.take_output())[0].1,
            rep::ERR_INVALID,
            "needs structured replies first"
        );
        b.extend_from_slice(&option(opt::STRUCTURED_REPLY, &[]));
        b.extend_from_slice(&option(opt::SET_META_CONTEXT, &meta));
        b.extend_from_slice(&option(opt::GO, &go_data("lun1", &[])));
        let HandshakeEvent::Transmission(n) = h.handle_input(&mut b).unwrap() else {
            panic!()
        };
        assert_eq!(n.allocation, Some(BASE_ALLOCATION_ID));
        assert!(n.structured);
        assert_ne!(n.flags & tflag::SEND_DF, 0);
        let r = replies(&h.take_output());
        assert_eq!(r[0].1, rep::ACK);
        assert_eq!(r[1].1, rep::META_CONTEXT);
        assert_eq!(
            &r[1].2,
            &hex("00000001 626173653a616c6c6f636174696f6e # id 1 base:allocation")
        );
        assert_eq!(r[2].1, rep::ACK);
    }

    #[test]
    fn meta_context_for_another_export_does_not_apply() {
        let mut h = started(TlsMode::Off);
        let mut meta = Vec::new();
        meta.put_u32(4);
        meta.put_slice(b"lun2");
        meta.put_u32(1);
        meta.put_u32(15);
        meta.put_slice(b"base:allocation");
        let mut b = BytesMut::from(&option(opt::STRUCTURED_REPLY, &[])[..]);
        b.extend_from_slice(&option(opt::SET_META_CONTEXT, &meta));
        b.extend_from_slice(&option(opt::GO, &go_data("lun1", &[])));
        let HandshakeEvent::Transmission(n) = h.handle_input(&mut b).unwrap() else {
            panic!()
        };
        assert_eq!(n.allocation, None);
    }

    #[test]
    fn list_meta_context_without_queries_lists_base_allocation() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::STRUCTURED_REPLY, &[])[..]);
        b.extend_from_slice(&option(
            opt::LIST_META_CONTEXT,
            &hex("00000000 00000000 # default export, 0 queries"),
        ));
        h.handle_input(&mut b).unwrap();
        let r = replies(&h.take_output());
        assert_eq!(r[1].1, rep::META_CONTEXT);
        assert_eq!(&r[1].2[4..], BASE_ALLOCATION.as_bytes());
        assert_eq!(r[2].1, rep::ACK);
    }

    #[test]
    fn forced_tls_refuses_options_until_starttls() {
        let mut h = started(TlsMode::Required);
        let mut b = BytesMut::from(&option(opt::LIST, &[])[..]);
        b.extend_from_slice(&option(opt::GO, &go_data("lun1", &[])));
        b.extend_from_slice(&option(opt::STARTTLS, &[]));
        assert_eq!(h.handle_input(&mut b), Ok(HandshakeEvent::StartTls));
        let r = replies(&h.take_output());
        assert_eq!(
            r.iter().map(|x| x.1).collect::<Vec<_>>(),
            [rep::ERR_TLS_REQD, rep::ERR_TLS_REQD, rep::ACK]
        );
        h.tls_started();
        b.extend_from_slice(&option(opt::STARTTLS, &[]));
        b.extend_from_slice(&option(opt::GO, &go_data("lun1", &[])));
        assert!(matches!(
            h.handle_input(&mut b),
            Ok(HandshakeEvent::Transmission(_))
        ));
        let r = replies(&h.take_output());
        assert_eq!(r[0].1, rep::ERR_INVALID, "a second STARTTLS");
    }

    #[test]
    fn forced_tls_export_name_without_tls_disconnects() {
        let mut h = started(TlsMode::Required);
        let mut b = BytesMut::from(&option(opt::EXPORT_NAME, b"lun1")[..]);
        assert_eq!(h.handle_input(&mut b), Err(HandshakeError::TlsRequired));
    }

    #[test]
    fn bytes_after_starttls_before_tls_are_refused() {
        let mut h = started(TlsMode::Required);
        let mut b = BytesMut::from(&option(opt::STARTTLS, &[])[..]);
        b.extend_from_slice(b"\x16\x03\x01");
        assert_eq!(
            h.handle_input(&mut b),
            Err(HandshakeError::DataAfterStartTls)
        );
    }

    #[test]
    fn starttls_without_tls_configured_is_err_policy() {
        let mut h = started(TlsMode::Off);
        let mut b = BytesMut::from(&option(opt::STARTTLS, &[])[..]);
        h.handle_input(&mut b).unwrap();
        assert_eq!(replies(&h.take_output())[0].1, rep::ERR_POLICY);
    }

    #[test]
    fn starttls_forgets_structured_replies() {
        let mut h = started(TlsMode::Required);
        h.tls_started();
        let mut b = BytesMut::from(&option(opt::STRUCTURED_REPLY, &[])[..]);
        b.extend_from_slice(&option(opt::GO, &go_data("lun1", &[])));
        let HandshakeEvent::Transmission(n) = h.handle_input(&mut b).unwrap() else {
            panic!()
        };
        assert!(n.structured);
        let mut h = started(TlsMode::Required);
        h.structured = true; // as if negotiated before STARTTLS
        h.state = HsState::AwaitTls;
        h.tls_started();
        assert!(!h.structured);
    }

    #[test]
    fn non_fixed_client_may_only_send_export_name() {
        let mut h = Handshake::new(exports(), TlsMode::Off);
        let mut b = BytesMut::from(&[0, 0, 0, 0][..]);
        b.extend_from_slice(&option(opt::LIST, &[]));
        assert_eq!(
            h.handle_input(&mut b),
            Err(HandshakeError::NotFixedNewstyle(opt::LIST))
        );
    }

    #[test]
    fn request_header_is_parsed_field_by_field() {
        let wire = hex("25609513         # NBD_REQUEST_MAGIC
             0001             # flags: FUA
             0001             # type: WRITE
             0102030405060708 # cookie
             0000000000001000 # offset 4096
             00000200         # length 512");
        assert_eq!(parse_request(&wire[..27]), Ok(None));
        let r = parse_request(&wire).unwrap().unwrap();
        assert_eq!(
            r,
            Request {
                flags: cflag::FUA,
                command: Command::Write,
                cookie: 0x0102030405060708,
                offset: 4096,
                length: 512
            }
        );
        let mut bad = wire.clone();
        bad[0] = 0x12;
        assert_eq!(parse_request(&bad), Err(RequestError::BadMagic(0x12609513)));
    }

    fn tx(agreed: bool, ro: bool) -> Transmission {
        let e = &exports()[0];
        let mut flags = e.flags | tflag::HAS_FLAGS | tflag::SEND_WRITE_ZEROES | tflag::SEND_CACHE;
        if ro {
            flags |= tflag::READ_ONLY;
        }
        Transmission {
            size: e.size,
            flags,
            block: e.block,
            negotiated: Negotiated {
                export: 0,
                structured: false,
                allocation: None,
                block_sizes_agreed: agreed,
                flags,
            },
        }
    }

    fn req(command: Command, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            command,
            cookie: 1,
            offset,
            length,
        }
    }

    #[test]
    fn requests_are_checked_with_the_errors_the_spec_names() {
        let t = tx(true, false);
        assert_eq!(t.check(&req(Command::Read, 0, 0, 4096)), Ok(()));
        assert_eq!(
            t.check(&req(Command::Read, 0, (1 << 20) - 512, 1024)),
            Err(err::EINVAL),
            "read past the end"
        );
        assert_eq!(
            t.check(&req(Command::Write, 0, (1 << 20) - 512, 1024)),
            Err(err::ENOSPC),
            "write past the end"
        );
        assert_eq!(
            t.check(&req(Command::WriteZeroes, 0, u64::MAX, 1)),
            Err(err::ENOSPC),
            "offset overflow"
        );
        assert_eq!(
            t.check(&req(Command::Trim, 0, 1 << 20, 1)),
            Err(err::EINVAL)
        );
        assert_eq!(
            t.check(&req(Command::Read, 0, 1, 512)),
            Err(err::EINVAL),
            "unaligned when agreed"
        );
        assert_eq!(
            tx(false, false).check(&req(Command::Read, 0, 1, 511)),
            Ok(()),
            "not agreed: served"
        );
        assert_eq!(
            t.check(&req(Command::Read, cflag::DF, 0, 512)),
            Err(err::EINVAL),
            "DF not negotiated"
        );
        assert_eq!(
            t.check(&req(Command::Write, cflag::NO_HOLE, 0, 512)),
            Err(err::EINVAL)
        );
        assert_eq!(
            t.check(&req(
                Command::WriteZeroes,
                cflag::NO_HOLE | cflag::FUA,
                0,
                512
            )),
            Ok(())
        );
        assert_eq!(
            t.check(&req(Command::WriteZeroes, cflag::FAST_ZERO, 0, 512)),
            Err(err::EINVAL),
            "not advertised"
        );
        assert_eq!(
            t.check(&req(Command::BlockStatus, 0, 0, 512)),
            Err(err::EINVAL),
            "no context selected"
        );
        assert_eq!(
            t.check(&req(Command::Unknown(99), 0, 0, 0)),
            Err(err::EINVAL)
        );
        assert_eq!(t.check(&req(Command::Flush, 0, 0, 0)), Ok(()));
        assert_eq!(t.check(&req(Command::Disc, 0xffff, 0, 0)), Ok(()));
        assert_eq!(
            tx(true, true).check(&req(Command::Write, 0, 0, 512)),
            Err(err::EPERM)
        );
        assert_eq!(
            tx(true, true).check(&req(Command::Trim, 0, 0, 512)),
            Err(err::EPERM)
        );
        assert_eq!(tx(true, true).check(&req(Command::Read, 0, 0, 512)), Ok(()));
        assert_eq!(
            t.check(&req(Command::Read, 0, 0, (32 << 20) + 512)),
            Err(err::EINVAL),
            "over max payload"
        );
    }

    #[test]
    fn replies_are_encoded_as_the_spec_lays_them_out() {
        let mut b = BytesMut::new();
        put_simple_reply(&mut b, 7, err::EIO);
        assert_eq!(
            &b[..],
            &hex("67446698 00000005 0000000000000007 # magic EIO cookie")[..]
        );
        b.clear();
        put_offset_data_head(&mut b, 7, true, 4096, 512);
        assert_eq!(
            &b[..],
            &hex("668e33ef 0001 0001 0000000000000007 00000208 # magic DONE OFFSET_DATA cookie len 520
                  0000000000001000                            # offset")[..]
        );
        b.clear();
        put_error_chunk(&mut b, 7, err::ENOSPC, "full");
        assert_eq!(
            &b[..],
            &hex(
                "668e33ef 0001 8001 0000000000000007 0000000a # DONE ERROR len 10
                  0000001c 0004 66756c6c                      # ENOSPC, 4 bytes: full"
            )[..]
        );
        b.clear();
        put_block_status(
            &mut b,
            7,
            true,
            1,
            &[(4096, 0), (512, state::HOLE | state::ZERO)],
        );
        assert_eq!(
            &b[..],
            &hex(
                "668e33ef 0001 0005 0000000000000007 00000014 # DONE BLOCK_STATUS len 20
                  00000001                                    # context 1
                  00001000 00000000 00000200 00000003         # extents"
            )[..]
        );
        b.clear();
        put_none_chunk(&mut b, 7);
        assert_eq!(
            &b[..],
            &hex("668e33ef 0001 0000 0000000000000007 00000000")[..]
        );
    }

    #[test]
    fn errno_mapping_covers_write_protect_and_space() {
        assert_eq!(errno_to_nbd(30), err::EPERM); // EROFS
        assert_eq!(errno_to_nbd(28), err::ENOSPC);
        assert_eq!(errno_to_nbd(122), err::ENOSPC); // EDQUOT
        assert_eq!(errno_to_nbd(22), err::EINVAL);
        assert_eq!(errno_to_nbd(6), err::EIO); // ENXIO
        assert_eq!(errno_to_nbd(84), err::EIO); // EILSEQ
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_handshake(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16), tls in any::<bool>()) {
            let mut h = Handshake::new(exports(), if tls { TlsMode::Required } else { TlsMode::Off });
            let mut b = BytesMut::new();
            for c in chunks {
                b.extend_from_slice(&c);
                match h.handle_input(&mut b) {
                    Ok(HandshakeEvent::NeedInput) => {}
                    Ok(HandshakeEvent::StartTls) => h.tls_started(),
                    _ => break,
                }
                h.take_output();
            }
        }

        #[test]
        fn valid_prefix_then_random_options_never_panic(ops in proptest::collection::vec((0u32..12, proptest::collection::vec(any::<u8>(), 0..40)), 0..10)) {
            let mut h = started(TlsMode::Off);
            let mut b = BytesMut::new();
            for (o, d) in ops {
                b.extend_from_slice(&option(o, &d));
                match h.handle_input(&mut b) {
                    Ok(HandshakeEvent::NeedInput) => {}
                    _ => break,
                }
            }
        }

        #[test]
        fn random_requests_never_panic_the_checks(bytes in proptest::collection::vec(any::<u8>(), 0..40), agreed in any::<bool>()) {
            let mut b = bytes.clone();
            if b.len() >= 4 { b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes()); }
            if let Ok(Some(r)) = parse_request(&b) {
                let _ = tx(agreed, false).check(&r);
            }
        }
    }
}
