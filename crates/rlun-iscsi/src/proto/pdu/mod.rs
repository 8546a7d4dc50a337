//! iSCSI PDU codec (RFC 7143 §11).
//!
//! Every PDU starts with a 48-byte Basic Header Segment (BHS, §11.2.1),
//! optionally followed by Additional Header Segments (AHS, §11.2.2), an
//! optional header digest, a data segment padded to a multiple of 4 bytes and
//! an optional data digest (§11.2.3–§11.2.4). This module maps the BHS to a
//! typed form per opcode and back, checks a frame for completeness cheaply
//! before it is parsed ([`frame_length`]), and verifies digests on decode.
//!
//! Nothing here does I/O. Decoding takes an owned [`Bytes`](bytes::Bytes)
//! frame and hands out the data segment as a zero-copy slice of it; encoding
//! produces a [`WireFrame`] whose three parts (header, data, padding+digest)
//! are meant for one vectored write, so data is never copied into a send
//! buffer.
//!
//! The files, bottom up:
//!
//! - `bhs.rs`: the typed Basic Header Segment, one struct per opcode
//!   ([`Bhs`], [`Opcode`], [`Stage`], [`TaskAttr`], the function, reason and
//!   event codes), the limits of the wire format and [`PduError`];
//! - `codec.rs`: each opcode's wire layout, [`Bhs::encode`] and
//!   [`Bhs::decode`] (§11.3–§11.19);
//! - `frame.rs`: whole PDUs ([`Pdu`]), framing of received bytes
//!   ([`frame_length`], [`header_lengths`], [`decode`]), digests (§11.2.3,
//!   §11.2.4) and the encoded form ([`WireFrame`], [`FrameHead`]).

mod bhs;
mod codec;
mod frame;

pub use bhs::{
    async_event, logout_reason, tmf, AsyncMessage, Bhs, DataIn, DataOut, LoginRequest,
    LoginResponse, LogoutRequest, LogoutResponse, NopIn, NopOut, Opcode, PduError, R2t, Reject,
    Residual, ScsiCommand, ScsiResponse, Snack, Stage, TaskAttr, TaskMgmtRequest, TaskMgmtResponse,
    TextRequest, TextResponse, BHS_LEN, MAX_DATA_SEGMENT, RESERVED_TAG,
};
pub use frame::{
    check_data_digest, decode, decode_header, decode_measured_header, frame_length, header_lengths,
    pad_len, Digests, FrameHead, FrameLimits, Pdu, WireFrame,
};
