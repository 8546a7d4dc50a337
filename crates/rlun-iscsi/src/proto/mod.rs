//! The sans-IO iSCSI core (RFC 7143; iSER data movement, RFC 7145).
//! Nothing in here reads a socket or a clock: callers feed PDUs and
//! `Instant`s in and take PDUs to send and events out.
//!
//! Bottom up — a module uses only those below it, and [`pdu`], [`text`],
//! [`idmap`] and [`digest`] none of each other:
//!
//! - [`pdu`], [`text`], [`idmap`], [`digest`]: the PDU codec, text keys,
//!   id tables and CRC32C digests;
//! - [`chap`]: CHAP authentication;
//! - [`negotiate`]: the key table and operational negotiation;
//! - [`connection`]: one connection's full feature phase;
//! - [`login`]: the login phase, whose result starts a
//!   [`connection::Connection`];
//! - [`recovery`]: what outlives one connection (kept commands, timeouts,
//!   reconnect, logout).

pub mod chap;
pub mod connection;
pub mod digest;
pub mod idmap;
pub mod login;
pub mod negotiate;
pub mod pdu;
pub mod recovery;
pub mod text;
