//! The sans-IO RFC 7143 core. Nothing in here reads a socket or a clock:
//! callers feed bytes/PDUs and `Instant`s in and take PDUs to send out.

pub mod chap;
pub mod connection;
pub mod digest;
pub mod idmap;
pub mod login;
pub mod negotiate;
pub mod pdu;
pub mod recovery;
pub mod text;
