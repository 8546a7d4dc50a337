//! rlun-iscsi: a sans-IO iSCSI (RFC 7143) and SCSI (SPC-5, SBC-4) core.
#![forbid(unsafe_code)]

pub mod error;
pub mod iobuf;
pub mod proto;
pub mod scsi;
pub mod secret;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

pub use error::{error_chain, ErrorKind};
